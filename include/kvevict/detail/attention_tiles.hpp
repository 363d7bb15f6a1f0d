// detail/attention_tiles.hpp — the register tiles of causal_attention (attention/causal_attention.hpp):
// one query block of one KV head's group, Q Kᵀ, online softmax, P V and the probabilities' column sums / maxes.
// SPDX-License-Identifier: Apache-2.0
//
// Written once on the vector types of detail/vec16_math.hpp (`V<W>`) and compiled per dispatched path
// (core/dispatch.hpp). Unlike the scoring kernels these are GEMMs: on AVX2 / AVX-512 `a · b + c` is one FMA
// (contraction allowed in these functions only), on the baseline a multiply and an add, so the paths agree to float rounding, not bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvevict/core/dispatch.hpp"
#include "kvevict/detail/vec16.hpp"
#include "kvevict/detail/vec16_math.hpp"
#include "kvevict/score/gumbel.hpp"

#if defined(KVEVICT_VEC16)
#if defined(__clang__)
#define KVEVICT_CONTRACT_BODY _Pragma("clang fp contract(fast)")
#define KVEVICT_CONTRACT_FN
#else
#define KVEVICT_CONTRACT_BODY
#define KVEVICT_CONTRACT_FN __attribute__((optimize("fp-contract=fast")))
#endif

namespace kvevict {
namespace detail {
namespace tiles {

/// Keys per packed panel of K: 32 columns of Q Kᵀ per register tile on every path.
inline constexpr std::size_t kPanel = 32;
/// Keys per tile of the online softmax (a multiple of kPanel).
inline constexpr std::size_t kKeyTile = 256;

/// One query block's problem: rows `[t][q]` (group head t, query c0 + q), R = g · C of them.
struct BlockArgs {
  const float* qs;      ///< [R][d] the block's queries, scaled, packed
  const float* kp;      ///< the head's K in panels: [P_pad / kPanel][d][kPanel], P_pad = P rounded up
  const float* v;       ///< the head's V, row c at v + c · v_row
  std::size_t v_row;    ///< V's row stride (floats)
  std::size_t d;        ///< head_dim, a multiple of 16
  std::size_t g;        ///< query heads per KV head
  std::size_t C;        ///< queries in the block (1..)
  std::size_t c0;       ///< the block's first query
  std::size_t first;    ///< the first visible key (keys before it: left padding)
  float* s;             ///< scratch [R][s_row]: the block's exp'd logits
  std::size_t s_row;    ///< >= the tiles' span, a multiple of kPanel
  float* o;             ///< scratch [R][d]: the unnormalised output
  bool with_out;        ///< false: no output asked for (no P V, o unused)
  float* m;             ///< scratch [R]: running row max
  float* l;             ///< scratch [R]: running row sum
  float* mt;            ///< scratch [R][n_tiles]: each tile's max when its exps were taken
  float* sums;          ///< [g][sums_row] or null: += each key's probability summed over the block's queries
  float* maxes;         ///< [g][sums_row] or null: each key's probability, max over the block's queries (and before)
  std::size_t sums_row;
  /// Keyformer's track (null `noisy`: none): [g][sums_row] += softmax((x + s·ζ) / τ) summed over the block's
  /// queries, ζ of query head `head0 + t`, row `i − first`, slot `c − first` (gumbel_row_key, vk::gumbel_row).
  float* noisy;
  float* s2;            ///< scratch [R][s_row]: its exps
  float* m2;            ///< scratch [R]
  float* l2;            ///< scratch [R]
  float* mt2;           ///< scratch [R][n_tiles]
  std::uint64_t seed;   ///< the noise seed
  std::size_t head0;    ///< the group's first query head
  float inv_tau;        ///< 1 / τ
  float noise_scale;    ///< s in (0, 1]
  bool noise;           ///< false: ζ = 0 (Keyformer without noise)
};

/// `acc += a · b`, lane-wise: one FMA where the path has it (the dispatched functions allow contraction:
/// KVEVICT_CONTRACT_FN for g++, the pragma here for clang++), a multiply and an add on the baseline.
template <class F>
KVEVICT_VEC_INLINE void fmadd(F& acc, const F& a, const F& b) {
  KVEVICT_CONTRACT_BODY
  acc = a * b + acc;
}

/// Rows of a Q Kᵀ register tile per path (MR x kPanel accumulators fit the path's registers).
template <int W>
inline constexpr std::size_t kQkRows = W == 16 ? 6 : (W == 8 ? 2 : 1);
/// Rows and vectors of a P V register tile per path.
template <int W>
inline constexpr std::size_t kPvRows = W == 16 ? 6 : (W == 8 ? 2 : 1);
template <int W>
inline constexpr std::size_t kPvVecs = 4;

/// s[r][c0 .. c0 + kPanel) = qs[r] · panel columns, r < MR. O(MR · d · kPanel).
template <int W, std::size_t MR>
KVEVICT_VEC_INLINE void qk_tile(const float* qs, std::size_t d, const float* panel, float* s, std::size_t s_row) {
  using F = typename v16::V<W>::F;
  constexpr std::size_t NV = kPanel / W;
  F acc[MR][NV];
  KVEVICT_VEC_UNROLL
  for (std::size_t r = 0; r < MR; ++r)
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) acc[r][j] = F{};
  for (std::size_t x = 0; x < d; ++x) {
    F b[NV];
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) v16::load(b[j], panel + x * kPanel + j * W);
    KVEVICT_VEC_UNROLL
    for (std::size_t r = 0; r < MR; ++r) {
      const F a = F{} + qs[r * d + x];
      KVEVICT_VEC_UNROLL
      for (std::size_t j = 0; j < NV; ++j) fmadd(acc[r][j], a, b[j]);
    }
  }
  KVEVICT_VEC_UNROLL
  for (std::size_t r = 0; r < MR; ++r)
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) v16::store(s + r * s_row + j * W, acc[r][j]);
}

