// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// paged/paged_kv_view.hpp — a non-owning view of one sequence's KV cache in
// page-table storage (vLLM / FlashInfer layouts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvevict/core/check.hpp"
#include "kvevict/core/hd.hpp"

namespace kvevict {

/// How one page stores its `page_size` slots of `n_kv_heads` rows (FlashInfer names).
enum class PageLayout {
  NHD,  ///< `[num_pages][page_size][n_kv_heads][head_dim]` (vLLM's block layout, FlashInfer NHD)
  HND   ///< `[num_pages][n_kv_heads][page_size][head_dim]` (FlashInfer HND)
};

/// Element offset of the row of KV head `h`, slot `o` of page `p` in a pool of
/// `layout` (the one formula, also used by the cache's byte-level view):
/// NHD `((p · page_size + o) · n_kv_heads + h) · head_dim`, HND `((p · n_kv_heads
/// + h) · page_size + o) · head_dim`. O(1), no bounds check. Shared with the CUDA kernels.
KVEVICT_HD inline std::size_t paged_row_offset(PageLayout layout, std::size_t page_size, std::size_t n_kv_heads,
                                    std::size_t head_dim, std::size_t p, std::size_t h, std::size_t o) {
  return layout == PageLayout::NHD ? ((p * page_size + o) * n_kv_heads + h) * head_dim
                                   : ((p * n_kv_heads + h) * page_size + o) * head_dim;
}

/// "NHD" or "HND".
inline const char* page_layout_name(PageLayout layout) { return layout == PageLayout::NHD ? "NHD" : "HND"; }

/// Page id of an unused page-table entry (page ids are `int32`, as in FlashInfer's `indices`).
constexpr std::int32_t kNoPage = -1;

/// Non-owning view of one sequence's KV cache for one layer in paged storage:
/// the layer's K and V page pools (shared by every sequence) plus this
/// sequence's page table, length and position IDs.
///
/// Offsets, in elements of `T`, of the K (and V, same formula on `v`) row of
/// KV head `h` in slot `o` of page `p` (FlashInfer `page.cuh` style):
///
///     NHD: ((p * page_size + o) * n_kv_heads + h) * head_dim      (head_dim contiguous elements)
///     HND: ((p * n_kv_heads + h) * page_size + o) * head_dim
///
/// The sequence's logical slot `s` (0 = first retained token) lives in page
/// `page_table[s / page_size]` at offset `o = s % page_size`; its position ID
/// is `positions[s]` (int64, one per slot, shared by every KV head). Live
/// slots are `[0, *length)`; the table's first `pages_used() =
/// ceil(*length / page_size)` entries are live, the rest are `kNoPage` or
/// stale. Every page but the last in the table is full.
///
/// Invariants kept by every kvevict operation (the view is plain data, the
/// invariants are the contract): the K row, V row, position ID (and the
/// cache's score) of one logical slot belong to the same token; position IDs
/// are never renumbered; a page appears at most once in a table and in at most
/// one sequence's table of a pool; a page that leaves a table goes back to the
/// pool at once and its table entry is overwritten with `kNoPage`.
///
/// `T` is the KV element type: `float`, `Eigen::half`, `Eigen::bfloat16` (any
/// trivially copyable type; rows are moved with `memcpy`). Copying the view is
/// cheap and aliases the same storage.
template <class T>
struct PagedKVView {
  static_assert(std::is_trivially_copyable<T>::value, "KV element type must be trivially copyable");

  T* k = nullptr;                     ///< K page pool, `num_pages` pages, layout above
  T* v = nullptr;                     ///< V page pool, same layout as `k`
  std::size_t num_pages = 0;          ///< pages in each pool
  std::size_t page_size = 0;          ///< slots (tokens) per page
  std::size_t n_kv_heads = 0;         ///< KV heads
  std::size_t head_dim = 0;           ///< elements per K or V row
  PageLayout layout = PageLayout::NHD;
  std::int32_t* page_table = nullptr; ///< `[max_pages]` page ids of this sequence, in order
  std::size_t max_pages = 0;          ///< entries of `page_table`: the sequence's capacity in pages
  std::size_t* length = nullptr;      ///< live slots (tokens) of the sequence
  std::int64_t* positions = nullptr;  ///< `[max_pages * page_size]` position IDs by logical slot

  /// Slots the sequence can hold: `max_pages * page_size`.
  std::size_t capacity() const { return max_pages * page_size; }
  /// Pages the sequence holds: `ceil(*length / page_size)`.
  std::size_t pages_used() const { return (*length + page_size - 1) / page_size; }
  /// Elements of one page of one pool: `page_size * n_kv_heads * head_dim`.
  std::size_t page_elements() const { return page_size * n_kv_heads * head_dim; }

  /// Element offset of the row of KV head `h`, slot `o` of page `p` (formulas above). No bounds check.
  std::size_t offset(std::size_t p, std::size_t h, std::size_t o) const {
    return paged_row_offset(layout, page_size, n_kv_heads, head_dim, p, h, o);
  }
  /// K row of KV head `h` at logical slot `s` of the sequence. No bounds check.
  T* k_row(std::size_t h, std::size_t s) const {
    return k + offset(static_cast<std::size_t>(page_table[s / page_size]), h, s % page_size);
  }
  /// V row of KV head `h` at logical slot `s` of the sequence. No bounds check.
  T* v_row(std::size_t h, std::size_t s) const {
    return v + offset(static_cast<std::size_t>(page_table[s / page_size]), h, s % page_size);
  }

  /// Checks pointers, sizes and `*length <= capacity()`. Does not read the
  /// page table (see `PagePool::check_table`). Throws `std::invalid_argument`
  /// naming the field. O(1).
  void validate() const {
    detail::require(k != nullptr && v != nullptr, "kvevict::PagedKVView: k and v must be non-null");
    detail::require(page_table != nullptr, "kvevict::PagedKVView: page_table must be non-null");
    detail::require(length != nullptr, "kvevict::PagedKVView: length must be non-null");
    detail::require(positions != nullptr, "kvevict::PagedKVView: positions must be non-null");
    detail::require(num_pages >= 1, "kvevict::PagedKVView: num_pages must be >= 1 (got ", num_pages, ")");
    detail::require(num_pages <= 0x7fffffffu, "kvevict::PagedKVView: num_pages (", num_pages,
                    ") must fit an int32 page id");
    detail::require(page_size >= 1, "kvevict::PagedKVView: page_size must be >= 1 (got ", page_size, ")");
    detail::require(n_kv_heads >= 1, "kvevict::PagedKVView: n_kv_heads must be >= 1 (got ", n_kv_heads, ")");
    detail::require(head_dim >= 1, "kvevict::PagedKVView: head_dim must be >= 1 (got ", head_dim, ")");
    detail::require(max_pages >= 1, "kvevict::PagedKVView: max_pages must be >= 1 (got ", max_pages, ")");
    detail::require(layout == PageLayout::NHD || layout == PageLayout::HND,
                    "kvevict::PagedKVView: layout must be NHD or HND (got ", static_cast<int>(layout), ")");
    detail::require(*length <= capacity(), "kvevict::PagedKVView: length ", *length, " exceeds capacity ",
                    capacity(), " (max_pages ", max_pages, " * page_size ", page_size, ")");
  }
};

}  // namespace kvevict
