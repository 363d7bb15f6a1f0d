// kvevict inside llama.cpp — kvevict_llama.hpp: one kvevict selection for a whole llama.cpp model.
// SPDX-License-Identifier: Apache-2.0
//
// Header only, on llama.cpp's public headers (llama.h, ggml.h) and kvevict. An `Evictor` keeps one sequence of a
// llama_context inside a budget of k positions:
//   * layers: global (full attention: scored, their cells tracked) or sliding-window (neither: their own cache holds
//     the window; a drop reaches it too), `LayerKinds` (llama_layers.hpp);
//   * scores: an eval callback (cb_eval = kvevict_llama::eval_callback) reads every global layer's attention probabilities
//     `kq_soft_max-<layer>` (flash attention off); log p is the logit row (softmax is shift-invariant), one query
//     head per layer and head, or summed in place into one row (`ScoreRows`, llama_rows.hpp);
//   * keys (knorm, keydiff): every layer's `Kcur-<layer>` after RoPE, with flash attention on or off; the cache then
//     has n_layer · n_head_kv KV heads of n_embd / n_head and one shared selection;
//   * cells: which cell holds which position, read from llama.cpp's masks and checked at every batch (CellMap,
//     llama_cells.hpp); after a cut the held cells are packed to the front (`compact`);
//   * selection: a cell is shared by every layer and head, so through the public API eviction is ONE selection per
//     sequence (one KV head, k counted in positions); dropped with llama_memory_seq_rm, positions never renumbered.
// Protocol (one sequence; batches of consecutive positions from 0):
//   Evictor ev(policy, config, params, capacity);        // capacity >= prompt + decode steps
//   cparams.cb_eval = kvevict_llama::eval_callback; cparams.cb_eval_user_data = &ev;
//   cparams.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;   // scores need the softmax
//   ctx = llama_init_from_model(model, cparams); ev.attach(ctx, model);
//   for each prompt chunk of C tokens (C <= n_ubatch):  p0 = ev.begin(C); decode tokens at p0..p0+C-1; ev.end();
//   ev.end_prompt();                                      // cuts the prompt to k
//   per generated token: p = ev.begin(1); decode it at p; ev.end();   // evicts at most one position
// Errors: `std::invalid_argument` for a bad configuration (FA on, recurrent memory, ...), `std::runtime_error`
// for what llama.cpp did not do as expected (a mask the map cannot explain, seq_rm returning false).
#pragma once

#include <ggml.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <kvevict/kvevict.hpp>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama_callback_error.hpp"
#include "llama_cells.hpp"
#include "llama_layers.hpp"
#include "llama_rows.hpp"
#include "llama_trace.hpp"

namespace kvevict_llama {

/// Keeps one llama.cpp sequence within a kvevict budget (see the file comment for the protocol).
class Evictor {
 public:
  /// `policy` (`kvevict::parse_policy` names; SnapKV is not supported: it needs a one-shot prefill) with
  /// `config` (budget, recent window, seed; `n_q_heads` and `shared_heads` are set by `attach`) and
  /// `params` (τ schedule, horizon, sinks, noise). `evict` false: a full cache (the callback still tracks
  /// cells; nothing is scored or dropped). `capacity`: the most positions the sequence will see (prompt +
  /// decode steps). Throws `std::invalid_argument` for capacity 0.
  Evictor(kvevict::Policy policy, kvevict::CacheConfig config, kvevict::PolicyParams params, std::size_t capacity,
          bool evict = true)
      : policy_(policy), config_(config), params_(params), capacity_(capacity), evict_(evict),
        store_(1, view_capacity(config.budget, capacity), 1) {
    if (capacity == 0) throw std::invalid_argument("kvevict_llama::Evictor: capacity must be >= 1");
  }

