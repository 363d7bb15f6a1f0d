// cache_interface.hpp — the calls an engine makes, as a runtime interface.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kvevict/core/executor.hpp"
#include "kvevict/score/chunk_rows.hpp"

namespace kvevict {

/// The prompt score `Cache::prefill_from_attention` takes, per query head and slot, summed over the prompt's
/// queries (`kvevict::causal_attention` computes either kind beside the attention's output):
///  - `attention` — H2O (`AccumulatedAttentionScore`): the attention probabilities `softmax(x)`;
///  - `gumbel` — Keyformer (`GumbelLogitScore`): `softmax((x + noise_scale · ζ) / tau)` (Adnan et al. 2024,
///    Eq. 7 at τ₀ = `tau`), ζ of query head h, prompt row r, slot c drawn with `seed` as the cache draws it
///    (`fill_gumbel_row(gumbel_row_key(seed, h, r), c, ...)`), or 0 when `noise` is false;
///  - `none` — the cache takes no sums (`prefill_from_attention` refuses).
struct PromptSums {
  enum class Kind { none, attention, gumbel };
  Kind kind = Kind::none;
  std::uint64_t seed = 0;    ///< `gumbel`: the noise seed (the cache's latest)
  float tau = 1.0f;          ///< `gumbel`: τ₀, the prompt's temperature
  float noise_scale = 1.0f;  ///< `gumbel`: s in (0, 1]
  bool noise = false;        ///< `gumbel`: whether ζ is drawn
};

/// Runtime interface of an evicting KV cache for one layer, implemented by
/// every `Cache<Score, Temperature, Selection>`. Engines that pick the policy
/// at run time (see `make_cache`) hold a `std::unique_ptr<CacheInterface>`;
/// engines that know it at compile time use the concrete type (the calls are
/// then direct: `Cache` is `final`).
///
/// Protocol per sequence: append the prompt's K/V to the view, `prefill` (or,
/// chunk by chunk, append + `prefill_chunk`, then `finish_prefill`), then per generated token append its K/V and call
/// `decode_step` (or, head by head while the logits are hot, `begin_decode_step`, `score_decode_head`,
/// `end_decode_step`). `reset` starts a new sequence. See `Cache` for the full contract.
class CacheInterface {
 public:
  virtual ~CacheInterface() = default;

