// tests/paged_eviction_test.cpp — eviction on paged KV caches: the token unit bit-identical to the contiguous
// Cache with shared_heads for every policy (pages freed as they empty, 16-bit rows moved whole), and the page
// unit on a hand-computed example, its ties and its budget rule.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "paged_test_util.hpp"
#include "test_util.hpp"

namespace {

using kvevict::EvictUnit;
using kvevict::kNoPage;
using kvevict::PageLayout;
using kvevict::PagePool;
using kvevict::PagedKVView;
using kvevict::Policy;
using paged_test::append_paged;
using paged_test::logit_of;
using paged_test::paged_rows_aligned;
using paged_test::params_for;
using paged_test::Seq;
using paged_test::shared_config;
using paged_test::Storage;

// ---- token unit == contiguous Cache with shared_heads, bit for bit ----------------------------

struct EquivalenceCase {
  Policy policy;
  PageLayout layout;
  std::size_t page_size;
  kvevict::SnapDecode snap_decode = kvevict::SnapDecode::h2o;
};

void run_equivalence(const EquivalenceCase& c) {
  const std::size_t nkv = 2, g = 2, nq = nkv * g, d = 4, P = 37, k = 17, steps = 70;
  const std::size_t w = kvevict::accepts_recent_window(c.policy) ? 5 : 0;  // TOVA too
  const std::size_t cap = P + steps;
  SCOPED_TRACE(std::string(kvevict::policy_name(c.policy)) + " " + kvevict::page_layout_name(c.layout) +
               " page_size " + std::to_string(c.page_size));
  kvevict::KVBuffer<float> buf(nkv, cap, d);
  const auto kv = buf.view();
  const auto cfg = shared_config(nq, k, w);
  auto params = params_for(steps);
  params.snap_decode = c.snap_decode;
  auto ref = kvevict::make_cache(c.policy, cfg, kv, params);

  const std::size_t max_pages = (cap + c.page_size - 1) / c.page_size;
  Storage st(max_pages + 3, c.page_size, nkv, d, c.layout);
  PagePool pool(st.num_pages);
  Seq s(st, max_pages);
  auto paged = kvevict::make_paged_cache(c.policy, cfg, kvevict::PagedEvictionConfig{}, s.view, pool, params);

  auto compare = [&](const char* when) {
    SCOPED_TRACE(when);
    const std::size_t n = kv.length(0);
    ASSERT_EQ(s.length, n);
    ASSERT_EQ(paged->length(1), n);
    for (std::size_t h = 0; h < nkv; ++h) {
      ASSERT_EQ(std::memcmp(kv.head_positions(h), s.positions.data(), n * sizeof(std::int64_t)), 0) << "head " << h;
      ASSERT_EQ(std::memcmp(ref->scores(h), paged->scores(h), n * sizeof(float)), 0) << "scores of head " << h;
      for (std::size_t slot = 0; slot < n; ++slot)
        ASSERT_EQ(std::memcmp(kv.k_row(h, slot), s.view.k_row(h, slot), d * sizeof(float)), 0);
    }
    ASSERT_TRUE(paged_rows_aligned(s.view));
    ASSERT_EQ(pool.used_pages(), (n + c.page_size - 1) / c.page_size);
    ASSERT_EQ(paged->pages_in_use(), pool.used_pages());
  };

  for (std::size_t p = 0; p < P; ++p) {
    kvtest::append_token(kv, static_cast<std::int64_t>(p));
    append_paged(pool, s.view, static_cast<std::int64_t>(p));
  }
  const auto x = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t col) {
    return logit_of(r, h, static_cast<std::int64_t>(col));
  });
  ref->prefill(x.data(), P);
  paged->prefill(x.data(), P);
  compare("prefill");
  std::vector<float> row(nq * cap);
  for (std::size_t t = 0; t < steps; ++t) {
    const auto pos = static_cast<std::int64_t>(P + t);
    kvtest::append_token(kv, pos);
    append_paged(pool, s.view, pos);
    const std::size_t n = kv.length(0);
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t slot = 0; slot < n; ++slot) row[h * n + slot] = logit_of(1000 + t, h, kv.head_positions(0)[slot]);
    ref->decode_step(row.data(), n);
    paged->decode_step(row.data(), n);
    compare("decode");
  }
  EXPECT_EQ(paged->retained_positions(0), ref->retained_positions(0));
  EXPECT_GT(paged->pages_freed(), 0u);
  ref->restore_position_order();
  paged->restore_position_order();
  compare("restore_position_order");
  // Both keep working after the reorder, also one made between append and decode_step (the
  // pending slot stays where it is).
  kvtest::append_token(kv, static_cast<std::int64_t>(P + steps));
  append_paged(pool, s.view, static_cast<std::int64_t>(P + steps));
  ref->restore_position_order();
  paged->restore_position_order();
  const std::size_t n = kv.length(0);
  for (std::size_t h = 0; h < nq; ++h)
    for (std::size_t slot = 0; slot < n; ++slot) row[h * n + slot] = logit_of(5000, h, kv.head_positions(0)[slot]);
  ref->decode_step(row.data(), n);
  paged->decode_step(row.data(), n);
  compare("decode after reorder");
  paged->reset(0);
  EXPECT_EQ(pool.used_pages(), 0u);
  EXPECT_EQ(s.length, 0u);
}

