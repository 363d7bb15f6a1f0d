// cuda/detail/block_softmax.cuh — the block code's softmax of query rows: chunk maxes, fixed-order
// chunk sums and the combine, in the CPU kernel's order (score/softmax_accumulate.hpp), over an
// executor `Exec` (the contract in cuda/eviction_core.cuh). Internal: use cuda/kernels.cuh.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/detail/bits.hpp"
#include "kvevict/detail/fast_math.hpp"
#include "kvevict/detail/hd.hpp"
#include "kvevict/cuda/views.cuh"
#include "kvevict/score/gumbel.hpp"

namespace kvevict {
namespace cuda {
namespace core {

/// +inf and -inf as floats (from their bits: usable in device code without relaxed constexpr).
KVEVICT_HD inline float pos_inf() { return kvevict::detail::bits_float(0x7f800000u); }
KVEVICT_HD inline float neg_inf() { return kvevict::detail::bits_float(0xff800000u); }
KVEVICT_HD inline float quiet_nan() { return kvevict::detail::bits_float(0x7fc00000u); }
template <class T>
KVEVICT_HD inline T min_of(T a, T b) {
  return b < a ? b : a;
}

/// One logits row with its noise: `y(i) = x[i] (+ ζ_i)`, ζ injected (`z[i]`) or drawn
/// (`gumbel_zeta(key, i)`, the CPU's counter-based formula), exactly as the CPU forms it.
struct RowReader {
  const float* x = nullptr;
  const float* z = nullptr;
  std::uint64_t key = 0;
  std::int32_t mode = 0;  ///< 0 no noise, 1 injected, 2 drawn
  KVEVICT_HD float y(std::uint32_t i) const {
    if (mode == 1) return x[i] + z[i];
    if (mode == 2) return kvevict::detail::gumbel_zeta(key, i) + x[i];
    return x[i];
  }
};

/// The softmax workspace of one query head's row: `lanes[16 · chunks]` partials, then
/// `f[chunks]` (chunk sums, then the combine's factors), then `mx[chunks]` (chunk maxes).
struct RowWork {
  float* base = nullptr;
  std::uint32_t chunks_cap = 0;  ///< chunks the workspace was sized for
  KVEVICT_HD float* lanes() const { return base; }
  KVEVICT_HD float* f() const { return base + kLanes * chunks_cap; }
  KVEVICT_HD float* mx() const { return base + (kLanes + 1) * chunks_cap; }
};

/// `exp((y − m) · inv_tau)`, the CPU's numerator (0 for a fully masked chunk, `m = −inf`).
KVEVICT_HD inline float numerator(float y, float m, float inv_tau) {
  return m == neg_inf() ? 0.0f : kvevict::detail::exp_nonpositive((y - m) * inv_tau);
}

/// The max of lane `l` of chunk `c` of a row of `n` (`max_propagate_nan`'s lanes: the
/// elements `c0 + l + 16 i` of the chunk's full 16-groups, plus this lane's element of the
/// tail; a max is exact in any order). NaN if one is NaN. O(kChunk / 16).
KVEVICT_HD inline float lane_max(const RowReader& r, std::uint32_t n, std::uint32_t c, std::uint32_t l) {
  const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0), full = len / kLanes * kLanes;
  float m = neg_inf();
  bool nan = false;
  for (std::uint32_t i = l; i < full; i += kLanes) {
    const float y = r.y(c0 + i);
    m = y > m ? y : m;
    nan = nan || y != y;
  }
  if (full + l < len) {
    const float y = r.y(c0 + full + l);
    m = y > m ? y : m;
    nan = nan || y != y;
  }
  return nan ? quiet_nan() : m;
}
/// Lane `l`'s sum of chunk `c` (`sum_fixed_order`'s lanes: the numerators of the full
/// 16-groups, index order, from 0), given the chunk max `m`. O(kChunk / 16).
KVEVICT_HD inline float lane_sum(const RowReader& r, std::uint32_t n, std::uint32_t c, std::uint32_t l, float m,
                                 float inv_tau) {
  const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0), full = len / kLanes * kLanes;
  float s = 0.0f;
  for (std::uint32_t i = l; i < full; i += kLanes) s += numerator(r.y(c0 + i), m, inv_tau);
  return s;
}
/// Whether a chunk max makes the row invalid (NaN or +inf: the CPU kernel rejects it).
KVEVICT_HD inline bool bad_max(float m) { return m != m || m == pos_inf(); }

/// Phase 1 of the softmax for `rows` rows at once (row `q` read by `reader(q)`, its
/// workspace `work(q)`), each over `n` slots: chunk maxes and fixed-order chunk sums, in
/// four collective passes (lane maxes, chunk maxes, lane sums, chunk sums). Returns false
/// (uniformly) if some row holds NaN / +inf; nothing outside the workspace is written.
template <class Exec, class Reader, class Work>
KVEVICT_HD bool softmax_phase1(const Exec& ex, std::uint32_t rows, std::uint32_t n, float inv_tau, Reader reader,
                               Work work) {
  const std::uint32_t chunks = chunk_count(n);
  ex.for_range(rows * chunks * kLanes, [&](std::uint32_t i) {
    const std::uint32_t q = i / (chunks * kLanes), c = (i / kLanes) % chunks, l = i % kLanes;
    work(q).lanes()[c * kLanes + l] = lane_max(reader(q), n, c, l);
  });
  ex.for_range(rows * chunks, [&](std::uint32_t i) {
    const std::uint32_t q = i / chunks, c = i % chunks;
    const float* lanes = work(q).lanes() + c * kLanes;
    float m = neg_inf();
    bool nan = false;
    for (std::uint32_t l = 0; l < kLanes; ++l) {
      m = lanes[l] > m ? lanes[l] : m;
      nan = nan || lanes[l] != lanes[l];
    }
    work(q).mx()[c] = nan ? quiet_nan() : m;
  });
  const std::uint32_t bad = ex.reduce(
      rows * chunks, 0u, [&](std::uint32_t i) { return bad_max(work(i / chunks).mx()[i % chunks]) ? 1u : 0u; },
      [](std::uint32_t a, std::uint32_t b) { return a | b; });
  if (bad != 0) return false;
  ex.for_range(rows * chunks * kLanes, [&](std::uint32_t i) {
    const std::uint32_t q = i / (chunks * kLanes), c = (i / kLanes) % chunks, l = i % kLanes;
    const float m = work(q).mx()[c];
    work(q).lanes()[c * kLanes + l] = m == neg_inf() ? 0.0f : lane_sum(reader(q), n, c, l, m, inv_tau);
  });
  ex.for_range(rows * chunks, [&](std::uint32_t i) {
    const std::uint32_t q = i / chunks, c = i % chunks;
    const float m = work(q).mx()[c];
    float total = 0.0f;
    if (m != neg_inf()) {
      const float* lanes = work(q).lanes() + c * kLanes;
      for (std::uint32_t l = 0; l < kLanes; ++l) total += lanes[l];
      const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0);
      const RowReader r = reader(q);
      for (std::uint32_t t = len / kLanes * kLanes; t < len; ++t) total += numerator(r.y(c0 + t), m, inv_tau);
    }
    work(q).f()[c] = total;
  });
  return true;
}