  /// Bounded prefill (kvevict's `CacheConfig::bounded_prefill`): after every prompt chunk of at most `max_chunk`
  /// tokens the prompt so far is cut to the budget and the evicted positions leave llama.cpp's memory, so the
  /// sequence never holds more than `k + max_chunk` cells (a stream of that size suffices). Needs a token
  /// budget. 0 turns it off (default: the prompt is held whole and cut at `end_prompt`). Call before `attach`;
  /// `attach` throws `std::invalid_argument` for a ratio budget.
  void set_bounded_prefill(std::size_t max_chunk) {
    if (ctx_ != nullptr) throw std::logic_error("kvevict_llama::Evictor::set_bounded_prefill: call it before attach");
    bounded_chunk_ = max_chunk;
  }

  /// How the attention becomes the cache's logits (`ScoreRows`; default `per_head`). Call before `attach`.
  void set_score_rows(ScoreRows rows) {
    if (ctx_ != nullptr) throw std::logic_error("kvevict_llama::Evictor::set_score_rows: call it before attach");
    rows_ = rows;
  }
  /// The `ScoreRows` in use.
  ScoreRows score_rows() const { return rows_; }

  /// Binds the evictor to `ctx` (created with `cb_eval = eval_callback`, `cb_eval_user_data = this`) and
  /// sequence `seq`. Throws `std::invalid_argument` if the evictor evicts and the model's memory is recurrent
  /// or hybrid (it cannot drop a middle range of positions), if the model has no attention heads, or if it has
  /// sliding-window layers whose layout `LayerKinds::of` does not know (or no global layer). (Flash attention on
  /// with a policy that `needs_scores` is found at the first `end`: no softmax reaches the callback.)
  void attach(llama_context* ctx, const llama_model* model, llama_seq_id seq = 0) {
    if (evict_ && (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)))
      throw std::invalid_argument("the model's memory is recurrent or hybrid: llama.cpp cannot drop a middle range of "
                                  "its positions (llama_memory_seq_rm), so nothing can be evicted");
    n_layer_ = static_cast<std::size_t>(llama_model_n_layer(model));
    n_head_ = static_cast<std::size_t>(llama_model_n_head(model));
    if (n_layer_ == 0 || n_head_ == 0) throw std::invalid_argument("the model has no attention layers");
    kinds_ = LayerKinds::of(model);
    ctx_ = ctx;
    seq_ = seq;
    mem_ = llama_get_memory(ctx);
    config_.n_q_heads = rows_ == ScoreRows::summed ? 1 : kinds_.n_global * n_head_;
    config_.shared_heads = false;
    if (bounded_chunk_ != 0) {
      if (config_.budget.is_ratio())
        throw std::invalid_argument("bounded prefill needs a token budget (k known before the prompt ends)");
      config_.bounded_prefill = true;
      config_.max_prefill_chunk = bounded_chunk_;
    }
    if (evict_ && needs_keys(policy_)) {
      // One KV head per global layer and llama.cpp KV head, [rank · n_head_kv + h][slot][head_dim], one selection.
      n_head_kv_ = static_cast<std::size_t>(llama_model_n_head_kv(model));
      head_dim_ = key_head_dim(model);
      if (n_head_kv_ == 0)
        throw std::invalid_argument("the model has no KV heads (n_head_kv 0): key scores need its keys");
      keys_.shape(kinds_.n_global, n_head_kv_, head_dim_);
      config_.n_q_heads = kinds_.n_global * n_head_kv_;
      config_.shared_heads = true;
      store_ = kvevict::KVBuffer<float>(config_.n_q_heads, view_capacity(config_.budget, capacity_), head_dim_);
      kv_ = store_.view();
    }
    if (evict_ && bounded_chunk_ != 0) {
      // A bounded prefill's chunk lands on up to k held slots: the view needs k + C (kvevict::Cache checks it).
      const std::size_t need = config_.budget.token_count() + bounded_chunk_;
      if (kv_.capacity < need) {
        store_ = kvevict::KVBuffer<float>(kv_.n_kv_heads, need, kv_.head_dim);
        kv_ = store_.view();
      }
    }
    if (evict_) cache_ = kvevict::make_cache(policy_, config_, kv_, params_);
    cells_.reset(capacity_);
    evicted_.assign(capacity_, false);
  }

