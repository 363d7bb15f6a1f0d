// detail/key_reader.hpp — reads a cached K row of the view's element type as floats, for a key score,
// and the scorer's scratch for it.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kvevict/concepts.hpp"
#include "kvevict/detail/check.hpp"

namespace kvevict {
namespace detail {

/// How a cache reads one K row (`head_dim` elements of the view's element type, as bytes) as
/// `head_dim` floats: what a key score (`key_score`, concepts.hpp) is given. Made at construction,
/// where the element type is known, so that the storage stays type-erased (detail/erased_kv.hpp).
/// Also what the anchor hooks (`anchor_add`, `anchor_score`) read. Empty (`read == nullptr`, `head_dim == 0`)
/// for a score that reads no keys.
struct KeyReader {
  void (*read)(const unsigned char* row, std::size_t head_dim, float* out) noexcept = nullptr;
  std::size_t head_dim = 0;  ///< elements per K row
  bool floats = false;       ///< the rows are floats already (`T = float`): read in place, no copy (`row_floats`)
};

/// `out[i] = float(row[i])` for the `head_dim` elements of type `T` at `row` (any alignment). O(head_dim).
template <class T>
void read_key_row(const unsigned char* row, std::size_t head_dim, float* out) noexcept {
  for (std::size_t i = 0; i < head_dim; ++i) {
    T x;
    std::memcpy(&x, row + i * sizeof(T), sizeof(T));
    out[i] = static_cast<float>(x);
  }
}

/// The reader of `T` rows of `head_dim` elements for a score that reads keys (`key_score` or the anchor
/// hooks, `reads_keys`), else the empty one. Such a score needs a `T` convertible to float (float,
/// Eigen::half, Eigen::bfloat16): checked by `static_assert`. O(1).
template <class Score, class T>
KeyReader key_reader(std::size_t head_dim) {
  if constexpr (reads_keys<Score>) {
    static_assert(std::is_constructible<float, const T&>::value,
                  "kvevict: a key score (`key_score` or the anchor hooks) needs a KV element type convertible to "
                  "float");
    return KeyReader{&read_key_row<std::remove_const_t<T>>, head_dim, std::is_same<std::remove_const_t<T>, float>::value};
  } else {
    (void)head_dim;
    return KeyReader{};
  }
}

/// `keys`, after the checks a score that reads no logits must pass at construction: `noisy()` false
/// (there are no logits to add Gumbel noise to), and for a key score a non-empty reader. Throws
/// `std::invalid_argument` "<who>: …" otherwise. O(1).
template <class Score>
KeyReader checked_key_reader(const Score& score, KeyReader keys, const char* who) {
  if constexpr (!Score::kUsesLogits)
    require(!score.noisy(), who, ": a score that reads no logits (kUsesLogits = false) cannot add Gumbel noise; ",
            "its noisy() must return false");
  if constexpr (reads_keys<Score>)
    require(keys.read != nullptr && keys.head_dim >= 1, who, ": a key score needs the view's K reader "
            "(detail::key_reader<Score, T>(head_dim))");
  return keys;
}

/// The part of `Scorer` that only a score reading keys has: the reader and `2 · head_dim + n_kv_heads`
/// floats of scratch (one K row, then a decode step's per-head scores; the anchor hooks' anchor in the last
/// `head_dim`). Empty for any other score, as
/// `Scorer`'s base (empty-base optimisation), so that their scorer is laid out as without key scores.
template <bool kKeyScore>
struct KeyScratch {
  KeyScratch(KeyReader, std::size_t) {}
};
template <>
struct KeyScratch<true> {
  /// Allocates `2 · keys.head_dim + n_kv_heads` floats.
  KeyScratch(KeyReader keys, std::size_t n_kv_heads)
      : keys_(keys), key_(2 * keys.head_dim + n_kv_heads, 0.0f) {}
  KeyReader keys_;          // reads a K row as floats
  std::vector<float> key_;  // [head_dim | n_kv_heads | head_dim]: one K row, a step's per-head scores, an anchor
  /// The K row at `row` as `head_dim` floats: the row itself when it holds floats (a row of a float view is
  /// float-aligned, and the anchor hooks run over every held row at every step: no copy), else converted into
  /// `buf` (`head_dim` floats), which is returned. O(head_dim) for a conversion, O(1) otherwise.
  const float* row_floats(const unsigned char* row, float* buf) const noexcept {
    if (keys_.floats) return reinterpret_cast<const float*>(row);
    keys_.read(row, keys_.head_dim, buf);
    return buf;
  }
};

}  // namespace detail
}  // namespace kvevict
