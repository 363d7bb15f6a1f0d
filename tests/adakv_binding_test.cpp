// Head-adaptive budgets (AdaKV, head_budgets.hpp) inside `Cache`, at sizes where the safeguard's floor and the
// view's capacity cap decide each head's share (issue 51, item 10): hand-computed kept sets and lengths for a
// fractional floor(α (k − w)) that binds and for a capacity cap that binds, through prefill and a decode step; and
// SnapKV with adaptive budgets against a reference written here (scores from the logits in double, SnapKV's pooling,
// AdaKV's allocation with its safeguard and cap, per-head top-k plus the recent window, then H2O's decode), exact
// kept sets per KV head over random runs. Nothing here calls the library to build an expected value.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using Positions = std::vector<std::int64_t>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

kvevict::CacheConfig adaptive_config(std::size_t k, std::size_t w, std::size_t n_q, float alpha) {
  kvevict::CacheConfig c = kvtest::token_config(k, w, n_q);
  c.head_budgets = kvevict::HeadBudgets::adaptive(alpha);
  return c;
}

/// Causal prompt logits `[q][P][P]` where row r of query head q attends (logit 0) exactly to the slots
/// `attend(q, r)` and masks (-inf) the other slots c <= r: that row adds 1 / |set| to each slot of its set,
/// exact in float for sets of 1 or 2. Above the diagonal: NaN (never read).
template <class F>
std::vector<float> masked_logits(std::size_t n_q, std::size_t P, F attend) {
  std::vector<float> x(n_q * P * P, kNaN);
  for (std::size_t q = 0; q < n_q; ++q)
    for (std::size_t r = 0; r < P; ++r) {
      for (std::size_t c = 0; c <= r; ++c) x[(q * P + r) * P + c] = kNegInf;
      for (std::size_t c : attend(q, r)) x[(q * P + r) * P + c] = 0.0f;
    }
  return x;
}

void append_all(kvevict::KVView<float> kv, std::int64_t p) {
  std::vector<float> row(kv.n_kv_heads * kv.head_dim, static_cast<float>(p));
  kv.append(p, row.data(), row.data());
}

/// A decode step's logits `[q][n]`, n the longest head: q head q's slot s (of its KV head q / g) gets
/// `value(q, position of the slot)`; past its head's length NaN (never read).
template <class F>
std::vector<float> decode_row(const kvevict::KVView<float>& kv, std::size_t n_q, F value) {
  const std::size_t H = kv.n_kv_heads, g = n_q / H;
  std::size_t n = 0;
  for (std::size_t j = 0; j < H; ++j) n = std::max(n, kv.length(j));
  std::vector<float> row(n_q * n, kNaN);
  for (std::size_t q = 0; q < n_q; ++q)
    for (std::size_t s = 0; s < kv.length(q / g); ++s) row[q * n + s] = value(q, kv.head_positions(q / g)[s]);
  return row;
}

// ---- (a) The safeguard's floor binds, and floor(α (k − w)) is not a whole number ----------------------------
//
// 2 KV heads (one query head each), P = 12, k = 6, w = 1: each head's key budget k − w = 5, the layer's 10 key
// tokens; candidates slots 0..10, slot 11 is the recent window. H2O's scores (each row adds 1 to one slot, or
// 1/2 to two):
//   head 0: row r <= 8 -> r, row 9 -> 0, row 10 -> 1, row 11 -> 11:  [2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0 | 1]
//   head 1: every row -> 0, except row 3 -> {0, 3}:                  [11.5, 0, 0, 0.5, 0, ... 0 | 0]
// In the allocation's order (score, then head, then slot): h1:0 (11.5), h0:0, h0:1 (2), h0:2..8 (1), h1:3 (0.5),
// then the zeros (h0:9, h0:10, then h1's). The floor f = floor(α · 5):
//   f = 0 or 1: h1:0, then h0:0..8 fill the 10           -> head 0 keeps 9 key tokens, head 1 keeps 1
//   f = 2:      h1 gets its floor 0 and 3; the 6 left go to h0:2..7 after h0's floor 0, 1
//                                                        -> head 0 keeps 0..7 (8), head 1 keeps 0, 3 (2)
//   f = 3:      h1's floor 0, 3, 1 (the oldest zero)      -> head 0 keeps 0..6 (7), head 1 keeps 0, 1, 3
//   f = 4:      head 0 keeps 0..5 (6), head 1 keeps 0, 1, 2, 3
//   f = 5:      the uniform split: both keep their best 5
// Head 1's share by scores alone is 1 key token (the f = 0 row): every f >= 2 binds.
std::vector<float> floor_prompt() {
  return masked_logits(2, 12, [](std::size_t q, std::size_t r) -> std::vector<std::size_t> {
    if (q == 0) return {r <= 8 ? r : r == 9 ? 0 : r == 10 ? 1 : 11};
    if (r == 3) return {0, 3};
    return {0};
  });
}

