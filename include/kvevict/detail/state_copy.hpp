// detail/state_copy.hpp — `Cache::copy_state_from`: the checks that a source cache has the destination's
// configuration and view geometry, and the copy of its whole eviction state into the destination's own storage
// (beam search: a beam takes over another beam's cache).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "kvevict/budget.hpp"
#include "kvevict/cache_config.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/detail/erased_kv.hpp"
#include "kvevict/head_budgets.hpp"

namespace kvevict {
namespace detail {

/// "none", "N tokens" or "ratio F": a budget's or recent window's amount in a message. O(1).
inline std::string amount_text(const TokenAmount& a) {
  if (a.is_count()) return concat(a.count_value(), " tokens");
  if (a.is_fraction()) return concat("ratio ", a.fraction_value());
  return "none";
}

/// Whether two amounts are the same (kind and value; for a recent window, every form of "no window" is the same).
inline bool same_amount(const TokenAmount& a, const TokenAmount& b) {
  return a.kind() == b.kind() && a.count_value() == b.count_value() && a.fraction_value() == b.fraction_value();
}

/// The configuration a cache copied from (`other`, `src`) must share with the one copied into (`dst`), the seed
/// excepted (it is state: `reset(seed)` changes it, and the copy takes other's): n_q_heads, budget, recent,
/// shared_heads, max_prefill_chunk, bounded_prefill, head_budgets. Throws `std::invalid_argument` "<who>: other has
/// <field> = <value>, this cache has <value>" at the first difference. O(1).
inline void check_copy_config(const CacheConfig& dst, const CacheConfig& src, const char* who) {
  auto differ = [&](const char* field, const auto& theirs, const auto& ours) {
    throw std::invalid_argument(concat(who, ": other has ", field, " = ", theirs, ", this cache has ", ours,
                                       " (copy between caches of one configuration)"));
  };
  if (src.n_q_heads != dst.n_q_heads) differ("n_q_heads", src.n_q_heads, dst.n_q_heads);
  if (!same_amount(src.budget.amount(), dst.budget.amount()))
    differ("budget", amount_text(src.budget.amount()), amount_text(dst.budget.amount()));
  const bool both_none = src.recent.is_none() && dst.recent.is_none();
  if (!both_none && !same_amount(src.recent.amount(), dst.recent.amount()))
    differ("recent", amount_text(src.recent.amount()), amount_text(dst.recent.amount()));
  if (src.shared_heads != dst.shared_heads)
    differ("shared_heads", src.shared_heads ? "true" : "false", dst.shared_heads ? "true" : "false");
  if (src.max_prefill_chunk != dst.max_prefill_chunk)
    differ("max_prefill_chunk", src.max_prefill_chunk, dst.max_prefill_chunk);
  if (src.bounded_prefill != dst.bounded_prefill)
    differ("bounded_prefill", src.bounded_prefill ? "true" : "false", dst.bounded_prefill ? "true" : "false");
  if (src.head_budgets.kind != dst.head_budgets.kind || src.head_budgets.floor != dst.head_budgets.floor)
    differ("head_budgets", concat(head_budgets_name(src.head_budgets), " (floor ", src.head_budgets.floor, ")"),
           concat(head_budgets_name(dst.head_budgets), " (floor ", dst.head_budgets.floor, ")"));
}

/// The views: the same number of KV heads, element type and head_dim, and every one of other's lengths within
/// its own capacity and this view's. Throws `std::invalid_argument` "<who>: …" naming the values. O(n_kv_heads).
inline void check_copy_view(const ErasedKV& dst, const ErasedKV& src, const char* who) {
  require(src.n_kv_heads == dst.n_kv_heads, who, ": other has n_kv_heads = ", src.n_kv_heads,
          ", this cache has ", dst.n_kv_heads);
  require(src.elem_type == dst.elem_type, who, ": other's view holds another element type (", src.elem_bytes,
          " bytes) than this cache's (", dst.elem_bytes, " bytes)");
  require(src.row_bytes == dst.row_bytes, who, ": other has head_dim = ", src.row_bytes / src.elem_bytes,
          ", this cache has ", dst.row_bytes / dst.elem_bytes);
  check_lengths(src, who);
  for (std::size_t h = 0; h < src.n_kv_heads; ++h)
    require(src.lengths[h] <= dst.capacity, who, ": other's lengths[", h, "] = ", src.lengths[h],
            " exceeds this cache's capacity ", dst.capacity);
  // The copy moves rows with memcpy: storage that partly overlaps would be read after it was written. Views over
  // the very same storage (every row at one address) are allowed: their rows are left where they are.
  const bool same = dst.k == src.k && dst.v == src.v && dst.positions == src.positions &&
                    dst.head_stride == src.head_stride && dst.slot_stride == src.slot_stride &&
                    dst.capacity == src.capacity;
  if (same) return;
  auto span = [](const ErasedKV& e, const unsigned char* base) {
    const std::size_t last = (e.n_kv_heads - 1) * e.head_stride + (e.capacity - 1) * e.slot_stride + e.row_bytes;
    return std::make_pair(reinterpret_cast<std::uintptr_t>(base), reinterpret_cast<std::uintptr_t>(base) + last);
  };
  auto meet = [](std::pair<std::uintptr_t, std::uintptr_t> a, std::pair<std::uintptr_t, std::uintptr_t> b) {
    return a.first < b.second && b.first < a.second;
  };
  const auto dk = span(dst, dst.k), dv = span(dst, dst.v), sk = span(src, src.k), sv = span(src, src.v);
  const auto pos = [](const ErasedKV& e) {
    const auto b = reinterpret_cast<std::uintptr_t>(e.positions);
    return std::make_pair(b, b + e.n_kv_heads * e.capacity * sizeof(std::int64_t));
  };
  require(!meet(dk, sk) && !meet(dk, sv) && !meet(dv, sk) && !meet(dv, sv) && !meet(pos(dst), pos(src)), who,
          ": other's view and this cache's view overlap in memory (K, V or positions) without being the same "
          "storage: give each cache its own");
}

/// Whether a policy type can be copied into a cache (copy-constructible and move-assignable).
template <class P>
constexpr bool copyable_policy = std::is_copy_constructible<P>::value && std::is_move_assignable<P>::value;

/// `other` as a cache of `C`'s type (`copy_state_from` through the runtime interface); throws
/// `std::invalid_argument` if it is a cache of another policy. O(1).
template <class C>
const C& same_cache(const C& /*self*/, const CacheInterface& other) {
  const auto* same = dynamic_cast<const C*>(&other);
  require(same != nullptr, "kvevict::Cache::copy_state_from: other is a cache of another policy (its "
          "Cache<Score, Temperature, Selection> type differs from this cache's)");
  return *same;
}

/// `Cache::copy_state_from(other)` (cache.hpp documents the contract); a friend of `Cache`. Checks everything
/// first (destination unchanged on a throw), copies the policies, then every layer's state (`copy_core_state`,
/// `copy_heads_state`, `copy_step_state`) and the prompt's length; cannot throw after the checks.
template <class C>
void copy_cache_state(C& dst, const C& src) {
  using Score = typename C::score_type;
  using Temperature = typename C::temperature_type;
  using Selection = typename C::selection_type;
  const char* who = "kvevict::Cache::copy_state_from";
  dst.live("copy_state_from");
  if (&dst == &src) return;
  require(src.live_.alive(), who, ": other was moved from (copy from the cache it was moved to)");
  if constexpr (!copyable_policy<Score> || !copyable_policy<Temperature> || !copyable_policy<Selection>) {
    throw std::logic_error(concat(who, ": this cache's policies cannot be copied (Score, Temperature and Selection "
                                  "must be copy-constructible and move-assignable)"));
  } else {
    check_copy_config(dst.config_, src.config_, who);
    check_copy_view(dst.kv(), src.kv(), who);
    if (src.prefilled_) (void)dst.resolve_budget(src.k_, who);  // this capacity serves other's k (>= k + 1)
    if (src.config_.head_budgets.is_adaptive() && !src.shared_budget_)  // AdaKV's cap at the first cut
      require(src.kv().capacity == dst.kv().capacity, who, ": other has capacity ", src.kv().capacity,
              ", this cache has ", dst.kv().capacity, " (head_budgets = adaptive before the layer's first cut: "
              "its allocation caps each head at capacity - 1 - w)");
    Score score = src.score_policy();  // the only steps that may throw (a policy's copy), before any change
    Temperature temperature = src.temperature_schedule();
    Selection selection = src.selection_policy();
    dst.copy_core_state(src, std::move(score), std::move(temperature), std::move(selection));
    dst.copy_heads_state(src);
    dst.copy_step_state(src);
    dst.prompt_len_ = src.prompt_len_;
  }
}

}  // namespace detail
}  // namespace kvevict
