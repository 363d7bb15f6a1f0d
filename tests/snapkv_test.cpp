// SnapKV (Li et al. 2024): the observation-window score, pooling, the prefill selection, both decode
// rules, its errors, and the paged twin. Hand-computed expected values.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::rows_aligned;
using Positions = std::vector<std::int64_t>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

kvevict::CacheConfig config(std::size_t k, std::size_t w) {
  kvevict::CacheConfig c;
  c.n_q_heads = 2;  // one GQA group of 2 query heads over 1 KV head
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  return c;
}

/// The hand example: P = 6, 2 query heads, 1 KV head. Every row r has logit 0 at slot r only (so a
/// scored row r adds 1 to slot r), except the observation window (rows 4, 5 with L = 2):
///   q0 row 4: 0 at slot 0            -> slot 0 += 1
///   q0 row 5: 0 at slots 3 and 5     -> slots 3, 5 += 0.5
///   q1 row 4: 0 at slot 2            -> slot 2 += 1
///   q1 row 5: 0 at slot 5            -> slot 5 += 1
/// Raw window scores (summed over the group): [1, 0, 1, 0.5, 0, 1.5].
std::vector<float> example_logits() {
  const std::size_t P = 6;
  std::vector<float> x(2 * P * P, kNegInf);
  auto at = [&](std::size_t h, std::size_t r, std::size_t c) -> float& { return x[(h * P + r) * P + c]; };
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t r = 0; r < 4; ++r) at(h, r, r) = 0.0f;
  at(0, 4, 0) = 0.0f;
  at(0, 5, 3) = 0.0f;
  at(0, 5, 5) = 0.0f;
  at(1, 4, 2) = 0.0f;
  at(1, 5, 5) = 0.0f;
  return x;
}

/// The layer's storage (1 KV head, capacity 16, head_dim 2); `fill()` appends the prompt's 6 tokens
/// (after the cache was built over the empty view).
struct Example {
  kvevict::KVBuffer<float> buf{1, 16, 2};
  kvevict::KVView<float> kv = buf.view();
  void fill() {
    for (int p = 0; p < 6; ++p) append_token(kv, p);
  }
};

std::vector<float> scores_of(const kvevict::CacheInterface& c) {
  return std::vector<float>(c.scores(0), c.scores(0) + c.length(0));
}

TEST(SnapKVScore, PoolClipsTheKernelAtBothEnds) {
  const float in[4] = {1.0f, 0.0f, 0.0f, 4.0f};
  float out[4];
  kvevict::SnapKVScore(2, 3, kvevict::Pooling::max).pool(in, 4, out);
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{1.0f, 1.0f, 4.0f, 4.0f}));
  kvevict::SnapKVScore(2, 3, kvevict::Pooling::avg).pool(in, 4, out);  // zero padding: divide by K
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{1.0f / 3, 1.0f / 3, 4.0f / 3, 4.0f / 3}));
  kvevict::SnapKVScore(2, 1, kvevict::Pooling::avg).pool(in, 4, out);  // K = 1: identity
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{1.0f, 0.0f, 0.0f, 4.0f}));
  kvevict::SnapKVScore(2, 9, kvevict::Pooling::max).pool(in, 4, out);  // kernel wider than the row
  EXPECT_EQ(std::vector<float>(out, out + 4), (std::vector<float>{4.0f, 4.0f, 4.0f, 4.0f}));
}

TEST(SnapKVScore, SelectionScoresPutTheWindowAtFltMax) {
  const float in[5] = {1.0f, 0.0f, 2.0f, 0.5f, 0.25f};
  float out[5];
  kvevict::SnapKVScore(2, 3, kvevict::Pooling::max).selection_scores(in, 5, out);
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>{1.0f, 2.0f, 2.0f, FLT_MAX, FLT_MAX}));
  kvevict::SnapKVScore(8, 3, kvevict::Pooling::max).selection_scores(in, 5, out);  // L > n: all window
  EXPECT_EQ(std::vector<float>(out, out + 5), (std::vector<float>(5, FLT_MAX)));
}

TEST(SnapKVScore, DefaultsAreThePapers) {
  const kvevict::SnapKVScore s;
  EXPECT_EQ(s.observation_window(), 32u);
  EXPECT_EQ(s.kernel(), 7u);
  EXPECT_EQ(s.pooling(), kvevict::Pooling::max);
  const kvevict::PolicyParams p;
  EXPECT_EQ(p.snap_window, 32u);
  EXPECT_EQ(p.snap_kernel, 7u);
  EXPECT_EQ(p.snap_pooling, kvevict::Pooling::max);
  EXPECT_EQ(p.snap_decode, kvevict::SnapDecode::h2o);
}

