// kv/kv_view.hpp — a non-owning view of one layer's KV cache.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "kvevict/detail/check.hpp"

namespace kvevict {

namespace detail {
/// Offset of the row of (kv_head `h`, slot `s`) from the start of K (or V):
/// `h · head_stride + s · slot_stride`, in whatever unit the strides are in
/// (elements for `KVView`, bytes for `detail::ErasedKV`). The one place the
/// strided layout's arithmetic lives. O(1).
constexpr std::size_t row_offset(std::size_t h, std::size_t s, std::size_t head_stride, std::size_t slot_stride) {
  return h * head_stride + s * slot_stride;
}
}  // namespace detail

/// Non-owning view of one transformer layer's KV cache: keys, values,
/// position IDs and a length per KV head.
///
/// Layout (all strides in elements of `T`, row-major within a row):
///
///     K row of (kv_head h, slot s) = k + h * head_stride + s * slot_stride,  head_dim contiguous elements
///     V row of (kv_head h, slot s) = v + h * head_stride + s * slot_stride,  head_dim contiguous elements
///     position ID of (h, s)        = positions[h * capacity + s]            (int64, [kv_head][slot])
///     number of live slots of h    = lengths[h]                              (slots [0, lengths[h]) are live)
///
/// The default layout made by `contiguous()` is `[kv_head][slot][head_dim]`
/// (`head_stride = capacity * head_dim`, `slot_stride = head_dim`). An engine
/// that stores `[slot][kv_head][head_dim]` uses `head_stride = head_dim`,
/// `slot_stride = n_kv_heads * head_dim` instead; nothing else changes.
///
/// Invariants kept by every kvevict operation (FlashInfer `page.cuh` style:
/// the view is plain data, the invariants are the contract):
///  - slots `[0, lengths[h])` of head `h` hold live tokens; K row, V row,
///    position ID (and the cache's score) of one slot always belong to the same
///    token; eviction keeps them aligned and contiguous;
///  - position IDs are the tokens' original positions and are never renumbered;
///  - slot order is *not* position order after a decode-step eviction (the hole
///    is filled with the last slot, O(head_dim) work): use
///    `Cache::retained_positions()` for the ascending list, or
///    `Cache::restore_position_order()` to sort the slots.
///
/// `T` is the KV element type: `float`, `Eigen::half` or `Eigen::bfloat16`
/// (any trivially copyable type works: rows are moved with `memcpy`).
/// `KVView<T>` is the writable view a `Cache` works on and an engine appends
/// to; `KVView<const T>` is the read-only view attention reads (K, V, position
/// IDs and lengths all `const`; every `KVView<T>` converts to it implicitly),
/// in the style of `Eigen::Map<const …>`. Constness is shallow, as for a
/// pointer or `std::span`: the members that write through the view (`append`)
/// are non-`const` and exist only for a writable view.
/// The view owns nothing; copying it is cheap and aliases the same storage.
template <class T>
struct KVView {
  static_assert(std::is_trivially_copyable<T>::value, "kvevict::KVView: KV element type must be trivially copyable");

  using element_type = T;                               ///< `const U` for a read-only view
  using value_type = std::remove_const_t<T>;            ///< the stored type `U`
  static constexpr bool is_read_only = std::is_const<T>::value;
  using position_type = std::conditional_t<is_read_only, const std::int64_t, std::int64_t>;
  using length_type = std::conditional_t<is_read_only, const std::size_t, std::size_t>;

  T* k = nullptr;                    ///< keys, see layout above
  T* v = nullptr;                    ///< values, same strides as `k`
  position_type* positions = nullptr;///< position IDs, `[kv_head][capacity]`
  length_type* lengths = nullptr;    ///< live slots per KV head, `[kv_head]`
  std::size_t n_kv_heads = 0;        ///< number of KV heads
  std::size_t capacity = 0;          ///< slots per KV head
  std::size_t head_dim = 0;          ///< elements per K or V row
  std::size_t head_stride = 0;       ///< elements between (h, s) and (h + 1, s)
  std::size_t slot_stride = 0;       ///< elements between (h, s) and (h, s + 1)

