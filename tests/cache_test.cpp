// Tests of kvevict::Cache with exact expected values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::causal_logits;
using kvtest::rows_aligned;
using Positions = std::vector<std::int64_t>;

constexpr float kInf = std::numeric_limits<float>::infinity();

kvevict::CacheConfig config(std::size_t n_q, std::size_t k, std::size_t w, std::uint64_t seed = 0) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.seed = seed;
  return c;
}

using DeterministicKeyformer =
    kvevict::Cache<kvevict::GumbelLogitScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;

// ---------------------------------------------------------------------------
// Score accumulation (H2O), prefill cut, decode eviction with hole filling.

TEST(Cache, H2OPrefillScoresEvictsAndFillsTheHoleWithTheLastSlot) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 2, 1), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  // All-zero logits: rows give [1], [1/2, 1/2], [1/3, 1/3, 1/3].
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 2), (Positions{0, 2}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 0.5f + 1.0f / 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 1.0f / 3);
  EXPECT_TRUE(rows_aligned(kv));

  // Decode: position 3 joins; uniform row adds 1/3 each; position 2 (score 2/3) goes,
  // its slot 1 is filled with the new token from slot 2.
  append_token(kv, 3);
  const float row[] = {0.0f, 0.0f, 0.0f};
  cache.decode_step(row, 3);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 2), (Positions{0, 3}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 0.5f + 2.0f / 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 1.0f / 3);  // the new token's own-step score
  EXPECT_TRUE(rows_aligned(kv));
  EXPECT_EQ(cache.step(), 1u);
}

TEST(Cache, NewTokenJoinsWithItsOwnStepScoreAndNothingEvictedBelowBudget) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 5, 1), kv);
  append_token(kv, 0);
  const float x0[] = {0.0f};
  cache.prefill(x0, 1);
  append_token(kv, 1);
  const float row[] = {0.0f, std::log(3.0f)};
  cache.decode_step(row, 2);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.25f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.75f);
}

TEST(Cache, MinusInfinityLogitsAddNothing) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 8, 0), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  // Token 1 is masked for every query.
  const auto x = causal_logits(1, 3, [](auto, auto, std::size_t c) { return c == 1 ? -kInf : 0.0f; });
  cache.prefill(x.data(), 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 1.0f + 0.5f);
  EXPECT_EQ(cache.scores(0)[1], 0.0f);
  EXPECT_FLOAT_EQ(cache.scores(0)[2], 0.5f);
}

// ---------------------------------------------------------------------------
// GQA and heads.

TEST(Cache, GqaScoreOfAKvHeadIsTheSumOverItsQueryHeads) {
  // 2 KV heads, 4 query heads: q0, q1 -> kv0; q2, q3 -> kv1.
  kvevict::KVBuffer<float> buf(2, 9, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(4, 8, 0), kv);
  append_token(kv, 0);
  append_token(kv, 1);
  // Row 1 per query head: q0 [0, ln3] q1 [0, 0] q2 [ln3, 0] q3 [-inf, 0]; row 0 gives 1 each.
  const float l3 = std::log(3.0f);
  const float rows[4][2] = {{0.0f, l3}, {0.0f, 0.0f}, {l3, 0.0f}, {-kInf, 0.0f}};
  const auto x = causal_logits(4, 2, [&](std::size_t h, std::size_t r, std::size_t c) {
    return r == 0 ? 0.0f : rows[h][c];
  });
  cache.prefill(x.data(), 2);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 2.0f + 0.25f + 0.5f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.75f + 0.5f);
  EXPECT_FLOAT_EQ(cache.scores(1)[0], 2.0f + 0.75f + 0.0f);
  EXPECT_FLOAT_EQ(cache.scores(1)[1], 0.25f + 1.0f);
  EXPECT_EQ(cache.group_size(), 2u);
}

