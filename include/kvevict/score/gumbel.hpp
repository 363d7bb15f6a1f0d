// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/gumbel.hpp — seeded Gumbel(0, 1) noise for the Keyformer score.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvevict/score/fast_math.hpp"

namespace kvevict {

/// xoshiro256++ pseudo-random generator (Blackman & Vigna, 2019), seeded
/// through SplitMix64 so that every 64-bit seed gives a distinct, well-mixed
/// state. Period 2^256 - 1. Satisfies the UniformRandomBitGenerator concept.
/// Same seed => same sequence on every platform.
class Xoshiro256pp {
 public:
  using result_type = std::uint64_t;

  explicit Xoshiro256pp(std::uint64_t seed = 0) { this->seed(seed); }

  /// Re-seeds: the state becomes four SplitMix64 outputs of `seed`.
  void seed(std::uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }

  /// Next 64 random bits. O(1).
  result_type operator()() {
    const std::uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  friend bool operator==(const Xoshiro256pp& a, const Xoshiro256pp& b) {
    return a.s_[0] == b.s_[0] && a.s_[1] == b.s_[1] && a.s_[2] == b.s_[2] && a.s_[3] == b.s_[3];
  }
  friend bool operator!=(const Xoshiro256pp& a, const Xoshiro256pp& b) { return !(a == b); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

namespace detail {
/// Writes `out[0, n)` = the uniforms of `fill_gumbel` (see there), drawing
/// `ceil(n / 2)` outputs of `gen`. The 23-bit integer `j` goes into the
/// mantissa of 1.0 (`1 + j · 2^-23`, exact) and `1 − 2^-24` is subtracted
/// (exact by Sterbenz), which gives `(j + 0.5) · 2^-23` exactly without an
/// integer-to-float conversion; the subtraction runs vectorised.
inline void fill_uniform_open(Xoshiro256pp& gen, float* out, std::size_t n) {
  constexpr std::uint32_t kOne = 0x3f800000u;  // bits of 1.0f
  std::size_t i = 0;
  for (; i + 1 < n; i += 2) {
    const std::uint64_t bits = gen();
    const std::uint32_t hi = kOne | static_cast<std::uint32_t>(bits >> 41);
    const std::uint32_t lo = kOne | (static_cast<std::uint32_t>(bits >> 9) & 0x7fffffu);
    std::memcpy(out + i, &hi, sizeof hi);
    std::memcpy(out + i + 1, &lo, sizeof lo);
  }
  if (i < n) {
    const std::uint32_t hi = kOne | static_cast<std::uint32_t>(gen() >> 41);
    std::memcpy(out + i, &hi, sizeof hi);
  }
  constexpr float kOffset = 1.0f - 1.0f / 16777216.0f;  // 1 − 2^-24
  for (std::size_t k = 0; k < n; ++k) out[k] -= kOffset;
}
/// In place: `u -> −log(−log u)` for `u` in (0, 1). Vectorised.
inline void gumbel_from_uniform(float* u, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) u[i] = -log_positive(-log_positive(u[i]));
}
}  // namespace detail

/// Fills `out[0, n)` with i.i.d. Gumbel(0, 1) draws `ζ = −log(−log U)`
/// (Keyformer §3.3, Eq. 5–7), `U` uniform on the open interval (0, 1).
///
/// Each 64-bit output gives two 23-bit uniforms `U = (j + 0.5) · 2^-23` (the
/// high 23 bits for `out[i]`, bits 9..31 for `out[i + 1]`; an odd last element
/// takes the high bits of one more output), so every `U` is exactly
/// representable in float and strictly inside (0, 1); the draws therefore lie
/// in [−2.77, 16.6] (float resolution; the truncated tail mass is below
/// 1.2e-7). Both logarithms use `detail::log_positive` (relative error below
/// 1.1e-7, so ζ is within 1e-6 of the exact value for every possible `U`),
/// vectorised. Complexity O(n); no allocation. Deterministic for a given
/// generator state (and a given build: the last bits may depend on whether the
/// compiler fuses multiply-adds).
inline void fill_gumbel(Xoshiro256pp& gen, float* out, std::size_t n) {
  detail::fill_uniform_open(gen, out, n);
  detail::gumbel_from_uniform(out, n);
}

}  // namespace kvevict
