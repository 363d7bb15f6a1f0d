// cache.hpp — the per-layer evicting cache's life cycle and engine protocol (prefill, chunks, decode steps, the
// per-head step, reset): it orchestrates a score policy (detail/scorer.hpp runs it), a temperature schedule and a
// selection policy (contracts in concepts.hpp) over the slots of a KV view (detail/slot_table.hpp); its eviction
// paths, one per-KV-head general case for uniform and head-adaptive budgets, are detail/head_eviction.hpp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kvevict/cache_config.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/detail/eviction_core.hpp"  // the policies, the scorer, the state and the checks
#include "kvevict/detail/head_eviction.hpp"  // the per-KV-head cuts and evictions
#include "kvevict/detail/per_head_step.hpp"  // begin_decode_step / score_decode_head / end_decode_step
#include "kvevict/detail/state_copy.hpp"     // copy_state_from's checks and copy
#include "kvevict/detail/attention_prefill.hpp"  // prefill_from_attention's checks and load
#include "kvevict/detail/erased_kv.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/detail/slot_table.hpp"
#include "kvevict/score/chunk_rows.hpp"

namespace kvevict {

/// An evicting KV cache for one transformer layer (policy-based design):
///
///  - `Score` — what a token's score is (`GumbelLogitScore` for Keyformer, `AccumulatedAttentionScore` for H2O,
///    `CurrentAttentionScore` for TOVA, `SnapKVScore`, `NoScore`, or a score from the keys alone, `key_score`:
///    concepts.hpp);
///  - `Temperature` — τ per step (`LinearTemperature`, `ConstantTemperature`, `IncrementTemperature`); never
///    changes the budget;
///  - `Selection` — which tokens stay (`RecentTopKSelection`, `SinkRecentSelection`);
/// and, in the configuration, how a layer's budget is shared among its KV heads
/// (`CacheConfig::head_budgets`: `k` each, or AdaKV's adaptive split, head_budgets.hpp).
///
/// The cache does not own K and V: it works on the engine's `KVView<T>` and owns only the scores
/// `[kv_head][capacity]` (float), scratch space and the noise seed, all allocated in the constructor. It keeps,
/// per KV head, slots `[0, length)` live with K row, V row, position ID and score aligned; eviction removes
/// tokens for good and never renumbers position IDs.
///
/// Engine protocol for one sequence (see docs/api.md):
///  1. append the prompt's `P` tokens to the view (`KVView::append`, positions
///     ascending), compute the causal logits `x[q_head][P][P]`, call
///     `prefill(x, P)`: scores every row at τ_0 and cuts every KV head to
///     `min(k, P)` tokens (the recent window and the key tokens);
///     — or, chunked (docs/long-prompts.md): per chunk of `C` tokens, append
///     them, pass the chunk's logits `x[q_head][C][n]` to `prefill_chunk`; then
///     `finish_prefill()` cuts to budget;
///  2. per generated token: append its K/V (slot `n − 1` of every head), compute
///     the logits `x[q_head][n]` over slots `[0, n)`, call `decode_step(x, n)`:
///     scores the step at τ_t and, if `n > k`, evicts one token per KV head by
///     filling its slot with slot `n − 1` (O(head_dim) data moved).
///
/// Errors: every call validates its arguments and the view before any change and throws
/// `std::invalid_argument` (naming the argument and value) or `std::length_error`, leaving
/// cache and view as before. `decode_step` and `prefill_chunk` never allocate.
///
/// Threads: one cache per layer per sequence, called by one thread; that call may run its
/// work on an executor's workers (`set_executor`), with bit-identical results for any count.
template <class Score, class Temperature, class Selection>
class Cache final : public detail::PerHeadStep<Score, Temperature, Selection> {
  // The shared state, policies and checks (detail/eviction_core.hpp; it also asserts the policy contracts), the
  // per-KV-head eviction paths (detail/head_eviction.hpp) and the decode step in parts (detail/per_head_step.hpp).
  using Step = detail::PerHeadStep<Score, Temperature, Selection>;
  using Heads = typename Step::Heads;
  using Core = typename Heads::Core;
  using Core::config_, Core::slots_, Core::scorer_, Core::selection_, Core::last_position_, Core::k_, Core::w_,
      Core::n_, Core::step_, Core::tau_, Core::prefilled_, Core::kv, Core::checked_tau, Core::live, Core::check_head;
  using Heads::held_, Heads::head_k_, Heads::step_lens_, Heads::victims_, Heads::shared_budget_, Heads::cut,
      Heads::enter_recent, Heads::evict_step;
  using Step::chunking_, Step::no_open_step;