/// o[r][x0 .. x0 + NV·W) += Σ_{c < n} e[r][c] · v[c][x0 ..], r < MR. O(MR · n · NV · W).
template <int W, std::size_t MR, std::size_t NV>
KVEVICT_VEC_INLINE void pv_tile(const float* e, std::size_t e_row, const float* v, std::size_t v_row, std::size_t n,
                                float* o, std::size_t d) {
  using F = typename v16::V<W>::F;
  F acc[MR][NV];
  KVEVICT_VEC_UNROLL
  for (std::size_t r = 0; r < MR; ++r)
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) v16::load(acc[r][j], o + r * d + j * W);
  for (std::size_t c = 0; c < n; ++c) {
    F b[NV];
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) v16::load(b[j], v + c * v_row + j * W);
    KVEVICT_VEC_UNROLL
    for (std::size_t r = 0; r < MR; ++r) {
      const F a = F{} + e[r * e_row + c];
      KVEVICT_VEC_UNROLL
      for (std::size_t j = 0; j < NV; ++j) fmadd(acc[r][j], a, b[j]);
    }
  }
  KVEVICT_VEC_UNROLL
  for (std::size_t r = 0; r < MR; ++r)
    KVEVICT_VEC_UNROLL
    for (std::size_t j = 0; j < NV; ++j) v16::store(o + r * d + j * W, acc[r][j]);
}

/// Rows [r0, r0 + n_rows) of the Q Kᵀ tile over panels [p0, p1): MR rows at a time, then the rest one by one.
template <int W>
KVEVICT_VEC_INLINE void qk_rows(const BlockArgs& a, std::size_t n_rows, std::size_t p0, std::size_t p1,
                                float* s_tile) {
  constexpr std::size_t MR = kQkRows<W>;
  for (std::size_t p = p0; p < p1; ++p) {
    const float* panel = a.kp + p * a.d * kPanel;
    float* s = s_tile + (p - p0) * kPanel;
    std::size_t r = 0;
    for (; r + MR <= n_rows; r += MR) qk_tile<W, MR>(a.qs + r * a.d, a.d, panel, s + r * a.s_row, a.s_row);
    for (; r < n_rows; ++r) qk_tile<W, 1>(a.qs + r * a.d, a.d, panel, s + r * a.s_row, a.s_row);
  }
}

