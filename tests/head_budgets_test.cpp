// Head-adaptive budgets (AdaKV; head_budgets.hpp, CacheConfig::head_budgets): the allocation by hand and
// against a simple reference over random inputs; a hand-computed H2O cache whose KV heads keep different
// numbers of tokens through prefill and decode (rows past a head's length never read); identical heads give
// the uniform cache's kept sets; the per-head step equals decode_step bit for bit; the layer's total stays
// exact over random sequences; the first cut at a decode step when the prompt fits; and the errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using Positions = std::vector<std::int64_t>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// `f()` throws `std::invalid_argument` whose message contains `part`.
template <class F>
void expect_invalid_argument(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing: " << part;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::vector<std::size_t> allocate(const std::vector<std::vector<float>>& rows, std::size_t per_head,
                                  std::size_t floor, std::size_t cap) {
  const std::size_t H = rows.size(), n = rows[0].size();
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  std::vector<kvevict::HeadCandidate> scratch(H * n);
  std::vector<std::size_t> counts(H, 99);
  kvevict::allocate_head_budgets(flat.data(), n, H, n, per_head, floor, cap, scratch.data(), counts.data());
  return counts;
}

TEST(HeadBudgets, AllocationByHand) {
  const std::vector<std::vector<float>> rows = {{0.9f, 0.8f, 0.7f, 0.05f}, {0.3f, 0.2f, 0.1f, 0.01f}};
  // The layer's 4 key tokens: 0.9, 0.8, 0.7 (head 0) and 0.3 (head 1).
  EXPECT_EQ(allocate(rows, 2, 0, 10), (std::vector<std::size_t>{3, 1}));
  EXPECT_EQ(allocate(rows, 2, 1, 10), (std::vector<std::size_t>{3, 1}));  // floors 0.9 and 0.3, then 0.8, 0.7
  EXPECT_EQ(allocate(rows, 2, 2, 10), (std::vector<std::size_t>{2, 2}));  // the floor is the whole budget
  EXPECT_EQ(allocate(rows, 2, 0, 2), (std::vector<std::size_t>{2, 2}));   // head 0 at its cap: 0.7 goes to head 1
  EXPECT_EQ(allocate(rows, 3, 0, 10), (std::vector<std::size_t>{3, 3}));  // 6 of 8: the 0.05 and 0.01 go
  EXPECT_EQ(allocate(rows, 5, 0, 10), (std::vector<std::size_t>{4, 4}));  // more than the candidates: all kept
  // Ties: the lower head, then the older candidate (lower index) first.
  const std::vector<std::vector<float>> tied = {{0.5f, 0.5f, 0.0f}, {0.5f, 0.5f, 0.5f}};
  EXPECT_EQ(allocate(tied, 2, 0, 10), (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(allocate(tied, 1, 0, 10), (std::vector<std::size_t>{2, 0}));
}

/// The allocation written plainly: each head's candidates best first; the floor; then the rest of the
/// layer's budget to the best remaining candidates (score, head, index) within the cap.
std::vector<std::size_t> reference_allocation(const std::vector<std::vector<float>>& rows, std::size_t per_head,
                                              std::size_t floor, std::size_t cap) {
  struct C {
    float s;
    std::size_t h, i;
  };
  auto better = [](const C& a, const C& b) {
    return a.s != b.s ? a.s > b.s : a.h != b.h ? a.h < b.h : a.i < b.i;
  };
  const std::size_t H = rows.size(), n = rows[0].size(), top = std::min(n, cap), f = std::min(floor, top);
  std::vector<std::size_t> counts(H, 0);
  std::vector<C> pool;
  for (std::size_t h = 0; h < H; ++h) {
    std::vector<C> mine;
    for (std::size_t i = 0; i < n; ++i) mine.push_back({rows[h][i], h, i});
    std::sort(mine.begin(), mine.end(), better);
    counts[h] = f;
    pool.insert(pool.end(), mine.begin() + static_cast<std::ptrdiff_t>(f), mine.end());
  }
  std::sort(pool.begin(), pool.end(), better);
  std::size_t left = H * std::min(per_head, top) - H * f;
  for (const C& c : pool)
    if (left != 0 && counts[c.h] < top) ++counts[c.h], --left;
  return counts;
}

TEST(HeadBudgets, AllocationMatchesAReferenceOnRandomInputs) {
  std::mt19937 rng(35);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t H = 1 + rng() % 5, n = 1 + rng() % 12, per_head = 1 + rng() % 10;
    const std::size_t floor = rng() % (per_head + 1), cap = per_head + rng() % 4;
    std::vector<std::vector<float>> rows(H, std::vector<float>(n));
    for (auto& r : rows)
      for (float& v : r) v = static_cast<float>(rng() % 6) / 4.0f;  // few values: many ties
    const auto got = allocate(rows, per_head, floor, cap);
    ASSERT_EQ(got, reference_allocation(rows, per_head, floor, cap)) << "trial " << trial;
    std::size_t sum = 0;
    for (std::size_t c : got) {
      EXPECT_GE(c, std::min(floor, std::min(n, cap)));
      EXPECT_LE(c, std::min(n, cap));
      sum += c;
    }
    EXPECT_EQ(sum, H * std::min(per_head, std::min(n, cap))) << "the layer's total is exact";
  }
}

kvevict::CacheConfig adaptive_config(std::size_t k, std::size_t w, std::size_t n_q, float alpha) {
  kvevict::CacheConfig c = kvtest::token_config(k, w, n_q);
  c.head_budgets = kvevict::HeadBudgets::adaptive(alpha);
  return c;
}

/// The hand example: 2 KV heads (one query head each), head_dim 2, a 6-token prompt, k = 3, w = 1.
/// Head 0's rows attend to slots 0-3 (logit 10, else 0), head 1's to slot 0 only. H2O's scores
/// (outside the recent slot 5): head 0 about 2.58, 1.58, 1.08, 0.75, ~0; head 1 about 6, then ~1e-4
/// and less. The layer's 2 · (3 − 1) = 4 key tokens: 6 (head 1), 2.58, 1.58, 1.08 (head 0).
struct HandLayer {
  kvevict::KVBuffer<float> buf{2, 8, 2};
  kvevict::KVView<float> kv = buf.view();
  void append(std::int64_t p) {
    const float kv_row[4] = {static_cast<float>(p), 1, static_cast<float>(-p), 1};
    kv.append(p, kv_row, kv_row);
  }
  static std::vector<float> prompt_logits() {
    const std::size_t P = 6;
    std::vector<float> x(2 * P * P, 0.0f);
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t c = 0; c <= r; ++c) {
        x[(0 * P + r) * P + c] = c <= 3 ? 10.0f : 0.0f;
        x[(1 * P + r) * P + c] = c == 0 ? 10.0f : 0.0f;
      }
    return x;
  }
};

