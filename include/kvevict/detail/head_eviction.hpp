// detail/head_eviction.hpp — the token eviction paths of `kvevict::Cache` and `kvevict::PagedCache`, in the one
// general case: every KV head holds its own number of tokens and keeps its own budget `k_j`. Uniform budgets
// (`k_j = k`, every head the same length) and AdaKV's head-adaptive ones (head_budgets.hpp) differ only in how the
// layer's budget is shared (`share_budget`); a layer-wide selection (`shared_heads`, and every paged cache, whose
// page slot holds the token of every KV head) keeps every head at one length. The cuts, the decode-step evictions
// and the recent window run the same code for all of them.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvevict/detail/eviction_core.hpp"
#include "kvevict/head_budgets.hpp"

namespace kvevict {
namespace detail {

/// The per-KV-head state and token eviction paths of a cache (the base of `kvevict::Cache`, over `SlotTable`, and
/// of `kvevict::PagedCache`, over `PagedSlotTable`; the caches hold their life cycle and engine protocol). KV head
/// `j` holds `held_[j]` tokens in slots `[0, held_[j])` and, once the layer's budget is shared (`shared_budget_`),
/// keeps at most `head_k_[j]` of them; `n_` is `max_j held_[j]` (PagedCache: for its token unit; its page unit sets
/// `n_` itself, through `PageEvictor`, and leaves this state unused). Uniform budgets share at the end of the prompt
/// (`k` each, known without scores); adaptive ones at the layer's first cut, which needs the scores
/// (`share_budget`). A layer-wide selection (`shared_heads`) keeps every head at one length. `Slots` provides
/// what `EvictionCore` needs plus `positions(j)`, `recent(j)`, `index()`, `compact_all(keep, m)`, `evict_all(victim,
/// n)` and `enter_window_each(slot_of)`; with `Slots::kSlotsPerHead` (every KV head its own slots) also
/// `compact(j, keep, m)` and `evict(j, victim, n)`, the per-head paths. Without it (a paged slot holds every KV
/// head's token) only the layer-wide paths are compiled, and the cache must require `shared_heads`. All memory is
/// allocated by `init_heads`, which the cache's constructor calls; nothing here allocates or throws after it.
template <class Interface, class Slots, class Score, class Temperature, class Selection>
class HeadEviction : public EvictionCore<Interface, Slots, Score, Temperature, Selection> {
 protected:
  using Core = EvictionCore<Interface, Slots, Score, Temperature, Selection>;
  /// Whether the per-head paths apply: every KV head has its own slots and `shared_heads` is false. O(1).
  bool per_head() const noexcept { return Slots::kSlotsPerHead && !config_.shared_heads; }
  using Core::config_, Core::slots_, Core::scorer_, Core::selection_, Core::last_position_, Core::k_, Core::w_,
      Core::n_, Core::kv;

  /// Takes the core's arguments (`EvictionCore`); allocates nothing (`init_heads` does, once the cache checked
  /// its configuration). Throws what `EvictionCore` throws.
  template <class... CoreArgs>
  explicit HeadEviction(CoreArgs&&... args) : Core(std::forward<CoreArgs>(args)...) {}

  /// Allocates the per-head lengths, budgets and victims (O(n_kv_heads)), and for `HeadBudgets::adaptive` the
  /// allocation's scratch (O(n_kv_heads · capacity), the product checked by `checked_mul` before it sizes
  /// anything). Called by the cache's constructor after its checks. Throws `std::invalid_argument` for a product
  /// that overflows, `std::bad_alloc`.
  void init_heads() {
    const std::size_t nkv = kv().n_kv_heads;
    held_.assign(nkv, 0);
    head_k_.assign(nkv, 0);
    step_lens_.assign(nkv, 0);
    victims_.assign(nkv, 0);
    if (config_.head_budgets.is_adaptive()) {
      const std::size_t cells =
          checked_mul(this->name_, "n_kv_heads * capacity (the AdaKV scratch)", nkv, slots_.capacity());
      alloc_scores_.assign(cells, 0.0f);
      alloc_.resize(cells);
    }
  }

  /// Whether every KV head holds the same number of tokens (always, with uniform budgets). O(n_kv_heads).
  bool even_lengths() const noexcept {
    return std::all_of(held_.begin(), held_.end(), [&](std::size_t h) { return h == held_.front(); });
  }

