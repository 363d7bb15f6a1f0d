// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// core/bits.hpp — a float's bit pattern and back, for branch-free kernels.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvevict {
namespace detail {

/// The IEEE-754 bits of `f` (`memcpy`, no aliasing UB). For finite `f >= 0` the
/// bits order like the values, which the victim search exploits. O(1).
inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
/// The float whose IEEE-754 bits are `u`. O(1).
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace detail
}  // namespace kvevict
