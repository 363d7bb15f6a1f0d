// detail/slot_table.hpp — the per-slot state of a cache (K row, V row, position ID in
// the engine's view; score and recent-window flag here), and the one primitive
// that moves a slot with all five together.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "kvevict/detail/erased_kv.hpp"
#include "kvevict/detail/recent_flags.hpp"

namespace kvevict {
namespace detail {

/// Permutes slots `[0, n)` into ascending order of `pos` (distinct values) by
/// cycle following through one stashed slot: `move(from, to)` copies a slot's
/// whole state (and must move `pos` with it), `stash(s)` / `unstash(s)` save a
/// slot and put it back. `index` is scratch of `n` entries. Shared by the
/// contiguous and the paged slot tables. O(n log n) compares + O(n) moves; no allocation.
template <class Move, class Stash, class Unstash>
void sort_slots_by_position(const std::int64_t* pos, std::size_t n, std::size_t* index, Move move, Stash stash,
                            Unstash unstash) {
  std::iota(index, index + n, std::size_t{0});
  std::sort(index, index + n, [pos](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
  for (std::size_t c = 0; c < n; ++c) {  // index[c] = slot whose token belongs at c
    if (index[c] == c) continue;
    stash(c);
    std::size_t cur = c;
    for (std::size_t src = index[cur]; src != c; cur = src, src = index[cur]) {
      move(src, cur);
      index[cur] = cur;
    }
    unstash(cur);
    index[cur] = cur;
  }
}

/// Everything a cache keeps per (KV head, slot), aligned with the view's rows:
/// the view's K row, V row and position ID, plus the cache's score (float) and
/// recent-window flag (`1` = the token is one of the `w` most recently entered),
/// both `[kv_head][capacity]`. Every change of slot goes through `move`, so the
/// five never fall out of step.
///
/// The recent window has one representation, the per-slot flags of
/// `RecentFlags` (one row per KV head; what the selection's `victim` reads).
/// All memory is allocated by the constructor; no member allocates after.
class SlotTable {
 public:
  /// Every KV head has its own slots (its own length, positions, recent flags): the per-head paths of
  /// `HeadEviction` apply (detail/head_eviction.hpp).
  static constexpr bool kSlotsPerHead = true;

  SlotTable() = default;
  /// Allocates scores, flags and the window index for `kv` (O(n_kv_heads · capacity)).
  explicit SlotTable(const ErasedKV& kv)
      : kv_(kv),
        scores_(kv.n_kv_heads * kv.capacity, 0.0f),
        window_(kv.n_kv_heads, kv.capacity),
        index_(kv.capacity, 0),
        stash_(2 * kv.row_bytes, 0) {}

  const ErasedKV& kv() const { return kv_; }
  std::size_t capacity() const { return kv_.capacity; }
  /// Scores of head `h`, `[capacity]`, by slot.
  float* scores(std::size_t h) { return scores_.data() + h * kv_.capacity; }
  const float* scores(std::size_t h) const { return scores_.data() + h * kv_.capacity; }
  /// All scores, `[kv_head][capacity]`.
  float* all_scores() { return scores_.data(); }
  /// Recent-window flags of head `h`, `[capacity]`, by slot.
  const std::uint8_t* recent(std::size_t h) const { return window_.row(h); }
  /// Position IDs of head `h` (the view's), `[capacity]`.
  std::int64_t* positions(std::size_t h) const { return kv_.pos(h); }
  /// Scratch of `capacity` indices (selection output, sort permutation).
  std::size_t* index() { return index_.data(); }

  /// The slot primitive: copies slot `from` of head `h` onto slot `to` — K row, V
  /// row, position ID, score and recent flag. O(head_dim). No bounds check.
  void move(std::size_t h, std::size_t from, std::size_t to) {
    std::memcpy(kv_.k_row(h, to), kv_.k_row(h, from), kv_.row_bytes);
    std::memcpy(kv_.v_row(h, to), kv_.v_row(h, from), kv_.row_bytes);
    kv_.pos(h)[to] = kv_.pos(h)[from];
    scores(h)[to] = scores(h)[from];
    window_.flag(h, to) = window_.flag(h, from);
  }

  /// Prefill: keeps slots `keep[0, m)` (strictly ascending) of head `h` as slots
  /// `[0, m)`, in order; the view's length becomes `m`. O(m · head_dim).
  void compact(std::size_t h, const std::size_t* keep, std::size_t m) {
    for (std::size_t c = 0; c < m; ++c)
      if (keep[c] != c) move(h, keep[c], c);  // keep[c] >= c: forward moves never clobber a kept slot
    kv_.lengths[h] = m;
  }
  /// `compact(h, keep, m)` on every KV head, head 0 first: one selection kept by the whole layer
  /// (`shared_heads`). O(n_kv_heads · m · head_dim).
  void compact_all(const std::size_t* keep, std::size_t m) {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) compact(h, keep, m);
  }
  /// `evict(h, victim, n)` on every KV head, head 0 first: the layer's one victim leaves every head
  /// (`shared_heads`). O(n_kv_heads · head_dim).
  void evict_all(std::size_t victim, std::size_t n) {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) evict(h, victim, n);
  }
  /// Decode-step eviction: fills slot `victim` of head `h` with slot `n − 1` (the
  /// newest token, the window's newest entry when `w > 0`); the length becomes
  /// `n − 1`. O(head_dim).
  void evict(std::size_t h, std::size_t victim, std::size_t n) {
    const std::size_t last = n - 1;
    if (victim != last) {
      move(h, last, victim);
      window_.newest_moved(h, last, victim);
    }
    kv_.lengths[h] = last;
  }
  /// Sorts slots `[0, n)` of head `h` into ascending position order (cycle
  /// following through one stashed slot; every step is a `move`), then re-indexes
  /// the window from the flags. O(n log n + n · head_dim); allocates nothing.
  void sort_by_position(std::size_t h, std::size_t n) {
    sort_slots_by_position(
        kv_.pos(h), n, index_.data(), [this, h](std::size_t from, std::size_t to) { move(h, from, to); },
        [this, h](std::size_t s) { stash(h, s); }, [this, h](std::size_t s) { unstash(h, s); });
    window_.reindex(h, n);
  }

  /// Takes `other`'s live slots into this table's own view: for every KV head `h`, the K and V rows, positions and
  /// scores of slots `[0, other's lengths[h])`, the length, and the recent window (`RecentFlags::copy_from`).
  /// Preconditions (checked by the caller, detail/state_copy.hpp): the same `n_kv_heads`, element type and
  /// `row_bytes`, other's lengths within both capacities, views that do not overlap (rows at one address, the
  /// same storage, are left alone). O(n_kv_heads · (n · head_dim + capacity)); no allocation.
  void copy_from(const SlotTable& other) noexcept {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) {
      const std::size_t n = other.kv_.lengths[h];
      for (std::size_t s = 0; s < n; ++s) {
        if (kv_.k_row(h, s) != other.kv_.k_row(h, s))
          std::memcpy(kv_.k_row(h, s), other.kv_.k_row(h, s), kv_.row_bytes);
        if (kv_.v_row(h, s) != other.kv_.v_row(h, s))
          std::memcpy(kv_.v_row(h, s), other.kv_.v_row(h, s), kv_.row_bytes);
      }
      if (kv_.pos(h) != other.kv_.pos(h)) std::copy_n(other.kv_.pos(h), n, kv_.pos(h));
      std::copy_n(other.scores(h), n, scores(h));
      kv_.lengths[h] = n;
    }
    window_.copy_from(other.window_);
  }

