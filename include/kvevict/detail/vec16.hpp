// detail/vec16.hpp — the hot kernels written once on GCC / Clang vector extensions and compiled
// for each dispatched path (core/dispatch.hpp): baseline, AVX2 + FMA, AVX-512.
// SPDX-License-Identifier: Apache-2.0
//
// Why explicit vectors and not the auto-vectoriser: the loops must be vector code whatever the
// consumer's `-O` level (g++ -O2 vectorises almost none of them) and flags. Each kernel body is a
// template on the lane count W of the path's registers (4 = SSE2, 8 = AVX2, 16 = AVX-512), so
// every operation, compares and selects included, is one instruction (g++ splits a wider generic
// vector into scalar compares). The fixed-order reductions keep 16 lanes on every path (16 / W
// registers; lane l is element l % W of register l / W), element-wise kernels do the same
// operations per element in the same order, so every path gives the same bits.
// Why not Google Highway: its dynamic dispatch lives in a compiled library (`hwy/targets.cc`,
// libhwy) that a header-only library would force every consumer to link; the operations needed
// here (add, mul, shifts, compares, converts) the vector extensions give on g++ >= 7, clang++ >= 10.
// No contraction (detail/no_contract.hpp): each compiled kernel is `KVEVICT_NO_CONTRACT_FN` and
// each helper starts with `KVEVICT_NO_CONTRACT_BODY`, so a consumer's `-march=native` cannot fuse
// `a · b + c` into an FMA and change the last bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/core/dispatch.hpp"
#include "kvevict/detail/no_contract.hpp"
#include "kvevict/detail/vec16_math.hpp"  // V<W>, load/store, log/exp, the noise hash; KVEVICT_VEC16

#if defined(KVEVICT_VEC16)

namespace kvevict {
namespace detail {
namespace v16 {

// ---- The kernel bodies (one source for every path) -------------------------------------

/// `out[i] = ζ(first_slot + i) + x[i]` (`x == nullptr`: no add), i in [0, n).
template <int W>
KVEVICT_VEC_INLINE void gumbel_row_body(std::uint64_t key, std::uint32_t s0, const float* x, float* out,
                                        std::size_t n) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  const auto lo = static_cast<std::uint32_t>(key), hi = static_cast<std::uint32_t>(key >> 32);
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    F z;
    gumbel_zeta<W>(z, lo, hi, s0 + static_cast<std::uint32_t>(i));
    if (x != nullptr) {
      F xv;
      load(xv, x + i);
      z = z + xv;
    }
    store(out + i, z);
  }
  if (i < n) {
    F z;
    gumbel_zeta<W>(z, lo, hi, s0 + static_cast<std::uint32_t>(i));
    if (x != nullptr) {
      F xv;
      load_part(xv, x + i, n - i, 0.0f);
      z = z + xv;
    }
    store_part(out + i, z, n - i);
  }
}

/// In place `u -> −log(−log u)`, i in [0, n).
template <int W>
KVEVICT_VEC_INLINE void gumbel_from_uniform_body(float* u, std::size_t n) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  std::size_t i = 0;
  for (; i < n; i += W) {
    F z;
    if (i + W <= n) load(z, u + i);
    else load_part(z, u + i, n - i, 0.5f);
    neg_log_positive<W>(z);
    neg_log_positive<W>(z);
    if (i + W <= n) store(u + i, z);
    else store_part(u + i, z, n - i);
  }
}

/// `max_propagate_nan` (score/softmax_accumulate.hpp): the 16-lane max and NaN flags, then
/// the lanes and the tail in index order.
template <int W>
KVEVICT_VEC_INLINE float max_body(const float* v, std::size_t len) {
  using F = typename V<W>::F;
  using I = typename V<W>::I;
  constexpr int K = 16 / W;
  constexpr float kInf = __builtin_huge_valf();
  F lane[K];
  I nan[K];
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) {
    lane[k] = F{} - kInf;
    nan[k] = I{};
  }
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) {
      F x;
      load(x, v + i + k * W);
      lane[k] = x > lane[k] ? x : lane[k];  // the scalar rule, one maxps
      nan[k] |= (I)(x != x);
    }
  }
  float m = -kInf;
  std::int32_t any_nan = 0;
  for (int l = 0; l < 16; ++l) {
    const float x = lane[l / W][l % W];
    m = x > m ? x : m;
    any_nan |= nan[l / W][l % W];
  }
  for (; i < len; ++i) {
    m = v[i] > m ? v[i] : m;
    any_nan |= static_cast<std::int32_t>(v[i] != v[i]);
  }
  return any_nan != 0 ? __builtin_nanf("") : m;
}

