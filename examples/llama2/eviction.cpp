// kvevict example — llama2/eviction.cpp
// SPDX-License-Identifier: Apache-2.0
#include "llama2/eviction.hpp"

#include <stdexcept>

namespace llama2 {

CacheFactory make_cache_factory(const EvictionSettings& settings, std::size_t n_q_heads) {
  if (n_q_heads == 0) throw std::invalid_argument("llama2::make_cache_factory: n_q_heads must be >= 1");
  if (settings.bounded_prefill && settings.prefill_chunk == 0)
    throw std::invalid_argument("llama2::make_cache_factory: bounded_prefill needs prefill_chunk >= 1");
  if (settings.policy == "full") {
    if (settings.bounded_prefill)
      throw std::invalid_argument("llama2::make_cache_factory: bounded_prefill needs an evicting policy, not \"full\"");
    return {};
  }
  const kvevict::Policy policy = kvevict::parse_policy(settings.policy);
  kvevict::CacheConfig config;
  config.n_q_heads = n_q_heads;
  config.budget = settings.budget;
  config.recent = settings.recent;
  config.shared_heads = settings.shared_heads;
  config.max_prefill_chunk = settings.prefill_chunk;
  config.bounded_prefill = settings.bounded_prefill;
  const kvevict::PolicyParams params = settings.params;
  const std::uint64_t seed = settings.seed;
  return [policy, config, params, seed](std::size_t layer, const kvevict::KVView<float>& view) mutable {
    config.seed = seed + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(layer);
    return kvevict::make_cache(policy, config, view, params);
  };
}

}  // namespace llama2
