// detail/erased_kv.hpp — a KVView with its element type erased to bytes, so that the
// cache's slot moves are not templated on `T`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"

namespace kvevict {
namespace detail {

/// One address per element type `T`, identifying it without RTTI (`ErasedKV::elem_type`).
template <class T>
struct ElemTag {
  static constexpr char id = 0;
};

/// Byte-level access to a writable `KVView<T>`'s rows: the same storage, the
/// strides in bytes, and the same offset formula (`row_offset`) as `KVView`.
/// Rows are `row_bytes = head_dim · sizeof(T)` bytes, moved with `memcpy`.
/// Non-owning, cheap to copy; aliases the view's storage.
struct ErasedKV {
  unsigned char* k = nullptr;          ///< start of K, `[kv_head][slot]` rows as in the view
  unsigned char* v = nullptr;          ///< start of V, same strides
  std::int64_t* positions = nullptr;   ///< `[kv_head][capacity]` position IDs
  std::size_t* lengths = nullptr;      ///< `[kv_head]` live slots
  std::size_t n_kv_heads = 0, capacity = 0;
  std::size_t row_bytes = 0;           ///< bytes of one K (or V) row
  std::size_t head_stride = 0;         ///< bytes between (h, s) and (h + 1, s)
  std::size_t slot_stride = 0;         ///< bytes between (h, s) and (h, s + 1)
  std::size_t elem_bytes = 0;          ///< `sizeof(T)`
  const void* elem_type = nullptr;     ///< identifies `T` (`&ElemTag<T>::id`): views of one element type only

  /// Erases `view` after `view.validate()` (throws `std::invalid_argument` as it does). O(n_kv_heads).
  template <class T>
  static ErasedKV from(const KVView<T>& view) {
    static_assert(!std::is_const<T>::value, "kvevict: the cache needs a writable KVView<T>, not a KVView<const T>");
    view.validate();
    ErasedKV e;
    e.k = reinterpret_cast<unsigned char*>(view.k);
    e.v = reinterpret_cast<unsigned char*>(view.v);
    e.positions = view.positions;
    e.lengths = view.lengths;
    e.n_kv_heads = view.n_kv_heads;
    e.capacity = view.capacity;
    e.row_bytes = view.head_dim * sizeof(T);
    e.head_stride = view.head_stride * sizeof(T);
    e.slot_stride = view.slot_stride * sizeof(T);
    e.elem_bytes = sizeof(T);
    e.elem_type = &ElemTag<T>::id;
    return e;
  }
  /// K row of (h, s), `row_bytes` bytes. No bounds check.
  unsigned char* k_row(std::size_t h, std::size_t s) const { return k + row_offset(h, s, head_stride, slot_stride); }
  /// V row of (h, s), `row_bytes` bytes. No bounds check.
  unsigned char* v_row(std::size_t h, std::size_t s) const { return v + row_offset(h, s, head_stride, slot_stride); }
  /// Position IDs of head `h`, `[capacity]`.
  std::int64_t* pos(std::size_t h) const { return positions + h * capacity; }
};

/// Every `lengths[h] <= capacity`: the view's lengths are the engine's and may have changed since
/// `KVView::validate` ran at construction; a length past the capacity would make the scorer and the
/// slot moves write past the storage. Throws `std::invalid_argument` naming `who`, the head, the
/// length and the capacity. O(n_kv_heads).
inline void check_lengths(const ErasedKV& kv, const char* who) {
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    require(kv.lengths[h] <= kv.capacity, who, ": the view's lengths[", h, "] = ", kv.lengths[h],
            " exceeds its capacity ", kv.capacity);
}

/// The engine protocol at prefill: every KV head holds exactly `P >= 1` slots
/// with strictly ascending position IDs, identical across heads (lengths within
/// the capacity, `check_lengths`). Throws
/// `std::invalid_argument` naming the head, slot and values. O(n_kv_heads · P).
inline void check_prompt_view(const ErasedKV& kv, std::size_t P) {
  check_lengths(kv, "kvevict::Cache::prefill");
  require(P >= 1, "kvevict::Cache::prefill: prompt_len must be >= 1 (got 0)");
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    require(kv.lengths[h] == P, "kvevict::Cache::prefill: prompt_len = ", P, " but the view's lengths[", h,
            "] = ", kv.lengths[h], " (append the prompt's K/V first)");
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h) {
    const std::int64_t* pos = kv.pos(h);
    for (std::size_t s = 0; s < P; ++s) {
      require(s == 0 || pos[s] > pos[s - 1], "kvevict::Cache::prefill: positions of KV head ", h,
              " must be strictly ascending by slot (slot ", s, " has ", pos[s], ")");
      require(pos[s] == kv.pos(0)[s], "kvevict::Cache::prefill: KV heads 0 and ", h,
              " disagree on the position of slot ", s);
    }
  }
}

/// The engine protocol for a prefill chunk: the cache held `held` tokens per
/// KV head, the engine appended the chunk's `C >= 1` tokens to every head, so
/// `n == held + C == lengths[h]`, and the new slots `[held, n)` carry strictly
/// ascending positions, identical across heads, the first larger than
/// `last_position`. Throws `std::invalid_argument` naming the values. O(n_kv_heads · C).
inline void check_chunk_view(const ErasedKV& kv, std::size_t C, std::size_t n, std::size_t held,
                             std::int64_t last_position) {
  const char* who = "kvevict::Cache::prefill_chunk";
  check_lengths(kv, who);
  require(C >= 1, who, ": chunk_len must be >= 1 (got 0)");
  require(C <= n, who, ": chunk_len = ", C, " exceeds n = ", n, " live slots");  // so held + C cannot wrap to n
  require(n == held + C, who, ": n = ", n, " but the cache holds ", held, " tokens per KV head and the chunk has ", C,
          " (the logits rows must span n = ", held + C, " live slots)");
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    require(kv.lengths[h] == n, who, ": the view's lengths[", h, "] = ", kv.lengths[h], ", expected n = ", n,
            " (append the chunk's K/V to every head first)");
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h) {
    const std::int64_t* pos = kv.pos(h);
    for (std::size_t s = held; s < n; ++s) {
      const std::int64_t before = s == held ? last_position : pos[s - 1];
      require(pos[s] > before, who, ": positions must keep rising: KV head ", h, " slot ", s, " has ", pos[s],
              " after ", before);
      require(pos[s] == kv.pos(0)[s], who, ": KV heads 0 and ", h, " disagree on the position of slot ", s);
    }
  }
}

