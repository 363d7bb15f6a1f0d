// selection/recent_topk_selection.hpp — keep the recent window plus the top
// `k − w` scores (Keyformer, H2O; TOVA, with w = 0 by default).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/bits.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/detail/vec16.hpp"
#include "kvevict/selection/select_keep.hpp"

namespace kvevict {

/// Selection policy: the recent window `w` plus the `k − w` key tokens with the
/// highest scores among the other candidates (Keyformer §3.3 / Algorithm 1,
/// H2O §4; TOVA is the `w = 0` case, and `w = 1` kvpress's TOVAPress). The rule is `select_keep`. Implements the
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
    return select_keep_unchecked(scores, n, k, w, out);
  }
  /// The lowest-scoring slot outside the recent window (`recent[i] != 0`);
  /// among equal scores the newest (largest position) goes, so ties keep the
  /// older token, as in `select_keep`. Requires finite scores >= 0 (the cache's
  /// scores are sums of probabilities), whose order is their bits' order. One
  /// pass over 5 bytes per slot (score and flag) in 16 explicit lanes (lane `l`
  /// keeps the smallest key of slots `i ≡ l (mod 16)`, its first slot and how
  /// often it occurs: vector code at any optimisation level, on the path `active_isa()`
  /// chose, detail/vec16.hpp);
  /// positions are read only when the minimum occurs more than once. Returns `n`
  /// if every slot is recent (never the case in a cache step: at most
  /// `w <= k < n` are). O(n), no allocation.
  std::size_t victim(const float* scores, const std::uint8_t* recent, const std::int64_t* positions,
                     std::size_t n) const noexcept {
    constexpr std::uint32_t kExcluded = 0xffffffffu;  // above every finite score's bits
    constexpr std::size_t kLanes = 16;
    // key = the score's bits, or all ones for a recent slot (an OR, so that it vectorises).
    auto key = [&](std::size_t i) {
      return detail::float_bits(scores[i]) | (0u - static_cast<std::uint32_t>(recent[i] != 0));
    };
    // Lanes, then the tail: the minimum, its first slot and its total count.
    std::uint32_t m = kExcluded;
    std::size_t best = n, count = 0;
    auto take = [&](std::uint32_t k, std::size_t first, std::size_t times) {
      if (k < m) {
        m = k;
        best = first;
        count = times;
      } else if (k == m && k != kExcluded) {
        best = first < best ? first : best;
        count += times;
      }
    };
    // Spans of at most 2^31 slots, so that a lane's first slot fits 32 bits next to
    // its key and count (all lanes 32-bit: one vector type).
    constexpr std::size_t kSpan = std::size_t{1} << 31;
    std::size_t i = 0;
    while (i + kLanes <= n) {
      const std::size_t base = i, end = base + std::min(n - base, kSpan) / kLanes * kLanes;
      std::uint32_t lane_min[kLanes], lane_count[kLanes] = {}, lane_first[kLanes] = {};
      for (std::size_t l = 0; l < kLanes; ++l) lane_min[l] = kExcluded;
#if defined(KVEVICT_VEC16)
      // The loop below on the dispatched path (detail/vec16.hpp): the same lanes, the same result.
      detail::vk::victim_lanes(scores + base, recent + base, end - base, lane_min, lane_first, lane_count);
      i = end;
#endif
      for (; i < end; i += kLanes) {
        const std::uint32_t rel = static_cast<std::uint32_t>(i - base);
        KVEVICT_SIMD
        for (std::size_t l = 0; l < kLanes; ++l) {
          // Branch-free (masks): a new minimum restarts the lane's first slot and
          // count, an equal key counts once more.
          const std::uint32_t k = key(i + l);
          const std::uint32_t lower = 0u - static_cast<std::uint32_t>(k < lane_min[l]);
          lane_first[l] = (lane_first[l] & ~lower) | ((rel + static_cast<std::uint32_t>(l)) & lower);
          lane_count[l] = ((lane_count[l] + static_cast<std::uint32_t>(k == lane_min[l])) & ~lower) | (1u & lower);
          lane_min[l] = k < lane_min[l] ? k : lane_min[l];
        }
      }
      for (std::size_t l = 0; l < kLanes; ++l) take(lane_min[l], base + lane_first[l], lane_count[l]);
    }
    for (; i < n; ++i) take(key(i), i, 1);
    if (m == kExcluded) return n;
    if (count == 1) return best;
    // Equal scores: the newest (largest position) goes, so ties keep the older token.
    for (std::size_t j = best + 1; j < n; ++j)
      if (key(j) == m && positions[j] > positions[best]) best = j;
    return best;
  }
};

}  // namespace kvevict
