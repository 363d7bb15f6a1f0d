// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// kvevict.hpp — umbrella header: includes the whole library.
//
// Architecture (one concept per header):
//   selection/    which tokens stay: select_keep, RecentTopKSelection, SinkRecentSelection
//   score/        what a token's score is: GumbelLogitScore (Keyformer), AccumulatedAttentionScore
//                 (H2O), CurrentAttentionScore (TOVA), NoScore; the Gumbel sampler; the softmax kernel
//   temperature/  τ per step: LinearTemperature, ConstantTemperature, IncrementTemperature
//   kv/           KV storage: KVView (non-owning, strided), KVBuffer (owning), attention_logits
//   paged/        page-table storage: PagedKVView (NHD/HND), PagePool, PagedCache (token or page unit)
//   budget.hpp    k and w as counts or fractions
//   cache.hpp     Cache<Score, Temperature, Selection>: one layer's evicting cache
//   policies.hpp  Keyformer, H2O, StreamingLLM, TOVA aliases and make_cache
#pragma once

#include "kvevict/budget.hpp"
#include "kvevict/cache.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/kv/attention_logits.hpp"
#include "kvevict/kv/kv_buffer.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_cache.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "kvevict/policies.hpp"
#include "kvevict/score/gumbel.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/score/softmax_accumulate.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/selection/select_keep.hpp"
#include "kvevict/selection/sink_recent_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"
