// layer_budgets.hpp — per-layer budgets: how a model's total KV budget (n_layers · k tokens per KV
// head) is split over its layers: uniform, PyramidKV (Cai et al. 2024, arXiv 2406.02069), or weights.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kvevict/detail/check.hpp"

namespace kvevict {

/// The schedule of per-layer budgets (`layer_budgets` computes them).
struct LayerBudgets {
  enum class Kind {
    uniform,  ///< every layer gets k (kvevict's default)
    pyramid,  ///< PyramidKV: linearly decreasing from the lowest to the highest layer
    weights   ///< proportional to `weights` (one per layer)
  };
  Kind kind = Kind::uniform;
  /// PyramidKV's β (>= 1): the top layer's share is `B / β`, the bottom layer's `2B − B / β`, `B = k −
  /// reserved` (PyramidKV code, `PyramidKVCluster.update_kv`: `min_num = B // beta`, `max_num = 2B −
  /// min_num`; its default β = 20).
  double beta = 20.0;
  /// PyramidKV: tokens of every layer outside the pyramid (its observation window α, kept by every
  /// layer), `<= k`. 0: the pyramid spans the whole budget.
  std::size_t reserved = 0;
  /// The least budget any layer gets (>= 1): layers below it are raised, the tokens taken from the
  /// largest budgets, so the total is unchanged.
  std::size_t floor = 1;
  /// `Kind::weights`: relative weights, one per layer (finite, >= 0, not all 0).
  std::vector<double> weights;

  /// Uniform budgets.
  static LayerBudgets make_uniform() { return LayerBudgets{}; }
  /// PyramidKV budgets with `beta` and `reserved` tokens per layer outside the pyramid.
  static LayerBudgets make_pyramid(double beta = 20.0, std::size_t reserved = 0) {
    LayerBudgets s;
    s.kind = Kind::pyramid;
    s.beta = beta;
    s.reserved = reserved;
    return s;
  }
  /// Budgets proportional to `weights` (one per layer).
  static LayerBudgets make_weights(std::vector<double> weights) {
    LayerBudgets s;
    s.kind = Kind::weights;
    s.weights = std::move(weights);
    return s;
  }
};

/// "uniform", "pyramid" or "weights".
inline const char* layer_budgets_name(const LayerBudgets& s) {
  return s.kind == LayerBudgets::Kind::pyramid ? "pyramid" : s.kind == LayerBudgets::Kind::weights ? "weights"
                                                                                                     : "uniform";
}

/// Parses "uniform", "pyramid", "pyramid:BETA" (β >= 1) or a comma-separated list of weights, one per
/// layer ("4,2,1,1"). Throws `std::invalid_argument` naming the text otherwise.
inline LayerBudgets parse_layer_budgets(const std::string& text) {
  if (text == "uniform") return LayerBudgets::make_uniform();
  if (text == "pyramid") return LayerBudgets::make_pyramid();
  auto number = [&](const std::string& t, const char* what) {
    char* end = nullptr;
    const double v = t.empty() ? 0.0 : std::strtod(t.c_str(), &end);
    detail::require(!t.empty() && end == t.c_str() + t.size() && std::isfinite(v), "kvevict::parse_layer_budgets: ",
                    what, " '", t, "' in '", text, "' is not a number (expected uniform, pyramid, pyramid:BETA or a "
                    "list of weights such as 4,2,1,1)");
    return v;
  };
  if (text.rfind("pyramid:", 0) == 0) {
    const double beta = number(text.substr(8), "beta");
    detail::require(beta >= 1.0, "kvevict::parse_layer_budgets: pyramid beta must be >= 1 (got ", text.substr(8), ")");
    return LayerBudgets::make_pyramid(beta);
  }
  std::vector<double> w;
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    w.push_back(number(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start), "weight"));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return LayerBudgets::make_weights(std::move(w));
}