 public:
  /// Builds a cache over `kv` (lengths must be 0). Allocates
  /// O(n_q_heads · capacity) floats and indices once.
  /// Throws `std::invalid_argument` if the view is invalid or not empty,
  /// `config.n_q_heads` is not a positive multiple of `kv.n_kv_heads` or above 2^16
  /// (checked before the allocation, `detail::checked_group`), or — when
  /// the budget is a token count, so that `k` and `w` are known now — the
  /// configuration fails `resolve_budget` (see there: `w > k`, sinks, capacity, the score's
  /// `validate_budget`), or `bounded_prefill` is set with a ratio budget or a score that needs the
  /// whole prompt (`kWholePrompt`: SnapKV).
  template <class T>
  Cache(const CacheConfig& config, KVView<T> kv, Score score = Score(), Temperature temperature = Temperature(),
        Selection selection = Selection())
      // The view is validated (SlotTable's ErasedKV) before the core checks n_q_heads against it.
      : Step(config, detail::SlotTable(detail::ErasedKV::from(kv)), std::move(score), std::move(temperature),
             std::move(selection), "kvevict::Cache", detail::key_reader<Score, T>(kv.head_dim)) {
    const std::size_t nkv = kv.n_kv_heads;
    for (std::size_t h = 0; h < nkv; ++h)
      detail::require(kv.lengths[h] == 0, "kvevict::Cache: the view must be empty at construction (lengths[", h,
                      "] = ", kv.lengths[h], ")");
    if constexpr (detail::has_whole_prompt<Score>)
      detail::require(!config.bounded_prefill, "kvevict::Cache: bounded_prefill is not supported by ",
                      detail::score_name<Score>(), " (it ", Score::kWholePrompt, ")");
    detail::require(!config.bounded_prefill || !config.budget.is_ratio(),
                    "kvevict::Cache: bounded_prefill needs a token budget (Budget::tokens): a ratio of the prompt "
                    "length is unknown while the prompt streams in");
    check_head_budgets(config.head_budgets, "kvevict::Cache");
    if (config.head_budgets.is_adaptive()) {
      detail::require(!config.shared_heads, "kvevict::Cache: head_budgets = adaptive shares the layer's budget among "
                      "its KV heads, shared_heads = true keeps the same tokens on every head: set one of them");
      detail::require(!config.bounded_prefill, "kvevict::Cache: head_budgets = adaptive is not supported with "
                      "bounded_prefill (the chunks' logits need every KV head at the same length)");
      detail::require(Score::kUsesLogits, "kvevict::Cache: head_budgets = adaptive needs a score from the logits "
                      "(sums of attention, comparable across KV heads); ", detail::score_name<Score>(), " has none");
      detail::require(kv.capacity <= std::size_t{0xffffffffu}, "kvevict::Cache: head_budgets = adaptive needs a "
                      "capacity below 2^32 (got ", kv.capacity, ")");
    }
    this->init_heads();
    this->init_step();
    if (!config.budget.is_ratio()) (void)resolve_budget(config.budget.token_count(), "kvevict::Cache");
  }

  /// KV head `h`'s budget `k_j`: with `HeadBudgets::adaptive`, its share of the layer's `k · n_kv_heads`
  /// once the layer was first cut (before: `budget()`); otherwise `budget()`. Throws
  /// `std::invalid_argument` if `h >= n_kv_heads`. O(1).
  std::size_t head_budget(std::size_t h) const {
    check_head(h, "head_budget");
    return shared_budget_ ? head_k_[h] : k_;
  }

