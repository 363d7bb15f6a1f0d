// detail/per_head_step.hpp — `kvevict::Cache`'s decode step in parts (begin_decode_step, score_decode_head per KV
// head, end_decode_step): the engine scores each KV head right after its q·K, while its logits are hot; the result is
// `decode_step`'s, bit for bit. A base of `Cache` (cache.hpp) over its eviction paths (detail/head_eviction.hpp).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/erased_kv.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/detail/head_eviction.hpp"
#include "kvevict/detail/slot_table.hpp"

namespace kvevict {
namespace detail {

/// The per-head decode step of `kvevict::Cache` and its state (the step open between `begin_decode_step` and
/// `end_decode_step`); the public contract of each member is documented on it. No allocation after `init_step`.
template <class Score, class Temperature, class Selection>
class PerHeadStep : public HeadEviction<CacheInterface, SlotTable, Score, Temperature, Selection> {
 public:
  using Heads = HeadEviction<CacheInterface, SlotTable, Score, Temperature, Selection>;

  /// The decode step in parts, for an engine that scores each KV head while its logits are still in
  /// cache (issue 36: after the attention has streamed a layer's K and V, a whole layer's logits come
  /// back from DRAM; one KV head's, scored right after its q·K, from L1/L2):
  ///
  ///     begin_decode_step(n);                       // the new token appended to every KV head, as for decode_step
  ///     for each KV head j, in any order, on any thread (distinct j may run concurrently):
  ///       compute logits x_j = [g][n] of j's query heads, then score_decode_head(j, x_j);
  ///     end_decode_step();
  ///
  /// The result is `decode_step(x, n)` with the rows `x_j` concatenated (`[q_head][n]`), bit for bit:
  /// the same kernel adds each row in the same order, and each KV head evicts the same victim. With
  /// per-head selection (`shared_heads = false`) `score_decode_head(j, …)` also finds head `j`'s victim
  /// right after scoring it (its scores and flags are then hot too); with `shared_heads` the layer's one
  /// victim is found from the summed scores at the end. The view is not changed before
  /// `end_decode_step`, which moves the victims' slots (O(n_kv_heads · head_dim)): the engine's attention
  /// may go on reading every head's K and V (the V product of head j, of other heads) while heads are
  /// scored.
  /// Between `begin` and `end` the step is open: `length`, `scores` and `positions` show heads scored
  /// so far, and `prefill`, `prefill_chunk`, `finish_prefill`, `decode_step`, `restore_position_order`
  /// and a second `begin_decode_step` throw `std::invalid_argument` ("… a per-head decode step is open:
  /// score every KV head and call end_decode_step(), or reset()"); `reset` abandons it.
  ///
  /// `begin_decode_step` checks what `decode_step` checks before scoring (prefilled, `n` = previous
  /// length + 1 on every head, the new position the same on every head and above the last, τ_t) and
  /// throws `std::invalid_argument` with the state unchanged; a score without logits (a key score, or
  /// none) scores the new slot here, with its checks. O(n_kv_heads) (+ a key score's O(n_kv_heads ·
  /// head_dim)). Call it on one thread, not concurrently with any other call.
  void begin_decode_step(std::size_t n) override {
    live("begin_decode_step");
    no_open_step("begin_decode_step");
    require(prefilled_, chunking_ ? "kvevict::Cache::begin_decode_step: the chunked prompt is not finished; "
                                            "call finish_prefill() first"
                                          : "kvevict::Cache::begin_decode_step: call prefill() first");
    const std::int64_t new_pos =
        even_lengths() ? check_step_view(kv(), n, held_.front(), last_position_,
                                                 "kvevict::Cache::begin_decode_step")
                       : check_ragged_step_view(kv(), n, held_.data(), last_position_,
                                                        "kvevict::Cache::begin_decode_step");
    const float tau = checked_tau(step_ + 1, "begin_decode_step");
    if constexpr (!Score::kUsesLogits) this->score_step(nullptr, nullptr, n, tau, new_pos);
    // ---- nothing below can throw ----
    for (std::size_t j = 0; j < kv().n_kv_heads; ++j) step_lens_[j] = held_[j] + 1;
    slots_.enter_window_each([&](std::size_t j) { return step_lens_[j] - 1; });  // the victim searches read them
    step_n_ = n;
    step_pos_ = new_pos;
    step_tau_ = tau;
    step_open_ = true;
  }
  /// KV head `j`'s part of the open step: `logits` `[g][n]` (query head `j · g + q` at row `q`, by slot
  /// as the engine's attention reads the view, valid during the call; may be `nullptr` for a score
  /// without logits), `gumbel` optional, same layout (as `decode_step`'s rows). Adds each row's
  /// `softmax((x + ζ) / τ_t)` into head `j`'s scores; with per-head selection and `n > k`, then
  /// finds head `j`'s victim (moved by `end_decode_step`). O(g · n + n) on the calling thread; no
  /// allocation. Throws
  /// `std::invalid_argument`, head `j` and the step unchanged (so the call may be repeated with good
  /// logits), if no step is open, `j >= n_kv_heads`, head `j` was already scored in this step, `logits`
  /// is null when needed, or a value of `x + ζ` is NaN / `+inf` (naming the q_head). Distinct heads may
  /// be scored concurrently; one head is scored by one thread.
  void score_decode_head(std::size_t kv_head, const float* logits, const float* gumbel = nullptr) override {
    live("score_decode_head");
    const std::size_t j = kv_head, n = step_n_;
    require(step_open_, "kvevict::Cache::score_decode_head: no decode step is open; call "
                                "begin_decode_step(n) first");
    require(j < kv().n_kv_heads, "kvevict::Cache::score_decode_head: kv_head ", j,
                    " out of range (n_kv_heads = ", kv().n_kv_heads, ")");
    require(head_done_[j] == 0, "kvevict::Cache::score_decode_head: KV head ", j,
                    " was already scored in this step");
    if constexpr (Score::kUsesLogits) {
      require(logits != nullptr, "kvevict::Cache::score_decode_head: logits must be non-null");
      scorer_.score_step_head(j, logits, gumbel, step_lens_[j], 1.0f / step_tau_,
                              slots_.all_scores(), slots_.capacity(), static_cast<std::uint64_t>(step_pos_),
                              "score_decode_head", n);
    }
    // ---- nothing below can throw ----
    const std::size_t nj = step_lens_[j];
    if (shared_budget_ && !config_.shared_heads && nj > head_k_[j])  // the scores just written are hot; the move
      victims_[j] = selection_.victim(scorer_.ranked(slots_.scores(j), slots_.positions(j), step_pos_, nj, j),
                                      slots_.recent(j), slots_.positions(j), nj);  // waits for end_decode_step
    head_done_[j] = 1;
  }
  /// Closes the open step: if `n > k`, each KV head's victim (with `shared_heads`: the layer's, from the
  /// scores summed over KV heads) leaves it, its slot filled with slot `n − 1`; then the step counts (`step()`, `temperature()` = τ_t). Throws
  /// `std::invalid_argument` (the step stays open) if no step is open, a KV head was not scored
  /// (naming the lowest) or the view's lengths changed since `begin_decode_step` (an append). O(n_kv_heads) (+ O(n_kv_heads · n) for the shared selection); no allocation.
  void end_decode_step() override {
    live("end_decode_step");
    require(step_open_, "kvevict::Cache::end_decode_step: no decode step is open; call "
                                "begin_decode_step(n) first");
    for (std::size_t j = 0; j < kv().n_kv_heads; ++j) {
      require(head_done_[j] != 0, "kvevict::Cache::end_decode_step: KV head ", j,
                      " was not scored (call score_decode_head(", j, ", logits) first)");
      const std::size_t want = step_lens_[j];
      require(kv().lengths[j] == want, "kvevict::Cache::end_decode_step: the view's lengths[", j, "] = ",
                      kv().lengths[j], " changed during the step (begin_decode_step(", step_n_,
                      ")): append nothing between begin_decode_step and end_decode_step");
    }
    // ---- nothing below can throw ----
    const std::size_t n = step_n_;
    last_position_ = step_pos_;
    evict_step(n, /*victims_found=*/true);
    ++step_;
    tau_ = step_tau_;
    step_open_ = false;
    std::fill(head_done_.begin(), head_done_.end(), std::uint8_t{0});
  }
  bool has_per_head_step() const override { return true; }
  /// Whether a per-head decode step is open (between `begin_decode_step` and `end_decode_step`).
  bool decode_step_open() const { return step_open_; }

