// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/softmax_accumulate.hpp — the one numeric kernel every score policy uses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <Eigen/Core>

#include "kvevict/score/fast_math.hpp"
#include "kvevict/score/gumbel.hpp"

namespace kvevict {

namespace detail {

/// Where the noise ζ of a row comes from.
struct NoNoise {};
struct GivenNoise {
  const float* zeta;  ///< `[n]`, any values (validated through `x + ζ`)
};
struct DrawnNoise {
  Xoshiro256pp* gen;  ///< draws exactly as `fill_gumbel(*gen, ζ, n)` would
};

constexpr std::size_t kChunk = 512;  // L1-sized piece; even, so Gumbel draw pairs stay aligned

/// max of v[0, len) with NaN propagation (Eigen, vectorised); -inf if empty.
inline float max_propagate_nan(const float* v, std::size_t len) {
  if (len == 0) return -std::numeric_limits<float>::infinity();
  return Eigen::Map<const Eigen::ArrayXf>(v, static_cast<Eigen::Index>(len)).maxCoeff<Eigen::PropagateNaN>();
}
/// The larger of two maxima, NaN if either is NaN.
inline float max_nan(float a, float b) { return (a != a || b != b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b); }

/// Pass 1 of a row: `y = x + ζ` written to `y_out` (noisy rows only) and
/// `*max` = max of `y`, NaN if some `y` is NaN. Returns the array holding `y`
/// (`x` itself when noise-free).
inline const float* row_values(const float* x, NoNoise, std::size_t n, float* /*y_out*/, float* max) {
  *max = max_propagate_nan(x, n);
  return x;
}
inline const float* row_values(const float* x, GivenNoise noise, std::size_t n, float* y_out, float* max) {
  for (std::size_t i = 0; i < n; ++i) y_out[i] = x[i] + noise.zeta[i];
  *max = max_propagate_nan(y_out, n);
  return y_out;
}
inline const float* row_values(const float* x, DrawnNoise noise, std::size_t n, float* y_out, float* max) {
  float z[kChunk];
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t c0 = 0; c0 < n; c0 += kChunk) {
    const std::size_t len = std::min(kChunk, n - c0);
    fill_uniform_open(*noise.gen, z, len);
    gumbel_from_uniform(z, len);
    float* y = y_out + c0;
    const float* xc = x + c0;
    for (std::size_t i = 0; i < len; ++i) y[i] = xc[i] + z[i];
    m = max_nan(m, max_propagate_nan(y, len));
  }
  *max = m;
  return y_out;
}

/// The softmax numerators of one row: with `y = x + ζ` (ζ per `noise`),
/// writes `e[i] = exp((y[i] − max y) · inv_tau)` (0 where `y[i] = -inf`) and
/// `*inv_sum = 1 / Σ e`, so that `softmax(y / τ) = e · inv_sum`. A fully masked
/// row gives `e = 0`, `*inv_sum = 0`. Returns `false` (nothing meaningful
/// written, noise already drawn) if some `y[i]` is NaN or `+inf`.
/// Two streaming passes (ζ, `y` and max; exp and sum), worked in L1-sized
/// chunks; `e` must not alias `x`. O(n), no allocation.
template <class Noise>
bool softmax_numerators(const float* x, Noise noise, std::size_t n, float inv_tau, float* e, float* inv_sum) {
  float m = 0.0f;
  const float* y = row_values(x, noise, n, e, &m);
  if (m != m || m == std::numeric_limits<float>::infinity()) return false;  // NaN or +inf somewhere
  if (m == -std::numeric_limits<float>::infinity()) {                      // fully masked (or n = 0)
    std::fill_n(e, n, 0.0f);
    *inv_sum = 0.0f;
    return true;
  }
  float sum = 0.0f;
  for (std::size_t c0 = 0; c0 < n; c0 += kChunk) {
    const std::size_t len = std::min(kChunk, n - c0);
    const float* yc = y + c0;
    float* ec = e + c0;
    for (std::size_t i = 0; i < len; ++i) ec[i] = exp_nonpositive((yc[i] - m) * inv_tau);  // -inf -> 0
    sum += Eigen::Map<const Eigen::ArrayXf>(ec, static_cast<Eigen::Index>(len)).sum();
  }
  *inv_sum = 1.0f / sum;  // sum >= 1: the max entry contributes exp(0)
  return true;
}

/// Chunks of `kChunk` elements in a row of `n`.
inline std::size_t chunk_count(std::size_t n) { return (n + kChunk - 1) / kChunk; }

/// `y = x + ζ` of chunk `[c0, c0 + len)` of a row: a pointer into `x` when
/// noise-free, else `buf` filled (noise drawn in the generator's order).
inline const float* chunk_values(const float* x, NoNoise, std::size_t c0, std::size_t /*len*/, float* /*buf*/) {
  return x + c0;
}
inline const float* chunk_values(const float* x, GivenNoise noise, std::size_t c0, std::size_t len, float* buf) {
  for (std::size_t i = 0; i < len; ++i) buf[i] = x[c0 + i] + noise.zeta[c0 + i];
  return buf;
}
inline const float* chunk_values(const float* x, DrawnNoise noise, std::size_t c0, std::size_t len, float* buf) {
  fill_uniform_open(*noise.gen, buf, len);
  gumbel_from_uniform(buf, len);
  for (std::size_t i = 0; i < len; ++i) buf[i] += x[c0 + i];
  return buf;
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
/// (then `e` and `f` hold garbage and the noise is drawn). O(n), no allocation.
template <class Noise>
bool softmax_chunks(const float* x, Noise noise, std::size_t n, float inv_tau, float* e, float* f) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float buf[kChunk];
  const std::size_t chunks = chunk_count(n);
  float* chunk_max = f + chunks;  // second half: scratch
  float row_max = -kInf;
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t c0 = c * kChunk, len = std::min(kChunk, n - c0);
    const float* y = chunk_values(x, noise, c0, len, buf);
    const float m = max_propagate_nan(y, len);
    if (m != m || m == kInf) return false;
    chunk_max[c] = m;
    float* ec = e + c0;
    if (m == -kInf) {  // fully masked chunk
      std::fill_n(ec, len, 0.0f);
      f[c] = 0.0f;
      continue;
    }
    for (std::size_t i = 0; i < len; ++i) ec[i] = exp_nonpositive((y[i] - m) * inv_tau);  // -inf -> 0
    f[c] = Eigen::Map<const Eigen::ArrayXf>(ec, static_cast<Eigen::Index>(len)).sum();  // chunk sum, >= 1
    row_max = std::max(row_max, m);
  }
  if (row_max == -kInf) {  // fully masked row (or n = 0): adds nothing
    std::fill_n(f, chunks, 0.0f);
    return true;
  }
  float total = 0.0f;
  for (std::size_t c = 0; c < chunks; ++c) {
    const float scale = exp_nonpositive((chunk_max[c] - row_max) * inv_tau);  // masked chunk: exp(-inf) = 0
    chunk_max[c] = scale;
    total += f[c] * scale;  // total >= 1: the row max's chunk has scale 1 and sum >= 1
  }
  const float inv_total = 1.0f / total;
  for (std::size_t c = 0; c < chunks; ++c) f[c] = chunk_max[c] * inv_total;
  return true;
}