/// Phase 2 (`softmax_combine`, serial, the CPU's order): `f[c]` becomes `exp((m_c − max m) ·
/// inv_tau) / Σ_c' sum[c'] · exp((m_c' − max m) · inv_tau)`, 0 for a fully masked row; the
/// chunk maxes stay. O(chunks).
KVEVICT_HD inline void softmax_combine(float* f, const float* mx, std::uint32_t chunks, float inv_tau) {
  float row_max = neg_inf();
  for (std::uint32_t c = 0; c < chunks; ++c) row_max = row_max < mx[c] ? mx[c] : row_max;
  if (row_max == neg_inf()) {
    for (std::uint32_t c = 0; c < chunks; ++c) f[c] = 0.0f;
    return;
  }
  float total = 0.0f;
  for (std::uint32_t c = 0; c < chunks; ++c)
    total += f[c] * kvevict::detail::exp_nonpositive((mx[c] - row_max) * inv_tau);
  const float inv_total = 1.0f / total;
  for (std::uint32_t c = 0; c < chunks; ++c)
    f[c] = kvevict::detail::exp_nonpositive((mx[c] - row_max) * inv_tau) * inv_total;
}

/// The probability `softmax(y / τ)[i]` of slot `i` as the CPU forms it: numerator times
/// the chunk's factor (after phase 2).
template <class Work>
KVEVICT_HD float probability(const RowReader& r, const Work& w, std::uint32_t i, float inv_tau) {
  const std::uint32_t c = i / kChunk;
  return numerator(r.y(i), w.mx()[c], inv_tau) * w.f()[c];
}

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