/// The engine protocol at a decode step: the cache held `held` tokens per KV
/// head, the engine appended one to every head, so `n == held + 1 ==
/// lengths[h]`, and the new slot `n − 1` has the same position on every head,
/// larger than `last_position`. Returns that position. Throws
/// `std::invalid_argument` naming the values and `who` (the calling method). O(n_kv_heads).
inline std::int64_t check_step_view(const ErasedKV& kv, std::size_t n, std::size_t held, std::int64_t last_position,
                                    const char* who = "kvevict::Cache::decode_step") {
  check_lengths(kv, who);
  require(n == held + 1, who, ": n = ", n, " but the cache holds ", held,
          " tokens per KV head (append exactly one token, then pass n = ", held + 1, ")");
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    require(kv.lengths[h] == n, who, ": the view's lengths[", h, "] = ", kv.lengths[h],
            ", expected n = ", n, " (append the new token's K/V to every head first)");
  const std::int64_t new_pos = kv.pos(0)[n - 1];
  require(new_pos > last_position, who, ": new token's position ", new_pos,
          " must be larger than the last one, ", last_position);
  for (std::size_t h = 1; h < kv.n_kv_heads; ++h)
    require(kv.pos(h)[n - 1] == new_pos, who, ": KV head ", h, " has new position ",
            kv.pos(h)[n - 1], ", KV head 0 has ", new_pos);
  return new_pos;
}

/// `check_step_view` for KV heads of different lengths (head-adaptive budgets): KV head `h` held
/// `held[h]` tokens and the engine appended one, so `lengths[h] == held[h] + 1`; `n` (the row stride of
/// the step's logits) must be `max_h lengths[h]`; the new token (slot `lengths[h] − 1`) has the same
/// position on every head, above `last_position`. Returns it. Throws `std::invalid_argument` naming the
/// values. O(n_kv_heads).
inline std::int64_t check_ragged_step_view(const ErasedKV& kv, std::size_t n, const std::size_t* held,
                                           std::int64_t last_position, const char* who) {
  check_lengths(kv, who);
  std::size_t top = 0;
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h) {
    require(kv.lengths[h] == held[h] + 1, who, ": the view's lengths[", h, "] = ", kv.lengths[h],
            ", expected ", held[h] + 1, " (KV head ", h, " holds ", held[h],
            " tokens: append the new token's K/V to every head first)");
    top = std::max(top, kv.lengths[h]);
  }
  require(n == top, who, ": n = ", n, " but the longest KV head holds ", top,
          " slots (with head-adaptive budgets n is the logits' row stride, max_j lengths[j])");
  const std::int64_t new_pos = kv.pos(0)[kv.lengths[0] - 1];
  require(new_pos > last_position, who, ": new token's position ", new_pos, " must be larger than the last one, ",
          last_position);
  for (std::size_t h = 1; h < kv.n_kv_heads; ++h)
    require(kv.pos(h)[kv.lengths[h] - 1] == new_pos, who, ": KV head ", h, " has new position ",
            kv.pos(h)[kv.lengths[h] - 1], ", KV head 0 has ", new_pos);
  return new_pos;
}

}  // namespace detail
}  // namespace kvevict
