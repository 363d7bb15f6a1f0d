// kvevict inside llama.cpp — kvevict_sequences.hpp: several sequences of one llama_context, each within its own budget.
// SPDX-License-Identifier: Apache-2.0
//
// A `Sequences` owns one `Evictor` per sequence (ids 0 .. N − 1 of one llama_context) and is the context's eval
// callback: each evictor reads the rows of its own tokens (its `begin(n, row0)`), its own mask rows (llama.cpp
// masks the other sequences' cells) and keeps its own budget, policy state and cell map. The context's KV cells
// are either one pool (`llama_context_params::kv_unified = true`: a cell one sequence evicts or frees at its end can
// hold any sequence's next token, but llama.cpp attends the whole pool for every token, masking the others') or a
// stream per sequence (`kv_unified = false`: n_ctx / N cells each, a token attends its own); the context needs
// about N · (k + 1) cells (plus one prompt's P − k while it is prefilled, or C with a bounded prefill) instead of
// N · (P + steps).
//
// Protocol: create the context with cb_eval = Sequences::eval_callback, cb_eval_user_data = &seqs,
// n_seq_max >= N, n_ubatch >= the largest batch (a batch must be one ubatch); seqs.attach(ctx, model, kv_unified).
// With a stream each, sequence i's decode token is row 0 of the batch's stream r_i (`at(i).begin(1, 0, r_i)`, the
// batch's sequences in id order, all of them present: llama.cpp splits a batch whose ids are not consecutive). Prefill one sequence at a time (its chunks as rows 0 .. C − 1, then its `end_prompt`), then decode steps of
// one token per live sequence in one llama_batch (sequence i's token as row r_i: `at(i).begin(1, r_i)`), calling
// each `end` after llama_decode; after the prompts and each step, `maybe_compact`. `release(i)` ends a sequence.
// Errors as `Evictor`'s; the callback's are rethrown by `Evictor::end` / `take_callback_error`.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict_llama.hpp"

namespace kvevict_llama {

/// Several sequences of one llama_context, each kept within its own budget by its own `Evictor` (see the file
/// comment for the protocol). The whole context is compacted (`compact`) instead of each sequence, since the
/// sequences share one pool of cells.
class Sequences {
 public:
  /// Evictor `i` serves sequence `i`. Throws `std::invalid_argument` for no evictor or a null one.
  explicit Sequences(std::vector<std::unique_ptr<Evictor>> evictors) : evictors_(std::move(evictors)) {
    if (evictors_.empty()) throw std::invalid_argument("kvevict_llama::Sequences: no sequence");
    for (const auto& e : evictors_)
      if (!e) throw std::invalid_argument("kvevict_llama::Sequences: a null evictor");
    live_.assign(evictors_.size(), true);
  }

  /// Binds evictor `i` to sequence `i` of `ctx` (`Evictor::attach`). `unified`: the context's `kv_unified`, one
  /// pool of cells, compacted as a whole here (each evictor's own compaction off); off, each sequence has its
  /// own stream and compacts itself (`Evictor::compact`), and `maybe_compact` does nothing. Throws what
  /// `Evictor::attach` throws.
  void attach(llama_context* ctx, const llama_model* model, bool unified = true) {
    ctx_ = ctx;
    mem_ = llama_get_memory(ctx);
    unified_ = unified;
    for (std::size_t i = 0; i < evictors_.size(); ++i) {
      evictors_[i]->set_auto_compact(!unified);
      evictors_[i]->attach(ctx, model, static_cast<llama_seq_id>(i));
    }
  }

  /// Number of sequences.
  std::size_t size() const { return evictors_.size(); }
  /// Sequence `i`'s evictor (`std::out_of_range` past the end).
  Evictor& at(std::size_t i) { return *evictors_.at(i); }
  const Evictor& at(std::size_t i) const { return *evictors_.at(i); }
  /// Whether sequence `i` has not been released.
  bool live(std::size_t i) const { return live_.at(i); }

  /// Cells llama.cpp attends over (1 + the highest cell any live sequence holds a position in) and cells held by
  /// all live sequences; 0, 0 when no evictor tracks its cells (flash attention: no mask is read). O(Σ held).
  std::pair<std::size_t, std::size_t> cells() const {
    std::size_t top = 0, held = 0;
    for (std::size_t i = 0; i < evictors_.size(); ++i) {
      if (!live_[i]) continue;
      top = std::max(top, evictors_[i]->attended_cells());
      held += evictors_[i]->held();
    }
    return {top, held};
  }