TEST(HeadBudgets, HandExampleThroughPrefillAndDecode) {
  for (const float alpha : {0.0f, 0.5f}) {  // floor(0.5 * 2) = 1 key token each: the same shares here
    HandLayer L;
    kvevict::H2O cache(adaptive_config(3, 1, 2, alpha), L.kv);
    for (std::int64_t p = 0; p < 6; ++p) L.append(p);
    cache.prefill(HandLayer::prompt_logits().data(), 6);
    EXPECT_EQ(cache.budget(), 3u);
    EXPECT_EQ(cache.head_budget(0), 4u);
    EXPECT_EQ(cache.head_budget(1), 2u);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 5}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{0, 5}));
    EXPECT_EQ(L.kv.lengths[0], 4u);
    EXPECT_EQ(L.kv.lengths[1], 2u);
    // A decode step: position 6 enters both heads (lengths 5 and 3, so n = 5); head 1's row is read on
    // [0, 3) only (NaN past it). Head 0 attends uniformly; head 1 to its slot 0. Each head is then one
    // over its budget and evicts position 5 (its score ~1e-5, outside the window now held by 6).
    L.append(6);
    const std::vector<float> step = {0, 0, 0, 0, 0, 10, 0, 0, kNaN, kNaN};
    cache.decode_step(step.data(), 5);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 6}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{0, 6}));
    EXPECT_EQ(cache.step(), 1u);
  }
  // With the floor the whole key budget (alpha = 1), every head keeps k: head 1's second key token is
  // slot 1 (its largest small score).
  HandLayer L;
  kvevict::H2O cache(adaptive_config(3, 1, 2, 1.0f), L.kv);
  for (std::int64_t p = 0; p < 6; ++p) L.append(p);
  cache.prefill(HandLayer::prompt_logits().data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 5}));
  EXPECT_EQ(cache.retained_positions(1), (Positions{0, 1, 5}));
}

