// tests/paged_test.cpp — paged KV caches: PagedKVView offsets and validation, PagePool bookkeeping (pages in
// order, an empty pool, no page freed twice, engine callbacks), and several sequences sharing one pool.
// Eviction: paged_eviction_test.cpp; errors: paged_errors_test.cpp.
#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

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

// ---- PagedKVView -----------------------------------------------------------------------------

TEST(PagedKVView, OffsetFormulasNHDAndHND) {
  PagedKVView<float> v;
  v.page_size = 4;
  v.n_kv_heads = 2;
  v.head_dim = 8;
  v.layout = PageLayout::NHD;  // ((p * page_size + o) * n_kv_heads + h) * head_dim
  EXPECT_EQ(v.offset(1, 1, 2), 104u);
  EXPECT_EQ(v.offset(0, 0, 0), 0u);
  EXPECT_EQ(v.offset(0, 1, 0), 8u);
  EXPECT_EQ(v.offset(0, 0, 1), 16u);
  v.layout = PageLayout::HND;  // ((p * n_kv_heads + h) * page_size + o) * head_dim
  EXPECT_EQ(v.offset(1, 1, 2), 112u);
  EXPECT_EQ(v.offset(0, 1, 0), 32u);
  EXPECT_EQ(v.offset(0, 0, 1), 8u);
  EXPECT_STREQ(kvevict::page_layout_name(PageLayout::HND), "HND");
}

TEST(PagedKVView, ValidateNamesTheField) {
  Storage st(4, 4, 2, 8, PageLayout::NHD);
  Seq s(st, 2);
  s.view.page_size = 0;
  try {
    s.view.validate();
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagedKVView: page_size must be >= 1 (got 0)");
  }
  s.view.page_size = 4;
  s.length = 9;
  EXPECT_THROW(s.view.validate(), std::invalid_argument);  // capacity 2 * 4 = 8
}

TEST(PagedKVView, ReadmeAggregateInitialisationAndLoop) {
  // docs/paged.md's engine loop, sized down: 4 KV heads, page size 4, budget 6, window policy.
  const std::size_t num_pages = 8, page_size = 4, n_kv = 4, head_dim = 2, max_pages = 4, prompt_len = 9;
  std::vector<float> k_pool(num_pages * page_size * n_kv * head_dim), v_pool(k_pool.size());
  kvevict::PagePool pool(num_pages);
  std::vector<std::int32_t> table(max_pages, kvevict::kNoPage);
  std::vector<std::int64_t> positions(max_pages * page_size);
  std::size_t length = 0;
  kvevict::PagedKVView<float> seq{k_pool.data(), v_pool.data(), num_pages, page_size, n_kv, head_dim,
                                  kvevict::PageLayout::NHD, table.data(), max_pages, &length, positions.data()};
  auto cache = kvevict::make_paged_cache(Policy::window, shared_config(4, 6, 0), kvevict::PagedEvictionConfig{},
                                         seq, pool);
  for (std::int64_t pos = 0; pos < static_cast<std::int64_t>(prompt_len); ++pos) append_paged(pool, seq, pos);
  cache->prefill(nullptr, prompt_len);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(pool.used_pages(), 2u);  // the third page emptied and went back
  for (std::int64_t pos = 9; pos < 20; ++pos) {
    append_paged(pool, seq, pos);
    cache->decode_step(nullptr, length);
    EXPECT_EQ(pool.used_pages(), 2u);
  }
  EXPECT_EQ(cache->retained_positions(3), (std::vector<std::int64_t>{14, 15, 16, 17, 18, 19}));
  EXPECT_TRUE(paged_rows_aligned(seq));
  cache->reset(0);
  EXPECT_EQ(pool.used_pages(), 0u);
}

// ---- PagePool --------------------------------------------------------------------------------

TEST(PagePool, AppendTakesPagesInOrderAndFillsTheLastPage) {
  Storage st(4, 2, 1, 3, PageLayout::NHD);
  PagePool pool(4);
  Seq s(st, 4);
  for (std::int64_t p = 0; p < 5; ++p) append_paged(pool, s.view, p);
  EXPECT_EQ(s.length, 5u);
  EXPECT_EQ(s.table, (std::vector<std::int32_t>{0, 1, 2, kNoPage}));
  EXPECT_EQ(pool.used_pages(), 3u);
  EXPECT_EQ(pool.free_pages(), 1u);
  EXPECT_TRUE(paged_rows_aligned(s.view));
  // Slot 4 = page 2 offset 0: K row at element ((2 * 2 + 0) * 1 + 0) * 3 = 12.
  EXPECT_EQ(st.k[12], kvtest::k_value(4, 0, 0));
}

