// kvevict tools — llama2/engine.hpp: the Llama-2 forward pass over kvevict KV caches.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include <Eigen/Core>

#include "kvevict/cache_interface.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "kvevict/score/expected_attention.hpp"
#include "llama2/kv_store.hpp"
#include "llama2/model.hpp"
#include "thread_pool.hpp"

namespace llama2 {

/// Row-major float matrix (`[rows][cols]`, rows contiguous).
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

class Engine;

/// What a research harness may observe or change in an `Engine`'s forward pass (`Engine::set_hooks`; the
/// quality harness records the full cache's attention for its oracle and re-indexes positions with it).
/// Every member does nothing by default. Called on the engine's thread, never from its pool; in a decode
/// step a hook must not allocate if the step is to stay allocation-free.
class EngineHooks {
 public:
  virtual ~EngineHooks() = default;
  /// Decode step, block `layer`, before the new token's key joins the block: the position at which the token
  /// at `position` has its query and key RoPE-rotated. Default: `position`.
  virtual std::size_t rotary_position(const Engine& /*engine*/, std::size_t /*layer*/, std::size_t position) {
    return position;
  }
  /// Decode step, after the attention and before the block's cache sees the logits: block `layer`'s
  /// pre-softmax logits `q·k / sqrt(head_dim)`, `[q_head][n]` row-major by slot (`n` = live slots of the
  /// block, the new token included), valid only during the call. `Engine::view(layer)` gives the slots'
  /// position IDs (a full cache: slot = position).
  virtual void decode_attention(const Engine& /*engine*/, std::size_t /*layer*/, const float* /*logits*/,
                                std::size_t /*n*/) {}
  /// After block `layer`'s eviction cache `cache` has seen the logits: at the end of the prompt
  /// (`prompt` true; chunked prefill: after `finish_prefill`) and after every decode step. The hook may
  /// reorder the cache (`restore_position_order`) and rewrite the keys of `Engine::view(layer)`. Blocks
  /// without a cache are not reported.
  virtual void after_cache(Engine& /*engine*/, std::size_t /*layer*/, kvevict::CacheInterface& /*cache*/,
                           bool /*prompt*/) {}
};

/// The prompt positions `Engine::prefill` returns logits for.
enum class PrefillLogits { all, last };

/// Single-sequence Llama-2 inference (RMSNorm, RoPE on interleaved pairs,
/// grouped-query attention, SwiGLU, tied or separate classifier) in float32.
///
/// KV cache: one `kvevict::KVBuffer<float>` per block, `[kv_head][slot][head_dim]`,
/// capacity `context()`. A key is rotated (RoPE) once, when it is appended, with
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
///    attend to the tokens kept so far plus the chunk (docs/long-prompts.md);
///    otherwise the ids equal the one-shot path's exactly (same arithmetic);
///  - `step` appends the new token, attends, then hands the cache the
///    `[q_head][n]` logits by slot (n = live slots including the new token) and
///    the cache evicts at most one slot per KV head.
///
/// Paged layout (second constructor): each block's K/V live in pages taken
/// from the block's `PagePool` by `PagePool::append`; attention gathers the
/// sequence's rows, by logical slot, into one contiguous scratch view shaped
/// like the contiguous layout's buffer (a real engine would run a paged
/// attention kernel instead), so the logits, and with them every eviction
/// decision, are bit for bit those of the contiguous layout with
/// `shared_heads`. The caches are `kvevict::PagedCacheInterface`s. The two
/// layouts are the two `KVStore`s (kv_store.hpp); the forward pass is one.
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
  /// `context`: the most positions the engine holds (0 = the model's `seq_len`); the KV buffers, the
  /// RoPE tables and the attention scratch are sized for it, so an engine for a 2K-token window of an
  /// 8K-context model holds a quarter of the memory. Throws `std::invalid_argument` if `context` exceeds
  /// `model.config().seq_len`.
  explicit Engine(const Model& model, CacheFactory make_cache = {}, std::size_t prefill_chunk = 0,
                  std::size_t context = 0);
  /// An engine with paged KV storage (see above); `make_cache` (optional) picks
  /// each block's paged eviction cache; `context` as above. Throws `std::invalid_argument` if
  /// `paged.page_size` is 0, the layout is unknown or `context` exceeds the model's `seq_len`.
  Engine(const Model& model, const PagedKVOptions& paged, PagedCacheFactory make_cache = {},
         std::size_t context = 0);