TEST(HeadBudgets, BadStepsLeaveTheCacheUnchanged) {
  HandLayer L;
  kvevict::H2O cache(adaptive_config(3, 1, 2, 0.0f), L.kv);
  for (std::int64_t p = 0; p < 6; ++p) L.append(p);
  cache.prefill(HandLayer::prompt_logits().data(), 6);
  L.append(6);
  const auto before = kvtest::snapshot(cache, 2);
  const std::vector<float> step = {0, 0, 0, 0, 0, 10, 0, kNaN, 0, 0};  // NaN inside head 1's 3 slots
  expect_invalid_argument([&] { cache.decode_step(step.data(), 5); }, "logits of q_head 1 contain NaN");
  const std::vector<float> good = {0, 0, 0, 0, 0, 10, 0, 0, 0, 0};
  expect_invalid_argument([&] { cache.decode_step(good.data(), 3); },
                                  "n = 3 but the longest KV head holds 5 slots");
  EXPECT_TRUE(kvtest::snapshot(cache, 2) == before);
  EXPECT_EQ(L.kv.lengths[0], 5u);
  EXPECT_EQ(L.kv.lengths[1], 3u);
  cache.decode_step(good.data(), 5);  // the good step still runs
  EXPECT_EQ(cache.retained_positions(1), (Positions{0, 6}));
  // A head not appended to: its length is checked.
  L.kv.lengths[0] += 1;
  L.kv.head_positions(0)[L.kv.lengths[0] - 1] = 7;
  expect_invalid_argument([&] { cache.decode_step(good.data(), 5); }, "lengths[1] = 2, expected 3");
}

/// Random logits for `H` KV heads of `g` query heads each; with `same`, every KV head's group gets KV head
/// 0's rows.
struct RandomRun {
  std::size_t H, g, P, steps;
  bool same;
  unsigned seed;
};

