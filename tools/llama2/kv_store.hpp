// kvevict tools — llama2/kv_store.hpp: the engine's KV storage (contiguous or paged) and its eviction caches.
// SPDX-License-Identifier: Apache-2.0
//
// `Engine` runs the same forward pass over either layout: it appends each block's K/V through `KVStore`,
// attends over the view the store returns and hands the logits to the store's cache. Everything that
// differs between the layouts (buffers vs pages, the caches' types, pages held) lives in the two stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kvevict/cache_interface.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/kv/kv_buffer.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_cache.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "llama2/model.hpp"

namespace llama2 {

/// Builds the eviction cache of block `layer` over that block's KV view, or
/// returns `nullptr` to keep the full cache. Called once per layer by the
/// `Engine` constructor and by `Engine::reset`.
using CacheFactory =
    std::function<std::unique_ptr<kvevict::CacheInterface>(std::size_t layer, const kvevict::KVView<float>& view)>;

/// Builds the paged eviction cache of block `layer` over that block's paged
/// view and page pool, or returns `nullptr` to keep every token. Called once
/// per layer by the paged `Engine` constructor and by `Engine::reset`.
using PagedCacheFactory = std::function<std::unique_ptr<kvevict::PagedCacheInterface>(
    std::size_t layer, const kvevict::PagedKVView<float>& view, kvevict::PagePool& pool)>;

/// Paged KV storage of an `Engine`: every block owns K and V page
/// pools of `ceil((context + 1) / page_size)` pages in `layout` (`Engine::context()`), a `PagePool`
/// over them and the sequence's page table (page unit: a budget k needs
/// `k + page_size <= ` that many slots).
struct PagedKVOptions {
  std::size_t page_size = 16;                             ///< tokens per page, >= 1
  kvevict::PageLayout layout = kvevict::PageLayout::NHD;  ///< NHD or HND
};

/// One engine's KV storage for all blocks, with each block's eviction cache (or none). Both layouts hold
/// `seq_len + 1` slots per block, one beyond the context, so that a budget k = seq_len is valid (a decode
/// step appends before it evicts). Internal to `Engine`; the two implementations are `ContiguousKVStore`
/// and `PagedKVStore`.
class KVStore {
 public:
  virtual ~KVStore() = default;
  /// Empties every block and rebuilds the caches with the factory (so seeds restart). Allocates.
  virtual void reset() = 0;
  /// Appends (k, v) (`[kv_head][head_dim]` each) at position `pos` to block `layer` and returns the view the
  /// attention runs over: every KV head's live slots `[0, n)`, n including the new token. `incremental`: the
  /// slots before the new one are unchanged since the last append to this block (no eviction in between),
  /// which the paged store uses to copy only the new slot into its gather scratch (shared by the blocks:
  /// the hint counts only if the store's previous append was to this block). Does not allocate.
  virtual const kvevict::KVView<float>& append(std::size_t layer, std::size_t pos, const float* k, const float* v,
                                               bool incremental) = 0;
  /// Live slots of `kv_head` of block `layer` (no bounds check).
  virtual std::size_t length(std::size_t layer, std::size_t kv_head) const = 0;
  /// The eviction cache of block `layer`, or `nullptr` for a full cache (no bounds check).
  virtual kvevict::CacheInterface* cache(std::size_t layer) = 0;
  virtual const kvevict::CacheInterface* cache(std::size_t layer) const = 0;
  /// Gives every cache `executor` (an empty `ExecutorRef`: serial).
  virtual void set_executor(kvevict::ExecutorRef executor) = 0;
  /// Bytes of K and V rows held now, all blocks.
  virtual std::size_t kv_bytes_held() const = 0;
  /// Pages held now and pages returned to the pools since the last `reset`, all blocks (contiguous: 0).
  virtual std::size_t pages_in_use() const { return 0; }
  virtual std::size_t pages_freed() const { return 0; }
  /// Block `layer`'s contiguous view, or `nullptr` for the paged store.
  virtual const kvevict::KVView<float>* view(std::size_t /*layer*/) const { return nullptr; }
  /// Block `layer`'s paged view and page pool, or `nullptr` for the contiguous store.
  virtual const kvevict::PagedKVView<float>* paged_view(std::size_t /*layer*/) const { return nullptr; }
  virtual const kvevict::PagePool* page_pool(std::size_t /*layer*/) const { return nullptr; }
  /// Whether the storage is paged.
  virtual bool paged() const = 0;
};

/// One `kvevict::KVBuffer<float>` per block, `[kv_head][slot][head_dim]`, capacity `seq_len + 1`; the caches
/// (from `CacheFactory`) evict by moving slots. The attention runs on the buffer's own view.
class ContiguousKVStore final : public KVStore {
 public:
  /// Storage for `config` (kept by reference; it must outlive the store), empty until `reset`.
  ContiguousKVStore(const Config& config, CacheFactory make_cache);
  void reset() override;
  const kvevict::KVView<float>& append(std::size_t layer, std::size_t pos, const float* k, const float* v,
                                       bool incremental) override;
  std::size_t length(std::size_t layer, std::size_t kv_head) const override { return views_[layer].length(kv_head); }
  kvevict::CacheInterface* cache(std::size_t layer) override { return caches_[layer].get(); }
  const kvevict::CacheInterface* cache(std::size_t layer) const override { return caches_[layer].get(); }
  void set_executor(kvevict::ExecutorRef executor) override;
  std::size_t kv_bytes_held() const override;
  const kvevict::KVView<float>* view(std::size_t layer) const override { return &views_[layer]; }
  bool paged() const override { return false; }

