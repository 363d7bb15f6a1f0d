// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// selection/recent_topk_selection.hpp — keep the recent window plus the top
// `k − w` scores (Keyformer, H2O; TOVA with w = 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "kvevict/core/check.hpp"
#include "kvevict/selection/select_keep.hpp"

namespace kvevict {

/// Selection policy: the recent window `w` plus the `k − w` key tokens with the
/// highest scores among the other candidates (Keyformer §3.3 / Algorithm 1,
/// H2O §4; TOVA is the `w = 0` case). The rule is `select_keep`.
///
/// A selection policy has two entry points, called by `Cache`:
///  - `prefill_keep(scores, n, k, w, out)`: candidates are in position order;
///    writes the kept indices, ascending, to `out[0, m)` and returns `m`.
///  - `victim(scores, positions, n, recent_from)`: in a decode step with
///    `n = k + 1` live slots (any slot order), returns the one slot to evict.
///    Slots whose position is `>= recent_from` are the recent window and are
///    never chosen. O(n), one pass, no allocation.
struct RecentTopKSelection {
  /// Checks the resolved `(k, w)`. Throws `std::invalid_argument` if `w > k`.
  void validate(std::size_t k, std::size_t w) const {
    detail::require(w <= k, "kvevict::RecentTopKSelection: recent window w = ", w, " exceeds budget k = ", k);
  }
  std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w, std::size_t* out) const {
    return select_keep(scores, n, k, w, out);
  }
  /// The lowest-scoring slot outside the recent window; among equal scores the
  /// newest (largest position) goes, so ties keep the older token, as in
  /// `select_keep`.
  std::size_t victim(const float* scores, const std::int64_t* positions, std::size_t n,
                     std::int64_t recent_from) const {
    std::size_t best = n;
    float best_score = std::numeric_limits<float>::infinity();
    std::int64_t best_pos = std::numeric_limits<std::int64_t>::min();
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t p = positions[i];
      if (p >= recent_from) continue;
      const float s = scores[i];
      if (s < best_score || (s == best_score && p > best_pos) || best == n) {
        best = i;
        best_score = s;
        best_pos = p;
      }
    }
    return best;
  }
};

}  // namespace kvevict
