// kvevict tools — llama2/dequantize.cpp: the reference (scalar) dequantization of ggml blocks.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/dequantize.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace llama2::gguf {
namespace {

std::uint16_t u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
float f16(const std::uint8_t* p) { return half_to_float(u16(p)); }

// The 6-bit scale and min of sub-block j from a K-quant's 12 scale bytes (ggml's get_scale_min_k4).
void scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& sc, std::uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void q8_0(const std::uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(static_cast<std::int8_t>(b[2 + j]));
}

void q4_0(const std::uint8_t* b, float* y) {
  const float d = f16(b);
  const std::uint8_t* q = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((q[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((q[j] >> 4) - 8);
  }
}

void q4_1(const std::uint8_t* b, float* y) {
  const float d = f16(b), m = f16(b + 2);
  const std::uint8_t* q = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(q[j] & 0xF) + m;
    y[j + 16] = d * static_cast<float>(q[j] >> 4) + m;
  }
}

void q4_k(const std::uint8_t* b, float* y) {
  const float d = f16(b), dmin = f16(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    std::uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

void q5_k(const std::uint8_t* b, float* y) {
  const float d = f16(b), dmin = f16(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* ql = b + 48;
  unsigned u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    std::uint8_t sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
  }
}

void q6_k(const std::uint8_t* b, float* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = f16(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

}  // namespace

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // ±0
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

bool can_dequantize(TensorType type) {
  switch (type) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: case TensorType::Q8_0:
    case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q4_K: case TensorType::Q5_K:
    case TensorType::Q6_K: return true;
    default: return false;
  }
}

void dequantize(TensorType type, const std::uint8_t* src, float* dst, std::size_t n) {
  const auto t = static_cast<std::uint32_t>(type);
  if (!can_dequantize(type))
    throw std::invalid_argument("llama2::gguf::dequantize: tensor type " + tensor_type_name(t) +
                                " is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)");
  const BlockLayout block = block_layout(t);
  if (n % block.elements != 0)
    throw std::invalid_argument("llama2::gguf::dequantize: n = " + std::to_string(n) + " is not a multiple of the " +
                                tensor_type_name(t) + " block of " + std::to_string(block.elements));
  const std::size_t blocks = n / block.elements;
  switch (type) {
    case TensorType::F32: std::memcpy(dst, src, n * sizeof(float)); return;
    case TensorType::F16:
      for (std::size_t i = 0; i < n; ++i) dst[i] = f16(src + 2 * i);
      return;
    case TensorType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(u16(src + 2 * i)) << 16;
        std::memcpy(dst + i, &bits, sizeof(float));
      }
      return;
    default: break;
  }
  void (*row)(const std::uint8_t*, float*) = nullptr;
  switch (type) {
    case TensorType::Q8_0: row = q8_0; break;
    case TensorType::Q4_0: row = q4_0; break;
    case TensorType::Q4_1: row = q4_1; break;
    case TensorType::Q4_K: row = q4_k; break;
    case TensorType::Q5_K: row = q5_k; break;
    default: row = q6_k; break;
  }
  for (std::size_t b = 0; b < blocks; ++b) row(src + b * block.bytes, dst + b * block.elements);
}

}  // namespace llama2::gguf