 private:
  Config config_;  // a copy: the engine that owns the store may be moved
  CacheFactory make_cache_;
  std::vector<kvevict::KVBuffer<float>> buffers_;
  std::vector<kvevict::KVView<float>> views_;
  std::vector<std::unique_ptr<kvevict::CacheInterface>> caches_;
};

/// Per block, K and V page pools in `PagedKVOptions::layout`, a `kvevict::PagePool` and the sequence's page
/// table; the caches (from `PagedCacheFactory`) are `kvevict::PagedCacheInterface`s. The attention runs on a
/// contiguous scratch the block's rows are gathered into, by logical slot, shaped exactly like a contiguous
/// block's buffer, so the logits (and every eviction decision) are bit for bit those of the contiguous layout
/// with `shared_heads` (a real engine would run a paged attention kernel instead).
class PagedKVStore final : public KVStore {
 public:
  /// Storage for `config` (kept by reference), empty until `reset`. Throws `std::invalid_argument` if
  /// `options.page_size` is 0 or the layout is unknown.
  PagedKVStore(const Config& config, const PagedKVOptions& options, PagedCacheFactory make_cache);
  void reset() override;
  const kvevict::KVView<float>& append(std::size_t layer, std::size_t pos, const float* k, const float* v,
                                       bool incremental) override;
  std::size_t length(std::size_t layer, std::size_t /*kv_head*/) const override { return layers_[layer]->length; }
  kvevict::CacheInterface* cache(std::size_t layer) override { return caches_[layer].get(); }
  const kvevict::CacheInterface* cache(std::size_t layer) const override { return caches_[layer].get(); }
  void set_executor(kvevict::ExecutorRef executor) override;
  std::size_t kv_bytes_held() const override;
  std::size_t pages_in_use() const override;
  std::size_t pages_freed() const override;
  const kvevict::PagedKVView<float>* paged_view(std::size_t layer) const override { return &layers_[layer]->view; }
  const kvevict::PagePool* page_pool(std::size_t layer) const override { return &layers_[layer]->pool; }
  bool paged() const override { return true; }

 private:
  /// One block's paged storage, at a stable address (the view points into it).
  struct Layer {
    std::vector<float> k, v;              // [num_pages][page] per PagedKVOptions::layout
    std::vector<std::int32_t> table;      // [num_pages]
    std::vector<std::int64_t> positions;  // [num_pages * page_size]
    std::size_t length = 0;
    kvevict::PagePool pool;
    kvevict::PagedKVView<float> view;
    explicit Layer(std::size_t num_pages) : pool(num_pages) {}
  };
  /// Copies slots `[from, length)` of `pv` into the gather scratch (lengths = length).
  const kvevict::KVView<float>& gather(const kvevict::PagedKVView<float>& pv, std::size_t from);

  Config config_;  // a copy: the engine that owns the store may be moved
  PagedKVOptions options_;
  PagedCacheFactory make_cache_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::unique_ptr<kvevict::PagedCacheInterface>> caches_;
  std::unique_ptr<kvevict::KVBuffer<float>> gather_buffer_;  // [kv_head][seq_len + 1][head_dim]
  static constexpr std::size_t kNoLayer = static_cast<std::size_t>(-1);
  std::size_t gathered_layer_ = kNoLayer;  // the block whose slots the gather scratch holds
  kvevict::KVView<float> gather_view_;
};

}  // namespace llama2
