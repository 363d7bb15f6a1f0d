// paged/paged_cache.hpp — the per-sequence, per-layer evicting cache over
// page-table storage: token-granular (one selection shared by all KV heads) or
// page-granular (whole pages leave the table, no K/V bytes move; page_eviction.hpp).
// Slot state in paged_slots.hpp; scoring, budget rule, contracts and the token unit's eviction paths
// (detail/head_eviction.hpp) shared with `Cache`.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kvevict/cache_config.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/detail/head_eviction.hpp"  // the token unit's cut and step (over the core's policies and checks)
#include "kvevict/paged/page_eviction.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_cache_interface.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "kvevict/detail/paged_slots.hpp"

namespace kvevict {

/// An evicting KV cache for one layer of one sequence stored in pages
/// (`PagedKVView`), with pages drawn from and returned to a `PagePool` shared
/// with other sequences. Same policy-based design and the same engine
/// protocol as `Cache` (prefill, then one `decode_step` per generated token,
/// after `PagePool::append` has written the token's K/V); the score policies,
/// temperature schedules and selection policies are the library's own.
///
/// One selection is made for all KV heads (a page slot holds the token of
/// every KV head): the per-KV-head scores `[kv_head][capacity]` are summed over
/// KV heads (head 0 first) and that row decides, exactly as `Cache` with
/// `CacheConfig::shared_heads = true`, which is therefore required. It is built
/// from `Cache`'s parts: the policy contracts (concepts.hpp), the scoring with
/// rollback (`detail::Scorer`), the budget rule (`detail::resolve_budget`,
/// detail/budget_rule.hpp), the eviction paths of the token unit (`detail::HeadEviction`'s
/// layer-wide cut and decode-step eviction, the code `Cache` runs with `shared_heads`) and the recent
/// window as per-slot flags (`RecentFlags`, moved with their slot by `detail::PagedSlotTable`).
///
/// **Token unit.** Prefill keeps `selection.prefill_keep`'s tokens, compacted in
/// position order into logical slots `[0, m)`; a decode step with `n > k`
/// evicts `selection`'s victim by filling its slot with logical slot `n − 1`
/// (O(n_kv_heads · head_dim) bytes moved). A page left empty at the end of the
/// table goes back to the pool at once. For every policy the logical slots,
/// positions and scores are bit for bit those of `Cache` with `shared_heads`
/// on the same logits (logical slot `s` = contiguous slot `s`).
///
/// **Page unit.** Budget rounding: the sequence is cut only when it exceeds
/// `k` by a whole page, so once it has reached `k` it holds between `k` and
/// `k + page_size − 1` tokens (at most `ceil((k + page_size − 1) / page_size)`
/// pages). While `n − k >= page_size` (prefill) or when `n − k == page_size`
/// (decode step) the middle page (neither one of the first `start_pages` nor
/// one holding one of the last `max(w, 1)` tokens) with the lowest page score
/// leaves the table and returns to the pool, ties to the older page; no K/V
/// bytes move, positions keep their values (`detail::PageEvictor`,
/// page_eviction.hpp). The selection's `prefill_keep` and `victim` are not
/// used; its `validate(k, w)` is. Requires `k >= start_pages · page_size +
/// max(w, 1)` so that the middle is never empty when a page must go.
///
/// Errors: as `Cache` (every call validates first; `std::invalid_argument` or
/// `std::length_error`; state, view and pool unchanged), plus a
/// page table that is not the pool's (`PagePool::check_table`) at prefill and
/// a last page not in use at a decode step. `decode_step` performs no heap
/// allocation (the pool's free list is pre-sized).
/// Threads: the pool is shared, so the sequences of one pool must be stepped by one
/// thread (or under the engine's lock); a call may run its scoring on `set_executor`'s workers.
template <class Score, class Temperature, class Selection>
class PagedCache final
    : public detail::HeadEviction<PagedCacheInterface, detail::PagedSlotTable, Score, Temperature, Selection> {
 public:
  /// Builds a cache over `kv` (length must be 0) drawing pages from `pool`
  /// (which must outlive the cache). Allocates O(n_kv_heads · capacity) floats once.
  /// Throws `std::invalid_argument` if the view is invalid or not empty, its
  /// `num_pages` differs from the pool's, `config.shared_heads` is false, `config.head_budgets` is adaptive,
  /// `config.max_prefill_chunk` is not 0 or `config.bounded_prefill` is set (no chunked prefill),
  /// `config.n_q_heads` is not a positive multiple of `kv.n_kv_heads`, a
  /// page-unit option is set with the token unit, or — for a token-count
  /// budget — the budget fails `resolve_budget` (as `Cache`).
  template <class T>
  PagedCache(const CacheConfig& config, const PagedEvictionConfig& paged, const PagedKVView<T>& kv, PagePool& pool,
             Score score = Score(), Temperature temperature = Temperature(), Selection selection = Selection())
      // The view is validated (PagedSlotTable's ErasedPagedKV) before the core checks n_q_heads against it.
      : Heads(config, detail::PagedSlotTable(detail::ErasedPagedKV::from(kv)), std::move(score),
              std::move(temperature), std::move(selection), "kvevict::PagedCache",
              detail::key_reader<Score, T>(kv.head_dim)),
        paged_(paged),
        pool_(&pool),
        pages_(paged, kv.max_pages) {
    detail::require(config.shared_heads, "kvevict::PagedCache: config.shared_heads must be true (a page slot holds "
                                         "the token of every KV head, so all KV heads share one selection)");
    // PagedCache prefills in one shot only; a chunked-prefill option would be silently ignored.
    detail::require(config.max_prefill_chunk == 0, "kvevict::PagedCache: config.max_prefill_chunk = ",
                    config.max_prefill_chunk, " is not supported (PagedCache has no chunked prefill; set 0)");
    detail::require(!config.bounded_prefill, "kvevict::PagedCache: config.bounded_prefill is not supported "
                                             "(PagedCache has no chunked prefill; set false)");
    detail::require(!config.head_budgets.is_adaptive(), "kvevict::PagedCache: config.head_budgets = adaptive is "
                    "not supported (a page slot holds the token of every KV head, so every head keeps the same "
                    "tokens; use kvevict::Cache)");
    check_head_budgets(config.head_budgets, "kvevict::PagedCache");
    detail::require(*kv.length == 0, "kvevict::PagedCache: the sequence must be empty at construction (length = ",
                    *kv.length, ")");
    detail::require(kv.num_pages == pool.num_pages(), "kvevict::PagedCache: the view has num_pages = ",
                    kv.num_pages, " but the pool has ", pool.num_pages());
    detail::require(paged.unit == EvictUnit::token || paged.unit == EvictUnit::page,
                    "kvevict::PagedCache: unknown evict unit ", static_cast<int>(paged.unit));
    detail::require(paged.page_score == PageScore::sum || paged.page_score == PageScore::mean,
                    "kvevict::PagedCache: unknown page score ", static_cast<int>(paged.page_score));
    detail::require(paged.unit == EvictUnit::token || !detail::ranks_mean<Score>(),
                    "kvevict::PagedCache: the page unit ranks pages by summed scores; a mean-attention score "
                    "(MeanAttention, kRanksMean) ranks tokens: use the token unit");
    if (paged.unit == EvictUnit::token) {
      detail::require(paged.start_pages == 0, "kvevict::PagedCache: start_pages = ", paged.start_pages,
                      " is only meaningful with the page unit (token unit: set 0)");
      detail::require(paged.page_score == PageScore::sum,
                      "kvevict::PagedCache: page_score = mean is only meaningful with the page unit");
    }
    this->init_heads();
    if (!config.budget.is_ratio()) (void)resolve_budget(config.budget.token_count(), "kvevict::PagedCache");
  }

  // Not copyable (the core's copy is deleted); the implicit move is noexcept. A moved-from cache owns
  // nothing (its pool pointer and page table now belong to the moved-to cache): every member of
  // `PagedCacheInterface` (and `reset`) then throws `std::logic_error`.

  /// Prefill (Keyformer Algorithm 1, prompt phase), as `Cache::prefill` with
  /// `shared_heads`: the sequence holds exactly `prompt_len` tokens (appended
  /// with `PagePool::append`, positions strictly ascending); `logits`
  /// `[q_head][P][P]` (causal part read; may be null for a score without logits: `NoScore`, or a key
  /// score, which gives each token its key's score per KV head), `gumbel`
  /// optional injected ζ in the same layout. Token unit: keeps
  /// `selection.prefill_keep`'s `min(k, P)` tokens in position order and frees
  /// the pages left empty. Page unit: evicts `floor((P − k) / page_size)`
  /// middle pages (when `P >= k + page_size`), lowest score first.
  /// O(n_q_heads · P²) scoring, O(P · n_kv_heads · head_dim) compaction. Throws
  /// `std::invalid_argument` as `Cache::prefill` does (the same budget rules, see `resolve_budget`; token unit: a
  /// selection score that is not finite and >= 0), for a page table
  /// that fails `PagePool::check_table`, and (page unit) if `k < start_pages · page_size + max(w, 1)`.
  void prefill(const float* logits, std::size_t prompt_len, const float* gumbel = nullptr) override {
    live("prefill");
    const std::size_t P = prompt_len, ps = kv().page_size;
    detail::require(!prefilled_, "kvevict::PagedCache::prefill: already prefilled; call reset() for a new sequence");
    detail::require(P >= 1, "kvevict::PagedCache::prefill: prompt_len must be >= 1 (got 0)");
    detail::require(*kv().length == P, "kvevict::PagedCache::prefill: prompt_len = ", P,
                    " but the sequence's length = ", *kv().length, " (append the prompt's K/V first)");
    pool_->check_table(kv().template typed<unsigned char>(), "kvevict::PagedCache::prefill");
    const std::int64_t* pos = kv().positions;
    for (std::size_t s = 1; s < P; ++s)
      detail::require(pos[s] > pos[s - 1], "kvevict::PagedCache::prefill: positions must be strictly ascending by "
                                           "slot (slot ", s, " has ", pos[s], ", slot ", s - 1, " has ", pos[s - 1],
                      ")");
    const auto [k, w] = resolve_budget(config_.budget.resolve(P), "kvevict::PagedCache::prefill");
    const float tau = checked_tau(0, "prefill");
    if constexpr (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::PagedCache::prefill: logits must be non-null");
      (void)detail::checked_mul("kvevict::PagedCache::prefill", "n_q_heads * prompt_len * prompt_len (the logits)",
                                config_.n_q_heads, P, P);
      MaterializedChunk rows(logits, gumbel, P, P);
      scorer_.score_chunk(rows, 0, P, 1.0f / tau, "prefill");  // Scorer::score_prompt, checked before its fold
    } else if constexpr (detail::has_key_score<Score>) {
      this->score_prompt_keys(0, P, "prefill");
    }
    this->score_held_keys(P, "prefill");  // the anchor hooks (KeyDiff); no-op otherwise
    if (paged_.unit == EvictUnit::token) scorer_.check_selection(P, true, "prefill");
    // The newest prompt position, before compaction may evict it (w = 0): a decode step's token
    // must come after every position of the prompt, kept or not (as in Cache).
    const std::int64_t last_prompt_position = kv().positions[P - 1];
    // ---- nothing below can throw ----
    if constexpr (Score::kUsesLogits || detail::has_key_score<Score>)
      scorer_.fold(slots_.all_scores(), slots_.capacity(), P);
    else if constexpr (detail::has_anchor_score<Score>)
      scorer_.take_anchor(slots_.all_scores(), slots_.capacity(), P);
    else
      slots_.clear_scores();
    last_position_ = last_prompt_position;
    k_ = k;
    w_ = w;
    n_ = P;
    if (paged_.unit == EvictUnit::token) {
      // Cache's cut with shared_heads (HeadEviction::cut): the selection's tokens of the summed scores, compacted
      // in position order; then the pages left empty go back to the pool, and the recent window is the last
      // min(w, m) prompt tokens, now the last slots (HeadEviction::enter_recent).
      std::fill(held_.begin(), held_.end(), P);
      cut(k, w, /*at_prefill=*/true);
      shared_budget_ = true;
      pages_freed_ += slots_.release_tail(*pool_, P, n_);
      enter_recent(w);
    } else {
      slots_.reset_window(0);  // the page unit's recent area is by page (`PageEvictor`), not by flags
      if (P >= k + ps) n_ = pages_.evict(slots_, *pool_, this->summed_scores(P), P, w, (P - k) / ps, pages_freed_);
    }
    step_ = 0;
    tau_ = tau;
    prefilled_ = true;
  }

  /// One decode step, as `Cache::decode_step` with `shared_heads`: the engine
  /// appended the new token (`PagePool::append`, a larger position than any
  /// before) so the sequence holds `n = previous length + 1` tokens; `logits`
  /// `[q_head][n]` by logical slot (may be null for a score without logits), `gumbel`
  /// optional `[q_head][n]`. Scores the step at τ_t; token unit: if `n > k`
  /// evicts the selection's victim (the hole is filled with slot `n − 1`) and
  /// frees the last page if it became empty; page unit: if `n − k >= page_size`
  /// evicts the lowest-scoring middle page. O(n_q_heads · n) scoring + O(n) selection + O(n_kv_heads
  /// · head_dim) bytes moved (token) or O(n) ints/floats shifted (page, once per `page_size` steps).
  /// No heap allocation. Throws `std::invalid_argument` as `Cache::decode_step` does and if the
  /// last page of the table is not a page in use of the pool; state unchanged.
  void decode_step(const float* logits, std::size_t n, const float* gumbel = nullptr) override {
    live("decode_step");
    const std::size_t ps = kv().page_size;
    detail::require(prefilled_, "kvevict::PagedCache::decode_step: call prefill() first");
    detail::require(n == n_ + 1, "kvevict::PagedCache::decode_step: n = ", n, " but the cache holds ", n_,
                    " tokens (append exactly one token, then pass n = ", n_ + 1, ")");
    detail::require(*kv().length == n, "kvevict::PagedCache::decode_step: the sequence's length = ", *kv().length,
                    ", expected n = ", n, " (append the new token's K/V first)");
    const std::int32_t last_page = kv().table[(n - 1) / ps];
    detail::require(last_page >= 0 && static_cast<std::size_t>(last_page) < pool_->num_pages() &&
                        pool_->in_use(last_page),
                    "kvevict::PagedCache::decode_step: page_table[", (n - 1) / ps, "] = ", last_page,
                    " is not a page in use of the pool");
    const std::int64_t new_pos = kv().positions[n - 1];
    detail::require(new_pos > last_position_, "kvevict::PagedCache::decode_step: new token's position ", new_pos,
                    " must be larger than the last one, ", last_position_);
    const float tau = checked_tau(step_ + 1, "decode_step");
    this->score_step(logits, gumbel, n, tau, new_pos);
    // ---- nothing below can throw ----
    last_position_ = new_pos;
    n_ = n;
    if (paged_.unit == EvictUnit::token) {
      // Cache's step with shared_heads (HeadEviction::evict_step): if n > k, the selection's victim of the summed
      // scores is filled with slot n − 1; then a last page left empty goes back to the pool.
      slots_.enter_window(n - 1);
      evict_step(n, /*victims_found=*/false);
      if (n_ < n) pages_freed_ += slots_.release_tail(*pool_, n, n_);
    } else if (n >= k_ + ps) {
      const float* summed = this->summed_scores(n);
      n_ = pages_.evict(slots_, *pool_, summed, n, w_, 1, pages_freed_);
    }
    ++step_;
    tau_ = tau;
  }

  /// Ends the sequence: returns all its pages to the pool
  /// (`PagePool::release_sequence`: table entries `kNoPage`, length 0), scores
  /// 0, step 0, no recent window, sets the noise seed. Throws
  /// `std::invalid_argument` (nothing changed) if the table holds an entry that
  /// is not a page in use. O(capacity).
  void reset(std::uint64_t seed) override {
    live("reset");
    pages_freed_ += pool_->release_sequence(kv().template typed<unsigned char>());
    this->reset_state(seed);
    this->reset_heads();
  }
  /// `reset(seed)` with the configuration's seed.
  void reset() { reset(config_.seed); }

  std::size_t length(std::size_t h) const override {
    check_head(h, "length");
    return *kv().length;
  }
  const std::int64_t* positions(std::size_t h) const override {
    check_head(h, "positions");
    return kv().positions;
  }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    check_head(h, "retained_positions");
    std::vector<std::int64_t> out(kv().positions, kv().positions + *kv().length);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// Token unit: reorders the tracked logical slots (`[0, n)`, n = the length
  /// after the last prefill / decode step; before prefill, the sequence's
  /// length) into ascending position order (K, V of every head, positions,
  /// scores and recent flags together; pages stay where they are), as `Cache`
  /// does; a slot appended since the last step stays where it is. Page unit:
  /// slots are always in position order; nothing to do. O(n log n + n ·
  /// n_kv_heads · head_dim); allocates nothing.
  /// Throws `std::invalid_argument` (nothing moved) if the length exceeds the view's capacity.
  void restore_position_order() override {
    live("restore_position_order");
    if (paged_.unit == EvictUnit::page) return;
    detail::require(prefilled_ || *kv().length <= slots_.capacity(),
                    "kvevict::PagedCache::restore_position_order: the sequence's length = ", *kv().length,
                    " exceeds its capacity ", slots_.capacity());
    slots_.sort_by_position(prefilled_ ? n_ : *kv().length);
  }
  std::size_t pages_in_use() const override {
    live("pages_in_use");
    return (*kv().length + kv().page_size - 1) / kv().page_size;
  }
  std::size_t pages_freed() const override {
    live("pages_freed");
    return pages_freed_;
  }
  EvictUnit evict_unit() const override {
    live("evict_unit");
    return paged_.unit;
  }

  /// The paged settings.
  const PagedEvictionConfig& paged_config() const { return paged_; }

 private:
  // The state, policies and checks `Cache` has too (detail/eviction_core.hpp; it asserts the policy contracts) and
  // the token unit's eviction paths (detail/head_eviction.hpp, its layer-wide case).
  using Heads = detail::HeadEviction<PagedCacheInterface, detail::PagedSlotTable, Score, Temperature, Selection>;
  using Core = typename Heads::Core;
  using Core::config_, Core::slots_, Core::scorer_, Core::selection_, Core::last_position_, Core::k_, Core::w_,
      Core::n_, Core::step_, Core::tau_, Core::prefilled_, Core::kv, Core::checked_tau, Core::live, Core::check_head;
  using Heads::held_, Heads::shared_budget_, Heads::cut, Heads::enter_recent, Heads::evict_step;

  /// `detail::resolve_budget` (detail/budget_rule.hpp, the rule `Cache` uses, so the
  /// token unit equals the contiguous cache) with the paged capacity — `k + 1`
  /// slots (token unit; a step appends before it evicts) or `k + page_size`
  /// (page unit: a page goes when the sequence reaches it) — plus, for the page
  /// unit, `k >= start_pages · page_size + max(w, 1)` (the middle is never
  /// empty when a page must go). Throws `std::invalid_argument` naming the values.
  std::pair<std::size_t, std::size_t> resolve_budget(std::size_t k, const char* who) const {
    const bool page = paged_.unit == EvictUnit::page;
    const std::size_t ps = kv().page_size;
    detail::CapacityNeed need;
    need.capacity = kv().capacity();
    need.store = "sequence";
    if (page) {
      need.headroom = ps;
      need.headroom_name = "page_size";
      need.why = "a page goes when the sequence reaches k + page_size";
    }
    const auto kw = this->resolve_kw(k, need, who);
    // k >= start_pages · ps + m without the product (a huge start_pages wrapped it to a small bound): for k >= m,
    // equivalent to start_pages <= (k − m) / ps.
    const std::size_t m = std::max<std::size_t>(kw.second, 1);
    if (page)
      detail::require(k >= m && paged_.start_pages <= (k - m) / ps, who,
                      ": page unit needs k >= start_pages * page_size + max(w, 1) (k = ", k, ", start_pages = ",
                      paged_.start_pages, ", page_size = ", ps, ", w = ", kw.second, ")");
    return kw;
  }

  PagedEvictionConfig paged_;
  PagePool* pool_;
  detail::PageEvictor pages_;  // page unit: page scores and marks
  std::size_t pages_freed_ = 0;
};

}  // namespace kvevict
