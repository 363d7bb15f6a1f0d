// budget.hpp — the budget k and the recent window w: one count-or-fraction type
// (TokenAmount, with an explicit "none") and the two rules built on it.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "kvevict/detail/check.hpp"

namespace kvevict {

/// A number of tokens given as nothing (`none`), a token count (`count(n)`), or
/// a fraction `f` of a reference length (`fraction(f)`: of the prompt length for
/// a budget, of the budget for a recent window). Plain data: the ranges are the
/// business of `Budget` and `RecentWindow`, which are built on it. O(1) everywhere.
class TokenAmount {
 public:
  enum class Kind { none, count, fraction };
  /// No amount.
  constexpr TokenAmount() = default;
  static constexpr TokenAmount none() { return TokenAmount(); }
  /// `n` tokens.
  static constexpr TokenAmount count(std::size_t n) { return TokenAmount(Kind::count, n, 0.0); }
  /// A fraction `f` of the reference length (not range-checked here).
  static constexpr TokenAmount fraction(double f) { return TokenAmount(Kind::fraction, 0, f); }
  /// Parses `"64"` (a count), `"50%"` (the fraction 0.5) or `"none"`. Throws
  /// `std::invalid_argument` naming `what` (e.g. the command-line flag) and the text.
  static TokenAmount parse(const std::string& text, const std::string& what) {
    if (text == "none") return none();
    try {
      std::size_t used = 0;
      if (!text.empty() && text.back() == '%') {
        const double percent = std::stod(text.substr(0, text.size() - 1), &used);
        if (used + 1 == text.size()) return fraction(percent / 100.0);
      } else if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
        return count(static_cast<std::size_t>(std::stoull(text, &used)));
      }
    } catch (const std::exception&) {  // std::stod / std::stoull: not a number, or out of range
    }
    throw std::invalid_argument(detail::concat(what, ": expected a token count such as 64 or a percentage such as ",
                                               "50%, got '", text, "'"));
  }

  constexpr Kind kind() const { return kind_; }
  constexpr bool is_none() const { return kind_ == Kind::none; }
  constexpr bool is_count() const { return kind_ == Kind::count; }
  constexpr bool is_fraction() const { return kind_ == Kind::fraction; }
  /// `n` of `count(n)`; 0 otherwise.
  constexpr std::size_t count_value() const { return count_; }
  /// `f` of `fraction(f)`; 0 otherwise.
  constexpr double fraction_value() const { return fraction_; }
  /// `floor(f · reference)` (in double) for a fraction, `n` for a count, 0 for none.
  double of(std::size_t reference) const {
    if (is_fraction()) return std::floor(fraction_ * static_cast<double>(reference));
    return static_cast<double>(count_);
  }

 private:
  constexpr TokenAmount(Kind kind, std::size_t n, double f) : kind_(kind), count_(n), fraction_(f) {}
  Kind kind_ = Kind::none;
  std::size_t count_ = 0;
  double fraction_ = 0.0;
};

/// The KV budget `k`: tokens kept per KV head. Either a token count, or a
/// fraction `r` of the prompt length `P` resolved at prefill as
/// `k = max(1, floor(r · P))` (computed in double; the Keyformer reference
/// code's "kv_cache = 60%" is `ratio(0.6)`). A ratio budget therefore never
/// fails on a short prompt: `ratio(0.6)` with `P = 1` keeps 1 token.
/// Both forms are bounded by `kMaxTokens = 2^53` (exact in double). There is no
/// "no budget": a full cache is an engine without a kvevict cache.
class Budget {
 public:
  /// The largest budget either form may resolve to: 2^53.
  static constexpr std::size_t kMaxTokens = std::size_t{1} << 53;
  /// `k` tokens. Throws `std::invalid_argument` unless `1 <= k <= 2^53`.
  static Budget tokens(std::size_t k) {
    detail::require(k >= 1, "kvevict::Budget::tokens: k must be >= 1 (got ", k, ")");
    detail::require(k <= kMaxTokens, "kvevict::Budget::tokens: k = ", k, " exceeds 2^53");
    return Budget(TokenAmount::count(k));
  }
  /// `k = max(1, floor(r · P))`. Throws `std::invalid_argument` unless `r` is finite and > 0.
  static Budget ratio(double r) {
    detail::require(std::isfinite(r) && r > 0.0, "kvevict::Budget::ratio: r must be finite and > 0 (got ", r, ")");
    return Budget(TokenAmount::fraction(r));
  }
  /// `tokens(n)` for `count(n)`, `ratio(f)` for `fraction(f)`, with their checks;
  /// `none` throws `std::invalid_argument` (a cache always has a budget).
  static Budget from(TokenAmount a) {
    detail::require(!a.is_none(), "kvevict::Budget::from: a budget cannot be none");
    return a.is_count() ? tokens(a.count_value()) : ratio(a.fraction_value());
  }
  /// The budget for prompt length `P`: the count, or `max(1, floor(r · P))`.
  /// Throws `std::invalid_argument` if a ratio resolves to more than 2^53
  /// tokens (so large that `r · P` is no longer an exact count).
  std::size_t resolve(std::size_t prompt_len) const {
    if (amount_.is_count()) return amount_.count_value();
    const double k = std::max(1.0, amount_.of(prompt_len));
    detail::require(k <= 9007199254740992.0, "kvevict::Budget: ratio ", amount_.fraction_value(),
                    " of prompt length ", prompt_len, " resolves to k = ", k, ", above 2^53");
    return static_cast<std::size_t>(k);
  }
  /// The amount: `count(k)` or `fraction(r)`.
  TokenAmount amount() const { return amount_; }
  /// `true` for `ratio(r)`, `false` for `tokens(k)`.
  bool is_ratio() const { return amount_.is_fraction(); }
  /// `r` of `ratio(r)`; 0 for a token budget.
  double ratio_value() const { return amount_.fraction_value(); }
  /// `k` of `tokens(k)`; 0 for a ratio budget.
  std::size_t token_count() const { return amount_.count_value(); }

