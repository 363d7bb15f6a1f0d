// The portable (non-vector) bodies of detail/fixed_order_dot.hpp (issue 51, item 15): the loops nvcc's host pass
// compiles, selected here on the host by the test hook KVEVICT_FIXED_ORDER_DOT_PORTABLE (this executable's only
// translation unit, so nothing else sees another definition). `dot_fixed_order` must give the bits of the documented
// order, written out below without the library (16 lanes, each adding x[i] · y[i] in index order, a partial last block
// padded with 0 · 0, then the tree l += l + 8, + 4, + 2, + 1, never contracted), and the bits of the dispatched vector
// kernel `vk::dot` on every path this CPU runs; `add_scaled` likewise against `acc[i] + x[i] · s` and `vk::scale_add`.
#define KVEVICT_FIXED_ORDER_DOT_PORTABLE 1
#include <kvevict/detail/fixed_order_dot.hpp>

#if defined(KVEVICT_FIXED_ORDER_DOT_VEC16)
#error "KVEVICT_FIXED_ORDER_DOT_PORTABLE did not select the portable loops of detail/fixed_order_dot.hpp"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/core/dispatch.hpp>
#include <kvevict/detail/vec16.hpp>

namespace {

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// The documented order, plainly: each product rounded to float on its own (volatile: no FMA), lane l = l-th
/// element of every block of 16 in index order, then the lanes as a tree.
float documented_dot(const float* x, const float* y, std::size_t n) {
  float lane[16] = {};
  for (std::size_t block = 0; block < n; block += 16)
    for (std::size_t l = 0; l < 16; ++l) {
      volatile float p = block + l < n ? x[block + l] * y[block + l] : 0.0f;
      lane[l] = lane[l] + p;
    }
  for (std::size_t half = 8; half >= 1; half /= 2)
    for (std::size_t l = 0; l < half; ++l) lane[l] = lane[l] + lane[l + half];
  return lane[0];
}

std::vector<kvevict::Isa> supported_isas() {
  std::vector<kvevict::Isa> out;
  for (kvevict::Isa isa : {kvevict::Isa::kBaseline, kvevict::Isa::kAvx2, kvevict::Isa::kAvx512})
    if (kvevict::isa_supported(isa)) out.push_back(isa);
  return out;
}
struct IsaRestore {
  kvevict::Isa saved = kvevict::active_isa();
  ~IsaRestore() { kvevict::set_isa(saved); }
};

const std::size_t kLengths[] = {0, 1, 2, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 127, 128, 129, 255, 300};

TEST(FixedOrderDotPortable, DotIsTheDocumentedOrderAndTheVectorKernelsBits) {
  const IsaRestore restore;
  std::mt19937_64 gen(1515);
  // Magnitudes spread over 2^±12, so that the order of the additions shows in the last bits.
  std::normal_distribution<float> mant(0.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-12, 12);
  std::vector<float> xs(300 + 8), ys(300 + 8);
  for (std::size_t n : kLengths)
    for (std::size_t offset = 0; offset < 4; ++offset) {
      float* x = xs.data() + offset;
      float* y = ys.data() + (3 - offset);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = std::ldexp(mant(gen), expo(gen)), y[i] = std::ldexp(mant(gen), expo(gen));
      const float got = kvevict::detail::dot_fixed_order(x, y, n);
      EXPECT_EQ(bits(got), bits(documented_dot(x, y, n))) << "n = " << n << ", offset " << offset;
      EXPECT_EQ(bits(kvevict::detail::dot_fixed_order(x, x, n)), bits(documented_dot(x, x, n))) << "n = " << n;
      double exact = 0.0, mag = 0.0;
      for (std::size_t i = 0; i < n; ++i) exact += double(x[i]) * y[i], mag += std::fabs(double(x[i]) * y[i]);
      EXPECT_NEAR(got, exact, 1e-5 * (1.0 + mag)) << "n = " << n;
#if defined(KVEVICT_VEC16)  // the vector kernels exist (GCC / Clang): the same bits on every path
      for (kvevict::Isa isa : supported_isas()) {
        kvevict::set_isa(isa);
        EXPECT_EQ(bits(got), bits(kvevict::detail::vk::dot(x, y, n))) << kvevict::isa_name(isa) << ", n = " << n;
      }
#endif
    }
  // A partial block's missing lanes add +0: a sum of -0.0 products stays as the vector kernel leaves it.
  const float nz[3] = {-0.0f, -0.0f, -0.0f}, one[3] = {1.0f, 1.0f, 1.0f};
  EXPECT_EQ(bits(kvevict::detail::dot_fixed_order(nz, one, 3)), bits(documented_dot(nz, one, 3)));
#if defined(KVEVICT_VEC16)
  EXPECT_EQ(bits(kvevict::detail::dot_fixed_order(nz, one, 3)), bits(kvevict::detail::vk::dot(nz, one, 3)));
#endif
}

// The order is visible: 16 lanes and a tree are not a serial sum. x = (1, 2^24, −2^24, 1, ...) style inputs where a
// serial sum loses the ones and the lanes keep them.
TEST(FixedOrderDotPortable, DotIsNotASerialSum) {
  std::vector<float> x(32, 0.0f), y(32, 1.0f);
  x[0] = 16777216.0f;   // 2^24, lane 0
  x[1] = 1.0f;          // lane 1: lost against 2^24 in a serial sum, kept in its own lane until the tree
  x[16] = -16777216.0f; // lane 0 again: cancels x[0] inside lane 0
  x[17] = 1.0f;         // lane 1: 2
  float serial = 0.0f;
  for (std::size_t i = 0; i < 32; ++i) serial += x[i] * y[i];
  EXPECT_EQ(serial, 1.0f);  // 2^24 + 1 rounds to 2^24, − 2^24 leaves 0, then the last 1
  EXPECT_EQ(kvevict::detail::dot_fixed_order(x.data(), y.data(), 32), 2.0f);
  EXPECT_EQ(documented_dot(x.data(), y.data(), 32), 2.0f);
}

TEST(FixedOrderDotPortable, AddScaledIsElementWiseAndTheVectorKernelsBits) {
  const IsaRestore restore;
  std::mt19937_64 gen(1516);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::size_t n : kLengths) {
    std::vector<float> x(n), acc(n), want(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = nd(gen), acc[i] = nd(gen);
      volatile float p = x[i] * 0.37f;
      want[i] = acc[i] + p;
    }
    std::vector<float> got = acc;
    kvevict::detail::add_scaled(x.data(), 0.37f, got.data(), n);
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << "n = " << n << ", i = " << i;
#if defined(KVEVICT_VEC16)
    for (kvevict::Isa isa : supported_isas()) {
      kvevict::set_isa(isa);
      std::vector<float> vec = acc;
      kvevict::detail::vk::scale_add(x.data(), 0.37f, vec.data(), n, false);
      for (std::size_t i = 0; i < n; ++i)
        EXPECT_EQ(bits(got[i]), bits(vec[i])) << kvevict::isa_name(isa) << ", n = " << n << ", i = " << i;
    }
#endif
  }
}

}  // namespace
