// tests/paged_errors_test.cpp — paged KV caches on bad settings and input: constructor checks, corrupted page
// tables and NaN logits rejected with the state unchanged, and the decode step that re-admitted a prompt
// position the prefill evicted (found by fuzz_paged_ops).
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "paged_test_util.hpp"
#include "test_util.hpp"

namespace {

using kvevict::EvictUnit;
using kvevict::PageLayout;
using kvevict::PagePool;
using kvevict::Policy;
using paged_test::append_paged;
using paged_test::logit_of;
using paged_test::paged_rows_aligned;
using paged_test::params_for;
using paged_test::Seq;
using paged_test::shared_config;
using paged_test::Storage;

// ---- errors --------------------------------------------------------------------------------------

TEST(PagedCache, ConstructorRejectsBadSettings) {
  Storage st(8, 4, 2, 2, PageLayout::NHD);
  PagePool pool(8), other(9);
  Seq s(st, 4);
  auto cfg = shared_config(4, 8, 2);
  kvevict::PagedEvictionConfig token;
  cfg.shared_heads = false;
  EXPECT_THROW(kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool), std::invalid_argument);
  cfg.shared_heads = true;
  cfg.max_prefill_chunk = 4;  // PagedCache has no chunked prefill: refused, not ignored
  try {
    kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagedCache: config.max_prefill_chunk = 4 is not supported (PagedCache has no "
                           "chunked prefill; set 0)");
  }
  cfg.max_prefill_chunk = 0;
  cfg.bounded_prefill = true;
  try {
    kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagedCache: config.bounded_prefill is not supported (PagedCache has no "
                           "chunked prefill; set false)");
  }
  cfg.bounded_prefill = false;
  token.start_pages = 1;
  try {
    kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kvevict::PagedCache: start_pages = 1 is only meaningful with the page unit (token unit: set 0)");
  }
  token.start_pages = 0;
  token.page_score = kvevict::PageScore::mean;
  EXPECT_THROW(kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool), std::invalid_argument);
  token.page_score = kvevict::PageScore::sum;
  EXPECT_THROW(kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, other), std::invalid_argument);
  cfg.n_q_heads = 3;
  EXPECT_THROW(kvevict::make_paged_cache(Policy::h2o, cfg, token, s.view, pool), std::invalid_argument);
  cfg.n_q_heads = 4;
  EXPECT_NO_THROW(kvevict::make_paged_cache(Policy::tova, cfg, token, s.view, pool));  // TOVA takes a recent window
  EXPECT_EQ(kvevict::parse_evict_unit("page"), EvictUnit::page);
  EXPECT_THROW(kvevict::parse_evict_unit("block"), std::invalid_argument);
}

TEST(PagedCache, BadPageTablesAreRejectedWithStateUnchanged) {
  Storage st(8, 2, 1, 2, PageLayout::NHD);
  PagePool pool(8);
  Seq s(st, 8);
  auto cache = kvevict::make_paged_cache(Policy::window, shared_config(1, 3, 0), kvevict::PagedEvictionConfig{},
                                         s.view, pool);
  for (std::int64_t p = 0; p < 6; ++p) append_paged(pool, s.view, p);  // pages 0, 1, 2
  s.table[2] = 0;  // page 0 listed twice
  try {
    cache->prefill(nullptr, 6);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagedCache::prefill: page_table[2] = 0 is listed twice in the page table");
  }
  EXPECT_EQ(s.length, 6u);
  EXPECT_EQ(pool.used_pages(), 3u);
  s.table[2] = 5;  // not allocated
  EXPECT_THROW(cache->prefill(nullptr, 6), std::invalid_argument);
  s.table[2] = 99;  // outside the pool
  EXPECT_THROW(cache->prefill(nullptr, 6), std::invalid_argument);
  EXPECT_EQ(pool.used_pages(), 3u);
  s.table[2] = 2;
  cache->prefill(nullptr, 6);  // the repaired table works; window keeps positions 3, 4, 5
  EXPECT_EQ(s.length, 3u);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(pool.used_pages(), 2u);
  // Decode with a last page that is not the pool's: rejected, nothing changed.
  append_paged(pool, s.view, 6);
  const std::int32_t good = s.table[1];
  s.table[1] = 6;
  EXPECT_THROW(cache->decode_step(nullptr, 4), std::invalid_argument);
  EXPECT_EQ(s.length, 4u);
  s.table[1] = good;
  cache->decode_step(nullptr, 4);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{4, 5, 6}));
}

