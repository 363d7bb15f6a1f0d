// score/softmax_accumulate.hpp — the one numeric kernel every score policy uses:
// softmax of a logits row (with optional noise and temperature) added into scores.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <Eigen/Core>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/fast_math.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/detail/vec16.hpp"
#include "kvevict/score/gumbel.hpp"

namespace kvevict {

namespace detail {

/// Where the noise ζ of a row comes from: none, injected (`GivenNoise`), or
/// drawn by the counter-based generator (`DrawnNoise`, `fill_gumbel_row`).
struct NoNoise {};
struct GivenNoise {
  const float* zeta;  ///< `[n]`, any values (validated through `x + ζ`)
};
struct DrawnNoise {
  std::uint64_t key;  ///< the row's `gumbel_row_key`: ζ[i] is `fill_gumbel_row(key, i, ...)`
};
/// ζ scaled by `scale` in (0, 1) (`GumbelLogitScore::noise_scale`): `y = x + scale · ζ`, ζ given or drawn
/// as above. A separate type, so that the unscaled paths keep their code (and bits) as they are.
struct ScaledGivenNoise {
  const float* zeta;  ///< `[n]`, as `GivenNoise`
  float scale;        ///< in (0, 1)
};
struct ScaledDrawnNoise {
  std::uint64_t key;  ///< as `DrawnNoise`
  float scale;        ///< in (0, 1)
};

/// L1-sized piece of a row (floats); even, so Gumbel draw pairs stay aligned.
/// `inline constexpr`: one object in every translation unit (no ODR hazard when
/// inline functions bind it by reference, e.g. through `std::min`).
inline constexpr std::size_t kChunk = 512;

/// Lanes of the fixed-order reductions below: 16 floats, one AVX-512 register,
/// two AVX ones, four SSE ones; the lane structure (and so the result) is the same
/// whatever the target's vector width.
inline constexpr std::size_t kLanes = 16;

/// max of v[0, len), NaN if some `v[i]` is NaN; -inf if empty. 16 explicit lanes
/// (`lane[i % 16] = max(lane[i % 16], v[i])`, each lane in index order) plus a
/// NaN flag per lane, then the lanes and the tail in index order: the same bits
/// for any address and any target (a max is exact, but the sign of a zero result
/// would depend on the order), and the lane loop is vector code at any
/// optimisation level (`KVEVICT_SIMD` on the 16 lanes). O(len), no allocation.
inline float max_propagate_nan(const float* v, std::size_t len) {
#if defined(KVEVICT_VEC16)
  return vk::max(v, len);  // dispatched (detail/vec16.hpp): the same lanes, the same bits
#else
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float lane[kLanes];
  std::uint32_t nan[kLanes] = {};
  for (std::size_t l = 0; l < kLanes; ++l) lane[l] = -kInf;
  std::size_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    // g++ 12 leaves this select scalar when asked to unroll it (KVEVICT_LANES) but makes one
    // vector op of it under `omp simd` (4-10x faster); clang++ vectorises it either way.
    KVEVICT_SIMD
    for (std::size_t l = 0; l < kLanes; ++l) {
      const float x = v[i + l];
      lane[l] = x > lane[l] ? x : lane[l];
      nan[l] |= static_cast<std::uint32_t>(x != x);
    }
  }
  float m = -kInf;
  std::uint32_t any_nan = 0;
  for (std::size_t l = 0; l < kLanes; ++l) {
    m = lane[l] > m ? lane[l] : m;
    any_nan |= nan[l];
  }
  for (; i < len; ++i) {
    m = v[i] > m ? v[i] : m;
    any_nan |= static_cast<std::uint32_t>(v[i] != v[i]);
  }
  return any_nan != 0 ? std::numeric_limits<float>::quiet_NaN() : m;
#endif
}

/// Σ v[0, len) in one fixed order: 16 lane sums (`lane[i % 16] += v[i]`, which
/// compilers vectorise without reassociating), then the lanes and the tail in
/// index order. Unlike Eigen's `sum()`, whose vectorised order depends on the
/// pointer's alignment and on the packet width (SSE / AVX / AVX-512), the
/// result is the same bits for any address and any target, which the
/// bit-identical guarantees (paged vs contiguous, `accumulate_softmax` vs the
/// cache) rely on. The lane loop is vector code at any optimisation level
/// (`KVEVICT_LANES`: the lanes in registers, never a reordering `reduction`). O(len), no allocation.
inline float sum_fixed_order(const float* v, std::size_t len) {
#if defined(KVEVICT_VEC16)
  return vk::sum(v, len);  // dispatched (detail/vec16.hpp): the same lanes, the same bits
#else
  float lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    KVEVICT_LANES  // across lanes: each lane still adds in index order
    for (std::size_t l = 0; l < kLanes; ++l) lane[l] += v[i + l];
  }
  float total = 0.0f;
  for (std::size_t l = 0; l < kLanes; ++l) total += lane[l];
  for (; i < len; ++i) total += v[i];
  return total;
#endif
}
/// Chunks of `kChunk` elements in a row of `n` (the last one may be shorter). O(1).
inline constexpr std::size_t chunk_count(std::size_t n) { return (n + kChunk - 1) / kChunk; }

