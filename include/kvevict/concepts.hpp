// concepts.hpp — the policy contracts of `Cache<Score, Temperature, Selection>`,
// as text (here, the one place) and as code (C++17 detection idiom, checked by
// `static_assert` in `Cache`, one message per missing or mistyped member, in the
// style of nlohmann-json's `is_sax_static_asserts`).
// SPDX-License-Identifier: Apache-2.0
//
// ---- Score policy (what a token's score is; e.g. GumbelLogitScore) -----------
//   static constexpr bool kUsesLogits;       reads the attention logits at all (false:
//                                            logits may be nullptr, scores stay 0);
//   static constexpr bool kAccumulates;      scores persist and grow over steps
//                                            (false: each step replaces them, TOVA);
//   static constexpr bool kUsesTemperature;  divide by the schedule's τ (false: τ = 1,
//                                            the schedule is not consulted);
//   static constexpr bool kPrefillLastRow;   prefill scores with the last prompt row only
//                                            (TOVA) instead of summing every causal row;
//   bool noisy() const;                      add Gumbel noise ζ each step (drawn from the
//                                            cache's generator, or injected).
// The cache runs the one softmax kernel (`accumulate_softmax`) as these say.
// Optional (detected, see score/snapkv_score.hpp): `std::size_t observation_window() const` —
// prefill scores only the prompt's last L rows (one-shot prefill only) — with
// `void selection_scores(const float* s, std::size_t n, float* out) const noexcept`, the scores a
// prefill cut ranks instead of `s` (SnapKV: pooled, the window at FLT_MAX).
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

namespace kvevict {
namespace detail {

// ---- detection idiom (Library Fundamentals TS v2, written out for C++17) ----
struct nonesuch {
  nonesuch() = delete;
  ~nonesuch() = delete;
  nonesuch(const nonesuch&) = delete;
  void operator=(const nonesuch&) = delete;
};
template <class Default, class AlwaysVoid, template <class...> class Op, class... Args>
struct detector {
  using type = Default;
};
template <class Default, template <class...> class Op, class... Args>
struct detector<Default, std::void_t<Op<Args...>>, Op, Args...> {
  using type = Op<Args...>;
};
/// `Op<Args...>` if well-formed, else `nonesuch`.
template <template <class...> class Op, class... Args>
using detected_t = typename detector<nonesuch, void, Op, Args...>::type;
/// Whether `Op<Args...>` is well-formed and exactly `Expected` (cv-qualifiers ignored).
template <class Expected, template <class...> class Op, class... Args>
using is_detected_exact = std::is_same<Expected, std::remove_cv_t<detected_t<Op, Args...>>>;

// ---- the members, as expressions ----
template <class S> using uses_logits_t = decltype(S::kUsesLogits);
template <class S> using accumulates_t = decltype(S::kAccumulates);
template <class S> using uses_temperature_t = decltype(S::kUsesTemperature);
template <class S> using prefill_last_row_t = decltype(S::kPrefillLastRow);
template <class S> using noisy_t = decltype(std::declval<const S&>().noisy());
template <class S> using tau_t = decltype(std::declval<const S&>()(std::size_t{}));
template <class S>
using validate_t = decltype(std::declval<const S&>().validate(std::size_t{}, std::size_t{}));
template <class S>
using prefill_keep_t = decltype(std::declval<const S&>().prefill_keep(
    std::declval<const float*>(), std::size_t{}, std::size_t{}, std::size_t{}, std::declval<std::size_t*>()));
template <class S>
using victim_t = decltype(std::declval<const S&>().victim(std::declval<const float*>(),
                                                          std::declval<const std::uint8_t*>(),
                                                          std::declval<const std::int64_t*>(), std::size_t{}));
template <class S>
using prefill_keep_noexcept_t = std::enable_if_t<noexcept(std::declval<const S&>().prefill_keep(
    std::declval<const float*>(), std::size_t{}, std::size_t{}, std::size_t{}, std::declval<std::size_t*>()))>;
template <class S>
using victim_noexcept_t = std::enable_if_t<noexcept(std::declval<const S&>().victim(
    std::declval<const float*>(), std::declval<const std::uint8_t*>(), std::declval<const std::int64_t*>(),
    std::size_t{}))>;
}  // namespace detail

/// Whether `S` satisfies the score-policy contract (see the top of this header).
template <class S>
struct is_score_policy
    : std::bool_constant<detail::is_detected_exact<bool, detail::uses_logits_t, S>::value &&
                         detail::is_detected_exact<bool, detail::accumulates_t, S>::value &&
                         detail::is_detected_exact<bool, detail::uses_temperature_t, S>::value &&
                         detail::is_detected_exact<bool, detail::prefill_last_row_t, S>::value &&
                         detail::is_detected_exact<bool, detail::noisy_t, S>::value> {};

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