// K = 1 (no pooling): window {4, 5} + top 2 of [1, 0, 1, 0.5] = slots 0, 2. The stored scores are the raw
// window sums (rows 0..3 not scored: H2O would have added 1 on every diagonal slot).
TEST(SnapKV, KeepsWindowPlusTopScoresOfTheLastLRows) {
  Example e;
  kvevict::SnapKV cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5}));
  EXPECT_EQ(scores_of(cache), (std::vector<float>{1.0f, 1.0f, 0.0f, 1.5f}));
  EXPECT_TRUE(rows_aligned(e.kv));
}

// k = 3: one key token; slots 0 and 2 tie at 1 -> the older (0) stays.
TEST(SnapKV, TiesGoToTheOlderToken) {
  Example e;
  kvevict::SnapKV cache(config(3, 0), e.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 4, 5}));
}

// K = 3, max: pooled [1, 1, 1, 1] -> all tie -> slots 0, 1 (older first); slot 1 had raw score 0.
TEST(SnapKV, MaxPoolingKeepsTheNeighbours) {
  Example e;
  kvevict::SnapKV cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 3, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 4, 5}));
  EXPECT_EQ(scores_of(cache), (std::vector<float>{1.0f, 0.0f, 0.0f, 1.5f}));
}

// K = 3, avg: pooled [1/3, 2/3, 1.5/3, 1.5/3] -> slot 1, then 2 and 3 tie at 0.5 -> 2.
TEST(SnapKV, AvgPoolingDividesByTheKernel) {
  Example e;
  kvevict::SnapKV cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 3, kvevict::Pooling::avg));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{1, 2, 4, 5}));
}

// A decode recent window w > L keeps the last w prompt tokens too.
TEST(SnapKV, DecodeWindowLargerThanLIsKept) {
  Example e;
  kvevict::SnapKV cache(config(4, 3), e.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 3, 4, 5}));  // 3, 4, 5 recent; top 1 of [0, 3): 0
  EXPECT_EQ(cache.recent_window(), 3u);
}

// Decoding: both query heads put all attention on the new slot (4) -> scores [1, 1, 0, 1.5, 2].
std::vector<float> step_logits() { return {kNegInf, kNegInf, kNegInf, kNegInf, 0.0f, kNegInf, kNegInf, kNegInf, kNegInf, 0.0f}; }

TEST(SnapKV, DecodeH2OAccumulatesAndEvictsTheLowestScore) {
  Example e;
  kvevict::SnapKV cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  append_token(e.kv, 6);
  const auto s = step_logits();
  cache.decode_step(s.data(), 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 5, 6}));  // position 4 (score 0) went
  EXPECT_TRUE(rows_aligned(e.kv));
}

TEST(SnapKV, DecodeWindowEvictsTheOldest) {
  Example e;
  kvevict::SnapKVWindow cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5}));
  append_token(e.kv, 6);
  const auto s = step_logits();
  cache.decode_step(s.data(), 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{2, 4, 5, 6}));
  EXPECT_TRUE(rows_aligned(e.kv));
}

// A prompt shorter than L: every row is in the window; P <= k keeps everything.
TEST(SnapKV, ShortPromptKeepsEverything) {
  Example e;
  kvevict::SnapKV cache(config(8, 0), e.kv, kvevict::SnapKVScore(8, 7, kvevict::Pooling::max));
  e.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(scores_of(cache), (std::vector<float>{3.0f, 2.0f, 3.0f, 2.5f, 0.0f, 1.5f}));  // every row scored
}

template <class F>
void expect_invalid(F f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument: " << message;
  } catch (const std::invalid_argument& err) {
    EXPECT_EQ(std::string(err.what()), message);
  }
}

TEST(SnapKVErrors, ParametersAreCheckedAtConstruction) {
  expect_invalid([] { kvevict::SnapKVScore(0); }, "kvevict::SnapKVScore: observation window L must be >= 1 (got 0)");
  expect_invalid([] { kvevict::SnapKVScore(4, 4); },
                 "kvevict::SnapKVScore: pooling kernel K must be odd and >= 1 (got 4)");
  expect_invalid([] { kvevict::SnapKVScore(4, 0); },
                 "kvevict::SnapKVScore: pooling kernel K must be odd and >= 1 (got 0)");
  Example e;
  expect_invalid([&] { kvevict::SnapKV(config(4, 0), e.kv, kvevict::SnapKVScore(5)); },
                 "kvevict::Cache: SnapKV observation window L = 5 exceeds budget k = 4");
}

