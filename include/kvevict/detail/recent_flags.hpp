// detail/recent_flags.hpp — the recent window `w` of a cache as per-slot flags (the one
// representation, what a selection's `victim` reads), shared by the contiguous
// slot table (one row of flags per KV head) and the paged one (one row per sequence).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvevict {
namespace detail {

/// The recent window of a cache: `rows` rows of `capacity` flags, `[row][slot]`
/// (`1` = the token at that slot is one of the `w` most recently entered). Every
/// row sees the same tokens enter (the same slot on every row). A ring of the
/// window's slots per row, oldest first, only indexes the flags so that the token
/// leaving the window is found in O(1); it is rebuilt from the flags after a sort.
/// The owner moves a flag with its slot (`flag(r, to) = flag(r, from)`). All
/// memory is allocated by the constructor; no member allocates after.
class RecentFlags {
 public:
  RecentFlags() = default;
  /// Allocates `rows · capacity` flags and ring entries.
  RecentFlags(std::size_t rows, std::size_t capacity)
      : rows_(rows), capacity_(capacity), flags_(rows * capacity, 0), ring_(rows * capacity, 0) {}

  /// The flags of row `r`, `[capacity]`, by slot.
  const std::uint8_t* row(std::size_t r) const { return flags_.data() + r * capacity_; }
  /// The flag of (row `r`, slot `s`). No bounds check.
  std::uint8_t& flag(std::size_t r, std::size_t s) { return flags_[r * capacity_ + s]; }
  /// `w`, the window's size.
  std::size_t size() const { return size_; }

  /// Starts a window of `w <= capacity` tokens, empty, on every row. O(rows · capacity).
  void reset(std::size_t w) {
    std::fill(flags_.begin(), flags_.end(), std::uint8_t{0});
    size_ = w;
    count_ = next_ = 0;
  }
  /// Enters the token at `slot` (the same slot on every row) into the window;
  /// once the window holds `w` tokens, the oldest leaves it. O(rows).
  void enter(std::size_t slot) {
    if (size_ == 0) return;
    for (std::size_t r = 0; r < rows_; ++r) {
      std::uint8_t* flags = flags_.data() + r * capacity_;
      std::size_t* slots = ring(r);
      if (count_ == size_) flags[slots[next_]] = 0;
      slots[next_] = slot;
      flags[slot] = 1;
    }
    next_ = (next_ + 1) % size_;
    if (count_ < size_) ++count_;
  }
  /// `enter` with a slot per row (KV heads of different lengths): row `r`'s token is at `slot_of(r)`. The
  /// same bookkeeping as `enter` (every row's window holds the same tokens). O(rows).
  template <class SlotOf>
  void enter_each(SlotOf slot_of) {
    if (size_ == 0) return;
    for (std::size_t r = 0; r < rows_; ++r) {
      std::uint8_t* flags = flags_.data() + r * capacity_;
      std::size_t* slots = ring(r);
      const std::size_t slot = slot_of(r);
      if (count_ == size_) flags[slots[next_]] = 0;
      slots[next_] = slot;
      flags[slot] = 1;
    }
    next_ = (next_ + 1) % size_;
    if (count_ < size_) ++count_;
  }
  /// Decode-step eviction on row `r`: the newest token moved from slot `last`
  /// to slot `victim` (the owner has already moved its flag); clears `last`'s
  /// flag and re-points the window's newest entry. Nothing if `last` was not in
  /// the window. O(1).
  void newest_moved(std::size_t r, std::size_t last, std::size_t victim) {
    if (flag(r, last) == 0) return;
    flag(r, last) = 0;
    ring(r)[(next_ + size_ - 1) % size_] = victim;  // `last` entered the window most recently
  }
  /// Takes `other`'s window (same `rows`; its capacity may differ, its window's slots fitting this one's): its
  /// size, its flags on slots `[0, min(capacities))` (0 beyond), its ring. O(rows · capacity); no allocation.
  void copy_from(const RecentFlags& other) noexcept {
    const std::size_t c = std::min(capacity_, other.capacity_);
    for (std::size_t r = 0; r < rows_; ++r) {
      std::uint8_t* flags = flags_.data() + r * capacity_;
      std::copy_n(other.flags_.data() + r * other.capacity_, c, flags);
      std::fill(flags + c, flags + capacity_, std::uint8_t{0});
      std::copy_n(other.ring_.data() + r * other.capacity_, std::min(c, other.size_), ring(r));
    }
    size_ = other.size_, count_ = other.count_, next_ = other.next_;
  }
  /// After the slots `[0, n)` of row `r` were permuted into position order (flags
  /// moved with them): the flagged slots, in slot order, are the window oldest
  /// first. O(n).
  void reindex(std::size_t r, std::size_t n) {
    if (size_ == 0) return;
    std::size_t* slots = ring(r);
    std::size_t c = 0;
    for (std::size_t s = 0; s < n; ++s)
      if (flag(r, s) != 0) slots[(next_ + size_ - count_ + c++) % size_] = s;
  }

 private:
  std::size_t* ring(std::size_t r) { return ring_.data() + r * capacity_; }

  std::size_t rows_ = 0, capacity_ = 0;
  std::vector<std::uint8_t> flags_;  // [row][capacity]: 1 = in the recent window
  std::vector<std::size_t> ring_;    // [row][capacity]: the window's slots, ring order
  std::size_t size_ = 0, count_ = 0, next_ = 0;  // w; entries held; next ring index
};

}  // namespace detail
}  // namespace kvevict
