// Tests of the score kernel: acc += softmax((x + zeta) / tau) (Keyformer Eq. 7).
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>
#include <kvevict/score/softmax_accumulate.hpp>

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SoftmaxAccumulate, AddsExactSoftmaxOfTwoLogits) {
  // softmax([0, ln 3]) = [1/4, 3/4].
  const float x[] = {0.0f, std::log(3.0f)};
  float acc[] = {1.0f, 2.0f}, scratch[kvevict::softmax_scratch_size(2)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 2, 1.0f, acc, scratch));
  EXPECT_NEAR(acc[0], 1.25f, 1e-6f);
  EXPECT_NEAR(acc[1], 2.75f, 1e-6f);
}

TEST(SoftmaxAccumulate, NoiseIsAddedBeforeTheTemperature) {
  // x + zeta = [0, ln 9]; tau = 2 -> softmax([0, ln 3]) = [1/4, 3/4].
  const float x[] = {1.0f, 1.0f};
  const float zeta[] = {-1.0f, std::log(9.0f) - 1.0f};
  float acc[] = {0.0f, 0.0f}, scratch[kvevict::softmax_scratch_size(2)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, zeta, 2, 0.5f, acc, scratch));
  EXPECT_NEAR(acc[0], 0.25f, 1e-6f);
  EXPECT_NEAR(acc[1], 0.75f, 1e-6f);
}

TEST(SoftmaxAccumulate, MinusInfinityIsMaskedAndAddsNothing) {
  const float x[] = {-kInf, 0.0f, -kInf, 0.0f};
  float acc[] = {0.0f, 0.0f, 0.0f, 0.0f}, scratch[kvevict::softmax_scratch_size(4)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 4, 1.0f, acc, scratch));
  EXPECT_EQ(acc[0], 0.0f);
  EXPECT_EQ(acc[2], 0.0f);
  EXPECT_FLOAT_EQ(acc[1], 0.5f);
  EXPECT_FLOAT_EQ(acc[3], 0.5f);
}

TEST(SoftmaxAccumulate, FullyMaskedRowAddsNothing) {
  const float x[] = {-kInf, -kInf};
  float acc[] = {0.5f, 0.25f}, scratch[kvevict::softmax_scratch_size(2)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 2, 1.0f, acc, scratch));
  EXPECT_EQ(acc[0], 0.5f);
  EXPECT_EQ(acc[1], 0.25f);
}

TEST(SoftmaxAccumulate, NaNOrPlusInfinityIsRejectedAndAccUntouched) {
  float scratch[kvevict::softmax_scratch_size(3)];
  for (float bad : {std::nanf(""), kInf}) {
    const float x[] = {-kInf, 0.0f, bad};
    float acc[] = {1.0f, 2.0f, 3.0f};
    EXPECT_FALSE(kvevict::accumulate_softmax(x, nullptr, 3, 1.0f, acc, scratch));
    EXPECT_EQ(acc[0], 1.0f);
    EXPECT_EQ(acc[1], 2.0f);
    EXPECT_EQ(acc[2], 3.0f);
  }
  const float x[] = {-kInf, -kInf, std::nanf("")};  // NaN hidden behind a masked max
  float acc[] = {0.0f, 0.0f, 0.0f};
  EXPECT_FALSE(kvevict::accumulate_softmax(x, nullptr, 3, 1.0f, acc, scratch));
}

TEST(SoftmaxAccumulate, LargeLogitsAreStable) {
  const float x[] = {1000.0f, 1000.0f, 999.0f};
  float acc[] = {0.0f, 0.0f, 0.0f}, scratch[kvevict::softmax_scratch_size(3)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 3, 1.0f, acc, scratch));
  const double e = std::exp(-1.0), z = 2.0 + e;
  EXPECT_NEAR(acc[0], 1.0 / z, 1e-6);
  EXPECT_NEAR(acc[2], e / z, 1e-6);
}