  /// Runs `tokens` (ids in `[0, vocab)`) at positions `0 .. P-1` with full
  /// causal attention, then lets each block's cache evict to its budget.
  /// Returns the next-token logits for every prompt position, `[P][vocab]`
  /// (`set_prefill_logits(PrefillLogits::last)`: `[1][vocab]`, the last position's, within a few ulp
  /// of that row of `[P][vocab]`: a one-row product sums in another order),
  /// valid until the next `prefill` or `reset`. The weight products run on the
  /// pool of `set_threads` / `set_pool` in fixed blocks of output features, so the
  /// floats are the same for every thread count.
  /// Throws `std::logic_error` unless `position() == 0`, `std::invalid_argument`
  /// if `tokens` is empty, longer than `context()` or holds an id out of range,
  /// and whatever the cache throws (e.g. a budget that resolves to 0); after
  /// any of these the engine is reset (position 0, empty caches).
  const RowMatrix& prefill(const std::vector<int>& tokens);

  /// Runs one token at position `position()` and advances. Returns the
  /// next-token logits `[vocab]` (also `logits()`), valid until the next call.
  /// Throws `std::invalid_argument` for an id out of range and
  /// `std::length_error` when `position() == context()` (RoPE positions beyond
  /// the trained context are not supported), the engine unchanged; and
  /// `std::invalid_argument` if the hooks' `rotary_position` returns a position >= `context()`
  /// ("llama2::Engine: EngineHooks::rotary_position returned 48 for block 0, position 5; it must be <
  /// context() = 48"), or whatever a hook or cache throws: the engine is then reset (position 0, empty
  /// caches), as after a failed `prefill`.
  const float* step(int token);

  /// `lead.prefill(tokens)`, and the same prompt into every engine of `followers` without running the
  /// model again for them. In a one-shot prefill no block's eviction changes the prompt's hidden states
  /// (every prompt query attends to the whole causal prefix before the block's cache evicts), so the
  /// lead's rotated K/V rows and `[q_head][P][P]` logits of each block are handed to each follower's store
  /// and cache as the follower's own prefill would have made them: every follower ends bit for bit as
  /// after its own `prefill(tokens)`, its prefill logits a copy of the lead's (the lead's
  /// `set_prefill_logits` mode). Costs one forward pass plus each follower's cache work, instead of one
  /// forward pass per engine (a quality harness comparing many policies on one prompt).
  /// Throws, changing no engine: `std::logic_error` unless `lead.position() == 0` (as `prefill`);
  /// `std::invalid_argument` for an empty prompt, one longer than the lead's `context()` or holding an id out
  /// of range, a chunked lead (`prefill_chunk() != 0`; also with no followers: use `prefill`), and a
  /// follower that is null, the lead, repeated, of another `Model` object, chunked, not at position 0 or
  /// whose `context()` is shorter than the prompt. Then whatever a cache throws, after which every engine
  /// is reset.
  static const RowMatrix& prefill_batch(Engine& lead, const std::vector<Engine*>& followers,
                                        const std::vector<int>& tokens);