TEST(Cache, KvHeadsSelectIndependentlyOrSharedWhenAsked) {
  // Head 0 attends to token 0, head 1 to token 1; k = 2, w = 1 keeps token 2 plus one key token.
  const auto x = causal_logits(2, 3, [](std::size_t h, std::size_t r, std::size_t c) {
    if (r == 0) return 0.0f;
    return c == h ? 5.0f : 0.0f;
  });
  {
    kvevict::KVBuffer<float> buf(2, 8, 2);
    auto kv = buf.view();
    kvevict::H2O cache(config(2, 2, 1), kv);
    for (int p = 0; p < 3; ++p) append_token(kv, p);
    cache.prefill(x.data(), 3);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{1, 2}));
    EXPECT_TRUE(rows_aligned(kv));
  }
  {
    kvevict::KVBuffer<float> buf(2, 8, 2);
    auto kv = buf.view();
    auto c = config(2, 2, 1);
    c.shared_heads = true;
    kvevict::H2O cache(c, kv);
    for (int p = 0; p < 3; ++p) append_token(kv, p);
    cache.prefill(x.data(), 3);
    // Summed over heads token 0 has 1 + p0 + p0' > token 1: both heads keep {0, 2}.
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{0, 2}));
    EXPECT_TRUE(rows_aligned(kv));
  }
}

// ---------------------------------------------------------------------------
// Temperature.

TEST(Cache, HigherTemperatureFlattensOneStepButKeepsItsOrder) {
  auto run = [](float tau) {
    kvevict::KVBuffer<float> buf(1, 9, 2);
    auto kv = buf.view();
    DeterministicKeyformer cache(config(1, 8, 0), kv, kvevict::GumbelLogitScore{false},
                                 kvevict::ConstantTemperature(tau));
    for (int p = 0; p < 4; ++p) append_token(kv, p);
    const float row[] = {2.0f, 0.5f, -1.0f, 1.0f};
    // Only the last row matters for the comparison: the others are masked out.
    const auto x = causal_logits(1, 4, [&](auto, std::size_t r, std::size_t c) {
      return r == 3 ? row[c] : (c == r ? 0.0f : -kInf);
    });
    cache.prefill(x.data(), 4);
    std::vector<float> inc(cache.scores(0), cache.scores(0) + 4);
    inc[0] -= 1.0f;  // rows 0..2 gave their own token 1 each
    inc[1] -= 1.0f;
    inc[2] -= 1.0f;
    return inc;
  };
  const auto cold = run(1.0f), hot = run(2.0f);
  EXPECT_NEAR(cold[0], std::exp(2.0) / (std::exp(2.0) + std::exp(0.5) + std::exp(-1.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(hot[0], std::exp(1.0) / (std::exp(1.0) + std::exp(0.25) + std::exp(-0.5) + std::exp(0.5)), 1e-6);
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = 0; b < 4; ++b) EXPECT_EQ(cold[a] < cold[b], hot[a] < hot[b]);
  EXPECT_LT(hot[0], cold[0]);
  EXPECT_GT(hot[2], cold[2]);
}

TEST(Cache, TemperatureOverSeveralRowsCanChangeTheSelectionButNeverTheBudget) {
  // Found by search (see commit message): k = 2, w = 1 keeps token 3 plus the best of {0, 1, 2}.
  // tau = 1: scores [1.380, 1.456, 1.132] -> keeps 1; tau = 2: [1.645, 1.348, 0.905] -> keeps 0.
  const float L[4][4] = {{3, 0, 0, 0}, {-3, -1, 0, 0}, {0, 3, 3, 0}, {0, -1, 1, -2}};
  auto run = [&](float tau) {
    kvevict::KVBuffer<float> buf(1, 8, 2);
    auto kv = buf.view();
    DeterministicKeyformer cache(config(1, 2, 1), kv, kvevict::GumbelLogitScore{false},
                                 kvevict::ConstantTemperature(tau));
    for (int p = 0; p < 4; ++p) append_token(kv, p);
    const auto x = causal_logits(1, 4, [&](auto, std::size_t r, std::size_t c) { return L[r][c]; });
    cache.prefill(x.data(), 4);
    EXPECT_EQ(cache.length(0), 2u);
    return cache.retained_positions(0);
  };
  EXPECT_EQ(run(1.0f), (Positions{1, 3}));
  EXPECT_EQ(run(2.0f), (Positions{0, 3}));
}

TEST(Cache, KeyformerUsesTauInitAtPrefillAndTheLinearScheduleAfter) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(1, 3, 1), kv, kvevict::GumbelLogitScore{false},
                           kvevict::LinearTemperature(1.0f, 2.0f, 2));
  append_token(kv, 0);
  const float x0[] = {0.0f};
  cache.prefill(x0, 1);
  EXPECT_FLOAT_EQ(cache.temperature(), 1.0f);
  std::vector<float> row(8, 0.0f);
  const float expected_tau[] = {1.5f, 2.0f, 2.0f, 2.0f};
  for (int t = 1; t <= 4; ++t) {
    append_token(kv, t);
    row[0] = 2.0f;  // tau divides this logit
    cache.decode_step(row.data(), kv.length(0));
    EXPECT_FLOAT_EQ(cache.temperature(), expected_tau[t - 1]);
    EXPECT_LE(cache.length(0), 3u);  // the budget, whatever tau
  }
  // Step 1 at tau = 1.5 on [2, 0]: token 0 gains e^(2/1.5) / (e^(2/1.5) + 1).
  kvevict::KVBuffer<float> buf2(1, 16, 2);
  auto kv2 = buf2.view();
  kvevict::Keyformer one(config(1, 3, 1), kv2, kvevict::GumbelLogitScore{false},
                         kvevict::LinearTemperature(1.0f, 2.0f, 2));
  append_token(kv2, 0);
  one.prefill(x0, 1);
  append_token(kv2, 1);
  const float r1[] = {2.0f, 0.0f};
  one.decode_step(r1, 2);
  const double e = std::exp(2.0 / 1.5);
  EXPECT_NEAR(one.scores(0)[0], 1.0 + e / (e + 1.0), 1e-6);
}

