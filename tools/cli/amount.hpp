// kvevict tools — cli/amount.hpp: the one grammar of budgets, recent windows and head budgets, and the defaults,
// shared by kvevict-generate, kvevict-replay, kvevict-quality (through kvevict_cli) and the Python module.
// SPDX-License-Identifier: Apache-2.0
//
// Header-only and without CLI11, so that the Python module parses its string arguments with the same code
// as the tools parse their flags.
//
// An amount (a budget k or a recent window w) is written as
//   64     a token count (digits only);
//   0.5    a fraction (a number with a decimal point: of the prompt length P for a budget, of k for a window);
//   50%    a percentage, the same fraction (50% = 0.5).
// Ranges: a budget count is in [1, 2^53] and a budget fraction is finite and > 0; a fraction above 1 (150%)
// keeps more than the prompt (k = floor(1.5 P): the cache evicts only once it holds that many tokens). A window
// count is >= 0 and a window fraction is in [0, 1] (w <= k always).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "kvevict/head_budgets.hpp"

namespace kvcli {

/// A budget or recent window as written: a token count or a fraction (from "0.5" or "50%").
struct Amount {
  bool is_ratio = false;   ///< a fraction ("0.5" or "50%")
  double ratio = 0.0;      ///< the fraction (0.5 for "50%"); 0 for a count
  std::size_t tokens = 0;  ///< the count; 0 for a fraction
  std::string text;        ///< as typed, for messages
};

/// Which amount: the two differ only in their ranges and in what a fraction is of.
enum class AmountKind { budget, recent };

/// The defaults every tool and the Python module use (docs/tools.md).
namespace defaults {
inline constexpr const char* kBudget = "50%";            ///< k = max(1, floor(0.5 P))
inline constexpr const char* kRecent = "30%";            ///< keyformer, h2o, snapkv: w = floor(0.3 k) (tova 0 unless --recent is given)
inline constexpr std::size_t kSinks = 4;                 ///< StreamingLLM's attention sinks
inline constexpr float kTauInit = 1.0f;                  ///< Keyformer's τ at prefill
inline constexpr float kTauEnd = 2.0f;                   ///< Keyformer's τ after the last step
inline constexpr unsigned long long kSeed = 42;          ///< Keyformer's Gumbel noise (and generate's sampler)
inline constexpr std::size_t kSnapWindow = 32;           ///< SnapKV's L is min(32, k) unless given
inline constexpr std::size_t kSnapKernel = 7;            ///< SnapKV's pooling kernel
}  // namespace defaults

namespace detail {
inline constexpr double kMaxAmountTokens = 9007199254740992.0;  // 2^53: counts beyond are not exact
}  // namespace detail

/// Parses `text` in the grammar above into `out` and checks its range for `kind`. Returns "" on success,
/// else the problem as one phrase without the argument's name (the caller prefixes the flag or keyword),
/// e.g. "expected a token count such as 64, a fraction such as 0.5 or a percentage such as 50%, got 'lots'".
/// `out` is written only on success. O(length of text).
inline std::string parse_amount_text(const std::string& text, AmountKind kind, Amount& out) {
  const bool budget = kind == AmountKind::budget;
  const std::string forms = budget ? "a token count such as 64, a fraction of the prompt such as 0.5 or a "
                                     "percentage such as 50%"
                                   : "a token count such as 8, a fraction of the budget such as 0.3 or a "
                                     "percentage such as 30%";
  const bool percent = !text.empty() && text.back() == '%';
  const std::string number = percent ? text.substr(0, text.size() - 1) : text;
  const bool digits = !number.empty() && number.find_first_not_of("0123456789") == std::string::npos;
  const bool decimal = !number.empty() && number.find_first_not_of("0123456789.") == std::string::npos &&
                       std::count(number.begin(), number.end(), '.') == 1 && number != ".";
  if (!digits && !decimal) {
    if (!number.empty() && (number[0] == '-' || number[0] == '+'))
      return "expected " + forms + " (no sign), got '" + text + "'";
    return "expected " + forms + ", got '" + text + "'";
  }
  Amount a;
  a.text = text;
  if (percent || decimal) {
    a.is_ratio = true;
    a.ratio = std::strtod(number.c_str(), nullptr) / (percent ? 100.0 : 1.0);
    if (!std::isfinite(a.ratio)) return "'" + text + "' is not finite";
    if (budget && !(a.ratio > 0.0)) return "must be above 0 (got '" + text + "'); give " + forms;
    if (!budget && a.ratio > 1.0)
      return "a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got '" + text + "')";
  } else {
    if (std::strtod(number.c_str(), nullptr) > detail::kMaxAmountTokens)
      return (budget ? "k = " : "w = ") + text + " exceeds 2^53; give a smaller count";
    a.tokens = static_cast<std::size_t>(std::strtoull(number.c_str(), nullptr, 10));
    if (budget && a.tokens == 0) return "must be >= 1 (got 0)";
  }
  out = a;
  return "";
}

/// A fraction given as a number (Python's float, --budget-ratio / --recent-ratio): the same range checks as
/// `parse_amount_text` on "0.5". Returns "" or the problem.
inline std::string check_amount_fraction(double r, AmountKind kind, const std::string& text, Amount& out) {
  if (!std::isfinite(r)) return "'" + text + "' is not finite";
  if (kind == AmountKind::budget && !(r > 0.0)) return "must be above 0 (got " + text + ")";
  if (kind == AmountKind::recent && !(r >= 0.0 && r <= 1.0))
    return "a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got " + text + ")";
  Amount a;
  a.is_ratio = true;
  a.ratio = r;
  a.text = text;
  out = a;
  return "";
}

/// SnapKV's observation window L for budget k when none is given: min(32, k).
inline std::size_t default_snap_window(std::size_t k) { return std::min(defaults::kSnapWindow, k); }

/// How a layer's budget is shared among its KV heads (--head-budgets, Python's head_budgets=): "uniform", "adaptive"
/// (AdaKV, floor 0.2) or "adaptive:ALPHA" (floor ALPHA, a number in [0, 1]). Sets `out` and returns "" when `text`
/// is one of them; otherwise returns the problem ("unknown split 'x' (expected uniform, adaptive or
/// adaptive:ALPHA)" or "ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got 'x')") and leaves
/// `out` unchanged. Which policies and layouts may use it is the caller's check. O(length of text).
inline std::string parse_head_budgets(const std::string& text, kvevict::HeadBudgets& out) {
  const std::string adaptive = "adaptive";
  if (text == "uniform") {
    out = kvevict::HeadBudgets::uniform();
    return {};
  }
  if (text.compare(0, adaptive.size(), adaptive) != 0 ||
      (text.size() > adaptive.size() && text[adaptive.size()] != ':'))
    return "unknown split '" + text + "' (expected uniform, adaptive or adaptive:ALPHA)";
  float alpha = 0.2f;
  if (text.size() > adaptive.size()) {
    const std::string a = text.substr(adaptive.size() + 1);
    char* end = nullptr;
    const double v = std::strtod(a.c_str(), &end);
    if (a.empty() || end != a.c_str() + a.size() || !(v >= 0.0 && v <= 1.0))
      return "ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got '" + a + "')";
    alpha = static_cast<float>(v);
  }
  out = kvevict::HeadBudgets::adaptive(alpha);
  return {};
}

}  // namespace kvcli
