// paged_presets.hpp — the ready-made policies over paged storage: type aliases and
// `make_paged_cache` (the paged twin of presets.hpp, beside it: nothing under paged/ includes the presets).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <utility>

#include "kvevict/paged/paged_cache.hpp"
#include "kvevict/presets.hpp"

namespace kvevict {

namespace detail {
/// The paged twin of a contiguous cache type: `PagedTwinOf<Cache<S, T, Sel>>::type` is
/// `PagedCache<S, T, Sel>` (the same policies over paged storage). Compile time only.
template <class C>
struct PagedTwinOf;
template <class Score, class Temperature, class Selection>
struct PagedTwinOf<Cache<Score, Temperature, Selection>> {
  using type = PagedCache<Score, Temperature, Selection>;  ///< the paged cache with the same policies
};
/// `PagedTwinOf<C>::type`.
template <class C>
using PagedTwin = typename PagedTwinOf<C>::type;
}  // namespace detail

/// Keyformer, H2O, StreamingLLM, TOVA and SnapKV over paged storage (see presets.hpp): the paged twins of
/// the contiguous presets, so both read the one table `detail::PolicyTypes`.
using PagedKeyformer = detail::PagedTwin<Keyformer>;
using PagedH2O = detail::PagedTwin<H2O>;
using PagedStreamingLLM = detail::PagedTwin<StreamingLLM>;
using PagedTOVA = detail::PagedTwin<TOVA>;
/// SnapKV (prefill selection only in the token unit; the page unit ranks pages by the raw, unpooled
/// observation-window scores).
using PagedSnapKV = detail::PagedTwin<SnapKV>;
using PagedSnapKVWindow = detail::PagedTwin<SnapKVWindow>;
using PagedSnapKVKeyformer = detail::PagedTwin<SnapKVKeyformer>;
using PagedKeyNorm = detail::PagedTwin<KeyNorm>;
using PagedKeyDiff = detail::PagedTwin<KeyDiff>;
/// The mean-attention twins (token unit only: the page unit refuses them at construction).
using PagedH2OMean = detail::PagedTwin<H2OMean>;
using PagedKeyformerMean = detail::PagedTwin<KeyformerMean>;

/// Builds policy `p` over one paged sequence, exactly as `make_cache` builds
/// it over a contiguous view (same parameters, same checks: keyformer needs
/// `horizon >= 1`). `config.shared_heads` must be
/// true. Throws `std::invalid_argument` as the constructors do.
template <class T>
std::unique_ptr<PagedCacheInterface> make_paged_cache(Policy p, const CacheConfig& config,
                                                      const PagedEvictionConfig& paged, const PagedKVView<T>& kv,
                                                      PagePool& pool, const PolicyParams& params = PolicyParams()) {
  return detail::make_policy<PagedCache, PagedCacheInterface>(
      p, params, "kvevict::make_paged_cache",
      [&](auto type, auto&&... policies) -> std::unique_ptr<PagedCacheInterface> {
        using X = typename decltype(type)::type;
        return std::make_unique<X>(config, paged, kv, pool, std::forward<decltype(policies)>(policies)...);
      });
}

}  // namespace kvevict