// ---------------------------------------------------------------------------
// Gumbel noise: seeding and injection.

std::vector<Positions> keyformer_run(std::uint64_t seed, const float* gumbel_prefill = nullptr) {
  kvevict::KVBuffer<float> buf(2, 32, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(2, 4, 0, seed), kv, kvevict::GumbelLogitScore{true},
                           kvevict::LinearTemperature(1.0f, 2.0f, 8));
  for (int p = 0; p < 16; ++p) append_token(kv, p);
  // All logits equal: only the noise decides which tokens are key tokens.
  const auto x = causal_logits(2, 16, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 16, gumbel_prefill);
  std::vector<Positions> kept{cache.retained_positions(0), cache.retained_positions(1)};
  std::vector<float> row(2 * 5, 0.0f);  // [q_head][n], n = k + 1 = 5
  for (int t = 16; t < 24; ++t) {
    append_token(kv, t);
    cache.decode_step(row.data(), kv.length(0));
    kept.push_back(cache.retained_positions(0));
    kept.push_back(cache.retained_positions(1));
  }
  EXPECT_TRUE(rows_aligned(kv));
  return kept;
}

TEST(Cache, SameSeedSameResultDifferentSeedDifferentResult) {
  EXPECT_EQ(keyformer_run(1), keyformer_run(1));
  EXPECT_NE(keyformer_run(1), keyformer_run(2));
  // Heads draw different noise, so they keep different tokens.
  const auto run = keyformer_run(1);
  EXPECT_NE(run[0], run[1]);
}

TEST(Cache, InjectedGumbelNoiseEqualsAddingItToTheLogits) {
  const std::size_t P = 6, nq = 2;
  kvevict::Xoshiro256pp gen(3);
  std::vector<float> zeta(nq * P * P);
  kvevict::fill_gumbel(gen, zeta.data(), zeta.size());
  const auto x = causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t c) {
    return 0.3f * static_cast<float>(h + 1) * static_cast<float>((r * 7 + c * 3) % 5);
  });
  std::vector<float> x_plus(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) x_plus[i] = x[i] + zeta[i];

  kvevict::KVBuffer<float> a_buf(1, 16, 2), b_buf(1, 16, 2);
  auto a_kv = a_buf.view(), b_kv = b_buf.view();
  kvevict::Keyformer a(config(nq, 3, 1, 11), a_kv, kvevict::GumbelLogitScore{true},
                       kvevict::LinearTemperature(1.0f, 2.0f, 4));
  kvevict::Keyformer b(config(nq, 3, 1, 22), b_kv, kvevict::GumbelLogitScore{false},
                       kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (std::size_t p = 0; p < P; ++p) {
    append_token(a_kv, static_cast<std::int64_t>(p));
    append_token(b_kv, static_cast<std::int64_t>(p));
  }
  a.prefill(x.data(), P, zeta.data());
  b.prefill(x_plus.data(), P);
  ASSERT_EQ(a.retained_positions(0), b.retained_positions(0));
  for (std::size_t s = 0; s < a.length(0); ++s) EXPECT_EQ(a.scores(0)[s], b.scores(0)[s]);

  append_token(a_kv, 10);
  append_token(b_kv, 10);
  const float row[] = {0.5f, -0.5f, 1.0f, 0.0f, 0.25f, -1.0f, 2.0f, 0.0f};
  const float z[] = {0.1f, 1.2f, -0.3f, 0.7f, 2.0f, 0.0f, -1.0f, 0.4f};
  float row_plus[8];
  for (int i = 0; i < 8; ++i) row_plus[i] = row[i] + z[i];
  a.decode_step(row, 4, z);
  b.decode_step(row_plus, 4);
  ASSERT_EQ(a.retained_positions(0), b.retained_positions(0));
  for (std::size_t s = 0; s < a.length(0); ++s) EXPECT_EQ(a.scores(0)[s], b.scores(0)[s]);
}