TEST(PagedTokenUnit, EqualsContiguousSharedHeadsBitForBitForEveryPolicy) {
  for (Policy p : {Policy::keyformer, Policy::h2o, Policy::streaming_llm, Policy::window, Policy::tova, Policy::snapkv})
    for (PageLayout lay : {PageLayout::NHD, PageLayout::HND})
      for (std::size_t ps : {std::size_t{1}, std::size_t{4}, std::size_t{16}}) run_equivalence({p, lay, ps});
  for (std::size_t ps : {std::size_t{1}, std::size_t{4}})
    run_equivalence({Policy::snapkv, PageLayout::NHD, ps, kvevict::SnapDecode::window});
}

TEST(PagedTokenUnit, EvictionFreesTheEmptiedLastPageAtOnce) {
  // window policy, k = 4, page size 2: prefill 4 tokens (pages A, B), each decode step appends
  // then evicts one, so every second step the new page empties again and goes back.
  Storage st(4, 2, 1, 2, PageLayout::NHD);
  PagePool pool(4);
  Seq s(st, 4);
  auto cache = kvevict::make_paged_cache(Policy::window, shared_config(1, 4, 0), kvevict::PagedEvictionConfig{},
                                         s.view, pool);
  for (std::int64_t p = 0; p < 4; ++p) append_paged(pool, s.view, p);
  cache->prefill(nullptr, 4);
  append_paged(pool, s.view, 4);  // takes page 2
  EXPECT_EQ(s.table[2], 2);
  cache->decode_step(nullptr, 5);  // slot 4 moves into slot 0 (position 0 evicted), page 2 freed
  EXPECT_EQ(s.table, (std::vector<std::int32_t>{0, 1, kNoPage, kNoPage}));
  EXPECT_EQ(s.positions[0], 4);
  EXPECT_EQ(pool.used_pages(), 2u);
  EXPECT_EQ(cache->pages_freed(), 1u);
  EXPECT_TRUE(paged_rows_aligned(s.view));
}

TEST(PagedTokenUnit, AFreedPageReusedByAnotherSequenceIsUnreachableFromTheFirst) {
  Storage st(4, 2, 1, 2, PageLayout::HND);
  PagePool pool(4);
  Seq a(st, 4), b(st, 4);
  auto ca = kvevict::make_paged_cache(Policy::window, shared_config(1, 4, 0), kvevict::PagedEvictionConfig{},
                                      a.view, pool);
  for (std::int64_t p = 0; p < 4; ++p) append_paged(pool, a.view, p);
  ca->prefill(nullptr, 4);
  append_paged(pool, a.view, 4);
  const std::int32_t given_up = a.table[2];
  ca->decode_step(nullptr, 5);  // a gives up its third page
  append_paged(pool, b.view, 100);  // b gets it back (LIFO)
  EXPECT_EQ(b.table[0], given_up);
  for (std::size_t i = 0; i < a.view.pages_used(); ++i) EXPECT_NE(a.table[i], given_up);
  EXPECT_EQ(a.table[2], kNoPage);  // the stale entry was cleared, not left pointing at b's page
  // a's next token takes a fresh page; b's K row is untouched.
  append_paged(pool, a.view, 5);
  EXPECT_NE(a.table[2], given_up);
  EXPECT_TRUE(paged_rows_aligned(a.view));
  EXPECT_TRUE(paged_rows_aligned(b.view));
}