namespace detail {
/// Removes `d` tokens from `v`, one at a time from the largest value (ties: the highest index), in
/// closed form: with `L` the least level such that `f(L) = Σ max(0, v[i] − L) <= d`, every value above
/// `L` becomes `L`, then the `d − f(L)` highest-index values at `L` lose one more — exactly the
/// token-by-token result, since that never lowers a value below the current maximum minus one.
/// Values not above `floor` are never touched (requires `Σ max(0, v[i] − floor) >= d`).
/// O(n · log(max v)).
inline void take_from_largest(std::vector<std::size_t>& v, std::size_t d, std::size_t floor) {
  if (d == 0) return;
  const auto above = [&](std::size_t level) {
    std::size_t f = 0;
    for (const std::size_t x : v) f += x > level ? x - level : 0;
    return f;
  };
  std::size_t lo = floor, hi = *std::max_element(v.begin(), v.end());  // f(hi) = 0 <= d
  while (lo < hi) {  // the least L in [floor, max] with f(L) <= d
    const std::size_t mid = lo + (hi - lo) / 2;
    if (above(mid) <= d)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::size_t rest = d - above(lo);
  for (std::size_t& x : v) x = std::min(x, lo);
  for (std::size_t i = v.size(); i-- > 0 && rest > 0;)
    if (v[i] == lo && lo > floor) --v[i], --rest;
}

/// Rounds non-negative reals `t` (summing to the integer `total` up to rounding) to integers summing to
/// `total` exactly: floors, then one more token to the largest fractional parts (ties: the lower
/// layer). Then raises every value below `floor` to `floor`, taking one token at a time from the
/// largest value (ties: the higher layer) — so no value ends below `floor` or the sum above `total`.
/// The floor pass is computed in closed form (`take_from_largest`), not token by token.
/// Requires `t.size() · floor <= total <= 2^53`. O(n log n + n · log total).
inline std::vector<std::size_t> round_to_total(const std::vector<double>& t, std::size_t total, std::size_t floor) {
  const std::size_t n = t.size();
  std::vector<std::size_t> out(n);
  std::size_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += out[i] = static_cast<std::size_t>(std::floor(std::max(0.0, t[i])));
  while (sum > total) {  // float rounding pushed a floor above the total: trim the largest
    const auto it = std::max_element(out.rbegin(), out.rend());
    --*it, --sum;
  }
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return t[a] - std::floor(t[a]) > t[b] - std::floor(t[b]);
  });
  for (std::size_t r = 0; sum < total; r = (r + 1) % n) ++out[order[r]], ++sum;
  std::size_t deficit = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (out[i] < floor) {
      deficit += floor - out[i];
      out[i] = floor;
    }
  take_from_largest(out, deficit, floor);
  return out;
}
}  // namespace detail