TEST(Cache, InternalNoiseFollowsTheDocumentedDrawOrder) {
  // Prefill row r of query head h draws ζ[s] = fill_gumbel_row(gumbel_row_key(seed, h, r), s) for slots s <= r.
  const std::size_t P = 4, nq = 2;
  std::vector<float> zeta(nq * P * P, 0.0f);
  for (std::size_t h = 0; h < nq; ++h)
    for (std::size_t r = 0; r < P; ++r)
      kvevict::fill_gumbel_row(kvevict::gumbel_row_key(77, h, r), 0, &zeta[(h * P + r) * P], r + 1);
  const auto x = causal_logits(nq, P, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + c); });
  kvevict::KVBuffer<float> a_buf(1, 9, 2), b_buf(1, 9, 2);
  auto a_kv = a_buf.view(), b_kv = b_buf.view();
  kvevict::Keyformer a(config(nq, 8, 0, 77), a_kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  kvevict::Keyformer b(config(nq, 8, 0, 5), b_kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (std::size_t p = 0; p < P; ++p) {
    append_token(a_kv, static_cast<std::int64_t>(p));
    append_token(b_kv, static_cast<std::int64_t>(p));
  }
  a.prefill(x.data(), P);
  b.prefill(x.data(), P, zeta.data());
  for (std::size_t s = 0; s < P; ++s) EXPECT_EQ(a.scores(0)[s], b.scores(0)[s]);
}

// noise_scale s (issue 35's ablation): a drawn ζ scaled by s is the documented draw times s, bit for bit
// (s = 0.5 scales exactly), at prefill and in a decode step; an injected ζ is scaled the same way.
TEST(Cache, NoiseScaleScalesTheDrawnAndTheInjectedNoise) {
  const std::size_t P = 4, nq = 2;
  std::vector<float> half(nq * P * P, 0.0f);
  for (std::size_t h = 0; h < nq; ++h)
    for (std::size_t r = 0; r < P; ++r) {
      kvevict::fill_gumbel_row(kvevict::gumbel_row_key(77, h, r), 0, &half[(h * P + r) * P], r + 1);
      for (std::size_t c = 0; c <= r; ++c) half[(h * P + r) * P + c] *= 0.5f;
    }
  const auto x = causal_logits(nq, P, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + c); });
  kvevict::KVBuffer<float> a_buf(1, 9, 2), b_buf(1, 9, 2), c_buf(1, 9, 2);
  auto a_kv = a_buf.view(), b_kv = b_buf.view(), c_kv = c_buf.view();
  const kvevict::LinearTemperature tau(1.0f, 2.0f, 4);
  kvevict::Keyformer a(config(nq, 3, 1, 77), a_kv, kvevict::GumbelLogitScore{true, 0.5f}, tau);  // drawn, scaled
  kvevict::Keyformer b(config(nq, 3, 1, 5), b_kv, kvevict::GumbelLogitScore{true, 1.0f}, tau);   // injected 0.5 ζ
  kvevict::Keyformer c(config(nq, 3, 1, 5), c_kv, kvevict::GumbelLogitScore{true, 0.5f}, tau);   // injected ζ, scaled
  std::vector<float> full(half);
  for (float& v : full) v *= 2.0f;
  for (std::size_t p = 0; p < P; ++p)
    for (auto* kv : {&a_kv, &b_kv, &c_kv}) append_token(*kv, static_cast<std::int64_t>(p));
  a.prefill(x.data(), P);
  b.prefill(x.data(), P, half.data());
  c.prefill(x.data(), P, full.data());
  ASSERT_EQ(a.retained_positions(0), b.retained_positions(0));
  for (std::size_t s = 0; s < a.length(0); ++s) {
    EXPECT_EQ(a.scores(0)[s], b.scores(0)[s]);
    EXPECT_EQ(c.scores(0)[s], b.scores(0)[s]);
  }
  // A decode step at position 4 (slot 3): ζ of query head h is fill_gumbel_row(key(77, h, 4)) over the 4 slots.
  for (auto* kv : {&a_kv, &b_kv, &c_kv}) append_token(*kv, 4);
  const float row[] = {0.5f, -0.5f, 1.0f, 0.0f, 0.25f, -1.0f, 2.0f, 0.0f};
  float zs[8], z[8];
  for (std::size_t h = 0; h < nq; ++h) kvevict::fill_gumbel_row(kvevict::gumbel_row_key(77, h, 4), 0, z + 4 * h, 4);
  for (int i = 0; i < 8; ++i) zs[i] = 0.5f * z[i];
  a.decode_step(row, 4);
  b.decode_step(row, 4, zs);
  c.decode_step(row, 4, z);
  ASSERT_EQ(a.retained_positions(0), b.retained_positions(0));
  ASSERT_EQ(c.retained_positions(0), b.retained_positions(0));
  for (std::size_t s = 0; s < a.length(0); ++s) {
    EXPECT_EQ(a.scores(0)[s], b.scores(0)[s]);
    EXPECT_EQ(c.scores(0)[s], b.scores(0)[s]);
  }
}