/// Whether every `y[i] = x[i] (+ ζ[i])` of a row is below `+inf` (no NaN, no
/// `+inf`; `-inf` is fine): exactly the rows `softmax_chunks` accepts. With
/// `NoNoise` or `DrawnNoise` only `x` is read: a drawn ζ is finite and at most
/// 16.7 (`fill_gumbel_row`), so `x + ζ` is NaN / `+inf` iff `x` is (finite `x` plus
/// ζ rounds to at most `FLT_MAX`). Lets a caller check a whole step before it
/// changes anything, instead of backing its scores up. 16 explicit lanes of
/// flags (vector code at any optimisation level, on the dispatched path). O(n) reads, no allocation.
inline bool row_accepted(const float* x, const float* zeta, std::size_t n) {
#if defined(KVEVICT_VEC16)
  return vk::row_ok(x, zeta, n);  // dispatched (detail/vec16.hpp)
#else
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::uint32_t bad[kLanes] = {};
  std::size_t i = 0;
  if (zeta == nullptr) {
    for (; i + kLanes <= n; i += kLanes) {
      KVEVICT_LANES
      for (std::size_t l = 0; l < kLanes; ++l) bad[l] |= static_cast<std::uint32_t>(!(x[i + l] < kInf));
    }
    for (; i < n; ++i) bad[0] |= static_cast<std::uint32_t>(!(x[i] < kInf));
  } else {
    for (; i + kLanes <= n; i += kLanes) {
      KVEVICT_LANES
      for (std::size_t l = 0; l < kLanes; ++l) bad[l] |= static_cast<std::uint32_t>(!(x[i + l] + zeta[i + l] < kInf));
    }
    for (; i < n; ++i) bad[0] |= static_cast<std::uint32_t>(!(x[i] + zeta[i] < kInf));
  }
  std::uint32_t any = 0;
  for (std::size_t l = 0; l < kLanes; ++l) any |= bad[l];
  return any == 0;
#endif
}

/// `y = x + ζ` of chunk `[c0, c0 + len)` of a row: a pointer into `x` when
/// noise-free, else `buf` filled (drawn ζ: `fill_gumbel_row(key, c0, ...)`).
inline const float* chunk_values(const float* x, NoNoise, std::size_t c0, std::size_t /*len*/, float* /*buf*/) {
  return x + c0;
}
inline const float* chunk_values(const float* x, GivenNoise noise, std::size_t c0, std::size_t len, float* buf) {
  KVEVICT_SIMD
  for (std::size_t i = 0; i < len; ++i) buf[i] = x[c0 + i] + noise.zeta[c0 + i];
  return buf;
}
inline const float* chunk_values(const float* x, DrawnNoise noise, std::size_t c0, std::size_t len, float* buf) {
  add_gumbel_row(noise.key, c0, x + c0, buf, len);
  return buf;
}
inline const float* chunk_values(const float* x, ScaledGivenNoise noise, std::size_t c0, std::size_t len, float* buf) {
  KVEVICT_SIMD
  for (std::size_t i = 0; i < len; ++i) buf[i] = x[c0 + i] + noise.scale * noise.zeta[c0 + i];
  return buf;
}
inline const float* chunk_values(const float* x, ScaledDrawnNoise noise, std::size_t c0, std::size_t len, float* buf) {
  fill_gumbel_row(noise.key, c0, buf, len);  // ζ, then x + s·ζ (a separate multiply and add, no FMA contract needed)
  KVEVICT_SIMD
  for (std::size_t i = 0; i < len; ++i) buf[i] = x[c0 + i] + noise.scale * buf[i];
  return buf;
}

