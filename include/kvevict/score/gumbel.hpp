// score/gumbel.hpp — seeded Gumbel(0, 1) noise for the Keyformer score.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kvevict/detail/fast_math.hpp"
#include "kvevict/detail/hd.hpp"
#include "kvevict/core/random.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/detail/vec16.hpp"

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
/// In place: `u -> −log(−log u)` for `u` in (0, 1) (both logs
/// `neg_log_positive`, so within 9.3e-6 of the exact value). Vector code at any
/// optimisation level (`KVEVICT_SIMD`; element-wise, so the same bits whatever
/// the vector width). O(n).
inline void gumbel_from_uniform(float* u, std::size_t n) {
#if defined(KVEVICT_VEC16)
  vk::gumbel_from_uniform(u, n);  // dispatched (detail/vec16.hpp), the same bits
#else
  KVEVICT_SIMD
  for (std::size_t i = 0; i < n; ++i) u[i] = neg_log_positive(neg_log_positive(u[i]));
#endif
}
/// SplitMix64's output function for state `z` (Steele, Lea & Flood, 2014):
/// adds the golden-ratio increment, then mixes; a bijection of 64-bit words.
KVEVICT_HD inline constexpr std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
/// Chris Wellons' `lowbias32` integer hash (a bijection of 32-bit words).
KVEVICT_HD inline constexpr std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
}  // namespace detail

/// The 64-bit key of one noise row (see `fill_gumbel_row`):
/// `splitmix64(splitmix64(splitmix64(seed) ^ q_head) ^ query_position)`, a
/// bijection in each argument when the others are fixed. O(1).
KVEVICT_HD inline constexpr std::uint64_t gumbel_row_key(std::uint64_t seed, std::uint64_t q_head,
                                              std::uint64_t query_position) {
  return detail::splitmix64(detail::splitmix64(detail::splitmix64(seed) ^ q_head) ^ query_position);
}

namespace detail {
/// The uniform `U` of slot `slot` in the noise row with key `key` (the formula of
/// `fill_gumbel_row`, one element): the one definition the CPU loop below and the CUDA
/// kernels (include/kvevict/cuda/) share. O(1).
KVEVICT_HD inline float gumbel_uniform(std::uint64_t key, std::uint32_t slot) {
  constexpr std::uint32_t kOne = 0x3f800000u;            // bits of 1.0f
  constexpr float kOffset = 1.0f - 1.0f / 16777216.0f;  // 1 − 2^-24
  const auto lo = static_cast<std::uint32_t>(key), hi = static_cast<std::uint32_t>(key >> 32);
  const std::uint32_t x = lowbias32((slot + lo) ^ hi);
  return bits_float(kOne | (x >> 9)) - kOffset;
}
/// ζ of slot `slot` in the noise row with key `key`: `−log(−log U)` of `gumbel_uniform`
/// (`neg_log_positive` twice),
/// the element `fill_gumbel_row(key, slot, out, 1)` writes. O(1).
KVEVICT_HD inline float gumbel_zeta(std::uint64_t key, std::uint32_t slot) {
  return neg_log_positive(neg_log_positive(gumbel_uniform(key, slot)));
}
/// The uniforms `U` of `fill_gumbel_row` (see there) into `out[0, n)`: the
/// hash of each slot, 32-bit integer operations in one vector loop. O(n).
inline void uniform_row(std::uint64_t key, std::size_t first_slot, float* out, std::size_t n) {
  const auto s0 = static_cast<std::uint32_t>(first_slot);
  KVEVICT_SIMD
  for (std::size_t i = 0; i < n; ++i) out[i] = gumbel_uniform(key, s0 + static_cast<std::uint32_t>(i));
}
}  // namespace detail

/// The counter-based Gumbel noise of the caches: `out[i]` = ζ of
/// slot `first_slot + i` in the row with key `key` (`gumbel_row_key(seed,
/// q_head, query_position)`), a pure function of (seed, q_head, query position,
/// slot) — so any split of a step across threads, and any chunking of a prompt,
/// draws the same ζ. With `lo`, `hi` the low and high 32 bits of `key` and `s`
/// the slot index modulo 2^32: `x = lowbias32((s + lo) ^ hi)` (32-bit
/// wrap-around), `j = x >> 9` (23 bits), `U = (j + 0.5) · 2^-23` (exact, strictly
/// inside (0, 1), as `fill_gumbel`), `ζ = −log(−log U)` with
/// `detail::neg_log_positive` (relative error below 7.6e-6, so ζ is within 9.3e-6 of
/// `−ln(−ln U)` for every possible `U`, checked on all 2^23), so ζ lies in
/// [−2.82, 16.7]. For a fixed key the map
/// slot → `x` is a bijection. One loop of 16-lane vectors (hash, uniform, both logs), on the
/// path `active_isa()` chose (detail/vec16.hpp); every path gives the same bits, also without
/// `-ffp-contract=off`. O(n); no allocation.
inline void fill_gumbel_row(std::uint64_t key, std::size_t first_slot, float* out, std::size_t n) {
#if defined(KVEVICT_VEC16)
  detail::vk::gumbel_row(key, static_cast<std::uint32_t>(first_slot), nullptr, out, n);
#else
  detail::uniform_row(key, first_slot, out, n);
  detail::gumbel_from_uniform(out, n);
#endif
}

namespace detail {
/// `out[i] = ζ_i + x[i]` for `i` in `[0, n)`, `ζ_i` = `fill_gumbel_row(key,
/// first_slot, ...)[i]`: the same bits as `fill_gumbel_row` followed by an add
/// (the noisy logits of a Keyformer row), with the add in the loop of the two
/// logs. `out` must not alias `x`. O(n); no allocation.
inline void add_gumbel_row(std::uint64_t key, std::size_t first_slot, const float* x, float* out, std::size_t n) {
#if defined(KVEVICT_VEC16)
  vk::gumbel_row(key, static_cast<std::uint32_t>(first_slot), x, out, n);  // one fused, dispatched loop
#else
  uniform_row(key, first_slot, out, n);
  KVEVICT_SIMD
  for (std::size_t i = 0; i < n; ++i) out[i] = neg_log_positive(neg_log_positive(out[i])) + x[i];
#endif
}
}  // namespace detail

/// Fills `out[0, n)` with i.i.d. Gumbel(0, 1) draws `ζ = −log(−log U)`
/// (Keyformer §3.3, Eq. 5–7), `U` uniform on the open interval (0, 1).
///
/// Each 64-bit output gives two 23-bit uniforms `U = (j + 0.5) · 2^-23` (the
/// high 23 bits for `out[i]`, bits 9..31 for `out[i + 1]`; an odd last element
/// takes the high bits of one more output), so every `U` is exactly
/// representable in float and strictly inside (0, 1); the draws therefore lie
/// in [−2.82, 16.7] (float resolution; the truncated tail mass is below
/// 1.2e-7). Both logarithms use `detail::neg_log_positive` (relative error below
/// 7.6e-6, so ζ is within 9.3e-6 of the exact value for every possible `U`),
/// vectorised. Complexity O(n); no allocation. Deterministic for a given
/// generator state: the same bits on every build and dispatched path (the logs
/// are never contracted into FMAs, detail/no_contract.hpp).
inline void fill_gumbel(Xoshiro256pp& gen, float* out, std::size_t n) {
  detail::fill_uniform_open(gen, out, n);
  detail::gumbel_from_uniform(out, n);
}

}  // namespace kvevict
