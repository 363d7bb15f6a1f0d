// concepts.hpp — the policy contracts of `Cache<Score, Temperature, Selection>`,
// as text (here, the one place) and as code (C++17 detection idiom, checked by
// `static_assert` in `Cache`, one message per missing or mistyped member, in the
// style of nlohmann-json's `is_sax_static_asserts`).
// SPDX-License-Identifier: Apache-2.0
//
// ---- Score policy (what a token's score is; e.g. GumbelLogitScore) -----------
//   static constexpr bool kUsesLogits;       reads the attention logits at all (false:
//                                            logits may be nullptr, scores stay 0, or
//                                            come from the keys: the `key_score` or
//                                            anchor hooks, see below);
//   static constexpr bool kAccumulates;      scores persist and grow over steps
//                                            (false: each step replaces them, TOVA);
//   static constexpr bool kUsesTemperature;  divide by the schedule's τ (false: τ = 1,
//                                            the schedule is not consulted);
//   static constexpr bool kPrefillLastRow;   prefill scores with the last prompt row only
//                                            (TOVA) instead of summing every causal row;
//   bool noisy() const;                      add Gumbel noise ζ each step (drawn from the
//                                            cache's generator, or injected).
// The cache runs the one softmax kernel (`accumulate_softmax`) as these say.
//
// ---- Score policy: optional hooks (detected; SnapKVScore and examples/custom_score.cpp use them) ----
// A hook that is absent takes its default. A member of a hook's name with another signature (not
// `const`, another return type, `noexcept` missing) fails to compile with a `static_assert` naming
// the hook, so a mistyped hook is never ignored silently.
//   static constexpr const char* kName;
//       The score's name in error messages (default "this score policy"; SnapKV: "SnapKV").
//   static constexpr const char* kWholePrompt;
//       Present: the score needs the whole prompt at once; the text says why, as a verb phrase after
//       kName (SnapKV: "scores the last L prompt rows"). `Cache::prefill_chunk` then throws
//       `std::invalid_argument` "<cache>::prefill_chunk: <kName> <kWholePrompt>, unknown until the
//       prompt ends; use prefill() with the whole prompt" (state unchanged), and a `Cache` with
//       `bounded_prefill` is rejected at construction: "<cache>: bounded_prefill is not supported by
//       <kName> (it <kWholePrompt>)".
//   std::size_t first_scored_row(std::size_t prompt_len) const;
//       The first prompt row scored at prefill: rows [r, P) add their softmax, r = first_scored_row(P)
//       (default 0, or P − 1 with kPrefillLastRow). It depends on P, so it needs kWholePrompt, and
//       kUsesLogits = true, kPrefillLastRow = false. The cache throws `std::invalid_argument` (state
//       unchanged) if r >= P. O(1) expected.
//   void selection_scores(const float* s, std::size_t n, float* out) const noexcept;
//       The scores a prefill cut ranks (the selection's `prefill_keep`), written to `out[0, n)` from the
//       cut's `n` candidates' scores `s[0, n)` (position order; summed over KV heads with shared_heads).
//       `out` (the scorer's scratch, `n` floats) never overlaps `s`; every value must be finite and
//       >= 0: the cache calls the hook once more before the cut changes any state and throws
//       `std::invalid_argument` "<cache>::<method>: <kName>'s selection_scores of KV head j, slot s is v
//       (must be finite and >= 0)" ("of the summed KV heads" with shared_heads) otherwise; -0.0 is
//       ranked as +0.0. So it must give the same values for the same input. The cache's stored scores
//       stay `s`; decode steps rank them unchanged, and so does the page unit of `PagedCache` (its pages
//       by raw scores). Default: `s` itself. Must not throw; no allocation.
//       SnapKV: pooled over positions, the observation window at FLT_MAX.
//   void validate_budget(std::size_t k, std::size_t w) const;
//       Called whenever the budget is resolved (construction with a token budget, prefill,
//       finish_prefill, a bounded prefill chunk), after the selection's `validate(k, w)` and before any
//       state changes; throws `std::invalid_argument` for a budget the score cannot serve, which the
//       cache rethrows with its own prefix: "<cache>[::<method>]: <what>" (SnapKV: "SnapKV observation
//       window L = … exceeds budget k = …"). Default: every budget is fine.
//   float key_score(const float* key, std::size_t head_dim) const noexcept;
//       A score from the key alone (no attention logits): when a token enters the cache (every prompt
//       token at prefill / prefill_chunk, the new token at decode_step), its score on KV head h is
//       key_score(its K row of head h, converted to float, `head_dim` values). It is set once and
//       never changes: no logits are read (kUsesLogits, kPrefillLastRow and kUsesTemperature must be
//       false, checked by static_assert, so logits may be nullptr on `Cache` and `PagedCache`; `noisy()`
//       must return false, else the cache's constructor throws `std::invalid_argument`); kAccumulates
//       keeps only its budget meaning (the ratio-window rule of detail/budget_rule.hpp). The result must be finite and >= 0: otherwise the call throws
//       `std::invalid_argument` naming the KV head, slot and value, state unchanged; -0.0 is stored as
//       +0.0 (the victim search ranks by bits, where -0.0 would sort above every positive score). The view's element
//       type must convert to float (float, Eigen::half, Eigen::bfloat16). Called serially, once per
//       token and KV head: O(head_dim) each.
//   void anchor_add(const float* key, std::size_t head_dim, float* anchor) const noexcept;
//   void anchor_finish(float* anchor, std::size_t head_dim, std::size_t n) const noexcept;
//   float anchor_score(const float* key, std::size_t head_dim, const float* anchor) const noexcept;
//       A score from every key a KV head holds (KeyDiff's: a key against the mean of the held keys); the three
//       come together. Whenever the cache takes new tokens (prefill, each prefill_chunk, finish_prefill, each
//       decode step: before the step's selection), each KV head h rebuilds its anchor — `head_dim` floats set
//       to 0, `anchor_add` of each of its `n` held K rows in slot order (converted to float), then
//       `anchor_finish(anchor, head_dim, n)` — and every held token's score on h becomes
//       `anchor_score(its K row, head_dim, anchor)`. So scores are recomputed, not accumulated: after an
//       eviction they belong to the anchor of the keys held before it. No logits are read (the rules of
//       key_score: kUsesLogits, kPrefillLastRow, kUsesTemperature false, noisy() false; not combined with
//       key_score, selection_scores or kRanksMean; static_assert). Each score must be finite and >= 0, else
//       the call throws `std::invalid_argument` "<cache>::<method>: anchor_score of KV head j, slot s is v
//       (must be finite and >= 0)", state unchanged; -0.0 is stored as +0.0. Serial: O(n_kv_heads · n ·
//       head_dim) per call, no allocation (the scores go to scratch first, for all-or-nothing).
//   static constexpr bool kRanksMean;
//       Present and true: every selection (prefill cuts, decode-step victims) ranks each token's score
//       divided by the number of queries that scored it, `s / (float(newest − position) + 1)` (`newest` =
//       the last scored query's position; the difference in std::uint64_t), instead of `s`; the stored scores stay the sums
//       (score/mean_attention.hpp, `MeanAttention<Base>`). Needs kUsesLogits, kAccumulates, not
//       kPrefillLastRow and none of first_scored_row, selection_scores, key_score (static_assert).
//
// ---- Temperature schedule (τ per step; e.g. LinearTemperature) ---------------
//   float operator()(std::size_t t) const;   τ_t; t = 0 is prefill, t >= 1 decode steps.
// Copyable. The cache checks every τ it uses (finite and > 0) before any state
// changes and throws `std::invalid_argument` otherwise.
//
// ---- Selection policy (which tokens stay; e.g. RecentTopKSelection) ----------
//   void validate(std::size_t k, std::size_t w) const;
//       Called at prefill with the resolved budget `k >= 1` and window `w`, before
//       any state changes; throws `std::invalid_argument` for a combination the
//       policy cannot serve (every policy must reject `w > k`).
//   std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k,
//                            std::size_t w, std::size_t* out) const noexcept;
//       `n` candidates in position order (index 0 = oldest), `scores[0, n)` finite
//       and >= 0; writes the kept indices, strictly ascending, to `out[0, m)` (room
//       for `n`) and returns m. Must return m = min(k, n), the same for every KV
//       head (the cache keeps all heads at one length), and keep the last
//       min(w, n) candidates (after compaction they are the recent window). Must
//       not throw: it runs after the cache has started to change state.
//   std::size_t victim(const float* scores, const std::uint8_t* recent,
//                      const std::int64_t* positions, std::size_t n) const noexcept;
//       A decode step with `n = k + 1` live slots in any slot order: `scores[0, n)`
//       (finite, >= 0), `recent[i] != 0` marks the recent window (at most `w <= k`
//       slots, so at least one is not recent), `positions[0, n)` distinct. Returns
//       the one slot to evict, in [0, n), never a recent slot (a policy that ignores
//       the flags must reject w > 0 in `validate`, as SinkRecentSelection does).
//       O(n), no allocation, must not throw. With an executor (`set_executor`) the
//       cache calls `victim` for different KV heads at the same time on one
//       object, and the score's `noisy()` likewise: both must be safe to call
//       concurrently (no `mutable` scratch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kvevict/detail/detection.hpp"
#include "kvevict/detail/score_hooks.hpp"

