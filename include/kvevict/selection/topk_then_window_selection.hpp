// selection/topk_then_window_selection.hpp — select by score at prefill, then slide a window while
// decoding: SnapKV's "window" decode rule, composed from the two existing selections.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/selection/recent_topk_selection.hpp"

namespace kvevict {

/// Selection policy composed of `RecentTopKSelection` at prefill (the recent window `w` plus the top
/// `k − w` scores, `select_keep`'s rule, ties to the older token) and window attention's rule
/// (`SinkRecentSelection{0}`) while decoding (evict the oldest retained token, whatever the scores: a
/// sliding window over what prefill kept). Used by `SnapKVWindow` (SnapKV, Li et al. 2024, whose prefill selection is
/// followed by plain decoding; here the budget stays `k`). Implements the selection-policy contract of
/// kvevict/concepts.hpp.
///
/// The oldest of `n = k + 1` slots is never one of the `w <= k` most recent ones, so `victim` respects the
/// recent flags without reading them and any `w <= k` is accepted.
struct TopKThenWindowSelection {
  /// Checks the resolved `(k, w)`. Throws `std::invalid_argument` if `w > k` (RecentTopKSelection's message).
  void validate(std::size_t k, std::size_t w) const { RecentTopKSelection{}.validate(k, w); }
  /// `RecentTopKSelection::prefill_keep`: writes the kept indices (ascending) to `out[0, m)`, `m = min(k, n)`.
  /// Average O(n); no allocation.
  std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w,
                           std::size_t* out) const noexcept {
    return RecentTopKSelection{}.prefill_keep(scores, n, k, w, out);
  }
  /// The rule of `SinkRecentSelection{0}::victim` (window attention): the slot with the smallest
  /// position (positions are distinct), written as one scan. Returns 0 for `n == 0`. O(n); no
  /// allocation; scores and flags are not read.
  std::size_t victim(const float* /*scores*/, const std::uint8_t* /*recent*/, const std::int64_t* positions,
                     std::size_t n) const noexcept {
    std::size_t oldest = 0;
    for (std::size_t i = 1; i < n; ++i) oldest = positions[i] < positions[oldest] ? i : oldest;
    return oldest;
  }
};

}  // namespace kvevict
