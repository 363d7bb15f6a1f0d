// selection/select_keep.hpp — the recent-window + top-k key-token selection rule.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/simd.hpp"

namespace kvevict {

inline std::size_t select_keep_unchecked(const float* scores, std::size_t n, std::size_t k, std::size_t w,
                                         std::size_t* out) noexcept;

namespace detail {
/// Whether some `v[i]`, `i < n`, is NaN: one branch-free pass in 16 lanes of
/// flags (vector code at any optimisation level). O(n), no allocation.
inline bool any_nan(const float* v, std::size_t n) noexcept {
  constexpr std::size_t kLanes = 16;
  std::uint32_t nan[kLanes] = {};
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    KVEVICT_LANES
    for (std::size_t l = 0; l < kLanes; ++l) nan[l] |= static_cast<std::uint32_t>(v[i + l] != v[i + l]);
  }
  for (; i < n; ++i) nan[0] |= static_cast<std::uint32_t>(v[i] != v[i]);
  std::uint32_t any = 0;
  for (std::size_t l = 0; l < kLanes; ++l) any |= nan[l];
  return any != 0;
}
}  // namespace detail

/// Keyformer / H2O selection rule (Keyformer §3.3 and Algorithm 1; H2O §4):
/// of `n` candidates in original order (index 0 = oldest), each with one score,
/// keep `m = min(k, n)` of them:
///  - the *recent window*: the last `r = min(w, n)` candidates, always kept;
///  - the *key tokens*: the `m - r` highest-scoring candidates among the first
///    `n - r` (recent ones are excluded from this pool, so no slot is wasted on
///    a duplicate). Ties go to the older candidate (lower index).
///
/// Writes the kept indices in ascending (original) order to `out[0, m)` and
/// returns `m`. `out` must have room for `n` entries: it doubles as scratch, so
/// this overload allocates nothing.
///
/// Complexity: average O(n) (`std::nth_element` on the pool, then one linear
/// pass that emits the winners in order); no full sort.
///
/// Example: scores `[0.40, 0.20, 0.10, 0.05, 0.25]`, `k = 3`, `w = 1` keeps
/// `[0, 1, 4]`: 4 is recent, 0 and 1 are the top two of `[0, 4)`.
///
/// Throws `std::invalid_argument` if `k < 1`, `w > k`, a pointer is null while
/// `n > 0`, or a score is NaN (±inf are ordinary values). Nothing is written then.
inline std::size_t select_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w, std::size_t* out) {
  detail::require(k >= 1, "kvevict::select_keep: k must be >= 1 (got ", k, ")");
  detail::require(w <= k, "kvevict::select_keep: w must be <= k (got w = ", w, ", k = ", k, ")");
  if (n == 0) return 0;
  detail::require(scores != nullptr && out != nullptr, "kvevict::select_keep: scores and out must be non-null");
  if (detail::any_nan(scores, n))
    for (std::size_t i = 0; i < n; ++i)
      detail::require(!std::isnan(scores[i]), "kvevict::select_keep: scores[", i, "] is NaN");
  return select_keep_unchecked(scores, n, k, w, out);
}

/// The rule of `select_keep` without its argument checks, for callers that
/// guarantee them (`k >= 1`, `w <= k`, non-null pointers when `n > 0`, no NaN
/// score) and must not throw: a selection policy's `prefill_keep` is `noexcept`
/// and the cache guarantees these for the `(scores, n, k, w)` it passes
/// (concepts.hpp), so `RecentTopKSelection` and examples/custom_policy.cpp call
/// this. Same result, complexity and memory use as `select_keep`; a broken
/// precondition is undefined behaviour.
inline std::size_t select_keep_unchecked(const float* scores, std::size_t n, std::size_t k, std::size_t w,
                                         std::size_t* out) noexcept {
  if (n == 0) return 0;
  const std::size_t m = std::min(k, n);
  const std::size_t r = std::min(w, n);
  const std::size_t pool = n - r;   // candidates [0, pool) compete for key slots
  const std::size_t keys = m - r;   // key tokens to keep, <= pool
  std::size_t count = 0;
  if (keys == pool) {
    for (std::size_t i = 0; i < pool; ++i) out[count++] = i;
  } else if (keys > 0) {
    // "a ranks before b": higher score, then older. A strict total order, so
    // the kept set is unique and matches a full sort exactly.
    auto before = [scores](std::size_t a, std::size_t b) {
      return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    };
    std::iota(out, out + pool, std::size_t{0});
    std::nth_element(out, out + (keys - 1), out + pool, before);
    const std::size_t last = out[keys - 1];  // the weakest key token kept
    for (std::size_t i = 0; i < pool; ++i)
      if (!before(last, i)) out[count++] = i;  // i ranks at or before `last`
  }
  for (std::size_t i = pool; i < n; ++i) out[count++] = i;
  return count;
}

/// Allocating convenience overload of the rule above: returns the kept indices
/// in ascending order. Same semantics, complexity and exceptions.
inline std::vector<std::size_t> select_keep(const std::vector<float>& scores, std::size_t k, std::size_t w) {
  std::vector<std::size_t> out(scores.size());
  out.resize(select_keep(scores.data(), scores.size(), k, w, out.data()));
  return out;
}

}  // namespace kvevict
