// Tests of the RoPE re-rotation helper (attention/rope.hpp): exact values on hand examples, the
// round trip Δ then −Δ, composition against a fresh rotation, both pairings, and the errors.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/attention/rope.hpp>
#include <kvevict/kv/kv_buffer.hpp>

namespace {

using kvevict::RopeSpec;
using kvevict::RopeStyle;

constexpr double kHalfPi = 1.57079632679489661923;

TEST(Rope, InterleavedHandExampleTheta10000) {
  // head_dim 4: pair 0 = (0, 1) at frequency 1, pair 1 = (2, 3) at 10000^(-2/4) = 0.01.
  std::vector<float> row{1.0f, 0.0f, 1.0f, 0.0f};
  kvevict::rope_rotate(row.data(), 4, 1.0);
  EXPECT_NEAR(row[0], 0.5403023058681398, 1e-7);   // cos 1
  EXPECT_NEAR(row[1], 0.8414709848078965, 1e-7);   // sin 1
  EXPECT_NEAR(row[2], 0.9999500004166653, 1e-7);   // cos 0.01
  EXPECT_NEAR(row[3], 0.009999833334166664, 1e-9);  // sin 0.01
}

TEST(Rope, QuarterTurnWithThetaOnePairsAsTheStyleSays) {
  // theta = 1: every pair turns by delta; a quarter turn maps (x, y) to (-y, x).
  std::vector<float> inter{1, 2, 3, 4}, half{1, 2, 3, 4};
  kvevict::rope_rotate(inter.data(), 4, kHalfPi, RopeSpec{RopeStyle::interleaved, 1.0});
  kvevict::rope_rotate(half.data(), 4, kHalfPi, RopeSpec{RopeStyle::half_split, 1.0});
  const std::vector<float> want_inter{-2, 1, -4, 3};  // pairs (0,1), (2,3)
  const std::vector<float> want_half{-3, -4, 1, 2};   // pairs (0,2), (1,3)
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(inter[i], want_inter[i], 1e-6) << i;
    EXPECT_NEAR(half[i], want_half[i], 1e-6) << i;
  }
}

TEST(Rope, HalfSplitHandExampleTheta10000) {
  // head_dim 4, half-split: pair 0 = (0, 2) at frequency 1, pair 1 = (1, 3) at 0.01; delta = 2.
  std::vector<float> row{1.0f, 1.0f, 0.0f, 0.0f};
  kvevict::rope_rotate(row.data(), 4, 2.0, RopeSpec{RopeStyle::half_split, 10000.0});
  EXPECT_NEAR(row[0], -0.4161468365471424, 1e-7);   // cos 2
  EXPECT_NEAR(row[2], 0.9092974268256817, 1e-7);    // sin 2
  EXPECT_NEAR(row[1], 0.9998000066665778, 1e-7);    // cos 0.02
  EXPECT_NEAR(row[3], 0.019998666693333080, 1e-8);  // sin 0.02
}

// Rotating by delta and back returns the key within 1e-6, for both pairings, several θ and
// deltas up to 32768 (angles far beyond 2π: the angle is computed in double).
TEST(Rope, RoundTripReturnsTheKeyWithin1e6) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half_split})
    for (double theta : {10000.0, 500000.0, 2.5})
      for (std::size_t d : {2u, 8u, 64u, 128u})
        for (double delta : {1.0, -3.0, 17.0, 511.0, 4095.0, 32767.0, 0.5}) {
          std::vector<float> key(d);
          for (float& x : key) x = u(gen);
          std::vector<float> row = key;
          const RopeSpec spec{style, theta};
          kvevict::rope_rotate(row.data(), d, delta, spec);
          kvevict::rope_rotate(row.data(), d, -delta, spec);
          for (std::size_t i = 0; i < d; ++i) ASSERT_NEAR(row[i], key[i], 1e-6) << "d " << d << " delta " << delta;
        }
}

// A key rotated to position p and then by q - p equals the key rotated straight to q (a simple
// double-precision reference) within float rounding.
// Double rows keep double precision (they used to be rounded through float): a quarter turn of
// (1e-9 + 1, 0.3) with theta 1 is exactly representable to ~1e-16, far below float's 6e-8.
TEST(Rope, DoubleRowsAreRotatedInDouble) {
  std::vector<double> row{1.0 + 1e-9, 0.3};
  kvevict::rope_rotate(row.data(), 2, kHalfPi, RopeSpec{RopeStyle::interleaved, 1.0});
  EXPECT_NEAR(row[0], -0.3, 1e-15);
  EXPECT_NEAR(row[1], 1.0 + 1e-9, 1e-15);
}

