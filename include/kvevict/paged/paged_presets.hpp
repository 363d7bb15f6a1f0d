// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA, SnapKV).
// SPDX-License-Identifier: Apache-2.0
//
// paged/paged_presets.hpp — the ready-made policies over paged storage: type aliases and
// `make_paged_cache` (the paged twin of presets.hpp). Included by paged/paged_cache.hpp.
#pragma once

#include <memory>
#include <stdexcept>

#include "kvevict/paged/paged_cache.hpp"
#include "kvevict/presets.hpp"

namespace kvevict {

/// Keyformer, H2O, StreamingLLM, TOVA and SnapKV over paged storage (see presets.hpp).
using PagedKeyformer = PagedCache<GumbelLogitScore, LinearTemperature, RecentTopKSelection>;
using PagedH2O = PagedCache<AccumulatedAttentionScore, ConstantTemperature, RecentTopKSelection>;
using PagedStreamingLLM = PagedCache<NoScore, ConstantTemperature, SinkRecentSelection>;
using PagedTOVA = PagedCache<CurrentAttentionScore, ConstantTemperature, RecentTopKSelection>;
/// SnapKV (prefill selection only in the token unit; the page unit ranks pages by the raw, unpooled
/// observation-window scores).
using PagedSnapKV = PagedCache<SnapKVScore, ConstantTemperature, RecentTopKSelection>;
using PagedSnapKVWindow = PagedCache<SnapKVScore, ConstantTemperature, TopKThenWindowSelection>;

/// Builds policy `p` over one paged sequence, exactly as `make_cache` builds
/// it over a contiguous view (same parameters, same checks: keyformer needs
/// `horizon >= 1`, tova `config.recent.is_none()`). `config.shared_heads` must be
/// true. Throws `std::invalid_argument` as the constructors do.
template <class T>
std::unique_ptr<PagedCacheInterface> make_paged_cache(Policy p, const CacheConfig& config,
                                                      const PagedEvictionConfig& paged, const PagedKVView<T>& kv,
                                                      PagePool& pool, const PolicyParams& params = PolicyParams()) {
  switch (p) {
    case Policy::keyformer:
      return std::make_unique<PagedKeyformer>(config, paged, kv, pool, GumbelLogitScore{params.gumbel_noise},
                                              LinearTemperature(params.tau_init, params.tau_end, params.horizon));
    case Policy::h2o:
      return std::make_unique<PagedH2O>(config, paged, kv, pool);
    case Policy::streaming_llm:
      return std::make_unique<PagedStreamingLLM>(config, paged, kv, pool, NoScore{}, ConstantTemperature(),
                                                 SinkRecentSelection{params.sinks});
    case Policy::window:
      return std::make_unique<PagedStreamingLLM>(config, paged, kv, pool, NoScore{}, ConstantTemperature(),
                                                 SinkRecentSelection{0});
    case Policy::tova:
      detail::require(config.recent.is_none(),
                      "kvevict::make_paged_cache: TOVA has no recent window; set config.recent to 0");
      return std::make_unique<PagedTOVA>(config, paged, kv, pool);
    case Policy::snapkv:
      if (params.snap_decode == SnapDecode::window)
        return std::make_unique<PagedSnapKVWindow>(config, paged, kv, pool, make_snapkv_score(params));
      return std::make_unique<PagedSnapKV>(config, paged, kv, pool, make_snapkv_score(params));
  }
  throw std::invalid_argument("kvevict::make_paged_cache: unknown policy");
}

}  // namespace kvevict
