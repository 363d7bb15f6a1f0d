// kvevict — bench/quality/reindex.cpp: positions re-indexed after every eviction (reindex.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "reindex.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#include "kvevict/attention/rope.hpp"

namespace kvquality {

PositionReindexer::PositionReindexer(const llama2::Config& config)
    : n_kv_heads_(config.n_kv_heads),
      seq_len_(config.seq_len),
      rotated_at_(config.n_layers * config.n_kv_heads * (config.seq_len + 1), 0) {}

// The new token sits at cache index n (the block's live slots before it).
std::size_t PositionReindexer::rotary_position(const llama2::Engine& engine, std::size_t layer,
                                               std::size_t position) {
  const std::size_t rot = engine.retained(layer, 0);
  for (std::size_t h = 0; h < n_kv_heads_; ++h) rotated_at(layer, h, position) = static_cast<std::int64_t>(rot);
  return rot;
}

// Slots into position order, then each key from the position it is rotated at to its slot index
// (kvevict::rope_rotate_key: Δ = index − rotated_at, the angle in double). O(n log n + n · head_dim).
void PositionReindexer::after_cache(llama2::Engine& engine, std::size_t layer, kvevict::CacheInterface& cache,
                                    bool prompt) {
  const kvevict::KVView<float>& view = engine.view(layer);
  if (prompt)  // the prompt's keys are rotated at their own positions
    for (std::size_t h = 0; h < view.n_kv_heads; ++h)
      for (std::size_t s = 0; s < view.length(h); ++s) {
        const std::int64_t pos = view.head_positions(h)[s];
        rotated_at(layer, h, static_cast<std::size_t>(pos)) = pos;
      }
  cache.restore_position_order();
  for (std::size_t h = 0; h < view.n_kv_heads; ++h)
    for (std::size_t s = 0; s < view.length(h); ++s) {
      std::int64_t& at = rotated_at(layer, h, static_cast<std::size_t>(view.head_positions(h)[s]));
      const auto index = static_cast<std::int64_t>(s);
      if (at == index) continue;
      kvevict::rope_rotate_key(view, h, s, static_cast<double>(index - at));
      at = index;
    }
}

void reindex_positions(llama2::Engine& engine) {
  if (engine.position() != 0)
    throw std::logic_error("kvquality::reindex_positions: the sequence has already started (position " +
                           std::to_string(engine.position()) + "); call reset() first");
  if (engine.paged())
    throw std::invalid_argument("kvquality::reindex_positions: re-indexed positions need the contiguous KV layout "
                                "(the engine is paged)");
  engine.set_hooks(std::make_unique<PositionReindexer>(engine.config()));
}

bool reindexes_positions(const llama2::Engine& engine) {
  return dynamic_cast<const PositionReindexer*>(engine.hooks()) != nullptr;
}

}  // namespace kvquality
