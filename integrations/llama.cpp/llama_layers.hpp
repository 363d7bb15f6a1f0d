// kvevict inside llama.cpp — llama_layers.hpp: which of a llama.cpp model's layers are global (full attention,
// evicted by kvevict) and which attend a sliding window (never scored or evicted: their cache holds the window).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <ggml.h>
#include <llama.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <kvevict/layer_layout.hpp>

#include "llama_cells.hpp"

namespace kvevict_llama {

/// The attention kind of every layer of a llama.cpp model (kvevict's `LayerLayout`, read from the model). A model with sliding-window layers (Gemma 2/3,
/// Cohere 2, ...: `llama_model_n_swa > 0`) runs with llama.cpp's iSWA memory: one KV cache for the global
/// layers and one for the sliding ones, each with its own cells and its own attention mask. kvevict scores and
/// tracks cells on the global layers only; a drop (`llama_memory_seq_rm`) reaches both caches (llama.cpp 0.3.36's
/// `llama_kv_cache_iswa::seq_rm` removes the range from each), so a sliding layer loses an evicted position
/// that was still inside its window.
///
/// Which layers slide is not in llama.cpp's public API (only the window, `llama_model_n_swa`): it comes from the
/// GGUF key `<arch>.attention.sliding_window_pattern` (an array of one bool per layer, or a period) as llama.cpp
/// reads it (`load_swa_pattern`), and otherwise from the period llama.cpp 0.3.36 hard-codes for the architecture
/// (`models/<arch>.cpp`: gemma2 2, gemma3 6, cohere2 4, the last layer of each period global). The evictor checks
/// the result against llama.cpp's masks at every batch (flash attention off): the global layers share one mask
/// that shows every held cell, the sliding ones another that shows only the window.
struct LayerKinds {
  std::vector<bool> global;       ///< [layer]: true for a full-attention layer
  std::vector<std::size_t> rank;  ///< [layer]: the layer's index among the global ones (sliding layers: unused)
  std::size_t n_global = 0;       ///< global layers
  std::size_t window = 0;         ///< the sliding layers' window in positions (0: none slide)

  /// The kinds of `layout`'s layers.
  static LayerKinds from_layout(const kvevict::LayerLayout& layout) {
    LayerKinds k;
    for (const kvevict::AttentionKind a : layout.kinds) k.global.push_back(a == kvevict::AttentionKind::global);
    k.window = layout.window;
    k.finish();
    return k;
  }

  /// The kvevict layout of these kinds.
  kvevict::LayerLayout layout() const {
    kvevict::LayerLayout l;
    for (const bool g : global) l.kinds.push_back(g ? kvevict::AttentionKind::global : kvevict::AttentionKind::sliding);
    l.window = window;
    return l;
  }

  /// A period `n_pattern` as llama.cpp's `set_swa_pattern` (`LayerLayout::periodic`, `dense_first` its
  /// `global_first`); `n_pattern` 0: every layer slides (llama.cpp's rule; `of` refuses it).
  static LayerKinds period(std::size_t n_layer, std::size_t n_pattern, bool dense_first, std::size_t window) {
    if (n_pattern != 0) return from_layout(kvevict::LayerLayout::periodic(n_layer, n_pattern, window, dense_first));
    LayerKinds k;
    k.global.assign(n_layer, false);
    k.window = window;
    k.finish();
    return k;
  }

