// detail/bits.hpp — a float's bit pattern and back, for branch-free kernels.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <cstring>

#include "kvevict/detail/hd.hpp"

namespace kvevict {
namespace detail {

/// The IEEE-754 bits of `f` (`memcpy`, no aliasing UB). For finite `f >= 0` the
/// bits order like the values, which the victim search exploits. O(1).
/// In CUDA device code `__float_as_uint` (the same bits).
KVEVICT_HD inline std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
/// The float whose IEEE-754 bits are `u`. O(1).
/// In CUDA device code `__uint_as_float`.
KVEVICT_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace detail
}  // namespace kvevict
