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

/// `a · b` when it fits `std::size_t`; otherwise throws `std::invalid_argument`
/// "<who>: <what> = <a> * <b> overflows std::size_t", so that a size built from caller-controlled
/// dimensions (a buffer's element count, an array's extent, an index bound) is refused before it
/// sizes or addresses anything, instead of wrapping to a small number. `what` names the product's
/// terms in order (e.g. "n_q_heads * head_dim"); the message gives their values in the same order.
/// A product with a zero term is 0 (no throw). O(1) (a division only when both terms exceed 2^32).
inline std::size_t checked_mul(const char* who, const char* what, std::size_t a, std::size_t b) {
  constexpr std::size_t kHalf = std::size_t{1} << (4 * sizeof(std::size_t));  // 2^32 on 64-bit targets
  if ((a >= kHalf || b >= kHalf) && a != 0 && b > SIZE_MAX / a)
    throw std::invalid_argument(concat(who, ": ", what, " = ", a, " * ", b, " overflows std::size_t"));
  return a * b;
}

/// The product of three or more terms, `((a · b) · c) · …`, checked like the two-term form: throws
/// `std::invalid_argument` "<who>: <what> = <a> * <b> * <c> … overflows std::size_t" (every term's value)
/// when any partial product overflows `std::size_t` — unless a term is 0 (the product is then 0). O(terms).
template <class... Rest>
std::size_t checked_mul(const char* who, const char* what, std::size_t a, std::size_t b, std::size_t c,
                        Rest... rest) {
  const std::size_t terms[] = {a, b, c, static_cast<std::size_t>(rest)...};
  std::size_t product = 1;
  bool overflow = false, zero = false;
  for (const std::size_t t : terms) {
    zero = zero || t == 0;
    if (t != 0 && product > SIZE_MAX / t) overflow = true;
    product *= t;  // wraps only when `overflow` is set
  }
  if (zero) return 0;
  if (overflow) {
    std::ostringstream os;
    os << who << ": " << what << " = ";
    for (std::size_t i = 0; i < sizeof(terms) / sizeof(terms[0]); ++i) os << (i == 0 ? "" : " * ") << terms[i];
    os << " overflows std::size_t";
    throw std::invalid_argument(os.str());
  }
  return product;
}

/// `a + b` when it fits `std::size_t`; otherwise throws `std::invalid_argument`
/// "<who>: <what> = <a> + <b> overflows std::size_t" (for extents such as `a · b + c`). O(1).
inline std::size_t checked_add(const char* who, const char* what, std::size_t a, std::size_t b) {
  if (b > SIZE_MAX - a)
    throw std::invalid_argument(concat(who, ": ", what, " = ", a, " + ", b, " overflows std::size_t"));
  return a + b;
}

/// Whether the `a_len` floats at `a` and the `b_len` floats at `b` share a byte, compared as integers
/// (pointers into different arrays have no order). O(1).
inline bool floats_overlap(const float* a, std::size_t a_len, const float* b, std::size_t b_len) noexcept {
  const auto a0 = reinterpret_cast<std::uintptr_t>(a), b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_len * sizeof(float) && b0 < a0 + a_len * sizeof(float);
}

/// The buffer checks of the attention-logits helpers `who`: the extents of `q` (`[n_q_heads][head_dim]`) and
/// `out` / `bias` (`[n_q_heads][n]`) in bytes fit `std::size_t` (`checked_mul`: a query-head count no caller's
/// array can hold is refused before the first row is read), and `out` overlaps neither `q` nor `bias` (may be
/// null). Throws `std::invalid_argument` naming `who` otherwise. O(1).
inline void require_separate_logits(const char* who, const float* q, std::size_t n_q_heads, std::size_t head_dim,
                                    const float* bias, const float* out, std::size_t n) {
  (void)checked_mul(who, "n_q_heads * head_dim * sizeof(float) (the bytes of q)", n_q_heads, head_dim, sizeof(float));
  (void)checked_mul(who, "n_q_heads * n * sizeof(float) (the bytes of out)", n_q_heads, n, sizeof(float));
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
  /// Whether the owner was not moved from. O(1).
  bool alive() const noexcept { return live_; }

 private:
  bool live_ = true;
};

}  // namespace detail
}  // namespace kvevict
