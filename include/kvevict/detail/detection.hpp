// detail/detection.hpp — the C++17 detection idiom and the policy members as expressions, the code behind the
// policy contracts of kvevict/concepts.hpp (which states them as text).
// SPDX-License-Identifier: Apache-2.0
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
}  // namespace kvevict
