// paged/paged_kv_view.hpp — a non-owning view of one sequence's KV cache in
// page-table storage (vLLM / FlashInfer layouts).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/hd.hpp"

namespace kvevict {

/// How one page stores its `page_size` slots of `n_kv_heads` rows (FlashInfer names).
enum class PageLayout {
  NHD,  ///< `[num_pages][page_size][n_kv_heads][head_dim]` (vLLM's block layout, FlashInfer NHD)
  HND   ///< `[num_pages][n_kv_heads][page_size][head_dim]` (FlashInfer HND)
};

/// Element offset of the row of KV head `h`, slot `o` of page `p` in a pool of
/// `layout` whose consecutive pages start `page_stride` elements apart (the one
/// formula, also used by the cache's byte-level view):
/// NHD `p · page_stride + (o · n_kv_heads + h) · head_dim`,
/// HND `p · page_stride + (h · page_size + o) · head_dim`.
/// With `page_stride = page_size · n_kv_heads · head_dim` (separate K and V pools)
/// this is NHD `((p · page_size + o) · n_kv_heads + h) · head_dim`. O(1), no bounds check. Shared with
/// the CUDA kernels.
KVEVICT_HD inline std::size_t paged_row_offset(PageLayout layout, std::size_t page_size, std::size_t n_kv_heads,
                                               std::size_t head_dim, std::size_t page_stride, std::size_t p,
                                               std::size_t h, std::size_t o) {
  return p * page_stride + (layout == PageLayout::NHD ? (o * n_kv_heads + h) * head_dim
                                                      : (h * page_size + o) * head_dim);
}

/// `paged_row_offset` for pools whose pages are packed (`page_stride = page_size · n_kv_heads · head_dim`):
/// NHD `((p · page_size + o) · n_kv_heads + h) · head_dim`, HND `((p · n_kv_heads + h) · page_size + o) ·
/// head_dim`. O(1), no bounds check.
KVEVICT_HD inline std::size_t paged_row_offset(PageLayout layout, std::size_t page_size, std::size_t n_kv_heads,
                                               std::size_t head_dim, std::size_t p, std::size_t h, std::size_t o) {
  return paged_row_offset(layout, page_size, n_kv_heads, head_dim, page_size * n_kv_heads * head_dim, p, h, o);
}

/// "NHD" or "HND".
inline const char* page_layout_name(PageLayout layout) { return layout == PageLayout::NHD ? "NHD" : "HND"; }

namespace detail {

/// `b - a` in elements of `T` (signed; any two pointers, compared as addresses).
template <class T>
std::ptrdiff_t element_distance(const T* a, const T* b) {
  const auto ia = reinterpret_cast<std::uintptr_t>(a), ib = reinterpret_cast<std::uintptr_t>(b);
  return ib >= ia ? static_cast<std::ptrdiff_t>((ib - ia) / sizeof(T))
                  : -static_cast<std::ptrdiff_t>((ia - ib) / sizeof(T));
}

/// Whether a K pool and a V pool of `num_pages` pages, `e` elements each and `s` elements apart, share an
/// element: K page `p` covers `[k + p·s, k + p·s + e)`, V page `q` covers `[v + q·s, v + q·s + e)`, so they
/// meet iff `|d + m·s| < e` for `d = v − k` and some `m = q − p` in `[−(num_pages − 1), num_pages − 1]`.
/// `|d + m·s|` is convex in `m`: only the two integers around `−d / s`, clamped to the range, need a look.
/// A pointer difference that is not a whole number of elements counts as overlap when the byte ranges meet.
/// O(1). Needs `num_pages · s · sizeof(T) <= PTRDIFF_MAX` and `e <= s`.
template <class T>
bool paged_pools_overlap(const T* k, const T* v, std::size_t num_pages, std::size_t s, std::size_t e) {
  const auto ik = reinterpret_cast<std::uintptr_t>(k), iv = reinterpret_cast<std::uintptr_t>(v);
  const std::size_t span = num_pages * s * sizeof(T);  // bytes from a pool's first page to past its last
  if ((iv >= ik ? iv - ik : ik - iv) >= span) return false;  // the pools' whole ranges are apart
  const auto d = static_cast<std::ptrdiff_t>(iv) - static_cast<std::ptrdiff_t>(ik);  // bytes, |d| < span
  const auto sb = static_cast<std::ptrdiff_t>(s * sizeof(T)), eb = static_cast<std::ptrdiff_t>(e * sizeof(T));
  const auto last = static_cast<std::ptrdiff_t>(num_pages) - 1;
  std::ptrdiff_t m0 = -d / sb;  // truncates toward 0; m0 - 1, m0, m0 + 1 cover both integers around -d / s
  for (std::ptrdiff_t m = m0 - 1; m <= m0 + 1; ++m) {
    const std::ptrdiff_t mc = m < -last ? -last : (m > last ? last : m);
    const std::ptrdiff_t gap = d + mc * sb;
    if (gap > -eb && gap < eb) return true;
  }
  return false;
}

}  // namespace detail

/// Page id of an unused page-table entry (page ids are `int32`, as in FlashInfer's `indices`).
constexpr std::int32_t kNoPage = -1;

/// Non-owning view of one sequence's KV cache for one layer in paged storage:
/// the layer's K and V page pools (shared by every sequence) plus this
/// sequence's page table, length and position IDs.
///
/// Offsets, in elements of `T`, of the K (and V, same formula on `v`) row of
/// KV head `h` in slot `o` of page `p` (FlashInfer `page.cuh` style), with
/// `E = page_size * n_kv_heads * head_dim` the elements of one page and
/// `S = page_stride()` (`page_stride` if set, else `E`):
///
///     NHD: p * S + (o * n_kv_heads + h) * head_dim      (head_dim contiguous elements)
///     HND: p * S + (h * page_size + o) * head_dim
///
/// Separate K and V pools (vLLM, FlashInfer's `paged_k_cache` / `paged_v_cache`):
/// leave `page_stride` 0, so `S = E`. FlashInfer's combined pool
/// `kv[num_pages][2][page_size][n_kv_heads][head_dim]` (K and V interleaved per
/// page): `k = kv`, `v = kv + E`, `page_stride = 2 * E`. `validate()` rejects K
/// and V pools that share an element (e.g. `v = kv + E` without the stride,
/// which would read the next page's K as V).
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
/// The engine must never put one page in two sequences' tables (prefix sharing
/// by page, copy-on-write): nothing detects it, and an eviction in one sequence
/// would overwrite the other's rows or return its page to the pool. Give each
/// sequence its own copy of a shared prefix.
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
  /// Elements from the start of one page to the next in each pool; 0 (the default) = packed pages,
  /// `page_elements()`. FlashInfer's combined K/V pool: `2 * page_elements()` (see above).
  std::size_t page_stride_elements = 0;

