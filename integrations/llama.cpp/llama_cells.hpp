// kvevict inside llama.cpp — llama_cells.hpp: which llama.cpp KV cell holds which position of a sequence, read
// from the attention masks llama.cpp builds and checked against them at every batch.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvevict_llama {

/// One sequence's map between positions and llama.cpp's KV cells. llama.cpp puts each token into a cell of its
/// choosing and may reuse a freed one; the mask row of the batch's token r shows exactly one column that the
/// row before it (or the cells already known) did not: that is its cell. `read` checks every row against the
/// map (every known cell visible, exactly one new column), so a reused cell is found, never assumed. Cells of
/// other sequences are masked in this sequence's rows and stay unknown to it. Errors are `std::runtime_error`
/// "kvevict_llama: ..." naming the cell and position.
class CellMap {
 public:
  /// Positions 0 .. `capacity` − 1 can be mapped; no cell is known. O(capacity).
  void reset(std::size_t capacity) {
    cell_pos_.clear();
    prev_pos_.clear();
    pos_cell_.assign(capacity, -1);
  }

  /// Reads the mask rows `row0 .. row0 + rows − 1` of stream `stream` (`mask` `[n_kv][n_rows][1][n_stream]`, F32: 0
  /// or a finite bias = visible, -inf = masked; one stream per sequence with `kv_unified` off, else one) of the
  /// batch's tokens at positions `first .. first + rows − 1`: each row must show every known
  /// cell and exactly one new one, which becomes that position's cell. O(rows · n_kv). Throws
  /// `std::runtime_error` (map unchanged for the rows before the failing one) if the mask is not F32, has too
  /// few rows, hides a known cell or shows other than one new cell.
  void read(const ggml_tensor* mask, std::size_t row0, std::size_t rows, std::size_t first, std::size_t stream = 0) {
    if (mask->type != GGML_TYPE_F32) fail("the attention mask is not F32 (flash attention must be off)");
    const std::size_t n_kv = static_cast<std::size_t>(mask->ne[0]);
    if (static_cast<std::size_t>(mask->ne[1]) < row0 + rows)
      fail("the attention mask has " + std::to_string(mask->ne[1]) + " rows for the sequence's rows " +
           std::to_string(row0) + " .. " + std::to_string(row0 + rows - 1) +
           " (the batch must be one ubatch: batch <= n_ubatch)");
    if (stream >= static_cast<std::size_t>(mask->ne[3]))
      fail("the attention mask has " + std::to_string(mask->ne[3]) + " streams; the sequence's is " +
           std::to_string(stream));
    if (first + rows > pos_cell_.size())
      fail("positions up to " + std::to_string(first + rows - 1) + " exceed the map's capacity " +
           std::to_string(pos_cell_.size()));
    if (cell_pos_.size() < n_kv) cell_pos_.resize(n_kv, -1);
    if (prev_pos_.size() < n_kv) prev_pos_.resize(n_kv, -1);
    auto visible = [&](std::size_t r, std::size_t c) {
      const float v = *reinterpret_cast<const float*>(static_cast<const char*>(mask->data) + c * mask->nb[0] +
                                                       (row0 + r) * mask->nb[1] + stream * mask->nb[3]);
      return v > -std::numeric_limits<float>::infinity();
    };
    std::size_t known = 0;
    for (std::size_t c = 0; c < cell_pos_.size(); ++c) known += cell_pos_[c] >= 0;
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t seen = 0, fresh = 0, cell = 0;
      for (std::size_t c = 0; c < n_kv; ++c) {
        if (!visible(r, c)) {
          if (cell_pos_[c] >= 0)
            fail("cell " + std::to_string(c) + " (position " + std::to_string(cell_pos_[c]) +
                 ") is masked for position " + std::to_string(first + r));
          continue;
        }
        ++seen;
        if (cell_pos_[c] < 0) {
          ++fresh;
          cell = c;
        }
      }
      if (fresh != 1 || seen != known + 1)
        fail("position " + std::to_string(first + r) + " sees " + std::to_string(seen) + " cells, " +
             std::to_string(fresh) + " of them new; expected " + std::to_string(known) + " known + 1 new");
      const std::size_t pos = first + r;
      if (prev_pos_[cell] >= 0) ++reused_;
      cell_pos_[cell] = static_cast<std::int64_t>(pos);
      prev_pos_[cell] = static_cast<std::int64_t>(pos);
      pos_cell_[pos] = static_cast<std::int64_t>(cell);
      ++known;
      last_visible_ = seen;
      max_visible_ = std::max(max_visible_, seen);
    }
  }

  /// Whether any mask was read (not with flash attention, which builds no mask for the callback).
  bool tracked() const { return !cell_pos_.empty(); }
  /// The cell of position `p` (-1: not held, or not tracked). O(1).
  std::int64_t cell_of(std::size_t p) const { return p < pos_cell_.size() ? pos_cell_[p] : -1; }
  /// The position each cell holds (-1: none of this sequence's).
  const std::vector<std::int64_t>& cells() const { return cell_pos_; }
  /// Position `p` left llama.cpp's memory: its cell is free. O(1).
  void drop(std::size_t p) {
    const std::int64_t cell = cell_of(p);
    if (cell >= 0) cell_pos_[static_cast<std::size_t>(cell)] = -1;
    if (p < pos_cell_.size()) pos_cell_[p] = -1;
  }

  /// The sequence's cells were packed to the front in their order (`Evictor::compact`): the i-th lowest held
  /// cell is now cell i. O(cells).
  void pack() {
    std::vector<std::int64_t> new_cell(cell_pos_.size(), -1);
    std::int64_t next = 0;
    for (std::size_t c = 0; c < cell_pos_.size(); ++c)
      if (cell_pos_[c] >= 0) new_cell[c] = next++;
    move(new_cell);
  }
  /// Cell `c` moved to `new_cell[c]` (the whole context compacted: `Sequences::compact`), for every cell this
  /// sequence holds; the reuse history restarts from the new layout. Throws `std::logic_error` (nothing changed)
  /// if a held cell has no new cell. O(cells).
  void move(const std::vector<std::int64_t>& new_cell) {
    for (std::size_t c = 0; c < cell_pos_.size(); ++c)
      if (cell_pos_[c] >= 0 && (c >= new_cell.size() || new_cell[c] < 0))
        throw std::logic_error("kvevict_llama::CellMap::move: cell " + std::to_string(c) + " (position " +
                               std::to_string(cell_pos_[c]) + ") has no new cell");
    std::vector<std::int64_t> moved(std::max(cell_pos_.size(), new_cell.size()), -1);
    for (std::size_t c = 0; c < cell_pos_.size(); ++c) {
      if (cell_pos_[c] < 0) continue;
      const auto to = static_cast<std::size_t>(new_cell[c]);
      moved[to] = cell_pos_[c];
      pos_cell_[static_cast<std::size_t>(cell_pos_[c])] = new_cell[c];
    }
    cell_pos_ = moved;
    prev_pos_ = moved;
  }
  /// The sequence's cells were freed (`Sequences::release`): no cell holds any of its positions. O(cells).
  void forget() {
    std::fill(cell_pos_.begin(), cell_pos_.end(), -1);
    std::fill(pos_cell_.begin(), pos_cell_.end(), -1);
  }

  /// 1 + the highest cell holding one of `positions[0, n)` (0 for none): llama.cpp attends the cells below it.
  /// O(n).
  std::size_t top(const std::int64_t* positions, std::size_t n) const {
    std::int64_t t = -1;
    for (std::size_t s = 0; s < n; ++s) t = std::max(t, cell_of(static_cast<std::size_t>(positions[s])));
    return static_cast<std::size_t>(t + 1);
  }

  /// Cells the last read row saw (the sequence's kept cells + its new one).
  std::size_t visible() const { return last_visible_; }
  /// The most cells any row saw.
  std::size_t max_visible() const { return max_visible_; }
  /// How often a token went into a cell one of this sequence's earlier positions had held.
  std::size_t reused() const { return reused_; }

 private:
  [[noreturn]] static void fail(const std::string& what) { throw std::runtime_error("kvevict_llama: " + what); }

  std::vector<std::int64_t> cell_pos_;  // cell -> position held now (-1: none of ours)
  std::vector<std::int64_t> prev_pos_;  // cell -> the last position it held (reuse count)
  std::vector<std::int64_t> pos_cell_;  // position -> cell (-1: not held)
  std::size_t last_visible_ = 0, max_visible_ = 0, reused_ = 0;
};

