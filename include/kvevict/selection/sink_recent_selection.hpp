// selection/sink_recent_selection.hpp — attention sinks plus a sliding window
// (StreamingLLM; plain window attention with 0 sinks).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/vec16.hpp"

namespace kvevict {
namespace detail {
/// Whether some `p[0, B)` may be below `bar`: true if one is; also true (the
/// caller then looks at every element) if some `p` differs from `bar` in sign.
/// The sign bit of `(p − bar) | (p ^ bar)` in unsigned arithmetic: for `p` of
/// `bar`'s sign `p − bar` cannot wrap, so its sign is `p < bar`. Subtractions,
/// XORs and ORs only, so plain x86-64 (SSE2, no 64-bit compare) runs it as vector
/// code: with g++ / clang++ on the dispatched path (`vk::below`, detail/vec16.hpp:
/// 2, 4 or 8 64-bit lanes per vector; the OR of lanes is exact in any order, so
/// every path gives the same answer), else in a scalar loop. (Before issue 22 it
/// was two 2-lane vectors on every CPU, and StreamingLLM's and window's step at
/// plain `-O2` ran 1.4× the instructions of `-O3 -march=native`.) `B` a multiple
/// of 16. O(B), no allocation.
template <std::size_t B>
inline bool block_may_hold_below(const std::int64_t* p, std::int64_t bar) {
  static_assert(B % 16 == 0, "block of whole 16-lane blocks");
  const std::uint64_t ubar = static_cast<std::uint64_t>(bar);
#if defined(KVEVICT_VEC16)
  (void)ubar;
  return vk::below(p, B, bar);
#elif defined(__GNUC__) || defined(__clang__)
  typedef std::uint64_t lanes2 __attribute__((vector_size(16)));
  const lanes2 vbar = {ubar, ubar};
  lanes2 acc0 = {0, 0}, acc1 = {0, 0};
  for (std::size_t b = 0; b < B; b += 4) {
    lanes2 v0, v1;
    std::memcpy(&v0, p + b, sizeof v0);
    std::memcpy(&v1, p + b + 2, sizeof v1);
    acc0 |= (v0 - vbar) | (v0 ^ vbar);
    acc1 |= (v1 - vbar) | (v1 ^ vbar);
  }
  acc0 |= acc1;
  return ((acc0[0] | acc0[1]) >> 63) != 0;
#else
  std::uint64_t any = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const std::uint64_t v = static_cast<std::uint64_t>(p[b]);
    any |= (v - ubar) | (v ^ ubar);
  }
  return (any >> 63) != 0;
#endif
}
}  // namespace detail

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
  /// 64 sinks); the common case is a block of 64 slots that holds none of them,
  /// skipped after one vectorised compare per slot. O(n · (1 + sinks ·
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
    auto scan = [&](std::size_t from, std::size_t to) {
      for (std::size_t i = from; i < to; ++i) {
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
    };
    // Until `want` positions are held, every slot enters; after that `bar` only falls, so a
    // block of 64 slots whose positions are all >= bar changes nothing and is skipped after
    // one branch-free test (`detail::block_may_hold_below`).
    constexpr std::size_t kBlock = 64;
    std::size_t i = std::min(want, n);
    scan(0, i);
    for (; i + kBlock <= n; i += kBlock)
      if (detail::block_may_hold_below<kBlock>(positions + i, bar)) scan(i, i + kBlock);
    scan(i, n);
    return slot[want - 1];
  }

 private:
  /// Same result for very many sinks: raise a floor `sinks + 1` times (no sentinel
  /// values, so positions equal to INT64_MIN / INT64_MAX count like any other).
  /// O(n · (sinks + 1)).
  std::size_t victim_by_rounds(const std::int64_t* positions, std::size_t n) const noexcept {
    std::size_t best = 0;
    for (std::size_t round = 0; round <= sinks && round < n; ++round) {
      std::size_t pick = n;  // smallest position above the floor (positions[best] after round 0)
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t p = positions[i];
        if ((round == 0 || p > positions[best]) && (pick == n || p < positions[pick])) pick = i;
      }
      best = pick;
    }
    return best;
  }
};

}  // namespace kvevict