/// Phase 1 of `softmax_chunks` on chunks `[c_begin, c_end)` of a row of `n`
/// (any split of the chunks gives the same bits): per chunk `c`, with `y = x + ζ`,
/// `mx[c]` = its max `m_c` (NaN propagated), `e[i] = exp((y[i] − m_c) · inv_tau)`
/// and `sum[c] = Σ e` (fixed order; 0 and `e = 0` for a fully masked chunk).
/// A chunk whose max is NaN or `+inf` gets `sum[c] = 0`, `e` untouched, and the
/// call returns `false` (the other chunks are still done, so `mx` is fully
/// written). Writes only `e[c_begin·kChunk, ...)`, `sum[c]`, `mx[c]` of its
/// chunks, so disjoint ranges may run concurrently. O(range), no allocation.
template <class Noise>
bool softmax_pass(const float* x, Noise noise, std::size_t n, float inv_tau, std::size_t c_begin,
                  std::size_t c_end, float* e, float* sum, float* mx) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float buf[kChunk];
  bool ok = true;
  for (std::size_t c = c_begin; c < c_end; ++c) {
    const std::size_t c0 = c * kChunk, len = std::min(kChunk, n - c0);
    const float* y = chunk_values(x, noise, c0, len, buf);
    const float m = max_propagate_nan(y, len);
    mx[c] = m;
    float* ec = e + c0;
    if (m != m || m == kInf) {
      ok = false;
      sum[c] = 0.0f;
      continue;
    }
    if (m == -kInf) {  // fully masked chunk
      std::fill_n(ec, len, 0.0f);
      sum[c] = 0.0f;
      continue;
    }
#if defined(KVEVICT_VEC16)
    sum[c] = vk::exp_sum(y, m, inv_tau, ec, len);  // the loop below and its sum, dispatched
#else
    KVEVICT_SIMD
    for (std::size_t i = 0; i < len; ++i) ec[i] = exp_nonpositive((y[i] - m) * inv_tau);  // -inf -> 0
    sum[c] = sum_fixed_order(ec, len);  // chunk sum, >= 1
#endif
  }
  return ok;
}

/// Whether some chunk max `mx[0, chunks)` of `softmax_pass` is NaN or `+inf`.
inline bool softmax_bad(const float* mx, std::size_t chunks) {
  for (std::size_t c = 0; c < chunks; ++c)
    if (mx[c] != mx[c] || mx[c] == std::numeric_limits<float>::infinity()) return true;
  return false;
}

/// Phase 2 of `softmax_chunks`, over all `chunks` of a row whose `softmax_pass`
/// succeeded: the fixed-order combine. In place, `f[c] = sum[c] · exp((m_c −
/// max m) · inv_tau) / Σ_c' (sum[c'] · exp((m_c' − max m) · inv_tau))` (c'
/// ascending), `f = 0` for a fully masked row; `mx` becomes the scales. Never
/// contracted into FMAs (detail/no_contract.hpp). O(chunks), no allocation.
KVEVICT_NO_CONTRACT_FN inline void softmax_combine(float* f, float* mx, std::size_t chunks, float inv_tau) {
  KVEVICT_NO_CONTRACT_BODY
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float row_max = -kInf;
  for (std::size_t c = 0; c < chunks; ++c) row_max = std::max(row_max, mx[c]);
  if (row_max == -kInf) {  // fully masked row (or n = 0): adds nothing
    std::fill_n(f, chunks, 0.0f);
    return;
  }
  float total = 0.0f;
  for (std::size_t c = 0; c < chunks; ++c) {
    const float scale = exp_nonpositive((mx[c] - row_max) * inv_tau);  // masked chunk: exp(-inf) = 0
    mx[c] = scale;
    total += f[c] * scale;  // total >= 1: the row max's chunk has scale 1 and sum >= 1
  }
  const float inv_total = 1.0f / total;
  for (std::size_t c = 0; c < chunks; ++c) f[c] = mx[c] * inv_total;
}

/// The softmax of one row in one streaming pass (online softmax by chunk):
/// with `y = x + ζ` (ζ per `noise`), writes `e[i] = exp((y[i] − m_c) · inv_tau)`
/// where `m_c` is the max of `i`'s chunk (0 where `y[i] = -inf`), and
/// `f[c] = exp((m_c − max y) · inv_tau) / Σ_i exp((y[i] − max y) · inv_tau)`, so
/// that `softmax(y / τ)[i] = e[i] · f[i / kChunk]` (mathematically; rounding
/// differs from the two-pass form by a few ulp). A fully masked row gives
/// `f = 0`. `f` needs room for `2 · chunk_count(n)` floats (the first half
/// holds the result). ζ, `y` and the exp of a chunk stay in L1; `x` is read
/// once and `e` written once. Returns `false` if some `y[i]` is NaN or `+inf`
/// (then `e` and `f` hold garbage). This is `softmax_pass` over every chunk then
/// `softmax_combine`, so a split of the chunks across threads gives the same
/// bits. O(n), no allocation.
template <class Noise>
bool softmax_chunks(const float* x, Noise noise, std::size_t n, float inv_tau, float* e, float* f) {
  const std::size_t chunks = chunk_count(n);
  if (!softmax_pass(x, noise, n, inv_tau, 0, chunks, e, f, f + chunks)) return false;
  softmax_combine(f, f + chunks, chunks, inv_tau);
  return true;
}