  /// Builds a view with the default `[kv_head][slot][head_dim]` layout over
  /// caller storage of at least `n_kv_heads * capacity * head_dim` elements
  /// for `k` and `v`, `n_kv_heads * capacity` for `positions` and `n_kv_heads`
  /// for `lengths`. Throws `std::invalid_argument` if `capacity * head_dim` overflows `std::size_t`, and via
  /// `validate()`.
  static KVView contiguous(T* k, T* v, position_type* positions, length_type* lengths, std::size_t n_kv_heads,
                           std::size_t capacity, std::size_t head_dim) {
    KVView view;
    view.k = k;
    view.v = v;
    view.positions = positions;
    view.lengths = lengths;
    view.n_kv_heads = n_kv_heads;
    view.capacity = capacity;
    view.head_dim = head_dim;
    view.head_stride = detail::checked_mul("kvevict::KVView::contiguous", "capacity * head_dim", capacity, head_dim);
    view.slot_stride = head_dim;
    view.validate();
    return view;
  }

  /// The read-only view of the same storage. O(1).
  KVView<const value_type> read_only() const {
    KVView<const value_type> ro;
    ro.k = k;
    ro.v = v;
    ro.positions = positions;
    ro.lengths = lengths;
    ro.n_kv_heads = n_kv_heads;
    ro.capacity = capacity;
    ro.head_dim = head_dim;
    ro.head_stride = head_stride;
    ro.slot_stride = slot_stride;
    return ro;
  }
  /// Implicit conversion of a writable view to the read-only view (`read_only()`).
  template <class U = T, std::enable_if_t<!std::is_const<U>::value, int> = 0>
  operator KVView<const U>() const {  // NOLINT(google-explicit-constructor): like T* -> const T*
    return read_only();
  }

  /// Checks pointers, sizes and that rows of distinct (head, slot) pairs do
  /// not overlap for the two standard layouts. Also checks every
  /// `lengths[h] <= capacity`, and that the storage the fields describe can exist: the
  /// `n_kv_heads · capacity` position IDs in bytes fit `std::size_t`, and K (and V) spanning
  /// `(n_kv_heads − 1) · head_stride + (capacity − 1) · slot_stride + head_dim` elements of `sizeof(T)`
  /// bytes fit `PTRDIFF_MAX` bytes (`detail::checked_mul`: "kvevict::KVView: … overflows std::size_t"),
  /// so that every row offset, and every buffer a cache sizes from these fields, is bounded by the
  /// view's own storage. Throws `std::invalid_argument` naming the field. O(n_kv_heads).
  void validate() const {
    const char* who = "kvevict::KVView";
    detail::require(k != nullptr && v != nullptr, "kvevict::KVView: k and v must be non-null");
    detail::require(positions != nullptr, "kvevict::KVView: positions must be non-null");
    detail::require(lengths != nullptr, "kvevict::KVView: lengths must be non-null");
    detail::require(n_kv_heads >= 1, "kvevict::KVView: n_kv_heads must be >= 1 (got ", n_kv_heads, ")");
    detail::require(capacity >= 1, "kvevict::KVView: capacity must be >= 1 (got ", capacity, ")");
    detail::require(head_dim >= 1, "kvevict::KVView: head_dim must be >= 1 (got ", head_dim, ")");
    detail::require(slot_stride >= head_dim, "kvevict::KVView: slot_stride (", slot_stride,
                    ") must be >= head_dim (", head_dim, ")");
    (void)detail::checked_mul(who, "n_kv_heads * capacity * sizeof(std::int64_t) (position IDs)", n_kv_heads,
                              capacity, sizeof(std::int64_t));
    const std::size_t span = detail::checked_add(
        who, "(n_kv_heads - 1) * head_stride + (capacity - 1) * slot_stride + head_dim (elements of K)",
        detail::checked_mul(who, "(n_kv_heads - 1) * head_stride", n_kv_heads - 1, head_stride),
        detail::checked_add(who, "(capacity - 1) * slot_stride + head_dim",
                            detail::checked_mul(who, "(capacity - 1) * slot_stride", capacity - 1, slot_stride),
                            head_dim));
    const std::size_t bytes = detail::checked_mul(who, "the elements of K * sizeof(T)", span, sizeof(T));
    detail::require(bytes <= static_cast<std::size_t>(PTRDIFF_MAX), who, ": K spans ", span, " elements of ",
                    sizeof(T), " bytes = ", bytes, " bytes, more than PTRDIFF_MAX (no array is that large)");
    // The layouts' bounds in wide arithmetic: a product that overflows std::size_t exceeds any stride.
    const bool head_major = slot_stride <= SIZE_MAX / capacity && head_stride >= capacity * slot_stride;
    const bool slot_major = head_stride >= head_dim && head_stride <= SIZE_MAX / n_kv_heads &&
                            slot_stride >= n_kv_heads * head_stride;
    detail::require(n_kv_heads == 1 || head_major || slot_major, "kvevict::KVView: head_stride (",
                    head_stride, ") and slot_stride (", slot_stride, ") make rows of different heads overlap");
    for (std::size_t h = 0; h < n_kv_heads; ++h)
      detail::require(lengths[h] <= capacity, "kvevict::KVView: lengths[", h, "] = ", lengths[h],
                      " exceeds capacity ", capacity);
  }

