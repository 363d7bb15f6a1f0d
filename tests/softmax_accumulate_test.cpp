// Tests of the score kernel: acc += softmax((x + zeta) / tau) (Keyformer Eq. 7).
#include <cmath>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

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

}  // namespace