  // Copying would alias the view: forbidden (`copy_state_from` copies the state into another view); moving is fine.
  // A moved-from cache owns nothing: every member of `CacheInterface` (and `reset`) throws `std::logic_error`.
  /// Makes this cache `other`'s twin over its own view (beam search: a beam takes over another's cache): other's
  /// live K/V rows (`[kv_head][0, length)`), positions, lengths, scores, recent window, k, w, step, τ, last position,
  /// per-head budgets, noise seed, prefill accumulators, a chunked prompt or per-head step in progress, and its
  /// policies; from then on this cache gives what other would, bit for bit. Keeps its executor. `other` may sit on
  /// any layout and a capacity that holds other's lengths; the views must not overlap. Self-copy does nothing.
  /// O(n_kv_heads · n · head_dim + n_q_heads · capacity); allocates nothing. Throws `std::invalid_argument`
  /// "kvevict::Cache::copy_state_from: …", this cache unchanged, if other was moved from, differs in
  /// `n_q_heads`, budget, recent, shared_heads, max_prefill_chunk, bounded_prefill, head_budgets (the seed is copied),
  /// n_kv_heads, element type or head_dim, a length of other exceeds this capacity, this capacity cannot serve
  /// other's k (`resolve_budget`), or (adaptive, before the first cut) the capacities differ; `std::logic_error` if
  /// this cache was moved from or its policies are not copyable.
  void copy_state_from(const Cache& other) { detail::copy_cache_state(*this, other); }
  /// `copy_state_from` through the runtime interface; also throws `std::invalid_argument` if `other` is not a
  /// cache of this type (another policy).
  void copy_state_from(const CacheInterface& other) override { copy_state_from(detail::same_cache(*this, other)); }

  /// Prefill: scores the prompt and evicts to budget (Keyformer Algorithm 1,
  /// prompt phase). Preconditions: every KV head of the view holds exactly `prompt_len` live
  /// slots with strictly ascending position IDs, identical across heads, and
  /// this is the first prefill since construction or `reset`.
  ///
  /// `logits`: `[q_head][P][P]` row-major, `x[h][r][c]` = logit of the query at
  /// slot `r` against slot `c`; only `c <= r` is read (the causal part; `-inf`
  /// entries count as masked). May be `nullptr` for a score without logits (`NoScore`, a key score: each token's
  /// score is then its key's, `key_score`). `gumbel`: optional pre-drawn ζ, same layout (read where
  /// the logits are), else drawn (`fill_gumbel_row`: prompt row r of q_head h has key (seed, h, r)); used only by a
  /// noisy score policy. Resolves and checks `k` and `w` with `resolve_budget`; row r of query head h adds
  /// `softmax((x[h][r][0..r] + ζ) / τ_0)` to h's accumulator (TOVA: last row only), KV head j's scores are the sum over
  /// its group (so that `prefill_chunk` gives the same bits); then keeps `selection.prefill_keep`'s tokens, compacted
  /// in ascending position order into slots `[0, min(k, P))`. O(n_q_heads · P²) scoring, O(n_kv_heads · P · head_dim)
  /// compaction. This is `prefill_chunk` of the whole prompt then `finish_prefill`. Throws `std::invalid_argument` on a
  /// second prefill, `prompt_len == 0`, lengths ≠ `prompt_len`, unordered or mismatched positions, a budget the
  /// selection cannot serve (`resolve_budget`: `w > k`, `sinks > k`, a window
  /// given to StreamingLLM, capacity < `k + 1`), τ_0 outside the valid range
  /// (finite, >= FLT_MIN), a null `logits` when scores need it, a NaN /
  /// `+inf` value of `x + ζ`, a key score that is not finite and >= 0, or (a score with a
  /// `selection_scores` hook) a selection score that is not finite and >= 0 ("…: <score>'s
  /// selection_scores of KV head j, slot s is v (must be finite and >= 0)"). A key or selection score
  /// of -0.0 is stored and ranked as +0.0. Every check runs before any state changes.
  void prefill(const float* logits, std::size_t prompt_len, const float* gumbel = nullptr) override {
    live("prefill");
    no_open_step("prefill");
    const std::size_t P = prompt_len;
    detail::require(!prefilled_, "kvevict::Cache::prefill: already prefilled; call reset() for a new sequence");
    detail::require(!chunking_, "kvevict::Cache::prefill: a chunked prefill is in progress; call finish_prefill()");
    detail::check_prompt_view(kv(), P);
    const auto [k, w] = resolve_budget(config_.budget.resolve(P), "kvevict::Cache::prefill");
    const float tau = checked_tau(0, "prefill");
    if constexpr (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::Cache::prefill: logits must be non-null");
      (void)detail::checked_mul("kvevict::Cache::prefill", "n_q_heads * prompt_len * prompt_len (the logits)",
                                config_.n_q_heads, P, P);
      MaterializedChunk rows(logits, gumbel, P, P);
      scorer_.score_chunk(rows, 0, P, 1.0f / tau, "prefill");
    } else if constexpr (detail::has_key_score<Score>) {
      this->score_prompt_keys(0, P, "prefill");
    }
    this->score_held_keys(P, "prefill");  // the anchor hooks (KeyDiff); no-op otherwise
    scorer_.check_selection(P, config_.shared_heads, "prefill");

    // ---- nothing below can throw ----
    take_chunk(P, tau);
    finish(k, w);
  }

