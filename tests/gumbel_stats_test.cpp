// Statistical tests of the caches' counter-based Gumbel noise (`fill_gumbel_row`): 10^7 draws
// over many rows (seed, query head, position) are Gumbel(0, 1) — Kolmogorov–Smirnov distance
// <= 1e-3, mean and variance, tail frequencies P(ζ > 8) and P(ζ < −2) within 3σ of the exact
// values — and show no correlation between neighbouring slots, query heads or positions. The
// noise is a pure function of its arguments, so these checks are deterministic: they pin the
// formula's distribution, not a random outcome.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/score/gumbel.hpp>

namespace {

constexpr std::size_t kSlots = 4000, kHeads = 8, kPositions = 313;  // 8 · 313 · 4000 = 10,016,000 draws
constexpr std::uint64_t kSeed = 20261201;

// ζ[(position · kHeads + head) · kSlots + slot].
const std::vector<float>& draws() {
  static const std::vector<float> z = [] {
    std::vector<float> out(kSlots * kHeads * kPositions);
    for (std::size_t p = 0; p < kPositions; ++p)
      for (std::size_t h = 0; h < kHeads; ++h)
        kvevict::fill_gumbel_row(kvevict::gumbel_row_key(kSeed, h, p), 0, out.data() + (p * kHeads + h) * kSlots,
                                 kSlots);
    return out;
  }();
  return z;
}

double gumbel_cdf(double z) { return std::exp(-std::exp(-z)); }

TEST(GumbelStats, KolmogorovSmirnovDistanceToGumbelIsBelow1e3) {
  std::vector<float> z = draws();
  std::sort(z.begin(), z.end());
  const double n = static_cast<double>(z.size());
  double d = 0.0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    if (i + 1 < z.size() && z[i + 1] == z[i]) continue;  // ties: compare at the last of equal values
    const double f = gumbel_cdf(z[i]);
    d = std::max({d, std::abs(static_cast<double>(i + 1) / n - f)});
    // Just below z[i]: the empirical CDF is that of the previous distinct value.
    std::size_t first = i;
    while (first > 0 && z[first - 1] == z[i]) --first;
    d = std::max(d, std::abs(f - static_cast<double>(first) / n));
  }
  EXPECT_LE(d, 1e-3);
  std::printf("KS distance over %zu draws: %.3g (1e-3 allowed; 1.36/sqrt(n) = %.3g is the 5%% level)\n",
              z.size(), d, 1.36 / std::sqrt(n));
}

TEST(GumbelStats, MeanVarianceAndTailsWithinThreeSigma) {
  const std::vector<float>& z = draws();
  const double n = static_cast<double>(z.size());
  double sum = 0.0, sum2 = 0.0;
  std::size_t above8 = 0, below_minus2 = 0;
  for (float v : z) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
    above8 += v > 8.0f;
    below_minus2 += v < -2.0f;
  }
  const double pi = 3.14159265358979323846, euler_gamma = 0.57721566490153286;
  const double mean = sum / n, var = sum2 / n - mean * mean;
  const double var_exact = pi * pi / 6.0;
  EXPECT_NEAR(mean, euler_gamma, 3.0 * std::sqrt(var_exact / n));
  // Var of the sample variance: (μ4 − σ⁴) / n, μ4 = 5.4 σ⁴ for the Gumbel (excess kurtosis 2.4).
  EXPECT_NEAR(var, var_exact, 3.0 * std::sqrt(4.4 * var_exact * var_exact / n));
  const double p8 = 1.0 - gumbel_cdf(8.0), pm2 = gumbel_cdf(-2.0);
  EXPECT_NEAR(static_cast<double>(above8), n * p8, 3.0 * std::sqrt(n * p8 * (1.0 - p8)));
  EXPECT_NEAR(static_cast<double>(below_minus2), n * pm2, 3.0 * std::sqrt(n * pm2 * (1.0 - pm2)));
  std::printf("mean %.5f (γ = %.5f), variance %.5f (π²/6 = %.5f), #(ζ > 8) = %zu (expected %.0f), "
              "#(ζ < -2) = %zu (expected %.0f)\n",
              mean, euler_gamma, var, var_exact, above8, n * p8, below_minus2, n * pm2);
}

// Pearson correlation of the pairs (z[a(i)], z[b(i)]) for i < count.
template <class A, class B>
double correlation(std::size_t count, A a, B b) {
  const std::vector<float>& z = draws();
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double x = z[a(i)], y = z[b(i)];
    sa += x;
    sb += y;
    saa += x * x;
    sbb += y * y;
    sab += x * y;
  }
  const double n = static_cast<double>(count);
  const double cov = sab / n - (sa / n) * (sb / n);
  return cov / std::sqrt((saa / n - (sa / n) * (sa / n)) * (sbb / n - (sb / n) * (sb / n)));
}

TEST(GumbelStats, NoCorrelationBetweenNeighbouringSlotsHeadsOrPositions) {
  const std::size_t rows = kHeads * kPositions;
  // Under independence the sample correlation has standard deviation 1/sqrt(pairs): allow 4 of them.
  const std::size_t slot_pairs = rows * (kSlots - 1);
  const double r_slot = correlation(
      slot_pairs, [](std::size_t i) { return i / (kSlots - 1) * kSlots + i % (kSlots - 1); },
      [](std::size_t i) { return i / (kSlots - 1) * kSlots + i % (kSlots - 1) + 1; });
  EXPECT_LE(std::abs(r_slot), 4.0 / std::sqrt(static_cast<double>(slot_pairs))) << r_slot;
  // Query heads h and h + 1 at the same position and slot.
  const std::size_t head_pairs = kPositions * (kHeads - 1) * kSlots;
  auto head_index = [](std::size_t i, std::size_t dh) {
    const std::size_t slot = i % kSlots, rest = i / kSlots, h = rest % (kHeads - 1), p = rest / (kHeads - 1);
    return (p * kHeads + h + dh) * kSlots + slot;
  };
  const double r_head = correlation(
      head_pairs, [&](std::size_t i) { return head_index(i, 0); }, [&](std::size_t i) { return head_index(i, 1); });
  EXPECT_LE(std::abs(r_head), 4.0 / std::sqrt(static_cast<double>(head_pairs))) << r_head;
  // Positions p and p + 1 at the same head and slot.
  const std::size_t pos_pairs = (kPositions - 1) * kHeads * kSlots;
  const double r_pos = correlation(
      pos_pairs, [](std::size_t i) { return i; }, [](std::size_t i) { return i + kHeads * kSlots; });
  EXPECT_LE(std::abs(r_pos), 4.0 / std::sqrt(static_cast<double>(pos_pairs))) << r_pos;
  // Slot s of one row and slot s + 1 of the next head (a shifted copy would show here).
  const double r_diag = correlation(
      head_pairs, [&](std::size_t i) { return head_index(i, 0); },
      [&](std::size_t i) { return head_index(i, 1) + (i % kSlots + 1 < kSlots ? 1 : 0); });
  EXPECT_LE(std::abs(r_diag), 4.0 / std::sqrt(static_cast<double>(head_pairs))) << r_diag;
  std::printf("correlations: slot %.2g, head %.2g, position %.2g, head+slot %.2g (4/sqrt(pairs) = %.2g)\n", r_slot,
              r_head, r_pos, r_diag, 4.0 / std::sqrt(static_cast<double>(head_pairs)));
}

}  // namespace
