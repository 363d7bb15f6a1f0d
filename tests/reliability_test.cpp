// Faults an independent attack found in the paged pools, chunked prefill, helpers, executors and
// moved-from caches: each input pinned with the exact message or value, plus reference comparisons
// of the floor pass of layer_budgets and of the page unit's page choice on random inputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>
#include <kvevict/layer_budgets.hpp>

#include "test_util.hpp"

namespace {

using kvevict::kNoPage;
using kvevict::PagedKVView;
using kvevict::PagePool;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

kvevict::CacheConfig config(std::size_t n_q, std::size_t k, std::size_t w, bool shared = false) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.shared_heads = shared;
  c.seed = 99;
  return c;
}

// A deterministic logit in [-3, 3) of (row, query head, column).
float logit_of(std::uint64_t row, std::uint64_t h, std::uint64_t col) {
  kvevict::Xoshiro256pp g((row * 1000003u + h) * 1000033u + col * 31u + 7u);
  return 6.0f * static_cast<float>(g() >> 40) / 16777216.0f - 3.0f;
}

std::vector<std::uint32_t> bits_of(const float* x, std::size_t n) {
  std::vector<std::uint32_t> b(n);
  if (n != 0) std::memcpy(b.data(), x, n * sizeof(float));
  return b;
}

// ---- 1. every entry point that reads a view checks lengths[h] <= capacity ------------------------

TEST(ViewLengths, PrefillChunkAndStepRejectALengthAboveTheCapacity) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 4, 1), kv);
  for (int t = 0; t < 8; ++t) kvtest::append_token(kv, t);
  const auto x = kvtest::causal_logits(1, 12, [](std::size_t, std::size_t r, std::size_t c) {
    return logit_of(r, 0, c);
  });
  kv.lengths[0] = 12;  // the engine's length, past the 8 slots of storage
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 12); }),
            "kvevict::Cache::prefill: the view's lengths[0] = 12 exceeds its capacity 8");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x.data(), 12, 12); }),
            "kvevict::Cache::prefill_chunk: the view's lengths[0] = 12 exceeds its capacity 8");
  EXPECT_EQ(message_of([&] { cache.restore_position_order(); }),
            "kvevict::Cache::restore_position_order: the view's lengths[0] = 12 exceeds its capacity 8");
  std::vector<float> q(12 * 1 * 2, 0.5f);
  kvevict::QKChunkScratch scratch(16, 2);
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(cache, kv, q.data(), 12, 1, 1.0f, scratch); }),
            "kvevict::KVView: lengths[0] = 12 exceeds capacity 8");
  // Nothing changed: the cache prefills the real 3-token prompt, then refuses a step past capacity.
  kv.lengths[0] = 3;
  const auto x3 = kvtest::causal_logits(1, 3, [](std::size_t, std::size_t r, std::size_t c) {
    return logit_of(r, 0, c);
  });
  cache.prefill(x3.data(), 3);
  EXPECT_EQ(cache.length(0), 3u);
  kv.lengths[0] = 12;
  std::vector<float> row(12, 0.0f);
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 4); }),
            "kvevict::Cache::decode_step: the view's lengths[0] = 12 exceeds its capacity 8");
  kv.lengths[0] = 3;
  kvtest::append_token(kv, 3);
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 4); }), "no exception");
}

// ---- 2. the page pool's release callback must not throw ------------------------------------------

TEST(PagePoolReleaseDeathTest, AThrowingReleaseEndsTheProgramInsteadOfWedgingTheSequence) {
  // A std::function cannot declare noexcept, so the pool calls it from a noexcept function.
  const auto run = [] {
    std::int32_t next = 0;
    PagePool pool(
        4, [&] { return next < 4 ? next++ : kNoPage; },
        PagePool::ReleaseFn([](std::int32_t) { throw std::runtime_error("engine release failed"); }));
    const std::int32_t page = pool.allocate();
    pool.release(page);
  };
  EXPECT_DEATH(run(), "");
}

TEST(PagePoolRelease, ANoexceptReleaseSeesEveryPageOnce) {
  std::vector<std::int32_t> engine_free = {3, 2, 1, 0}, returned;
  returned.reserve(4);
  PagePool pool(
      4,
      [&] {
        if (engine_free.empty()) return kNoPage;
        const std::int32_t p = engine_free.back();
        engine_free.pop_back();
        return p;
      },
      [&](std::int32_t p) noexcept { returned.push_back(p); });
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  const std::int32_t list[] = {1, 0, 1};
  EXPECT_EQ(pool.release_list(list, 3), 2u);
  EXPECT_EQ(returned, (std::vector<std::int32_t>{1, 0}));
  EXPECT_EQ(pool.used_pages(), 0u);
}

