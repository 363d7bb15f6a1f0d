// detail/score_hooks.hpp — detection of a Score policy's optional hooks (kName, kWholePrompt, first_scored_row,
// selection_scores, validate_budget, key_score, the anchor hooks, kRanksMean) and of how they may combine; the
// hooks are described in kvevict/concepts.hpp, the caches call them in detail/scorer.hpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kvevict/detail/detection.hpp"

namespace kvevict {
namespace detail {

// ---- the optional Score hooks (see the top of kvevict/concepts.hpp) ----
/// Whether `Op<Args...>` is well-formed.
template <template <class...> class Op, class... Args>
constexpr bool is_detected_v = !std::is_same<detected_t<Op, Args...>, nonesuch>::value;
template <class S> using name_ptr_t = decltype(&S::kName);
template <class S> using whole_prompt_ptr_t = decltype(&S::kWholePrompt);
template <class S> using first_scored_row_ptr_t = decltype(&S::first_scored_row);
template <class S> using first_scored_row_t = decltype(std::declval<const S&>().first_scored_row(std::size_t{}));
template <class S> using selection_scores_ptr_t = decltype(&S::selection_scores);
template <class S>
using selection_scores_t = decltype(std::declval<const S&>().selection_scores(
    std::declval<const float*>(), std::size_t{}, std::declval<float*>()));
template <class S>
using selection_scores_noexcept_t = std::enable_if_t<noexcept(std::declval<const S&>().selection_scores(
    std::declval<const float*>(), std::size_t{}, std::declval<float*>()))>;
template <class S> using validate_budget_ptr_t = decltype(&S::validate_budget);
template <class S>
using validate_budget_t = decltype(std::declval<const S&>().validate_budget(std::size_t{}, std::size_t{}));
template <class S> using key_score_ptr_t = decltype(&S::key_score);
template <class S>
using key_score_t = decltype(std::declval<const S&>().key_score(std::declval<const float*>(), std::size_t{}));
template <class S>
using key_score_noexcept_t =
    std::enable_if_t<noexcept(std::declval<const S&>().key_score(std::declval<const float*>(), std::size_t{}))>;

template <class S> using anchor_add_ptr_t = decltype(&S::anchor_add);
template <class S> using anchor_finish_ptr_t = decltype(&S::anchor_finish);
template <class S> using anchor_score_ptr_t = decltype(&S::anchor_score);
template <class S>
using anchor_add_t = decltype(std::declval<const S&>().anchor_add(std::declval<const float*>(), std::size_t{},
                                                                  std::declval<float*>()));
template <class S>
using anchor_add_noexcept_t = std::enable_if_t<noexcept(
    std::declval<const S&>().anchor_add(std::declval<const float*>(), std::size_t{}, std::declval<float*>()))>;
template <class S>
using anchor_finish_t =
    decltype(std::declval<const S&>().anchor_finish(std::declval<float*>(), std::size_t{}, std::size_t{}));
template <class S>
using anchor_finish_noexcept_t = std::enable_if_t<noexcept(
    std::declval<const S&>().anchor_finish(std::declval<float*>(), std::size_t{}, std::size_t{}))>;
template <class S>
using anchor_score_t = decltype(std::declval<const S&>().anchor_score(std::declval<const float*>(), std::size_t{},
                                                                      std::declval<const float*>()));
template <class S>
using anchor_score_noexcept_t = std::enable_if_t<noexcept(std::declval<const S&>().anchor_score(
    std::declval<const float*>(), std::size_t{}, std::declval<const float*>()))>;

template <class S> using ranks_mean_t = decltype(S::kRanksMean);

/// `declares_*`: the score has a member of the hook's name (in any form); `has_*`: it has the hook
/// with the documented signature (what the caches call). A hook declared but not had is a mistyped
/// hook: `score_policy_static_asserts` rejects it.
template <class S> constexpr bool declares_name = is_detected_v<name_ptr_t, S>;
template <class S> constexpr bool has_name = is_detected_exact<const char* const*, name_ptr_t, S>::value;
template <class S> constexpr bool declares_whole_prompt = is_detected_v<whole_prompt_ptr_t, S>;
template <class S>
constexpr bool has_whole_prompt = is_detected_exact<const char* const*, whole_prompt_ptr_t, S>::value;
template <class S>
constexpr bool declares_first_scored_row =
    is_detected_v<first_scored_row_ptr_t, S> || is_detected_v<first_scored_row_t, S>;
template <class S>
constexpr bool has_first_scored_row = is_detected_exact<std::size_t, first_scored_row_t, S>::value;
template <class S>
constexpr bool declares_selection_scores =
    is_detected_v<selection_scores_ptr_t, S> || is_detected_v<selection_scores_t, S>;
template <class S>
constexpr bool has_selection_scores = is_detected_exact<void, selection_scores_t, S>::value &&
                                      is_detected_v<selection_scores_noexcept_t, S>;
template <class S>
constexpr bool declares_validate_budget =
    is_detected_v<validate_budget_ptr_t, S> || is_detected_v<validate_budget_t, S>;
template <class S> constexpr bool has_validate_budget = is_detected_exact<void, validate_budget_t, S>::value;
template <class S>
constexpr bool declares_key_score =
    is_detected_v<key_score_ptr_t, S> || is_detected_v<key_score_t, S>;
template <class S>
constexpr bool has_key_score =
    is_detected_exact<float, key_score_t, S>::value && is_detected_v<key_score_noexcept_t, S>;

template <class S>
constexpr bool declares_anchor_score = is_detected_v<anchor_add_ptr_t, S> || is_detected_v<anchor_add_t, S> ||
                                       is_detected_v<anchor_finish_ptr_t, S> || is_detected_v<anchor_finish_t, S> ||
                                       is_detected_v<anchor_score_ptr_t, S> || is_detected_v<anchor_score_t, S>;
/// The anchor hooks, all three with their documented signatures (`anchor_add`, `anchor_finish`, `anchor_score`).
template <class S>
constexpr bool has_anchor_score =
    is_detected_exact<void, anchor_add_t, S>::value && is_detected_v<anchor_add_noexcept_t, S> &&
    is_detected_exact<void, anchor_finish_t, S>::value && is_detected_v<anchor_finish_noexcept_t, S> &&
    is_detected_exact<float, anchor_score_t, S>::value && is_detected_v<anchor_score_noexcept_t, S>;
/// Whether the cache reads `S`'s K rows (a `key_score` or the anchor hooks).
template <class S> constexpr bool reads_keys = has_key_score<S> || has_anchor_score<S>;

template <class S> constexpr bool declares_ranks_mean = is_detected_v<ranks_mean_t, S>;
template <class S>
constexpr bool has_ranks_mean = is_detected_exact<bool, ranks_mean_t, S>::value;
/// Whether the selections rank `S`'s scores as means over the queries that scored each token
/// (`kRanksMean` present and true). O(1), compile time.
template <class S>
constexpr bool ranks_mean() {
  if constexpr (has_ranks_mean<S>) return S::kRanksMean;
  else return false;
}

/// The score's `kName`, or "this score policy". O(1).
template <class S>
constexpr const char* score_name() {
  if constexpr (has_name<S>) return S::kName;
  else return "this score policy";
}
/// `kUsesLogits`, `kPrefillLastRow` and `kUsesTemperature` of `S` where all are `bool`s (`known`), else
/// false: the combination rules stay quiet about a missing flag, which has its own message.
template <class S, bool = is_detected_exact<bool, uses_logits_t, S>::value &&
                          is_detected_exact<bool, prefill_last_row_t, S>::value &&
                          is_detected_exact<bool, uses_temperature_t, S>::value>
struct score_flags {
  static constexpr bool known = false, uses_logits = false, prefill_last_row = false, uses_temperature = false;
};
template <class S>
struct score_flags<S, true> {
  static constexpr bool known = true, uses_logits = S::kUsesLogits, prefill_last_row = S::kPrefillLastRow,
                        uses_temperature = S::kUsesTemperature;
};
/// Whether the hooks `S` declares are typed as documented (`score_hooks_typed`) and combined as the
/// top of this header says (`score_hooks_valid`).
template <class S>
constexpr bool score_hooks_typed = (!declares_name<S> || has_name<S>) &&
                                   (!declares_whole_prompt<S> || has_whole_prompt<S>) &&
                                   (!declares_first_scored_row<S> || has_first_scored_row<S>) &&
                                   (!declares_selection_scores<S> || has_selection_scores<S>) &&
                                   (!declares_validate_budget<S> || has_validate_budget<S>) &&
                                   (!declares_key_score<S> || has_key_score<S>) &&
                                   (!declares_anchor_score<S> || has_anchor_score<S>) &&
                                   (!declares_ranks_mean<S> || has_ranks_mean<S>);
template <class S>
constexpr bool key_score_combined = !has_key_score<S> || (!score_flags<S>::uses_logits &&
                                                          !score_flags<S>::prefill_last_row &&
                                                          !score_flags<S>::uses_temperature);
template <class S>
constexpr bool anchor_score_combined = !has_anchor_score<S> || (!score_flags<S>::uses_logits &&
                                                                !score_flags<S>::prefill_last_row &&
                                                                !score_flags<S>::uses_temperature &&
                                                                !has_key_score<S> && !has_selection_scores<S>);
template <class S>
constexpr bool first_scored_row_combined =
    !has_first_scored_row<S> || !score_flags<S>::known ||
    (score_flags<S>::uses_logits && !score_flags<S>::prefill_last_row);
template <class S, bool = is_detected_exact<bool, accumulates_t, S>::value>
struct accumulates_flag {
  static constexpr bool value = false;
};
template <class S>
struct accumulates_flag<S, true> {
  static constexpr bool value = S::kAccumulates;
};
template <class S>
constexpr bool ranks_mean_combined =
    !ranks_mean<S>() || !score_flags<S>::known ||
    (score_flags<S>::uses_logits && !score_flags<S>::prefill_last_row && accumulates_flag<S>::value &&
     !has_first_scored_row<S> && !has_selection_scores<S> && !has_key_score<S>);
template <class S>
constexpr bool score_hooks_valid = score_hooks_typed<S> && key_score_combined<S> && anchor_score_combined<S> &&
                                   first_scored_row_combined<S> &&
                                   (!has_first_scored_row<S> || has_whole_prompt<S>) && ranks_mean_combined<S>;

}  // namespace detail
}  // namespace kvevict
