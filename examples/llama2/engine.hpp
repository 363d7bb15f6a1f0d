// kvevict example — llama2/engine.hpp: the Llama-2 forward pass over kvevict KV caches.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <Eigen/Core>

#include "kvevict/cache_interface.hpp"
#include "kvevict/kv/kv_buffer.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "llama2/model.hpp"

namespace llama2 {

/// Row-major float matrix (`[rows][cols]`, rows contiguous).
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Builds the eviction cache of block `layer` over that block's KV view, or
/// returns `nullptr` to keep the full cache. Called once per layer by the
/// `Engine` constructor and by `Engine::reset`.
using CacheFactory =
    std::function<std::unique_ptr<kvevict::CacheInterface>(std::size_t layer, const kvevict::KVView<float>& view)>;

/// Single-sequence Llama-2 inference (RMSNorm, RoPE on interleaved pairs,
/// grouped-query attention, SwiGLU, tied or separate classifier) in float32.
///
/// KV cache: one `kvevict::KVBuffer<float>` per block, `[kv_head][slot][head_dim]`,
/// capacity `seq_len`. A key is rotated (RoPE) once, when it is appended, with
/// its token's position; the query is rotated with the current position.
/// Attention runs over the live slots `[0, view.length(h))` of each KV head, in
/// slot order (which is not position order after an eviction; RoPE makes that
/// irrelevant). The pre-softmax attention logits `q·k / sqrt(head_dim)` of each
/// block go to that block's eviction cache, if the factory made one:
///  - `prefill` appends the prompt token by token, query t attending to slots
///    `[0, t]` (causal), and only after the whole prompt hands the cache the
///    `[q_head][P][P]` logits (row t = query t, columns 0..t valid, the rest 0);
///    the cache then evicts to its budget. With a prefill chunk `C > 0` the
///    block instead hands its cache each chunk's `[q_head][C][n]` logits as
///    soon as the chunk's K/V are in (`prefill_chunk`), then `finish_prefill`:
///    a bounded-prefill cache evicts between chunks, so the chunk's queries
///    attend to the tokens kept so far plus the chunk (README "Long prompts");
///    otherwise the ids equal the one-shot path's exactly (same arithmetic);
///  - `step` appends the new token, attends, then hands the cache the
///    `[q_head][n]` logits by slot (n = live slots including the new token) and
///    the cache evicts at most one slot per KV head.
///
/// The engine keeps a reference to `model`, which must outlive it. `step`
/// does not allocate.
class Engine {
 public:
  /// An engine at position 0 with empty caches. `make_cache` (optional) picks
  /// each block's eviction policy; empty = full cache everywhere.
  /// `prefill_chunk`: 0 = one-shot prefill; `C >= 1` = chunked prefill in
  /// chunks of `C` tokens (the caches should be built with
  /// `CacheConfig::max_prefill_chunk >= C`; see `EvictionSettings`).
  explicit Engine(const Model& model, CacheFactory make_cache = {}, std::size_t prefill_chunk = 0);

  /// Runs `tokens` (ids in `[0, vocab)`) at positions `0 .. P-1` with full
  /// causal attention, then lets each block's cache evict to its budget.
  /// Returns the next-token logits for every prompt position, `[P][vocab]`,
  /// valid until the next `prefill` or `reset`.
  /// Throws `std::logic_error` unless `position() == 0`, `std::invalid_argument`
  /// if `tokens` is empty, longer than `seq_len` or holds an id out of range,
  /// and whatever the cache throws (e.g. a budget that resolves to 0); after
  /// any of these the engine is reset (position 0, empty caches).
  const RowMatrix& prefill(const std::vector<int>& tokens);

  /// Runs one token at position `position()` and advances. Returns the
  /// next-token logits `[vocab]`, valid until the next call.
  /// Throws `std::invalid_argument` for an id out of range and
  /// `std::length_error` when `position() == seq_len` (RoPE positions beyond
  /// the trained context are not supported).
  const float* step(int token);

  /// Starts a new sequence: empties every KV buffer and rebuilds the caches
  /// with the factory given to the constructor (so seeds restart). Allocates.
  void reset();

  /// Prefill chunk size `C` (0 = one-shot).
  std::size_t prefill_chunk() const { return prefill_chunk_; }
  /// Tokens processed so far (the position of the next token).
  std::size_t position() const { return position_; }
  /// Live KV entries of `kv_head` of block `layer` (no bounds check).
  std::size_t retained(std::size_t layer, std::size_t kv_head = 0) const { return views_[layer].length(kv_head); }
  /// The KV view of block `layer` (no bounds check).
  const kvevict::KVView<float>& view(std::size_t layer) const { return views_[layer]; }
  /// The eviction cache of block `layer`, or `nullptr` for a full cache.
  const kvevict::CacheInterface* cache(std::size_t layer) const { return caches_[layer].get(); }
  /// Bytes of K and V rows currently held, all blocks.
  std::size_t kv_bytes_held() const;
  /// Bytes a full cache would hold at this position: `position * n_layers * 2 * kv_dim * 4`.
  std::size_t kv_bytes_full() const;
  const Config& config() const { return model_.config(); }

 private:
  const RowMatrix& run_prefill(const std::vector<int>& tokens);
  void check_token(int token, const char* where) const;
  void rope(float* v, std::size_t n_heads, std::size_t pos) const;
  void attend(const kvevict::KVView<const float>& view, const float* q, float* logits, float* out);

  const Model& model_;
  CacheFactory make_cache_;
  std::vector<kvevict::KVBuffer<float>> buffers_;
  std::vector<kvevict::KVView<float>> views_;
  std::vector<std::unique_ptr<kvevict::CacheInterface>> caches_;
  std::size_t position_ = 0;
  std::size_t prefill_chunk_ = 0;

  std::vector<float> rope_cos_, rope_sin_;  // [seq_len][head_dim / 2]

  // Decode-step scratch, allocated once.
  Eigen::VectorXf x_, xb_, xb2_, q_, k_, v_, h1_, h3_, logits_;
  std::vector<float> att_logits_;  // [n_heads][seq_len], one block at a time
  std::vector<float> att_probs_;   // [seq_len]

  // Prefill storage, grown on demand.
  RowMatrix prefill_logits_;           // [P][vocab]
  std::vector<float> prompt_attention_logits_;   // [n_heads][P][P] (chunked: [n_heads][C][n]), one block at a time
};

}  // namespace llama2
