// Tests of the explicitly vectorised kernels: the fixed-order lane reductions of the
// softmax kernel, the step's up-front row check, and the victim scans of both selections, each
// against a plain scalar (or double-precision) reference on random inputs, with sizes that are
// not multiples of the lane and block widths and inputs at unaligned addresses.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/core/dispatch.hpp>
#include <kvevict/detail/fixed_order_dot.hpp>
#include <kvevict/score/softmax_accumulate.hpp>
#include <kvevict/selection/recent_topk_selection.hpp>
#include <kvevict/selection/select_keep.hpp>
#include <kvevict/selection/sink_recent_selection.hpp>

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The documented order of sum_fixed_order, written without vector code: lane i % 16 adds v[i]
// in index order over the whole 16-blocks, then the lanes in order, then the tail.
float reference_sum(const float* v, std::size_t n) {
  float lane[16] = {};
  const std::size_t whole = n / 16 * 16;
  for (std::size_t i = 0; i < whole; ++i) lane[i % 16] += v[i];
  float total = 0.0f;
  for (float l : lane) total += l;
  for (std::size_t i = whole; i < n; ++i) total += v[i];
  return total;
}

TEST(SimdKernels, SumFixedOrderIsTheDocumentedOrderAtEveryOffset) {
  std::mt19937_64 gen(11);
  std::normal_distribution<float> nd(0.0f, 100.0f);
  std::vector<float> storage(600 + 8);
  for (std::size_t n : {0u, 1u, 15u, 16u, 17u, 31u, 255u, 512u, 600u}) {
    for (std::size_t offset = 0; offset < 4; ++offset) {  // 4-byte steps: every SSE/AVX misalignment
      float* v = storage.data() + offset;
      for (std::size_t i = 0; i < n; ++i) v[i] = nd(gen);
      EXPECT_EQ(bits(kvevict::detail::sum_fixed_order(v, n)), bits(reference_sum(v, n))) << "n=" << n;
      double exact = 0.0;
      for (std::size_t i = 0; i < n; ++i) exact += v[i];
      EXPECT_NEAR(kvevict::detail::sum_fixed_order(v, n), exact, 1e-3 * (1.0 + n)) << "n=" << n;
    }
  }
}

TEST(SimdKernels, MaxPropagatesNaNAndMatchesAScalarMax) {
  std::mt19937_64 gen(12);
  std::normal_distribution<float> nd(0.0f, 10.0f);
  std::uniform_int_distribution<int> kind(0, 19);
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t n = static_cast<std::size_t>(gen() % 700);
    std::vector<float> v(n + 3);
    float* x = v.data() + trial % 4 % 3;
    bool has_nan = false;
    float ref = -kInf;
    for (std::size_t i = 0; i < n; ++i) {
      const int k = kind(gen);
      x[i] = k == 0 ? -kInf : k == 1 && trial % 5 == 0 ? std::nanf("") : k == 2 && trial % 7 == 0 ? kInf : nd(gen);
      if (std::isnan(x[i]))
        has_nan = true;
      else
        ref = std::max(ref, x[i]);
    }
    const float m = kvevict::detail::max_propagate_nan(x, n);
    if (has_nan)
      EXPECT_TRUE(std::isnan(m)) << "trial " << trial;
    else
      EXPECT_EQ(m, ref) << "trial " << trial;
  }
  EXPECT_EQ(kvevict::detail::max_propagate_nan(nullptr, 0), -kInf);
}

TEST(SimdKernels, RowAcceptedIsExactlyNoNaNAndNoPlusInfinity) {
  std::mt19937_64 gen(13);
  std::normal_distribution<float> nd(0.0f, 5.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + static_cast<std::size_t>(gen() % 300);
    std::vector<float> x(n), z(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = gen() % 9 == 0 ? -kInf : nd(gen);
      z[i] = nd(gen);
    }
    const int bad = static_cast<int>(gen() % 5);  // 0: clean, 1: NaN, 2: +inf, 3: x + z overflows, 4: -inf + inf
    const std::size_t at = static_cast<std::size_t>(gen() % n);
    if (bad == 1) x[at] = std::nanf("");
    if (bad == 2) x[at] = kInf;
    if (bad == 3) x[at] = z[at] = 3e38f;
    if (bad == 4) {
      x[at] = -kInf;
      z[at] = kInf;
    }
    bool ref_x = true, ref_xz = true;
    for (std::size_t i = 0; i < n; ++i) {
      ref_x = ref_x && !std::isnan(x[i]) && x[i] != kInf;
      const float y = x[i] + z[i];
      ref_xz = ref_xz && !std::isnan(y) && y != kInf;
    }
    EXPECT_EQ(kvevict::detail::row_accepted(x.data(), nullptr, n), ref_x) << "trial " << trial;
    EXPECT_EQ(kvevict::detail::row_accepted(x.data(), z.data(), n), ref_xz) << "trial " << trial;
    // The kernel agrees: it rejects exactly the rows row_accepted rejects.
    std::vector<float> acc(n, 0.0f), scratch(kvevict::softmax_scratch_size(n));
    EXPECT_EQ(kvevict::accumulate_softmax(x.data(), z.data(), n, 0.5f, acc.data(), scratch.data()), ref_xz);
  }
}

