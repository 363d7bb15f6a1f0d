// kvevict tools — llama2/engine_kernels.hpp: the engine's element-wise kernels (RMSNorm, SwiGLU, softmax) and the
// Eigen maps its source files share; internal to engine*.cpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "llama2/engine.hpp"

namespace llama2 {
namespace kernels {

using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
// `n` K or V rows of one KV head: row s = slot s, `slot_stride` floats apart.
using SlotRows = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;

// out = weight * x / sqrt(mean(x^2) + eps), in llama2.c's order of operations.
inline void rmsnorm(float* out, const float* x, const float* weight, std::size_t size, float eps) {
  float ss = 0.0f;
  for (std::size_t j = 0; j < size; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(size);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (std::size_t j = 0; j < size; ++j) out[j] = weight[j] * (ss * x[j]);
}

// h1 = silu(h1) * h3, elementwise (SwiGLU).
inline void swiglu(float* h1, const float* h3, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    float val = h1[i];
    val *= 1.0f / (1.0f + std::exp(-val));
    h1[i] = val * h3[i];
  }
}

// In-place softmax of x[0..n).
inline void softmax(float* x, std::size_t n) {
  const float max_val = *std::max_element(x, x + n);
  float sum = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  for (std::size_t i = 0; i < n; ++i) x[i] /= sum;
}

// Output features per task of the weight products below. Fixed, so that the floats a product gives do not
// depend on how many workers run the tasks (Eigen's blocking depends on the operand sizes only).
constexpr std::size_t kRowsPerTask = 64;

}  // namespace kernels
}  // namespace llama2