  /// Chunked prefill: scores one chunk of `C = chunk_len` prompt tokens that
  /// the engine appended to every KV head (slots `[held, n)`, `n = held + C`,
  /// positions rising). `logits`: `[q_head][C][n]`, query `i` (slot `held + i`)
  /// against slots `[0, held + i]` (only those are read); `gumbel`: optional ζ,
  /// same layout; or `rows` computing them on demand (`prefill_chunk_qk`).
  /// Rows are scored at τ_0. Unbounded: nothing is evicted before
  /// `finish_prefill`, and the result equals the one-shot `prefill` bit for bit
  /// (ζ injected or off). Bounded: if `n > k`, cuts to `k` as `prefill` does.
  /// Protocol, semantics and the noise order: score/chunk_rows.hpp.
  /// O(n_q_heads · C · n) (+ O(n_kv_heads · n · head_dim) per cut); no heap
  /// allocation. Throws `std::invalid_argument` after the prompt is finished, for a score that
  /// needs the whole prompt (`kWholePrompt`; SnapKV: its observation window is the prompt's last
  /// rows; use `prefill`), if `C == 0`,
  /// `C > config.max_prefill_chunk` (when set), `n != held + C`, a length is not
  /// `n`, positions do not rise or differ across heads, τ_0 is invalid,
  /// `logits` is null when needed, a value of `x + ζ` is NaN / `+inf`, a key score is not finite
  /// and >= 0, or (bounded, when this chunk cuts) a selection score is not finite and >= 0 (as
  /// `prefill`); the cache and the view are then unchanged.
  void prefill_chunk(const float* logits, std::size_t chunk_len, std::size_t n,
                     const float* gumbel = nullptr) override {
    live("prefill_chunk");
    if constexpr (Score::kUsesLogits)
      detail::require(logits != nullptr, "kvevict::Cache::prefill_chunk: logits must be non-null");
    MaterializedChunk rows(logits, gumbel, chunk_len, n);
    chunk_rows(rows, chunk_len, n, Score::kUsesLogits);
  }
  /// `prefill_chunk` with rows from `rows` (see `ChunkRows`); same contract, and throws
  /// `std::invalid_argument` if `rows.n_q_heads()` is known (not 0) and differs from `config.n_q_heads`.
  void prefill_chunk(ChunkRows& rows, std::size_t chunk_len, std::size_t n) override {
    chunk_rows(rows, chunk_len, n, false);
  }

 private:
  /// `prefill_chunk`; `materialized`: `rows` index the engine's `[q_head][C][n]` arrays, whose extent
  /// `n_q_heads · C · n` is then checked (`detail::checked_mul`) once `C` and `n` are.
  void chunk_rows(ChunkRows& rows, std::size_t chunk_len, std::size_t n, bool materialized) {
    live("prefill_chunk");
    no_open_step("prefill_chunk");
    const std::size_t C = chunk_len, cap = config_.max_prefill_chunk;
    detail::require(rows.n_q_heads() == 0 || rows.n_q_heads() == config_.n_q_heads,
                    "kvevict::Cache::prefill_chunk: the rows hold n_q_heads = ", rows.n_q_heads(),
                    " but the cache has n_q_heads = ", config_.n_q_heads, " (pass the cache's query-head count)");
    detail::require(!prefilled_, "kvevict::Cache::prefill_chunk: the prompt is finished; call reset() first");
    if constexpr (detail::has_whole_prompt<Score>)  // e.g. SnapKV: its rows are the prompt's last L
      throw std::invalid_argument(detail::concat("kvevict::Cache::prefill_chunk: ", detail::score_name<Score>(), " ",
                                                 Score::kWholePrompt, ", unknown until the prompt ends; use "
                                                 "prefill() with the whole prompt"));
    detail::require(cap == 0 || C <= cap, "kvevict::Cache::prefill_chunk: chunk_len = ", C,
                    " exceeds config.max_prefill_chunk = ", cap);
    detail::check_chunk_view(kv(), C, n, n_, last_position_);
    if (materialized)
      (void)detail::checked_mul("kvevict::Cache::prefill_chunk", "n_q_heads * chunk_len * n (the logits)",
                                config_.n_q_heads, C, n);
    const bool bounded = config_.bounded_prefill;
    const auto [k, w] = bounded ? resolve_budget(config_.budget.token_count(), "kvevict::Cache::prefill_chunk")
                                : std::pair<std::size_t, std::size_t>{0, 0};
    const float tau = checked_tau(0, "prefill_chunk");
    if constexpr (Score::kUsesLogits) scorer_.score_chunk(rows, n_, C, 1.0f / tau, "prefill_chunk", prompt_len_);
    if constexpr (detail::has_key_score<Score>) this->score_prompt_keys(n_, n_ + C, "prefill_chunk");
    this->score_held_keys(n_ + C, "prefill_chunk");  // the anchor hooks: every held key against the new anchor
    if (bounded && n_ + C > k) scorer_.check_selection(n_ + C, config_.shared_heads, "prefill_chunk");
    // ---- nothing below can throw ----
    take_chunk(C, tau);
    if (bounded && n_ > k) {
      cut(k, w, /*at_prefill=*/true);
      scorer_.reload(slots_.all_scores(), slots_.capacity(), n_);
    }
  }