TEST(SnapKVErrors, MakeCacheNamesTheParameter) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  kvevict::PolicyParams p;
  p.snap_kernel = 6;
  expect_invalid([&] { (void)kvevict::make_cache(kvevict::Policy::snapkv, config(8, 0), buf.view(), p); },
                 "kvevict::make_cache: snap_kernel (SnapKV pooling kernel K) must be odd and >= 1 (got 6)");
  p = kvevict::PolicyParams();
  p.snap_window = 0;
  expect_invalid([&] { (void)kvevict::make_cache(kvevict::Policy::snapkv, config(8, 0), buf.view(), p); },
                 "kvevict::make_cache: snap_window (SnapKV observation window L) must be >= 1 (got 0)");
  p = kvevict::PolicyParams();  // L = 32 > k = 8
  expect_invalid([&] { (void)kvevict::make_cache(kvevict::Policy::snapkv, config(8, 0), buf.view(), p); },
                 "kvevict::Cache: SnapKV observation window L = 32 exceeds budget k = 8");
  EXPECT_EQ(kvevict::parse_policy("snapkv"), kvevict::Policy::snapkv);
  EXPECT_STREQ(kvevict::policy_name(kvevict::Policy::snapkv), "snapkv");
  EXPECT_TRUE(kvevict::takes_recent_window(kvevict::Policy::snapkv));
  expect_invalid([] { kvevict::parse_pooling("mean"); },
                 "kvevict::parse_pooling: unknown pooling 'mean' (expected max or avg)");
  expect_invalid([] { kvevict::parse_snap_decode("tova"); },
                 "kvevict::parse_snap_decode: unknown decode rule 'tova' (expected h2o, window or keyformer)");
  EXPECT_EQ(kvevict::parse_snap_decode("keyformer"), kvevict::SnapDecode::keyformer);
  EXPECT_STREQ(kvevict::snap_decode_name(kvevict::SnapDecode::keyformer), "keyformer");
  p = kvevict::PolicyParams();  // Keyformer's decode needs its horizon T, as keyformer does
  p.snap_window = 2;
  p.snap_decode = kvevict::SnapDecode::keyformer;
  expect_invalid([&] { (void)kvevict::make_cache(kvevict::Policy::snapkv, config(8, 0), buf.view(), p); },
                 "kvevict::LinearTemperature: horizon T must be >= 1 (got 0)");
}

// The composed policy, SnapKV's prefill then Keyformer's decode (noise off, tau 1 -> 2 over T = 2 steps):
// the prefill is SnapKV's to the bit (tau_0 = 1, no noise); a decode step adds softmax(x / tau_1),
// tau_1 = 1.5, where SnapKV (H2O's decode) adds softmax(x).
TEST(ObservationWindow, KeyformerDecodeAddsTheTemperedSoftmax) {
  Example e, f;
  kvevict::SnapKVKeyformer cache(config(4, 1), e.kv,
                                 kvevict::ObservationWindowScore<kvevict::GumbelLogitScore>(
                                     2, 1, kvevict::Pooling::max, kvevict::GumbelLogitScore{false}),
                                 kvevict::LinearTemperature(1.0f, 2.0f, 2));
  kvevict::SnapKV snap(config(4, 1), f.kv, kvevict::SnapKVScore(2, 1, kvevict::Pooling::max));
  e.fill();
  f.fill();
  const auto x = example_logits();
  cache.prefill(x.data(), 6);
  snap.prefill(x.data(), 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5}));
  EXPECT_EQ(scores_of(cache), scores_of(snap));
  // Step: token 6 appended at slot 4; both query heads give logits [ln 2, 0, 0, 0, 0] over slots 0..4
  // (slot 0 = position 0). softmax(x / 1.5): e^(ln2/1.5) = 2^(2/3) against four 1s.
  append_token(e.kv, 6);
  append_token(f.kv, 6);
  const float l2 = std::log(2.0f);
  const std::vector<float> row{l2, 0, 0, 0, 0, l2, 0, 0, 0, 0};
  const std::vector<float> before = scores_of(cache);
  cache.decode_step(row.data(), 5);
  snap.decode_step(row.data(), 5);
  EXPECT_FLOAT_EQ(cache.temperature(), 1.5f);
  const double a = std::pow(2.0, 2.0 / 3.0), z = a + 4.0;  // tempered; plain: 2 / 6 and 1 / 6
  // Scores by slot [1 + 2a/z, 1 + 2/z, 0 + 2/z, 1.5 + 2/z, 2/z]; w = 1 keeps the new token (slot 4), so the
  // victim is the lowest of slots 0..3: slot 2 (position 4), in both caches; slot 4 moves into its place.
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 5, 6}));
  EXPECT_EQ(snap.retained_positions(0), (Positions{0, 2, 5, 6}));
  const std::vector<float> got = scores_of(cache), plain = scores_of(snap);
  ASSERT_EQ(got.size(), 4u);
  // Slots after the move: 0 = position 0, 1 = position 2, 2 = position 6 (moved from slot 4), 3 = position 5.
  EXPECT_NEAR(got[0], before[0] + 2.0 * a / z, 1e-6);
  EXPECT_NEAR(got[1], before[1] + 2.0 / z, 1e-6);
  EXPECT_NEAR(got[2], 2.0 / z, 1e-6);
  EXPECT_NEAR(got[3], before[3] + 2.0 / z, 1e-6);
  EXPECT_NEAR(plain[0], before[0] + 2.0 * 2.0 / 6.0, 1e-6);
  EXPECT_NEAR(plain[2], 2.0 / 6.0, 1e-6);
}

