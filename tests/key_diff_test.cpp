// KeyDiffScore / KeyDiff (score/score_policies.hpp, presets.hpp; the anchor hooks of concepts.hpp): every held
// token's score is 1 - cos(k, a), a the mean unit key of the KV head, recomputed whenever tokens enter; no logits.
// The hooks by hand, hand-computed kept sets, the Policy::keydiff factory, chunked and bounded prefill, GQA per head
// and shared against a simple reference over 20 random sequences, the paged twin, and the errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using Positions = std::vector<std::int64_t>;

kvevict::CacheConfig config(std::size_t k, std::size_t w, std::size_t n_q = 1) {
  return kvtest::token_config(k, w, n_q);
}

/// The hand example's keys (one KV head, head_dim 2), by position.
constexpr float kKeys[8][2] = {{1, 0}, {0, 1}, {1, 0.1f}, {-1, 0}, {2, 0.5f}, {0, 1}, {1, 2}, {-1, -1}};
struct Layer {
  kvevict::KVBuffer<float> buf{1, 9, 2};
  kvevict::KVView<float> kv = buf.view();
  void append(std::int64_t p) {
    const float v[2] = {};
    kv.append(p, kKeys[p], v);
  }
};

using kvtest::scores_by_position;

/// The score of each of `keys` (`[n][d]`) against their own anchor, in double: the closed form.
std::vector<double> closed_form(const std::vector<std::vector<double>>& keys) {
  const std::size_t d = keys[0].size();
  std::vector<double> a(d, 0.0);
  auto norm = [](const std::vector<double>& x) {
    double sq = 0.0;
    for (double e : x) sq += e * e;
    return std::sqrt(sq);
  };
  for (const auto& k : keys)
    for (std::size_t i = 0; i < d; ++i) a[i] += k[i] / norm(k);
  const double na = norm(a);
  std::vector<double> out;
  for (const auto& k : keys) {
    double dot = 0.0;
    for (std::size_t i = 0; i < d; ++i) dot += k[i] / norm(k) * a[i] / na;
    out.push_back(std::max(0.0, 1.0 - dot));
  }
  return out;
}

TEST(KeyDiff, HooksGiveOneMinusTheCosineToTheMeanUnitKey) {
  const kvevict::KeyDiffScore s;
  // (3, 4) and (0, 2): unit keys (0.6, 0.8) and (0, 1), mean (0.3, 0.9), unit anchor (1, 3) / sqrt(10).
  const float k0[2] = {3, 4}, k1[2] = {0, 2};
  float a[2] = {0, 0};
  s.anchor_add(k0, 2, a);
  s.anchor_add(k1, 2, a);
  EXPECT_FLOAT_EQ(a[0], 0.6f);
  EXPECT_FLOAT_EQ(a[1], 1.8f);
  s.anchor_finish(a, 2, 2);
  EXPECT_FLOAT_EQ(a[0], 1.0f / std::sqrt(10.0f));
  EXPECT_FLOAT_EQ(a[1], 3.0f / std::sqrt(10.0f));
  EXPECT_NEAR(s.anchor_score(k0, 2, a), 1.0 - 3.0 / std::sqrt(10.0), 1e-5);  // cos = (0.6 + 2.4) / sqrt(10)
  EXPECT_NEAR(s.anchor_score(k1, 2, a), 1.0 - 3.0 / std::sqrt(10.0), 1e-5);  // the anchor bisects the two
  const float opposite[2] = {-1, -3};
  EXPECT_NEAR(s.anchor_score(opposite, 2, a), 2.0, 1e-5);
  const float along[2] = {1, 3};
  EXPECT_EQ(s.anchor_score(along, 2, a) >= 0.0f, true);  // rounding never gives a negative score
  EXPECT_NEAR(s.anchor_score(along, 2, a), 0.0, 1e-5);
  // A zero key adds nothing to the anchor and scores 1 (cos 0); an all-zero anchor stays 0: every score 1.
  const float zero[2] = {0, 0};
  float z[2] = {0, 0};
  s.anchor_add(zero, 2, z);
  EXPECT_EQ(z[0], 0.0f);
  EXPECT_EQ(z[1], 0.0f);
  s.anchor_finish(z, 2, 1);
  EXPECT_EQ(s.anchor_score(zero, 2, z), 1.0f);
  EXPECT_EQ(s.anchor_score(k0, 2, z), 1.0f);
  EXPECT_EQ(s.anchor_score(zero, 2, a), 1.0f);
}

