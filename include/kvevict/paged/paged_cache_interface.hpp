// paged/paged_cache_interface.hpp — the runtime interface of a paged cache
// (`CacheInterface` plus page counts), what `make_paged_cache` returns.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>

#include "kvevict/cache_interface.hpp"
#include "kvevict/paged/page_eviction.hpp"  // EvictUnit

namespace kvevict {

/// Runtime interface of a paged cache: `CacheInterface` plus the page counts.
/// `length(h)`, `positions(h)` and `retained_positions(h)` are the same for
/// every KV head (one selection per layer); `scores(h)` are per KV head.
class PagedCacheInterface : public CacheInterface {
 public:
  /// Pages the sequence holds now, `ceil(length / page_size)`.
  virtual std::size_t pages_in_use() const = 0;
  /// Pages this cache returned to the pool since construction (evictions and resets).
  virtual std::size_t pages_freed() const = 0;
  /// Token or page unit.
  virtual EvictUnit evict_unit() const = 0;
};

}  // namespace kvevict
