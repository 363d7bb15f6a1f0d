// temperature/temperature_schedules.hpp — τ as a function of the decode step.
// SPDX-License-Identifier: Apache-2.0
//
// A temperature schedule maps the step index `t` to τ_t: `t = 0` is prefill,
// `t = 1, 2, …` are decode steps. It is a policy separate from the budget: τ
// reshapes the score increments, it never changes how many tokens are kept.
// The valid range of τ is `[FLT_MIN, +inf)`: finite and at least the
// smallest normal float (≈ 1.18e-38), so that `1 / τ` is finite and the
// softmax `(x − max) / τ` never computes `0 · inf` (NaN). Schedules check their
// parameters against it; `Cache` checks every τ it gets again and throws
// `std::invalid_argument` otherwise, before changing any state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "kvevict/detail/check.hpp"

namespace kvevict {

namespace detail {
/// Whether τ is in the valid range `[FLT_MIN, +inf)` (finite, `1 / τ` finite).
inline bool valid_tau(double tau) {
  return std::isfinite(tau) && tau >= static_cast<double>(std::numeric_limits<float>::min());
}
inline void require_tau(double tau, const char* who, const char* what) {
  require(valid_tau(tau), "kvevict::", who, ": ", what, " must be finite and >= 1.17549435e-38 (FLT_MIN, so that 1/",
          what, " is finite) (got ", tau, ")");
}
}  // namespace detail

/// τ_t = τ for every step. Throws `std::invalid_argument` unless τ is in the valid range (finite, >= FLT_MIN).
class ConstantTemperature {
 public:
  explicit ConstantTemperature(float tau = 1.0f) : tau_(tau) { detail::require_tau(tau, "ConstantTemperature", "tau"); }
  /// τ at step `t` (0 = prefill). O(1).
  float operator()(std::size_t /*t*/) const { return tau_; }

 private:
  float tau_;
};

/// Keyformer's schedule (§3.4): prefill uses τ_init; decode step t uses
/// `τ_t = τ_init + t · (τ_end − τ_init) / T`, held at τ_end after step T
/// (paper: τ_init = 1, τ_end = 2, T = number of tokens to generate).
/// Throws `std::invalid_argument` if τ_init or τ_end is outside the valid
/// range (finite, >= FLT_MIN), or T = 0. Every τ_t lies between them.
class LinearTemperature {
 public:
  LinearTemperature(float tau_init, float tau_end, std::size_t horizon)
      : tau_init_(tau_init), tau_end_(tau_end), horizon_(horizon) {
    detail::require_tau(tau_init, "LinearTemperature", "tau_init");
    detail::require_tau(tau_end, "LinearTemperature", "tau_end");
    detail::require(horizon >= 1, "kvevict::LinearTemperature: horizon T must be >= 1 (got ", horizon, ")");
  }
  /// τ at step `t` (0 = prefill). O(1).
  float operator()(std::size_t t) const {
    const double s = static_cast<double>(std::min(t, horizon_));
    return static_cast<float>(tau_init_ +
                              s * (static_cast<double>(tau_end_) - tau_init_) / static_cast<double>(horizon_));
  }
  /// τ at prefill.
  float tau_init() const { return tau_init_; }
  /// τ from step T on.
  float tau_end() const { return tau_end_; }
  /// T, the decode steps over which τ moves from τ_init to τ_end.
  std::size_t horizon() const { return horizon_; }

 private:
  float tau_init_, tau_end_;
  std::size_t horizon_;
};

/// Fixed increment per step: `τ_t = τ_init + t · Δτ` (the Keyformer reference
/// code's `temp += step`). Δτ may be negative; a step whose τ leaves the
/// valid range (finite, >= FLT_MIN) makes the cache throw at that step. Throws `std::invalid_argument` if τ_init is
/// invalid or Δτ is not finite.
class IncrementTemperature {
 public:
  IncrementTemperature(float tau_init, float delta) : tau_init_(tau_init), delta_(delta) {
    detail::require_tau(tau_init, "IncrementTemperature", "tau_init");
    detail::require(std::isfinite(delta), "kvevict::IncrementTemperature: delta must be finite (got ", delta, ")");
  }
  /// τ at step `t` (0 = prefill). O(1).
  float operator()(std::size_t t) const {
    return static_cast<float>(tau_init_ + static_cast<double>(t) * static_cast<double>(delta_));
  }

 private:
  float tau_init_, delta_;
};

}  // namespace kvevict
