// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// budget.hpp — the budget k and the recent window w, as counts or fractions.
#pragma once

#include <cmath>
#include <cstddef>

#include "kvevict/core/check.hpp"

namespace kvevict {

/// The KV budget `k`: tokens kept per KV head. Either a token count, or a
/// fraction `r` of the prompt length `P` resolved at prefill as
/// `k = floor(r · P)` (computed in double; the Keyformer reference code's
/// "kv_cache = 60%" is `ratio(0.6)`).
class Budget {
 public:
  /// `k` tokens. Throws `std::invalid_argument` if `k < 1`.
  static Budget tokens(std::size_t k) {
    detail::require(k >= 1, "kvevict::Budget::tokens: k must be >= 1 (got ", k, ")");
    return Budget(k, 0.0);
  }
  /// `k = floor(r · P)`. Throws `std::invalid_argument` unless `r` is finite and > 0.
  static Budget ratio(double r) {
    detail::require(std::isfinite(r) && r > 0.0, "kvevict::Budget::ratio: r must be finite and > 0 (got ", r, ")");
    return Budget(0, r);
  }
  /// The budget for prompt length `P`. Throws `std::invalid_argument` if it
  /// resolves to 0, or to more than 2^53 tokens (a ratio so large that `r · P`
  /// is no longer an exact count).
  std::size_t resolve(std::size_t prompt_len) const {
    if (ratio_ == 0.0) return tokens_;
    const double k = std::floor(ratio_ * static_cast<double>(prompt_len));
    detail::require(k >= 1.0, "kvevict::Budget: ratio ", ratio_, " of prompt length ", prompt_len,
                    " resolves to k = 0");
    detail::require(k <= 9007199254740992.0, "kvevict::Budget: ratio ", ratio_, " of prompt length ", prompt_len,
                    " resolves to k = ", k, ", above 2^53");
    return static_cast<std::size_t>(k);
  }
  /// `true` for `ratio(r)`, `false` for `tokens(k)`.
  bool is_ratio() const { return ratio_ != 0.0; }
  /// `r` of `ratio(r)`; 0 for a token budget.
  double ratio_value() const { return ratio_; }
  /// `k` of `tokens(k)`; 0 for a ratio budget.
  std::size_t token_count() const { return tokens_; }

 private:
  Budget(std::size_t k, double r) : tokens_(k), ratio_(r) {}
  std::size_t tokens_;
  double ratio_;
};

/// The recent window `w`: the most recent tokens, always kept. Either a count,
/// or a fraction `q` of the resolved budget, `w = floor(q · k)`. A count
/// larger than the resolved `k` makes `Cache::prefill` throw.
class RecentWindow {
 public:
  /// `w` tokens (0 allowed: no recent window).
  static RecentWindow tokens(std::size_t w) { return RecentWindow(w, -1.0); }
  /// `w = floor(q · k)`. Throws `std::invalid_argument` unless `0 <= q <= 1`.
  static RecentWindow ratio(double q) {
    detail::require(q >= 0.0 && q <= 1.0, "kvevict::RecentWindow::ratio: q must be in [0, 1] (got ", q, ")");
    return RecentWindow(0, q);
  }
  /// `w` for budget `k` (no check against `k`).
  std::size_t resolve(std::size_t k) const {
    if (ratio_ < 0.0) return tokens_;
    return static_cast<std::size_t>(std::floor(ratio_ * static_cast<double>(k)));
  }
  /// `true` for `ratio(q)`, `false` for `tokens(w)`.
  bool is_ratio() const { return ratio_ >= 0.0; }

 private:
  RecentWindow(std::size_t w, double q) : tokens_(w), ratio_(q) {}
  std::size_t tokens_;
  double ratio_;
};

}  // namespace kvevict