TEST(PagedCache, NaNLogitsLeaveScoresAndGeneratorUnchanged) {
  const std::size_t nkv = 2, nq = 4, d = 2, P = 10;
  Storage st(8, 4, nkv, d, PageLayout::NHD);
  PagePool pool(8);
  Seq s(st, 8);
  auto cache = kvevict::make_paged_cache(Policy::keyformer, shared_config(nq, 6, 2), kvevict::PagedEvictionConfig{},
                                         s.view, pool, params_for(10));
  for (std::int64_t p = 0; p < static_cast<std::int64_t>(P); ++p) append_paged(pool, s.view, p);
  const auto x = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t c) {
    return logit_of(r, h, static_cast<std::int64_t>(c));
  });
  cache->prefill(x.data(), P);
  append_paged(pool, s.view, 10);
  const std::vector<float> before(cache->scores(1), cache->scores(1) + 7);
  std::vector<float> row(nq * 7, 0.5f);
  row[3 * 7 + 2] = std::nanf("");
  EXPECT_THROW(cache->decode_step(row.data(), 7), std::invalid_argument);
  EXPECT_EQ(std::vector<float>(cache->scores(1), cache->scores(1) + 7), before);
  EXPECT_EQ(s.length, 7u);
  EXPECT_EQ(cache->step(), 0u);
}

// Found by fuzz_paged_ops (seed fuzz/corpus/paged_ops/finding-decode-readmits-evicted-prompt-position),
// the paged twin of CacheFuzzFindings.DecodeStepRejectsAPromptPositionThatPrefillEvicted: with w = 0
// the prefill may evict the newest prompt token; PagedCache then took the newest *kept* position as
// "the last one" and a decode step re-admitted the evicted position (one position ID twice in a
// sequence). Fixed when main's merge of the fuzz work made prefill remember the whole prompt's last.
TEST(PagedFuzzFindings, DecodeStepRejectsAPromptPositionThatPrefillEvicted) {
  Storage st(4, 2, 1, 2, PageLayout::NHD);
  PagePool pool(4);
  Seq s(st, 4);
  auto cache = kvevict::make_paged_cache(Policy::h2o, shared_config(1, 1, 0), kvevict::PagedEvictionConfig{},
                                         s.view, pool);
  append_paged(pool, s.view, 0);
  append_paged(pool, s.view, 1);
  // [q_head][P][P] rows {0, unread} and {0, -inf}: scores [2, 0], so k = 1 keeps position 0, evicts 1.
  const float x[] = {0.0f, 0.0f, 0.0f, -std::numeric_limits<float>::infinity()};
  cache->prefill(x, 2);
  ASSERT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(pool.used_pages(), 1u);

  append_paged(pool, s.view, 1);  // position 1 again, into slot 1 of page 0
  const float row[] = {0.0f, 0.0f};
  try {
    cache->decode_step(row, 2);
    FAIL() << "re-admitted position 1";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagedCache::decode_step: new token's position 1 must be larger than the last one, 1");
  }
  EXPECT_EQ(cache->step(), 0u);
  EXPECT_EQ(cache->scores(0)[0], 2.0f);
  EXPECT_EQ(s.length, 2u);
  EXPECT_EQ(pool.used_pages(), 1u);

  // A fresh sequence: position 2 after the same prompt is accepted; scores [2.5, 0.5], the new token goes.
  cache->reset(1234);
  EXPECT_EQ(pool.used_pages(), 0u);
  append_paged(pool, s.view, 0);
  append_paged(pool, s.view, 1);
  cache->prefill(x, 2);
  append_paged(pool, s.view, 2);
  cache->decode_step(row, 2);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(s.length, 1u);
  EXPECT_TRUE(paged_rows_aligned(s.view));
}

}  // namespace