 private:
  explicit Budget(TokenAmount a) : amount_(a) {}
  TokenAmount amount_;
};

/// The recent window `w`: the most recent tokens, always kept. Either a count,
/// or a fraction `q` of the resolved budget, `w = floor(q · k)`. A count
/// larger than the resolved `k` makes the cache throw (at construction for a
/// token budget, else at prefill).
///
/// `none()` — or, equally, `tokens(0)` or `ratio(0)` — means no recent window
/// (`is_none()` is true for all three). With an accumulated
/// score (Keyformer, H2O) that is an exact but harsh rule: a new token has only
/// its own step's score, below every older token's sum, so every new token is
/// evicted in its own decode step, forever (H2O, `k = 4`, `w = 0`, 4-token
/// prompt: positions `[0, 1, 2, 3]` after every step). To avoid that by
/// accident, a ratio `q > 0` resolves to at least 1 token for those policies
/// when `k >= 2` (`Cache` applies this floor). TOVA has none by default
/// (`w = 0`, the paper's rule; `w = 1` is kvpress's); StreamingLLM and window derive theirs from the budget
/// (`k − sinks`) and require 0 here.
class RecentWindow {
 public:
  /// No recent window (`w = 0` for every `k`); the default of `CacheConfig`.
  static RecentWindow none() { return RecentWindow(TokenAmount::none()); }
  /// `w` tokens (0 allowed: no recent window).
  static RecentWindow tokens(std::size_t w) { return RecentWindow(TokenAmount::count(w)); }
  /// `w = floor(q · k)`. Throws `std::invalid_argument` unless `0 <= q <= 1`.
  static RecentWindow ratio(double q) {
    detail::require(q >= 0.0 && q <= 1.0, "kvevict::RecentWindow::ratio: q must be in [0, 1] (got ", q, ")");
    return RecentWindow(TokenAmount::fraction(q));
  }
  /// `none()`, `tokens(n)` or `ratio(f)` from an amount, with their checks.
  static RecentWindow from(TokenAmount a) {
    if (a.is_none()) return none();
    return a.is_count() ? tokens(a.count_value()) : ratio(a.fraction_value());
  }
  /// `w` for budget `k` (no check against `k`): the count, `floor(q · k)`, or 0.
  /// A count is returned as given (never through a double: `tokens(SIZE_MAX)`
  /// is `SIZE_MAX`, so the cache rejects it as `w > k`); `floor(q · k)` with
  /// `q <= 1` is at most `k` (double rounding of a huge `k` cannot exceed it). O(1).
  std::size_t resolve(std::size_t k) const {
    if (amount_.is_count()) return amount_.count_value();
    const double w = amount_.of(k);
    return w >= static_cast<double>(k) ? k : static_cast<std::size_t>(w);
  }
  /// The amount: `none`, `count(w)` or `fraction(q)`.
  TokenAmount amount() const { return amount_; }
  /// `true` when the window is 0 whatever `k`: `none()`, `tokens(0)` or `ratio(0)`.
  bool is_none() const {
    return amount_.is_none() || (amount_.is_count() && amount_.count_value() == 0) ||
           (amount_.is_fraction() && amount_.fraction_value() == 0.0);
  }
  /// `true` for `ratio(q)`, `false` for `tokens(w)` and `none()`.
  bool is_ratio() const { return amount_.is_fraction(); }
  /// `q` of `ratio(q)`; 0 otherwise.
  double ratio_value() const { return amount_.fraction_value(); }
  /// `w` of `tokens(w)`; 0 otherwise.
  std::size_t token_count() const { return amount_.count_value(); }

 private:
  explicit RecentWindow(TokenAmount a) : amount_(a) {}
  TokenAmount amount_;
};

}  // namespace kvevict