  /// The layer's budget shared among its KV heads into `head_k_` for a cut of `n_` slots (every head holding
  /// them, in position order) to `k` with window `w`. Uniform: `k` each. Adaptive (`n_ > k`): AdaKV's allocation
  /// (`allocate_head_budgets`) over each head's candidates outside its last `w` slots, ranked as the cut ranks
  /// them (`ranks`), floor `floor(α · (k − w))` key tokens, cap `capacity − 1 − w`; then `k_j = w + count_j`.
  /// O(H n log(H n)) adaptive, O(H) uniform. Cannot throw.
  template <class Ranks>
  void share_budget(std::size_t k, std::size_t w, Ranks ranks) noexcept {
    const std::size_t H = kv().n_kv_heads;
    if (!config_.head_budgets.is_adaptive()) {
      std::fill(head_k_.begin(), head_k_.end(), k);
      return;
    }
    const std::size_t cap = slots_.capacity(), n = n_, key_tokens = k - w;
    const auto floor = static_cast<std::size_t>(
        std::floor(static_cast<double>(config_.head_budgets.floor) * static_cast<double>(key_tokens)));
    for (std::size_t j = 0; j < H; ++j) std::copy_n(ranks(j), n - w, alloc_scores_.data() + j * cap);
    allocate_head_budgets(alloc_scores_.data(), cap, H, n - w, key_tokens, std::min(floor, key_tokens), cap - 1 - w,
                          alloc_.data(), head_k_.data());
    for (std::size_t j = 0; j < H; ++j) head_k_[j] += w;
  }

  /// Whether the layer's budget can be shared only at its first cut (it needs the scores): adaptive budgets.
  bool shares_at_first_cut() const noexcept { return config_.head_budgets.is_adaptive(); }

  /// Cuts slots `[0, n_)` (every KV head holding them) to budget `k`, window `w`: shares the budget
  /// (`share_budget`), then keeps `selection.prefill_keep`'s `min(k_j, n_)` tokens of each KV head (one
  /// selection for the layer, from the scores summed over heads, with `shared_heads`), ranked by the prefill rule
  /// (`at_prefill`: `cut_scores`, e.g. SnapKV's pooling) or the decode rule (`ranked`), compacted in position
  /// order. Sets `held_` and `n_`; returns `n_`. O(H n log n + H n · head_dim). Cannot throw.
  std::size_t cut(std::size_t k, std::size_t w, bool at_prefill) noexcept {
    const std::size_t H = kv().n_kv_heads, n = n_;
    auto ranks = [&](std::size_t j) {
      return at_prefill ? scorer_.cut_scores(slots_.scores(j), slots_.positions(j), last_position_, n, j)
                        : scorer_.ranked(slots_.scores(j), slots_.positions(j), last_position_, n, j);
    };
    share_budget(k, w, ranks);
    if (!per_head()) {
      const float* sum = this->summed_scores(n);
      const std::size_t m = selection_.prefill_keep(scorer_.cut_scores(sum, slots_.positions(0), last_position_, n, 0),
                                                    n, k, w, slots_.index());
      slots_.compact_all(slots_.index(), m);
      std::fill(held_.begin(), held_.end(), m);
    } else if constexpr (Slots::kSlotsPerHead) {
      for (std::size_t j = 0; j < H; ++j) {
        held_[j] = selection_.prefill_keep(ranks(j), n, head_k_[j], w, slots_.index());
        slots_.compact(j, slots_.index(), held_[j]);
      }
    }
    n_ = *std::max_element(held_.begin(), held_.end());
    return n_;
  }

  /// A new recent window of `w` tokens: the last `c = min(w, min_j held_[j])` slots of every KV head, oldest
  /// first. O(n_kv_heads · (capacity + w)). Cannot throw.
  void enter_recent(std::size_t w) noexcept {
    slots_.reset_window(w);
    const std::size_t c = std::min(w, *std::min_element(held_.begin(), held_.end()));
    for (std::size_t i = 0; i < c; ++i) slots_.enter_window_each([&](std::size_t j) { return held_[j] - c + i; });
  }