/// o += e · V over n keys for every row, in column groups of kPvVecs vectors, then single vectors.
template <int W>
KVEVICT_VEC_INLINE void pv_rows(const BlockArgs& a, std::size_t n_rows, const float* e, const float* v, std::size_t n) {
  constexpr std::size_t MR = kPvRows<W>, NV = kPvVecs<W>;
  std::size_t x = 0;
  for (; x + NV * W <= a.d; x += NV * W) {
    std::size_t r = 0;
    for (; r + MR <= n_rows; r += MR) pv_tile<W, MR, NV>(e + r * a.s_row, a.s_row, v + x, a.v_row, n, a.o + r * a.d + x, a.d);
    for (; r < n_rows; ++r) pv_tile<W, 1, NV>(e + r * a.s_row, a.s_row, v + x, a.v_row, n, a.o + r * a.d + x, a.d);
  }
  for (; x < a.d; x += W)
    for (std::size_t r = 0; r < n_rows; ++r) pv_tile<W, 1, 1>(e + r * a.s_row, a.s_row, v + x, a.v_row, n, a.o + r * a.d + x, a.d);
}

/// One tile of a row, in place: `row[lo, hi)` (values y) becomes exp((y − m') · inv_tau) for the row's new max
/// m' = max(m, max y), the rest of `[0, span)` 0; l becomes l · α + Σ, and α = exp((m − m') · inv_tau) is
/// returned (1 when the max did not grow, 0 for the row's first visible tile), for what was summed with m.
template <int W>
KVEVICT_VEC_INLINE float tile_row_exp(float* row, std::size_t lo, std::size_t hi, std::size_t span, float inv_tau,
                                      float& m, float& l) {
  using F = typename v16::V<W>::F;
  const float ninf = -std::numeric_limits<float>::infinity();
  if (hi <= lo) {
    std::memset(row, 0, span * sizeof(float));
    return 1.0f;
  }
  float mx = ninf;
  {
    F mv = F{} + ninf;
    std::size_t c = lo;
    for (; c + W <= hi; c += W) {
      F x;
      v16::load(x, row + c);
      mv = x > mv ? x : mv;
    }
    for (int i = 0; i < W; ++i) mx = std::max(mx, mv[i]);
    for (; c < hi; ++c) mx = std::max(mx, row[c]);
  }
  const float m_new = std::max(m, mx);
  const float alpha = m == ninf ? 0.0f : (m_new > m ? std::exp((m - m_new) * inv_tau) : 1.0f);
  m = m_new;
  std::memset(row, 0, lo * sizeof(float));
  const F mv = F{} + m_new, tv = F{} + inv_tau;
  F acc = F{};
  std::size_t c = lo;
  for (; c + W <= hi; c += W) {
    F x;
    v16::load(x, row + c);
    x = (x - mv) * tv;
    v16::exp_nonpositive<W>(x);
    acc = acc + x;
    v16::store(row + c, x);
  }
  if (c < hi) {
    F x;
    v16::load_part(x, row + c, hi - c, ninf);
    x = (x - mv) * tv;
    v16::exp_nonpositive<W>(x);
    typename v16::V<W>::I keep{};
    for (int i = 0; i < W; ++i) keep[i] = c + static_cast<std::size_t>(i) < hi ? -1 : 0;
    x = (F)((typename v16::V<W>::I)x & keep);
    acc = acc + x;
    v16::store_part(row + c, x, hi - c);
  }
  float sum = 0.0f;
  for (int i = 0; i < W; ++i) sum += acc[i];
  l = l * alpha + sum;
  std::memset(row + hi, 0, (span - hi) * sizeof(float));
  return alpha;
}