// k = 3, w = 1. Prefill of 0..4: scores 0.174, 0.436, 0.122, 1.826, 0.062; recent {4}, then the top two of 0..3:
// 3 and 1. Token 5 (0, 1) makes the anchor (0, 1)-ward: 1 scores ~0 (its key is 5's), so 1 goes; token 6 (1, 2):
// 5 goes (0.019); token 7 (-1, -1): 3 goes (0.441 < 0.508 of 6). Scores pinned against the closed form.
TEST(KeyDiff, KeepsTheKeysLeastLikeTheRest) {
  Layer l;
  kvevict::KeyDiff cache(config(3, 1), l.kv);
  for (std::int64_t p = 0; p < 5; ++p) l.append(p);
  cache.prefill(nullptr, 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{1, 3, 4}));
  const std::vector<double> want = closed_form({{1, 0}, {0, 1}, {1, 0.1}, {-1, 0}, {2, 0.5}});
  const std::vector<float> got = scores_by_position(cache);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NEAR(got[0], want[1], 1e-5);
  EXPECT_NEAR(got[1], want[3], 1e-5);
  EXPECT_NEAR(got[2], want[4], 1e-5);
  const Positions kept[3] = {{3, 4, 5}, {3, 4, 6}, {4, 6, 7}};
  for (std::int64_t p = 5; p < 8; ++p) {
    l.append(p);
    cache.decode_step(nullptr, l.kv.length(0));
    EXPECT_EQ(cache.retained_positions(0), kept[p - 5]) << "after token " << p;
  }
  // The scores of the last step, before its eviction: held 3, 4, 6, 7; 3 (0.441) left, so 4, 6, 7 remain.
  const std::vector<double> last = closed_form({{-1, 0}, {2, 0.5}, {1, 2}, {-1, -1}});
  const std::vector<float> now = scores_by_position(cache);
  EXPECT_NEAR(now[0], last[1], 1e-5);
  EXPECT_NEAR(now[1], last[2], 1e-5);
  EXPECT_NEAR(now[2], last[3], 1e-5);
  EXPECT_NEAR(last[0], 0.4411, 1e-4);
}

// make_cache(Policy::keydiff) is the preset; logits, when given, are ignored; unbounded chunks equal one-shot.
TEST(KeyDiff, FactoryIgnoresLogitsAndChunksEqualOneShot) {
  EXPECT_EQ(kvevict::parse_policy("keydiff"), kvevict::Policy::keydiff);
  EXPECT_STREQ(kvevict::policy_name(kvevict::Policy::keydiff), "keydiff");
  EXPECT_TRUE(kvevict::takes_recent_window(kvevict::Policy::keydiff));
  kvtest::expect_factory_and_chunks_equal_preset<kvevict::KeyDiff, Layer>(
      kvevict::Policy::keydiff, config(3, 1), 5, 8, [](const kvevict::CacheInterface& made) {
        // Between chunks every held key is scored against the anchor of the keys so far: (1, 0) and (0, 1), 1 - cos 45°.
        EXPECT_NEAR(made.scores(0)[0], 1.0 - std::sqrt(0.5), 1e-5);
        EXPECT_NEAR(made.scores(0)[1], 1.0 - std::sqrt(0.5), 1e-5);
      });
}