namespace detail {
/// Saves sequence `seq` of `ctx` into `state`, clears it and restores it (`llama_state_seq_get_data`,
/// `llama_memory_seq_rm`, `llama_state_seq_set_data`): llama.cpp puts the cells back, in their order, into the free
/// cells from 0 (`Evictor::compact`). O(held cells · n_layer · (K + V row bytes)), twice. Throws
/// `std::runtime_error` if llama.cpp does not save, clear or restore the whole sequence (after a failed restore the
/// sequence's KV cache is lost; before it, nothing moved).
inline void repack_sequence(llama_context* ctx, llama_seq_id seq, std::vector<std::uint8_t>& state) {
  const std::size_t size = llama_state_seq_get_size(ctx, seq);
  state.resize(size);
  if (llama_state_seq_get_data(ctx, state.data(), size, seq) != size)
    throw std::runtime_error("kvevict_llama: llama_state_seq_get_data did not save the sequence's " +
                             std::to_string(size) + " bytes; nothing was moved");
  if (!llama_memory_seq_rm(llama_get_memory(ctx), seq, -1, -1))
    throw std::runtime_error("kvevict_llama: llama_memory_seq_rm refused to clear the sequence for compaction; "
                             "nothing was moved");
  if (llama_state_seq_set_data(ctx, state.data(), size, seq) != size)
    throw std::runtime_error("kvevict_llama: llama_state_seq_set_data did not restore the sequence's " +
                             std::to_string(size) + " bytes after compaction: its KV cache is lost");
}

/// Cells the mask `[n_kv][n_rows][1][n_stream]` (F32; > -inf = visible) shows in row `row` of stream `stream`.
/// Throws `std::runtime_error` if the mask is not F32 or has no such row or stream. O(n_kv).
inline std::size_t visible_in_row(const ggml_tensor* mask, std::size_t row, std::size_t stream) {
  if (mask->type != GGML_TYPE_F32)
    throw std::runtime_error("kvevict_llama: the attention mask is not F32 (flash attention must be off)");
  if (row >= static_cast<std::size_t>(mask->ne[1]) || stream >= static_cast<std::size_t>(mask->ne[3]))
    throw std::runtime_error("kvevict_llama: the attention mask has no row " + std::to_string(row) + " of stream " +
                             std::to_string(stream));
  std::size_t n = 0;
  for (std::int64_t c = 0; c < mask->ne[0]; ++c) {
    const float v = *reinterpret_cast<const float*>(static_cast<const char*>(mask->data) + c * mask->nb[0] +
                                                     row * mask->nb[1] + stream * mask->nb[3]);
    n += v > -std::numeric_limits<float>::infinity();
  }
  return n;
}
}  // namespace detail

}  // namespace kvevict_llama