TEST(SimdKernels, SelectKeepNamesTheFirstNaN) {
  std::vector<float> s(100, 1.0f);
  s[37] = std::nanf("");
  s[81] = std::nanf("");
  std::vector<std::size_t> out(s.size());
  try {
    kvevict::select_keep(s.data(), s.size(), 10, 2, out.data());
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "kvevict::select_keep: scores[37] is NaN");
  }
  EXPECT_FALSE(kvevict::detail::any_nan(s.data(), 37));
  EXPECT_TRUE(kvevict::detail::any_nan(s.data(), 38));
}

// The dispatched paths this CPU runs, and a guard that restores the path chosen before a test.
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

// The documented order of dot_fixed_order, written without vector code: lane i % 16 adds x[i] · y[i] in index
// order (a partial last block adds 0 · 0 into its missing lanes), then the lanes as a tree: l += l + 8, + 4, + 2, + 1.
// Never contracted: each product is rounded to float before the add (a volatile store forbids an FMA).
float reference_dot(const float* x, const float* y, std::size_t n) {
  float lane[16] = {};
  for (std::size_t block = 0; block < n; block += 16)
    for (std::size_t l = 0; l < 16; ++l) {
      volatile float p = block + l < n ? x[block + l] * y[block + l] : 0.0f * 0.0f;
      lane[l] = lane[l] + p;
    }
  for (std::size_t half = 8; half >= 1; half /= 2)
    for (std::size_t l = 0; l < half; ++l) lane[l] = lane[l] + lane[l + half];
  return lane[0];
}

// On every dispatched path (the kernel is compiled per path, W = 4, 8, 16 lanes), at every misalignment and for
// lengths with and without a tail; the same bits as the reference, close to the double-precision dot; x == y (a norm).
TEST(SimdKernels, DotFixedOrderIsTheDocumentedOrderOnEveryPath) {
  const IsaRestore restore;
  for (kvevict::Isa isa : supported_isas()) {
    kvevict::set_isa(isa);
    std::mt19937_64 gen(21);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> xs(300 + 8), ys(300 + 8);
    for (std::size_t n : {0u, 1u, 7u, 15u, 16u, 17u, 64u, 100u, 128u, 255u, 300u}) {
      for (std::size_t offset = 0; offset < 4; ++offset) {
        float* x = xs.data() + offset;
        float* y = ys.data() + (3 - offset);
        for (std::size_t i = 0; i < n; ++i) x[i] = nd(gen), y[i] = nd(gen);
        const float got = kvevict::detail::dot_fixed_order(x, y, n);
        EXPECT_EQ(bits(got), bits(reference_dot(x, y, n))) << kvevict::isa_name(isa) << " n=" << n;
        double exact = 0.0, mag = 0.0;
        for (std::size_t i = 0; i < n; ++i) exact += double(x[i]) * y[i], mag += std::fabs(double(x[i]) * y[i]);
        EXPECT_NEAR(got, exact, 1e-6 * (1.0 + mag)) << kvevict::isa_name(isa) << " n=" << n;
        EXPECT_EQ(bits(kvevict::detail::dot_fixed_order(x, x, n)), bits(reference_dot(x, x, n)));
      }
    }
    const float one = 1.0f;
    EXPECT_EQ(kvevict::detail::dot_fixed_order(&one, &one, 1), 1.0f);
  }
}

// add_scaled is element-wise acc[i] + x[i] · scale, product rounded first, on every path.
TEST(SimdKernels, AddScaledIsElementWiseOnEveryPath) {
  const IsaRestore restore;
  for (kvevict::Isa isa : supported_isas()) {
    kvevict::set_isa(isa);
    std::mt19937_64 gen(22);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (std::size_t n : {1u, 5u, 16u, 33u, 128u}) {
      std::vector<float> x(n), acc(n), want(n);
      for (std::size_t i = 0; i < n; ++i) {
        x[i] = nd(gen), acc[i] = nd(gen);
        volatile float p = x[i] * 0.37f;
        want[i] = acc[i] + p;
      }
      kvevict::detail::add_scaled(x.data(), 0.37f, acc.data(), n);
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(bits(acc[i]), bits(want[i])) << kvevict::isa_name(isa) << " i=" << i;
    }
  }
}