  /// Whether `policy` scores tokens from attention (keyformer, h2o, tova, snapkv): these need the
  /// callback's `kq_soft_max`, which llama.cpp computes only with flash attention off.
  static bool needs_scores(kvevict::Policy policy) {
    return policy != kvevict::Policy::streaming_llm && policy != kvevict::Policy::window && !needs_keys(policy);
  }
  /// Whether `policy` scores each token from its keys (knorm; keydiff, every held key against their mean): the
  /// callback reads `Kcur-<layer>`, with flash attention on or off.
  static bool needs_keys(kvevict::Policy policy) {
    return policy == kvevict::Policy::knorm || policy == kvevict::Policy::keydiff;
  }

  /// Reserves the next `n` positions (one batch, `1 <= n`, `n == 1` after `end_prompt`) and returns the
  /// first; the caller decodes its tokens at positions first .. first + n − 1, in order, as the rows
  /// `row0 .. row0 + n − 1` of the ubatch's stream `stream` (several sequences in one batch: `Sequences`; one
  /// stream unless `kv_unified` is off, then the sequence's index among the batch's sequences; the whole batch
  /// must be one ubatch, n_ubatch >= its tokens).
  llama_pos begin(std::size_t n, std::size_t row0 = 0, std::size_t stream = 0) {
    if (n == 0) throw std::invalid_argument("kvevict_llama::Evictor::begin: n must be >= 1");
    if (prompt_done_ && n != 1)
      throw std::invalid_argument("kvevict_llama::Evictor::begin: after end_prompt, decode one token per batch");
    if (next_ + n > capacity_)
      throw std::invalid_argument("kvevict_llama::Evictor::begin: " + std::to_string(next_ + n) +
                                  " positions exceed the capacity " + std::to_string(capacity_));
    batch_first_ = next_;
    batch_n_ = n;
    row0_ = row0;
    stream_ = stream;
    batch_rows_seen_ = 0;
    layers_seen_ = 0;
    masks_.begin();
    if (cache_ && needs_keys(policy_)) keys_.begin(n);
    if (zero_row_.size() != kv_.n_kv_heads * kv_.head_dim) zero_row_.assign(kv_.n_kv_heads * kv_.head_dim, 0.0f);
    if (cache_)  // K rows of a key score are written by `end` (KeyRows::store); V is never read
      for (std::size_t i = 0; i < n; ++i)
        kv_.append(static_cast<std::int64_t>(next_ + i), zero_row_.data(), zero_row_.data());
    if (cache_ && needs_scores(policy_)) {
      const std::size_t rows = n, cols = cache_->length(0);
      x_.assign(config_.n_q_heads * rows * cols, -std::numeric_limits<float>::infinity());
    }
    const llama_pos first = static_cast<llama_pos>(next_);
    next_ += n;
    return first;
  }