struct FloorCase {
  float alpha;  // α·5 in double: 0, 1.5, 2.25, 2.5, 2.95, 3.0000001, 4.0000001, 5
  Positions head0, head1;
};

TEST(AdaKVInCache, FractionalFloorBindsWithExactKeptSets) {
  const FloorCase cases[] = {
      {0.0f, {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}, {0, 11}},
      {0.3f, {0, 1, 2, 3, 4, 5, 6, 7, 8, 11}, {0, 11}},  // floor(1.5) = 1: head 1's own share already
      {0.45f, {0, 1, 2, 3, 4, 5, 6, 7, 11}, {0, 3, 11}},  // floor(2.25) = 2
      {0.5f, {0, 1, 2, 3, 4, 5, 6, 7, 11}, {0, 3, 11}},   // floor(2.5) = 2 (rounding would give 3)
      {0.59f, {0, 1, 2, 3, 4, 5, 6, 7, 11}, {0, 3, 11}},  // floor(2.95) = 2
      {0.6f, {0, 1, 2, 3, 4, 5, 6, 11}, {0, 1, 3, 11}},   // 0.6f · 5 = 3.0000001: 3
      {0.8f, {0, 1, 2, 3, 4, 5, 11}, {0, 1, 2, 3, 11}},   // 4
      {1.0f, {0, 1, 2, 3, 4, 11}, {0, 1, 2, 3, 4, 11}},   // 5: every head keeps k
  };
  for (const FloorCase& fc : cases) {
    SCOPED_TRACE(::testing::Message() << "alpha = " << fc.alpha);
    kvevict::KVBuffer<float> buf(2, 16, 2);
    auto kv = buf.view();
    kvevict::H2O cache(adaptive_config(6, 1, 2, fc.alpha), kv);
    for (std::int64_t p = 0; p < 12; ++p) append_all(kv, p);
    cache.prefill(floor_prompt().data(), 12);
    EXPECT_EQ(cache.retained_positions(0), fc.head0);
    EXPECT_EQ(cache.retained_positions(1), fc.head1);
    EXPECT_EQ(kv.length(0), fc.head0.size());
    EXPECT_EQ(kv.length(1), fc.head1.size());
    EXPECT_EQ(cache.head_budget(0), fc.head0.size());
    EXPECT_EQ(cache.head_budget(1), fc.head1.size());
  }
}

// α = 0.5 (floor 2), then one decode step: position 12 enters both heads (lengths 10 and 3 + 1). Query head 0 attends
// only to position 11 (now 2), so the lowest of head 0 outside the window {12} are positions 2..7 (1 each): the
// newest of them, 7, goes. Query head 1 attends only to position 0; head 1's lowest is 11 (0 < 0.5 of 3): it goes.
// Each head is back at its own budget, 9 and 3.
TEST(AdaKVInCache, FractionalFloorHoldsThroughADecodeStep) {
  kvevict::KVBuffer<float> buf(2, 16, 2);
  auto kv = buf.view();
  kvevict::H2O cache(adaptive_config(6, 1, 2, 0.5f), kv);
  for (std::int64_t p = 0; p < 12; ++p) append_all(kv, p);
  cache.prefill(floor_prompt().data(), 12);
  append_all(kv, 12);
  const auto row = decode_row(kv, 2, [](std::size_t q, std::int64_t pos) {
    return (q == 0 && pos == 11) || (q == 1 && pos == 0) ? 0.0f : kNegInf;
  });
  cache.decode_step(row.data(), 10);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 3, 4, 5, 6, 11, 12}));
  EXPECT_EQ(cache.retained_positions(1), (Positions{0, 3, 12}));
  EXPECT_EQ(kv.length(0), 9u);
  EXPECT_EQ(kv.length(1), 3u);
  EXPECT_EQ(cache.head_budget(0), 9u);
  EXPECT_EQ(cache.head_budget(1), 3u);
  EXPECT_EQ(kvtest::scores_by_position(cache, 0),
            (std::vector<float>{2, 2, 1, 1, 1, 1, 1, 2, 0}));  // exact: every row's weights are 1
  EXPECT_EQ(kvtest::scores_by_position(cache, 1), (std::vector<float>{12.5f, 0.5f, 0}));
}