TEST(SoftmaxAccumulate, HigherTemperatureFlattensButKeepsOrder) {
  const float x[] = {2.0f, 0.5f, -1.0f, 1.0f};
  float cold[4] = {}, hot[4] = {}, scratch[kvevict::softmax_scratch_size(4)];
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 4, 1.0f, cold, scratch));
  ASSERT_TRUE(kvevict::accumulate_softmax(x, nullptr, 4, 0.5f, hot, scratch));  // tau = 2
  // Same order of increments.
  EXPECT_GT(hot[0], hot[3]);
  EXPECT_GT(hot[3], hot[1]);
  EXPECT_GT(hot[1], hot[2]);
  // Flatter: the largest shrinks, the smallest grows.
  EXPECT_LT(hot[0], cold[0]);
  EXPECT_GT(hot[2], cold[2]);
}

// Rows longer than one 512-element chunk (the online softmax rescales chunks to the
// row max), with masked entries and whole masked chunks, against a double-precision
// two-pass reference.
TEST(SoftmaxAccumulate, MultiChunkRowsMatchAPlainDoubleSoftmax) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> logit(-30.0f, 30.0f), noise(-2.0f, 8.0f);
  for (std::size_t n : {1u, 511u, 512u, 513u, 1500u, 2048u}) {
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<float> x(n), zeta(n), acc(n, 0.5f), scratch(kvevict::softmax_scratch_size(n));
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = (i % 7 == 3) ? -kInf : logit(gen);
        zeta[i] = noise(gen);
      }
      if (n > 1024) std::fill(x.begin() + 512, x.begin() + 1024, -kInf);  // a fully masked chunk
      if (variant == 2) x[n - 1] = 60.0f;                                // the max in the last chunk
      const float inv_tau = variant == 1 ? 0.4f : 1.0f;
      const float* z = variant == 1 ? zeta.data() : nullptr;
      ASSERT_TRUE(kvevict::accumulate_softmax(x.data(), z, n, inv_tau, acc.data(), scratch.data()));
      double mx = -INFINITY, sum = 0.0;
      std::vector<double> y(n);
      for (std::size_t i = 0; i < n; ++i) {
        y[i] = (static_cast<double>(x[i]) + (z ? z[i] : 0.0)) * inv_tau;
        mx = std::max(mx, y[i]);
      }
      for (std::size_t i = 0; i < n; ++i) sum += std::exp(y[i] - mx);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = 0.5 + std::exp(y[i] - mx) / sum;
        ASSERT_NEAR(acc[i], want, 2e-6 * want) << "n " << n << " variant " << variant << " i " << i;
      }
    }
  }
}

// Noise drawn by the kernel is exactly `fill_gumbel_row` of the row's key, slot by
// slot (chunk c starts at slot 512 c): drawing and injecting give bit-identical numerators.
TEST(SoftmaxAccumulate, DrawnNoiseIsFillGumbelRowBySlot) {
  const std::size_t n = 1201;  // three chunks, odd length
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  const std::uint64_t key = kvevict::gumbel_row_key(42, 3, 17);
  std::vector<float> zeta(n);
  kvevict::fill_gumbel_row(key, 0, zeta.data(), n);
  const std::size_t chunks = kvevict::detail::chunk_count(n);
  std::vector<float> e1(n), f1(2 * chunks), e2(n), f2(2 * chunks);
  ASSERT_TRUE(kvevict::detail::softmax_chunks(x.data(), kvevict::detail::DrawnNoise{key}, n, 0.5f, e1.data(), f1.data()));
  ASSERT_TRUE(kvevict::detail::softmax_chunks(x.data(), kvevict::detail::GivenNoise{zeta.data()}, n, 0.5f, e2.data(),
                                              f2.data()));
  EXPECT_EQ(e1, e2);
  EXPECT_EQ(std::vector<float>(f1.begin(), f1.begin() + chunks), std::vector<float>(f2.begin(), f2.begin() + chunks));
}