  /// One decode step on each of `engines` (`tokens[i]` into `engines[i]`), bit for bit what each
  /// engine's own `step(tokens[i])` gives (`logits()` of each), with every block of weight rows read once
  /// for all engines: each task of a weight product (64 output features, fixed) runs the same Eigen
  /// product for every engine in turn while the rows are in cache, so a decode step, which reads every
  /// weight once per token, costs one pass over the weights per batch instead of one per engine. The
  /// weight products run on the pool of `engines[0]`, each engine's attention and cache on its own.
  /// Throws `std::invalid_argument` (no engine changed) if the sizes differ, an engine is null, repeated
  /// or of another `Model`, or a token is out of range, `std::length_error` if an engine is at its
  /// `context()`. When an engine's hook or cache throws (a bad `rotary_position` included, see `step`),
  /// that engine is reset and leaves the batch, and every other engine completes the step, bit for bit as
  /// if the failed engine had never been in the batch (so their next steps are those of a run that never
  /// failed); then the first exception, in (block, engine) order, propagates.
  static void step_batch(const std::vector<Engine*>& engines, const std::vector<int>& tokens);

  /// The next-token logits `[vocab]` of the last `step` or `step_batch` (unspecified before one).
  const float* logits() const { return logits_.data(); }
  /// The most positions this engine holds (the constructor's `context`, or the model's `seq_len`).
  std::size_t context() const { return config_.seq_len; }

  /// Which prompt positions `prefill` computes next-token logits for: every one (default) or the last
  /// one only (what generation needs; a [P][vocab] classifier product is skipped). Kept across `reset`.
  void set_prefill_logits(PrefillLogits which) { prefill_logits_mode_ = which; }

  /// Installs `hooks` (`nullptr`: none, the default), replacing and destroying the previous ones; the
  /// engine owns them. Kept across `reset`.
  /// Throws `std::invalid_argument` (nothing changed) for non-null hooks on an engine with Expected Attention.
  void set_hooks(std::unique_ptr<EngineHooks> hooks);
  /// The installed hooks, or `nullptr`.
  EngineHooks* hooks() const { return hooks_.get(); }

  /// Makes every block's cache rank by Expected Attention (Devoto et al. 2025, arXiv 2510.00636 §3; kvpress's
  /// ExpectedAttentionPress; `kvevict/score/expected_attention.hpp`) instead of by the attention logits:
  ///  - prefill: block l's pre-RoPE query rows from position `n_sink` on (all rows if the prompt is not longer
  ///    than `n_sink`) start its `kvevict::QueryStatistics`; the cache's last prompt row becomes
  ///    `expected_attention_logits` at next position P (the other rows as computed);
  ///  - each decode step: the new token's pre-RoPE queries join the statistics, and the cache's `decode_step`
  ///    gets `expected_attention_logits` at next position t + 1 in place of the step's logits (the model's
  ///    attention itself is unchanged; the per-head decode step is not used).
  /// The statistics accumulate over every query of the sequence (kvpress recomputes them from a window of
  /// recent hidden states) and are cleared by `reset`. The caches must score the last row and replace their
  /// scores each step (`kvevict::TOVA`, `Policy::tova`: `llama2::make_engine` with policy "tova" and
  /// `EvictionSettings::expected_attention` set builds exactly that); under another score the rows are still what it is given. KV heads of different
  /// lengths (`HeadBudgets::adaptive`: kvpress's AdaKV(ExpectedAttention)) work. `std::nullopt` turns it off.
  /// Throws `std::invalid_argument` (nothing changed) for a paged engine, a chunked prefill, installed hooks, a
  /// block without a cache, or options `expected_attention_scores` rejects (F = 0, ε negative or not finite);
  /// `std::logic_error` once the sequence has started. Cost per block and step: O(n_q_heads · (n · d² + d³)).
  void set_expected_attention(std::optional<kvevict::ExpectedAttentionOptions> options);
  /// The options of `set_expected_attention`, or `std::nullopt` (the default).
  const std::optional<kvevict::ExpectedAttentionOptions>& expected_attention() const { return ea_options_; }

  /// Starts a new sequence: empties every KV buffer and rebuilds the caches
  /// with the factory given to the constructor (so seeds restart). Allocates.
  void reset();