  /// After `llama_decode` of the batch `begin` reserved returned 0: scores it (a prompt chunk with
  /// `prefill_chunk`, a decode token with `decode_step`) and, after `end_prompt`, drops the evicted
  /// position. Throws `std::runtime_error` if the callback did not see every layer's scores of the batch.
  void end() {
    if (batch_n_ == 0) throw std::logic_error("kvevict_llama::Evictor::end: no batch begun");
    take_callback_error();
    // Streaming and window need no scores: they also run without the callback (flash attention on).
    if (batch_rows_seen_ != batch_n_ && (needs_scores(policy_) || batch_rows_seen_ != 0 || !cache_))
      throw std::runtime_error("kvevict_llama::Evictor::end: the eval callback saw " +
                               std::to_string(batch_rows_seen_) + " of the batch's " + std::to_string(batch_n_) +
                               " tokens in the attention mask (is cb_eval set to kvevict_llama::eval_callback?)");
    if (cache_ && needs_scores(policy_) && layers_seen_ != kinds_.n_global)
      throw std::runtime_error("kvevict_llama::Evictor::end: the eval callback saw kq_soft_max of " +
                               std::to_string(layers_seen_) + " of " + std::to_string(kinds_.n_global) +
                               " global layers (flash attention must be off)");
    if (kinds_.hybrid() && batch_rows_seen_ != 0) masks_.check_window(kinds_, cells_, batch_first_ + batch_n_ - 1);
    if (cache_ && needs_keys(policy_)) {
      const std::size_t seen = keys_.layers_seen();
      if (seen != kinds_.n_global)
        throw std::runtime_error("kvevict_llama::Evictor::end: the eval callback saw Kcur of " + std::to_string(seen) +
                                 " of " + std::to_string(kinds_.n_global) + " global layers (a model whose graph names "
                                 "its keys otherwise is not supported by key scores)");
      keys_.store(kv_, log_, kv_.length(0) - batch_n_, batch_first_);
    }
    const std::size_t n = batch_n_;
    batch_n_ = 0;
    if (!cache_) return;
    if (rows_ == ScoreRows::summed && needs_scores(policy_))
      sum_.logits(n, batch_first_, cache_->positions(0), cache_->length(0), cells_, x_.data());
    const float* x = needs_scores(policy_) ? x_.data() : nullptr;
    if (log_.logits_on())  // streaming and window score nothing: their trace holds 0 where they see
      log_.add_rows(x_.empty() ? nullptr : x_.data(), config_.n_q_heads, n, batch_first_, cache_->positions(0),
                    cache_->length(0));
    if (!prompt_done_) {
      cache_->prefill_chunk(x, n, cache_->length(0));
      if (bounded_chunk_ != 0) {  // a bounded prefill cut the prompt so far to k: those positions leave llama.cpp
        require_newest_kept();
        drop_evicted();
      }
      return;
    }
    cache_->decode_step(x, cache_->length(0));
    require_newest_kept();
    drop_evicted();
    if (auto_compact_ && attended_cells() >= cache_->length(0) + compact_slack()) compact();
  }

  /// Ends the prompt: cuts it to the budget k and drops the evicted positions from llama.cpp's memory.
  /// Throws `SeqRmRefused` if llama.cpp refuses the first drop (nothing dropped).
  void end_prompt() {
    if (prompt_done_) throw std::logic_error("kvevict_llama::Evictor::end_prompt: called twice");
    prompt_done_ = true;
    prompt_len_ = next_;
    if (!cache_) return;
    cache_->finish_prefill();
    require_newest_kept();
    drop_evicted();
    if (dropped_ > 0 && auto_compact_) compact();
  }

  /// Moves the sequence's cells to the front of llama.cpp's KV cache, in their order, positions and K/V
  /// unchanged: llama.cpp attends over every cell up to the highest one in use (`n_kv`, padded to 256), so
  /// after eviction has left holes the attention still costs the uncut context until the held cells are
  /// packed. Through the public API: `llama_state_seq_get_data`, `llama_memory_seq_rm` of the sequence,
  /// `llama_state_seq_set_data` (which places a sequence's cells, saved in ascending cell order, into the
  /// free cells from 0 in that order: the held position of the i-th lowest cell moves to cell i; the map is
  /// updated so, and the next batch's mask checks it). O(held cells · n_layer · (K + V row bytes)) copied
  /// twice, once per call; `end_prompt` calls it after its cut and `end` whenever the cells attended exceed
  /// the cells held by `compact_slack()` or more. Needs one sequence per context. Throws
  /// `std::runtime_error` if llama.cpp does not save or restore the whole sequence (then it may be lost).
  void compact() {
    detail::repack_sequence(ctx_, seq_, state_);
    ++compactions_;
    cells_.pack();  // the i-th lowest held cell is now cell i (a no-op when no mask was read)
  }

  /// Whether `end_prompt` and `end` compact this sequence themselves (default true; one sequence per context).
  /// `Sequences` turns it off and compacts the whole context instead.
  void set_auto_compact(bool on) { auto_compact_ = on; }

