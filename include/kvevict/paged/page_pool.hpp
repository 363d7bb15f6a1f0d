// paged/page_pool.hpp — the pool of page ids shared by every sequence of a layer.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/paged/paged_kv_view.hpp"

namespace kvevict {

/// The pool of page ids `[0, num_pages)` of one layer's K/V page storage,
/// shared by every sequence (continuous batching: pages freed by one sequence
/// are reused by the next). It owns no K/V bytes, only the bookkeeping: an
/// in-use flag per page and either its own free list (LIFO: the most recently
/// freed page is handed out first; a fresh pool hands out 0, 1, 2, ...) or the
/// engine's `allocate` / `release` callbacks.
///
/// Guarantees: a page is handed out to at most one owner at a time; a page is
/// never freed twice (`release` of a free page throws, `release_list` frees a
/// page named twice once); `used_pages()` is exact at every moment. All
/// storage is allocated in the constructor: `allocate`, `release`,
/// `release_list` and `append` never allocate (the callbacks may, if the engine's do).
///
/// Errors: `std::length_error` when no page is free (nothing changed);
/// `std::invalid_argument` naming the argument for a bad page id, a page freed
/// while free, or a callback that returns a page in use (nothing changed).
/// Thread safety: none; one pool per layer, used by one thread. A `PagedCache`
/// keeps a pointer to its pool: do not move a pool that caches still use.
///
/// The `release` callback must not throw (docs/guarantees.md): a cache returns
/// pages after its own state is updated, where no error can be undone, so the
/// pool calls `release` from a `noexcept` function and an exception escaping it
/// ends the program (`std::terminate`) rather than leaving a sequence in a state
/// no call can leave. A callable whose type says it can throw (not `noexcept`)
/// is rejected at compile time; a `std::function` cannot say, so it is checked
/// only at run time. `allocate` may throw: the pool and the caller are then unchanged.
class PagePool {
 public:
  /// Engine callback handing out a free page id, or `kNoPage` when it has none.
  using AllocateFn = std::function<std::int32_t()>;
  /// Engine callback taking a page id back; must not throw (see above).
  using ReleaseFn = std::function<void(std::int32_t)>;

  /// A pool with its own free list over `num_pages` pages, all free.
  /// Throws `std::invalid_argument` if `num_pages` is 0 or above 2^31 − 1. O(num_pages).
  explicit PagePool(std::size_t num_pages) : num_pages_(check_count(num_pages)), in_use_(num_pages, 0) {
    free_.reserve(num_pages);
    for (std::size_t i = num_pages; i-- > 0;) free_.push_back(static_cast<std::int32_t>(i));
  }
  /// A pool whose pages come from the engine: `allocate()` returns a free page
  /// id in `[0, num_pages)` or `kNoPage`, `release(id)` takes one back and must
  /// not throw. The pool still checks every id and keeps the in-use flags. Throws
  /// `std::invalid_argument` for a bad `num_pages` or an empty callback.
  PagePool(std::size_t num_pages, AllocateFn allocate, ReleaseFn release)
      : num_pages_(check_count(num_pages)),
        in_use_(num_pages, 0),
        allocate_fn_(std::move(allocate)),
        release_fn_(std::move(release)) {
    detail::require(static_cast<bool>(allocate_fn_) && static_cast<bool>(release_fn_),
                    "kvevict::PagePool: allocate and release callbacks must both be non-empty");
  }
  /// As above, for a `release` callable of any type other than `ReleaseFn` (a lambda, a function
  /// object): it must be `noexcept`-invocable with a page id, checked at compile time.
  template <class Release, std::enable_if_t<!std::is_same<std::decay_t<Release>, ReleaseFn>::value &&
                                                std::is_invocable<Release&, std::int32_t>::value,
                                            int> = 0>
  PagePool(std::size_t num_pages, AllocateFn allocate, Release release)
      : PagePool(num_pages, std::move(allocate), ReleaseFn(std::move(release))) {
    static_assert(std::is_nothrow_invocable<Release&, std::int32_t>::value,
                  "kvevict: PagePool's release callback must be `noexcept` (a page cannot be given back half way)");
  }

  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;
  PagePool(PagePool&&) = default;
  PagePool& operator=(PagePool&&) = default;

