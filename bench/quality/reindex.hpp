// kvevict — bench/quality/reindex.hpp: the quality report's "+reindexed" rows: positions re-indexed after
// every eviction, on a llama2 engine through its hooks.
// SPDX-License-Identifier: Apache-2.0
//
// Keyformer §4.4.1 / Table 3 ablation (StreamingLLM's positions within the cache; OpenVINO GenAI's cache
// rotation). An engine keeps the RoPE rotation of each key's original position; re-indexed, after every
// eviction of a block (prefill cut, decode step) the block's slots are sorted into position order
// (`CacheInterface::restore_position_order`) and each retained key is re-rotated (`kvevict::rope_rotate_key`,
// interleaved pairs, θ = 10000, the angle in double) to its cache index: slots 0..n-1 hold keys at positions
// 0..n-1, and a decode step's query and key use position n (the block's live slots before the new token).
// The view's position IDs stay the original ones (the caches' recency and sinks use them). Without eviction
// nothing changes (cache index = position). During a chunked prefill the chunks use the original positions;
// the keys are re-indexed once the prompt is finished. Contiguous layout only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "llama2/engine.hpp"

namespace kvquality {

/// The re-indexing hooks of one engine (see above). A decode step stays allocation-free: the table of
/// rotations is sized once, `[layer][kv_head][seq_len + 1]` by original position.
class PositionReindexer final : public llama2::EngineHooks {
 public:
  /// For an engine of model config `config`.
  explicit PositionReindexer(const llama2::Config& config);
  std::size_t rotary_position(const llama2::Engine& engine, std::size_t layer, std::size_t position) override;
  void after_cache(llama2::Engine& engine, std::size_t layer, kvevict::CacheInterface& cache, bool prompt) override;

 private:
  /// The position the key of (layer, kv_head, original position `pos`) is rotated at.
  std::int64_t& rotated_at(std::size_t layer, std::size_t kv_head, std::size_t pos) {
    return rotated_at_[(layer * n_kv_heads_ + kv_head) * (seq_len_ + 1) + pos];
  }

  std::size_t n_kv_heads_, seq_len_;
  std::vector<std::int64_t> rotated_at_;
};

/// Re-indexes `engine`'s positions from now on (installs a `PositionReindexer` as its hooks, replacing any).
/// Throws `std::logic_error` unless `engine.position() == 0`, `std::invalid_argument` for a paged engine;
/// the engine is unchanged then.
void reindex_positions(llama2::Engine& engine);

/// Whether `engine`'s hooks are a `PositionReindexer`.
bool reindexes_positions(const llama2::Engine& engine);

}  // namespace kvquality
