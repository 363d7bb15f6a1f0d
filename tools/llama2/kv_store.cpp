// kvevict tools — llama2/kv_store.cpp: the contiguous and the paged KV stores of the engine.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/kv_store.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace llama2 {

ContiguousKVStore::ContiguousKVStore(const Config& config, CacheFactory make_cache)
    : config_(config), make_cache_(std::move(make_cache)) {}

void ContiguousKVStore::reset() {
  // Built aside and swapped in, so that a factory that throws leaves the store as it was; the old caches
  // go before the old buffers they view.
  const Config& c = config_;
  std::vector<kvevict::KVBuffer<float>> buffers;
  std::vector<kvevict::KVView<float>> views;
  std::vector<std::unique_ptr<kvevict::CacheInterface>> caches;
  buffers.reserve(c.n_layers);  // no reallocation: the views and caches point into the buffers
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    buffers.emplace_back(c.n_kv_heads, c.seq_len + 1, c.head_dim());
    views.push_back(buffers.back().view());
    caches.push_back(make_cache_ ? make_cache_(l, views.back()) : nullptr);
  }
  caches_ = std::move(caches);
  views_ = std::move(views);
  buffers_ = std::move(buffers);
}

const kvevict::KVView<float>& ContiguousKVStore::append(std::size_t layer, std::size_t pos, const float* k,
                                                        const float* v, bool /*incremental*/) {
  views_[layer].append(static_cast<std::int64_t>(pos), k, v);
  return views_[layer];
}

void ContiguousKVStore::set_executor(kvevict::ExecutorRef executor) {
  for (auto& cache : caches_)
    if (cache) cache->set_executor(executor);
}

std::size_t ContiguousKVStore::kv_bytes_held() const {
  std::size_t bytes = 0;
  for (const auto& b : buffers_) bytes += b.live_kv_bytes();
  return bytes;
}

PagedKVStore::PagedKVStore(const Config& config, const PagedKVOptions& options, PagedCacheFactory make_cache)
    : config_(config), options_(options), make_cache_(std::move(make_cache)) {
  if (options.page_size == 0) throw std::invalid_argument("llama2::Engine: page_size must be >= 1 (got 0)");
  if (options.layout != kvevict::PageLayout::NHD && options.layout != kvevict::PageLayout::HND)
    throw std::invalid_argument("llama2::Engine: unknown page layout " +
                                std::to_string(static_cast<int>(options.layout)));
  // Shaped exactly like a contiguous block's buffer (capacity seq_len + 1), so that the attention
  // runs on the same strides and the logits match the contiguous layout bit for bit.
  gather_buffer_ = std::make_unique<kvevict::KVBuffer<float>>(config.n_kv_heads, config.seq_len + 1,
                                                              config.head_dim());
  gather_view_ = gather_buffer_->view();
}

void PagedKVStore::reset() {
  const Config& c = config_;
  // Built aside and swapped in, so that a factory that throws leaves the store as it was; the old caches
  // go before the old layers they view.
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::unique_ptr<kvevict::PagedCacheInterface>> caches;
  // seq_len + 1 slots, as the contiguous buffers: a budget k = seq_len stays valid.
  const std::size_t ps = options_.page_size, pages = (c.seq_len + 1 + ps - 1) / ps, hd = c.head_dim();
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    auto pl = std::make_unique<Layer>(pages);
    pl->k.assign(pages * ps * c.n_kv_heads * hd, 0.0f);
    pl->v.assign(pl->k.size(), 0.0f);
    pl->table.assign(pages, kvevict::kNoPage);
    pl->positions.assign(pages * ps, 0);
    pl->view.k = pl->k.data();
    pl->view.v = pl->v.data();
    pl->view.num_pages = pages;
    pl->view.page_size = ps;
    pl->view.n_kv_heads = c.n_kv_heads;
    pl->view.head_dim = hd;
    pl->view.layout = options_.layout;
    pl->view.page_table = pl->table.data();
    pl->view.max_pages = pages;
    pl->view.length = &pl->length;
    pl->view.positions = pl->positions.data();
    pl->view.validate();
    layers.push_back(std::move(pl));
    Layer& layer = *layers.back();
    caches.push_back(make_cache_ ? make_cache_(l, layer.view, layer.pool) : nullptr);
  }
  caches_ = std::move(caches);
  layers_ = std::move(layers);
  gathered_layer_ = kNoLayer;
}

const kvevict::KVView<float>& PagedKVStore::gather(const kvevict::PagedKVView<float>& pv, std::size_t from) {
  const std::size_t n = *pv.length, bytes = pv.head_dim * sizeof(float);
  for (std::size_t h = 0; h < pv.n_kv_heads; ++h) {
    for (std::size_t s = from; s < n; ++s) {
      std::memcpy(gather_view_.k_row(h, s), pv.k_row(h, s), bytes);
      std::memcpy(gather_view_.v_row(h, s), pv.v_row(h, s), bytes);
    }
    std::copy(pv.positions + from, pv.positions + n, gather_view_.head_positions(h) + from);
    gather_view_.lengths[h] = n;
  }
  return gather_view_;
}

const kvevict::KVView<float>& PagedKVStore::append(std::size_t layer, std::size_t pos, const float* k,
                                                   const float* v, bool incremental) {
  Layer& pl = *layers_[layer];
  pl.pool.append(pl.view, static_cast<std::int64_t>(pos), k, v);
  // The gather scratch is shared by the blocks: it holds this block's slots only if the previous append
  // was to this block.
  const bool only_new = incremental && gathered_layer_ == layer;
  gathered_layer_ = layer;
  return gather(pl.view, only_new ? pl.length - 1 : 0);
}

void PagedKVStore::set_executor(kvevict::ExecutorRef executor) {
  for (auto& cache : caches_)
    if (cache) cache->set_executor(executor);
}

std::size_t PagedKVStore::kv_bytes_held() const {
  std::size_t bytes = 0;
  for (const auto& pl : layers_) bytes += pl->length * 2 * config_.kv_dim() * sizeof(float);
  return bytes;
}

std::size_t PagedKVStore::pages_in_use() const {
  std::size_t n = 0;
  for (const auto& pl : layers_) n += pl->pool.used_pages();
  return n;
}

std::size_t PagedKVStore::pages_freed() const {
  std::size_t n = 0;
  for (const auto& pl : layers_) n += pl->pool.pages_released();
  return n;
}

}  // namespace llama2
