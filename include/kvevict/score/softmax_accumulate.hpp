// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/softmax_accumulate.hpp — the one numeric kernel every score policy uses.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>

#include <Eigen/Core>

namespace kvevict {

/// Adds `p = softmax((x + ζ) / τ)` over one attention row into `acc`
/// (Keyformer Eq. 7 with noise; H2O's accumulated attention with `ζ = 0`, τ = 1).
///
///  - `x[0, n)`: pre-softmax logits of one query row (q·k/√d plus any additive
///    bias). `-inf` marks a masked entry: it receives `p = 0`. A row whose every
///    entry is `-inf` adds nothing and is not an error.
///  - `zeta[0, n)`: Gumbel noise, or `nullptr` for none.
///  - `inv_tau = 1 / τ`, τ > 0 (checked by the caller).
///  - `acc[0, n)`: accumulator, `acc[i] += p[i]`.
///  - `scratch[0, n)`: work space; overwritten.
///
/// Returns `false`, leaving `acc` untouched, if the row contains NaN or `+inf`
/// (the softmax is undefined); the caller turns that into an exception.
/// Numerically stable (max subtracted before `exp`). O(n), vectorised with
/// Eigen, no allocation.
inline bool accumulate_softmax(const float* x, const float* zeta, std::size_t n, float inv_tau, float* acc,
                               float* scratch) {
  using Arr = Eigen::Map<Eigen::ArrayXf>;
  using CArr = Eigen::Map<const Eigen::ArrayXf>;
  const auto len = static_cast<Eigen::Index>(n);
  if (len == 0) return true;
  Arr y(scratch, len);
  if (zeta != nullptr)
    y = CArr(x, len) + CArr(zeta, len);
  else
    y = CArr(x, len);
  const float m = y.maxCoeff<Eigen::PropagateNaN>();
  if (std::isnan(m) || m == std::numeric_limits<float>::infinity()) return false;
  if (m == -std::numeric_limits<float>::infinity()) return true;  // fully masked row
  // Eigen's vectorised exp clamps its argument (exp(-inf) would give ~1e-39),
  // so masked entries are zeroed explicitly.
  y = (y == -std::numeric_limits<float>::infinity()).select(0.0f, ((y - m) * inv_tau).exp());
  const float sum = y.sum();  // >= 1: the max entry contributes exp(0)
  Arr(acc, len) += y * (1.0f / sum);
  return true;
}

}  // namespace kvevict