TEST(PagePool, EmptyPoolThrowsLengthErrorAndChangesNothing) {
  Storage st(2, 2, 1, 2, PageLayout::HND);
  PagePool pool(2);
  Seq s(st, 8);
  for (std::int64_t p = 0; p < 4; ++p) append_paged(pool, s.view, p);
  const std::vector<std::int32_t> table = s.table;
  const std::vector<float> k = st.k;
  try {
    append_paged(pool, s.view, 4);
    FAIL() << "no throw";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagePool::allocate: all 2 pages are in use");
  }
  EXPECT_EQ(s.length, 4u);
  EXPECT_EQ(s.table, table);
  EXPECT_EQ(st.k, k);
  EXPECT_EQ(pool.used_pages(), 2u);
  // A full sequence (max_pages reached) is a length_error as well.
  Storage st2(4, 2, 1, 2, PageLayout::NHD);
  PagePool pool2(4);
  Seq s2(st2, 1);
  append_paged(pool2, s2.view, 0);
  append_paged(pool2, s2.view, 1);
  EXPECT_THROW(append_paged(pool2, s2.view, 2), std::length_error);
  EXPECT_EQ(pool2.used_pages(), 1u);
}

TEST(PagePool, NeverFreesAPageTwice) {
  PagePool pool(5);
  const std::int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(c, 2);
  // A release list naming the same page twice frees it once.
  const std::int32_t list[] = {b, a, b};
  EXPECT_EQ(pool.release_list(list, 3), 2u);
  EXPECT_EQ(pool.used_pages(), 1u);
  EXPECT_EQ(pool.free_pages(), 4u);
  EXPECT_EQ(pool.pages_released(), 2u);
  // Releasing a free page again is an error that changes nothing.
  try {
    pool.release(a);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::PagePool::release: page = 0 is not in use (freed twice?)");
  }
  const std::int32_t bad[] = {c, a};
  EXPECT_THROW(pool.release_list(bad, 2), std::invalid_argument);
  EXPECT_TRUE(pool.in_use(c));  // all-or-nothing: c not freed
  EXPECT_EQ(pool.used_pages(), 1u);
  EXPECT_THROW(pool.release(7), std::invalid_argument);
  EXPECT_THROW(pool.release(-1), std::invalid_argument);
  // LIFO reuse: the last page freed comes back first.
  EXPECT_EQ(pool.allocate(), a);
}

TEST(PagePool, ReleaseSequenceWithAPageListedTwiceFreesItOnce) {
  Storage st(4, 2, 1, 2, PageLayout::NHD);
  PagePool pool(4);
  Seq s(st, 4);
  for (std::int64_t p = 0; p < 6; ++p) append_paged(pool, s.view, p);  // pages 0, 1, 2
  s.table[2] = s.table[0];  // an engine bug: page 0 listed twice; page 2 leaked by the engine
  EXPECT_EQ(pool.release_sequence(s.view), 2u);
  EXPECT_EQ(pool.used_pages(), 1u);  // exact: only page 2 still out
  EXPECT_TRUE(pool.in_use(2));
  EXPECT_EQ(s.length, 0u);
  EXPECT_EQ(s.table, (std::vector<std::int32_t>{kNoPage, kNoPage, kNoPage, kNoPage}));
}

TEST(PagePool, EngineCallbacksSupplyThePages) {
  std::vector<std::int32_t> engine_free = {7, 3};
  std::vector<std::int32_t> returned;
  PagePool pool(
      8,
      [&] {
        if (engine_free.empty()) return kNoPage;
        const std::int32_t p = engine_free.back();
        engine_free.pop_back();
        return p;
      },
      [&](std::int32_t p) noexcept { returned.push_back(p); });  // reserved below: cannot throw
  returned.reserve(8);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 7);
  EXPECT_THROW(pool.allocate(), std::length_error);
  EXPECT_EQ(pool.used_pages(), 2u);
  pool.release(3);
  EXPECT_EQ(returned, (std::vector<std::int32_t>{3}));
  EXPECT_THROW(pool.release(3), std::invalid_argument);
  engine_free = {7};  // a buggy engine hands out a page in use
  EXPECT_THROW(pool.allocate(), std::invalid_argument);
  EXPECT_EQ(pool.used_pages(), 1u);
  EXPECT_THROW(PagePool(4, {}, [](std::int32_t) noexcept {}), std::invalid_argument);
  EXPECT_THROW(PagePool(0), std::invalid_argument);
}

