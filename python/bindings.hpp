// python/bindings.hpp — the bind_* functions, one per topic file, that module.cpp calls to build `kvevict`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <pybind11/pybind11.h>

namespace kvpy {

/// kvevict.Cache and its policy subclasses, make_cache, attention_logits, select_keep (cache_binding.cpp).
void bind_cache(pybind11::module_& m);
/// kvevict.PagePool, kvevict.PagedCache and attention_logits over a paged cache (paged_binding.cpp).
void bind_paged(pybind11::module_& m);
/// kvevict.replay, the library behind kvevict-replay (replay_binding.cpp).
void bind_replay(pybind11::module_& m);
/// kvevict.QueryStatistics and kvevict.expected_attention_logits (expected_attention.cpp).
void bind_expected_attention(pybind11::module_& m);
/// kvevict.LayerLayout: global and sliding-window layers, and the budgets over the global ones (layer_layout_binding.cpp).
void bind_layer_layout(pybind11::module_& m);
/// kvevict.causal_attention: the prompt's attention and H2O's column sums in one pass (attention_binding.cpp).
void bind_attention(pybind11::module_& m);

}  // namespace kvpy

/// kvevict.read_gguf (gguf_binding.cpp).
void bind_gguf(pybind11::module_& m);