/// sums[t][c] += Σ_q exp((mt − m) · inv_tau) / l · e[(t, q)][c] over the block's tiles: each row's exps as the
/// probabilities its final max and sum make them.
template <int W>
KVEVICT_VEC_INLINE void column_sums(const BlockArgs& a, const float* e, const float* m, const float* l,
                                    const float* mt, float inv_tau, float* sums, std::size_t k0, std::size_t end,
                                    std::size_t n_tiles) {
  using F = typename v16::V<W>::F;
  for (std::size_t t = 0; t < n_tiles; ++t) {
    const std::size_t c_lo = k0 + t * kKeyTile, c_hi = std::min(end, c_lo + kKeyTile);
    const std::size_t n = c_hi - c_lo;
    for (std::size_t h = 0; h < a.g; ++h) {
      float* out = sums + h * a.sums_row + c_lo;
      for (std::size_t q = 0; q < a.C; ++q) {
        const std::size_t r = h * a.C + q;
        if (l[r] == 0.0f) continue;
        const float w = std::exp((mt[r * n_tiles + t] - m[r]) * inv_tau) / l[r];
        if (w == 0.0f) continue;
        const F wv = F{} + w;
        const float* row = e + r * a.s_row + (c_lo - k0);
        std::size_t c = 0;
        for (; c + W <= n; c += W) {
          F x, y;
          v16::load(x, row + c);
          v16::load(y, out + c);
          fmadd(y, wv, x);
          v16::store(out + c, y);
        }
        for (; c < n; ++c) out[c] += w * row[c];
      }
    }
  }
}

/// maxes[t][c] = max(maxes[t][c], max_q exp(mt − m) / l · e[(t, q)][c]) over the block's tiles: KVzip's score,
/// each key's largest probability.
template <int W>
KVEVICT_VEC_INLINE void column_maxes(const BlockArgs& a, std::size_t k0, std::size_t end, std::size_t n_tiles) {
  using F = typename v16::V<W>::F;
  for (std::size_t t = 0; t < n_tiles; ++t) {
    const std::size_t c_lo = k0 + t * kKeyTile, c_hi = std::min(end, c_lo + kKeyTile);
    const std::size_t n = c_hi - c_lo;
    for (std::size_t h = 0; h < a.g; ++h) {
      float* out = a.maxes + h * a.sums_row + c_lo;
      for (std::size_t q = 0; q < a.C; ++q) {
        const std::size_t r = h * a.C + q;
        if (a.l[r] == 0.0f) continue;
        const float w = std::exp(a.mt[r * n_tiles + t] - a.m[r]) / a.l[r];
        if (w == 0.0f) continue;
        const F wv = F{} + w;
        const float* row = a.s + r * a.s_row + (c_lo - k0);
        std::size_t c = 0;
        for (; c + W <= n; c += W) {
          F x, y;
          v16::load(x, row + c);
          v16::load(y, out + c);
          x = x * wv;
          y = x > y ? x : y;
          v16::store(out + c, y);
        }
        for (; c < n; ++c) out[c] = std::max(out[c], w * row[c]);
      }
    }
  }
}

/// Row r's visible part [lo, hi) of the tile as Keyformer's values y = x + s·ζ into `s2t`: ζ of query head
/// `head0 + t`, row `c0 + q − first`, slot `c − first`, drawn by the library's own noise kernel (vk::gumbel_row,
/// compiled without contraction: the bits of the cache's ζ + x); with s < 1, y = x + s·ζ as a separate multiply
/// and add, as the cache does it.
template <int W>
KVEVICT_VEC_INLINE void noisy_values(const BlockArgs& a, const float* st, float* s2t, std::size_t c_lo,
                                     std::size_t lo, std::size_t hi, std::size_t r) {
  if (hi <= lo) return;
  if (!a.noise) {
    std::memcpy(s2t + lo, st + lo, (hi - lo) * sizeof(float));
    return;
  }
  const std::size_t t = r / a.C, q = r % a.C;
  const std::uint64_t key = gumbel_row_key(a.seed, a.head0 + t, a.c0 + q - a.first);
  const auto s0 = static_cast<std::uint32_t>(c_lo + lo - a.first);
  if (a.noise_scale == 1.0f) {
    vk::gumbel_row(key, s0, st + lo, s2t + lo, hi - lo);
    return;
  }
  vk::gumbel_row(key, s0, nullptr, s2t + lo, hi - lo);
  for (std::size_t c = lo; c < hi; ++c) {
    volatile float scaled = a.noise_scale * s2t[c];  // rounded on its own: no FMA with the add
    s2t[c] = st[c] + scaled;
  }
}