  /// Takes a free page and marks it in use. Throws `std::length_error` if none
  /// is free (pool unchanged), `std::invalid_argument` if a callback returns an
  /// id out of range or already in use. O(1).
  std::int32_t allocate() {
    std::int32_t page = kNoPage;
    if (allocate_fn_) {
      page = allocate_fn_();
      if (page == kNoPage)
        throw std::length_error("kvevict::PagePool::allocate: the allocate callback has no free page");
      detail::require(page >= 0 && static_cast<std::size_t>(page) < num_pages_,
                      "kvevict::PagePool::allocate: the allocate callback returned page ", page,
                      ", outside [0, ", num_pages_, ")");
      detail::require(in_use_[static_cast<std::size_t>(page)] == 0,
                      "kvevict::PagePool::allocate: the allocate callback returned page ", page,
                      ", which is already in use");
    } else {
      if (free_.empty())
        throw std::length_error(detail::concat("kvevict::PagePool::allocate: all ", num_pages_, " pages are in use"));
      page = free_.back();
      free_.pop_back();
    }
    in_use_[static_cast<std::size_t>(page)] = 1;
    ++used_;
    return page;
  }

  /// Returns `page` to the pool. Throws `std::invalid_argument` (nothing
  /// changed) if it is out of range or not in use (a double free). O(1).
  void release(std::int32_t page) {
    check_in_use(page, "release", "page");
    free_one(page);
  }

  /// Returns every page of `pages[0, count)`; a page named more than once is
  /// freed once. All-or-nothing: throws `std::invalid_argument` (nothing
  /// changed) if `pages` is null while `count > 0` or an entry is out of range
  /// or not in use. Returns the number of pages freed. O(count).
  std::size_t release_list(const std::int32_t* pages, std::size_t count) {
    if (count == 0) return 0;
    detail::require(pages != nullptr, "kvevict::PagePool::release_list: pages must be non-null");
    for (std::size_t i = 0; i < count; ++i) check_in_use(pages[i], "release_list", "pages[i]");
    std::size_t freed = 0;
    for (std::size_t i = 0; i < count; ++i)
      if (in_use_[static_cast<std::size_t>(pages[i])] != 0) {
        free_one(pages[i]);
        ++freed;
      }
    return freed;
  }

  /// Checks `seq`'s page table against the pool: `seq.validate()`, its pools
  /// match this pool's size, and each of the first `seq.pages_used()` entries
  /// is in range, in use and listed once. Throws `std::invalid_argument` naming
  /// the entry. O(pages_used) (a scratch mark per page, cleared again).
  template <class T>
  void check_table(const PagedKVView<T>& seq, const char* who) const {
    seq.validate();
    detail::require(seq.num_pages == num_pages_, who, ": the view has num_pages = ", seq.num_pages,
                    " but the pool has ", num_pages_);
    const std::size_t used = seq.pages_used();
    std::size_t bad = used;
    const char* why = "";
    for (std::size_t i = 0; i < used && bad == used; ++i) {
      const std::int32_t p = seq.page_table[i];
      if (p < 0 || static_cast<std::size_t>(p) >= num_pages_) {
        bad = i;
        why = " is outside the pool";
      } else if (in_use_[static_cast<std::size_t>(p)] == 0) {
        bad = i;
        why = " is not allocated from the pool";
      } else if (in_use_[static_cast<std::size_t>(p)] == 2) {
        bad = i;
        why = " is listed twice in the page table";
      } else {
        in_use_[static_cast<std::size_t>(p)] = 2;
      }
    }
    for (std::size_t i = 0; i < used; ++i) {  // clear the marks
      const std::int32_t p = seq.page_table[i];
      if (p >= 0 && static_cast<std::size_t>(p) < num_pages_ && in_use_[static_cast<std::size_t>(p)] == 2)
        in_use_[static_cast<std::size_t>(p)] = 1;
    }
    detail::require(bad == used, who, ": page_table[", bad, "] = ", bad < used ? seq.page_table[bad] : 0, why);
  }