TEST(PagedTokenUnit, SixteenBitPagesMoveWholeRows) {
  // Eigen::half and bfloat16 pages: the same eviction as float, rows moved bit for bit.
  auto run = [](auto zero) {
    using T = decltype(zero);
    const std::size_t nkv = 2, d = 3, ps = 2, pages = 6;
    std::vector<T> k(pages * ps * nkv * d), v(k.size());
    std::vector<std::int32_t> table(pages, kNoPage);
    std::vector<std::int64_t> positions(pages * ps);
    std::size_t length = 0;
    PagedKVView<T> view{k.data(), v.data(), pages, ps, nkv, d, PageLayout::HND, table.data(), pages, &length,
                        positions.data()};
    PagePool pool(pages);
    auto cache = kvevict::make_paged_cache(Policy::window, shared_config(2, 3, 0), kvevict::PagedEvictionConfig{},
                                           view, pool);
    std::vector<T> kr(nkv * d), vr(nkv * d);
    auto append = [&](std::int64_t p) {
      for (std::size_t i = 0; i < kr.size(); ++i) {
        kr[i] = T(static_cast<float>(p) + 0.25f * static_cast<float>(i));
        vr[i] = T(-static_cast<float>(p));
      }
      pool.append(view, p, kr.data(), vr.data());
    };
    for (std::int64_t p = 0; p < 5; ++p) append(p);
    cache->prefill(nullptr, 5);  // keeps 2, 3, 4 in slots 0..2; page 2 freed
    append(5);
    cache->decode_step(nullptr, 4);  // evicts position 2 (slot 0) <- slot 3
    EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{3, 4, 5}));
    EXPECT_EQ(pool.used_pages(), 2u);
    for (std::size_t s = 0; s < length; ++s)
      for (std::size_t h = 0; h < nkv; ++h)
        for (std::size_t i = 0; i < d; ++i) {
          const float p = static_cast<float>(positions[s]);
          EXPECT_EQ(static_cast<float>(view.k_row(h, s)[i]), static_cast<float>(T(p + 0.25f * static_cast<float>(h * d + i))));
          EXPECT_EQ(static_cast<float>(view.v_row(h, s)[i]), -p);
        }
  };
  run(Eigen::half(0.0f));
  run(Eigen::bfloat16(0.0f));
}

// ---- page unit ---------------------------------------------------------------------------------

TEST(PagedPageUnit, HandComputedExample) {
  // H2O, page size 4, one head; row r of the prompt attends to exactly one token a(r) (all other
  // logits -inf), so token c's score = number of rows pointing at it:
  //   rows 0..11 -> themselves; rows 12..19 -> 8, 9, 10, 11, 8, 9, 10, 11.
  // Scores: tokens 0..7 = 1, tokens 8..11 = 3, tokens 12..19 = 0. Page sums: [4, 4, 12, 0, 0].
  // k = 12, w = 1, start_pages = 1: P - k = 8 = 2 pages go; middle = pages [1, (20 - 1) / 4 = 4)
  // = {1, 2, 3}; the two lowest are page 3 (0) and page 1 (4). Kept: pages 0, 2, 4.
  for (kvevict::PageScore ps : {kvevict::PageScore::sum, kvevict::PageScore::mean}) {
    Storage st(8, 4, 1, 2, PageLayout::NHD);
    PagePool pool(8);
    Seq s(st, 8);
    kvevict::PagedEvictionConfig pc;
    pc.unit = EvictUnit::page;
    pc.start_pages = 1;
    pc.page_score = ps;
    auto cache = kvevict::make_paged_cache(Policy::h2o, shared_config(1, 12, 1), pc, s.view, pool);
    for (std::int64_t p = 0; p < 20; ++p) append_paged(pool, s.view, p);
    EXPECT_EQ(s.table, (std::vector<std::int32_t>{0, 1, 2, 3, 4, kNoPage, kNoPage, kNoPage}));
    const float ninf = -std::numeric_limits<float>::infinity();
    const auto x = kvtest::causal_logits(1, 20, [&](std::size_t, std::size_t r, std::size_t c) {
      const std::size_t target = r < 12 ? r : 8 + (r - 12) % 4;
      return c == target ? 0.0f : ninf;
    });
    cache->prefill(x.data(), 20);
    EXPECT_EQ(s.length, 12u);
    EXPECT_EQ(s.table, (std::vector<std::int32_t>{0, 2, 4, kNoPage, kNoPage, kNoPage, kNoPage, kNoPage}));
    EXPECT_EQ(std::vector<std::int64_t>(s.positions.begin(), s.positions.begin() + 12),
              (std::vector<std::int64_t>{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19}));
    EXPECT_EQ(std::vector<float>(cache->scores(0), cache->scores(0) + 12),
              (std::vector<float>{1, 1, 1, 1, 3, 3, 3, 3, 0, 0, 0, 0}));
    EXPECT_EQ(cache->pages_freed(), 2u);
    EXPECT_FALSE(pool.in_use(1));
    EXPECT_FALSE(pool.in_use(3));
    EXPECT_EQ(pool.used_pages(), 3u);
    EXPECT_TRUE(paged_rows_aligned(s.view));  // no K/V byte moved, rows still match positions
    // Decode: each step's query attends only to slot 0. At n = 16 (= k + page size) the middle
    // is pages [1, (16 - 1) / 4 = 3) = {1, 2} with sums 12 and 0: page 2 (positions 16..19) goes.
    std::vector<float> row(32);
    for (std::int64_t p = 20; p < 24; ++p) {
      append_paged(pool, s.view, p);
      const std::size_t n = s.length;
      for (std::size_t i = 0; i < n; ++i) row[i] = i == 0 ? 0.0f : ninf;
      cache->decode_step(row.data(), n);
    }
    EXPECT_EQ(s.length, 12u);
    EXPECT_EQ(std::vector<std::int64_t>(s.positions.begin(), s.positions.begin() + 12),
              (std::vector<std::int64_t>{0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23}));
    EXPECT_EQ(s.table[0], 0);
    EXPECT_EQ(s.table[1], 2);
    EXPECT_EQ(s.table[3], kNoPage);
    EXPECT_FALSE(pool.in_use(4));
    EXPECT_EQ(cache->pages_freed(), 3u);
    EXPECT_EQ(pool.used_pages(), 3u);
    EXPECT_TRUE(paged_rows_aligned(s.view));
  }
}