/// `sum_fixed_order`: 16 lane sums, then the lanes and the tail in index order.
template <int W>
KVEVICT_VEC_INLINE float sum_body(const float* v, std::size_t len) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  constexpr int K = 16 / W;
  F lane[K];
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) lane[k] = F{};
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) {
      F x;
      load(x, v + i + k * W);
      lane[k] = lane[k] + x;
    }
  }
  float total = 0.0f;
  for (int l = 0; l < 16; ++l) total += lane[l / W][l % W];
  for (; i < len; ++i) total += v[i];
  return total;
}

/// `dot_fixed_order` (detail/fixed_order_dot.hpp): 16 lane sums of `x[i] · y[i]` (the tail as a block padded with
/// zeros), then the lanes as a tree (`l += l + 8`, `+ 4`, `+ 2`, `+ 1`).
template <int W>
KVEVICT_VEC_INLINE float dot_body(const float* x, const float* y, std::size_t len) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  constexpr int K = 16 / W;
  F lane[K];
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) lane[k] = F{};
  std::size_t i = 0;
  for (; i + 16 <= len; i += 16) {
    KVEVICT_VEC_UNROLL
    for (int k = 0; k < K; ++k) {
      F a, b;
      load(a, x + i + k * W);
      load(b, y + i + k * W);
      lane[k] = lane[k] + a * b;
    }
  }
  if (i < len) {
    KVEVICT_VEC_UNROLL
    for (int k = 0; k < K; ++k) {
      const std::size_t at = i + static_cast<std::size_t>(k * W);
      const std::size_t r = at < len ? len - at : 0;
      F a = F{}, b = F{};
      if (r >= static_cast<std::size_t>(W)) {
        load(a, x + at);
        load(b, y + at);
      } else if (r > 0) {
        load_part(a, x + at, r, 0.0f);
        load_part(b, y + at, r, 0.0f);
      }
      lane[k] = lane[k] + a * b;
    }
  }
  float t[16];  // lane l of the block is t[l]: vector k holds lanes [k · W, k · W + W)
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) store(t + k * W, lane[k]);
  KVEVICT_VEC_UNROLL
  for (int half = 8; half >= 1; half /= 2) {
    KVEVICT_VEC_UNROLL
    for (int l = 0; l < half; ++l) t[l] = t[l] + t[l + half];
  }
  return t[0];
}

/// `e[i] = exp_nonpositive((y[i] − m) · inv_tau)`, then `sum_fixed_order(e, len)`.
template <int W>
KVEVICT_VEC_INLINE float exp_sum_body(const float* y, float m, float inv_tau, float* e, std::size_t len) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  std::size_t i = 0;
  for (; i + W <= len; i += W) {
    F x;
    load(x, y + i);
    x = (x - m) * inv_tau;
    exp_nonpositive<W>(x);
    store(e + i, x);
  }
  if (i < len) {
    F x;
    load_part(x, y + i, len - i, m);
    x = (x - m) * inv_tau;
    exp_nonpositive<W>(x);
    store_part(e + i, x, len - i);
  }
  return sum_body<W>(e, len);
}

/// `acc[i] = e[i] · scale` (`assign`) or `acc[i] += e[i] · scale`.
template <int W>
KVEVICT_VEC_INLINE void scale_add_body(const float* e, float scale, float* acc, std::size_t len, bool assign) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  std::size_t i = 0;
  for (; i + W <= len; i += W) {
    F x, a;
    load(x, e + i);
    x = x * scale;
    if (!assign) {
      load(a, acc + i);
      x = a + x;
    }
    store(acc + i, x);
  }
  for (; i < len; ++i) {
    const float p = e[i] * scale;
    acc[i] = assign ? p : acc[i] + p;
  }
}