// ---- (c) The view's capacity caps a head's share --------------------------------------------------------------
//
// 3 KV heads (one query head each), a view of capacity 8 holding a prompt of P = 8, k = 5, w = 1: key budget 4 per
// head, 12 for the layer; candidates slots 0..6 (7 per head); a head may keep at most capacity − 1 − w = 6 key tokens
// (it must hold k_j + 1 <= 8 slots when a decode step appends). Scores:
//   head 0: row r <= 6 -> r, row 7 -> 0:       [2, 1, 1, 1, 1, 1, 1 | 0]
//   head 1: every row -> 0:                    [8, 0, 0, 0, 0, 0, 0 | 0]
//   head 2: every row uniform over 0..r:      [H_8, H_8 − 1, ...] = [2.718, 1.718, 1.218, 0.885, 0.635, 0.435, 0.268 | 0.125]
// In order: h1:0 (8), h2:0, h0:0 (2), h2:1, h2:2, h0:1..6 (1), h2:3, h2:4, ... Taking 12 with head 0 capped at 6:
// h1:0, h2:0, h0:0, h2:1, h2:2, h0:1..5 (head 0 now at 6: h0:6 is skipped), h2:3, h2:4. Shares 6, 1, 5: head 0 keeps
// 0..5 and 7 (7 slots), head 1 keeps 0 and 7, head 2 keeps 0..4 and 7. Without the cap head 0 would take h0:6 as well
// (8 slots: a full view) and head 2 only 4.
std::vector<float> cap_prompt() {
  const std::size_t P = 8;
  std::vector<float> x = masked_logits(3, P, [](std::size_t q, std::size_t r) -> std::vector<std::size_t> {
    if (q == 0) return {r <= 6 ? r : 0};
    if (q == 1) return {0};
    std::vector<std::size_t> all(r + 1);
    for (std::size_t c = 0; c <= r; ++c) all[c] = c;
    return all;
  });
  return x;
}

TEST(AdaKVInCache, CapacityCapBindsWithExactLengths) {
  kvevict::KVBuffer<float> buf(3, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(adaptive_config(5, 1, 3, 0.0f), kv);
  for (std::int64_t p = 0; p < 8; ++p) append_all(kv, p);
  cache.prefill(cap_prompt().data(), 8);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(cache.retained_positions(1), (Positions{0, 7}));
  EXPECT_EQ(cache.retained_positions(2), (Positions{0, 1, 2, 3, 4, 7}));
  const std::size_t want_len[3] = {7, 2, 6};
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(kv.length(j), want_len[j]) << "head " << j;
    EXPECT_EQ(cache.head_budget(j), want_len[j]) << "head " << j;
  }
  // A decode step fills head 0's view (8 of 8 slots) before it evicts. Every query row is uniform over its head's
  // slots; position 7 (the old window, score 0 or 0.125) is each head's lowest and goes.
  append_all(kv, 8);
  const auto row = decode_row(kv, 3, [](std::size_t, std::int64_t) { return 0.0f; });
  cache.decode_step(row.data(), 8);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 3, 4, 5, 8}));
  EXPECT_EQ(cache.retained_positions(1), (Positions{0, 8}));
  EXPECT_EQ(cache.retained_positions(2), (Positions{0, 1, 2, 3, 4, 8}));
  for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(kv.length(j), want_len[j]) << "head " << j;
}

// ---- (b) SnapKV with adaptive budgets against an independent reference ----------------------------------------