  /// The end of a decode step whose new token entered every KV head (`n` slots at most; the per-head path reads
  /// head `j`'s `step_lens_[j]`, which the caller set, and the layer-wide path and the first cut read `n` alone,
  /// every head holding `n`): before the budget is shared (adaptive, the prompt fitted) and `n > k`, the layer's
  /// first cut with the decode rule and a new recent window; a layer-wide selection evicts its one victim from
  /// every head when `n > k` (`evict_shared`); otherwise each KV head over its budget (`step_lens_[j] > k_j`)
  /// evicts one token (`victims_found`: the victims `score_decode_head` found, else searched here, per KV head on
  /// the executor). Then `held_` and `n_`. O(n_kv_heads · n). Cannot throw.
  void evict_step(std::size_t n, bool victims_found) noexcept {
    if (!shared_budget_) {
      std::fill(held_.begin(), held_.end(), n);
      n_ = n;
      if (n > k_) {
        cut(k_, w_, /*at_prefill=*/false);
        shared_budget_ = true;
        enter_recent(w_);
      }
      return;
    }
    if (!per_head()) {
      if (n > k_) evict_shared(n);
      n_ = n > k_ ? n - 1 : n;
      std::fill(held_.begin(), held_.end(), n_);
      return;
    }
    if constexpr (Slots::kSlotsPerHead) evict_heads(victims_found);
  }

  /// `evict_step`'s per-head path (`per_head()`, `Slots::kSlotsPerHead` only): each KV head over its budget
  /// (`step_lens_[j] > head_k_[j]`) evicts one token. O(n_kv_heads · n), O(n_kv_heads · head_dim) with
  /// `victims_found`. Cannot throw.
  void evict_heads(bool victims_found) noexcept {
    const std::size_t H = kv().n_kv_heads;
    std::size_t first_over = 0;  // the first KV head over its budget (H: none), found without reading the rest
    while (first_over < H && step_lens_[first_over] <= head_k_[first_over]) ++first_over;
    const bool over = first_over < H;
    auto head = [&](std::size_t j) noexcept {
      const std::size_t nj = step_lens_[j];
      if (nj > head_k_[j]) {
        const std::size_t v =
            victims_found ? victims_[j]
                          : selection_.victim(scorer_.ranked(slots_.scores(j), slots_.positions(j), last_position_, nj, j),
                                              slots_.recent(j), slots_.positions(j), nj);
        slots_.evict(j, v, nj);
        held_[j] = nj - 1;
      } else {
        held_[j] = nj;
      }
    };
    if (!over || victims_found) {
      for (std::size_t j = 0; j < H; ++j) head(j);
    } else {  // per KV head, on the executor: head j's search and move touch only head j
      for_each_head(scorer_.executor(), H, head);
    }
    n_ = *std::max_element(held_.begin(), held_.end());
  }

  /// A layer-wide selection's decode-step eviction over `n` slots: the layer's one victim, from the scores summed
  /// over KV heads, leaves every head. Cannot throw.
  void evict_shared(std::size_t n) noexcept {
    const float* sum = this->summed_scores(n);
    const std::size_t victim = selection_.victim(scorer_.ranked(sum, slots_.positions(0), last_position_, n, 0),
                                                 slots_.recent(0), slots_.positions(0), n);
    slots_.evict_all(victim, n);
  }

  /// Takes `other`'s per-KV-head state (same n_kv_heads): the lengths, the budgets and whether they are shared, the
  /// open step's lengths and victims. O(n_kv_heads); no allocation, no throw.
  void copy_heads_state(const HeadEviction& other) noexcept {
    shared_budget_ = other.shared_budget_;
    std::copy(other.held_.begin(), other.held_.end(), held_.begin());
    std::copy(other.head_k_.begin(), other.head_k_.end(), head_k_.begin());
    std::copy(other.step_lens_.begin(), other.step_lens_.end(), step_lens_.begin());
    std::copy(other.victims_.begin(), other.victims_.end(), victims_.begin());
  }

  /// The state of a new sequence: no tokens, no shared budget. O(n_kv_heads).
  void reset_heads() noexcept {
    std::fill(held_.begin(), held_.end(), std::size_t{0});
    std::fill(head_k_.begin(), head_k_.end(), std::size_t{0});
    shared_budget_ = false;
  }

  bool shared_budget_ = false;            // head_k_ holds each KV head's budget (set at the layer's budget sharing)
  std::vector<std::size_t> held_;         // [kv_head]: tokens each head holds after the last step (n_ = the max)
  std::vector<std::size_t> head_k_;       // [kv_head]: k_j, each head's budget once shared
  std::vector<std::size_t> step_lens_;    // [kv_head]: the lengths of the open / current decode step
  std::vector<std::size_t> victims_;      // [kv_head]: per-head selection's victim, found when the head is scored
  std::vector<float> alloc_scores_;       // [kv_head][capacity]: AdaKV's candidates' ranks (adaptive only)
  std::vector<HeadCandidate> alloc_;      // [kv_head · capacity]: AdaKV's sort (adaptive only)
};

}  // namespace detail
}  // namespace kvevict
