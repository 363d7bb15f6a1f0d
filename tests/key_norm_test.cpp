// KeyNormScore / KeyNorm (score/score_policies.hpp, presets.hpp): a token's score is 1 / (1 + ||k||), set from
// its key when it enters; no logits. Hand-computed kept sets and scores, the Policy::knorm factory, chunked
// prefill, GQA (per head and shared), the paged twin, kvpress's rule (w = 0 keeps the k smallest norms) against
// a sort, and the errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
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

/// One KV head, head_dim 2, capacity 9: token p's key is (norm[p], 0).
constexpr float kNorm[8] = {1, 5, 2, 6, 3, 7, 0.5f, 8};
struct Layer {
  kvevict::KVBuffer<float> buf{1, 9, 2};
  kvevict::KVView<float> kv = buf.view();
  void append(std::int64_t p) {
    const float k[2] = {kNorm[p], 0.0f}, v[2] = {};
    kv.append(p, k, v);
  }
};

using kvtest::scores_by_position;

TEST(KeyNorm, ScoreIsOneOverOnePlusTheNorm) {
  const kvevict::KeyNormScore s;
  const float k[3] = {3.0f, 4.0f, 0.0f};
  EXPECT_EQ(s.key_score(k, 3), 1.0f / 6.0f);
  EXPECT_EQ(s.key_score(k, 0), 1.0f);
  const float inf[1] = {std::numeric_limits<float>::infinity()};
  EXPECT_EQ(s.key_score(inf, 1), 0.0f);
}

// k = 4, w = 1. Prefill of 0..5: the recent window {5}, then the three smallest norms of 0..4: 0 (1), 2 (2), 4 (3).
// Token 6 (norm 0.5): recent {6}, the victim is the largest norm among 0, 2, 4, 5: 5 (7). Token 7 (8): victim 4 (3).
TEST(KeyNorm, KeepsTheSmallestNormsBesideTheRecentWindow) {
  Layer l;
  kvevict::KeyNorm cache(config(4, 1), l.kv);
  for (std::int64_t p = 0; p < 6; ++p) l.append(p);
  cache.prefill(nullptr, 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5}));
  EXPECT_EQ(scores_by_position(cache), (std::vector<float>{0.5f, 1.0f / 3.0f, 0.25f, 0.125f}));
  l.append(6);
  cache.decode_step(nullptr, l.kv.length(0));
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 6}));
  l.append(7);
  cache.decode_step(nullptr, l.kv.length(0));
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 6, 7}));
  EXPECT_EQ(scores_by_position(cache), (std::vector<float>{0.5f, 1.0f / 3.0f, 1.0f / 1.5f, 1.0f / 9.0f}));
}

// make_cache(Policy::knorm) is the preset; logits, when given, are ignored; chunked prefill equals one-shot.
TEST(KeyNorm, FactoryIgnoresLogitsAndChunksEqualOneShot) {
  EXPECT_EQ(kvevict::parse_policy("knorm"), kvevict::Policy::knorm);
  EXPECT_STREQ(kvevict::policy_name(kvevict::Policy::knorm), "knorm");
  EXPECT_TRUE(kvevict::takes_recent_window(kvevict::Policy::knorm));
  kvtest::expect_factory_and_chunks_equal_preset<kvevict::KeyNorm, Layer>(kvevict::Policy::knorm, config(4, 1), 6, 8,
                                                                           [](const kvevict::CacheInterface&) {});
}

// Two KV heads: per head each keeps its own smallest norms; shared, the sum of the two heads' scores ranks.
TEST(KeyNorm, GqaPerHeadAndShared) {
  // head 0 norms {1, 4, 2, 8}, head 1 norms {8, 1, 4, 2} (key (n, 0)), k = 2, w = 0.
  const float n0[4] = {1, 4, 2, 8}, n1[4] = {8, 1, 4, 2};
  for (bool shared : {false, true}) {
    kvevict::KVBuffer<float> buf(2, 4, 2);
    kvevict::KVView<float> kv = buf.view();
    kvevict::CacheConfig cfg = config(2, 0, 4);
    cfg.shared_heads = shared;
    auto c = kvevict::make_cache(kvevict::Policy::knorm, cfg, kv);
    for (std::int64_t p = 0; p < 4; ++p) {
      const float k[4] = {n0[p], 0.0f, n1[p], 0.0f}, v[4] = {};
      kv.append(p, k, v);
    }
    c->prefill(nullptr, 4);
    if (!shared) {
      EXPECT_EQ(c->retained_positions(0), (Positions{0, 2}));
      EXPECT_EQ(c->retained_positions(1), (Positions{1, 3}));
    } else {
      // sums: 1/2 + 1/9, 1/5 + 1/2, 1/3 + 1/5, 1/9 + 1/3 -> the top two are 1 (0.700) and 0 (0.611)
      EXPECT_EQ(c->retained_positions(0), (Positions{0, 1}));
      EXPECT_EQ(c->retained_positions(1), (Positions{0, 1}));
    }
  }
}

