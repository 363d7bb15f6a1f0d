// kvevict example — llama2/eviction.hpp: choosing each block's kvevict policy by name.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvevict/budget.hpp"
#include "kvevict/policies.hpp"
#include "llama2/engine.hpp"

namespace llama2 {

/// What `make_cache_factory` builds for every block of an `Engine`.
struct EvictionSettings {
  /// "full" (no eviction), or a `kvevict::parse_policy` name: "keyformer",
  /// "h2o", "streaming", "window", "tova".
  std::string policy = "full";
  /// Budget `k` per KV head: tokens, or a fraction of the prompt length.
  kvevict::Budget budget = kvevict::Budget::ratio(0.5);
  /// Recent window `w`: tokens, or a fraction of `k`. TOVA requires 0.
  kvevict::RecentWindow recent = kvevict::RecentWindow::ratio(0.3);
  /// `true`: every KV head of a block keeps the same tokens.
  bool shared_heads = false;
  /// τ schedule, horizon T, Gumbel noise on/off, StreamingLLM sinks.
  kvevict::PolicyParams params;
  /// Chunked prefill: chunk size `C` (0 = one-shot), given to every cache as
  /// `CacheConfig::max_prefill_chunk`; pass the same value to `Engine`.
  std::size_t prefill_chunk = 0;
  /// Bounded prefill (needs `prefill_chunk >= 1` and a token budget): every
  /// cache evicts to `k` after each chunk (`CacheConfig::bounded_prefill`).
  bool bounded_prefill = false;
  /// Noise seed; block `l` uses `seed + l * 0x9E3779B97F4A7C15` (wrapping) so
  /// blocks draw independent noise and each run is reproducible.
  std::uint64_t seed = 0;
};

/// A `CacheFactory` for `Engine` that gives every block the policy in
/// `settings` (an empty factory for "full"), with `CacheConfig::n_q_heads =
/// n_q_heads`. Throws `std::invalid_argument` for an unknown policy name or
/// `n_q_heads == 0`, or `bounded_prefill` without `prefill_chunk` or with
/// "full"; the factory itself throws what `kvevict::make_cache`
/// throws (e.g. keyformer with `params.horizon == 0`, tova with a recent window).
CacheFactory make_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads);

}  // namespace llama2