// ---- 3. layer_budgets bounds k, and its floor pass is exact and fast -----------------------------

TEST(LayerBudgetsBounds, RejectKAbove2To53AndAnOverflowingTotal) {
  EXPECT_EQ(message_of([] { (void)kvevict::layer_budgets(kvevict::LayerBudgets::make_pyramid(), 4, SIZE_MAX); }),
            "kvevict::layer_budgets: budget k = 18446744073709551615 exceeds 2^53");
  EXPECT_EQ(message_of([] {
              (void)kvevict::layer_budgets(kvevict::LayerBudgets::make_weights({1, 1}), 2,
                                           (std::size_t{1} << 63) + 3);
            }),
            "kvevict::layer_budgets: budget k = 9223372036854775811 exceeds 2^53");
  EXPECT_EQ(message_of([] {
              (void)kvevict::layer_budgets(kvevict::LayerBudgets::make_uniform(), 4, std::size_t{1} << 52);
            }),
            "kvevict::layer_budgets: n_layers * k = 4 * 4503599627370496 exceeds 2^53 (the total budget must be "
            "exact in double)");
  EXPECT_EQ(kvevict::layer_budgets(kvevict::LayerBudgets::make_uniform(), 2, std::size_t{1} << 52),
            (std::vector<std::size_t>{std::size_t{1} << 52, std::size_t{1} << 52}));
}

TEST(LayerBudgetsBounds, HugeWeightsGiveTheirSharesNotInfinity) {
  // total · w overflowed to inf for w = 1e300 and total = 2^28 (a float-to-size_t conversion of inf).
  EXPECT_EQ(kvevict::layer_budgets(kvevict::LayerBudgets::make_weights({1e300, 1e300}), 2, std::size_t{1} << 27),
            (std::vector<std::size_t>{std::size_t{1} << 27, std::size_t{1} << 27}));
  EXPECT_EQ(message_of([] {
              (void)kvevict::layer_budgets(kvevict::LayerBudgets::make_weights({1e308, 1e308}), 2, 4);
            }),
            "kvevict::layer_budgets: the weights sum to inf (scale them down)");
}

TEST(LayerBudgetsFloor, TiesGiveTheTokensOfTheHigherLayer) {
  EXPECT_EQ(kvevict::layer_budgets(kvevict::LayerBudgets::make_weights({1, 1, 0}), 3, 2),
            (std::vector<std::size_t>{3, 2, 1}));
  auto s = kvevict::LayerBudgets::make_weights({1, 1, 1, 0});
  s.floor = 2;
  EXPECT_EQ(kvevict::layer_budgets(s, 4, 3), (std::vector<std::size_t>{4, 3, 3, 2}));
}

TEST(LayerBudgetsFloor, AHugeFloorIsRaisedInClosedForm) {
  // 1,0,0,0 with floor k/2 moved 3 · 2^25 tokens one O(n) scan at a time before (0.8 s).
  auto s = kvevict::LayerBudgets::make_weights({1, 0, 0, 0});
  const std::size_t k = std::size_t{1} << 26;
  s.floor = k / 2;
  EXPECT_EQ(kvevict::layer_budgets(s, 4, k), (std::vector<std::size_t>{5 * (k / 2), k / 2, k / 2, k / 2}));
}

// The floor pass as documented, one token at a time from the largest value (ties: the higher layer).
std::vector<std::size_t> reference_floor_pass(std::vector<std::size_t> out, std::size_t floor) {
  for (std::size_t i = 0; i < out.size(); ++i)
    while (out[i] < floor) {
      std::size_t top = 0;
      for (std::size_t j = 0; j < out.size(); ++j)
        if (out[j] >= out[top]) top = j;
      --out[top];
      ++out[i];
    }
  return out;
}

TEST(LayerBudgetsFloor, ClosedFormEqualsTheTokenByTokenReferenceOnRandomInputs) {
  kvevict::Xoshiro256pp g(2025);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = 1 + g() % 9;
    std::vector<std::size_t> v(n);
    std::size_t total = 0;
    for (auto& x : v) total += x = g() % 4 == 0 ? 0 : g() % 12;  // many ties and zeros
    if (total < n) continue;
    const std::size_t floor = 1 + g() % (total / n);
    std::vector<std::size_t> fast = v;
    std::size_t deficit = 0;
    for (auto& x : fast)
      if (x < floor) deficit += floor - x, x = floor;
    kvevict::detail::take_from_largest(fast, deficit, floor);
    ASSERT_EQ(fast, reference_floor_pass(v, floor)) << "trial " << trial << " floor " << floor;
  }
}

