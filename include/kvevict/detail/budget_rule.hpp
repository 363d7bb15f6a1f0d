// detail/budget_rule.hpp — the one rule that turns a configuration and a budget `k` into
// the pair (k, w) a cache runs with. `Cache` and `PagedCache` both call it, so the
// contiguous and the paged cache cannot drift apart (the paged token unit must
// equal the contiguous `shared_heads` cache bit for bit).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <utility>

#include "kvevict/budget.hpp"
#include "kvevict/detail/check.hpp"

namespace kvevict {
namespace detail {

/// What the storage behind a cache must hold beyond the budget `k`: the rule
/// `k + headroom <= capacity`, and the words of its error message.
struct CapacityNeed {
  std::size_t capacity = 0;         ///< slots the storage can hold (tokens)
  std::size_t headroom = 1;         ///< slots needed beyond `k` (a decode step appends before it evicts: 1)
  const char* store = "view";       ///< what has the capacity ("view", "sequence")
  const char* headroom_name = "1";  ///< how `headroom` is spelled in the message ("1", "page_size")
  const char* why = "a decode step appends before it evicts";  ///< why the headroom is needed
};

/// The budget resolution rule, the one place where a configuration meets a
/// budget `k` (tokens). Called at construction when `k` is a token count and at
/// prefill (before any state changes) once `k = budget.resolve(P)` is known.
///  - `w = recent.resolve(k)`; for an accumulated-score policy
///    (`Score::kAccumulates`: Keyformer, H2O) a window given as a ratio `q > 0`
///    resolves to at least 1 token when `k >= 2` (so that the newest token is
///    not evicted at once every step, see `RecentWindow`); `tokens(0)`,
///    `ratio(0)` and `none()` stay 0.
///  - `selection.validate(k, w)`: `w <= k` (Keyformer, H2O, TOVA); `sinks <= k`
///    and no window of its own (StreamingLLM, window).
///  - `k + need.headroom <= need.capacity` (checked without overflow).
/// Returns `{k, w}`. O(1). Throws `std::invalid_argument` (the selection's
/// message, or "<who>: budget k = K needs a <store> of capacity >= k +
/// <headroom_name> = N (<why>), but the capacity is C").
template <class Score, class Selection>
std::pair<std::size_t, std::size_t> resolve_budget(const RecentWindow& recent, const Selection& selection,
                                                   std::size_t k, const CapacityNeed& need, const char* who) {
  std::size_t w = recent.resolve(k);
  if (Score::kAccumulates && recent.is_ratio() && recent.ratio_value() > 0.0 && k >= 2 && w == 0) w = 1;
  selection.validate(k, w);
  require(need.headroom <= need.capacity && k <= need.capacity - need.headroom, who, ": budget k = ", k, " needs a ",
          need.store, " of capacity >= k + ", need.headroom_name, " = ", k + need.headroom, " (", need.why,
          "), but the capacity is ", need.capacity);
  return {k, w};
}

}  // namespace detail
}  // namespace kvevict