/// `row_accepted` (score/softmax_accumulate.hpp): whether every `x[i] (+ zeta[i])` is below `+inf`.
template <int W>
KVEVICT_VEC_INLINE bool row_ok_body(const float* x, const float* zeta, std::size_t n) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  using I = typename V<W>::I;
  constexpr float kInf = __builtin_huge_valf();
  I good = ~I{};  // all ones while every lane is below +inf
  std::size_t i = 0;
  if (zeta == nullptr) {
    for (; i + W <= n; i += W) {
      F v;
      load(v, x + i);
      good &= (I)(v < kInf);
    }
  } else {
    for (; i + W <= n; i += W) {
      F v, z;
      load(v, x + i);
      load(z, zeta + i);
      good &= (I)(v + z < kInf);
    }
  }
  std::int32_t any = 0;
  for (int l = 0; l < W; ++l) any |= ~good[l];
  for (; i < n; ++i) any |= static_cast<std::int32_t>(!((zeta != nullptr ? x[i] + zeta[i] : x[i]) < kInf));
  return any == 0;
}

/// The lane loop of `RecentTopKSelection::victim` over `len` slots (a multiple of 16): per lane
/// `l` of 16, the smallest key (`score bits | all ones if recent`), the first slot (relative to
/// `scores`) where it occurs and how often; `lane_*[16]` are read and updated in place.
template <int W>
KVEVICT_VEC_INLINE void victim_lanes_body(const float* scores, const std::uint8_t* recent, std::size_t len,
                                          std::uint32_t* lane_min, std::uint32_t* lane_first,
                                          std::uint32_t* lane_count) {
  using U = typename V<W>::U;
  constexpr int K = 16 / W;
  U mn[K], first[K], count[K], rel[K], byte_of_lane = U{}, iota = U{}, word_lanes[W / 4];
  for (int l = 0; l < W; ++l) {
    byte_of_lane[l] = 0xffu << (8 * (l % 4));
    iota[l] = static_cast<std::uint32_t>(l);
  }
  for (int j = 0; j < W / 4; ++j) {
    word_lanes[j] = U{};
    for (int l = 0; l < W; ++l) word_lanes[j][l] = l / 4 == j ? ~0u : 0u;
  }
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) {
    std::memcpy(&mn[k], lane_min + k * W, sizeof(U));
    std::memcpy(&first[k], lane_first + k * W, sizeof(U));
    std::memcpy(&count[k], lane_count + k * W, sizeof(U));
    rel[k] = iota + static_cast<std::uint32_t>(k * W);
  }
  for (std::size_t i = 0; i < len; i += 16) {
    KVEVICT_VEC_UNROLL
    for (int k = 0; k < K; ++k) {
      U key;
      std::memcpy(&key, scores + i + k * W, sizeof(U));
      // The flags of the W slots: each 32-bit word of 4 flags broadcast into its 4 lanes, then
      // lane l keeps byte l % 4 (a zero extension without byte shuffles, which SSE2 lacks). Not
      // lane by lane (b[l] = words[l / 4]): g++ builds that vector on the stack and reloads it
      // whole, a failed store forwarding per vector, which made H2O's step 1.7x slower than with
      // clang++; nor __builtin_convertvector from bytes, which g++ extracts byte by byte.
      std::uint32_t words[W / 4];
      std::memcpy(words, recent + i + k * W, sizeof words);
      U b = U{} + words[0];
      if constexpr (W > 4) {
        b &= word_lanes[0];
        KVEVICT_VEC_UNROLL
        for (int j = 1; j < W / 4; ++j) b |= (U{} + words[j]) & word_lanes[j];
      }
      key |= (U)((b & byte_of_lane) != 0u);
      const U lower = (U)(key < mn[k]);
      first[k] = (first[k] & ~lower) | (rel[k] & lower);
      count[k] = ((count[k] - (U)(key == mn[k])) & ~lower) | (1u & lower);
      mn[k] = key < mn[k] ? key : mn[k];  // an unsigned min
      rel[k] += 16u;
    }
  }
  KVEVICT_VEC_UNROLL
  for (int k = 0; k < K; ++k) {
    std::memcpy(lane_min + k * W, &mn[k], sizeof(U));
    std::memcpy(lane_first + k * W, &first[k], sizeof(U));
    std::memcpy(lane_count + k * W, &count[k], sizeof(U));
  }
}