 public:
  /// Ends a chunked prefill: resolves `k` and `w` for the prompt length (the
  /// tokens of every chunk) and cuts to `min(k, n)` as `prefill` does; decode
  /// steps may follow. Throws `std::invalid_argument` (state unchanged) if no
  /// chunk was passed, the prompt is already finished, `resolve_budget`
  /// rejects the budget, or a selection score is not finite and >= 0 (as `prefill`). O(n_kv_heads · n · head_dim).
  void finish_prefill() override {
    live("finish_prefill");
    no_open_step("finish_prefill");
    detail::require(!prefilled_, "kvevict::Cache::finish_prefill: the prompt is already finished; call reset()");
    detail::require(chunking_, "kvevict::Cache::finish_prefill: no chunk was passed (call prefill_chunk first)");
    const auto [k, w] = resolve_budget(config_.budget.resolve(prompt_len_), "kvevict::Cache::finish_prefill");
    this->score_held_keys(n_, "finish_prefill");  // the anchor hooks: a bounded cut changed the held keys
    scorer_.check_selection(n_, config_.shared_heads, "finish_prefill");
    // ---- nothing below can throw ----
    scorer_.take_anchor(slots_.all_scores(), slots_.capacity(), n_);
    finish(k, w);
  }

  /// H2O's (§4) or Keyformer's prefill from the prompt's score summed over its rows, `sums` `[q_head][P]`
  /// (`prompt_sums` says which), not the `[q_head][P][P]` logits; equals `prefill(x, P)` up to float addition
  /// order. detail/attention_prefill.hpp gives the sums' definition, its cost and its errors.
  void prefill_from_attention(const float* sums, std::size_t prompt_len) override {
    detail::prefill_cache_from_attention(*this, sums, prompt_len);
  }
  /// The sums `prefill_from_attention` takes (`PromptSums`; detail/attention_prefill.hpp: kinds, errors). O(1).
  PromptSums prompt_sums() const override { return detail::prompt_sums_of(*this); }