  /// After the whole context was compacted (`Sequences::compact`): `new_cell[c]` is the cell now holding what
  /// cell `c` held (or -1), for every cell this sequence held. Throws `std::logic_error` (nothing changed) if a
  /// held cell has no new cell. O(cells).
  void move_cells(const std::vector<std::int64_t>& new_cell) { cells_.move(new_cell); }
  /// After the sequence's cells were freed (`Sequences::release`): no cell holds any of its positions.
  void forget_cells() { cells_.forget(); }
  /// Which cell holds which position, as read from llama.cpp's masks (`CellMap`: the cells, the cells the last
  /// batch's last token saw, the most any token saw, how often a cell an evicted position held was reused).
  const CellMap& cell_map() const { return cells_; }
  /// Cells the sliding-window layers' mask showed the last batch's last token (hybrid models; checked in `end` to
  /// be the held positions within the window).
  std::size_t sliding_visible_cells() const { return masks_.sliding_visible(); }
  /// The model's global and sliding-window layers (`attach`).
  const LayerKinds& layer_kinds() const { return kinds_; }
  /// The llama.cpp sequence id (`attach`).
  llama_seq_id seq() const { return seq_; }
  /// Cells llama.cpp attends for this sequence: 1 + the highest cell holding a held position (0 before any).
  std::size_t attended_cells() const {
    return cache_ && cells_.tracked() ? cells_.top(cache_->positions(0), cache_->length(0)) : 0;
  }
  /// Positions the evictor's cache holds now (0 for a full cache).
  std::size_t held() const { return cache_ ? cache_->length(0) : 0; }
  /// Counts one compaction done by `Sequences`.
  void count_compaction() { ++compactions_; }

  /// How many cells beyond those held llama.cpp may attend before `end` compacts (256: llama.cpp pads the
  /// attended range to 256 cells, so a smaller excess costs nothing).
  static constexpr std::size_t compact_slack() { return 256; }
  /// How often the sequence was compacted (`compact`).
  std::size_t compactions() const { return compactions_; }

  /// Records the logits the cache is given as a trace `[n_q_heads][capacity][capacity]` (rows = positions;
  /// entries not in the cache are -inf), for `kvevict-replay`. Call before the first `begin`.
  void record_trace() { log_.start_logits(config_.n_q_heads, capacity_); }
  /// The recorded trace (see `record_trace`); empty if not recording.
  const std::vector<float>& trace() const { return log_.logits(); }

  /// The kvevict cache (null for a full cache): its slots' positions and scores.
  const kvevict::CacheInterface* cache() const { return cache_.get(); }
  /// Query heads of the evictor's cache: n_global · n_head (`ScoreRows::per_head`; n_global: the global layers,
  /// `LayerKinds`), 1 (`summed`), n_global · n_head_kv (knorm, keydiff).
  std::size_t n_q_heads() const { return config_.n_q_heads; }
  /// Positions held now, ascending (a full cache: every position so far).
  std::vector<std::int64_t> kept() const {
    if (cache_) return cache_->retained_positions(0);
    std::vector<std::int64_t> all(next_);
    for (std::size_t i = 0; i < next_; ++i) all[i] = static_cast<std::int64_t>(i);
    return all;
  }
  /// Whether position `p` was evicted (it never comes back).
  bool evicted(std::size_t p) const { return p < evicted_.size() && evicted_[p]; }
  /// Positions dropped with llama_memory_seq_rm so far.
  std::size_t dropped() const { return dropped_; }
  /// Prompt length (after `end_prompt`).
  std::size_t prompt_len() const { return prompt_len_; }