/// `block_may_hold_below` (selection/sink_recent_selection.hpp) over `len` positions (a multiple of 16): the
/// sign bit of the OR over `(p − bar) | (p ^ bar)` in unsigned 64-bit lanes, W / 2 per vector (the OR of
/// lanes is exact in any order, so every path gives the same answer).
template <int W>
KVEVICT_VEC_INLINE bool below_body(const std::int64_t* p, std::size_t len, std::int64_t bar) {
  using Q = typename V<W>::Q;
  const Q vbar = Q{} + static_cast<std::uint64_t>(bar);
  Q acc0 = Q{}, acc1 = Q{};
  for (std::size_t b = 0; b < len; b += W) {
    Q v0, v1;
    std::memcpy(&v0, p + b, sizeof v0);
    std::memcpy(&v1, p + b + W / 2, sizeof v1);
    acc0 |= (v0 - vbar) | (v0 ^ vbar);
    acc1 |= (v1 - vbar) | (v1 ^ vbar);
  }
  acc0 |= acc1;
  std::uint64_t any = 0;
  for (int l = 0; l < W / 2; ++l) any |= acc0[l];
  return (any >> 63) != 0;
}

}  // namespace v16

/// Defines `name` (signature `params`, forwarding `args` to `v16::name##_body`) compiled once
/// per path, plus the dispatcher `name` that calls the one `active_isa()` chose.
#if defined(KVEVICT_X86_DISPATCH)
#define KVEVICT_DISPATCHED(ret, name, params, args)                                                       \
  KVEVICT_NO_CONTRACT_FN inline ret name##_baseline params { return v16::name##_body<4> args; }           \
  KVEVICT_TARGET_AVX2 KVEVICT_NO_CONTRACT_FN inline ret name##_avx2 params { return v16::name##_body<8> args; } \
  KVEVICT_TARGET_AVX512 KVEVICT_NO_CONTRACT_FN inline ret name##_avx512 params {                          \
    return v16::name##_body<16> args;                                                                     \
  }                                                                                                       \
  inline ret name params {                                                                                \
    switch (active_isa()) {                                                                               \
      case Isa::kAvx512: return name##_avx512 args;                                                       \
      case Isa::kAvx2: return name##_avx2 args;                                                           \
      default: return name##_baseline args;                                                               \
    }                                                                                                     \
  }
#else
#define KVEVICT_DISPATCHED(ret, name, params, args)                                     \
  KVEVICT_NO_CONTRACT_FN inline ret name params { return v16::name##_body<4> args; }
#endif

namespace vk {
/// `out[i] = ζ(s0 + i) (+ x[i])` of the noise row `key` (`x` may be null). O(n).
KVEVICT_DISPATCHED(void, gumbel_row, (std::uint64_t key, std::uint32_t s0, const float* x, float* out, std::size_t n),
                   (key, s0, x, out, n))
/// In place `u -> −log(−log u)`. O(n).
KVEVICT_DISPATCHED(void, gumbel_from_uniform, (float* u, std::size_t n), (u, n))
/// `max_propagate_nan`. O(len).
KVEVICT_DISPATCHED(float, max, (const float* v, std::size_t len), (v, len))
/// `sum_fixed_order`. O(len).
KVEVICT_DISPATCHED(float, sum, (const float* v, std::size_t len), (v, len))
/// `dot_fixed_order`. O(len).
KVEVICT_DISPATCHED(float, dot, (const float* x, const float* y, std::size_t len), (x, y, len))
/// The exp of a chunk and its fixed-order sum. O(len).
KVEVICT_DISPATCHED(float, exp_sum, (const float* y, float m, float inv_tau, float* e, std::size_t len),
                   (y, m, inv_tau, e, len))
/// `acc (+)= e · scale`. O(len).
KVEVICT_DISPATCHED(void, scale_add, (const float* e, float scale, float* acc, std::size_t len, bool assign),
                   (e, scale, acc, len, assign))
/// `row_accepted`. O(n).
KVEVICT_DISPATCHED(bool, row_ok, (const float* x, const float* zeta, std::size_t n), (x, zeta, n))
/// The lane loop of `RecentTopKSelection::victim`. O(len).
KVEVICT_DISPATCHED(void, victim_lanes,
                   (const float* scores, const std::uint8_t* recent, std::size_t len, std::uint32_t* lane_min,
                    std::uint32_t* lane_first, std::uint32_t* lane_count),
                   (scores, recent, len, lane_min, lane_first, lane_count))
/// `block_may_hold_below` of `SinkRecentSelection::victim` (len a multiple of 16). O(len).
KVEVICT_DISPATCHED(bool, below, (const std::int64_t* p, std::size_t len, std::int64_t bar), (p, len, bar))
}  // namespace vk

}  // namespace detail
}  // namespace kvevict

#endif  // KVEVICT_VEC16