  /// One decode step (Keyformer Algorithm 1, generation phase; H2O §4; TOVA).
  /// Preconditions: the engine appended the new token's K/V to every KV head
  /// (slot `n − 1`, same position on every head, larger than any position seen
  /// before), so every head holds `n = previous length + 1` slots. `logits`: `[q_head][n]` row-major, by slot as the
  /// engine's attention reads the view (may be `nullptr` for a score without logits; a key score gives the new token
  /// its key's score on each KV head; the anchor hooks rescore every held token, O(n_kv_heads · n · head_dim)).
  /// `gumbel`: optional injected ζ,
  /// `[q_head][n]`, used as in `prefill` (only by a noisy score policy). Each query head's row adds `softmax((x + ζ) /
  /// τ_t)` into its KV head's scores (TOVA: replaces them), `τ_t = temperature(step + 1)`; the new token thereby gets
  /// the score of its own step. If `n > k`, each KV head (or the layer, with `shared_heads`) evicts
  /// `selection.victim(...)`: the hole is filled with slot `n − 1`. "Recent" is the `w` most recently appended tokens,
  /// given to the selection as per-slot flags. O(n_q_heads · n) scoring + O(n_kv_heads · n) selection + O(n_kv_heads ·
  /// head_dim) data moved. No heap allocation. The logits are read twice (a
  /// read-only check of every row first, for all-or-nothing, then one streaming
  /// softmax pass per row); the victim search reads scores and flags once. On an
  /// executor the checks, the rows and the per-KV-head victim searches and moves
  /// run as tasks. Throws `std::invalid_argument` before prefill, if `n` or any length is not
  /// `previous length + 1`, the new position is not the same on every head or
  /// not larger than the last one, τ_t is not finite and > 0, `logits` is null
  /// when needed, or a logit is NaN / `+inf`; the state is then unchanged.
  ///
  /// Head-adaptive budgets (`HeadBudgets::adaptive`, head_budgets.hpp): KV head `j` holds `length(j)` slots
  /// and the engine appended one to each; `n` is then `max_j` of the new lengths, the row stride of
  /// `logits` / `gumbel` (`[q_head][n]`, head `j`'s rows read on `[0, lengths[j])` only), and each head over
  /// its budget `head_budget(j)` evicts one token (before the layer's first cut, the step that brings `n`
  /// above `k` shares the budget: see head_budgets.hpp). Throws as above, and if a length is not its
  /// head's previous length + 1 or `n` is not their maximum.
  void decode_step(const float* logits, std::size_t n, const float* gumbel = nullptr) override {
    live("decode_step");
    no_open_step("decode_step");
    detail::require(prefilled_, chunking_ ? "kvevict::Cache::decode_step: the chunked prompt is not finished; call "
                                            "finish_prefill() first"
                                          : "kvevict::Cache::decode_step: call prefill() first");
    // Every KV head held held_[j] tokens and the engine appended one to each: with even lengths (always with
    // uniform budgets) the one fused step over n slots; else each head's rows over its own length.
    // even_lengths() and this step's lengths in one pass. Written before the checks, safely: no per-head step is open
    // (no_open_step above), and the only readers of step_lens_ (this step, begin_decode_step) write it first.
    bool even = true;
    for (std::size_t j = 0; j < kv().n_kv_heads; ++j) {
      even = even && held_[j] == held_.front();
      step_lens_[j] = held_[j] + 1;
    }
    const std::int64_t new_pos =
        even ? detail::check_step_view(kv(), n, held_.front(), last_position_)
             : detail::check_ragged_step_view(kv(), n, held_.data(), last_position_, "kvevict::Cache::decode_step");
    const float tau = checked_tau(step_ + 1, "decode_step");
    if (even) {
      this->score_step(logits, gumbel, n, tau, new_pos);
    } else if constexpr (Score::kUsesLogits) {  // uneven lengths come only from head-adaptive budgets
      detail::require(logits != nullptr, "kvevict::Cache::decode_step: logits must be non-null");
      scorer_.score_step_ragged(logits, gumbel, n, step_lens_.data(), 1.0f / tau, slots_.all_scores(),
                                slots_.capacity(), static_cast<std::uint64_t>(new_pos));
    }
    // ---- nothing below can throw ----
    if (even)
      slots_.enter_window(n - 1);  // the same slot on every KV head
    else
      slots_.enter_window_each([&](std::size_t j) { return step_lens_[j] - 1; });
    last_position_ = new_pos;
    evict_step(n, /*victims_found=*/false);
    ++step_;
    tau_ = tau;
  }

  /// Forgets the sequence: every length 0, scores 0, step 0, no recent window,
  /// and sets the noise seed to `seed`. The view's K/V bytes are left as
  /// they are. O(n_kv_heads · capacity).
  void reset(std::uint64_t seed) override {
    live("reset");
    for (std::size_t h = 0; h < kv().n_kv_heads; ++h) kv().lengths[h] = 0;
    this->reset_state(seed);
    chunking_ = false;
    prompt_len_ = 0;
    this->abandon_step();  // an open per-head step is abandoned
    this->reset_heads();
  }
  void reset() { reset(config_.seed); }  ///< `reset(seed)` with the seed of the configuration.

