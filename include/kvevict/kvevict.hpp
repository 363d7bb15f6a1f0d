// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, window, TOVA, SnapKV, key norm, KeyDiff, PyramidKV).
// SPDX-License-Identifier: Apache-2.0
//
// kvevict.hpp — umbrella header: includes the whole library.
//
// Architecture (one concept per folder). Every public name of the library is reachable through this
// header alone (tests/umbrella_test.cpp); `namespace detail` is internal and may change in any release.
//   presets.hpp   Keyformer, H2O, StreamingLLM, TOVA, SnapKV, H2OMean, KeyformerMean, KeyNorm, KeyDiff aliases; Policy,
//                 parse_policy, make_cache
//   layer_budgets.hpp  per-layer budgets over a model: uniform, PyramidKV, or weights
//   layer_layout.hpp   global and sliding-window layers: which are evicted, and the plan of their budgets
//   cache.hpp     Cache<Score, Temperature, Selection>: one layer's evicting cache (orchestration);
//                 its CacheConfig in cache_config.hpp
//   concepts.hpp  the Score / Temperature / Selection contracts (and the Score's optional hooks: rows
//                 scored, selection scores, budget check, a score from keys alone, a mean ranking), as text and
//                 static_asserts
//   budget.hpp    k and w as a token count, a fraction, or none
//   score/        what a token's score is: GumbelLogitScore (Keyformer), AccumulatedAttentionScore
//                 (H2O), CurrentAttentionScore (TOVA), SnapKVScore, MeanAttention<Base>, KeyNormScore, KeyDiffScore, NoScore; the Gumbel sampler;
//                 the softmax kernel;
//                 ChunkRows (a prefill chunk's logits) and the chunked-prefill semantics; Expected Attention
//                 (QueryStatistics, expected_attention_logits: rows that make a TOVA cache rank by it)
//   temperature/  τ per step: LinearTemperature, ConstantTemperature, IncrementTemperature
//   selection/    which tokens stay: select_keep, RecentTopKSelection, SinkRecentSelection,
//                 TopKThenWindowSelection
//   attention/    attention_logits (decode; paged_attention_logits over a PagedKVView) and
//                 prefill_chunk_qk (prefill chunks, Q·K by tiles), for engines whose attention never
//                 materialises the logits; rope_rotate (re-rotating
//                 cached keys by a position delta, never applied by a Cache)
//   kv/           KV storage: KVView (non-owning, strided; KVView<const T> read-only), KVBuffer (owning)
//   core/         the random generator, the run-time choice of instruction set (dispatch.hpp) and the
//                 Executor concept (SerialExecutor, ExecutorRef)
//   paged/        page-table storage: PagedKVView (NHD/HND), PagePool, PagedCache (token or page unit)
//   detail/       internal, never included by users: argument checks, float bits, fast log/exp, the
//                 kernels compiled per instruction set (vec16.hpp), the slot tables, the scorer, the budget rule
//   cuda/         CUDA (nvcc only, not included here): device views, the block code, kernels.cuh
#pragma once

#include "kvevict/attention/attention_logits.hpp"
#include "kvevict/attention/causal_attention.hpp"
#include "kvevict/attention/paged_attention_logits.hpp"
#include "kvevict/attention/qk_chunk_logits.hpp"
#include "kvevict/attention/rope.hpp"
#include "kvevict/budget.hpp"
#include "kvevict/cache.hpp"
#include "kvevict/cache_config.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/concepts.hpp"
#include "kvevict/core/dispatch.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/core/random.hpp"
#include "kvevict/kv/kv_buffer.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/layer_budgets.hpp"
#include "kvevict/layer_layout.hpp"
#include "kvevict/paged/page_eviction.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_cache.hpp"
#include "kvevict/paged/paged_cache_interface.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "kvevict/paged_presets.hpp"
#include "kvevict/presets.hpp"
#include "kvevict/score/chunk_rows.hpp"
#include "kvevict/score/expected_attention.hpp"
#include "kvevict/score/gumbel.hpp"
#include "kvevict/score/mean_attention.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/score/snapkv_score.hpp"
#include "kvevict/score/softmax_accumulate.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/selection/select_keep.hpp"
#include "kvevict/selection/sink_recent_selection.hpp"
#include "kvevict/selection/topk_then_window_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"