// With L = P <= k nothing is cut and every prompt row is scored, so SnapKV's prefill over Keyformer's
// decode is Keyformer itself, noise included (the same seeded draws): same scores and kept positions, bit
// for bit, after prefill and after every decode step of a long run.
TEST(ObservationWindow, KeyformerDecodeWithTheWholePromptIsKeyformer) {
  kvevict::KVBuffer<float> ba(2, 24, 4), bb(2, 24, 4);
  auto ka = ba.view(), kb = bb.view();
  kvevict::CacheConfig c = config(8, 3);
  c.n_q_heads = 4;
  c.seed = 11;
  kvevict::Keyformer kf(c, ka, kvevict::GumbelLogitScore{true}, kvevict::LinearTemperature(1.0f, 2.0f, 12));
  kvevict::SnapKVKeyformer sk(c, kb,
                              kvevict::ObservationWindowScore<kvevict::GumbelLogitScore>(
                                  8, 3, kvevict::Pooling::max, kvevict::GumbelLogitScore{true}),
                              kvevict::LinearTemperature(1.0f, 2.0f, 12));
  for (int p = 0; p < 8; ++p) append_token(ka, p), append_token(kb, p);
  kvevict::Xoshiro256pp gen(3);
  std::vector<float> x(4 * 8 * 8);
  kvevict::fill_gumbel(gen, x.data(), x.size());
  kf.prefill(x.data(), 8);
  sk.prefill(x.data(), 8);
  for (int t = 8; t < 20; ++t) {
    for (std::size_t h = 0; h < 2; ++h) {
      ASSERT_EQ(kf.retained_positions(h), sk.retained_positions(h)) << "step " << t << " kv_head " << h;
      ASSERT_EQ(std::vector<float>(kf.scores(h), kf.scores(h) + kf.length(h)),
                std::vector<float>(sk.scores(h), sk.scores(h) + sk.length(h)));
    }
    append_token(ka, t), append_token(kb, t);
    std::vector<float> row(4 * ka.length(0));
    kvevict::fill_gumbel(gen, row.data(), row.size());
    kf.decode_step(row.data(), ka.length(0));
    sk.decode_step(row.data(), kb.length(0));
  }
  EXPECT_EQ(kf.retained_positions(0), sk.retained_positions(0));
  EXPECT_EQ(sk.length(0), 8u);
}

// The runtime factory builds the composition from PolicyParams::snap_decode = keyformer.
TEST(ObservationWindow, MakeCacheBuildsTheKeyformerDecode) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  kvevict::PolicyParams p;
  p.snap_window = 2;
  p.snap_kernel = 1;
  p.snap_decode = kvevict::SnapDecode::keyformer;
  p.gumbel_noise = false;
  p.horizon = 2;
  auto cache = kvevict::make_cache(kvevict::Policy::snapkv, config(4, 1), buf.view(), p);
  EXPECT_NE(dynamic_cast<kvevict::SnapKVKeyformer*>(cache.get()), nullptr);
  auto kv = buf.view();
  for (int q = 0; q < 6; ++q) append_token(kv, q);
  const auto x = example_logits();
  cache->prefill(x.data(), 6);
  EXPECT_EQ(cache->retained_positions(0), (Positions{0, 2, 4, 5}));
}

