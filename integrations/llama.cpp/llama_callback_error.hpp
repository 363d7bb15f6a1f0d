// kvevict inside llama.cpp — llama_callback_error.hpp: an exception cannot cross llama.cpp's C eval callback, so the
// callback keeps the failure and the evictor rethrows it after llama_decode; and the error of a refused drop.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <stdexcept>
#include <string>

namespace kvevict_llama {

namespace detail {
inline std::string& callback_error() {
  static thread_local std::string error;
  return error;
}
}  // namespace detail

/// Rethrows (as `std::runtime_error`) a failure the callback kept, if any, and clears it.
inline void take_callback_error() {
  std::string& e = detail::callback_error();
  if (e.empty()) return;
  const std::string what = e;
  e.clear();
  throw std::runtime_error(what);
}

/// Thrown when llama.cpp refuses to drop a position (`llama_memory_seq_rm` returned false: recurrent or
/// hybrid memory). Nothing of the sequence was removed when it is thrown by the first drop of a step.
struct SeqRmRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace kvevict_llama