  /// Compacts when llama.cpp attends `Evictor::compact_slack()` or more cells beyond those held (`cells`), or
  /// always with `force` (after a prompt cut: the cut's holes are known to be many). Returns whether it did.
  bool maybe_compact(bool force = false) {
    if (!unified_) return false;  // each sequence's stream compacts itself
    const auto [top, held] = cells();
    if (!force && (top == 0 || top < held + Evictor::compact_slack())) return false;
    compact();
    return true;
  }

  /// (One pool of cells only.) Packs every sequence's cells to the front of llama.cpp's KV cache, positions and K/V unchanged: the whole
  /// context's state is saved (`llama_state_get_data`; cells in ascending cell order) and restored
  /// (`llama_state_set_data`, which clears the cache and puts the saved cells into cells 0, 1, ... in that
  /// order); then each evictor's cell map moves with them (`Evictor::move_cells`: cell `c` goes to the number of
  /// cells in use below `c`). O(cells in use · n_layer · K/V row bytes), copied twice. Throws
  /// `std::logic_error` if two sequences claim one cell (nothing moved), `std::runtime_error` if llama.cpp does
  /// not save or restore the whole state (after a failed restore the context's KV cache is lost).
  void compact() {
    if (!unified_) throw std::logic_error("kvevict_llama::Sequences::compact: the sequences have a stream each");
    std::vector<std::int64_t> owner;  // cell -> sequence (-1: free)
    for (std::size_t i = 0; i < evictors_.size(); ++i) {
      const std::vector<std::int64_t>& cp = evictors_[i]->cell_map().cells();
      if (owner.size() < cp.size()) owner.resize(cp.size(), -1);
      for (std::size_t c = 0; c < cp.size(); ++c) {
        if (cp[c] < 0) continue;
        if (owner[c] >= 0)
          throw std::logic_error("kvevict_llama::Sequences::compact: cell " + std::to_string(c) +
                                 " is held by sequences " + std::to_string(owner[c]) + " and " + std::to_string(i));
        owner[c] = static_cast<std::int64_t>(i);
      }
    }
    const std::size_t size = llama_state_get_size(ctx_);
    state_.resize(size);
    if (llama_state_get_data(ctx_, state_.data(), size) != size)
      throw std::runtime_error("kvevict_llama: llama_state_get_data did not save the context's " +
                               std::to_string(size) + " bytes; nothing was moved");
    if (llama_state_set_data(ctx_, state_.data(), size) != size)
      throw std::runtime_error("kvevict_llama: llama_state_set_data did not restore the context's " +
                               std::to_string(size) + " bytes after compaction: its KV cache is lost");
    std::vector<std::int64_t> new_cell(owner.size(), -1);
    std::int64_t next = 0;
    for (std::size_t c = 0; c < owner.size(); ++c)
      if (owner[c] >= 0) new_cell[c] = next++;
    for (auto& e : evictors_) {
      e->move_cells(new_cell);
      e->count_compaction();
    }
    ++compactions_;
  }
  /// How often the whole context was compacted.
  std::size_t compactions() const { return compactions_; }

  /// Ends sequence `i`: every cell it holds is freed (`llama_memory_seq_rm(mem, i, -1, -1)`) for the others, and
  /// its evictor stops counting in `cells`. Throws `std::runtime_error` if llama.cpp refuses.
  void release(std::size_t i) {
    if (!live_.at(i)) return;
    if (!llama_memory_seq_rm(mem_, static_cast<llama_seq_id>(i), -1, -1))
      throw std::runtime_error("kvevict_llama: llama_memory_seq_rm refused to free sequence " + std::to_string(i));
    evictors_[i]->forget_cells();
    live_[i] = false;
  }

  /// The callback's work: each evictor sees the tensor; asked, the tensor is wanted if any evictor wants it;
  /// evaluated, the graph goes on if every evictor says so.
  bool on_tensor(ggml_tensor* t, bool ask) {
    bool any = false, all = true;
    for (std::size_t i = 0; i < evictors_.size(); ++i) {
      if (!live_[i]) continue;
      const bool r = evictors_[i]->on_tensor(t, ask);
      any = any || r;
      all = all && r;
    }
    return ask ? any : all;
  }

  /// The `cb_eval` of a llama_context whose `cb_eval_user_data` is a `Sequences*` (as `eval_callback`).
  static bool eval_callback(ggml_tensor* t, bool ask, void* user_data) {
    try {
      return static_cast<Sequences*>(user_data)->on_tensor(t, ask);
    } catch (const std::exception& e) {
      detail::callback_error() = e.what();
      return false;
    }
  }

 private:
  std::vector<std::unique_ptr<Evictor>> evictors_;
  std::vector<bool> live_;
  llama_context* ctx_ = nullptr;
  llama_memory_t mem_ = nullptr;
  bool unified_ = true;
  std::vector<std::uint8_t> state_;
  std::size_t compactions_ = 0;
};

}  // namespace kvevict_llama
