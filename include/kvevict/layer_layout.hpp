// layer_layout.hpp — which layers of a model kvevict evicts in: global (full-attention) layers are evicted under
// the budget, sliding-window layers (Gemma 2/3, Cohere 2, gpt-oss, ...) keep their window and are never scored.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/layer_budgets.hpp"

namespace kvevict {

/// The attention of one layer.
enum class AttentionKind {
  global,  ///< full attention over every held position: kvevict's cache, evicted under the budget
  sliding  ///< attention over the last `window` positions only: its cache already holds at most the window, so
           ///< kvevict builds none for it (the engine's own sliding-window cache stays)
};

/// The attention kinds of a model's layers, the rule a model with sliding-window layers is built by: kvevict's
/// caches (one per global layer) and its budgets count the global layers only; a budget ratio is of the context
/// (a global layer's positions), and per-layer budgets (`LayerBudgets`, PyramidKV) spread over the global
/// layers in their order (`plan_layers`).
struct LayerLayout {
  std::vector<AttentionKind> kinds;  ///< [layer]
  std::size_t window = 0;            ///< the sliding layers' window in positions (0 when none slides)

  /// `n_layers` global layers (a model without sliding-window attention). Throws `std::invalid_argument` for 0.
  static LayerLayout all_global(std::size_t n_layers) {
    detail::require(n_layers >= 1, "kvevict::LayerLayout::all_global: n_layers must be >= 1 (got 0)");
    LayerLayout l;
    l.kinds.assign(n_layers, AttentionKind::global);
    return l;
  }

  /// A period of `period` layers as llama.cpp's `set_swa_pattern` and transformers' `layer_types` lay Gemma 3
  /// out: with `global_first` false, the last layer of each period is global (`l % period == period − 1`;
  /// Gemma 3: period 6, layers 5, 11, 17 of 18; Gemma 2: period 2); with `global_first` true the first is
  /// (`l % period == 0`). `period` 1: every layer global. Throws `std::invalid_argument` naming the value for
  /// `n_layers` 0, `period` 0 or `window` 0 (with some layer sliding). O(n_layers).
  static LayerLayout periodic(std::size_t n_layers, std::size_t period, std::size_t window, bool global_first = false) {
    detail::require(n_layers >= 1, "kvevict::LayerLayout::periodic: n_layers must be >= 1 (got 0)");
    detail::require(period >= 1, "kvevict::LayerLayout::periodic: period must be >= 1 (got 0)");
    LayerLayout l;
    l.kinds.resize(n_layers);
    for (std::size_t i = 0; i < n_layers; ++i) {
      const bool global = global_first ? i % period == 0 : i % period == period - 1;
      l.kinds[i] = global ? AttentionKind::global : AttentionKind::sliding;
    }
    l.window = l.n_global() == n_layers ? 0 : window;
    detail::require(l.window >= 1 || l.n_global() == n_layers,
                    "kvevict::LayerLayout::periodic: window must be >= 1 when layers slide (got 0)");
    return l;
  }

  /// Layers.
  std::size_t size() const { return kinds.size(); }
  /// Whether layer `l` is global. Throws `std::invalid_argument` naming `l` past the last layer.
  bool is_global(std::size_t l) const {
    detail::require(l < kinds.size(), "kvevict::LayerLayout::is_global: layer ", l, " of a model of ", kinds.size(),
                    " layers");
    return kinds[l] == AttentionKind::global;
  }
  /// Global layers. O(n_layers).
  std::size_t n_global() const {
    std::size_t n = 0;
    for (const AttentionKind k : kinds) n += k == AttentionKind::global;
    return n;
  }
  /// The global layers' indices, ascending. O(n_layers).
  std::vector<std::size_t> global_layers() const {
    std::vector<std::size_t> out;
    for (std::size_t l = 0; l < kinds.size(); ++l)
      if (kinds[l] == AttentionKind::global) out.push_back(l);
    return out;
  }
};

/// What kvevict does in one layer (`plan_layers`).
struct LayerPlan {
  AttentionKind kind = AttentionKind::global;
  /// A global layer's budget (tokens per KV head); 0 for a sliding layer, which gets no kvevict cache.
  std::size_t budget = 0;
};

/// The plan of every layer of `layout` for a budget `k` per global layer: the global layers' budgets are
/// `layer_budgets(schedule, n_global, k, prompt_len)` in their order (uniform: k each; PyramidKV: the pyramid over
/// the global layers alone, its mean k), the sliding layers get none (budget 0). So the KV memory kvevict bounds is
/// `n_global · k` positions per KV head; the sliding layers' stays at most their window each. Throws
/// `std::invalid_argument` (as `layer_budgets`, and) if the layout has no layer or no global layer (there is
/// nothing to evict: the window alone bounds such a model's cache). O(n_layers · log n_layers + n_layers · log k).
inline std::vector<LayerPlan> plan_layers(const LayerBudgets& schedule, const LayerLayout& layout, std::size_t k,
                                          std::size_t prompt_len = 0) {
  detail::require(layout.size() >= 1, "kvevict::plan_layers: the layout has no layer");
  const std::size_t n_global = layout.n_global();
  detail::require(n_global >= 1, "kvevict::plan_layers: every one of the ", layout.size(),
                  " layers slides (window ", layout.window, "): there is no global layer to evict in");
  const std::vector<std::size_t> budgets = layer_budgets(schedule, n_global, k, prompt_len);
  std::vector<LayerPlan> plan(layout.size());
  std::size_t g = 0;
  for (std::size_t l = 0; l < layout.size(); ++l) {
    plan[l].kind = layout.kinds[l];
    if (layout.kinds[l] == AttentionKind::global) plan[l].budget = budgets[g++];
  }
  return plan;
}

}  // namespace kvevict