// kvpress's KnormPress rule: with w = 0 the prefill keeps the k smallest key norms (random keys, a sort).
TEST(KeyNorm, NoRecentWindowKeepsTheKSmallestNorms) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t P = 64, d = 8, k = 1 + trial * 3;
    kvevict::KVBuffer<float> buf(1, P, d);
    kvevict::KVView<float> kv = buf.view();
    auto c = kvevict::make_cache(kvevict::Policy::knorm, config(k, 0), kv);
    std::vector<float> norms(P);
    for (std::size_t p = 0; p < P; ++p) {
      std::vector<float> key(d), v(d);
      for (float& e : key) e = normal(rng);
      float sq = 0.0f;
      for (float e : key) sq += e * e;
      norms[p] = std::sqrt(sq);
      kv.append(static_cast<std::int64_t>(p), key.data(), v.data());
    }
    c->prefill(nullptr, P);
    std::vector<std::int64_t> order(P);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return norms[a] < norms[b]; });
    Positions want(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(c->retained_positions(0), want) << "k = " << k;
  }
}

using kvtest::PagedLayer;

TEST(KeyNorm, PagedTwinKeepsTheSamePositions) {
  kvevict::CacheConfig cfg = config(4, 1);
  cfg.shared_heads = true;
  PagedLayer pl;
  auto c = kvevict::make_paged_cache(kvevict::Policy::knorm, cfg, kvevict::PagedEvictionConfig{}, pl.view, pl.pool);
  for (std::int64_t p = 0; p < 6; ++p) pl.append(p, kNorm[p], 0.0f);
  c->prefill(nullptr, 6);
  EXPECT_EQ(c->retained_positions(0), (Positions{0, 2, 4, 5}));
  for (std::int64_t p = 6; p < 8; ++p) {
    pl.append(p, kNorm[p], 0.0f);
    c->decode_step(nullptr, pl.length);
  }
  EXPECT_EQ(c->retained_positions(0), (Positions{0, 2, 6, 7}));
}

TEST(KeyNorm, NanKeyThrowsNamingTheSlotAndLeavesTheCacheUnchanged) {
  Layer l;
  kvevict::KeyNorm cache(config(4, 1), l.kv);
  for (std::int64_t p = 0; p < 6; ++p) l.append(p);
  cache.prefill(nullptr, 6);
  const Positions before = cache.retained_positions(0);
  const std::vector<float> scores(cache.scores(0), cache.scores(0) + 4);
  const float k[2] = {std::numeric_limits<float>::quiet_NaN(), 0.0f}, v[2] = {};
  l.kv.append(6, k, v);
  try {
    cache.decode_step(nullptr, l.kv.length(0));
    ADD_FAILURE() << "a NaN key was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("key_score of KV head 0, slot 4 is nan"), std::string::npos) << e.what();
  }
  // The cache is as before the call; the view holds the caller's appended token, unscored.
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5, 6}));
  EXPECT_EQ(std::vector<float>(cache.scores(0), cache.scores(0) + 4), scores);
  EXPECT_EQ(before, (Positions{0, 2, 4, 5}));
}

// A ratio window resolves as H2O's and the tools': floor(0.3 k), at least 1 token when k >= 2.
TEST(KeyNorm, RatioRecentWindowHasH2OsFloor) {  // 5 recent, then the norms 1 and 2
  EXPECT_EQ((kvtest::kept_with_ratio_window_floor<kvevict::KeyNorm, Layer>(6)), (Positions{0, 2, 5}));
}

TEST(KeyNorm, ParamsOfOtherPoliciesAreRefused) {
  Layer l;
  kvtest::expect_refuses_other_policies_params(kvevict::Policy::knorm, config(4, 1), l.kv);
}

}  // namespace