  /// Starts a window of `w` tokens, empty, on every head. O(n_kv_heads · capacity).
  void reset_window(std::size_t w) { window_.reset(w); }
  /// Enters the token at `slot` (the same slot on every head) into the window;
  /// once the window holds `w` tokens, the oldest leaves it. O(n_kv_heads).
  void enter_window(std::size_t slot) { window_.enter(slot); }
  /// Enters head `h`'s token at `slot_of(h)` into the window, on every head (KV heads of different
  /// lengths). O(n_kv_heads).
  template <class SlotOf>
  void enter_window_each(SlotOf slot_of) { window_.enter_each(slot_of); }
  /// Zeroes every score. O(n_kv_heads · capacity).
  void clear_scores() { std::fill(scores_.begin(), scores_.end(), 0.0f); }

 private:
  void stash(std::size_t h, std::size_t s) {
    std::memcpy(stash_.data(), kv_.k_row(h, s), kv_.row_bytes);
    std::memcpy(stash_.data() + kv_.row_bytes, kv_.v_row(h, s), kv_.row_bytes);
    stash_pos_ = kv_.pos(h)[s];
    stash_score_ = scores(h)[s];
    stash_flag_ = window_.flag(h, s);
  }
  void unstash(std::size_t h, std::size_t s) {
    std::memcpy(kv_.k_row(h, s), stash_.data(), kv_.row_bytes);
    std::memcpy(kv_.v_row(h, s), stash_.data() + kv_.row_bytes, kv_.row_bytes);
    kv_.pos(h)[s] = stash_pos_;
    scores(h)[s] = stash_score_;
    window_.flag(h, s) = stash_flag_;
  }

  ErasedKV kv_;
  std::vector<float> scores_;          // [kv_head][capacity]
  RecentFlags window_;                 // [kv_head][capacity] recent-window flags
  std::vector<std::size_t> index_;     // [capacity] scratch
  std::vector<unsigned char> stash_;   // [2][row_bytes]: one K and one V row
  std::int64_t stash_pos_ = 0;
  float stash_score_ = 0.0f;
  std::uint8_t stash_flag_ = 0;
};

}  // namespace detail
}  // namespace kvevict
