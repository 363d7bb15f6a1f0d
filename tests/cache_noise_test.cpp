// tests/cache_noise_test.cpp — kvevict::Cache's Gumbel noise: the same seed gives the same result, an injected ζ
// equals adding it to the logits, the internal draw follows the documented order, and noise_scale scales both.
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "cache_test_util.hpp"
#include "test_util.hpp"

namespace {

using cache_test::config;
using cache_test::Positions;
using kvtest::append_token;
using kvtest::causal_logits;
using kvtest::rows_aligned;

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

}  // namespace
