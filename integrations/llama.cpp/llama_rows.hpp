// kvevict inside llama.cpp — llama_rows.hpp: what an `Evictor` reads from llama.cpp's graph for its cache: the
// attention probabilities of every layer and head (`kq_soft_max-<layer>`) as per-head log p rows or one summed
// row per token, and the batch's keys (`Kcur-<layer>`) for a key score.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <ggml.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama_cells.hpp"

namespace kvevict_llama {

/// How the attention probabilities of every layer and head become the logits of the evictor's cache (the
/// policies that `needs_scores`). Both give one selection for the model; they differ in what a step costs and
/// in where Keyformer's noise enters.
enum class ScoreRows {
  /// Each layer's every head is a query head of its own: `n_layer · n_head` rows `log p` per token, and the
  /// policy adds each head's `softmax((log p + ζ) / τ)` (Keyformer Eq. 7 per head). Per decode step
  /// O(n_layer · n_head · n) logarithms and the policy's softmax (and noise) over as many entries.
  per_head,
  /// One row per token: `log Σ_{l,h} p_{l,h}` over the held positions (the probabilities read in place from
  /// `kq_soft_max` and summed over layers, then heads, in float), and the policy scores that one row. H2O's
  /// and TOVA's rankings are the per-head ones (`softmax(log Σ p) = Σ p / (n_layer · n_head)`, a constant
  /// factor; equal up to rounding), mean attention's too; Keyformer draws one ζ per position and step on the
  /// summed row instead of one per head. Per decode step O(n_layer · n_head · n_kv) contiguous adds and O(n)
  /// logarithms and policy work.
  summed,
};

namespace detail {

[[noreturn]] inline void rows_fail(const std::string& what) { throw std::runtime_error("kvevict_llama: " + what); }

/// `ScoreRows::per_head`: layer `layer`'s log p into the cache's logits `x` `[layer · n_head + h][row][slot]`
/// (`rows` tokens at positions `first ..`, the tensor's rows `row0 ..` of stream `stream`; `kq_soft_max`
/// `[n_kv][n_tokens][n_head][n_stream]`),
/// for the `n` slots at positions `pos[0, n)`, each read from its cell (`cells`), causal: a slot after the row's
/// position is left as it was (-inf). O(n_head · rows · n) logarithms.
inline void copy_log_probs(const ggml_tensor* t, std::size_t layer, std::size_t n_head, std::size_t row0,
                           std::size_t stream, std::size_t rows, std::size_t first, const std::int64_t* pos,
                           std::size_t n, const CellMap& cells, float* x) {
  for (std::size_t h = 0; h < n_head; ++h)
    for (std::size_t r = 0; r < rows; ++r) {
      float* out = x + ((layer * n_head + h) * rows + r) * n;
      const char* row =
          static_cast<const char*>(t->data) + (row0 + r) * t->nb[1] + h * t->nb[2] + stream * t->nb[3];
      const std::size_t limit = first + r;  // causal: slots up to this position
      for (std::size_t s = 0; s < n; ++s) {
        if (static_cast<std::size_t>(pos[s]) > limit) continue;
        const std::int64_t cell = cells.cell_of(static_cast<std::size_t>(pos[s]));
        const float p = *reinterpret_cast<const float*>(row + static_cast<std::size_t>(cell) * t->nb[0]);
        out[s] = std::log(p);
      }
    }
}

/// `ScoreRows::summed`: the batch's probabilities summed over layers, then heads, in float, `[row][cell]`.
class SummedRows {
 public:
  /// Adds one layer's probabilities (`kq_soft_max` `[n_kv][n_tokens][n_head][n_stream]`, rows `row0 .. row0 + rows
  /// − 1` of stream `stream`),
  /// head by head; `first_layer` starts the sums at 0. The rows are read in place, a contiguous add over the
  /// n_kv cells when ggml stores a row densely; masked cells hold p = 0. Throws `std::runtime_error` if layers
  /// of one batch differ in cells. O(n_head · rows · n_kv).
  void add(const ggml_tensor* t, std::size_t n_head, std::size_t row0, std::size_t stream, std::size_t rows,
           bool first_layer) {
    const std::size_t n_kv = static_cast<std::size_t>(t->ne[0]);
    if (first_layer) {
      cells_ = n_kv;
      sum_.assign(rows * n_kv, 0.0f);
    } else if (n_kv != cells_) {
      rows_fail("kq_soft_max has " + std::to_string(n_kv) + " cells in one layer and " + std::to_string(cells_) +
                " in another of the same batch");
    }
    const bool dense = t->nb[0] == sizeof(float);
    for (std::size_t h = 0; h < n_head; ++h)
      for (std::size_t r = 0; r < rows; ++r) {
        const char* row =
            static_cast<const char*>(t->data) + (row0 + r) * t->nb[1] + h * t->nb[2] + stream * t->nb[3];
        float* acc = sum_.data() + r * n_kv;
        if (dense) {
          const float* p = reinterpret_cast<const float*>(row);
          for (std::size_t c = 0; c < n_kv; ++c) acc[c] += p[c];
        } else {
          for (std::size_t c = 0; c < n_kv; ++c) acc[c] += *reinterpret_cast<const float*>(row + c * t->nb[0]);
        }
      }
  }