TEST(CacheErrors, NoiseScaleOutsideZeroOneIsRejected) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  for (float s : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    try {
      kvevict::Keyformer cache(config(2, 3, 1, 1), buf.view(), kvevict::GumbelLogitScore{true, s},
                               kvevict::LinearTemperature(1.0f, 2.0f, 4));
      ADD_FAILURE() << "noise_scale " << s << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("kvevict::Cache: noise_scale must be in (0, 1] (got ", 0), 0u) << e.what();
    }
  }
  kvevict::PolicyParams p;
  p.noise_scale = 0.5f;
  try {
    (void)kvevict::make_cache(kvevict::Policy::h2o, config(2, 3, 1, 1), buf.view(), p);
    ADD_FAILURE() << "noise_scale accepted for h2o";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::make_cache: noise_scale = 0.5 is Keyformer's (policy keyformer, or snapkv with "
                           "snap_decode keyformer); leave it 1 for h2o");
  }
  p.horizon = 4;
  EXPECT_NE(dynamic_cast<kvevict::Keyformer*>(
                kvevict::make_cache(kvevict::Policy::keyformer, config(2, 3, 1, 1), buf.view(), p).get()),
            nullptr);
}

// ---------------------------------------------------------------------------
// Eviction is permanent, positions are original, rows stay aligned (float and 16-bit).

template <class T>
void long_run_keeps_rows_aligned_and_never_readmits() {
  kvevict::KVBuffer<T> buf(2, 12, 4);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(4, 6, 2, 9), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 12));
  for (int p = 0; p < 8; ++p) append_token(kv, p);
  kvevict::Xoshiro256pp gen(1);
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
      // The recent window (w = 2) is the two newest positions.
      ASSERT_EQ(now[5], t);
      ASSERT_EQ(now[4], t - 1);
    }
  }
  cache.restore_position_order();
  ASSERT_TRUE(rows_aligned(kv));
  for (std::size_t h = 0; h < 2; ++h) {
    const Positions slots(cache.positions(h), cache.positions(h) + cache.length(h));
    EXPECT_EQ(slots, cache.retained_positions(h));
  }
}

TEST(Cache, FloatRowsStayAlignedAndEvictedTokensNeverReturn) { long_run_keeps_rows_aligned_and_never_readmits<float>(); }
TEST(Cache, HalfRowsStayAlignedAndEvictedTokensNeverReturn) {
  long_run_keeps_rows_aligned_and_never_readmits<Eigen::half>();
}
TEST(Cache, BFloat16RowsStayAlignedAndEvictedTokensNeverReturn) {
  long_run_keeps_rows_aligned_and_never_readmits<Eigen::bfloat16>();
}

