// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// selection/sink_recent_selection.hpp — attention sinks plus a sliding window
// (StreamingLLM; plain window attention with 0 sinks).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kvevict/core/check.hpp"

namespace kvevict {

/// Selection policy of StreamingLLM (Xiao et al., ICLR 2024, §3.2): keep the
/// `sinks` oldest retained tokens (attention sinks) plus the `k − sinks` most
/// recent ones. Positions are kept as they were (kvevict never renumbers; the
/// paper's re-indexing inside the cache is a different method). `sinks = 0` is
/// plain sliding-window attention. Scores are ignored. Its recent window is
/// always `k − sinks` (derived from the budget), so the configuration's own
/// recent window must be 0 (`RecentWindow::tokens(0)` or `ratio(0)`):
/// `validate` rejects any other value rather than ignoring it.
/// Implements the selection-policy contract of `kvevict/concepts.hpp`.
struct SinkRecentSelection {
  std::size_t sinks = 0;  ///< attention sinks kept at the start

  /// Throws `std::invalid_argument` if `sinks > k`, or if a recent window
  /// `w != 0` was configured (`w > k` is named as such).
  void validate(std::size_t k, std::size_t w) const {
    detail::require(sinks <= k, "kvevict::SinkRecentSelection: sinks = ", sinks, " exceeds budget k = ", k);
    detail::require(w <= k, "kvevict::SinkRecentSelection: recent window w = ", w, " exceeds budget k = ", k,
                    " (StreamingLLM/window keep the sinks + the most recent k - sinks tokens; set the recent window "
                    "to 0)");
    detail::require(w == 0, "kvevict::SinkRecentSelection: recent window w = ", w, " with budget k = ", k,
                    ": StreamingLLM/window always keep the most recent k - sinks = ", k - sinks,
                    " tokens; set the recent window to 0");
  }
  /// Candidates in position order: the first `min(sinks, m)` and the last
  /// `m − min(sinks, m)`, `m = min(k, n)`. O(m).
  std::size_t prefill_keep(const float* /*scores*/, std::size_t n, std::size_t k, std::size_t /*w*/,
                           std::size_t* out) const noexcept {
    const std::size_t m = std::min(k, n);
    const std::size_t s = std::min(sinks, m);
    std::size_t c = 0;
    for (std::size_t i = 0; i < s; ++i) out[c++] = i;
    for (std::size_t i = n - (m - s); i < n; ++i) out[c++] = i;
    return c;
  }
  /// The oldest non-sink slot: the slot with the (sinks + 1)-th smallest
  /// position (positions are distinct). One pass keeping the `sinks + 1`
  /// smallest positions seen so far in a small sorted array (on the stack up to
  /// 64 sinks); the common case is one compare per slot. O(n · (1 + sinks ·
  /// insertions / n)), no allocation.
  /// Scores and the recent flags are not read.
  std::size_t victim(const float* /*scores*/, const std::uint8_t* /*recent*/, const std::int64_t* positions,
                     std::size_t n) const noexcept {
    constexpr std::size_t kMaxTracked = 65;
    if (sinks + 1 > kMaxTracked || n == 0) return victim_by_rounds(positions, n);
    const std::size_t want = std::min(sinks + 1, n);  // n > sinks in a decode step; be safe anyway
    std::int64_t pos[kMaxTracked];
    std::size_t slot[kMaxTracked];
    std::size_t have = 0;
    std::int64_t bar = std::numeric_limits<std::int64_t>::max();  // pos[want - 1] once full
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t p = positions[i];
      if (p >= bar && have == want) continue;  // the common case
      std::size_t j = have < want ? have++ : want - 1;  // insertion sort into pos[0, have)
      for (; j > 0 && pos[j - 1] > p; --j) {
        pos[j] = pos[j - 1];
        slot[j] = slot[j - 1];
      }
      pos[j] = p;
      slot[j] = i;
      if (have == want) bar = pos[want - 1];
    }
    return slot[want - 1];
  }

 private:
  /// Same result for very many sinks: raise a floor `sinks + 1` times. O(n · (sinks + 1)).
  std::size_t victim_by_rounds(const std::int64_t* positions, std::size_t n) const noexcept {
    std::int64_t floor = std::numeric_limits<std::int64_t>::min();
    std::size_t best = 0;
    for (std::size_t round = 0; round <= sinks && round < n; ++round) {
      std::int64_t min_pos = std::numeric_limits<std::int64_t>::max();
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t p = positions[i];
        if (p > floor && p < min_pos) {
          min_pos = p;
          best = i;
        }
      }
      floor = min_pos;
    }
    return best;
  }
};

}  // namespace kvevict