  std::size_t length(std::size_t h) const override { return kv().lengths[check_head(h, "length")]; }
  const std::int64_t* positions(std::size_t h) const override { return kv().pos(check_head(h, "positions")); }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    const std::int64_t* pos = kv().pos(check_head(h, "retained_positions"));
    std::vector<std::int64_t> out(pos, pos + kv().lengths[h]);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// Sorts the tokens the cache tracks (slots `[0, n)`, `n` = its length after the last
  /// prefill chunk / decode step; before, the view's length) into ascending position
  /// order, moving K, V, position, score and recent flag together.
  /// Slots the engine appended since the last step (between `append` and
  /// `decode_step`) are not moved, so the pending step still sees them at
  /// slot `n`. O(n log n + n · head_dim) per KV head; allocates nothing.
  /// Throws `std::invalid_argument` (nothing moved) if a length exceeds the view's capacity.
  void restore_position_order() override {
    live("restore_position_order");
    no_open_step("restore_position_order");
    if (!prefilled_ && !chunking_) detail::check_lengths(kv(), "kvevict::Cache::restore_position_order");
    for (std::size_t j = 0; j < kv().n_kv_heads; ++j)
      slots_.sort_by_position(j, prefilled_ ? held_[j] : chunking_ ? n_ : kv().lengths[j]);
  }

 private:
  /// Books a scored chunk of `C` tokens (slots `[n_, n_ + C)`): scores = the accumulators' fold (0 for
  /// `NoScore`; a key score's values), or for the anchor hooks every held slot's score of `score_held_keys`.
  /// The chunk's newest position is recorded before any cut can evict it: a decode step's token must come
  /// after every prompt position, kept or not. Cannot throw.
  void take_chunk(std::size_t C, float tau) noexcept {
    const std::size_t n = n_ + C;
    scorer_.fold(slots_.all_scores(), slots_.capacity(), n);
    scorer_.take_anchor(slots_.all_scores(), slots_.capacity(), n);  // the anchor hooks' scores, if any
    last_position_ = kv().pos(0)[n - 1];
    prompt_len_ += C;
    n_ = n;
    tau_ = tau;
    chunking_ = true;
  }
  /// The end of the prompt: the layer's budget shared and the cut to it (`HeadEviction::cut`), unless the budget is
  /// shared only at the first cut and the prompt fits (head-adaptive: every head then holds the prompt whole
  /// until a decode step first exceeds `k`); then the recent window, the last `min(w, length)` prompt tokens of
  /// every KV head, now its last slots; step 0. Cannot throw.
  void finish(std::size_t k, std::size_t w) noexcept {
    k_ = k, w_ = w, step_ = 0;
    prefilled_ = true;
    if (n_ > k || !this->shares_at_first_cut()) {
      cut(k, w, /*at_prefill=*/true);
      shared_budget_ = true;
    } else {
      std::fill(held_.begin(), held_.end(), n_);
    }
    enter_recent(w);
  }
  /// `detail::resolve_budget` (detail/budget_rule.hpp, shared with `PagedCache`) for
  /// budget `k` over this view: the recent-window rule, `selection.validate(k,
  /// w)`, and capacity >= `k + 1` (a decode step appends before it evicts); with
  /// bounded prefill also `max_prefill_chunk = C >= 1` and capacity >= `k + C`.
  /// Called before any state changes. Throws `std::invalid_argument` naming the values.
  std::pair<std::size_t, std::size_t> resolve_budget(std::size_t k, const char* who) const {
    const auto kw = this->resolve_kw(k, detail::CapacityNeed{kv().capacity}, who);
    if (config_.bounded_prefill) {
      const std::size_t C = config_.max_prefill_chunk;
      detail::require(C >= 1, who, ": bounded_prefill needs max_prefill_chunk >= 1 (got 0)");
      detail::require(C <= kv().capacity - k, who, ": bounded_prefill with budget k = ", k,
                      " and max_prefill_chunk = ", C, " needs a view of capacity >= k + C = ", k + C,
                      ", but the capacity is ", kv().capacity);
    }
    return kw;
  }
  std::size_t prompt_len_ = 0;  // prompt tokens scored so far
  template <class C>
  friend void detail::copy_cache_state(C& dst, const C& src);
  template <class C>
  friend void detail::prefill_cache_from_attention(C& cache, const float* sums, std::size_t P);
  template <class C>
  friend PromptSums detail::prompt_sums_of(const C& cache);
};

}  // namespace kvevict