namespace kvevict {

/// Whether `S` satisfies the score-policy contract (see the top of this header): the required
/// members, and the optional hooks it declares well-typed and well-combined.
template <class S>
struct is_score_policy
    : std::bool_constant<detail::is_detected_exact<bool, detail::uses_logits_t, S>::value &&
                         detail::is_detected_exact<bool, detail::accumulates_t, S>::value &&
                         detail::is_detected_exact<bool, detail::uses_temperature_t, S>::value &&
                         detail::is_detected_exact<bool, detail::prefill_last_row_t, S>::value &&
                         detail::is_detected_exact<bool, detail::noisy_t, S>::value &&
                         detail::score_hooks_valid<S>> {};

/// Whether `S` satisfies the temperature-schedule contract.
template <class S>
struct is_temperature_schedule
    : std::bool_constant<std::is_convertible<detail::detected_t<detail::tau_t, S>, float>::value &&
                         std::is_copy_constructible<S>::value> {};

/// Whether `S` satisfies the selection-policy contract.
template <class S>
struct is_selection_policy
    : std::bool_constant<detail::is_detected_exact<void, detail::validate_t, S>::value &&
                         detail::is_detected_exact<std::size_t, detail::prefill_keep_t, S>::value &&
                         detail::is_detected_exact<void, detail::prefill_keep_noexcept_t, S>::value &&
                         detail::is_detected_exact<std::size_t, detail::victim_t, S>::value &&
                         detail::is_detected_exact<void, detail::victim_noexcept_t, S>::value> {};

namespace detail {

/// Instantiated by `Cache`: one `static_assert` per member, so a policy that
/// lacks one fails to compile with a message naming kvevict, the policy kind and
/// the member.
template <class Score>
struct score_policy_static_asserts {
  static_assert(is_detected_exact<bool, uses_logits_t, Score>::value,
                "kvevict: Score policy must provide `static constexpr bool kUsesLogits`");
  static_assert(is_detected_exact<bool, accumulates_t, Score>::value,
                "kvevict: Score policy must provide `static constexpr bool kAccumulates`");
  static_assert(is_detected_exact<bool, uses_temperature_t, Score>::value,
                "kvevict: Score policy must provide `static constexpr bool kUsesTemperature`");
  static_assert(is_detected_exact<bool, prefill_last_row_t, Score>::value,
                "kvevict: Score policy must provide `static constexpr bool kPrefillLastRow`");
  static_assert(is_detected_exact<bool, noisy_t, Score>::value,
                "kvevict: Score policy must provide `bool noisy() const`");
  // The optional hooks: declared means typed as documented.
  static_assert(!declares_name<Score> || has_name<Score>,
                "kvevict: Score policy's optional `kName` must be `static constexpr const char* kName`");
  static_assert(!declares_whole_prompt<Score> || has_whole_prompt<Score>,
                "kvevict: Score policy's optional `kWholePrompt` must be `static constexpr const char* kWholePrompt`");
  static_assert(!declares_first_scored_row<Score> || has_first_scored_row<Score>,
                "kvevict: Score policy's optional `first_scored_row` must be `std::size_t "
                "first_scored_row(std::size_t prompt_len) const`");
  static_assert(!declares_selection_scores<Score> || has_selection_scores<Score>,
                "kvevict: Score policy's optional `selection_scores` must be `void selection_scores(const float* s, "
                "std::size_t n, float* out) const noexcept`");
  static_assert(!declares_validate_budget<Score> || has_validate_budget<Score>,
                "kvevict: Score policy's optional `validate_budget` must be `void validate_budget(std::size_t k, "
                "std::size_t w) const`");
  static_assert(!declares_key_score<Score> || has_key_score<Score>,
                "kvevict: Score policy's optional `key_score` must be `float key_score(const float* key, std::size_t "
                "head_dim) const noexcept`");
  static_assert(key_score_combined<Score>,
                "kvevict: a Score policy with `key_score` must set `kUsesLogits = false`, `kPrefillLastRow = "
                "false` and `kUsesTemperature = false` (the key score is the token's whole score: no logits, rows "
                "or temperature are used)");
  static_assert(!declares_anchor_score<Score> || has_anchor_score<Score>,
                "kvevict: Score policy's optional anchor hooks must be all three of `void anchor_add(const float* "
                "key, std::size_t head_dim, float* anchor) const noexcept`, `void anchor_finish(float* anchor, "
                "std::size_t head_dim, std::size_t n) const noexcept` and `float anchor_score(const float* key, "
                "std::size_t head_dim, const float* anchor) const noexcept`");
  static_assert(anchor_score_combined<Score>,
                "kvevict: a Score policy with the anchor hooks must set `kUsesLogits = false`, `kPrefillLastRow = "
                "false` and `kUsesTemperature = false`, with no key_score or selection_scores hook (the anchor "
                "score is the token's whole score, recomputed from the held keys)");
  static_assert(first_scored_row_combined<Score>,
                "kvevict: a Score policy with `first_scored_row` must set `kUsesLogits = true` and "
                "`kPrefillLastRow = false`");
  static_assert(!has_first_scored_row<Score> || has_whole_prompt<Score>,
                "kvevict: a Score policy with `first_scored_row` must declare `kWholePrompt` (its rows depend on "
                "the prompt length, unknown while chunks stream in)");
  static_assert(!declares_ranks_mean<Score> || has_ranks_mean<Score>,
                "kvevict: Score policy's optional `kRanksMean` must be `static constexpr bool kRanksMean`");
  static_assert(ranks_mean_combined<Score>,
                "kvevict: a Score policy with `kRanksMean = true` must set `kUsesLogits = true`, `kAccumulates = "
                "true` and `kPrefillLastRow = false`, with no first_scored_row, selection_scores or key_score hook "
                "(its mean counts every query at or after a token)");
  static constexpr bool value = is_score_policy<Score>::value;
};

template <class Temperature>
struct temperature_schedule_static_asserts {
  static_assert(std::is_convertible<detected_t<tau_t, Temperature>, float>::value,
                "kvevict: Temperature schedule must provide `float operator()(std::size_t t) const`");
  static_assert(std::is_copy_constructible<Temperature>::value,
                "kvevict: Temperature schedule must be copy-constructible");
  static constexpr bool value = is_temperature_schedule<Temperature>::value;
};

template <class Selection>
struct selection_policy_static_asserts {
  static_assert(is_detected_exact<void, validate_t, Selection>::value,
                "kvevict: Selection policy must provide `void validate(std::size_t k, std::size_t w) const`");
  static_assert(is_detected_exact<std::size_t, prefill_keep_t, Selection>::value,
                "kvevict: Selection policy must provide `std::size_t prefill_keep(const float* scores, std::size_t "
                "n, std::size_t k, std::size_t w, std::size_t* out) const noexcept`");
  static_assert(!is_detected_exact<std::size_t, prefill_keep_t, Selection>::value ||
                    is_detected_exact<void, prefill_keep_noexcept_t, Selection>::value,
                "kvevict: Selection policy's `prefill_keep(...)` must be `noexcept` (it runs after the cache has "
                "started to change state)");
  static_assert(is_detected_exact<std::size_t, victim_t, Selection>::value,
                "kvevict: Selection policy must provide `std::size_t victim(const float* scores, const "
                "std::uint8_t* recent, const std::int64_t* positions, std::size_t n) const noexcept`");
  static_assert(!is_detected_exact<std::size_t, victim_t, Selection>::value ||
                    is_detected_exact<void, victim_noexcept_t, Selection>::value,
                "kvevict: Selection policy's `victim(...)` must be `noexcept` (it runs after the cache has "
                "started to change state)");
  static constexpr bool value = is_selection_policy<Selection>::value;
};

/// The three contracts at once, instantiated by every cache over the policies
/// (`Cache`, `PagedCache`), so both check exactly the same members.
template <class Score, class Temperature, class Selection>
struct cache_policy_static_asserts {
  static constexpr bool value = score_policy_static_asserts<Score>::value &&
                                temperature_schedule_static_asserts<Temperature>::value &&
                                selection_policy_static_asserts<Selection>::value;
};

}  // namespace detail
}  // namespace kvevict
