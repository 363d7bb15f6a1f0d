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
#include <cstring>

#include "kvevict/core/dispatch.hpp"
#include "kvevict/detail/no_contract.hpp"

// Not under nvcc (its front end does not take these vector extensions): a CUDA translation unit's
// host code runs the portable loops of the kernels' headers, which give the same bits.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define KVEVICT_VEC16 1
#endif

#if defined(KVEVICT_VEC16)

#define KVEVICT_VEC_INLINE inline __attribute__((always_inline))
/// Unrolls a loop over the vectors of a 16-lane block, so they live in registers at any -O level.
#define KVEVICT_VEC_UNROLL _Pragma("GCC unroll 16")

#if defined(KVEVICT_X86_DISPATCH)
#define KVEVICT_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define KVEVICT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#endif

namespace kvevict {
namespace detail {
namespace v16 {

/// The vector types of one path: `W` lanes of 32 bits (4 = SSE, 8 = AVX, 16 = AVX-512), the
/// hardware's own width, so that every operation (compares and selects included) is one
/// instruction. A 16-lane block is `16 / W` of them; lane `l` of the block is element `l % W`
/// of vector `l / W`, so the 16 lanes of the fixed-order reductions are the same on every path.
template <int W>
struct V {
  typedef float F __attribute__((vector_size(4 * W)));          ///< W floats
  typedef std::uint32_t U __attribute__((vector_size(4 * W)));  ///< W unsigned 32-bit integers
  typedef std::int32_t I __attribute__((vector_size(4 * W)));   ///< W signed 32-bit integers (masks)
};

template <class T>
KVEVICT_VEC_INLINE void load(T& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <class T>
KVEVICT_VEC_INLINE void store(float* p, const T& v) {
  std::memcpy(p, &v, sizeof v);
}
/// `v[l] = p[l]` for `l < r`, `fill` above (`r <` lanes): a tail as a whole vector.
template <class T>
KVEVICT_VEC_INLINE void load_part(T& v, const float* p, std::size_t r, float fill) {
  float t[sizeof(T) / 4];
  for (std::size_t l = 0; l < sizeof(T) / 4; ++l) t[l] = fill;
  std::memcpy(t, p, r * sizeof(float));
  std::memcpy(&v, t, sizeof v);
}
template <class T>
KVEVICT_VEC_INLINE void store_part(float* p, const T& v, std::size_t r) {
  float t[sizeof(T) / 4];
  std::memcpy(t, &v, sizeof v);
  std::memcpy(p, t, r * sizeof(float));
}
/// `log_positive` (detail/fast_math.hpp), lane-wise, the same operations in the same order.
template <int W>
KVEVICT_VEC_INLINE void log_positive(typename V<W>::F& x) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  using U = typename V<W>::U;
  using I = typename V<W>::I;
  const U ix = (U)(x)-0x3f3504f3u;
  const F e = __builtin_convertvector((I)(ix) >> 23, F);
  const U mb = (ix & 0x007fffffu) + 0x3f3504f3u;
  const F f = (F)(mb)-1.0f;
  const F f2 = f * f;
  F p = f * 7.0376836292e-2f;  // = 7.0376836292e-2f · f, the first Horner step (commutative: same bits)
  p = p - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  const F r = (p * f) * f2 - 0.5f * f2 + f;
  x = (r + e * -2.12194440e-4f) + e * 0.693359375f;
}

/// `exp_nonpositive` (detail/fast_math.hpp), lane-wise, the same operations in the same order.
template <int W>
KVEVICT_VEC_INLINE void exp_nonpositive(typename V<W>::F& x) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  using U = typename V<W>::U;
  const U xb = (U)(x);
  const U lim = U{} + 0xc2b00000u;  // -88.0f in every lane
  const U cl = lim < xb ? lim : xb;  // an unsigned min: one instruction from SSE4.1 on
  const F xc = (F)(cl);
  const float shifter = 12582912.0f;
  const F t = xc * 1.44269504088896341f + shifter;
  const F n = t - shifter;
  F r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = r * 1.9875691500e-4f;
  p = p + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  const U biased = (U)(t)-0x4b400000u + 127u;  // 0x4b400000 = bits of the shifter
  const U scale = biased << 23;
  x = p * (F)(scale);
}

/// `lowbias32` (score/gumbel.hpp), lane-wise.
template <class U>
KVEVICT_VEC_INLINE void lowbias32(U& x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
}

/// ζ of slots `s0, ..., s0 + W − 1` of the noise row with key `(lo, hi)`: `gumbel_zeta`
/// (score/gumbel.hpp) lane-wise, the same bits.
template <int W>
KVEVICT_VEC_INLINE void gumbel_zeta(typename V<W>::F& z, std::uint32_t lo, std::uint32_t hi, std::uint32_t s0) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  using U = typename V<W>::U;
  U x = U{};
  for (int l = 0; l < W; ++l) x[l] = static_cast<std::uint32_t>(l);
  x += s0 + lo;
  lowbias32(x);
  x ^= hi;
  lowbias32(x);
  const U ub = (x >> 9) | 0x3f800000u;
  z = (F)(ub) - (1.0f - 1.0f / 16777216.0f);
  log_positive<W>(z);
  z = -z;
  log_positive<W>(z);
  z = -z;
}

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
    log_positive<W>(z);
    z = -z;
    log_positive<W>(z);
    z = -z;
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
  U mn[K], first[K], count[K], rel[K], byte_of_lane = U{}, iota = U{};
  for (int l = 0; l < W; ++l) {
    byte_of_lane[l] = 0xffu << (8 * (l % 4));
    iota[l] = static_cast<std::uint32_t>(l);
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
      U key, b = U{};
      std::memcpy(&key, scores + i + k * W, sizeof(U));
      // The flags of the W slots: each 32-bit word of 4 flags into its 4 lanes, then lane l
      // keeps byte l % 4 (a zero extension without byte shuffles, which SSE2 lacks).
      std::uint32_t words[W / 4];
      std::memcpy(words, recent + i + k * W, sizeof words);
      KVEVICT_VEC_UNROLL
      for (int l = 0; l < W; ++l) b[l] = words[l / 4];
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
}  // namespace vk

}  // namespace detail
}  // namespace kvevict

#endif  // KVEVICT_VEC16
