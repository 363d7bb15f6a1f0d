// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/gumbel.hpp — seeded Gumbel(0, 1) noise for the Keyformer score.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvevict/core/fast_math.hpp"
#include "kvevict/core/random.hpp"
#include "kvevict/core/simd.hpp"

namespace kvevict {

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
  KVEVICT_SIMD  // element-wise: scalar at -O2 without it (GCC 12's cheap vectoriser needs no epilogue)
  for (std::size_t k = 0; k < n; ++k) out[k] -= kOffset;
}
/// In place: `u -> −log(−log u)` for `u` in (0, 1). Vector code at any
/// optimisation level (`KVEVICT_SIMD`; element-wise, so the same bits whatever
/// the vector width). O(n).
inline void gumbel_from_uniform(float* u, std::size_t n) {
  KVEVICT_SIMD
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