std::vector<Positions> run_random(kvevict::Policy policy, const RandomRun& r, const kvevict::CacheConfig& cfg,
                                  bool per_head_api,
                                  std::vector<std::vector<std::size_t>>* lengths_out = nullptr) {
  const std::size_t cap = r.P + r.steps + 1;
  kvevict::KVBuffer<float> buf(r.H, cap, 2);
  auto kv = buf.view();
  std::mt19937 rng(r.seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  auto append = [&](std::int64_t p) {
    std::vector<float> row(2 * r.H, static_cast<float>(p));
    kv.append(p, row.data(), row.data());
  };
  kvevict::PolicyParams params;
  if (policy == kvevict::Policy::keyformer) params.horizon = r.steps;
  auto made = kvevict::make_cache(policy, cfg, kv, params);
  kvevict::CacheInterface& cache = *made;
  for (std::size_t p = 0; p < r.P; ++p) append(static_cast<std::int64_t>(p));
  const std::size_t nq = r.H * r.g, block = r.g * r.P * r.P;
  std::vector<float> x(nq * r.P * r.P, 0.0f);
  for (std::size_t h = 0; h < nq; ++h)
    for (std::size_t i = 0; i < r.P; ++i)
      for (std::size_t c = 0; c <= i; ++c) x[(h * r.P + i) * r.P + c] = nd(rng);
  if (r.same)  // every KV head's group a copy of group 0
    for (std::size_t j = 1; j < r.H; ++j)
      std::copy_n(x.begin(), block, x.begin() + static_cast<std::ptrdiff_t>(j * block));
  cache.prefill(x.data(), r.P);
  for (std::size_t t = 0; t < r.steps; ++t) {
    append(static_cast<std::int64_t>(r.P + t));
    std::size_t n = 0;
    for (std::size_t j = 0; j < r.H; ++j) n = std::max(n, kv.lengths[j]);
    std::vector<float> row(nq * n, kNaN);  // past a head's length: never read
    for (std::size_t h = 0; h < nq; ++h) {
      const std::size_t src = r.same ? h % r.g : h;
      for (std::size_t s = 0; s < kv.lengths[h / r.g]; ++s) row[h * n + s] = 3.0f * std::sin(static_cast<float>(src * 31 + s * 7 + t));
    }
    if (per_head_api) {
      cache.begin_decode_step(n);
      for (std::size_t j = r.H; j-- > 0;) cache.score_decode_head(j, row.data() + j * r.g * n);
      cache.end_decode_step();
    } else {
      cache.decode_step(row.data(), n);
    }
    if (lengths_out != nullptr) {
      std::vector<std::size_t> ls;
      for (std::size_t j = 0; j < r.H; ++j) ls.push_back(kv.lengths[j]);
      lengths_out->push_back(ls);
    }
  }
  std::vector<Positions> out;
  for (std::size_t j = 0; j < r.H; ++j) out.push_back(cache.retained_positions(j));
  return out;
}

TEST(HeadBudgets, IdenticalHeadsKeepWhatUniformBudgetsKeep) {
  for (unsigned seed = 0; seed < 10; ++seed) {
    const RandomRun r{3, 2, 24, 20, true, seed};
    const auto uniform = run_random(kvevict::Policy::h2o, r, kvtest::token_config(8, 2, 6), false);
    const auto adaptive = run_random(kvevict::Policy::h2o, r, adaptive_config(8, 2, 6, 0.0f), false);
    EXPECT_EQ(adaptive, uniform) << "seed " << seed;
  }
}

TEST(HeadBudgets, PerHeadStepEqualsDecodeStepAndTheTotalIsExact) {
  for (unsigned seed = 0; seed < 10; ++seed) {
    const RandomRun r{4, 2, 30, 25, false, seed};
    for (const float alpha : {0.0f, 0.2f, 1.0f}) {
      std::vector<std::vector<std::size_t>> lens_a, lens_b;
      const auto a = run_random(kvevict::Policy::h2o, r, adaptive_config(10, 3, 8, alpha), false, &lens_a);
      const auto b = run_random(kvevict::Policy::h2o, r, adaptive_config(10, 3, 8, alpha), true, &lens_b);
      EXPECT_EQ(a, b) << "seed " << seed;
      EXPECT_EQ(lens_a, lens_b);
      const std::size_t floor = static_cast<std::size_t>(std::floor(double(alpha) * 7.0));
      bool ragged = false;
      for (const auto& ls : lens_a) {
        ragged = ragged || std::any_of(ls.begin(), ls.end(), [&](std::size_t l) { return l != ls[0]; });
        std::size_t sum = 0;
        for (std::size_t l : ls) {
          EXPECT_GE(l, 3 + floor);
          sum += l;
        }
        EXPECT_EQ(sum, 4u * 10u) << "seed " << seed << ": k * n_kv_heads after every step";
      }
      EXPECT_EQ(ragged, alpha < 1.0f) << "seed " << seed << ": alpha = 1 is the uniform split, below it the heads differ";
    }
  }
}

TEST(HeadBudgets, ThePromptFitsThenTheFirstDecodeStepOverBudgetShares) {
  // P = 4 <= k = 5: no cut at prefill; the step that brings n to 6 shares the 2 * 5 tokens.
  const RandomRun r{2, 1, 4, 6, false, 7};
  std::vector<std::vector<std::size_t>> lens;
  (void)run_random(kvevict::Policy::keyformer, r, adaptive_config(5, 1, 2, 0.0f), false, &lens);
  EXPECT_EQ(lens[0], (std::vector<std::size_t>{5, 5}));  // 5 <= k: nothing evicted yet
  for (std::size_t t = 1; t < lens.size(); ++t) EXPECT_EQ(lens[t][0] + lens[t][1], 10u);
}

TEST(HeadBudgets, Refusals) {
  kvevict::KVBuffer<float> buf(2, 16, 2);
  auto kv = buf.view();
  auto cfg = adaptive_config(4, 1, 2, 0.2f);
  cfg.shared_heads = true;
  expect_invalid_argument([&] { kvevict::H2O c(cfg, kv); }, "shared_heads = true");
  cfg = adaptive_config(4, 1, 2, 0.2f);
  cfg.bounded_prefill = true;
  cfg.max_prefill_chunk = 4;
  expect_invalid_argument([&] { kvevict::H2O c(cfg, kv); }, "not supported with bounded_prefill");
  expect_invalid_argument([&] { kvevict::KeyNorm c(adaptive_config(4, 1, 2, 0.2f), kv); },
                                  "needs a score from the logits");
  expect_invalid_argument([&] { kvevict::StreamingLLM c(adaptive_config(4, 0, 2, 0.2f), kv); },
                                  "needs a score from the logits");
  expect_invalid_argument([&] { kvevict::H2O c(adaptive_config(4, 1, 2, 1.5f), kv); },
                                  "head_budgets.floor (AdaKV's alpha) must be in [0, 1] (got 1.5)");
  expect_invalid_argument([&] { kvevict::H2O c(adaptive_config(4, 1, 2, kNaN), kv); },
                                  "must be in [0, 1]");
  auto uni = kvtest::token_config(4, 1, 2);
  uni.head_budgets.floor = 0.3f;
  expect_invalid_argument([&] { kvevict::H2O c(uni, kv); }, "is only used by HeadBudgets::adaptive");
  // The paged cache keeps one selection per page slot: refused there.
  kvtest::PagedLayer pl;
  auto paged = adaptive_config(3, 1, 1, 0.2f);
  paged.shared_heads = true;
  expect_invalid_argument(
      [&] { (void)kvevict::make_paged_cache(kvevict::Policy::h2o, paged, kvevict::PagedEvictionConfig{}, pl.view, pl.pool); },
      "kvevict::PagedCache: config.head_budgets = adaptive is not supported");
}

}  // namespace