  /// Appends one token to the sequence of `seq`: writes `k_new[h * head_dim ...]`
  /// and `v_new[h * head_dim ...]` (both `[kv_head][head_dim]`) into slot
  /// `*seq.length` (its last page, or a page taken from the pool when the last
  /// one is full or there is none) with position ID `position`, then increments
  /// `*seq.length`. All-or-nothing: throws `std::length_error` if the sequence
  /// is at `capacity()` or the pool is empty, `std::invalid_argument` for a
  /// null row or an invalid view; nothing is changed then. O(n_kv_heads · head_dim).
  template <class T>
  void append(const PagedKVView<T>& seq, std::int64_t position, const T* k_new, const T* v_new) {
    detail::require(k_new != nullptr && v_new != nullptr,
                    "kvevict::PagePool::append: k_new and v_new must be non-null");
    seq.validate();
    detail::require(seq.num_pages == num_pages_, "kvevict::PagePool::append: the view has num_pages = ",
                    seq.num_pages, " but the pool has ", num_pages_);
    const std::size_t s = *seq.length;
    if (s >= seq.capacity())
      throw std::length_error(detail::concat("kvevict::PagePool::append: the sequence is full (capacity ",
                                             seq.capacity(), " slots = max_pages ", seq.max_pages, " * page_size ",
                                             seq.page_size, ")"));
    if (s % seq.page_size == 0) {
      seq.page_table[s / seq.page_size] = allocate();  // throws std::length_error, nothing changed
    } else {
      const std::int32_t last = seq.page_table[s / seq.page_size];
      detail::require(last >= 0 && static_cast<std::size_t>(last) < num_pages_ &&
                          in_use_[static_cast<std::size_t>(last)] != 0,
                      "kvevict::PagePool::append: the sequence's last page, page_table[", s / seq.page_size,
                      "] = ", last, ", is not a page in use");
    }
    for (std::size_t h = 0; h < seq.n_kv_heads; ++h) {
      std::memcpy(seq.k_row(h, s), k_new + h * seq.head_dim, seq.head_dim * sizeof(T));
      std::memcpy(seq.v_row(h, s), v_new + h * seq.head_dim, seq.head_dim * sizeof(T));
    }
    seq.positions[s] = position;
    *seq.length = s + 1;
  }

  /// Ends a sequence: returns every page of its table's first `pages_used()`
  /// entries (a page listed twice is freed once), sets them to `kNoPage` and
  /// `*seq.length = 0`. Entries that are not pages in use are an error
  /// (`std::invalid_argument`, nothing changed). Returns the pages freed. O(pages).
  template <class T>
  std::size_t release_sequence(const PagedKVView<T>& seq) {
    seq.validate();
    const std::size_t used = seq.pages_used();
    const std::size_t freed = release_list(seq.page_table, used);
    for (std::size_t i = 0; i < used; ++i) seq.page_table[i] = kNoPage;
    *seq.length = 0;
    return freed;
  }

  /// Pages of the pool.
  std::size_t num_pages() const { return num_pages_; }
  /// Pages handed out and not yet returned.
  std::size_t used_pages() const { return used_; }
  /// Pages that can still be handed out (own free list; with callbacks: `num_pages − used_pages`).
  std::size_t free_pages() const { return num_pages_ - used_; }
  /// Pages returned to the pool since construction.
  std::size_t pages_released() const { return released_; }
  /// Whether `page` is handed out. Throws `std::invalid_argument` if out of range.
  bool in_use(std::int32_t page) const {
    detail::require(page >= 0 && static_cast<std::size_t>(page) < num_pages_, "kvevict::PagePool::in_use: page ",
                    page, " is outside [0, ", num_pages_, ")");
    return in_use_[static_cast<std::size_t>(page)] != 0;
  }

 private:
  static std::size_t check_count(std::size_t n) {
    detail::require(n >= 1 && n <= 0x7fffffffu, "kvevict::PagePool: num_pages must be in [1, 2^31 - 1] (got ", n,
                    ")");
    return n;
  }
  void check_in_use(std::int32_t page, const char* who, const char* arg) const {
    detail::require(page >= 0 && static_cast<std::size_t>(page) < num_pages_, "kvevict::PagePool::", who, ": ", arg,
                    " = ", page, " is outside [0, ", num_pages_, ")");
    detail::require(in_use_[static_cast<std::size_t>(page)] != 0, "kvevict::PagePool::", who, ": ", arg, " = ",
                    page, " is not in use (freed twice?)");
  }
  // The engine's release, where a throw cannot be undone: `noexcept`, so a throwing callback ends
  // the program (std::terminate) instead of leaving pool and caches disagreeing.
  static void call_release(const ReleaseFn& release, std::int32_t page) noexcept { release(page); }
  void free_one(std::int32_t page) {
    in_use_[static_cast<std::size_t>(page)] = 0;
    --used_;
    ++released_;
    if (release_fn_)
      call_release(release_fn_, page);
    else
      free_.push_back(page);  // capacity num_pages reserved: never allocates
  }

  std::size_t num_pages_;
  mutable std::vector<std::uint8_t> in_use_;  // 0 free, 1 in use (2: scratch mark inside check_table)
  std::vector<std::int32_t> free_;            // own free list (LIFO), empty with callbacks
  AllocateFn allocate_fn_;
  ReleaseFn release_fn_;
  std::size_t used_ = 0;
  std::size_t released_ = 0;
};

}  // namespace kvevict
