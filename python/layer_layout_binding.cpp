// python/layer_layout_binding.cpp — kvevict.LayerLayout: which layers of a model kvevict evicts in (global) and
// which keep their sliding window, and the budgets of a plan over the global layers (include/kvevict/layer_layout.hpp).
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "kvevict/layer_budgets.hpp"
#include "kvevict/layer_layout.hpp"

namespace py = pybind11;

namespace kvpy {
namespace {

using kvevict::AttentionKind;
using kvevict::LayerLayout;

const char* kind_name(AttentionKind k) { return k == AttentionKind::global ? "global" : "sliding"; }

// The layout of `kinds` (one name per layer, `global_name` / `sliding_name`), `who` and `what` naming the call and
// the argument in the messages. A window is required when some layer slides and dropped when none does.
LayerLayout layout_of(const std::vector<std::string>& kinds, std::size_t window, const char* global_name,
                      const char* sliding_name, const std::string& who, const char* what) {
  if (kinds.empty()) throw py::value_error(who + ": " + what + " is empty (a model has at least one layer)");
  LayerLayout l;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] == global_name) {
      l.kinds.push_back(AttentionKind::global);
    } else if (kinds[i] == sliding_name) {
      l.kinds.push_back(AttentionKind::sliding);
    } else {
      throw py::value_error(who + ": " + what + "[" + std::to_string(i) + "] = '" + kinds[i] + "': expected '" +
                            global_name + "' or '" + sliding_name + "'");
    }
  }
  const bool slides = l.n_global() != l.size();
  if (slides && window == 0)
    throw py::value_error(who + ": window must be >= 1 when layers slide (got 0; " +
                          std::to_string(l.size() - l.n_global()) + " of " + std::to_string(l.size()) +
                          " layers slide)");
  l.window = slides ? window : 0;
  return l;
}

constexpr const char* kLayerLayout =
    "LayerLayout(kinds, *, window=0): the attention of each layer of a model, the rule kvevict builds a model with\n"
    "sliding-window layers by (Gemma 2/3, Cohere 2, gpt-oss, ...): a 'global' layer (full attention) gets a kvevict\n"
    "cache evicted under the budget; a 'sliding' layer keeps the engine's own window cache of `window` positions and\n"
    "is never scored. Budgets count the global layers only: a ratio is of the context, and per-layer budgets\n"
    "(PyramidKV) spread over the global layers in their order (plan). C++: kvevict::LayerLayout, plan_layers.\n"
    "kinds: list of 'global' / 'sliding', one per layer. window: the sliding layers' window (positions), >= 1 when\n"
    "some layer slides (0 and ignored when none does). Raises ValueError naming the argument and value.";

constexpr const char* kPlan =
    "plan(k, *, prompt_len=0, layer_budgets='uniform') -> list[int]: each layer's budget in tokens per KV head for a\n"
    "budget k per global layer: the global layers get layer_budgets(schedule, n_global, k, prompt_len) in their\n"
    "order ('uniform': k each; 'pyramid' or 'pyramid:BETA': PyramidKV over the global layers alone, mean k; a\n"
    "comma-separated list of weights), the sliding layers 0 (no kvevict cache). The KV kvevict bounds is then\n"
    "n_global * k positions per KV head. Raises ValueError for k < 1, a bad schedule, or a layout without a global\n"
    "layer. O(n_layers log n_layers + n_layers log k).";

}  // namespace

void bind_layer_layout(py::module_& m) {
  py::class_<LayerLayout>(m, "LayerLayout", kLayerLayout)
      .def(py::init([](const std::vector<std::string>& kinds, std::size_t window) {
             return layout_of(kinds, window, "global", "sliding", "kvevict.LayerLayout", "kinds");
           }),
           py::arg("kinds"), py::kw_only(), py::arg("window") = 0)
      .def_static(
          "from_layer_types",
          [](const std::vector<std::string>& layer_types, std::size_t window) {
            return layout_of(layer_types, window, "full_attention", "sliding_attention",
                             "kvevict.LayerLayout.from_layer_types", "layer_types");
          },
          py::arg("layer_types"), py::kw_only(), py::arg("window") = 0,
          "from_layer_types(layer_types, *, window=0): the layout of transformers' config.layer_types\n"
          "('full_attention' -> global, 'sliding_attention' -> sliding; anything else raises ValueError naming the\n"
          "layer) with config.sliding_window as `window`.")
      .def_static("periodic", &LayerLayout::periodic, py::arg("n_layers"), py::arg("period"), py::arg("window"),
                  py::kw_only(), py::arg("global_first") = false,
                  "periodic(n_layers, period, window, *, global_first=False): a global layer every `period` layers, as\n"
                  "llama.cpp's set_swa_pattern lays Gemma 3 out (period 6: layers 5, 11, 17 of 18); global_first:\n"
                  "the first of each period instead of the last. Raises ValueError for n_layers 0, period 0, or\n"
                  "window 0 with some layer sliding.")
      .def_property_readonly("kinds",
                             [](const LayerLayout& l) {
                               std::vector<std::string> out;
                               for (const AttentionKind k : l.kinds) out.emplace_back(kind_name(k));
                               return out;
                             },
                             "'global' or 'sliding' per layer.")
      .def_readonly("window", &LayerLayout::window, "the sliding layers' window (0 when no layer slides).")
      .def("__len__", &LayerLayout::size)
      .def_property_readonly("n_global", &LayerLayout::n_global, "the number of global layers.")
      .def_property_readonly("global_layers", &LayerLayout::global_layers, "the global layers' indices, ascending.")
      .def("is_global", &LayerLayout::is_global, py::arg("layer"),
           "is_global(layer): whether the layer is global; ValueError past the last layer.")
      .def(
          "plan",
          [](const LayerLayout& l, std::size_t k, std::size_t prompt_len, const std::string& layer_budgets) {
            if (k < 1) throw py::value_error("kvevict.LayerLayout.plan: k must be >= 1 (got 0)");
            std::vector<std::size_t> out;
            for (const kvevict::LayerPlan& p :
                 kvevict::plan_layers(kvevict::parse_layer_budgets(layer_budgets), l, k, prompt_len))
              out.push_back(p.budget);
            return out;
          },
          py::arg("k"), py::kw_only(), py::arg("prompt_len") = 0, py::arg("layer_budgets") = "uniform", kPlan)
      .def("__repr__", [](const LayerLayout& l) {
        std::string s = "kvevict.LayerLayout(" + std::to_string(l.size()) + " layers, global ";
        const std::vector<std::size_t> g = l.global_layers();
        for (std::size_t i = 0; i < g.size(); ++i) s += (i ? "," : "[") + std::to_string(g[i]);
        return s + "], window " + std::to_string(l.window) + ")";
      });
}

}  // namespace kvpy
