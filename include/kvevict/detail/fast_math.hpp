// detail/fast_math.hpp — the element-wise −log and exp of the score kernels,
// restricted to the ranges the kernels feed them, written as branch-free scalar
// code; detail/vec16.hpp repeats them on vectors, operation for operation. Never
// contracted into FMAs (detail/no_contract.hpp), so the bits do not depend on flags.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstdint>

#include "kvevict/detail/bits.hpp"
#include "kvevict/detail/hd.hpp"
#include "kvevict/detail/no_contract.hpp"

namespace kvevict {
namespace detail {

/// `−ln x` for a finite, normal `x > 0` (no checks: 0, negatives, denormals, inf
/// and NaN give meaningless results): the logarithm of the Gumbel noise
/// (score/gumbel.hpp), `ζ = neg_log_positive(neg_log_positive(U))`. The argument
/// is split as `2^e · m`, `m` in [√½, √2), by integer arithmetic on the bits;
/// then `−ln x = e · (−ln 2) + f · Q(f)`, `f = m − 1` (exact), `Q` a degree-5
/// polynomial fitted to `−ln(1 + f) / f` for relative error (a fit on Chebyshev
/// nodes, reweighted towards minimax). Relative error below 7.6e-6 for every
/// normal float (7.53e-6 at worst, near `x = 1/√2`: checked on all of them in
/// float arithmetic when fitted; tests/gumbel_test.cpp checks the binades the
/// noise uses), including near `x = 1` where `ln x ≈ x − 1` is tiny. 19 operations, vectorisable; about half
/// of the degree-8 Cephes `logf` this replaced (relative error 1.1e-7), whose
/// accuracy the noise does not need.
KVEVICT_NO_CONTRACT_FN KVEVICT_HD inline float neg_log_positive(float x) {
  KVEVICT_NO_CONTRACT_BODY
  const std::uint32_t ix = float_bits(x) - 0x3f3504f3u;  // bits of √½: m lands in [√½, √2)
  const float e = static_cast<float>(static_cast<std::int32_t>(ix) >> 23);
  const float f = bits_float((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
  float p = f * 0.142920837f + -0.220559403f;
  p = p * f + 0.254032671f;
  p = p * f + -0.332580239f;
  p = p * f + 0.499902189f;
  p = p * f + -1.00000453f;
  return e * -0.693147182f + f * p;
}

/// `exp(x)` for `x <= 0`, including `x = -inf` (gives exactly 0). Cephes
/// `expf`: `x = n ln 2 + r`, `|r| <= ln 2 / 2`, degree-5 polynomial, `2^n` built in
/// the exponent bits. Relative error below 1.2e-7 for `x >= -87.3`; below about
/// -87.7 the result is flushed to 0 (the true value is under 1.2e-38, the
/// smallest normal float), and in between it may be a denormal. Positive `x` or
/// NaN give meaningless results. About 15 operations, vectorisable.
KVEVICT_NO_CONTRACT_FN KVEVICT_HD inline float exp_nonpositive(float x) {
  KVEVICT_NO_CONTRACT_BODY
  // Clamp to >= -88 (then n = -127 and the scale is +0: -inf and underflow give
  // 0). Done on the bits: for x <= 0 larger magnitude means larger bits; a float
  // compare would let the compiler split the loop into branches and not vectorise.
  // (The integer min written out, as std::min computes it: std::min is not callable in CUDA device code.)
  const std::uint32_t xb = float_bits(x);
  x = bits_float(0xc2b00000u < xb ? 0xc2b00000u : xb);  // 0xc2b00000 = -88.0f
  const float shifter = 12582912.0f;                    // 1.5 · 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + shifter;   // n + shifter, n = round(x / ln 2)
  const float n = t - shifter;
  float r = x - n * 0.693359375f;                       // x − n ln 2, ln 2 in two parts
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  // 2^n from the integer in t's low bits: exponent field n + 127, in [0, 127].
  const std::uint32_t biased = float_bits(t) - float_bits(shifter) + 127u;
  return p * bits_float(biased << 23);
}

}  // namespace detail
}  // namespace kvevict