/// `acc[i] += e[i] · f[i / kChunk]` (`assign`: `acc[i] = ...`) over a row of `n`.
inline void add_chunks(const float* e, const float* f, std::size_t n, float* acc, bool assign) {
  for (std::size_t c0 = 0, c = 0; c0 < n; c0 += kChunk, ++c) {
    const std::size_t len = std::min(kChunk, n - c0);
    const float scale = f[c];
    const float* ec = e + c0;
    float* ac = acc + c0;
#if defined(KVEVICT_VEC16)
    vk::scale_add(ec, scale, ac, len, assign);  // the loops below, dispatched
#else
    if (assign) {
      KVEVICT_SIMD
      for (std::size_t i = 0; i < len; ++i) ac[i] = ec[i] * scale;
    } else {
      KVEVICT_SIMD
      for (std::size_t i = 0; i < len; ++i) ac[i] += ec[i] * scale;
    }
#endif
  }
}

}  // namespace detail

/// Floats of scratch space `accumulate_softmax` needs for a row of `n`:
/// `n` for the numerators plus `2 · ceil(n / 512)` for the per-chunk factors. Throws
/// `std::invalid_argument` if that count overflows `std::size_t` (no row of `n` floats exists then).
inline constexpr std::size_t softmax_scratch_size(std::size_t n) {
  // ceil(n / 512) without n + 511, which wraps for the largest n
  const std::size_t factors = 2 * (n / detail::kChunk + (n % detail::kChunk != 0 ? 1 : 0));
  return n <= SIZE_MAX - factors ? n + factors
                                 : throw std::invalid_argument(detail::concat(
                                       "kvevict::softmax_scratch_size: n + 2 * ceil(n / 512) = ", n, " + ", factors,
                                       " overflows std::size_t"));
}

/// Adds `p = softmax((x + ζ) / τ)` over one attention row into `acc`
/// (Keyformer Eq. 7 with noise; H2O's accumulated attention with `ζ = 0`, τ = 1).
/// This is the kernel `Cache` runs for every query row (`detail::softmax_chunks`
/// followed by `detail::add_chunks`), so its tests test the shipped code.
///
///  - `x[0, n)`: pre-softmax logits of one query row (q·k/√d plus any additive
///    bias). `-inf` marks a masked entry: it receives `p = 0`. A row whose every
///    entry is `-inf` adds nothing and is not an error.
///  - `zeta[0, n)`: Gumbel noise, or `nullptr` for none.
///  - `inv_tau = 1 / τ`, finite and > 0 (checked by the caller).
///  - `acc[0, n)`: accumulator, `acc[i] += p[i]`.
///  - `scratch[0, softmax_scratch_size(n))`: work space; overwritten; must not
///    alias `x`, `zeta` or `acc`.
///
/// Returns `false`, leaving `acc` untouched, if some `x[i] + ζ[i]` is NaN or
/// `+inf` (the softmax is undefined); the caller turns that into an exception.
/// Numerically stable (online softmax: the max of each 512-element chunk is
/// subtracted before `exp`, chunks are rescaled to the row max); `exp` is
/// `detail::exp_nonpositive` (relative error below 1.2e-7; terms below 1e-38
/// of the max count as 0). O(n), one streaming pass over `x` plus one over the
/// numerators, no allocation.
inline bool accumulate_softmax(const float* x, const float* zeta, std::size_t n, float inv_tau, float* acc,
                               float* scratch) {
  float* e = scratch;
  float* f = scratch + n;
  const bool ok = zeta != nullptr ? detail::softmax_chunks(x, detail::GivenNoise{zeta}, n, inv_tau, e, f)
                                  : detail::softmax_chunks(x, detail::NoNoise{}, n, inv_tau, e, f);
  if (!ok) return false;
  detail::add_chunks(e, f, n, acc, false);
  return true;
}

}  // namespace kvevict