// Any split of a row's chunks into softmax_pass ranges, then the combine, gives the
// bits of softmax_chunks (what a decode step split across workers relies on).
TEST(SoftmaxAccumulate, SplitPassesEqualOnePass) {
  const std::size_t n = 2600;  // six chunks, the last partial
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 3.0f * std::cos(0.37f * static_cast<float>(i));
  x[700] = -std::numeric_limits<float>::infinity();
  const kvevict::detail::DrawnNoise noise{kvevict::gumbel_row_key(5, 0, 99)};
  const std::size_t chunks = kvevict::detail::chunk_count(n);
  std::vector<float> e1(n), f1(2 * chunks);
  ASSERT_TRUE(kvevict::detail::softmax_chunks(x.data(), noise, n, 0.7f, e1.data(), f1.data()));
  for (std::size_t cut : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    std::vector<float> e2(n, -1.0f), f2(2 * chunks, -1.0f);
    ASSERT_TRUE(kvevict::detail::softmax_pass(x.data(), noise, n, 0.7f, cut, chunks, e2.data(), f2.data(),
                                              f2.data() + chunks));
    ASSERT_TRUE(kvevict::detail::softmax_pass(x.data(), noise, n, 0.7f, 0, cut, e2.data(), f2.data(),
                                              f2.data() + chunks));
    kvevict::detail::softmax_combine(f2.data(), f2.data() + chunks, chunks, 0.7f);
    EXPECT_EQ(e1, e2) << "cut " << cut;
    EXPECT_EQ(std::vector<float>(f1.begin(), f1.begin() + chunks), std::vector<float>(f2.begin(), f2.begin() + chunks));
  }
  x[1900] = std::numeric_limits<float>::quiet_NaN();  // a bad chunk: reported, every max still written
  std::vector<float> e3(n), f3(2 * chunks, 0.0f);
  EXPECT_FALSE(kvevict::detail::softmax_pass(x.data(), noise, n, 0.7f, 0, chunks, e3.data(), f3.data(),
                                             f3.data() + chunks));
  EXPECT_TRUE(kvevict::detail::softmax_bad(f3.data() + chunks, chunks));
  EXPECT_TRUE(std::isnan(f3[chunks + 3]));
  EXPECT_FALSE(kvevict::detail::softmax_bad(f3.data() + chunks, 3));
}

// The cache runs this kernel: H2O's prefill scores are, bit for bit, the rows'
// accumulate_softmax summed in row order, and a decode step adds one more call.
TEST(SoftmaxAccumulate, IsTheKernelTheCacheRuns) {
  const std::size_t P = 700;  // rows of up to 700 slots: two chunks
  kvevict::KVBuffer<float> store(1, P + 1, 1);
  kvevict::KVView<float> kv = store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = 1;
  config.budget = kvevict::Budget::tokens(P);
  kvevict::H2O cache(config, kv);
  const float zero = 0.0f;
  std::vector<float> x(P * P, std::nanf("")), acc(P + 1, 0.0f), scratch(kvevict::softmax_scratch_size(P + 1));
  for (std::size_t r = 0; r < P; ++r) {
    kv.append(static_cast<std::int64_t>(r), &zero, &zero);
    for (std::size_t c = 0; c <= r; ++c) x[r * P + c] = std::cos(0.37f * static_cast<float>(r * 31 + c));
    ASSERT_TRUE(kvevict::accumulate_softmax(x.data() + r * P, nullptr, r + 1, 1.0f, acc.data(), scratch.data()));
  }
  cache.prefill(x.data(), P);
  ASSERT_EQ(cache.length(0), P);
  for (std::size_t i = 0; i < P; ++i) ASSERT_EQ(cache.scores(0)[i], acc[i]) << "slot " << i;

  kv.append(static_cast<std::int64_t>(P), &zero, &zero);
  std::vector<float> step(P + 1);
  for (std::size_t c = 0; c <= P; ++c) step[c] = std::sin(0.11f * static_cast<float>(c));
  acc[P] = 0.0f;
  ASSERT_TRUE(kvevict::accumulate_softmax(step.data(), nullptr, P + 1, 1.0f, acc.data(), scratch.data()));
  std::vector<float> before(cache.scores(0), cache.scores(0) + P);
  cache.decode_step(step.data(), P + 1);  // n = k + 1: evicts one slot, filled with the new token
  const std::int64_t* pos = cache.positions(0);
  for (std::size_t s = 0; s < P; ++s) ASSERT_EQ(cache.scores(0)[s], acc[static_cast<std::size_t>(pos[s])]) << "slot " << s;
}

}  // namespace
