// kvevict tools — llama2/dequantize.hpp: ggml's quantized blocks to float32 (load-time, exact).
// SPDX-License-Identifier: Apache-2.0
//
// Block formats (ggml's ggml-common.h; `d`, `m`, `dmin` are IEEE half floats, little-endian):
//   Q8_0  32 values, 34 bytes: d | int8 q[32]                      x = d · q
//   Q4_0  32 values, 18 bytes: d | q[16] (low nibbles 0..15, high 16..31)   x = d · (nibble − 8)
//   Q4_1  32 values, 20 bytes: d | m | q[16]                       x = d · nibble + m
//   Q4_K 256 values, 144 bytes: d | dmin | scales[12] (8 6-bit scale/min pairs) | q[128]
//                                x = d · sc_j · nibble − dmin · m_j, sub-block j of 32 values
//   Q5_K 256 values, 176 bytes: as Q4_K plus qh[32] (the fifth bit of each value)
//   Q6_K 256 values, 210 bytes: ql[128] | qh[64] | int8 scales[16] | d    x = d · sc_j · (q6 − 32)
// F16 and BF16 are widened exactly; F32 is copied.
#pragma once

#include <cstddef>
#include <cstdint>

#include "llama2/gguf.hpp"

namespace llama2::gguf {

/// IEEE binary16 bits to float (exact: subnormals, infinities and NaN included).
float half_to_float(std::uint16_t h);

/// True if `dequantize` converts `type`.
bool can_dequantize(TensorType type);

/// Writes the `n` float32 values encoded by the blocks at `src` to `dst[0..n)`. `n` must be a
/// multiple of the type's block (`block_layout`) and `src` must hold `n / block.elements` blocks.
/// O(n). Throws `std::invalid_argument` if `type` is not one that `can_dequantize`, or `n` is not
/// a multiple of its block.
void dequantize(TensorType type, const std::uint8_t* src, float* dst, std::size_t n);

}  // namespace llama2::gguf