  /// The keys the cache was given, `[global layer's rank · n_head_kv + h][position][head_dim]` (knorm, keydiff; empty otherwise):
  /// positions not yet seen are 0. For `--keys-out` and the tests' reference.
  std::vector<float> recorded_keys() const {
    if (!cache_ || !needs_keys(policy_)) return {};
    return log_.keys(capacity_);
  }
  /// Head size of the recorded keys (knorm, keydiff; 0 otherwise).
  std::size_t head_dim() const { return head_dim_; }
  /// KV heads of the evictor's cache: n_global · n_head_kv for knorm and keydiff, 1 otherwise.
  std::size_t n_kv_heads() const { return kv_.n_kv_heads; }
  /// Keeps every key the cache is given, for `recorded_keys` (knorm, keydiff). Call after `attach`, before the first
  /// `begin`.
  void record_keys() { log_.start_keys(kinds_.n_global * n_head_kv_, head_dim_); }

  /// The eval callback's work (see `eval_callback`).
  bool on_tensor(ggml_tensor* t, bool ask) {
    const char* name = ggml_get_name(t);
    if (std::strncmp(name, "Kcur-", 5) == 0 && cache_ && needs_keys(policy_))
      return keys_.on_tensor(t, std::atoi(name + 5), ask, batch_n_ != 0, kinds_.global, kinds_.rank);
    if (std::strncmp(name, "kq_soft_max-", 12) != 0) return !ask;  // ask: not wanted; eval: keep going
    if (ask) return true;
    if (batch_n_ == 0) return true;  // a decode the evictor did not begin (e.g. a warm-up): ignore
    const int layer = std::atoi(name + 12);
    if (t->type != GGML_TYPE_F32 || t->src[1] == nullptr)
      detail::rows_fail("kq_soft_max of layer " + std::to_string(layer) + " is not F32 with a mask");
    if (layer < 0 || static_cast<std::size_t>(layer) >= n_layer_)
      detail::rows_fail("kq_soft_max of layer " + std::to_string(layer) + " in a model of " +
                        std::to_string(n_layer_) + " layers");
    const auto l = static_cast<std::size_t>(layer);
    if (!masks_.see(kinds_, t->src[1], l, row0_ + batch_n_ - 1, stream_))
      return true;  // a sliding layer: its mask was checked, nothing scored
    if (batch_rows_seen_ == 0) {
      cells_.read(t->src[1], row0_, batch_n_, batch_first_, stream_);
      batch_rows_seen_ = batch_n_;
    }
    if (!cache_ || !needs_scores(policy_)) return true;
    if (t->ne[2] != static_cast<int64_t>(n_head_))
      detail::rows_fail("layer " + std::to_string(layer) + "'s kq_soft_max has " + std::to_string(t->ne[2]) +
                        " heads; the model-wide selection needs " + std::to_string(n_head_) + " in each of " +
                        std::to_string(kinds_.n_global) + " global layers");
    if (rows_ == ScoreRows::summed)
      sum_.add(t, n_head_, row0_, stream_, batch_n_, layers_seen_ == 0);
    else
      detail::copy_log_probs(t, kinds_.rank[l], n_head_, row0_, stream_, batch_n_, batch_first_,
                             cache_->positions(0), cache_->length(0), cells_, x_.data());
    ++layers_seen_;
    return true;
  }

 private:
  // The cache's view must hold k + 1 slots (a decode step appends before it evicts) and every position.
  static std::size_t view_capacity(const kvevict::Budget& budget, std::size_t capacity) {
    std::size_t k = budget.is_ratio() ? static_cast<std::size_t>(std::ceil(budget.ratio_value() * double(capacity)))
                                      : budget.token_count();
    return std::max(capacity, k) + 1;
  }

  // llama.cpp decodes a sequence's next token only at the position after the last one it holds
  // (llama_memory_seq_pos_max + 1): the newest position must stay: w >= 1 keeps it (the tool refuses w = 0, gives
  // TOVA w = 1); a caller with w = 0 could drop it, and then nothing is dropped and the run stops with this error.
  void require_newest_kept() const {
    const std::vector<std::int64_t> kept = cache_->retained_positions(0);
    if (!kept.empty() && static_cast<std::size_t>(kept.back()) + 1 == next_) return;
    throw std::runtime_error("the policy evicted the newest position " + std::to_string(next_ - 1) +
                             ": llama.cpp decodes the next token only right after the last position a sequence "
                             "holds, so the newest must stay (a recent window w >= 1 keeps it)");
  }