  /// Slots the sequence can hold: `max_pages * page_size`.
  std::size_t capacity() const { return max_pages * page_size; }
  /// Pages the sequence holds: `ceil(*length / page_size)`.
  std::size_t pages_used() const { return (*length + page_size - 1) / page_size; }
  /// Elements of one page of one pool: `page_size * n_kv_heads * head_dim`.
  std::size_t page_elements() const { return page_size * n_kv_heads * head_dim; }
  /// Elements from one page to the next in each pool: `page_stride_elements`, or `page_elements()` if 0.
  std::size_t page_stride() const { return page_stride_elements != 0 ? page_stride_elements : page_elements(); }

  /// Element offset of the row of KV head `h`, slot `o` of page `p` (formulas above). No bounds check.
  std::size_t offset(std::size_t p, std::size_t h, std::size_t o) const {
    return paged_row_offset(layout, page_size, n_kv_heads, head_dim, page_stride(), p, h, o);
  }
  /// K row of KV head `h` at logical slot `s` of the sequence. No bounds check.
  T* k_row(std::size_t h, std::size_t s) const {
    return k + offset(static_cast<std::size_t>(page_table[s / page_size]), h, s % page_size);
  }
  /// V row of KV head `h` at logical slot `s` of the sequence. No bounds check.
  T* v_row(std::size_t h, std::size_t s) const {
    return v + offset(static_cast<std::size_t>(page_table[s / page_size]), h, s % page_size);
  }

  /// Checks pointers, sizes, `*length <= capacity()`, that a page stride holds
  /// a page (`page_stride_elements` 0 or `>= page_elements()`) and that no element
  /// lies in both the K and the V pool; and that the storage the fields describe fits: the
  /// `max_pages · page_size` position IDs in bytes and `page_elements()` (`detail::checked_mul`:
  /// "… overflows std::size_t"), each pool's `num_pages · page stride` elements in bytes (at most
  /// `PTRDIFF_MAX / 2`). Does not read the page table (see
  /// `PagePool::check_table`). Throws `std::invalid_argument` naming the field. O(1).
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
    // The position IDs, `[max_pages * page_size]` int64, and one page of a pool fit std::size_t (bytes).
    (void)detail::checked_mul("kvevict::PagedKVView", "max_pages * page_size * sizeof(std::int64_t) (position IDs)",
                              max_pages, page_size, sizeof(std::int64_t));
    detail::require(*length <= capacity(), "kvevict::PagedKVView: length ", *length, " exceeds capacity ",
                    capacity(), " (max_pages ", max_pages, " * page_size ", page_size, ")");
    const std::size_t e = detail::checked_mul("kvevict::PagedKVView", "page_size * n_kv_heads * head_dim", page_size,
                                              n_kv_heads, head_dim);
    detail::require(page_stride_elements == 0 || page_stride_elements >= e, "kvevict::PagedKVView: "
                    "page_stride_elements (", page_stride_elements, ") must be 0 or at least page_elements() (", e,
                    "): the pages of a pool would overlap");
    const std::size_t s = page_stride();
    constexpr std::size_t kMaxBytes = static_cast<std::size_t>(PTRDIFF_MAX) / 2;  // d + m·s stays in range
    detail::require(s <= kMaxBytes / sizeof(T) / num_pages, "kvevict::PagedKVView: the pool of ", num_pages,
                    " pages of stride ", s, " elements exceeds the address space");
    detail::require(!detail::paged_pools_overlap(k, v, num_pages, s, e), "kvevict::PagedKVView: the K and V "
                    "pools overlap (v - k = ", detail::element_distance(k, v), " elements, page stride ", s,
                    ", page_elements ", e, "); for a combined [num_pages][2][page_size][n_kv_heads][head_dim] "
                    "pool set v = k + page_elements() and page_stride_elements = 2 * page_elements()");
  }
};

}  // namespace kvevict