/// `acc[i] += e[i] · f[i / kChunk]` (`assign`: `acc[i] = ...`) over a row of `n`.
inline void add_chunks(const float* e, const float* f, std::size_t n, float* acc, bool assign) {
  for (std::size_t c0 = 0, c = 0; c0 < n; c0 += kChunk, ++c) {
    const std::size_t len = std::min(kChunk, n - c0);
    const float scale = f[c];
    const float* ec = e + c0;
    float* ac = acc + c0;
    if (assign)
      for (std::size_t i = 0; i < len; ++i) ac[i] = ec[i] * scale;
    else
      for (std::size_t i = 0; i < len; ++i) ac[i] += ec[i] * scale;
  }
}

}  // namespace detail

/// Adds `p = softmax((x + ζ) / τ)` over one attention row into `acc`
/// (Keyformer Eq. 7 with noise; H2O's accumulated attention with `ζ = 0`, τ = 1).
///
///  - `x[0, n)`: pre-softmax logits of one query row (q·k/√d plus any additive
///    bias). `-inf` marks a masked entry: it receives `p = 0`. A row whose every
///    entry is `-inf` adds nothing and is not an error.
///  - `zeta[0, n)`: Gumbel noise, or `nullptr` for none.
///  - `inv_tau = 1 / τ`, τ > 0 (checked by the caller).
///  - `acc[0, n)`: accumulator, `acc[i] += p[i]`.
///  - `scratch[0, n)`: work space; overwritten.
///
/// Returns `false`, leaving `acc` untouched, if the row contains NaN or `+inf`
/// (the softmax is undefined); the caller turns that into an exception.
/// Numerically stable (max subtracted before `exp`); `exp` is
/// `detail::exp_nonpositive` (relative error below 1.2e-7; terms below 1e-38
/// of the max count as 0). O(n), three vectorised passes, no allocation.
inline bool accumulate_softmax(const float* x, const float* zeta, std::size_t n, float inv_tau, float* acc,
                               float* scratch) {
  float r = 0.0f;
  const bool ok = zeta != nullptr
                      ? detail::softmax_numerators(x, detail::GivenNoise{zeta}, n, inv_tau, scratch, &r)
                      : detail::softmax_numerators(x, detail::NoNoise{}, n, inv_tau, scratch, &r);
  if (!ok) return false;
  for (std::size_t i = 0; i < n; ++i) acc[i] += scratch[i] * r;
  return true;
}

}  // namespace kvevict
