// Paged KV caches: PagedKVView offsets, PagePool bookkeeping, token-granular eviction
// bit-identical to the contiguous Cache with shared_heads, page-granular eviction on a hand-computed
// example, several sequences sharing one pool, and every error leaving the state unchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvevict::EvictUnit;
using kvevict::kNoPage;
using kvevict::PageLayout;
using kvevict::PagePool;
using kvevict::PagedKVView;
using kvevict::Policy;

/// The K/V page storage of one layer (both pools), shared by the sequences of a test.
struct Storage {
  std::size_t num_pages, page_size, n_kv, d;
  PageLayout layout;
  std::vector<float> k, v;
  Storage(std::size_t pages, std::size_t ps, std::size_t nkv, std::size_t hd, PageLayout lay)
      : num_pages(pages), page_size(ps), n_kv(nkv), d(hd), layout(lay), k(pages * ps * nkv * hd, 0.0f),
        v(k.size(), 0.0f) {}
};

/// One sequence's page table, length and positions.
struct Seq {
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  std::vector<std::int64_t> positions;
  PagedKVView<float> view;
  Seq(Storage& st, std::size_t max_pages) : table(max_pages, kNoPage), positions(max_pages * st.page_size, 0) {
    view.k = st.k.data();
    view.v = st.v.data();
    view.num_pages = st.num_pages;
    view.page_size = st.page_size;
    view.n_kv_heads = st.n_kv;
    view.head_dim = st.d;
    view.layout = st.layout;
    view.page_table = table.data();
    view.max_pages = max_pages;
    view.length = &length;
    view.positions = positions.data();
  }
  Seq(const Seq&) = delete;
};

void append_paged(PagePool& pool, const PagedKVView<float>& view, std::int64_t p) {
  std::vector<float> k(view.n_kv_heads * view.head_dim), v(k.size());
  for (std::size_t h = 0; h < view.n_kv_heads; ++h)
    for (std::size_t i = 0; i < view.head_dim; ++i) {
      k[h * view.head_dim + i] = kvtest::k_value(p, h, i);
      v[h * view.head_dim + i] = -kvtest::k_value(p, h, i);
    }
  pool.append(view, p, k.data(), v.data());
}

/// Every live slot's K and V rows still belong to its position ID.
::testing::AssertionResult paged_rows_aligned(const PagedKVView<float>& view) {
  for (std::size_t s = 0; s < *view.length; ++s)
    for (std::size_t h = 0; h < view.n_kv_heads; ++h)
      for (std::size_t i = 0; i < view.head_dim; ++i) {
        const float want = kvtest::k_value(view.positions[s], h, i);
        if (view.k_row(h, s)[i] != want || view.v_row(h, s)[i] != -want)
          return ::testing::AssertionFailure() << "slot " << s << " head " << h << " elem " << i;
      }
  return ::testing::AssertionSuccess();
}

// Deterministic logit of (step, query head, position), -inf for ~5 % (masked).
float logit_of(std::uint64_t step, std::uint64_t h, std::int64_t pos) {
  kvevict::Xoshiro256pp g(((step * 1000003u + h) * 1000033u + static_cast<std::uint64_t>(pos)) * 31u + 7u);
  const float u = static_cast<float>(g() >> 40) / 16777216.0f;
  if (u < 0.05f) return -std::numeric_limits<float>::infinity();
  return 6.0f * static_cast<float>(g() >> 40) / 16777216.0f - 3.0f;
}

kvevict::CacheConfig shared_config(std::size_t n_q, std::size_t k, std::size_t w) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.shared_heads = true;
  c.seed = 1234;
  return c;
}

kvevict::PolicyParams params_for(std::size_t horizon) {
  kvevict::PolicyParams p;
  p.horizon = horizon;
  p.sinks = 3;
  p.snap_window = 8;  // SnapKV: L <= k in these tests
  p.snap_kernel = 5;
  return p;
}

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

// ---- token unit == contiguous Cache with shared_heads, bit for bit ----------------------------

struct EquivalenceCase {
  Policy policy;
  PageLayout layout;
  std::size_t page_size;
  kvevict::SnapDecode snap_decode = kvevict::SnapDecode::h2o;
};

void run_equivalence(const EquivalenceCase& c) {
  const std::size_t nkv = 2, g = 2, nq = nkv * g, d = 4, P = 37, k = 17, steps = 70;
  const std::size_t w = kvevict::takes_recent_window(c.policy) ? 5 : 0;
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
  EXPECT_THROW(kvevict::make_paged_cache(Policy::tova, cfg, token, s.view, pool), std::invalid_argument);
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
