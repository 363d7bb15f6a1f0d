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
#include "kvevict/score/fast_math.hpp"
#include "kvevict/selection/select_keep.hpp"

namespace kvevict {

/// Selection policy: the recent window `w` plus the `k − w` key tokens with the
/// highest scores among the other candidates (Keyformer §3.3 / Algorithm 1,
/// H2O §4; TOVA is the `w = 0` case). The rule is `select_keep`.
///
/// A selection policy has three entry points, called by `Cache` (this is the
/// whole interface a custom selection policy implements):
///  - `validate(k, w)`: at prefill, once `k` and `w` are resolved; throws
///    `std::invalid_argument` for a combination the policy cannot serve;
///  - `prefill_keep(scores, n, k, w, out)`: candidates are in position order;
///    writes the kept indices, ascending, to `out[0, m)` and returns `m`.
///  - `victim(scores, positions, n, recent_from)`: in a decode step with
///    `n = k + 1` live slots (any slot order), returns the one slot to evict.
///    Slots whose position is `>= recent_from` are the recent window and are
///    never chosen. O(n), one pass, no allocation.
///  - optionally `victim_flagged(scores, recent, positions, n)`: the same
///    choice with the window given as per-slot flags; `Cache` maintains the
///    flags and uses this entry point when the policy has it.
struct RecentTopKSelection {
  /// Checks the resolved `(k, w)`. Throws `std::invalid_argument` if `w > k`.
  void validate(std::size_t k, std::size_t w) const {
    detail::require(w <= k, "kvevict::RecentTopKSelection: recent window w = ", w, " exceeds budget k = ", k);
  }
  /// `select_keep(scores, n, k, w, out)`: writes the kept indices (ascending) to
  /// `out[0, m)`, returns `m = min(k, n)`. `out` has room for `n`. Average O(n).
  std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w, std::size_t* out) const {
    return select_keep(scores, n, k, w, out);
  }
  /// The lowest-scoring slot outside the recent window; among equal scores the
  /// newest (largest position) goes, so ties keep the older token, as in
  /// `select_keep`. One pass; the window test is a select, not a branch (recent
  /// slots are scattered among the others), and the only branch, "a new minimum
  /// or a tie", is rarely taken. Returns `n` if every slot is recent.
  std::size_t victim(const float* scores, const std::int64_t* positions, std::size_t n,
                     std::int64_t recent_from) const {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    std::size_t best = n;
    float best_score = kInf;
    std::int64_t best_pos = std::numeric_limits<std::int64_t>::min();
    const std::uint32_t inf_bits = detail::float_bits(kInf);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t p = positions[i];
      // s = p < recent_from ? scores[i] : +inf, by masking (a compiler turns the
      // ternary into a mispredicted branch).
      const std::uint32_t keep = 0u - static_cast<std::uint32_t>(p < recent_from);
      const float s = detail::bits_float((detail::float_bits(scores[i]) & keep) | (inf_bits & ~keep));
      if (s <= best_score && p < recent_from) {  // rare: a new minimum, a tie, or (only while best == n) +inf
        if (s < best_score || p > best_pos || best == n) {
          best = i;
          best_score = s;
          best_pos = p;
        }
      }
    }
    return best;
  }

  /// Fast path `Cache` uses instead of `victim` (same result): the recent
  /// window is given as per-slot flags (`recent[i] != 0`) kept by the cache, so
  /// the scan reads 5 bytes per slot instead of 12, and positions are read only
  /// for slots that tie with the minimum. Requires finite scores >= 0 (the
  /// cache's scores are sums of probabilities), whose order is their bits'
  /// order. Returns `n` if every slot is recent. O(n), vectorised, no allocation.
  std::size_t victim_flagged(const float* scores, const std::uint8_t* recent, const std::int64_t* positions,
                             std::size_t n) const {
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