/// The reference: one layer's per-head held positions and raw scores (double), as the documentation of SnapKVScore
/// (snapkv_score.hpp), HeadBudgets / allocate_head_budgets (head_budgets.hpp) and Cache (cache.hpp) describe them.
struct SnapAdaReference {
  std::size_t H, g, k, w, capacity, L, K;
  bool avg;
  float alpha;
  std::vector<Positions> pos;               // [head], ascending
  std::vector<std::vector<double>> raw;     // [head][i]: the score of pos[head][i]
  std::vector<std::size_t> budget;          // [head]: k_j once allocated
  bool allocated = false;
  bool ambiguous = false;                   // two distinct values too close to rank as float does

  std::size_t floor_tokens() const {
    return static_cast<std::size_t>(std::floor(static_cast<double>(alpha) * static_cast<double>(k - w)));
  }
  /// Values that rank differently in float and double are not a test of the cache: flags the run.
  void check_margin(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i)
      if (v[i] != v[i - 1] && std::isfinite(v[i]) && v[i] - v[i - 1] < 1e-5 * std::max(1.0, std::fabs(v[i])))
        ambiguous = true;
  }
  /// AdaKV's allocation (Feng et al. 2024, Algorithm 1, with the safeguard): the candidates of every head
  /// (`sel[j]`, all `n` of them outside the recent window), each head's `f` best first, then the rest of the
  /// layer's `H · min(k − w, top)` to the best remaining of any head while a head is below `top = min(n, cap)`;
  /// order: score descending, then head, then index ascending.
  std::vector<std::size_t> allocate(const std::vector<std::vector<double>>& sel) {
    const std::size_t n = sel[0].size(), cap = capacity - 1 - w, top = std::min(n, cap);
    const std::size_t f = std::min(std::min(floor_tokens(), k - w), top);
    struct Cand {
      double s;
      std::size_t h, i;
    };
    auto before = [](const Cand& a, const Cand& b) {
      if (a.s != b.s) return a.s > b.s;
      return a.h != b.h ? a.h < b.h : a.i < b.i;
    };
    std::vector<std::size_t> count(H, 0);
    std::vector<Cand> rest;
    std::vector<double> all;
    for (std::size_t h = 0; h < H; ++h) {
      std::vector<Cand> mine;
      for (std::size_t i = 0; i < n; ++i) mine.push_back({sel[h][i], h, i}), all.push_back(sel[h][i]);
      std::sort(mine.begin(), mine.end(), before);
      count[h] = f;
      rest.insert(rest.end(), mine.begin() + static_cast<std::ptrdiff_t>(f), mine.end());
    }
    check_margin(all);
    std::sort(rest.begin(), rest.end(), before);
    std::size_t left = H * std::min(k - w, top) - H * f;
    for (const Cand& c : rest) {
      if (left == 0) break;
      if (count[c.h] < top) ++count[c.h], --left;
    }
    return count;
  }
  /// Every head keeps its last w positions and its `count[j]` best candidates by `sel` (ties: the older).
  void cut(const std::vector<std::vector<double>>& sel, const std::vector<std::size_t>& count) {
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t n = pos[h].size();
      std::vector<std::size_t> order(n - w);
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sel[h][a] > sel[h][b]; });
      std::vector<std::size_t> keep(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count[h]));
      for (std::size_t i = n - w; i < n; ++i) keep.push_back(i);
      std::sort(keep.begin(), keep.end());
      Positions p;
      std::vector<double> r;
      for (std::size_t i : keep) p.push_back(pos[h][i]), r.push_back(raw[h][i]);
      pos[h] = p, raw[h] = r;
      budget[h] = w + count[h];
    }
    allocated = true;
  }
  /// Prefill of P tokens with logits `x[q][P][P]`: the last L' = min(L, P) rows' softmax (over c <= r) summed per
  /// KV head; if P > k, the cut ranks the pooled scores of [0, P − L') and +inf for the window [P − L', P).
  void prefill(const std::vector<float>& x, std::size_t P) {
    pos.assign(H, Positions(P));
    raw.assign(H, std::vector<double>(P, 0.0));
    budget.assign(H, k);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < P; ++i) pos[h][i] = static_cast<std::int64_t>(i);
    const std::size_t Lp = std::min(L, P);
    for (std::size_t q = 0; q < H * g; ++q)
      for (std::size_t r = P - Lp; r < P; ++r) {
        const float* row = x.data() + (q * P + r) * P;
        double m = -std::numeric_limits<double>::infinity(), z = 0.0;
        for (std::size_t c = 0; c <= r; ++c) m = std::max(m, static_cast<double>(row[c]));
        for (std::size_t c = 0; c <= r; ++c) z += std::exp(static_cast<double>(row[c]) - m);
        for (std::size_t c = 0; c <= r; ++c) raw[q / g][c] += std::exp(static_cast<double>(row[c]) - m) / z;
      }
    if (P <= k) return;
    const std::size_t before = P - Lp, half = K / 2;
    std::vector<std::vector<double>> sel(H, std::vector<double>(P - w));
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < P - w; ++i) {
        if (i >= before) {
          sel[h][i] = std::numeric_limits<double>::infinity();
          continue;
        }
        double acc = avg ? 0.0 : -1.0;
        for (std::size_t j = (i >= half ? i - half : 0); j <= std::min(before - 1, i + half); ++j)
          acc = avg ? acc + raw[h][j] : std::max(acc, raw[h][j]);
        sel[h][i] = avg ? acc / static_cast<double>(K) : acc;
      }
    cut(sel, allocate(sel));
  }
  /// A decode step: position `p` enters every head, each query row (`value(q, position)`) adds its softmax over
  /// its head's positions; before the first cut and more than k held, the first cut by the raw scores; after it,
  /// a head over its budget evicts its lowest raw score outside the window (the w newest), ties the newest.
  template <class F>
  void step(std::int64_t p, F value) {
    for (std::size_t h = 0; h < H; ++h) pos[h].push_back(p), raw[h].push_back(0.0);
    for (std::size_t q = 0; q < H * g; ++q) {
      const std::size_t h = q / g, n = pos[h].size();
      double m = -std::numeric_limits<double>::infinity(), z = 0.0;
      for (std::size_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(value(q, pos[h][i])));
      for (std::size_t i = 0; i < n; ++i) z += std::exp(static_cast<double>(value(q, pos[h][i])) - m);
      for (std::size_t i = 0; i < n; ++i) raw[h][i] += std::exp(static_cast<double>(value(q, pos[h][i])) - m) / z;
    }
    if (!allocated) {
      const std::size_t n = pos[0].size();
      if (n <= k) return;
      std::vector<std::vector<double>> sel(H);
      for (std::size_t h = 0; h < H; ++h) sel[h].assign(raw[h].begin(), raw[h].begin() + static_cast<std::ptrdiff_t>(n - w));
      cut(sel, allocate(sel));
      return;
    }
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t n = pos[h].size();
      if (n <= budget[h]) continue;
      std::size_t victim = 0;
      for (std::size_t i = 1; i + w < n; ++i)
        if (raw[h][i] <= raw[h][victim]) victim = i;  // positions ascend: <= moves to the newest of equals
      check_margin(std::vector<double>(raw[h].begin(), raw[h].begin() + static_cast<std::ptrdiff_t>(n - w)));
      pos[h].erase(pos[h].begin() + static_cast<std::ptrdiff_t>(victim));
      raw[h].erase(raw[h].begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
};

TEST(AdaKVInCache, SnapKVAdaptiveMatchesAnIndependentReference) {
  std::mt19937 rng(51);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const float alphas[] = {0.0f, 0.2f, 0.35f, 0.5f, 0.7f, 1.0f};
  int checked = 0, floor_bound = 0, cap_bound = 0, first_cut_at_decode = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const std::size_t H = 2 + rng() % 3, g = 1 + rng() % 2, k = 4 + rng() % 7;
    const std::size_t L = 1 + rng() % k, w = rng() % (std::min(k, L + 2) + 1);
    const std::size_t K = 1 + 2 * (rng() % 4);
    const bool avg = rng() % 2 == 0;
    const float alpha = alphas[rng() % 6];
    // Some prompts fit (the first cut at a decode step); every third run's view holds just the prompt, a little over
    // k, so that a head's share can reach the cap capacity − 1 − w.
    const std::size_t P = trial % 6 == 5 ? 1 + rng() % k : trial % 3 == 0 ? k + 2 + rng() % 3 : k + 1 + rng() % 14;
    const std::size_t T = 6;
    const std::size_t room = P + T + rng() % 4;
    const std::size_t capacity = std::max(trial % 3 == 0 ? P : room, k + 1);  // P: the cap binds
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": H " << H << " g " << g << " k " << k << " w " << w
                                      << " L " << L << " K " << K << (avg ? " avg" : " max") << " alpha " << alpha
                                      << " P " << P << " capacity " << capacity);
    kvevict::KVBuffer<float> buf(H, capacity, 2);
    auto kv = buf.view();
    kvevict::SnapKV cache(adaptive_config(k, w, H * g, alpha), kv,
                          kvevict::SnapKVScore(L, K, avg ? kvevict::Pooling::avg : kvevict::Pooling::max));
    // Each KV head's logits at its own scale: diffuse heads (every candidate moderate) next to peaked ones (a few
    // large scores, the rest near 0), so that shares differ and a diffuse head runs into the cap.
    const float scales[3] = {0.05f, 1.0f, 3.0f};
    std::vector<float> scale(H);
    for (float& s : scale) s = scales[rng() % 3];
    std::vector<float> x(H * g * P * P, kNaN);
    for (std::size_t q = 0; q < H * g; ++q)
      for (std::size_t r = 0; r < P; ++r)
        for (std::size_t c = 0; c <= r; ++c) x[(q * P + r) * P + c] = scale[q / g] * nd(rng);
    std::vector<std::vector<std::vector<float>>> step_logits(T, std::vector<std::vector<float>>(H * g, std::vector<float>(P + T)));
    for (auto& t : step_logits)
      for (auto& q : t)
        for (float& v : q) v = nd(rng);
    SnapAdaReference ref{H, g, k, w, capacity, L, K, avg, alpha, {}, {}, {}};
    for (std::int64_t p = 0; p < static_cast<std::int64_t>(P); ++p) append_all(kv, p);
    cache.prefill(x.data(), P);
    ref.prefill(x, P);
    auto compare = [&](const char* when) {
      for (std::size_t j = 0; j < H; ++j) {
        ASSERT_EQ(cache.retained_positions(j), ref.pos[j]) << when << ", head " << j;
        ASSERT_EQ(kv.length(j), ref.pos[j].size()) << when << ", head " << j;
        if (ref.allocated) {
          ASSERT_EQ(cache.head_budget(j), ref.budget[j]) << when << ", head " << j;
        }
        const std::vector<float> got = kvtest::scores_by_position(cache, j);
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], ref.raw[j][i], 2e-5 * std::max(1.0, ref.raw[j][i])) << when << ", head " << j << ", held token " << i;
      }
    };
    if (ref.ambiguous) continue;
    compare("after prefill");
    if (::testing::Test::HasFatalFailure()) return;
    for (std::size_t t = 0; t < T && !ref.ambiguous; ++t) {
      const std::int64_t p = static_cast<std::int64_t>(P + t);
      append_all(kv, p);
      auto value = [&](std::size_t q, std::int64_t pos) { return step_logits[t][q][static_cast<std::size_t>(pos)]; };
      const bool was_allocated = ref.allocated;
      std::size_t n = 0;
      for (std::size_t j = 0; j < H; ++j) n = std::max(n, kv.length(j));
      const auto row = decode_row(kv, H * g, value);
      cache.decode_step(row.data(), n);
      ref.step(p, value);
      if (ref.ambiguous) break;
      if (!was_allocated && ref.allocated) ++first_cut_at_decode;
      compare("after a decode step");
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (ref.ambiguous) continue;
    ++checked;
    // How often the floor and the cap decided a share (so that the runs exercise them).
    const std::size_t f = ref.floor_tokens(), cap = capacity - 1 - w;
    for (std::size_t j = 0; j < H; ++j) {
      if (ref.allocated && f > 0 && f < k - w && ref.budget[j] == w + f) ++floor_bound;
      if (ref.allocated && cap > k - w && ref.budget[j] == w + cap) ++cap_bound;
    }
  }
  EXPECT_GE(checked, 200) << "too many runs with near-ties";
  EXPECT_GE(floor_bound, 8) << "the floor should decide some shares";
  EXPECT_GE(cap_bound, 8) << "the cap should decide some shares";
  EXPECT_GE(first_cut_at_decode, 8) << "some prompts should fit, so that the first cut is at a decode step";
}

}  // namespace
