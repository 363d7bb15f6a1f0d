// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// budget.hpp — the budget k and the recent window w, as counts or fractions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kvevict/core/check.hpp"

namespace kvevict {

/// The KV budget `k`: tokens kept per KV head. Either a token count, or a
/// fraction `r` of the prompt length `P` resolved at prefill as
/// `k = max(1, floor(r · P))` (computed in double; the Keyformer reference
/// code's "kv_cache = 60%" is `ratio(0.6)`). A ratio budget therefore never
/// fails on a short prompt: `ratio(0.6)` with `P = 1` keeps 1 token.
/// Both forms are bounded by `kMaxTokens = 2^53` (exact in double).
class Budget {
 public:
  /// The largest budget either form may resolve to: 2^53.
  static constexpr std::size_t kMaxTokens = std::size_t{1} << 53;
  /// `k` tokens. Throws `std::invalid_argument` unless `1 <= k <= 2^53`.
  static Budget tokens(std::size_t k) {
    detail::require(k >= 1, "kvevict::Budget::tokens: k must be >= 1 (got ", k, ")");
    detail::require(k <= kMaxTokens, "kvevict::Budget::tokens: k = ", k, " exceeds 2^53");
    return Budget(k, 0.0);
  }
  /// `k = floor(r · P)`. Throws `std::invalid_argument` unless `r` is finite and > 0.
  static Budget ratio(double r) {
    detail::require(std::isfinite(r) && r > 0.0, "kvevict::Budget::ratio: r must be finite and > 0 (got ", r, ")");
    return Budget(0, r);
  }
  /// The budget for prompt length `P`: the count, or `max(1, floor(r · P))`.
  /// Throws `std::invalid_argument` if a ratio resolves to more than 2^53
  /// tokens (so large that `r · P` is no longer an exact count).
  std::size_t resolve(std::size_t prompt_len) const {
    if (ratio_ == 0.0) return tokens_;
    const double k = std::max(1.0, std::floor(ratio_ * static_cast<double>(prompt_len)));
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
/// larger than the resolved `k` makes the cache throw (at construction for a
/// token budget, else at prefill).
///
/// `tokens(0)` (or `ratio(0)`) means no recent window. With an accumulated
/// score (Keyformer, H2O) that is an exact but harsh rule: a new token has only
/// its own step's score, below every older token's sum, so every new token is
/// evicted in its own decode step, forever (H2O, `k = 4`, `w = 0`, 4-token
/// prompt: positions `[0, 1, 2, 3]` after every step). To avoid that by
/// accident, a ratio `q > 0` resolves to at least 1 token for those policies
/// when `k >= 2` (`Cache` applies this floor). TOVA has no recent window
/// (`w = 0`, its rule); StreamingLLM and window derive theirs from the budget
/// (`k − sinks`) and require 0 here.
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
  /// `q` of `ratio(q)`; -1 for a token count.
  double ratio_value() const { return ratio_; }
  /// `w` of `tokens(w)`; 0 for a ratio.
  std::size_t token_count() const { return tokens_; }

 private:
  RecentWindow(std::size_t w, double q) : tokens_(w), ratio_(q) {}
  std::size_t tokens_;
  double ratio_;
};

}  // namespace kvevict
