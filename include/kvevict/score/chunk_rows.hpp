// score/chunk_rows.hpp — where the logits rows of a prefill chunk come from: a
// materialised `[q_head][C][n]` array, or rows computed on demand (the Q·K helper,
// attention/qk_chunk_logits.hpp).
// SPDX-License-Identifier: Apache-2.0
//
// ---- Chunked prefill (docs/long-prompts.md) ---------------------------
// Protocol, per sequence: for each chunk of C prompt tokens, append their K/V to
// the view (positions keep rising; sinks and positions are the prompt's, global),
// compute the chunk's logits x[q_head][C][n] (n = live slots, chunk included,
// causal inside the chunk) and call `Cache::prefill_chunk`; then
// `Cache::finish_prefill()` cuts to budget; then decode steps.
//
// Unbounded (default): nothing is evicted before `finish_prefill`. Each query
// head accumulates its rows in prompt order into its own accumulator, and the
// scores are the sum over the GQA group: the same operations in the same order
// for every chunking, so kept positions and scores equal the one-shot `prefill`
// bit for bit — with ζ injected, drawn or off: drawn ζ of prompt row r, query
// head h, slot s is a pure function of (seed, h, r, s) (`fill_gumbel_row`), so a
// noisy Keyformer equals the one-shot prefill per seed too.
//
// Bounded (`CacheConfig::bounded_prefill`, opt-in): after scoring a chunk, if
// n > k the cache cuts to k exactly as the one-shot prefill cuts (the last w
// prompt tokens so far plus the top scores; StreamingLLM: the prompt's first
// `sinks` tokens plus the most recent), compacted in position order. The view
// holds <= k tokens after every chunk, <= k + C while one is appended. Differences
// from the one-shot prefill: a token evicted mid-prompt is gone for good — later
// rows neither attend to it nor score it, and their softmax runs over the live
// slots only; a kept token's score sums the rows that saw it while it was live
// (TOVA: the latest chunk's last row). Keyformer's τ stays τ_init for the whole
// prompt. With P <= k nothing is cut and the result equals the one-shot prefill.
#pragma once

#include <cstddef>

namespace kvevict {

/// The logits of one prefill chunk, row by row (chunked prefill, see
/// `Cache::prefill_chunk`). The chunk's `C` queries sit at slots
/// `held, ..., held + C − 1` of the view (`held` = tokens the cache kept
/// before the chunk); query `i` sees slots `[0, held + i]` (causal inside the
/// chunk), so its row has `held + i + 1` logits, by slot.
///
/// The cache asks for rows in ascending `(q_head, i)` order, each at most once
/// per chunk (TOVA asks only for `i = C − 1`); a returned pointer must stay
/// valid until the next call. `noise` may return pre-drawn Gumbel noise ζ for
/// the same row (same length), or `nullptr` to let the cache draw it (the
/// default); it is read only by a noisy score policy. When `concurrent()` is
/// true, the cache may ask for rows of different query heads from several
/// threads at once (its executor, `Cache::set_executor`), each head's rows still
/// in ascending `i`; otherwise it asks from the calling thread only.
class ChunkRows {
 public:
  virtual ~ChunkRows() = default;
  /// Logits `x[q_head][i][0, held + i + 1)` of the chunk's query `i`.
  virtual const float* row(std::size_t q_head, std::size_t i) = 0;
  /// Injected ζ for that row, or `nullptr` (drawn by the cache).
  virtual const float* noise(std::size_t /*q_head*/, std::size_t /*i*/) { return nullptr; }
  /// Whether `row` and `noise` may run concurrently for different query heads
  /// (false by default: the chunk is then scored on the calling thread).
  virtual bool concurrent() const { return false; }
  /// The query heads the rows were built for, or 0 if the source does not know (the default): a
  /// cache rejects a known count that differs from its own (rows laid out for another head count
  /// would be read with the wrong stride and mapped to the wrong KV head).
  virtual std::size_t n_q_heads() const { return 0; }
};

/// A chunk's logits materialised by the engine: `logits` is `[q_head][C][n]`
/// row-major (`n = held + C`, the live slots after the chunk was appended);
/// entry `(h, i, c)` is read only for `c <= held + i`. `gumbel` (optional) is
/// ζ in the same layout. One-shot prefill is the chunk `held = 0, C = n = P`,
/// whose layout is the prompt's `[q_head][P][P]`. Non-owning; O(1) per row.
class MaterializedChunk final : public ChunkRows {
 public:
  MaterializedChunk(const float* logits, const float* gumbel, std::size_t chunk_len, std::size_t n)
      : logits_(logits), gumbel_(gumbel), chunk_len_(chunk_len), n_(n) {}
  const float* row(std::size_t q_head, std::size_t i) override { return logits_ + offset(q_head, i); }
  const float* noise(std::size_t q_head, std::size_t i) override {
    return gumbel_ != nullptr ? gumbel_ + offset(q_head, i) : nullptr;
  }
  /// True: rows are pointers into the engine's arrays, safe from any thread.
  bool concurrent() const override { return true; }

 private:
  std::size_t offset(std::size_t q_head, std::size_t i) const { return (q_head * chunk_len_ + i) * n_; }
  const float* logits_;
  const float* gumbel_;
  std::size_t chunk_len_, n_;
};

}  // namespace kvevict