  /// Scores the prompt from its causal logits `[q_head][P][P]` and evicts to
  /// budget. `gumbel` (optional, same layout) injects pre-drawn noise ζ.
  virtual void prefill(const float* logits, std::size_t prompt_len, const float* gumbel = nullptr) = 0;
  /// Chunked prefill: scores a chunk of `chunk_len` prompt tokens the engine
  /// appended (slots `[held, n)`) from logits `[q_head][chunk_len][n]`; bounded
  /// prefill evicts to budget afterwards. See `Cache::prefill_chunk`. The
  /// default (a cache without chunked prefill, e.g. `PagedCache`) throws
  /// `std::logic_error`.
  virtual void prefill_chunk(const float* /*logits*/, std::size_t /*chunk_len*/, std::size_t /*n*/,
                             const float* /*gumbel*/ = nullptr) {
    throw std::logic_error("kvevict::CacheInterface::prefill_chunk: this cache has no chunked prefill");
  }
  /// The same chunk with rows computed on demand (`ChunkRows`, e.g. `prefill_chunk_qk`).
  virtual void prefill_chunk(ChunkRows& /*rows*/, std::size_t /*chunk_len*/, std::size_t /*n*/) {
    throw std::logic_error("kvevict::CacheInterface::prefill_chunk: this cache has no chunked prefill");
  }
  /// What `prefill_from_attention` takes as this cache's prompt score (`PromptSums`). The default (a cache
  /// without it) is `PromptSums::Kind::none`.
  virtual PromptSums prompt_sums() const { return {}; }
  /// The prefill from the prompt's score summed over its queries, `[q_head][P]` (H2O's attention probabilities,
  /// Keyformer's noisy ones: `prompt_sums`; see `Cache::prefill_from_attention`). The default (a cache without
  /// it, e.g. `PagedCache`) throws `std::logic_error`.
  virtual void prefill_from_attention(const float* /*sums*/, std::size_t /*prompt_len*/) {
    throw std::logic_error("kvevict::CacheInterface::prefill_from_attention: this cache has no prefill from attention");
  }
  /// Ends a chunked prefill: cuts to budget; decode steps may follow.
  virtual void finish_prefill() {
    throw std::logic_error("kvevict::CacheInterface::finish_prefill: this cache has no chunked prefill");
  }
  /// Scores one decode step from logits `[q_head][n]` (by slot) and evicts at
  /// most one token per KV head. `gumbel` (optional, `[q_head][n]`) injects ζ.
  virtual void decode_step(const float* logits, std::size_t n, const float* gumbel = nullptr) = 0;
  /// The decode step in parts, each KV head scored right after the engine computed its logits (still
  /// in cache): `begin_decode_step(n)`, `score_decode_head(j, logits_j)` for every KV head `j`
  /// (`[g][n]`, distinct heads possibly on concurrent threads), `end_decode_step()`; the same state as
  /// `decode_step` with the rows concatenated, bit for bit. See `Cache::begin_decode_step`. The
  /// defaults (a cache without the per-head step) throw `std::logic_error`.
  virtual void begin_decode_step(std::size_t /*n*/) {
    throw std::logic_error("kvevict::CacheInterface::begin_decode_step: this cache has no per-head decode step");
  }
  /// See `begin_decode_step`.
  virtual void score_decode_head(std::size_t /*kv_head*/, const float* /*logits*/, const float* /*gumbel*/ = nullptr) {
    throw std::logic_error("kvevict::CacheInterface::score_decode_head: this cache has no per-head decode step");
  }
  /// See `begin_decode_step`.
  virtual void end_decode_step() {
    throw std::logic_error("kvevict::CacheInterface::end_decode_step: this cache has no per-head decode step");
  }
  /// Whether this cache has the per-head decode step (every `Cache` does; the defaults above do not).
  virtual bool has_per_head_step() const { return false; }
  /// Forgets the sequence (lengths 0, scores 0, step 0) and sets the noise seed.
  virtual void reset(std::uint64_t seed) = 0;
  /// Runs the scoring on `executor`'s workers (see `Cache::set_executor`); bit-identical
  /// results for any executor. Allocates per-task scratch. The default (a cache without
  /// parallel scoring) throws `std::logic_error`.
  virtual void set_executor(ExecutorRef /*executor*/) {
    throw std::logic_error("kvevict::CacheInterface::set_executor: this cache has no parallel scoring");
  }

  /// Makes this cache a copy of `other`'s eviction state over its own storage (see `Cache::copy_state_from`);
  /// throws `std::invalid_argument` for a cache of another policy or configuration. The default (a cache
  /// without it) throws `std::logic_error`.
  virtual void copy_state_from(const CacheInterface& /*other*/) {
    throw std::logic_error("kvevict::CacheInterface::copy_state_from: this cache cannot copy another's state");
  }

  /// Resolved budget `k`. Reads 0 until the first prefill (or `finish_prefill`) resolves it, also for a
  /// token budget, and again after `reset`: 0 means "not resolved yet", never "keep nothing" (a resolved
  /// `k` is >= 1). See `budget_resolved()`.
  virtual std::size_t budget() const = 0;
  /// Whether `budget()` is resolved: the prompt has been prefilled since construction or `reset`
  /// (`budget() != 0`; a ratio budget needs the prompt's length). O(1).
  bool budget_resolved() const { return budget() != 0; }
  /// Resolved recent window `w` (0 before the first prefill).
  virtual std::size_t recent_window() const = 0;
  /// Decode steps done since prefill.
  virtual std::size_t step() const = 0;
  /// τ used by the latest prefill or decode step.
  virtual float temperature() const = 0;
  /// Live slots of KV head `h`. Throws `std::invalid_argument` if `h` is out of range.
  virtual std::size_t length(std::size_t h) const = 0;
  /// Scores of KV head `h`, by slot, `[length(h)]`, aligned with the view's rows.
  virtual const float* scores(std::size_t h) const = 0;
  /// Position IDs of KV head `h`, by slot, `[length(h)]`, aligned with the view's rows.
  virtual const std::int64_t* positions(std::size_t h) const = 0;
  /// Retained position IDs of KV head `h`, ascending. O(n log n); allocates.
  virtual std::vector<std::int64_t> retained_positions(std::size_t h) const = 0;
  /// Reorders every head's slots into ascending position order (K, V, position
  /// IDs and scores together). O(n log n + n · head_dim) per head.
  virtual void restore_position_order() = 0;
};

}  // namespace kvevict