  /// The kinds of `model`'s layers (see the struct comment). Throws `std::invalid_argument` naming the model's
  /// architecture if its layers slide and neither the GGUF nor this table says which, or if no layer is global
  /// (the window alone bounds such a model's cache: there is nothing to evict). O(n_layer).
  static LayerKinds of(const llama_model* model) {
    const auto n_layer = static_cast<std::size_t>(llama_model_n_layer(model));
    const std::int32_t n_swa = llama_model_n_swa(model);
    if (n_swa <= 0) return from_layout(kvevict::LayerLayout::all_global(n_layer));
    const auto window = static_cast<std::size_t>(n_swa);
    const std::string arch = meta(model, "general.architecture");
    LayerKinds k;
    const std::string pattern = meta(model, arch + ".attention.sliding_window_pattern");
    if (!pattern.empty() && pattern.front() == '[') {
      k = from_bool_array(pattern, n_layer, arch);
    } else if (!pattern.empty()) {
      k = period(n_layer, parse_count(pattern, arch), false, window);
    } else if (arch == "gemma3" || arch == "gemma-embedding") {
      k = period(n_layer, 6, false, window);
    } else if (arch == "gemma2") {
      k = period(n_layer, 2, false, window);
    } else if (arch == "cohere2") {
      k = period(n_layer, 4, false, window);
    } else {
      throw std::invalid_argument("the model (architecture '" + arch + "') has sliding-window layers (window " +
                                  std::to_string(n_swa) + ") and its GGUF does not say which (no " + arch +
                                  ".attention.sliding_window_pattern); kvevict knows the layout of gemma2, gemma3 "
                                  "and cohere2 only, so it cannot tell which layers to score and evict");
    }
    k.window = window;
    if (k.n_global == 0)
      throw std::invalid_argument("every layer of the model (architecture '" + arch + "') attends a sliding window of " +
                                  std::to_string(n_swa) + " positions: its cache is bounded by the window already, "
                                  "and no global layer is left to evict from");
    return k;
  }

  /// Whether some layer slides.
  bool hybrid() const { return n_global != global.size(); }

 private:
  void finish() {
    rank.assign(global.size(), 0);
    n_global = 0;
    for (std::size_t l = 0; l < global.size(); ++l)
      if (global[l]) rank[l] = n_global++;
  }

  static std::string meta(const llama_model* model, const std::string& key) {
    char buf[4096];
    const std::int32_t n = llama_model_meta_val_str(model, key.c_str(), buf, sizeof buf);
    if (n < 0) return {};
    if (static_cast<std::size_t>(n) >= sizeof buf)
      throw std::invalid_argument("the model's GGUF key " + key + " is longer than " + std::to_string(sizeof buf) +
                                  " characters");
    return std::string(buf, static_cast<std::size_t>(n));
  }

  static std::size_t parse_count(const std::string& s, const std::string& arch) {
    std::size_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9' || v > 1000000)
        throw std::invalid_argument("the model's GGUF key " + arch + ".attention.sliding_window_pattern is '" + s +
                                    "', not a period or an array of bools");
      v = v * 10 + static_cast<std::size_t>(c - '0');
    }
    return v;
  }

  // "[true, false, ...]" (llama.cpp's gguf_kv_to_str of a bool array): true = the layer slides.
  static LayerKinds from_bool_array(const std::string& s, std::size_t n_layer, const std::string& arch) {
    LayerKinds k;
    std::string item;
    auto take = [&] {
      if (item == "true" || item == "1")
        k.global.push_back(false);
      else if (item == "false" || item == "0")
        k.global.push_back(true);
      else
        throw std::invalid_argument("the model's GGUF key " + arch + ".attention.sliding_window_pattern holds '" +
                                    item + "', not a bool");
      item.clear();
    };
    for (std::size_t i = 1; i < s.size(); ++i) {
      const char c = s[i];
      if (c == ',' || c == ']') {
        take();
        if (c == ']') break;
      } else if (c != ' ') {
        item += c;
      }
    }
    if (k.global.size() < n_layer)
      throw std::invalid_argument("the model's GGUF key " + arch + ".attention.sliding_window_pattern has " +
                                  std::to_string(k.global.size()) + " entries for " + std::to_string(n_layer) +
                                  " layers");
    k.global.resize(n_layer);
    k.finish();
    return k;
  }
};