// The reference: kept positions of every KV head after a prefill of P tokens and then each decode step, from the
// keys alone (the documented score in plain double loops, no call into KeyDiffScore, so that a bug in its hooks or
// in dot_fixed_order cannot sit on both sides; the selection written out: the last w held positions, then the top
// k - w scores; a step evicts the lowest-scoring non-recent token). Shared: the scores summed over heads.
// tests/key_diff_reference_test.cpp checks the scores too, over more shapes.
struct Reference {
  std::size_t n_kv, d, k, w;
  bool shared;
  const std::vector<std::vector<std::vector<float>>>& keys;  // [head][position][d]
  std::vector<Positions> held;                                // per head, ascending

  /// 1 - cos(k, a) of every held key of head j, a the normalised mean of the held unit keys (double).
  std::vector<double> scores(std::size_t j) const {
    auto norm = [this](const std::vector<double>& x) {
      double sq = 0.0;
      for (std::size_t i = 0; i < d; ++i) sq += x[i] * x[i];
      return std::sqrt(sq);
    };
    std::vector<double> a(d, 0.0), key(d), out;
    for (std::int64_t p : held[j]) {
      for (std::size_t i = 0; i < d; ++i) key[i] = keys[j][p][i];
      const double nk = std::max(norm(key), 1e-12);
      for (std::size_t i = 0; i < d; ++i) a[i] += key[i] / nk;
    }
    for (double& e : a) e /= static_cast<double>(held[j].size());
    const double na = std::max(norm(a), 1e-8);
    for (double& e : a) e /= na;
    for (std::int64_t p : held[j]) {
      double dot = 0.0;
      for (std::size_t i = 0; i < d; ++i) key[i] = keys[j][p][i], dot += key[i] * a[i];
      out.push_back(std::max(0.0, 1.0 - dot / std::max(norm(key), 1e-8)));
    }
    return out;
  }
  std::vector<std::vector<double>> ranked() const {  // what each head's selection ranks
    std::vector<std::vector<double>> r(n_kv);
    for (std::size_t j = 0; j < n_kv; ++j) r[j] = scores(j);
    if (shared) {
      std::vector<double> sum(held[0].size(), 0.0);
      for (std::size_t j = 0; j < n_kv; ++j)
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += r[j][i];
      for (auto& x : r) x = sum;
    }
    return r;
  }
  void prefill(std::size_t P) {
    held.assign(n_kv, Positions(P));
    for (auto& h : held) std::iota(h.begin(), h.end(), 0);
    if (P <= k) return;
    const auto r = ranked();
    for (std::size_t j = 0; j < n_kv; ++j) {
      std::vector<std::size_t> cand(P - w);
      std::iota(cand.begin(), cand.end(), std::size_t{0});
      std::stable_sort(cand.begin(), cand.end(), [&](std::size_t a, std::size_t b) { return r[j][a] > r[j][b]; });
      Positions keep(held[j].end() - static_cast<std::ptrdiff_t>(w), held[j].end());
      for (std::size_t i = 0; i < k - w; ++i) keep.push_back(held[j][cand[i]]);
      std::sort(keep.begin(), keep.end());
      held[j] = keep;
    }
  }
  void step(std::int64_t p) {
    for (auto& h : held) h.push_back(p);
    if (held[0].size() <= k) return;
    const auto r = ranked();
    for (std::size_t j = 0; j < n_kv; ++j) {
      const std::size_t n = held[j].size();
      std::size_t victim = 0;
      for (std::size_t i = 1; i + w < n; ++i)
        if (r[j][i] < r[j][victim]) victim = i;
      held[j].erase(held[j].begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
};

// kvpress's KeyDiffPress rule (w = 0) and kvevict's recent window, per KV head and shared, over random keys of two
// KV heads with GQA 2: the cache keeps the reference's positions after the prefill and after each of 12 steps.
TEST(KeyDiff, MatchesTheReferenceOverRandomSequences) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n_kv = 2, d = 8, P = 16, T = 12, k = 3 + static_cast<std::size_t>(trial % 5) * 2;
    const std::size_t w = trial % 2 == 0 ? 0 : 2;
    const bool shared = trial % 4 >= 2;
    std::vector<std::vector<std::vector<float>>> keys(n_kv, std::vector<std::vector<float>>(P + T, std::vector<float>(d)));
    for (auto& head : keys)
      for (auto& key : head)
        for (float& e : key) e = normal(rng);
    kvevict::KVBuffer<float> buf(n_kv, P + T, d);
    kvevict::KVView<float> kv = buf.view();
    kvevict::CacheConfig cfg = config(k, w, 2 * n_kv);
    cfg.shared_heads = shared;
    auto c = kvevict::make_cache(kvevict::Policy::keydiff, cfg, kv);
    auto append = [&](std::size_t p) {
      std::vector<float> kk, vv(n_kv * d, 0.0f);
      for (std::size_t j = 0; j < n_kv; ++j) kk.insert(kk.end(), keys[j][p].begin(), keys[j][p].end());
      kv.append(static_cast<std::int64_t>(p), kk.data(), vv.data());
    };
    Reference ref{n_kv, d, k, w, shared, keys, {}};
    for (std::size_t p = 0; p < P; ++p) append(p);
    c->prefill(nullptr, P);
    ref.prefill(P);
    for (std::size_t j = 0; j < n_kv; ++j) ASSERT_EQ(c->retained_positions(j), ref.held[j]) << "trial " << trial;
    for (std::size_t t = 0; t < T; ++t) {
      append(P + t);
      c->decode_step(nullptr, kv.length(0));
      ref.step(static_cast<std::int64_t>(P + t));
      for (std::size_t j = 0; j < n_kv; ++j)
        ASSERT_EQ(c->retained_positions(j), ref.held[j]) << "trial " << trial << ", step " << t << ", head " << j;
    }
  }
}

// Bounded prefill: a chunk that overflows k cuts against the anchor of the keys held then, and finish_prefill ranks
// against the anchor of what is left. k = 3, w = 1, chunks of 2, 2, 1. After 0..3 the scores are 0.433, 0.176,
// 0.250, 1.394: recent {3}, then 0 and 2. The last chunk's cut over 0, 2, 3, 4 (0.074, 0.193, 1.982, 0.373): recent
// {4}, then 3 and 2; finish_prefill rescores 2, 3, 4 against their own anchor.
TEST(KeyDiff, BoundedPrefillCutsAgainstTheHeldKeys) {
  constexpr float keys[5][2] = {{1, 0}, {0, 1}, {2, 0.5f}, {-1, 0.2f}, {0.3f, -1}};
  kvevict::CacheConfig cfg = config(3, 1);
  cfg.bounded_prefill = true;
  cfg.max_prefill_chunk = 2;
  kvevict::KVBuffer<float> buf(1, 5, 2);
  kvevict::KVView<float> kv = buf.view();
  kvevict::KeyDiff cache(cfg, kv);
  auto append = [&](std::int64_t p) {
    const float v[2] = {};
    kv.append(p, keys[p], v);
  };
  append(0), append(1);
  cache.prefill_chunk(nullptr, 2, 2);
  append(2), append(3);
  cache.prefill_chunk(nullptr, 2, 4);
  const std::vector<double> s4 = closed_form({{1, 0}, {0, 1}, {2, 0.5}, {-1, 0.2}});
  EXPECT_NEAR(s4[0], 0.4333, 1e-4);
  EXPECT_NEAR(s4[2], 0.2504, 1e-4);
  EXPECT_NEAR(s4[1], 0.1761, 1e-4);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 3}));
  append(4);
  cache.prefill_chunk(nullptr, 1, 4);
  cache.finish_prefill();
  const std::vector<double> s5 = closed_form({{1, 0}, {2, 0.5}, {-1, 0.2}, {0.3, -1}});
  EXPECT_NEAR(s5[0], 0.0736, 1e-4);
  EXPECT_NEAR(s5[1], 0.1927, 1e-4);
  EXPECT_EQ(cache.retained_positions(0), (Positions{2, 3, 4}));
  // That chunk's own cut (4 held > k) kept 2, 3, 4; finish_prefill rescored what is left against its anchor.
  const std::vector<double> s3 = closed_form({{2, 0.5}, {-1, 0.2}, {0.3, -1}});
  const std::vector<float> got = scores_by_position(cache);
  EXPECT_NEAR(got[0], s3[0], 1e-5);
  EXPECT_NEAR(got[1], s3[1], 1e-5);
  EXPECT_NEAR(got[2], s3[2], 1e-5);
  EXPECT_NEAR(s3[2], 0.0196, 1e-4);
}