// Reference victim of RecentTopKSelection: the smallest score outside the window, ties to the
// largest position; n if every slot is recent.
std::size_t reference_topk_victim(const std::vector<float>& s, const std::vector<std::uint8_t>& recent,
                                  const std::vector<std::int64_t>& pos) {
  std::size_t best = s.size();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (recent[i] != 0) continue;
    if (best == s.size() || s[i] < s[best] || (s[i] == s[best] && pos[i] > pos[best])) best = i;
  }
  return best;
}

// On every dispatched path this CPU runs (the victim's lane loop is compiled per path, W = 4, 8, 16 lanes).
TEST(SimdKernels, RecentTopKVictimMatchesAScalarScan) {
  const IsaRestore restore;
  for (kvevict::Isa isa : supported_isas()) {
    kvevict::set_isa(isa);
    std::mt19937_64 gen(14);
    const kvevict::RecentTopKSelection sel;
    for (int trial = 0; trial < 600; ++trial) {
      const std::size_t n = 1 + static_cast<std::size_t>(gen() % 400);
      const unsigned levels = trial % 3 == 0 ? 3u : 1000000u;  // few distinct scores: many ties
      std::vector<float> s(n);
      std::vector<std::uint8_t> recent(n);
      std::vector<std::int64_t> pos(n);
      std::iota(pos.begin(), pos.end(), std::int64_t{100});
      std::shuffle(pos.begin(), pos.end(), gen);
      const unsigned recent_per_mille = trial % 10 == 0 ? 1000u : static_cast<unsigned>(gen() % 600);
      for (std::size_t i = 0; i < n; ++i) {
        s[i] = static_cast<float>(gen() % levels) * 0.125f;
        recent[i] = static_cast<std::uint8_t>(gen() % 1000 < recent_per_mille ? 1 + gen() % 2 : 0);
      }
      ASSERT_EQ(sel.victim(s.data(), recent.data(), pos.data(), n), reference_topk_victim(s, recent, pos))
          << kvevict::isa_name(isa) << ", trial " << trial << ", n " << n;
    }
  }
}

// Reference victim of SinkRecentSelection: the slot of the (sinks + 1)-th smallest position.
std::size_t reference_sink_victim(const std::vector<std::int64_t>& pos, std::size_t sinks) {
  std::vector<std::size_t> order(pos.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
  return order[std::min(sinks, pos.size() - 1)];
}

// On every dispatched path this CPU runs (the block test is compiled per path: 2, 4 or 8 64-bit lanes).
TEST(SimdKernels, SinkRecentVictimMatchesASortForAnyPositions) {
  const IsaRestore restore;
  for (kvevict::Isa isa : supported_isas()) {
    kvevict::set_isa(isa);
    std::mt19937_64 gen(15);
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    for (int trial = 0; trial < 500; ++trial) {
      const std::size_t n = 1 + static_cast<std::size_t>(gen() % 700);  // < the 10000 values of range 3
      std::vector<std::int64_t> pos;
      const int range = trial % 4;  // ascending-ish cache positions; negatives; both signs near the extremes
      while (pos.size() < n) {
        std::int64_t p = 0;
        if (range == 0) p = static_cast<std::int64_t>(gen() % 100000);
        if (range == 1) p = -static_cast<std::int64_t>(gen() % 100000);
        if (range == 2) p = static_cast<std::int64_t>(gen());  // any 64-bit value: p − bar wraps
        if (range == 3)
          p = gen() % 2 ? kMin + static_cast<std::int64_t>(gen() % 5000)
                        : kMax - static_cast<std::int64_t>(gen() % 5000);
        if (std::find(pos.begin(), pos.end(), p) == pos.end()) pos.push_back(p);
      }
      for (std::size_t sinks : {0u, 1u, 4u, 64u, 70u}) {
        kvevict::SinkRecentSelection sel;
        sel.sinks = sinks;
        ASSERT_EQ(sel.victim(nullptr, nullptr, pos.data(), n), reference_sink_victim(pos, sinks))
            << kvevict::isa_name(isa) << ", trial " << trial << ", n " << n << ", sinks " << sinks;
      }
    }
  }
}

}  // namespace
