// detail/vec16_math.hpp — the vector types and element-wise math (−log, exp, the noise hash) of the
// kernels in detail/vec16.hpp, one lane count W per dispatched path; the same operations in the same order
// as the scalar detail/fast_math.hpp, so that every path gives the same bits.
// SPDX-License-Identifier: Apache-2.0
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
  typedef std::uint64_t Q __attribute__((vector_size(4 * W)));  ///< W / 2 unsigned 64-bit integers
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
/// `neg_log_positive` (detail/fast_math.hpp), lane-wise, the same operations in the same order.
template <int W>
KVEVICT_VEC_INLINE void neg_log_positive(typename V<W>::F& x) {
  KVEVICT_NO_CONTRACT_BODY
  using F = typename V<W>::F;
  using U = typename V<W>::U;
  using I = typename V<W>::I;
  const U ix = (U)(x)-0x3f3504f3u;
  const F e = __builtin_convertvector((I)(ix) >> 23, F);
  const U mb = (ix & 0x007fffffu) + 0x3f3504f3u;
  const F f = (F)(mb)-1.0f;
  F p = f * 0.142920837f + -0.220559403f;
  p = p * f + 0.254032671f;
  p = p * f + -0.332580239f;
  p = p * f + 0.499902189f;
  p = p * f + -1.00000453f;
  x = e * -0.693147182f + f * p;
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
  x ^= hi;
  lowbias32(x);
  const U ub = (x >> 9) | 0x3f800000u;
  z = (F)(ub) - (1.0f - 1.0f / 16777216.0f);
  neg_log_positive<W>(z);
  neg_log_positive<W>(z);
}

}  // namespace v16
}  // namespace detail
}  // namespace kvevict

#endif  // KVEVICT_VEC16