  /// Runs the work of every block on a pool of `threads` workers (the calling
  /// thread included; 1 = serial, the default): the decode step's attention
  /// (query heads as tasks) and each cache's scoring (`set_executor`: prefill and
  /// decode steps, bit-identical results for any thread count), also for the
  /// caches `reset` builds later. Throws `std::invalid_argument` if `threads` is
  /// 0 or above 1024. Allocates (the pool's threads, the caches' per-task scratch).
  void set_threads(std::size_t threads);
  /// As `set_threads`, on a pool the caller owns (shared by several engines that
  /// run one after another on one thread; it must outlive its use here); `nullptr`
  /// = serial. Allocates the caches' per-task scratch.
  void set_pool(kvtools::ThreadPool* pool);
  /// Worker threads in use (1 = serial).
  std::size_t threads() const { return pool_ ? pool_->workers() : 1; }
  /// Prefill chunk size `C` (0 = one-shot).
  std::size_t prefill_chunk() const { return prefill_chunk_; }
  /// Tokens processed so far (the position of the next token).
  std::size_t position() const { return position_; }
  /// Live KV entries of `kv_head` of block `layer` (no bounds check).
  std::size_t retained(std::size_t layer, std::size_t kv_head = 0) const { return store_->length(layer, kv_head); }
  /// The KV view of block `layer` (no bounds check). Contiguous layout only:
  /// throws `std::logic_error` for a paged engine (use `paged_view`).
  const kvevict::KVView<float>& view(std::size_t layer) const;
  /// The paged view of block `layer` (no bounds check). Paged layout only:
  /// throws `std::logic_error` for a contiguous engine.
  const kvevict::PagedKVView<float>& paged_view(std::size_t layer) const;
  /// The page pool of block `layer` (paged layout only, else `std::logic_error`).
  const kvevict::PagePool& page_pool(std::size_t layer) const;
  /// The eviction cache of block `layer`, or `nullptr` for a full cache.
  const kvevict::CacheInterface* cache(std::size_t layer) const { return store_->cache(layer); }
  /// Whether the KV storage is paged.
  bool paged() const { return store_->paged(); }
  /// Pages held now, all blocks (0 for the contiguous layout).
  std::size_t pages_in_use() const { return store_->pages_in_use(); }
  /// Pages returned to the blocks' pools since the last `reset` (0 for the contiguous layout).
  std::size_t pages_freed() const { return store_->pages_freed(); }
  /// Bytes of K and V rows currently held, all blocks.
  std::size_t kv_bytes_held() const { return store_->kv_bytes_held(); }
  /// Bytes a full cache would hold at this position: `position * n_layers * 2 * kv_dim * 4`.
  std::size_t kv_bytes_full() const;
  /// The model's configuration, except `seq_len`, which is `context()`.
  const Config& config() const { return config_; }