TEST(Cache, RestorePositionOrderKeepsScoresWithTheirTokens) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 3, 1), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);  // scores [11/6, 5/6, 1/3], nothing evicted
  // Step 1: position 0 masked; 1, 2, 3 gain 1/3 -> [11/6, 7/6, 2/3, 1/3]; 2 goes, its slot takes 3.
  append_token(kv, 3);
  const float row1[] = {-kInf, 0.0f, 0.0f, 0.0f};
  cache.decode_step(row1, 4);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 1, 3}));
  // Step 2: only position 3 attended (+1 -> 4/3); 1 (7/6) goes, its slot takes 4.
  append_token(kv, 4);
  const float row2[] = {-kInf, -kInf, 0.0f, -kInf};
  cache.decode_step(row2, 4);
  ASSERT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 4, 3}));
  cache.restore_position_order();
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 3, 4}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 11.0f / 6);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 4.0f / 3);
  EXPECT_EQ(cache.scores(0)[2], 0.0f);
  EXPECT_TRUE(rows_aligned(kv));
}

// restore_position_order() moves tokens between slots; the recent window
// (kept by slot inside the cache) must follow them: a cache that sorts its
// slots every few steps keeps exactly what an unsorted twin keeps.
TEST(Cache, DecodingAfterRestorePositionOrderKeepsTheSameTokens) {
  const std::size_t n_kv = 2, g = 2, k = 10, w = 3;
  auto value = [](std::size_t step, std::size_t h, std::int64_t pos, std::uint64_t salt) {
    kvevict::Xoshiro256pp gen(((step * 1000003u + h) * 1000033u + static_cast<std::uint64_t>(pos)) * 31u + salt);
    return static_cast<float>(gen() >> 40) / 16777216.0f;  // [0, 1)
  };
  for (const bool shared : {false, true}) {
    kvevict::KVBuffer<float> a_buf(n_kv, k + 1, 2), b_buf(n_kv, k + 1, 2);
    auto a_kv = a_buf.view(), b_kv = b_buf.view();
    auto cfg = config(n_kv * g, k, w);
    cfg.shared_heads = shared;
    kvevict::H2O a(cfg, a_kv), b(cfg, b_kv);
    for (int p = 0; p < 6; ++p) {
      append_token(a_kv, p);
      append_token(b_kv, p);
    }
    const auto x = causal_logits(n_kv * g, 6, [&](std::size_t h, std::size_t r, std::size_t c) {
      return 4.0f * value(r, h, static_cast<std::int64_t>(c), 1);
    });
    a.prefill(x.data(), 6);
    b.prefill(x.data(), 6);
    std::vector<float> xa(n_kv * g * (k + 1)), xb(xa.size());
    for (std::size_t t = 1; t <= 60; ++t) {
      const auto pos = static_cast<std::int64_t>(5 + t);
      append_token(a_kv, pos);
      append_token(b_kv, pos);
      const std::size_t n = a_kv.length(0);
      for (std::size_t h = 0; h < n_kv * g; ++h)
        for (std::size_t s = 0; s < n; ++s) {  // a logit is a function of (step, head, position), not of the slot
          xa[h * n + s] = 4.0f * value(100 + t, h, a_kv.head_positions(h / g)[s], 1);
          xb[h * n + s] = 4.0f * value(100 + t, h, b_kv.head_positions(h / g)[s], 1);
        }
      a.decode_step(xa.data(), n);
      b.decode_step(xb.data(), n);
      if (t % 3 == 0) a.restore_position_order();
      for (std::size_t j = 0; j < n_kv; ++j) {
        ASSERT_EQ(a.retained_positions(j), b.retained_positions(j)) << "step " << t << " head " << j;
        const Positions kept = a.retained_positions(j);  // the window: the w newest are always kept
        ASSERT_EQ(kept.back(), pos);
        ASSERT_EQ(kept[kept.size() - w], pos - static_cast<std::int64_t>(w) + 1);
      }
      ASSERT_TRUE(rows_aligned(a_kv));
    }
  }
}

TEST(Cache, PositionsAreNeverRenumberedEvenWithGapsAndOffsets) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 2, 1), kv);
  const std::int64_t prompt[] = {100, 105, 107};
  for (auto p : prompt) append_token(kv, p);
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  EXPECT_EQ(cache.retained_positions(0), (Positions{100, 107}));
  append_token(kv, 200);
  const float row[] = {0.0f, 0.0f, 0.0f};
  cache.decode_step(row, 3);
  EXPECT_EQ(cache.retained_positions(0), (Positions{100, 200}));
}

// ---------------------------------------------------------------------------
// Bad input: clear exception, state unchanged.

