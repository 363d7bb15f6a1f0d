// kv/kv_buffer.hpp — owning storage for one layer's KV cache.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"

namespace kvevict {

/// Owning storage for one layer's KV cache in the default
/// `[kv_head][slot][head_dim]` row-major layout, for engines that do not
/// manage their own buffers. `view()` returns a `KVView<T>` over it.
///
/// Memory: `2 * n_kv_heads * capacity * head_dim * sizeof(T)` bytes for K and
/// V plus `n_kv_heads * capacity * 8` for position IDs, allocated once.
/// Throws `std::invalid_argument` if a dimension is 0 or `n_kv_heads * capacity * head_dim` overflows
/// `std::size_t` (before anything is allocated).
/// The buffer is movable; moving it keeps views valid (vector storage moves).
template <class T>
class KVBuffer {
 public:
  /// Allocates `[n_kv_heads][capacity][head_dim]` K and V (value-initialised),
  /// position IDs and lengths (0). Throws `std::invalid_argument` if a dimension is 0 or the element count
  /// `n_kv_heads * capacity * head_dim` overflows `std::size_t` (nothing allocated); `std::length_error` (from
  /// `std::vector`) above its `max_size()`.
  KVBuffer(std::size_t n_kv_heads, std::size_t capacity, std::size_t head_dim)
      : n_kv_heads_((check(n_kv_heads, capacity, head_dim), n_kv_heads)),
        capacity_(capacity),
        head_dim_(head_dim),
        k_(n_kv_heads * capacity * head_dim),
        v_(n_kv_heads * capacity * head_dim),
        positions_(n_kv_heads * capacity, 0),
        lengths_(n_kv_heads, 0) {}

  /// View over this buffer (default layout). O(1).
  KVView<T> view() {
    return KVView<T>::contiguous(k_.data(), v_.data(), positions_.data(), lengths_.data(), n_kv_heads_, capacity_,
                                 head_dim_);
  }

  /// KV heads.
  std::size_t n_kv_heads() const { return n_kv_heads_; }
  /// Slots per KV head.
  std::size_t capacity() const { return capacity_; }
  /// Elements per K or V row.
  std::size_t head_dim() const { return head_dim_; }
  /// Bytes held by live K and V rows: `sum_h lengths[h] * 2 * head_dim * sizeof(T)`.
  std::size_t live_kv_bytes() const {
    std::size_t n = 0;
    for (std::size_t len : lengths_) n += len;
    return n * 2 * head_dim_ * sizeof(T);
  }

 private:
  static void check(std::size_t n_kv_heads, std::size_t capacity, std::size_t head_dim) {
    detail::require(n_kv_heads >= 1, "kvevict::KVBuffer: n_kv_heads must be >= 1 (got ", n_kv_heads, ")");
    detail::require(capacity >= 1, "kvevict::KVBuffer: capacity must be >= 1 (got ", capacity, ")");
    detail::require(head_dim >= 1, "kvevict::KVBuffer: head_dim must be >= 1 (got ", head_dim, ")");
    (void)detail::checked_mul("kvevict::KVBuffer", "n_kv_heads * capacity * head_dim", n_kv_heads, capacity, head_dim);
  }

  std::size_t n_kv_heads_, capacity_, head_dim_;
  std::vector<T> k_, v_;
  std::vector<std::int64_t> positions_;
  std::vector<std::size_t> lengths_;
};

}  // namespace kvevict