/// One query block: o[r] = Σ_c exp(s_rc − m_r) V_c (unnormalised), l[r] = Σ_c exp(s_rc − m_r), m[r] the row max,
/// over the visible keys [first, c0 + q] of row (t, q); with sums, sums[t][c] += Σ_q p_(t,q),c; with noisy, the
/// same for Keyformer's softmax((x + s·ζ) / τ); with maxes, the max instead of the sum (KVzip). Without
/// with_out, no P V. The keys go in tiles of kKeyTile (online softmax: a new max
/// rescales o and l; each tile's exps are kept with the max they used, mt, and the column sums weight them
/// exp(mt − m) / l at the end). O(R · n · d) time, n = c0 + C − first.
template <int W>
KVEVICT_VEC_INLINE void attention_block_body(const BlockArgs& a) {
  const std::size_t R = a.g * a.C, d = a.d;
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::size_t k0 = a.first / kPanel * kPanel;  // the first panel holding a visible key
  const std::size_t end = a.c0 + a.C;                // one past the block's last visible key
  const std::size_t n_tiles = (end - k0 + kKeyTile - 1) / kKeyTile;
  for (std::size_t r = 0; r < R; ++r) {
    a.m[r] = ninf;
    a.l[r] = 0.0f;
    if (a.noisy != nullptr) {
      a.m2[r] = ninf;
      a.l2[r] = 0.0f;
    }
  }
  if (a.with_out) std::memset(a.o, 0, R * d * sizeof(float));
  for (std::size_t t = 0; t < n_tiles; ++t) {
    const std::size_t c_lo = k0 + t * kKeyTile, c_hi = std::min(end, c_lo + kKeyTile);
    const std::size_t p_lo = c_lo / kPanel, p_hi = (c_hi + kPanel - 1) / kPanel;
    const std::size_t span = (p_hi - p_lo) * kPanel;  // the tile's columns, padded to whole panels
    float* st = a.s + (c_lo - k0);
    qk_rows<W>(a, R, p_lo, p_hi, st);
    for (std::size_t r = 0; r < R; ++r) {
      const std::size_t q = r % a.C;
      float* row = st + r * a.s_row;
      // Visible: [max(first, c_lo), min(c0 + q + 1, c_hi)); the rest of the tile's span is 0 after the exps.
      const std::size_t lo = std::max(a.first, c_lo) - c_lo;
      const std::size_t hi_abs = std::min(a.c0 + q + 1, c_hi);
      const std::size_t hi = std::max(lo, hi_abs > c_lo ? hi_abs - c_lo : 0);
      if (a.noisy != nullptr) {
        float* row2 = a.s2 + (c_lo - k0) + r * a.s_row;
        noisy_values<W>(a, row, row2, c_lo, lo, hi, r);
        tile_row_exp<W>(row2, lo, hi, span, a.inv_tau, a.m2[r], a.l2[r]);
        a.mt2[r * n_tiles + t] = a.m2[r];
      }
      const float alpha = tile_row_exp<W>(row, lo, hi, span, 1.0f, a.m[r], a.l[r]);
      a.mt[r * n_tiles + t] = a.m[r];
      if (alpha != 1.0f && a.with_out)  // a larger max: what was summed so far shrinks by exp(m − m_new)
        for (std::size_t x = 0; x < d; ++x) a.o[r * d + x] *= alpha;
    }
    const std::size_t skip = std::max(a.first, c_lo) - c_lo;  // padding keys: weight 0, their V never read
    if (a.with_out) pv_rows<W>(a, R, st + skip, a.v + (c_lo + skip) * a.v_row, c_hi - c_lo - skip);
  }
  if (a.sums != nullptr) column_sums<W>(a, a.s, a.m, a.l, a.mt, 1.0f, a.sums, k0, end, n_tiles);
  if (a.noisy != nullptr) column_sums<W>(a, a.s2, a.m2, a.l2, a.mt2, a.inv_tau, a.noisy, k0, end, n_tiles);
  if (a.maxes != nullptr) column_maxes<W>(a, k0, end, n_tiles);
}

}  // namespace tiles
}  // namespace detail
}  // namespace kvevict

#endif  // KVEVICT_VEC16