// ---- 4. an executor with a huge workers() still scores every slot --------------------------------

struct HugeExecutor {
  std::size_t workers() const { return SIZE_MAX; }
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) const {
    for (std::size_t t = 0; t < n_tasks; ++t) f(t);
  }
};

TEST(ExecutorWorkers, SizeMaxWorkersScoreBitForBitAsSerial) {
  const std::size_t P = 1000, k = 1100, steps = 3, g = 2;
  std::vector<std::vector<std::uint32_t>> got[2];
  for (int run = 0; run < 2; ++run) {
    kvevict::KVBuffer<float> buf(1, k + 1, 2);
    auto kv = buf.view();
    kvevict::H2O cache(config(g, k, 4), kv);
    HugeExecutor huge;
    if (run == 1) cache.set_executor(huge);
    for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
    const auto x = kvtest::causal_logits(g, P, [](std::size_t h, std::size_t r, std::size_t c) {
      return logit_of(r, h, c);
    });
    cache.prefill(x.data(), P);
    for (std::size_t s = 0; s < steps; ++s) {
      kvtest::append_token(kv, static_cast<std::int64_t>(P + s));
      const std::size_t n = kv.length(0);
      std::vector<float> row(g * n);
      for (std::size_t h = 0; h < g; ++h)
        for (std::size_t c = 0; c < n; ++c) row[h * n + c] = logit_of(P + s, h, c);
      cache.decode_step(row.data(), n);
      got[run].push_back(bits_of(cache.scores(0), cache.length(0)));
    }
  }
  ASSERT_EQ(got[0].size(), steps);
  EXPECT_EQ(got[0].back().size(), P + steps);
  EXPECT_EQ(got[0], got[1]);
}

// ---- 6. a moved-from cache refuses every call ------------------------------------------------------

// Both caches can be moved (noexcept) but not copied: copying would alias the same view or page table.
static_assert(std::is_nothrow_move_constructible_v<kvevict::H2O> && std::is_nothrow_move_assignable_v<kvevict::H2O>);
static_assert(!std::is_copy_constructible_v<kvevict::H2O> && !std::is_copy_assignable_v<kvevict::H2O>);
static_assert(std::is_nothrow_move_constructible_v<kvevict::PagedH2O> &&
              std::is_nothrow_move_assignable_v<kvevict::PagedH2O>);
static_assert(!std::is_copy_constructible_v<kvevict::PagedH2O> && !std::is_copy_assignable_v<kvevict::PagedH2O>);

TEST(MovedFrom, ACacheThrowsLogicErrorAndTheMovedToCacheWorks) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O a(config(1, 4, 1), kv);
  for (int t = 0; t < 3; ++t) kvtest::append_token(kv, t);
  const auto x = kvtest::causal_logits(1, 3, [](std::size_t, std::size_t r, std::size_t c) {
    return logit_of(r, 0, c);
  });
  a.prefill(x.data(), 3);
  kvevict::H2O b(std::move(a));
  kvtest::append_token(kv, 3);
  const std::vector<float> row(4, 0.25f);
  EXPECT_EQ(message_of([&] { a.decode_step(row.data(), 4); }),
            "kvevict::Cache::decode_step: this cache was moved from (use the object it was moved to)");
  EXPECT_THROW(a.decode_step(row.data(), 4), std::logic_error);
  EXPECT_EQ(message_of([&] { a.reset(); }),
            "kvevict::Cache::reset: this cache was moved from (use the object it was moved to)");
  EXPECT_EQ(message_of([&] { (void)a.scores(0); }),
            "kvevict::Cache::scores: this cache was moved from (use the object it was moved to)");
  EXPECT_EQ(message_of([&] { (void)a.budget(); }),
            "kvevict::Cache::budget: this cache was moved from (use the object it was moved to)");
  EXPECT_EQ(message_of([&] { b.decode_step(row.data(), 4); }), "no exception");
  EXPECT_EQ(b.length(0), 4u);
  // Move assignment hands the state over too, and leaves its source moved from.
  kvevict::KVBuffer<float> buf2(1, 8, 2);
  kvevict::H2O c(config(1, 4, 1), buf2.view());
  c = std::move(b);
  EXPECT_EQ(c.length(0), 4u);
  EXPECT_EQ(message_of([&] { (void)b.length(0); }),
            "kvevict::Cache::length: this cache was moved from (use the object it was moved to)");
}