/// The budget of each of `n_layers` layers for a uniform budget `k` per layer (tokens per KV head):
/// the budgets sum to `n_layers · k` exactly and none is below `schedule.floor` (>= 1).
///  - uniform: `k` everywhere;
///  - pyramid (PyramidKV, Cai et al. 2024, §3.2, and its code): with `B = k − reserved`, `b_min = B / β`,
///    `b_max = 2B − b_min`; if a prompt length `prompt_len > reserved` is given and `b_max > prompt_len −
///    reserved`, then `b_max = prompt_len − reserved` and `b_min = 2B − b_max` (the code's short-prompt
///    rule, so no layer is given more than the prompt); layer `l` gets `reserved + b_max − l · (b_max −
///    b_min) / (n_layers − 1)` — an arithmetic sequence whose mean is `k` (the code floors its step,
///    which makes the total drift; here the exact sequence is rounded by `round_to_total`). One layer,
///    or `k >= prompt_len`: uniform (every layer keeps the whole prompt anyway);
///  - weights: `n_layers · k · weights[l] / Σ weights`, rounded by `round_to_total`.
/// Then values below `floor` are raised, the tokens taken from the largest budgets.
/// Throws `std::invalid_argument` naming the value for `n_layers == 0`, `k == 0`, `k > 2^53` or
/// `n_layers · k > 2^53` (as `Budget::tokens`: exact in double), `floor == 0`,
/// `n_layers · floor > n_layers · k` (`floor > k`), β < 1 or not finite, `reserved > k`, a weights list
/// whose size is not `n_layers` or that holds a negative / non-finite value or sums to 0 or to inf.
/// O(n_layers · log n_layers + n_layers · log k); allocates the result.
inline std::vector<std::size_t> layer_budgets(const LayerBudgets& schedule, std::size_t n_layers, std::size_t k,
                                              std::size_t prompt_len = 0) {
  const char* who = "kvevict::layer_budgets";
  detail::require(n_layers >= 1, who, ": n_layers must be >= 1 (got 0)");
  detail::require(k >= 1, who, ": budget k must be >= 1 (got 0)");
  constexpr std::size_t kMax = std::size_t{1} << 53;
  detail::require(k <= kMax, who, ": budget k = ", k, " exceeds 2^53");
  detail::require(k <= kMax / n_layers, who, ": n_layers * k = ", n_layers, " * ", k,
                  " exceeds 2^53 (the total budget must be exact in double)");
  detail::require(schedule.floor >= 1, who, ": floor must be >= 1 (got 0)");
  detail::require(schedule.floor <= k, who, ": floor = ", schedule.floor, " exceeds the budget k = ", k,
          " (the layers could not sum to n_layers * k)");
  const std::size_t total = n_layers * k;
  const double N = static_cast<double>(n_layers);
  std::vector<double> t(n_layers, static_cast<double>(k));
  if (schedule.kind == LayerBudgets::Kind::pyramid) {
    detail::require(std::isfinite(schedule.beta) && schedule.beta >= 1.0, who,
                    ": pyramid beta must be finite and >= 1 (got ", schedule.beta, ")");
    detail::require(schedule.reserved <= k, who, ": pyramid reserved = ", schedule.reserved,
                    " exceeds the budget k = ", k);
    const bool all_fit = prompt_len > 0 && k >= prompt_len;
    if (n_layers >= 2 && !all_fit) {
      const double B = static_cast<double>(k - schedule.reserved);
      double b_min = B / schedule.beta, b_max = 2.0 * B - b_min;
      if (prompt_len > schedule.reserved && b_max > static_cast<double>(prompt_len - schedule.reserved)) {
        b_max = static_cast<double>(prompt_len - schedule.reserved);
        b_min = 2.0 * B - b_max;
      }
      for (std::size_t l = 0; l < n_layers; ++l)
        t[l] = static_cast<double>(schedule.reserved) + b_max - static_cast<double>(l) * (b_max - b_min) / (N - 1.0);
    }
  } else if (schedule.kind == LayerBudgets::Kind::weights) {
    detail::require(schedule.weights.size() == n_layers, who, ": ", schedule.weights.size(), " weights for ", n_layers,
            " layers (give one per layer)");
    double sum = 0.0;
    for (std::size_t l = 0; l < n_layers; ++l) {
      detail::require(std::isfinite(schedule.weights[l]) && schedule.weights[l] >= 0.0, who, ": weight ", l,
              " must be finite and >= 0 (got ", schedule.weights[l], ")");
      sum += schedule.weights[l];
    }
    detail::require(sum > 0.0, who, ": the weights sum to 0");
    detail::require(std::isfinite(sum), who, ": the weights sum to ", sum, " (scale them down)");
    // The share first (<= 1), then the tokens: total · w overflowed to inf for w near 1e300.
    for (std::size_t l = 0; l < n_layers; ++l) t[l] = static_cast<double>(total) * (schedule.weights[l] / sum);
  }
  return detail::round_to_total(t, total, schedule.floor);
}

}  // namespace kvevict