// A ratio budget resolves k at prefill: L > k throws there, with the cache and view unchanged.
TEST(SnapKVErrors, RatioBudgetChecksLAtPrefill) {
  Example e;
  kvevict::CacheConfig c = config(4, 0);
  c.budget = kvevict::Budget::ratio(0.5);  // k = 3
  kvevict::SnapKV cache(c, e.kv, kvevict::SnapKVScore(4, 1));
  e.fill();
  const auto x = example_logits();
  expect_invalid([&] { cache.prefill(x.data(), 6); },
                 "kvevict::Cache::prefill: SnapKV observation window L = 4 exceeds budget k = 3");
  EXPECT_EQ(e.kv.length(0), 6u);
  EXPECT_EQ(cache.budget(), 0u);
}

TEST(SnapKVErrors, ChunkedPrefillIsRejected) {
  Example e;
  kvevict::SnapKV cache(config(4, 0), e.kv, kvevict::SnapKVScore(2, 1));
  e.fill();
  const auto x = example_logits();  // rows of a 6-token chunk: [q][6][6]
  expect_invalid([&] { cache.prefill_chunk(x.data(), 6, 6); },
                 "kvevict::Cache::prefill_chunk: SnapKV scores the last L prompt rows, unknown until the prompt "
                 "ends; use prefill() with the whole prompt");
  cache.prefill(x.data(), 6);  // unchanged: the one-shot prefill still works
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2, 4, 5}));
  kvevict::CacheConfig c = config(4, 0);
  c.bounded_prefill = true;
  c.max_prefill_chunk = 2;
  kvevict::KVBuffer<float> buf(1, 16, 2);
  expect_invalid([&] { kvevict::SnapKV(c, buf.view(), kvevict::SnapKVScore(2, 1)); },
                 "kvevict::Cache: bounded_prefill is not supported by SnapKV (it scores the last L prompt rows)");
}

// The cache invariants over a long run (cache_test.cpp's style), for both decode rules and 16-bit
// KV: K/V rows stay with their positions, every KV head holds k, the recent window (w = 2) is the two
// newest positions, an evicted token never returns, restore_position_order sorts the slots.
template <class T, class Cache>
void long_run_invariants() {
  kvevict::KVBuffer<T> buf(2, 12, 4);
  auto kv = buf.view();
  kvevict::CacheConfig c = config(6, 2);
  c.n_q_heads = 4;
  Cache cache(c, kv, kvevict::SnapKVScore(3, 3, kvevict::Pooling::avg));
  for (int p = 0; p < 8; ++p) append_token(kv, p);
  kvevict::Xoshiro256pp gen(5);
  std::vector<float> x(4 * 8 * 8);
  kvevict::fill_gumbel(gen, x.data(), x.size());  // arbitrary finite logits
  cache.prefill(x.data(), 8);
  std::vector<std::vector<bool>> gone(2, std::vector<bool>(20, false));
  for (int t = 8; t < 20; ++t) {
    std::vector<Positions> before{cache.retained_positions(0), cache.retained_positions(1)};
    append_token(kv, t);
    std::vector<float> row(4 * kv.length(0));
    kvevict::fill_gumbel(gen, row.data(), row.size());
    cache.decode_step(row.data(), kv.length(0));
    ASSERT_TRUE(rows_aligned(kv));
    for (std::size_t h = 0; h < 2; ++h) {
      const Positions now = cache.retained_positions(h);
      ASSERT_EQ(now.size(), 6u);
      for (std::int64_t p : before[h])
        if (!std::binary_search(now.begin(), now.end(), p)) gone[h][static_cast<std::size_t>(p)] = true;
      for (std::int64_t p : now) ASSERT_FALSE(gone[h][static_cast<std::size_t>(p)]) << "position " << p << " returned";
      ASSERT_EQ(now[5], t);
      ASSERT_EQ(now[4], t - 1);
    }
  }
  cache.restore_position_order();
  ASSERT_TRUE(rows_aligned(kv));
  for (std::size_t h = 0; h < 2; ++h)
    EXPECT_EQ(Positions(cache.positions(h), cache.positions(h) + cache.length(h)), cache.retained_positions(h));
}

TEST(SnapKV, LongRunKeepsTheCacheInvariants) {
  long_run_invariants<float, kvevict::SnapKV>();
  long_run_invariants<Eigen::half, kvevict::SnapKV>();
  long_run_invariants<float, kvevict::SnapKVWindow>();
  long_run_invariants<Eigen::bfloat16, kvevict::SnapKVWindow>();
}

// The paged twin (token unit == contiguous shared_heads, bit for bit) is in paged_eviction_test.cpp.

}  // namespace