  // Drops from llama.cpp's memory every position the cache no longer holds.
  void drop_evicted() {
    std::vector<bool> held(next_, false);
    for (std::int64_t p : cache_->retained_positions(0)) held[static_cast<std::size_t>(p)] = true;
    bool first = true;
    for (std::size_t p = 0; p < next_; ++p) {
      if (held[p] || evicted_[p]) continue;
      if (!llama_memory_seq_rm(mem_, seq_, static_cast<llama_pos>(p), static_cast<llama_pos>(p + 1))) {
        if (first)
          throw SeqRmRefused("llama_memory_seq_rm refused to drop position " + std::to_string(p) +
                             " (the model's memory cannot drop a middle range); nothing was evicted");
        throw std::runtime_error("llama_memory_seq_rm refused to drop position " + std::to_string(p) +
                                 " after dropping others");
      }
      first = false;
      evicted_[p] = true;
      ++dropped_;
      cells_.drop(p);
    }
  }

  kvevict::Policy policy_;
  kvevict::CacheConfig config_;
  kvevict::PolicyParams params_;
  std::size_t capacity_;
  bool evict_;
  kvevict::KVBuffer<float> store_;  // one KV head, head_dim 1: only positions and scores matter (knorm, keydiff: the keys)
  kvevict::KVView<float> kv_ = store_.view();
  std::unique_ptr<kvevict::CacheInterface> cache_;
  llama_context* ctx_ = nullptr;
  llama_memory_t mem_ = nullptr;
  llama_seq_id seq_ = 0;
  std::size_t n_layer_ = 0, n_head_ = 0;
  LayerKinds kinds_;  // global and sliding-window layers (llama_layers.hpp)
  detail::LayerMasks masks_;  // the batch's masks of the global and the sliding layers, checked against kinds_
  CellMap cells_;  // which cell holds which position (llama_cells.hpp)
  std::vector<bool> evicted_;
  std::vector<float> x_;
  detail::TraceLog log_;  // --trace-out, --keys-out
  ScoreRows rows_ = ScoreRows::per_head;
  detail::SummedRows sum_;  // ScoreRows::summed: the batch's probabilities summed over layers and heads
  std::vector<std::uint8_t> state_;  // compact: the sequence's saved state
  std::size_t compactions_ = 0;
  std::size_t row0_ = 0;       // the batch's first row of this sequence's tokens in the ubatch
  bool auto_compact_ = true;
  std::size_t stream_ = 0;           // the ubatch's stream of this sequence's tokens (kv_unified off)
  std::size_t bounded_chunk_ = 0;    // bounded prefill: the largest prompt chunk (0: the prompt is held whole)
  std::vector<float> zero_row_;        // one token's K/V rows of zeros, appended by `begin` (no allocation per step)
  detail::KeyRows keys_;               // knorm, keydiff: the batch's keys per layer
  std::size_t n_head_kv_ = 0, head_dim_ = 0;
  bool prompt_done_ = false;
  std::size_t next_ = 0, batch_first_ = 0, batch_n_ = 0, batch_rows_seen_ = 0, layers_seen_ = 0;
  std::size_t dropped_ = 0, prompt_len_ = 0;
};

/// The `cb_eval` of a llama_context whose `cb_eval_user_data` is an `Evictor*`: asks for every layer's
/// `kq_soft_max-<layer>` and hands it to the evictor. An exception inside llama_decode cannot cross the C
/// boundary, so a failure is kept and the callback returns false (llama.cpp then stops the graph);
/// `Evictor::end` (or `take_callback_error`) rethrows it.
inline bool eval_callback(ggml_tensor* t, bool ask, void* user_data) {
  try {
    return static_cast<Evictor*>(user_data)->on_tensor(t, ask);
  } catch (const std::exception& e) {
    detail::callback_error() = e.what();
    return false;
  }
}

}  // namespace kvevict_llama
