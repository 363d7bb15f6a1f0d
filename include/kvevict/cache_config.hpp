// cache_config.hpp — the configuration shared by every policy of `Cache`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/budget.hpp"
#include "kvevict/head_budgets.hpp"

namespace kvevict {

/// Configuration shared by every policy.
struct CacheConfig {
  /// Query heads of the layer; must be a positive multiple `g · n_kv_heads` of
  /// the view's KV heads (GQA: query head `h` reads KV head `h / g`; MHA: g = 1).
  std::size_t n_q_heads = 0;
  /// Budget `k`, tokens kept per KV head (count, or fraction of the prompt).
  Budget budget = Budget::ratio(0.5);
  /// Recent window `w` (none, a count, or a fraction of `k`); must resolve to `<= k`.
  RecentWindow recent = RecentWindow::none();
  /// `true`: one selection for the whole layer from scores summed over KV
  /// heads, so every head keeps the same tokens. `false` (default, as in
  /// Keyformer and H2O): each KV head selects independently.
  bool shared_heads = false;
  /// Seed of the cache's Gumbel generator (same seed => same result).
  std::uint64_t seed = 0;
  /// Chunked prefill (`Cache::prefill_chunk`): the largest chunk `C` the engine
  /// will pass; a larger chunk throws. 0 = no limit (not allowed with
  /// `bounded_prefill`). Does not apply to the one-shot `prefill`.
  std::size_t max_prefill_chunk = 0;
  /// Bounded prefill (opt-in): after every chunk, cut to the budget, so the view
  /// never holds more than `k + max_prefill_chunk` tokens during prefill. Needs a
  /// token budget (`Budget::tokens`: `k` must be known before the prompt ends),
  /// `max_prefill_chunk >= 1` and capacity >= `k + max_prefill_chunk`.
  /// Semantics: see `Cache::prefill_chunk`.
  bool bounded_prefill = false;
  /// How the layer's budget is shared among its KV heads: `HeadBudgets::uniform()` (default: `k` each) or
  /// `HeadBudgets::adaptive(alpha)` (AdaKV: `k · n_kv_heads` in total, shared by score; the heads then hold
  /// different numbers of tokens, see head_budgets.hpp). Adaptive needs per-head selection (not
  /// `shared_heads`), no `bounded_prefill`, and a score from the logits; `PagedCache` refuses it.
  HeadBudgets head_budgets = HeadBudgets::uniform();
};

}  // namespace kvevict