struct Snapshot {
  std::vector<std::size_t> lengths;
  std::vector<std::int64_t> positions;
  std::vector<float> scores, k;
  std::size_t step;
  template <class C>
  static Snapshot of(const C& cache, const kvevict::KVView<float>& kv) {
    Snapshot s;
    s.step = cache.step();
    for (std::size_t h = 0; h < kv.n_kv_heads; ++h) {
      s.lengths.push_back(kv.length(h));
      for (std::size_t i = 0; i < kv.length(h); ++i) {
        s.positions.push_back(kv.head_positions(h)[i]);
        s.scores.push_back(cache.scores(h)[i]);
        for (std::size_t d = 0; d < kv.head_dim; ++d) s.k.push_back(kv.k_row(h, i)[d]);
      }
    }
    return s;
  }
  bool operator==(const Snapshot& o) const {
    return lengths == o.lengths && positions == o.positions && scores == o.scores && k == o.k && step == o.step;
  }
};

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::length_error& e) {
    return std::string("length_error: ") + e.what();
  }
  return "no exception";
}

TEST(CacheErrors, PrefillRejectsBadInputAndStaysUsable) {
  kvevict::KVBuffer<float> buf(2, 6, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(4, 3, 1, 5), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  const auto x = causal_logits(4, 4, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + 2 * c); });
  EXPECT_EQ(message_of([&] { cache.decode_step(x.data(), 1); }),
            "kvevict::Cache::decode_step: call prefill() first");
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 0); }),
            "kvevict::Cache::prefill: prompt_len must be >= 1 (got 0)");
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 3); }),
            "kvevict::Cache::prefill: prompt_len = 3 but the view's lengths[0] = 4 (append the prompt's K/V first)");
  EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 4); }), "kvevict::Cache::prefill: logits must be non-null");
  auto bad = x;
  bad[(2 * 4 + 3) * 4 + 1] = std::nanf("");
  EXPECT_EQ(message_of([&] { cache.prefill(bad.data(), 4); }),
            "kvevict::Cache::prefill: logits row 3 of q_head 2 contains NaN or +inf");
  bad[(2 * 4 + 3) * 4 + 1] = kInf;
  EXPECT_NE(message_of([&] { cache.prefill(bad.data(), 4); }), "no exception");
  // Nothing was scored or cut, and the generator did not move: the result equals a fresh cache's.
  EXPECT_EQ(kv.length(0), 4u);
  cache.prefill(x.data(), 4);
  kvevict::KVBuffer<float> buf2(2, 6, 2);
  auto kv2 = buf2.view();
  kvevict::Keyformer fresh(config(4, 3, 1, 5), kv2, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(kv2, p);
  fresh.prefill(x.data(), 4);
  EXPECT_EQ(Snapshot::of(cache, kv), Snapshot::of(fresh, kv2));
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 3); }),
            "kvevict::Cache::prefill: already prefilled; call reset() for a new sequence");
}

TEST(CacheErrors, PrefillRejectsBudgetWindowCapacityAndPositionProblems) {
  const auto x = causal_logits(1, 4, [](auto, auto, auto) { return 0.0f; });
  auto attempt = [&](kvevict::CacheConfig c, std::size_t capacity, const std::vector<std::int64_t>& pos) {
    kvevict::KVBuffer<float> buf(1, capacity, 2);
    auto kv = buf.view();
    kvevict::H2O cache(c, kv);
    for (auto p : pos) append_token(kv, p);
    return message_of([&] { cache.prefill(x.data(), pos.size()); });
  };
  // A token budget is checked at construction (see cache_config_test); a ratio budget at prefill.
  auto ratio = config(1, 2, 3);
  ratio.budget = kvevict::Budget::ratio(0.5);
  EXPECT_EQ(attempt(ratio, 8, {0, 1, 2, 3}),
            "kvevict::RecentTopKSelection: recent window w = 3 exceeds budget k = 2");
  ratio = config(1, 2, 0);
  ratio.budget = kvevict::Budget::ratio(2.0);
  EXPECT_EQ(attempt(ratio, 8, {0, 1, 2, 3}),
            "kvevict::Cache::prefill: budget k = 8 needs a view of capacity >= k + 1 = 9 (a decode step appends "
            "before it evicts), but the capacity is 8");
  EXPECT_EQ(attempt(config(1, 2, 0), 8, {0, 2, 1, 3}),
            "kvevict::Cache::prefill: positions of KV head 0 must be strictly ascending by slot (slot 2 has 1)");
}