/// The head size of `model`'s keys: `<arch>.attention.key_length` where the GGUF gives it (Gemma 3: 256, not
/// n_embd / n_head = 160), else n_embd / n_head. Throws `std::invalid_argument` if neither gives one.
inline std::size_t key_head_dim(const llama_model* model) {
  char arch[128], buf[64];
  if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) > 0) {
    const std::string key = std::string(arch) + ".attention.key_length";
    if (llama_model_meta_val_str(model, key.c_str(), buf, sizeof buf) > 0) {
      const long v = std::strtol(buf, nullptr, 10);
      if (v > 0) return static_cast<std::size_t>(v);
    }
  }
  const auto n_embd = static_cast<std::size_t>(llama_model_n_embd(model));
  const auto n_head = static_cast<std::size_t>(llama_model_n_head(model));
  if (n_head == 0 || n_embd % n_head != 0)
    throw std::invalid_argument("the model's attention shape (n_embd " + std::to_string(n_embd) + ", n_head " +
                                std::to_string(n_head) + ") has no head size n_embd / n_head for the keys, and "
                                "its GGUF gives no attention.key_length");
  return n_embd / n_head;
}

namespace detail {

/// One batch's attention masks of a hybrid model against its `LayerKinds`: the global layers' `kq_soft_max` share
/// one mask, the sliding layers' another (a layer with the other kind's mask means the layout kvevict assumed is
/// not llama.cpp's), and the sliding mask shows the batch's last token exactly the held positions within the
/// window — so a position kvevict dropped left the sliding cache too, and what it holds there stayed.
class LayerMasks {
 public:
  /// A new batch: no mask seen.
  void begin() {
    global_ = sliding_ = nullptr;
    sliding_visible_ = 0;
  }
  /// Layer `layer`'s mask; notes the sliding mask's cells visible in row `last_row` of stream `stream` (the batch's
  /// last token). Returns whether the layer is global (always, for a model without sliding layers: no check).
  /// Throws `std::runtime_error` naming the layer if it has the other kind's mask. O(n_kv) for the first sliding
  /// layer of a batch, O(1) otherwise.
  bool see(const LayerKinds& kinds, const ggml_tensor* mask, std::size_t layer, std::size_t last_row,
           std::size_t stream) {
    if (!kinds.hybrid()) return true;
    const bool global = kinds.global[layer];
    const ggml_tensor*& mine = global ? global_ : sliding_;
    const ggml_tensor* other = global ? sliding_ : global_;
    if (mask == other || (mine != nullptr && mask != mine))
      throw std::runtime_error("kvevict_llama: layer " + std::to_string(layer) + " is " +
                               (global ? "global" : "sliding-window") + " in the layout kvevict assumed (" +
                               std::to_string(kinds.n_global) + " global of " + std::to_string(kinds.global.size()) +
                               " layers), but llama.cpp gives it another kind's attention mask");
    if (mine == nullptr) {
      mine = mask;
      if (!global) sliding_visible_ = visible_in_row(mask, last_row, stream);
    }
    return global;
  }
  /// After the batch whose last token is at position `p`: the sliding mask showed it the held positions of
  /// `cells` (the global layers' map) in (p − window, p]. Throws `std::runtime_error` otherwise, or if no sliding
  /// layer's mask was seen. O(cells).
  void check_window(const LayerKinds& kinds, const CellMap& cells, std::size_t p) const {
    if (sliding_ == nullptr)
      throw std::runtime_error("kvevict_llama: the eval callback saw no sliding-window layer's kq_soft_max in a batch");
    std::size_t expected = 0;
    for (std::int64_t pos : cells.cells())
      if (pos >= 0 && static_cast<std::size_t>(pos) + kinds.window > p) ++expected;
    if (sliding_visible_ != expected)
      throw std::runtime_error("kvevict_llama: the sliding-window layers' mask shows position " + std::to_string(p) +
                               " " + std::to_string(sliding_visible_) + " cells; the positions held within its window "
                               "of " + std::to_string(kinds.window) + " are " + std::to_string(expected));
  }
  /// Cells the sliding mask showed the last batch's last token.
  std::size_t sliding_visible() const { return sliding_visible_; }

 private:
  const ggml_tensor* global_ = nullptr;   // the batch's mask of the global layers
  const ggml_tensor* sliding_ = nullptr;  // ... and of the sliding ones
  std::size_t sliding_visible_ = 0;
};

}  // namespace detail

}  // namespace kvevict_llama