TEST(PagedPageUnit, TiedPagesAreEvictedOlderFirstOnEveryRun) {
  // Window (no scores): every page ties at 0, so the oldest middle pages go: StreamingLLM by pages.
  for (int run = 0; run < 3; ++run) {
    Storage st(16, 4, 2, 2, PageLayout::HND);
    PagePool pool(16);
    Seq s(st, 16);
    kvevict::PagedEvictionConfig pc;
    pc.unit = EvictUnit::page;
    pc.start_pages = 1;
    auto cache = kvevict::make_paged_cache(Policy::window, shared_config(2, 9, 0), pc, s.view, pool);
    for (std::int64_t p = 0; p < 30; ++p) append_paged(pool, s.view, p);
    cache->prefill(nullptr, 30);  // (30 - 9) / 4 = 5 pages of middle [1, 29 / 4 = 7) go: 1..5
    EXPECT_EQ(s.length, 10u);
    EXPECT_EQ(std::vector<std::int64_t>(s.positions.begin(), s.positions.begin() + 10),
              (std::vector<std::int64_t>{0, 1, 2, 3, 24, 25, 26, 27, 28, 29}));
    EXPECT_EQ(std::vector<std::int32_t>(s.table.begin(), s.table.begin() + 4),
              (std::vector<std::int32_t>{0, 6, 7, kNoPage}));
    EXPECT_TRUE(paged_rows_aligned(s.view));
  }
}

TEST(PagedPageUnit, BudgetTooSmallForTheAreasIsRejectedWithStateUnchanged) {
  Storage st(8, 4, 1, 2, PageLayout::NHD);
  PagePool pool(8);
  Seq s(st, 8);
  kvevict::PagedEvictionConfig pc;
  pc.unit = EvictUnit::page;
  pc.start_pages = 2;
  // A token budget is checked at construction ...
  try {
    kvevict::make_paged_cache(Policy::window, shared_config(1, 8, 0), pc, s.view, pool);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kvevict::PagedCache: page unit needs k >= start_pages * page_size + max(w, 1) (k = 8, "
                 "start_pages = 2, page_size = 4, w = 0)");
  }
  // ... a ratio budget at prefill, once P is known (k = 0.4 * 20 = 8), leaving everything as it was.
  auto cfg = shared_config(1, 8, 0);
  cfg.budget = kvevict::Budget::ratio(0.4);
  auto cache = kvevict::make_paged_cache(Policy::window, cfg, pc, s.view, pool);
  for (std::int64_t p = 0; p < 20; ++p) append_paged(pool, s.view, p);
  const auto table = s.table;
  try {
    cache->prefill(nullptr, 20);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kvevict::PagedCache::prefill: page unit needs k >= start_pages * page_size + max(w, 1) (k = 8, "
                 "start_pages = 2, page_size = 4, w = 0)");
  }
  EXPECT_EQ(s.length, 20u);
  EXPECT_EQ(s.table, table);
  EXPECT_EQ(pool.used_pages(), 5u);
  // The sequence's capacity must hold k + page_size tokens (page unit): 2 pages of 4 cannot serve k = 5.
  Seq small(st, 2);
  pc.start_pages = 0;
  EXPECT_THROW(kvevict::make_paged_cache(Policy::window, shared_config(1, 5, 0), pc, small.view, pool),
               std::invalid_argument);
}

}  // namespace