  /// The cache's logits `x` `[row][slot]` = log of the summed probability of each slot's cell, for the `n` slots
  /// at positions `pos[0, n)` (causal, as `copy_log_probs`). Throws `std::runtime_error` if a held position's cell
  /// is not among the summed cells. O(rows · n).
  void logits(std::size_t rows, std::size_t first, const std::int64_t* pos, std::size_t n, const CellMap& cells,
              float* x) const {
    for (std::size_t r = 0; r < rows; ++r) {
      float* out = x + r * n;
      const float* acc = sum_.data() + r * cells_;
      const std::size_t limit = first + r;
      for (std::size_t s = 0; s < n; ++s) {
        if (static_cast<std::size_t>(pos[s]) > limit) continue;
        const std::int64_t cell = cells.cell_of(static_cast<std::size_t>(pos[s]));
        if (cell < 0 || static_cast<std::size_t>(cell) >= cells_)
          rows_fail("position " + std::to_string(pos[s]) + " is held but its cell " + std::to_string(cell) +
                    " is not among the " + std::to_string(cells_) + " cells of kq_soft_max");
        out[s] = std::log(acc[static_cast<std::size_t>(cell)]);
      }
    }
  }

 private:
  std::vector<float> sum_;  // [row][cell]
  std::size_t cells_ = 0;
};

/// The batch's keys of every global layer (knorm, keydiff), staged from `Kcur-<layer>` until the batch ends.
class KeyRows {
 public:
  /// `n_layer` layers of `n_head_kv` KV heads of `head_dim`.
  void shape(std::size_t n_layer, std::size_t n_head_kv, std::size_t head_dim) {
    n_layer_ = n_layer;
    n_head_kv_ = n_head_kv;
    head_dim_ = head_dim;
  }
  /// A new batch of `n` tokens: the staging grows to the largest batch, once; no layer seen.
  void begin(std::size_t n) {
    n_ = n;
    if (keys_.size() < n_layer_ * n * n_head_kv_ * head_dim_) keys_.resize(n_layer_ * n * n_head_kv_ * head_dim_);
    seen_.assign(n_layer_, false);
  }
  /// One layer's Kcur (F32; `[head_dim][n_head_kv][n_tokens]`, or `[n_head_kv · head_dim][n_tokens]` before the
  /// reshape): the batch's keys into the staging. Every tensor of the name overwrites the last, so the layer's
  /// last one (after RoPE, the one stored in the cache) stays. Throws `std::runtime_error` for another layer
  /// count, type or shape. O(n · n_head_kv · head_dim).
  void copy(const ggml_tensor* t, int layer) {
    const std::size_t per_token = n_head_kv_ * head_dim_, n = n_;
    if (layer < 0 || static_cast<std::size_t>(layer) >= n_layer_)
      rows_fail("Kcur of layer " + std::to_string(layer) + " in a model of " + std::to_string(n_layer_) + " layers");
    if (t->type != GGML_TYPE_F32) rows_fail("Kcur of layer " + std::to_string(layer) + " is not F32");
    const bool three_d = t->ne[2] == static_cast<int64_t>(n) && t->ne[3] == 1 &&
                         static_cast<std::size_t>(t->ne[0] * t->ne[1]) == per_token;
    const bool two_d = t->ne[1] == static_cast<int64_t>(n) && t->ne[2] == 1 && t->ne[3] == 1 &&
                       static_cast<std::size_t>(t->ne[0]) == per_token;
    if (!three_d && !two_d)
      rows_fail("Kcur of layer " + std::to_string(layer) + " has shape [" + std::to_string(t->ne[0]) + ", " +
                std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + "]; key scores need " +
                std::to_string(per_token) + " floats (n_head_kv · n_embd / n_head) per token of a batch of " +
                std::to_string(n));
    const std::size_t ne0 = static_cast<std::size_t>(t->ne[0]);
    float* out = keys_.data() + static_cast<std::size_t>(layer) * n * per_token;  // staging [layer][token][.]
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < per_token; ++i) {
        const std::size_t i0 = i % ne0, i1 = i / ne0;
        const char* e = static_cast<const char*>(t->data) + i0 * t->nb[0] +
                        (three_d ? i1 * t->nb[1] + r * t->nb[2] : r * t->nb[1]);
        out[r * per_token + i] = *reinterpret_cast<const float*>(e);
      }
    seen_[static_cast<std::size_t>(layer)] = true;
  }
  /// The eval callback's `Kcur-<layer>` (`layer` parsed from the name; `global` / `rank`: `LayerKinds`): a sliding
  /// layer's keys are not asked for; a global layer's are copied (`copy`, at its rank) while a batch is `active`.
  /// Returns what the callback returns. Throws `std::runtime_error` for a layer beyond the model's.
  bool on_tensor(const ggml_tensor* t, int layer, bool ask, bool active, const std::vector<bool>& global,
                 const std::vector<std::size_t>& rank) {
    const bool known = layer >= 0 && static_cast<std::size_t>(layer) < global.size();
    if (known && !global[static_cast<std::size_t>(layer)]) return !ask;  // a sliding layer's keys are not scored
    if (ask || !active) return true;
    if (!known)
      rows_fail("Kcur of layer " + std::to_string(layer) + " in a model of " + std::to_string(global.size()) + " layers");
    copy(t, static_cast<int>(rank[static_cast<std::size_t>(layer)]));
    return true;
  }
  /// The staged keys of the batch into the cache's K rows `kv.k_row(l · n_head_kv + h, first_slot + r)` and, when
  /// recording, into `log` at positions `first_pos + r`. O(n_layer · n · n_head_kv · head_dim).
  template <class KV, class Log>
  void store(KV& kv, Log& log, std::size_t first_slot, std::size_t first_pos) const {
    for (std::size_t l = 0; l < n_layer_; ++l)
      for (std::size_t r = 0; r < n_; ++r)
        for (std::size_t h = 0; h < n_head_kv_; ++h) {
          const float* in = key(l, r, h);
          const std::size_t j = l * n_head_kv_ + h;
          std::copy_n(in, head_dim_, kv.k_row(j, first_slot + r));
          if (log.keys_on()) log.add_key(first_pos + r, j, in);
        }
  }
  /// Layers whose Kcur this batch saw.
  std::size_t layers_seen() const { return static_cast<std::size_t>(std::count(seen_.begin(), seen_.end(), true)); }
  /// Layer `l`'s KV head `h` key of the batch's token `r`: `head_dim` floats.
  const float* key(std::size_t l, std::size_t r, std::size_t h) const {
    return keys_.data() + (l * n_ + r) * n_head_kv_ * head_dim_ + h * head_dim_;
  }

 private:
  std::size_t n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0, n_ = 0;
  std::vector<float> keys_;  // [layer][token][n_head_kv · head_dim]
  std::vector<bool> seen_;   // [layer]
};

}  // namespace detail
}  // namespace kvevict_llama
