// detail/check.hpp — argument checking helpers shared by every header.
// SPDX-License-Identifier: Apache-2.0
//
// Every public entry point validates its arguments *before* it changes any
// state and reports a bad one as `std::invalid_argument` (or
// `std::length_error` for a full buffer) whose message names the function, the
// argument and the offending value, e.g.
//   "kvevict::select_keep: k must be >= 1 (got 0)".
#pragma once

#include <cstddef>
#include <cstdint>
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

/// Whether the `a_len` floats at `a` and the `b_len` floats at `b` share a byte, compared as integers
/// (pointers into different arrays have no order). O(1).
inline bool floats_overlap(const float* a, std::size_t a_len, const float* b, std::size_t b_len) noexcept {
  const auto a0 = reinterpret_cast<std::uintptr_t>(a), b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_len * sizeof(float) && b0 < a0 + a_len * sizeof(float);
}

/// The buffer checks of the attention-logits helpers `who`: `out` (`[n_q_heads][n]`) must overlap
/// neither `q` (`[n_q_heads][head_dim]`) nor `bias` (`[n_q_heads][n]`, may be null). Throws
/// `std::invalid_argument` naming `who` otherwise. O(1).
inline void require_separate_logits(const char* who, const float* q, std::size_t n_q_heads, std::size_t head_dim,
                                    const float* bias, const float* out, std::size_t n) {
  require(n == 0 || !floats_overlap(q, n_q_heads * head_dim, out, n_q_heads * n), who,
          ": out overlaps q (give out its own array)");
  require(n == 0 || bias == nullptr || !floats_overlap(bias, n_q_heads * n, out, n_q_heads * n), who,
          ": out overlaps bias (bias == out is not an in-place add: give out its own array, or add the bias after "
          "the call)");
}

/// Whether an object still owns its state: true until it is moved from (the move constructor and
/// the move assignment hand the flag over and clear the source's), so that a moved-from cache can
/// refuse every call with a clear error instead of using storage it no longer owns. O(1), no throw
/// except in `check`.
class LiveFlag {
 public:
  LiveFlag() noexcept = default;
  LiveFlag(const LiveFlag&) = delete;
  LiveFlag& operator=(const LiveFlag&) = delete;
  LiveFlag(LiveFlag&& other) noexcept : live_(other.live_) { other.live_ = false; }
  LiveFlag& operator=(LiveFlag&& other) noexcept {
    if (this != &other) {
      live_ = other.live_;
      other.live_ = false;
    }
    return *this;
  }
  /// Throws `std::logic_error` "<cls>::<method>: this cache was moved from (use the object it was
  /// moved to)" once the owner was moved from.
  void check(const char* cls, const char* method) const {
    if (!live_)
      throw std::logic_error(concat(cls, "::", method, ": this cache was moved from (use the object it was moved to)"));
  }

 private:
  bool live_ = true;
};

}  // namespace detail
}  // namespace kvevict