TEST(CacheErrors, DecodeStepRejectsBadInputAndLeavesEverythingUnchanged) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(2, 3, 1, 5), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  const auto x = causal_logits(2, 4, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + 2 * c); });
  cache.prefill(x.data(), 4);

  kvevict::KVBuffer<float> twin_buf(2, 8, 2);
  auto twin_kv = twin_buf.view();
  kvevict::Keyformer twin(config(2, 3, 1, 5), twin_kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(twin_kv, p);
  twin.prefill(x.data(), 4);

  std::vector<float> row{0.5f, 0.25f, 0.0f, 1.0f, 0.0f, 0.5f, 0.25f, 2.0f};
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 4); }),
            "kvevict::Cache::decode_step: the view's lengths[0] = 3, expected n = 4 (append the new token's K/V to "
            "every head first)");
  append_token(kv, 4);
  const Snapshot before = Snapshot::of(cache, kv);
  auto nan_row = row;
  nan_row[6] = std::nanf("");
  EXPECT_EQ(message_of([&] { cache.decode_step(nan_row.data(), 4); }),
            "kvevict::Cache::decode_step: logits of q_head 1 contain NaN or +inf");
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 3); }),
            "kvevict::Cache::decode_step: n = 3 but the cache holds 3 tokens per KV head (append exactly one token, "
            "then pass n = 4)");
  EXPECT_EQ(message_of([&] { cache.decode_step(nullptr, 4); }),
            "kvevict::Cache::decode_step: logits must be non-null");
  EXPECT_EQ(Snapshot::of(cache, kv), before);
  // The failed calls did not consume noise: the next step matches the twin exactly.
  append_token(twin_kv, 4);
  cache.decode_step(row.data(), 4);
  twin.decode_step(row.data(), 4);
  EXPECT_EQ(Snapshot::of(cache, kv), Snapshot::of(twin, twin_kv));
}

TEST(CacheErrors, DecodeStepRejectsStalePositionsMismatchedHeadsAndBadTemperature) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  kvevict::Cache<kvevict::GumbelLogitScore, kvevict::IncrementTemperature, kvevict::RecentTopKSelection> cache(
      config(2, 3, 1), kv, {}, kvevict::IncrementTemperature(1.0f, -0.75f));
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const auto x = causal_logits(2, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  const float row[] = {0, 0, 0, 0, 0, 0, 0, 0};
  append_token(kv, 2);  // not newer than the last position
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: new token's position 2 must be larger than the last one, 2");
  kv.head_positions(0)[3] = 3;  // head 0 says 3, head 1 says 2
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: KV head 1 has new position 2, KV head 0 has 3");
  kv.head_positions(1)[3] = 3;
  cache.decode_step(row, 4);  // tau = 0.25: fine
  append_token(kv, 4);
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: temperature at step 2 must be finite and >= 1.17549435e-38 (FLT_MIN) (got -0.5)");
  EXPECT_EQ(cache.step(), 1u);
}

TEST(CacheErrors, ConstructorAndAccessorsValidate) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(3, 2, 0), kv); }),
            "kvevict::Cache: n_q_heads (3) must be a positive multiple of the view's n_kv_heads (2)");
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(0, 2, 0), kv); }),
            "kvevict::Cache: n_q_heads (0) must be a positive multiple of the view's n_kv_heads (2)");
  kvevict::H2O cache(config(2, 2, 0), kv);
  EXPECT_EQ(message_of([&] { (void)cache.length(2); }),
            "kvevict::Cache::length: KV head 2 out of range (n_kv_heads = 2)");
  append_token(kv, 0);
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(2, 2, 0), kv); }),
            "kvevict::Cache: the view must be empty at construction (lengths[0] = 1)");
}

TEST(Cache, ResetStartsANewSequenceWithTheSameSeedBehaviour) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(1, 3, 1, 8), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  const auto x = causal_logits(1, 8, [](auto, auto, auto) { return 0.0f; });
  std::vector<Positions> runs;
  for (int rep = 0; rep < 2; ++rep) {
    for (int p = 0; p < 8; ++p) append_token(kv, p);
    cache.prefill(x.data(), 8);
    runs.push_back(cache.retained_positions(0));
    cache.reset();
    EXPECT_EQ(kv.length(0), 0u);
    EXPECT_EQ(cache.budget(), 0u);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