struct PagedSeq {
  std::vector<float> k, v;
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  std::vector<std::int64_t> positions;
  PagedKVView<float> view;
  PagedSeq(std::size_t pages, std::size_t ps, std::size_t max_pages)
      : k(pages * ps * 2, 0.0f), v(k.size(), 0.0f), table(max_pages, kNoPage), positions(max_pages * ps, 0) {
    view.k = k.data();
    view.v = v.data();
    view.num_pages = pages;
    view.page_size = ps;
    view.n_kv_heads = 1;
    view.head_dim = 2;
    view.page_table = table.data();
    view.max_pages = max_pages;
    view.length = &length;
    view.positions = positions.data();
  }
};

void append_paged(PagePool& pool, const PagedKVView<float>& view, std::int64_t p) {
  const float row[2] = {static_cast<float>(p), -static_cast<float>(p)};
  pool.append(view, p, row, row);
}

TEST(MovedFrom, APagedCacheDoesNotReturnTheMovedToCachesPages) {
  PagePool pool(8);
  PagedSeq s(8, 2, 4);
  kvevict::PagedH2O a(config(1, 4, 1, true), kvevict::PagedEvictionConfig{}, s.view, pool);
  for (int t = 0; t < 3; ++t) append_paged(pool, s.view, t);
  const auto x = kvtest::causal_logits(1, 3, [](std::size_t, std::size_t r, std::size_t c) {
    return logit_of(r, 0, c);
  });
  a.prefill(x.data(), 3);
  kvevict::PagedH2O b(std::move(a));
  EXPECT_EQ(message_of([&] { a.reset(); }),
            "kvevict::PagedCache::reset: this cache was moved from (use the object it was moved to)");
  EXPECT_EQ(pool.used_pages(), 2u);  // b's pages stay out
  EXPECT_EQ(message_of([&] { (void)a.pages_in_use(); }),
            "kvevict::PagedCache::pages_in_use: this cache was moved from (use the object it was moved to)");
  b.reset();
  EXPECT_EQ(pool.used_pages(), 0u);
}

// ---- 7, 9. attention_logits validates its view and rejects out overlapping bias or q --------------

TEST(AttentionLogits, ValidatesTheView) {
  const std::vector<float> q(4, 1.0f);
  std::vector<float> out(16, 0.0f);
  kvevict::KVView<const float> empty;
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(empty, q.data(), 1, out.data(), 1.0f); }),
            "kvevict::KVView: k and v must be non-null");
  kvevict::KVBuffer<float> buf(1, 8, 2);
  kvevict::KVView<float> kv = buf.view();
  kv.n_kv_heads = 0;
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(kv, q.data(), 1, out.data(), 1.0f); }),
            "kvevict::KVView: n_kv_heads must be >= 1 (got 0)");
  kv.n_kv_heads = 1;
  kv.lengths[0] = 12;
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(kv, q.data(), 1, out.data(), 1.0f); }),
            "kvevict::KVView: lengths[0] = 12 exceeds capacity 8");
}

TEST(AttentionLogits, RejectsABiasOrQThatOverlapsOut) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  for (int t = 0; t < 3; ++t) {
    const float row[2] = {1.0f, 1.0f};
    kv.append(t, row, row);
  }
  std::vector<float> q = {1.0f, 0.5f}, out = {1.0f, 1.0f, 1.0f, 0.0f};
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(kv, q.data(), 1, out.data(), 2.0f, out.data()); }),
            "kvevict::attention_logits: out overlaps bias (bias == out is not an in-place add: give out its own "
            "array, or add the bias after the call)");
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(kv, q.data(), 1, out.data() + 1, 2.0f, out.data()); }),
            "kvevict::attention_logits: out overlaps bias (bias == out is not an in-place add: give out its own "
            "array, or add the bias after the call)");
  EXPECT_EQ(message_of([&] { kvevict::attention_logits(kv, out.data(), 1, out.data() + 1, 2.0f); }),
            "kvevict::attention_logits: out overlaps q (give out its own array)");
  EXPECT_EQ(out, (std::vector<float>{1.0f, 1.0f, 1.0f, 0.0f}));  // nothing written
  const std::vector<float> bias = {1.0f, 1.0f, 1.0f};
  kvevict::attention_logits(kv, q.data(), 1, out.data(), 2.0f, bias.data());
  EXPECT_EQ(out, (std::vector<float>{4.0f, 4.0f, 4.0f, 0.0f}));  // 2 · (1 + 0.5) + 1
}