using kvtest::PagedLayer;

TEST(KeyDiff, PagedTwinKeepsTheSamePositions) {
  kvevict::CacheConfig cfg = config(3, 1);
  cfg.shared_heads = true;
  PagedLayer pl;
  auto c = kvevict::make_paged_cache(kvevict::Policy::keydiff, cfg, kvevict::PagedEvictionConfig{}, pl.view, pl.pool);
  for (std::int64_t p = 0; p < 5; ++p) pl.append(p, kKeys[p][0], kKeys[p][1]);
  c->prefill(nullptr, 5);
  EXPECT_EQ(c->retained_positions(0), (Positions{1, 3, 4}));
  const Positions kept[3] = {{3, 4, 5}, {3, 4, 6}, {4, 6, 7}};
  for (std::int64_t p = 5; p < 8; ++p) {
    pl.append(p, kKeys[p][0], kKeys[p][1]);
    c->decode_step(nullptr, pl.length);
    EXPECT_EQ(c->retained_positions(0), kept[p - 5]) << p;
  }
}

TEST(KeyDiff, NanKeyThrowsAndLeavesTheCacheUnchanged) {
  Layer l;
  kvevict::KeyDiff cache(config(3, 1), l.kv);
  for (std::int64_t p = 0; p < 5; ++p) l.append(p);
  cache.prefill(nullptr, 5);
  const std::vector<float> scores(cache.scores(0), cache.scores(0) + 3);
  const float nan[2] = {std::numeric_limits<float>::quiet_NaN(), 0.0f}, v[2] = {};
  l.kv.append(5, nan, v);
  try {
    cache.decode_step(nullptr, l.kv.length(0));
    ADD_FAILURE() << "a NaN key was accepted";
  } catch (const std::invalid_argument& e) {
    // The NaN spreads through the anchor: the first held slot's score is the first NaN.
    EXPECT_NE(std::string(e.what()).find("kvevict::Cache::decode_step: anchor_score of KV head 0, slot 0 is nan"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(cache.retained_positions(0), (Positions{1, 3, 4, 5}));  // the caller's appended token, unscored
  EXPECT_EQ(std::vector<float>(cache.scores(0), cache.scores(0) + 3), scores);
  EXPECT_EQ(cache.step(), 0u);
  // An infinite key: inf / inf is NaN, refused the same way at prefill, nothing changed.
  kvevict::KVBuffer<float> buf(1, 4, 2);
  kvevict::KVView<float> kv = buf.view();
  kvevict::KeyDiff fresh(config(2, 0), kv);
  const float one[2] = {1, 0}, inf[2] = {std::numeric_limits<float>::infinity(), 0.0f};
  kv.append(0, one, v), kv.append(1, inf, v), kv.append(2, one, v);
  EXPECT_THROW(fresh.prefill(nullptr, 3), std::invalid_argument);
  EXPECT_EQ(fresh.budget(), 0u);
}

// A ratio window resolves as H2O's and the tools': floor(0.3 k), at least 1 token when k >= 2.
TEST(KeyDiff, RatioRecentWindowHasH2OsFloor) {
  EXPECT_EQ((kvtest::kept_with_ratio_window_floor<kvevict::KeyDiff, Layer>(5)), (Positions{1, 3, 4}));
}

TEST(KeyDiff, ParamsOfOtherPoliciesAreRefused) {
  Layer l;
  kvtest::expect_refuses_other_policies_params(kvevict::Policy::keydiff, config(3, 1), l.kv);
}

}  // namespace