// ---- several sequences share one pool (continuous batching) -----------------------------------

TEST(PagedPool, ThreeInterleavedSequencesNeverLeakOrSharePages) {
  const std::size_t nkv = 2, nq = 4, d = 2, ps = 4;
  Storage st(40, ps, nkv, d, PageLayout::NHD);
  PagePool pool(40);
  struct Run {
    std::unique_ptr<Seq> seq;
    std::unique_ptr<kvevict::PagedCacheInterface> cache;
    std::int64_t next = 0;
    std::size_t prompt = 0, steps_left = 0;
    std::uint64_t id = 0;
  };
  std::vector<Run> runs(3);
  const Policy policies[3] = {Policy::h2o, Policy::window, Policy::keyformer};
  const EvictUnit units[3] = {EvictUnit::token, EvictUnit::page, EvictUnit::token};
  const std::size_t budgets[3] = {11, 13, 20};
  const std::size_t prompts[3] = {23, 9, 41};
  auto start = [&](std::size_t i, std::uint64_t generation) {
    Run& r = runs[i];
    r.seq = std::make_unique<Seq>(st, 16);
    kvevict::PagedEvictionConfig pc;
    pc.unit = units[i];
    pc.start_pages = units[i] == EvictUnit::page ? 1 : 0;
    r.cache = kvevict::make_paged_cache(policies[i], shared_config(nq, budgets[i], policies[i] == Policy::window ? 0 : 3),
                                        pc, r.seq->view, pool,
                                        params_for(100));
    r.prompt = prompts[i] + (generation % 4) * 3;
    r.steps_left = 15 + 7 * i;
    r.id = i * 100 + generation;
    r.next = 0;
    for (std::size_t p = 0; p < r.prompt; ++p) append_paged(pool, r.seq->view, r.next++);
    const auto x = kvtest::causal_logits(nq, r.prompt, [&](std::size_t h, std::size_t row, std::size_t c) {
      return logit_of(r.id * 7 + row, h, static_cast<std::int64_t>(c));
    });
    r.cache->prefill(x.data(), r.prompt);
  };
  auto check_pool = [&](const char* when) {
    std::size_t expected = 0;
    std::set<std::int32_t> owned;
    for (const Run& r : runs) {
      if (!r.seq) continue;
      const std::size_t used = r.seq->view.pages_used();
      expected += used;
      for (std::size_t i = 0; i < used; ++i) {
        const std::int32_t p = r.seq->table[i];
        ASSERT_TRUE(pool.in_use(p)) << when;
        ASSERT_TRUE(owned.insert(p).second) << when << ": page " << p << " owned twice";
      }
      for (std::size_t i = used; i < r.seq->table.size(); ++i) ASSERT_EQ(r.seq->table[i], kNoPage) << when;
      ASSERT_TRUE(paged_rows_aligned(r.seq->view)) << when;
    }
    ASSERT_EQ(pool.used_pages(), expected) << when;
  };
  for (std::size_t i = 0; i < 3; ++i) {
    start(i, 0);
    check_pool("prefill");
  }
  std::vector<float> row(nq * 64);
  std::size_t restarts = 0;
  for (std::size_t tick = 0; tick < 120; ++tick) {
    for (std::size_t i = 0; i < 3; ++i) {
      if (tick % (i + 1) != 0) continue;  // different speeds
      Run& r = runs[i];
      if (r.steps_left == 0) {  // finished: free every page, start a new sequence in the slot
        r.cache->reset(0);
        check_pool("reset");
        r.cache.reset();
        r.seq.reset();
        start(i, ++restarts);
        check_pool("restart");
        continue;
      }
      append_paged(pool, r.seq->view, r.next);
      const std::size_t n = r.seq->length;
      for (std::size_t h = 0; h < nq; ++h)
        for (std::size_t s = 0; s < n; ++s)
          row[h * n + s] = logit_of(r.id * 7 + static_cast<std::uint64_t>(r.next), h, r.seq->positions[s]);
      r.cache->decode_step(row.data(), n);
      ++r.next;
      --r.steps_left;
      check_pool("decode");
    }
  }
  EXPECT_GE(restarts, 3u);
  EXPECT_GT(pool.pages_released(), 20u);
}

}  // namespace