TEST(Rope, RerotationEqualsAFreshRotationAtTheNewPosition) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const std::size_t d = 16;
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half_split}) {
    const RopeSpec spec{style, 10000.0};
    for (int p : {0, 5, 300, 1000})
      for (int q : {0, 3, 299, 1200}) {
        std::vector<float> key(d);
        for (float& x : key) x = u(gen);
        std::vector<float> moved = key;
        kvevict::rope_rotate(moved.data(), d, p, spec);
        kvevict::rope_rotate(moved.data(), d, q - p, spec);
        for (std::size_t i = 0; i < d / 2; ++i) {  // reference in double, pair by pair
          const std::size_t a = style == RopeStyle::interleaved ? 2 * i : i;
          const std::size_t b = style == RopeStyle::interleaved ? 2 * i + 1 : i + d / 2;
          const double phi = q * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
          EXPECT_NEAR(moved[a], key[a] * std::cos(phi) - key[b] * std::sin(phi), 1e-6);
          EXPECT_NEAR(moved[b], key[a] * std::sin(phi) + key[b] * std::cos(phi), 1e-6);
        }
      }
  }
}

TEST(Rope, KeyOfAViewAndAllKeysOfAView) {
  kvevict::KVBuffer<float> buf(2, 4, 2);  // 2 KV heads, capacity 4, head_dim 2
  auto kv = buf.view();
  const float k0[] = {1, 0, 0, 1}, k1[] = {2, 0, 0, 2}, v[] = {0, 0, 0, 0};
  kv.append(0, k0, v);
  kv.append(1, k1, v);
  // head_dim 2: one pair at frequency 1; theta irrelevant.
  kvevict::rope_rotate_key(kv, 1, 1, kHalfPi);  // (0, 2) -> (-2, 0)
  EXPECT_NEAR(kv.k_row(1, 1)[0], -2.0f, 1e-6);
  EXPECT_NEAR(kv.k_row(1, 1)[1], 0.0f, 1e-6);
  EXPECT_EQ(kv.k_row(0, 1)[0], 2.0f);  // other rows untouched
  EXPECT_EQ(kv.k_row(1, 0)[1], 1.0f);
  EXPECT_EQ(kv.head_positions(1)[1], 1);  // position IDs untouched
  kvevict::rope_rotate_keys(kv, -kHalfPi);  // every live key by a quarter turn back
  EXPECT_NEAR(kv.k_row(0, 0)[0], 0.0f, 1e-6);   // (1, 0) -> (0, -1)
  EXPECT_NEAR(kv.k_row(0, 0)[1], -1.0f, 1e-6);
  EXPECT_NEAR(kv.k_row(1, 1)[0], 0.0f, 1e-6);   // (-2, 0) -> (0, 2)
  EXPECT_NEAR(kv.k_row(1, 1)[1], 2.0f, 1e-6);
}

template <class F>
void expect_invalid(F f, const char* needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Rope, BadArgumentsThrowNamingThemAndLeaveTheRowUnchanged) {
  std::vector<float> row{1, 2, 3, 4, 5};
  const std::vector<float> before = row;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 5, 1.0); }, "head_dim must be even and >= 2 (got 5)");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 0, 1.0); }, "head_dim must be even and >= 2 (got 0)");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, 1.0, RopeSpec{RopeStyle::interleaved, 0.0}); },
                 "theta must be finite and > 0 (got 0)");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, 1.0, RopeSpec{RopeStyle::half_split, -2.0}); },
                 "theta must be finite and > 0 (got -2)");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, 1.0, RopeSpec{RopeStyle::interleaved, nan}); },
                 "theta must be finite");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, 1.0, RopeSpec{RopeStyle::interleaved, inf}); },
                 "theta must be finite");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, nan); }, "delta must be finite");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, -inf); }, "delta must be finite");
  expect_invalid([&] { kvevict::rope_rotate(row.data(), 4, 1.0, RopeSpec{static_cast<RopeStyle>(7), 1e4}); },
                 "unknown RopeStyle 7");
  expect_invalid([&] { kvevict::rope_rotate(static_cast<float*>(nullptr), 4, 1.0); }, "row must be non-null");
  EXPECT_EQ(row, before);

  kvevict::KVBuffer<float> odd(1, 2, 3);
  auto kv_odd = odd.view();
  const float k[] = {1, 2, 3}, v[] = {0, 0, 0};
  kv_odd.append(0, k, v);
  expect_invalid([&] { kvevict::rope_rotate_keys(kv_odd, 1.0); }, "head_dim must be even and >= 2 (got 3)");
  expect_invalid([&] { kvevict::rope_rotate_key(kv_odd, 1, 0, 1.0); }, "KV head 1 out of range");
  expect_invalid([&] { kvevict::rope_rotate_key(kv_odd, 0, 1, 1.0); }, "slot 1 is not live (length 1)");
  EXPECT_EQ(kv_odd.k_row(0, 0)[0], 1.0f);
  EXPECT_EQ(kv_odd.k_row(0, 0)[2], 3.0f);
}

}  // namespace