  /// K row of (head, slot): `head_dim` contiguous elements at
  /// `k + detail::row_offset(head, slot, head_stride, slot_stride)`. No bounds check.
  T* k_row(std::size_t head, std::size_t slot) const {
    return k + detail::row_offset(head, slot, head_stride, slot_stride);
  }
  /// V row of (head, slot): `head_dim` contiguous elements. No bounds check.
  T* v_row(std::size_t head, std::size_t slot) const {
    return v + detail::row_offset(head, slot, head_stride, slot_stride);
  }
  /// Position IDs of `head`, `[capacity]`; the first `length(head)` are live.
  position_type* head_positions(std::size_t head) const { return positions + head * capacity; }
  /// Live slots of `head`.
  std::size_t length(std::size_t head) const { return lengths[head]; }

  /// Appends one token to every KV head: writes `k_new[h * head_dim ...]` and
  /// `v_new[h * head_dim ...]` (both `[kv_head][head_dim]`, row-major) into slot
  /// `lengths[h]` with position ID `position`, then increments `lengths[h]`.
  /// All-or-nothing: throws `std::length_error` (nothing written) if any head
  /// is full and `std::invalid_argument` if a pointer is null. O(n_kv_heads * head_dim).
  /// Writable views only (not `const`: it writes the storage).
  void append(std::int64_t position, const value_type* k_new, const value_type* v_new) {
    static_assert(!is_read_only, "kvevict::KVView::append: a read-only KVView<const T> cannot be appended to");
    detail::require(k_new != nullptr && v_new != nullptr, "kvevict::KVView::append: k_new and v_new must be non-null");
    for (std::size_t h = 0; h < n_kv_heads; ++h)
      if (lengths[h] >= capacity)
        throw std::length_error(detail::concat("kvevict::KVView::append: KV head ", h, " is full (capacity ",
                                               capacity, ")"));
    for (std::size_t h = 0; h < n_kv_heads; ++h) {
      const std::size_t s = lengths[h];
      std::memcpy(k_row(h, s), k_new + h * head_dim, head_dim * sizeof(T));
      std::memcpy(v_row(h, s), v_new + h * head_dim, head_dim * sizeof(T));
      head_positions(h)[s] = position;
      lengths[h] = s + 1;
    }
  }
};

}  // namespace kvevict
