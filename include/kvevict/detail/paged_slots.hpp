// detail/paged_slots.hpp — the per-slot state of a paged cache (K and V rows of
// every KV head and the position ID in the engine's pages; per-head scores and
// the recent flag here) and the one primitive that moves a logical slot with all
// of them together: the paged counterpart of detail/slot_table.hpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvevict/detail/recent_flags.hpp"
#include "kvevict/detail/slot_table.hpp"  // sort_slots_by_position
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_kv_view.hpp"

namespace kvevict {
namespace detail {

/// Byte-level access to a `PagedKVView<T>` (the same storage; rows of
/// `row_bytes = head_dim · sizeof(T)` bytes at `paged_row_offset`, pages `page_stride`
/// elements apart), so that the
/// paged cache is not templated on the element type. Non-owning, cheap to copy.
struct ErasedPagedKV {
  unsigned char* k = nullptr;         ///< K page pool
  unsigned char* v = nullptr;         ///< V page pool
  std::int32_t* table = nullptr;      ///< `[max_pages]` page table
  std::size_t* length = nullptr;      ///< the sequence's length
  std::int64_t* positions = nullptr;  ///< `[max_pages · page_size]` position IDs, by logical slot
  std::size_t num_pages = 0, page_size = 0, n_kv_heads = 0, head_dim = 0, max_pages = 0, elem = 0, row_bytes = 0;
  std::size_t page_stride = 0;        ///< elements from one page to the next (`PagedKVView::page_stride()`)
  PageLayout layout = PageLayout::NHD;

  /// Erases `view` after `view.validate()` (throws `std::invalid_argument` as it does).
  template <class T>
  static ErasedPagedKV from(const PagedKVView<T>& view) {
    view.validate();
    ErasedPagedKV e;
    e.k = reinterpret_cast<unsigned char*>(view.k);
    e.v = reinterpret_cast<unsigned char*>(view.v);
    e.table = view.page_table;
    e.length = view.length;
    e.positions = view.positions;
    e.num_pages = view.num_pages;
    e.page_size = view.page_size;
    e.n_kv_heads = view.n_kv_heads;
    e.head_dim = view.head_dim;
    e.max_pages = view.max_pages;
    e.elem = sizeof(T);
    e.row_bytes = view.head_dim * sizeof(T);
    e.layout = view.layout;
    e.page_stride = view.page_stride();
    return e;
  }
  /// A typed view over the same memory (for `PagePool` calls, which read only the table and length):
  /// `head_dim` and the page stride are counted in elements of `T` (bytes for `unsigned char`), so that
  /// the view's own checks see the pools as they are. `T` must divide a row (`row_bytes % sizeof(T) == 0`).
  template <class T>
  PagedKVView<T> typed() const {
    PagedKVView<T> t;
    t.k = reinterpret_cast<T*>(k);
    t.v = reinterpret_cast<T*>(v);
    t.num_pages = num_pages;
    t.page_size = page_size;
    t.n_kv_heads = n_kv_heads;
    t.head_dim = row_bytes / sizeof(T);
    t.layout = layout;
    t.page_table = table;
    t.max_pages = max_pages;
    t.length = length;
    t.positions = positions;
    t.page_stride_elements = page_stride * elem / sizeof(T);
    return t;
  }
  /// Tokens the sequence can hold, `max_pages · page_size`.
  std::size_t capacity() const { return max_pages * page_size; }
  /// K row of KV head `h` at logical slot `s`, `row_bytes` bytes. No bounds check.
  unsigned char* k_row(std::size_t h, std::size_t s) const { return k + offset_bytes(h, s); }
  /// V row of KV head `h` at logical slot `s`. No bounds check.
  unsigned char* v_row(std::size_t h, std::size_t s) const { return v + offset_bytes(h, s); }

 private:
  std::size_t offset_bytes(std::size_t h, std::size_t s) const {
    const std::size_t p = static_cast<std::size_t>(table[s / page_size]);
    return paged_row_offset(layout, page_size, n_kv_heads, head_dim, page_stride, p, h, s % page_size) * elem;
  }
};

/// Everything a paged cache keeps per logical slot: the K and V rows of every
/// KV head and the position ID (the engine's pages), the score of every KV head
/// (`[kv_head][capacity]` floats) and the recent-window flag (one row of
/// `RecentFlags`: all KV heads share one selection). Every change of slot goes
/// through `move`. All memory is allocated by the constructor.
class PagedSlotTable {
 public:
  /// A slot holds the token of every KV head (one length, one row of positions and recent flags): only the
  /// layer-wide paths of `HeadEviction` apply (detail/head_eviction.hpp), and the per-head ones are not compiled.
  static constexpr bool kSlotsPerHead = false;

  PagedSlotTable() = default;
  /// Allocates scores, flags and scratch for `kv` (O(n_kv_heads · capacity)). Throws `std::invalid_argument`
  /// "kvevict::PagedCache: n_kv_heads * capacity … overflows std::size_t" before any allocation when the scores'
  /// count does (the view's checks bound `capacity` and the pools, not their product).
  explicit PagedSlotTable(const ErasedPagedKV& kv)
      : kv_(kv),
        scores_(checked_mul("kvevict::PagedCache", "n_kv_heads * capacity (max_pages * page_size) score floats",
                            kv.n_kv_heads, kv.capacity()),
                0.0f),
        window_(1, kv.capacity()),
        index_(kv.capacity(), 0),
        stash_(2 * kv.n_kv_heads * kv.row_bytes, 0),
        stash_scores_(kv.n_kv_heads, 0.0f) {}