 protected:
  using Core = typename Heads::Core;
  using Core::config_, Core::slots_, Core::scorer_, Core::selection_, Core::last_position_, Core::step_, Core::tau_,
      Core::prefilled_, Core::kv, Core::checked_tau, Core::live;
  using Heads::held_, Heads::head_k_, Heads::step_lens_, Heads::victims_, Heads::shared_budget_, Heads::evict_step,
      Heads::even_lengths;

  /// Takes the core's arguments (`HeadEviction`, `EvictionCore`). Throws what they throw.
  template <class... CoreArgs>
  explicit PerHeadStep(CoreArgs&&... args) : Heads(std::forward<CoreArgs>(args)...) {}

  /// Allocates the per-head flags of the open step (O(n_kv_heads)). Called by the cache's constructor.
  void init_step() { head_done_.assign(kv().n_kv_heads, 0); }
  /// Abandons an open step (`reset`). O(n_kv_heads). Cannot throw.
  void abandon_step() noexcept {
    step_open_ = false;
    std::fill(head_done_.begin(), head_done_.end(), std::uint8_t{0});
  }
  /// Takes `other`'s life-cycle and open-step state (same n_kv_heads; `Cache::copy_state_from`): a chunked prompt in
  /// progress, and a per-head step open with the heads scored so far. O(n_kv_heads); no allocation, no throw.
  void copy_step_state(const PerHeadStep& other) noexcept {
    chunking_ = other.chunking_;
    step_open_ = other.step_open_;
    step_n_ = other.step_n_;
    step_pos_ = other.step_pos_;
    step_tau_ = other.step_tau_;
    std::copy(other.head_done_.begin(), other.head_done_.end(), head_done_.begin());
  }
  /// Throws `std::invalid_argument` naming `method` while a per-head decode step is open.
  void no_open_step(const char* method) const {
    require(!step_open_, "kvevict::Cache::", method, ": a per-head decode step is open: score every KV "
            "head and call end_decode_step(), or reset()");
  }

  bool chunking_ = false;  // some prompt tokens were scored (the cache's life cycle; named in begin's message)
  // The open per-head decode step (begin_decode_step .. end_decode_step).
  bool step_open_ = false;
  std::size_t step_n_ = 0;
  std::int64_t step_pos_ = 0;
  float step_tau_ = 0.0f;
  std::vector<std::uint8_t> head_done_;  // [kv_head]: scored in the open step
};

}  // namespace detail
}  // namespace kvevict
