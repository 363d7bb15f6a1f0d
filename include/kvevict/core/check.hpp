// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// core/check.hpp — argument checking helpers shared by every header.
//
// Every public entry point validates its arguments *before* it changes any
// state and reports a bad one as `std::invalid_argument` (or
// `std::length_error` for a full buffer) whose message names the function, the
// argument and the offending value, e.g.
//   "kvevict::select_keep: k must be >= 1 (got 0)".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace kvevict {
namespace detail {

/// Concatenates the streamable arguments into one string (used for messages).
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

/// Throws `std::invalid_argument` with the concatenated message when `ok` is false.
template <class... Args>
void require(bool ok, Args&&... args) {
  if (!ok) throw std::invalid_argument(concat(std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace kvevict