// ---- 8. the RoPE helpers validate the view and reject an angle that overflows ---------------------

TEST(RopeHelpers, ValidateTheViewAndRejectAnInfiniteAngle) {
  kvevict::KVBuffer<float> buf(1, 8, 4);
  auto kv = buf.view();
  const float row[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  kv.append(0, row, row);
  kv.lengths[0] = 12;
  EXPECT_EQ(message_of([&] { kvevict::rope_rotate_keys(kv, 1.0); }),
            "kvevict::KVView: lengths[0] = 12 exceeds capacity 8");
  EXPECT_EQ(message_of([&] { kvevict::rope_rotate_key(kv, 0, 0, 1.0); }),
            "kvevict::KVView: lengths[0] = 12 exceeds capacity 8");
  kv.lengths[0] = 1;
  const kvevict::RopeSpec tiny{kvevict::RopeStyle::interleaved, 1e-300};
  EXPECT_EQ(message_of([&] { kvevict::rope_rotate_keys(kv, 1e300, tiny); }),
            "kvevict::rope_rotate_keys: the angle delta * theta^(-2/4) = inf is not finite (delta = 1e+300, "
            "theta = 1e-300)");
  float r[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  EXPECT_EQ(message_of([&] { kvevict::rope_rotate(r, 4, 1e300, tiny); }),
            "kvevict::rope_rotate: the angle delta * theta^(-2/4) = inf is not finite (delta = 1e+300, "
            "theta = 1e-300)");
  EXPECT_EQ(std::vector<float>(kv.k_row(0, 0), kv.k_row(0, 0) + 4), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  EXPECT_EQ(std::vector<float>(r, r + 4), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
  kvevict::rope_rotate_keys(kv, 1e150, tiny);  // the angle 1e300 is finite: accepted, K stays finite
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isfinite(kv.k_row(0, 0)[i])) << i;
}

// ---- 10. n_q_heads is validated before the scorer allocates ----------------------------------------

TEST(QHeads, AHugeCountIsRejectedBeforeAnyAllocation) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config((std::size_t{1} << 40) + 1, 4, 1), buf.view()); }),
            "kvevict::Cache: n_q_heads (1099511627777) exceeds 2^16 = 65536");
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config((std::size_t{1} << 62) + 1, 4, 1), buf.view()); }),
            "kvevict::Cache: n_q_heads (4611686018427387905) exceeds 2^16 = 65536");
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(3, 4, 1), kvevict::KVBuffer<float>(2, 8, 2).view()); }),
            "kvevict::Cache: n_q_heads (3) must be a positive multiple of the view's n_kv_heads (2)");
  PagePool pool(8);
  PagedSeq s(8, 2, 4);
  EXPECT_EQ(message_of([&] {
              kvevict::PagedH2O c(config((std::size_t{1} << 40) + 1, 4, 1, true), kvevict::PagedEvictionConfig{},
                                  s.view, pool);
            }),
            "kvevict::PagedCache: n_q_heads (1099511627777) exceeds 2^16 = 65536");
}

// ---- the drawn noise depends on the query position --------------------------------------------------

TEST(GumbelPosition, TwoPositionsDrawDifferentNoiseInACache) {
  // Identical caches and logits; the decode step's token sits at position 50 in one, 51 in the other.
  // Keyformer at a constant τ = 1 over all-zero logits adds softmax(ζ): equal scores would mean the
  // two positions drew the same noise; a rerun at the same position must give the same bits.
  auto step_scores = [](std::int64_t position) {
    kvevict::KVBuffer<float> buf(1, 16, 2);
    auto kv = buf.view();
    kvevict::Keyformer cache(config(1, 12, 1), kv, kvevict::GumbelLogitScore{true},
                             kvevict::LinearTemperature(1.0f, 1.0f, 8));
    for (int t = 0; t < 6; ++t) kvtest::append_token(kv, t);
    const std::vector<float> x(36, 0.0f);
    cache.prefill(x.data(), 6);
    kvtest::append_token(kv, position);
    const std::vector<float> row(7, 0.0f);
    cache.decode_step(row.data(), 7);
    return bits_of(cache.scores(0), 7);
  };
  const auto at50 = step_scores(50), again = step_scores(50), at51 = step_scores(51);
  EXPECT_EQ(at50, again);
  std::size_t differ = 0;
  for (std::size_t s = 0; s < 7; ++s) differ += at50[s] != at51[s];
  EXPECT_EQ(differ, 7u);  // every slot's ζ of the step differs between the two positions
}

