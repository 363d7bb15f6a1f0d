// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// selection/recent_topk_selection.hpp — keep the recent window plus the top
// `k − w` scores (Keyformer, H2O; TOVA with w = 0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/core/check.hpp"
#include "kvevict/core/bits.hpp"
#include "kvevict/selection/select_keep.hpp"

namespace kvevict {

/// Selection policy: the recent window `w` plus the `k − w` key tokens with the
/// highest scores among the other candidates (Keyformer §3.3 / Algorithm 1,
/// H2O §4; TOVA is the `w = 0` case). The rule is `select_keep`. Implements the
/// selection-policy contract of `kvevict/concepts.hpp`.
struct RecentTopKSelection {
  /// Checks the resolved `(k, w)`. Throws `std::invalid_argument` if `w > k`.
  void validate(std::size_t k, std::size_t w) const {
    detail::require(w <= k, "kvevict::RecentTopKSelection: recent window w = ", w, " exceeds budget k = ", k);
  }
  /// The rule of `select_keep(scores, n, k, w, out)` (the cache guarantees its
  /// preconditions, see `validate`): writes the kept indices (ascending) to
  /// `out[0, m)`, returns `m = min(k, n)`. `out` has room for `n`. Average O(n).
  std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w,
                           std::size_t* out) const noexcept {
    return detail::select_keep_unchecked(scores, n, k, w, out);
  }
  /// The lowest-scoring slot outside the recent window (`recent[i] != 0`);
  /// among equal scores the newest (largest position) goes, so ties keep the
  /// older token, as in `select_keep`. Requires finite scores >= 0 (the cache's
  /// scores are sums of probabilities), whose order is their bits' order: the
  /// scan reads 5 bytes per slot (score and flag), vectorised, and positions are
  /// read only for slots that tie with the minimum. Returns `n` if every slot is
  /// recent (never the case in a cache step: at most `w <= k < n` are).
  /// O(n), no allocation.
  std::size_t victim(const float* scores, const std::uint8_t* recent, const std::int64_t* positions,
                     std::size_t n) const noexcept {
    constexpr std::uint32_t kExcluded = 0xffffffffu;  // above every finite score's bits
    std::uint32_t m = kExcluded;
    // key = the score's bits, or all ones for a recent slot (an OR, so that it vectorises).
    auto key = [&](std::size_t i) {
      return detail::float_bits(scores[i]) | (0u - static_cast<std::uint32_t>(recent[i] != 0));
    };
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t k = key(i);
      m = k < m ? k : m;
    }
    if (m == kExcluded) return n;
    std::size_t best = 0;
    while (key(best) != m) ++best;  // the first minimum (exists)
    std::uint32_t ties = 0;
    for (std::size_t i = best + 1; i < n; ++i) ties += key(i) == m ? 1u : 0u;
    if (ties == 0) return best;
    // Equal scores: the newest (largest position) goes, so ties keep the older token.
    for (std::size_t i = best + 1; i < n; ++i)
      if (key(i) == m && positions[i] > positions[best]) best = i;
    return best;
  }
};

}  // namespace kvevict
