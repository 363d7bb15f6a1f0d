// detail/fixed_order_dot.hpp — the dot product of the key scores, summed in one fixed order that
// vectorises: the same bits on every build, without the latency of one serial sum.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

#include "kvevict/detail/no_contract.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/detail/vec16.hpp"

// Which of the two bodies below is compiled: the dispatched vector kernels (detail/vec16.hpp, wherever
// `KVEVICT_VEC16` is defined), or the portable loops, which nvcc's host pass compiles (its front end takes no
// vector extensions) and which give the same bits. `KVEVICT_FIXED_ORDER_DOT_PORTABLE`, defined before this header
// is first included, selects the portable loops in any build: a test hook (tests/fixed_order_dot_portable_test.cpp
// runs them on the host against the documented order and the vector kernels). The functions are inline, so every
// translation unit of one program must agree on it; a library user never defines it.
#if defined(KVEVICT_VEC16) && !defined(KVEVICT_FIXED_ORDER_DOT_PORTABLE)
#define KVEVICT_FIXED_ORDER_DOT_VEC16 1
#endif

namespace kvevict {
namespace detail {

/// `Σ x[i] · y[i]` over `i` in `[0, d)` in one fixed order: 16 lane sums (`lane[i % 16] += x[i] · y[i]`, each lane
/// adding in index order; a last partial block adds `0 · 0` into its missing lanes), then the lanes added as a tree
/// (`lane[l] += lane[l + 8]`, then `+ 4`, `+ 2`, `+ 1`). Products and sums are never contracted into FMAs
/// (no_contract.hpp) and each lane is element-wise, so the result is the same bits on every target, optimisation
/// level and dispatched path (detail/vec16.hpp, as `sum_fixed_order` in score/softmax_accumulate.hpp). A serial
/// `sum += x[i] · y[i]` is one chain of `d` dependent adds (about 4 cycles each: 512 cycles at `d = 128`) that g++
/// -O2 leaves scalar; this is 16 independent chains in vector registers at any `-O` level. Used by the key scores
/// (KeyDiffScore, score_policies.hpp), which run it over every held key at every step. `x` and `y` may be the same
/// pointer. O(d), no allocation.
KVEVICT_NO_CONTRACT_FN inline float dot_fixed_order(const float* x, const float* y, std::size_t d) noexcept {
  KVEVICT_NO_CONTRACT_BODY
#if defined(KVEVICT_FIXED_ORDER_DOT_VEC16)
  return vk::dot(x, y, d);  // dispatched: the same lanes, the same bits
#else
  constexpr std::size_t kLanes = 16;
  float lane[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    KVEVICT_LANES  // across lanes: each lane still adds in index order
    for (std::size_t l = 0; l < kLanes; ++l) lane[l] += x[i + l] * y[i + l];
  }
  if (i < d)
    for (std::size_t l = 0; l < kLanes; ++l) {
      const float a = i + l < d ? x[i + l] : 0.0f, b = i + l < d ? y[i + l] : 0.0f;
      lane[l] += a * b;
    }
  for (std::size_t half = kLanes / 2; half >= 1; half /= 2)
    for (std::size_t l = 0; l < half; ++l) lane[l] += lane[l + half];
  return lane[0];
#endif
}

/// `acc[i] += x[i] · scale` for `i` in `[0, d)`, element-wise, never contracted: the same bits on every target and
/// path, vector code at any `-O` level (the dispatched `scale_add` of the softmax accumulation). O(d).
KVEVICT_NO_CONTRACT_FN inline void add_scaled(const float* x, float scale, float* acc, std::size_t d) noexcept {
  KVEVICT_NO_CONTRACT_BODY
#if defined(KVEVICT_FIXED_ORDER_DOT_VEC16)
  vk::scale_add(x, scale, acc, d, false);
#else
  KVEVICT_SIMD
  for (std::size_t i = 0; i < d; ++i) acc[i] += x[i] * scale;
#endif
}

}  // namespace detail
}  // namespace kvevict