  const ErasedPagedKV& kv() const { return kv_; }
  std::size_t capacity() const { return kv_.capacity(); }
  /// Scores of KV head `h`, `[capacity]`, by logical slot.
  float* scores(std::size_t h) { return scores_.data() + h * capacity(); }
  const float* scores(std::size_t h) const { return scores_.data() + h * capacity(); }
  /// All scores, `[kv_head][capacity]`.
  float* all_scores() { return scores_.data(); }
  /// Recent-window flags, `[capacity]`, by logical slot: the same row for every KV head `h` (not checked).
  const std::uint8_t* recent(std::size_t /*h*/) const { return window_.row(0); }
  /// Position IDs by logical slot, `[capacity]` (the view's): the same row for every KV head `h` (not checked).
  std::int64_t* positions(std::size_t /*h*/) const { return kv_.positions; }
  /// Scratch of `capacity` indices (selection output).
  std::size_t* index() { return index_.data(); }

  /// The slot primitive: copies logical slot `from` onto `to` — K and V rows of
  /// every KV head, position ID, every head's score and the recent flag.
  /// O(n_kv_heads · head_dim). No bounds check.
  void move(std::size_t from, std::size_t to) {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) {
      std::memcpy(kv_.k_row(h, to), kv_.k_row(h, from), kv_.row_bytes);
      std::memcpy(kv_.v_row(h, to), kv_.v_row(h, from), kv_.row_bytes);
      scores(h)[to] = scores(h)[from];
    }
    kv_.positions[to] = kv_.positions[from];
    window_.flag(0, to) = window_.flag(0, from);
  }
  /// Keeps logical slots `keep[0, m)` (strictly ascending) as slots `[0, m)`, in
  /// order. The length and the pages are the caller's (`release_tail`). O(m · n_kv_heads · head_dim).
  void compact_all(const std::size_t* keep, std::size_t m) {
    for (std::size_t c = 0; c < m; ++c)
      if (keep[c] != c) move(keep[c], c);  // keep[c] >= c: forward moves never clobber a kept slot
  }
  /// Decode-step eviction: fills logical slot `victim` with slot `n − 1` (the
  /// newest token). The length and the pages are the caller's. O(n_kv_heads · head_dim).
  void evict_all(std::size_t victim, std::size_t n) {
    const std::size_t last = n - 1;
    if (victim == last) return;
    move(last, victim);
    window_.newest_moved(0, last, victim);
  }
  /// Sorts logical slots `[0, n)` into ascending position order (every step a
  /// `move`; pages stay where they are), then re-indexes the window.
  /// O(n log n + n · n_kv_heads · head_dim); allocates nothing.
  void sort_by_position(std::size_t n) {
    sort_slots_by_position(
        kv_.positions, n, index_.data(), [this](std::size_t from, std::size_t to) { move(from, to); },
        [this](std::size_t s) { stash(s); }, [this](std::size_t s) { unstash(s); });
    window_.reindex(0, n);
  }
  /// The sequence shrinks from `before` to `after` tokens: returns the pages
  /// that no longer hold a token to `pool` (table entries set to `kNoPage`) and
  /// sets the length to `after`. Returns the number of pages released. The
  /// pages must be in use (validated by the caller). O(pages released).
  std::size_t release_tail(PagePool& pool, std::size_t before, std::size_t after) {
    const std::size_t ps = kv_.page_size;
    std::size_t released = 0;
    for (std::size_t i = (after + ps - 1) / ps; i < (before + ps - 1) / ps; ++i, ++released) {
      pool.release(kv_.table[i]);
      kv_.table[i] = kNoPage;
    }
    *kv_.length = after;
    return released;
  }

  /// Starts a window of `w` tokens, empty. O(capacity).
  void reset_window(std::size_t w) { window_.reset(w); }
  /// Enters the token at logical slot `slot` into the window. O(1).
  void enter_window(std::size_t slot) { window_.enter(slot); }
  /// Enters the token at logical slot `slot_of(0)` into the window (the one row; `HeadEviction`'s call). O(1).
  template <class SlotOf>
  void enter_window_each(SlotOf slot_of) { window_.enter_each(slot_of); }
  /// Zeroes every score. O(n_kv_heads · capacity).
  void clear_scores() { std::fill(scores_.begin(), scores_.end(), 0.0f); }

 private:
  void stash(std::size_t s) {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) {
      std::memcpy(stash_.data() + (2 * h) * kv_.row_bytes, kv_.k_row(h, s), kv_.row_bytes);
      std::memcpy(stash_.data() + (2 * h + 1) * kv_.row_bytes, kv_.v_row(h, s), kv_.row_bytes);
      stash_scores_[h] = scores(h)[s];
    }
    stash_pos_ = kv_.positions[s];
    stash_flag_ = window_.flag(0, s);
  }
  void unstash(std::size_t s) {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) {
      std::memcpy(kv_.k_row(h, s), stash_.data() + (2 * h) * kv_.row_bytes, kv_.row_bytes);
      std::memcpy(kv_.v_row(h, s), stash_.data() + (2 * h + 1) * kv_.row_bytes, kv_.row_bytes);
      scores(h)[s] = stash_scores_[h];
    }
    kv_.positions[s] = stash_pos_;
    window_.flag(0, s) = stash_flag_;
  }

  ErasedPagedKV kv_;
  std::vector<float> scores_;         // [kv_head][capacity], by logical slot
  RecentFlags window_;                // [1][capacity] recent-window flags
  std::vector<std::size_t> index_;    // [capacity] scratch
  std::vector<unsigned char> stash_;  // [kv_head][2][row_bytes]: one slot's K and V rows
  std::vector<float> stash_scores_;   // [kv_head]
  std::int64_t stash_pos_ = 0;
  std::uint8_t stash_flag_ = 0;
};

}  // namespace detail
}  // namespace kvevict