 private:
  void init();
  void gemm_t(RowMatrix& y, const RowMatrix& x, const float* w, std::size_t out, bool accumulate);
  /// Gives every cache the pool (`set_executor`), if there is one.
  void apply_executor();
  const RowMatrix& run_prefill(const std::vector<int>& tokens, const std::vector<Engine*>& followers);
  void check_prompt(const std::vector<int>& tokens, const char* where) const;
  /// The decode step of `n` distinct engines of one model, inputs already checked (`step`: n = 1).
  static void step_engines(Engine* const* engines, const int* tokens, std::size_t n);
  /// One engine's part of block `l` in a decode step: the hook's rotary position (checked), RoPE, the
  /// append, attention, the hooks and the block's cache. Throws what they throw.
  void step_attention(std::size_t l);
  /// `y = W x` (or `y += W x`) for each of `n` engines: `y`, `x` are the engines' members.
  static void gemv_engines(Engine* const* engines, std::size_t n, Eigen::VectorXf Engine::*y, const float* w,
                           std::size_t out, std::size_t in, Eigen::VectorXf Engine::*x, bool accumulate);
  void check_token(int token, const char* where) const;
  void rope(float* v, std::size_t n_heads, std::size_t pos) const;
  /// Expected Attention's rows for block `l` into `ea_rows_` (`[q_head][row_stride]`), from `ea_stats_[l]`.
  void expected_rows(std::size_t l, std::size_t next_position, std::size_t row_stride);
  /// Attention of one query per query head over the view: logits `[q_head][n]`, `n = row_stride(view)` (KV
  /// head `j`'s rows filled on `[0, lengths[j])` when the heads differ: head-adaptive budgets), then each
  /// head's softmax-weighted V.
  void attend(const kvevict::KVView<const float>& view, const float* q, float* logits, float* out);
  /// Whether the view's KV heads hold different lengths (a cache with `HeadBudgets::adaptive`). O(n_kv_heads).
  static bool ragged(const kvevict::KVView<const float>& view) noexcept;
  /// The decode logits' row stride: `max_j lengths[j]` (every head's length when they agree). O(n_kv_heads).
  static std::size_t row_stride(const kvevict::KVView<const float>& view) noexcept;
  /// Query head `h`'s share of `attend` after its logits: softmax of `logits[h]` (in its own probs row), then
  /// `out[h] = V[h / g]ᵀ · probs`. Safe for distinct `h` at once.
  void attend_values(const kvevict::KVView<const float>& view, std::size_t h, const float* logits,
                     float* out) noexcept;
  /// `attend` with the cache's per-head decode step: each query head's logits row, then the task that
  /// completes a KV head's group hands the group's rows to `cache.score_decode_head` while they are in
  /// cache, then its softmax and V product; `begin_decode_step` before, `end_decode_step` after. The same
  /// floats and the same cache state as `attend` + `decode_step` (used when the block has a cache with
  /// the per-head step and no hooks are installed).
  void attend_hot(const kvevict::KVView<const float>& view, const float* q, float* logits, float* out,
                  kvevict::CacheInterface& cache);

  const Model& model_;
  Config config_;                   // the model's, with seq_len = context (the stores keep a copy)
  std::unique_ptr<KVStore> store_;  // the KV layout: contiguous or paged, with each block's cache
  std::size_t position_ = 0;
  std::size_t prefill_chunk_ = 0;
  bool step_failed_ = false;  // set by step_engines while it takes an engine whose block threw out of the batch

  std::vector<float> rope_cos_, rope_sin_;  // [seq_len][head_dim / 2]
  std::unique_ptr<EngineHooks> hooks_;

  // Decode-step scratch, allocated once.
  Eigen::VectorXf x_, xb_, xb2_, q_, k_, v_, h1_, h3_, logits_;
  std::vector<float> att_logits_;  // [n_heads][seq_len], one block at a time
  std::vector<float> att_probs_;   // [n_heads][seq_len]: one row per query head (heads run in parallel)
  std::unique_ptr<std::atomic<std::size_t>[]> group_done_;  // [n_kv_heads]: rows of the group done (attend_hot)
  std::vector<std::exception_ptr> head_errors_;             // [n_kv_heads]: what score_decode_head threw
  kvtools::ThreadPool* pool_ = nullptr;             // null: serial
  std::unique_ptr<kvtools::ThreadPool> own_pool_;  // the pool of set_threads

  // Prefill storage, grown on demand.
  RowMatrix prefill_logits_;           // [P][vocab], or [1][vocab] for PrefillLogits::last
  PrefillLogits prefill_logits_mode_ = PrefillLogits::all;
  std::vector<float> prompt_attention_logits_;  // [n_heads][P][P] (chunked: [n_heads][C][n]), one block at a time

  // Expected Attention (set_expected_attention).
  std::optional<kvevict::ExpectedAttentionOptions> ea_options_;
  std::vector<kvevict::QueryStatistics> ea_stats_;  // [n_layers]
  kvevict::ExpectedAttentionScratch ea_ws_;
  std::vector<float> ea_rows_;  // [n_heads][seq_len]
  Eigen::VectorXf q_pre_;       // the decode step's queries before RoPE
};

}  // namespace llama2