// ---- the page unit's choice equals a reference on random sequences ----------------------------------

// The page unit as documented: the middle is pages [start_pages, (n − max(w, 1)) / page_size); the
// `count` middle pages with the lowest page score (sum, or sum / page_size) leave, ties to the older
// page; the others keep their order. Returns the kept pages' table entries.
std::vector<std::int32_t> reference_pages(const std::vector<std::int32_t>& table, const std::vector<float>& summed,
                                          std::size_t n, std::size_t ps, std::size_t w, std::size_t start,
                                          std::size_t count, bool mean) {
  const std::size_t used = (n + ps - 1) / ps, hi = (n - std::max<std::size_t>(w, 1)) / ps;
  std::vector<std::pair<float, std::size_t>> middle;
  for (std::size_t i = start; i < hi; ++i) {
    float sum = 0.0f;
    for (std::size_t o = 0; o < ps; ++o) sum += summed[i * ps + o];
    middle.emplace_back(mean ? sum / static_cast<float>(ps) : sum, i);
  }
  std::stable_sort(middle.begin(), middle.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<bool> gone(used, false);
  for (std::size_t e = 0; e < count; ++e) gone[middle[e].second] = true;
  std::vector<std::int32_t> kept;
  for (std::size_t i = 0; i < used; ++i)
    if (!gone[i]) kept.push_back(table[i]);
  return kept;
}

TEST(PageUnitReference, ThePagesLeftEqualTheReferenceOnRandomSequences) {
  kvevict::Xoshiro256pp g(77);
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t ps = 1 + g() % 4, max_pages = 4 + g() % 10, n = ps * 2 + g() % (ps * (max_pages - 2) + 1);
    const std::size_t w = g() % (ps * 2 + 1), start = g() % 3;
    const std::size_t lo = start, hi = (n - std::max<std::size_t>(w, 1)) / ps;
    if (hi <= lo) continue;
    const std::size_t count = 1 + g() % (hi - lo);
    const bool mean = g() % 2 == 0;
    PagePool pool(max_pages + 3);
    PagedSeq s(max_pages + 3, ps, max_pages);
    pool.allocate();  // page 0 stays out: the sequence's pages are not 0, 1, 2, ...
    for (std::size_t t = 0; t < n; ++t) append_paged(pool, s.view, static_cast<std::int64_t>(3 * t + 1));
    std::vector<float> summed(n);
    for (auto& x : summed) x = static_cast<float>(g() % 4);  // small integers: many tied pages
    const std::size_t used = (n + ps - 1) / ps;
    const std::vector<std::int32_t> before(s.table.begin(), s.table.begin() + static_cast<std::ptrdiff_t>(used));
    const auto want = reference_pages(before, summed, n, ps, w, start, count, mean);
    kvevict::detail::PagedSlotTable slots(kvevict::detail::ErasedPagedKV::from(s.view));
    kvevict::PagedEvictionConfig pc;
    pc.unit = kvevict::EvictUnit::page;
    pc.start_pages = start;
    pc.page_score = mean ? kvevict::PageScore::mean : kvevict::PageScore::sum;
    kvevict::detail::PageEvictor evictor(pc, max_pages);
    std::size_t released = 0;
    const std::size_t m = evictor.evict(slots, pool, summed.data(), n, w, count, released);
    SCOPED_TRACE("trial " + std::to_string(trial) + " n " + std::to_string(n) + " ps " + std::to_string(ps) +
                 " w " + std::to_string(w) + " start " + std::to_string(start) + " count " + std::to_string(count));
    ASSERT_EQ(m, n - count * ps);
    ASSERT_EQ(released, count);
    ASSERT_EQ(std::vector<std::int32_t>(s.table.begin(), s.table.begin() + static_cast<std::ptrdiff_t>(want.size())),
              want);
    ASSERT_EQ(pool.used_pages(), 1 + want.size());
    // Positions moved with their pages: slot o of kept page i holds the position it had.
    for (std::size_t slot = 0; slot < m; ++slot) {
      const std::int32_t page = s.table[slot / ps];
      const auto at = std::find(before.begin(), before.end(), page) - before.begin();
      ASSERT_EQ(s.positions[slot], static_cast<std::int64_t>(3 * (static_cast<std::size_t>(at) * ps + slot % ps) + 1));
    }
  }
}

}  // namespace
