// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// paged/paged_cache.hpp — the per-sequence, per-layer evicting cache over
// page-table storage: token-granular (one selection shared by all KV heads) or
// page-granular (whole pages leave the table, no K/V bytes move).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kvevict/budget.hpp"
#include "kvevict/cache.hpp"  // CacheConfig
#include "kvevict/cache_interface.hpp"
#include "kvevict/core/check.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/paged/paged_kv_view.hpp"
#include "kvevict/policies.hpp"  // Policy, PolicyParams
#include "kvevict/score/gumbel.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/score/softmax_accumulate.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/selection/sink_recent_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvevict {

/// What one eviction removes from a paged sequence.
enum class EvictUnit {
  token,  ///< one token per decode step, chosen by the policy's selection (all KV heads share it)
  page    ///< whole pages of the middle area, lowest page score first (OpenVINO GenAI style)
};
/// How a page's score is formed from its tokens' scores (page unit only).
enum class PageScore {
  sum,  ///< sum of the tokens' scores (summed over KV heads), OpenVINO GenAI's block score
  mean  ///< the sum divided by the page's filled slots
};

/// Parses "token" or "page"; throws `std::invalid_argument` naming the value otherwise.
inline EvictUnit parse_evict_unit(const std::string& name) {
  if (name == "token") return EvictUnit::token;
  if (name == "page") return EvictUnit::page;
  throw std::invalid_argument(
      detail::concat("kvevict::parse_evict_unit: unknown evict unit '", name, "' (expected token or page)"));
}
/// "token" or "page".
inline const char* evict_unit_name(EvictUnit u) { return u == EvictUnit::token ? "token" : "page"; }

/// Settings of a paged cache beyond `CacheConfig`.
struct PagedEvictionConfig {
  /// Token- or page-granular eviction.
  EvictUnit unit = EvictUnit::token;
  /// Page unit: the first `start_pages` pages of the table are never evicted
  /// (attention sinks, rounded up to pages). Must be 0 with the token unit.
  std::size_t start_pages = 0;
  /// Page unit: sum (default) or mean. Must be `sum` with the token unit.
  PageScore page_score = PageScore::sum;
};

/// Runtime interface of a paged cache: `CacheInterface` plus the page counts.
/// `length(h)`, `positions(h)` and `retained_positions(h)` are the same for
/// every KV head (one selection per layer); `scores(h)` are per KV head.
class PagedCacheInterface : public CacheInterface {
 public:
  /// Pages the sequence holds now, `ceil(length / page_size)`.
  virtual std::size_t pages_in_use() const = 0;
  /// Pages this cache returned to the pool since construction (evictions and resets).
  virtual std::size_t pages_freed() const = 0;
  /// Token or page unit.
  virtual EvictUnit evict_unit() const = 0;
};

namespace detail {
/// Byte-level access to a `PagedKVView<T>` so that `PagedCache` need not be
/// templated on the element type.
struct ErasedPagedKV {
  unsigned char* k = nullptr;
  unsigned char* v = nullptr;
  std::int32_t* table = nullptr;
  std::size_t* length = nullptr;
  std::int64_t* positions = nullptr;
  std::size_t num_pages = 0, page_size = 0, n_kv_heads = 0, head_dim = 0, max_pages = 0, elem = 0, row_bytes = 0;
  PageLayout layout = PageLayout::NHD;

  template <class T>
  static ErasedPagedKV from(const PagedKVView<T>& view) {
    view.validate();
    ErasedPagedKV e;
    e.k = reinterpret_cast<unsigned char*>(view.k);
    e.v = reinterpret_cast<unsigned char*>(view.v);
    e.table = view.page_table;
    e.length = view.length;
    e.positions = view.positions;
    e.num_pages = view.num_pages;
    e.page_size = view.page_size;
    e.n_kv_heads = view.n_kv_heads;
    e.head_dim = view.head_dim;
    e.max_pages = view.max_pages;
    e.elem = sizeof(T);
    e.row_bytes = view.head_dim * sizeof(T);
    e.layout = view.layout;
    return e;
  }
  /// A typed view over the same memory (for `PagePool` calls).
  template <class T>
  PagedKVView<T> typed() const {
    PagedKVView<T> v_;
    v_.k = reinterpret_cast<T*>(k);
    v_.v = reinterpret_cast<T*>(v);
    v_.num_pages = num_pages;
    v_.page_size = page_size;
    v_.n_kv_heads = n_kv_heads;
    v_.head_dim = head_dim;
    v_.layout = layout;
    v_.page_table = table;
    v_.max_pages = max_pages;
    v_.length = length;
    v_.positions = positions;
    return v_;
  }
  std::size_t capacity() const { return max_pages * page_size; }
  std::size_t offset_bytes(std::size_t h, std::size_t s) const {
    const std::size_t p = static_cast<std::size_t>(table[s / page_size]), o = s % page_size;
    const std::size_t el = layout == PageLayout::NHD ? ((p * page_size + o) * n_kv_heads + h) * head_dim
                                                     : ((p * n_kv_heads + h) * page_size + o) * head_dim;
    return el * elem;
  }
  unsigned char* k_row(std::size_t h, std::size_t s) const { return k + offset_bytes(h, s); }
  unsigned char* v_row(std::size_t h, std::size_t s) const { return v + offset_bytes(h, s); }
  /// Copies the K and V rows of every KV head from logical slot `from` to `to`. O(n_kv_heads · head_dim).
  void copy_slot(std::size_t from, std::size_t to) const {
    for (std::size_t h = 0; h < n_kv_heads; ++h) {
      std::memcpy(k_row(h, to), k_row(h, from), row_bytes);
      std::memcpy(v_row(h, to), v_row(h, from), row_bytes);
    }
  }
};
}  // namespace detail

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
/// `CacheConfig::shared_heads = true`, which is therefore required.
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
/// pages). The table splits into the start area (the first `start_pages`
/// pages), the recent area (every page holding one of the last `max(w, 1)`
/// tokens, so the page being written is always recent) and the middle. While
/// `n − k >= page_size` (prefill) or when `n − k == page_size` (decode step) the
/// middle page with the lowest page score (sum of its tokens' summed scores,
/// or mean over its filled slots, which for a middle page is always
/// `page_size`) leaves the table and returns to the pool; ties go to the older
/// page (lower table index). No K/V bytes move: the table entries, position
/// IDs and scores of the later pages shift down by one page (O(n) ints and
/// floats), positions keep their values. The selection policy's `prefill_keep`
/// and `victim` are not used; its `validate(k, w)` still is. Requires
/// `k >= start_pages · page_size + max(w, 1)` so that the middle is never
/// empty when a page must go.
///
/// Errors: as `Cache` (every call validates first; `std::invalid_argument` or
/// `std::length_error`; state, view, pool and generator unchanged), plus a
/// page table that is not the pool's (`PagePool::check_table`) at prefill and
/// a last page not in use at a decode step. `decode_step` performs no heap
/// allocation (the pool's free list is pre-sized).
/// Thread safety: none; the pool is shared, so the sequences of one pool must
/// be stepped by one thread (or under the engine's lock).
template <class Score, class Temperature, class Selection>
class PagedCache final : public PagedCacheInterface {
 public:
  using score_policy = Score;
  using temperature_policy = Temperature;
  using selection_policy = Selection;

  /// Builds a cache over `kv` (length must be 0) drawing pages from `pool`
  /// (which must outlive the cache). Allocates O(n_kv_heads · capacity) floats once.
  /// Throws `std::invalid_argument` if the view is invalid or not empty, its
  /// `num_pages` differs from the pool's, `config.shared_heads` is false,
  /// `config.n_q_heads` is not a positive multiple of `kv.n_kv_heads`, a
  /// page-unit option is set with the token unit, or — for a token-count
  /// budget — the budget fails `resolve_budget` (as `Cache`).
  template <class T>
  PagedCache(const CacheConfig& config, const PagedEvictionConfig& paged, const PagedKVView<T>& kv, PagePool& pool,
             Score score = Score(), Temperature temperature = Temperature(), Selection selection = Selection())
      : config_(config),
        paged_(paged),
        kv_(detail::ErasedPagedKV::from(kv)),
        pool_(&pool),
        score_(std::move(score)),
        temperature_(std::move(temperature)),
        selection_(std::move(selection)),
        rng_(config.seed) {
    const std::size_t nkv = kv_.n_kv_heads;
    detail::require(config.shared_heads, "kvevict::PagedCache: config.shared_heads must be true (a page slot holds "
                                         "the token of every KV head, so all KV heads share one selection)");
    detail::require(config.n_q_heads >= 1 && config.n_q_heads % nkv == 0, "kvevict::PagedCache: n_q_heads (",
                    config.n_q_heads, ") must be a positive multiple of the view's n_kv_heads (", nkv, ")");
    detail::require(*kv_.length == 0, "kvevict::PagedCache: the sequence must be empty at construction (length = ",
                    *kv_.length, ")");
    detail::require(kv_.num_pages == pool.num_pages(), "kvevict::PagedCache: the view has num_pages = ",
                    kv_.num_pages, " but the pool has ", pool.num_pages());
    detail::require(paged.unit == EvictUnit::token || paged.unit == EvictUnit::page,
                    "kvevict::PagedCache: unknown evict unit ", static_cast<int>(paged.unit));
    detail::require(paged.page_score == PageScore::sum || paged.page_score == PageScore::mean,
                    "kvevict::PagedCache: unknown page score ", static_cast<int>(paged.page_score));
    if (paged.unit == EvictUnit::token) {
      detail::require(paged.start_pages == 0, "kvevict::PagedCache: start_pages = ", paged.start_pages,
                      " is only meaningful with the page unit (token unit: set 0)");
      detail::require(paged.page_score == PageScore::sum,
                      "kvevict::PagedCache: page_score = mean is only meaningful with the page unit");
    }
    group_ = config.n_q_heads / nkv;
    if (!config.budget.is_ratio()) (void)resolve_budget(config.budget.token_count(), "kvevict::PagedCache");
    const std::size_t cap = kv_.capacity();
    scores_.assign(nkv * cap, 0.0f);
    increments_.assign(nkv * cap, 0.0f);
    chunk_f_.assign(2 * detail::chunk_count(cap), 0.0f);
    row_.assign(cap, 0.0f);
    index_.assign(cap, 0);
    recent_ring_.assign(cap, 0);
    recent_slot_.assign(cap, 0);
    recent_flag_.assign(cap, 0);
    page_score_.assign(kv_.max_pages, 0.0f);
    page_mark_.assign(kv_.max_pages, 0);
    tmp_row_.assign(2 * nkv * kv_.row_bytes, 0);
  }

  PagedCache(const PagedCache&) = delete;
  PagedCache& operator=(const PagedCache&) = delete;
  PagedCache(PagedCache&&) noexcept = default;
  PagedCache& operator=(PagedCache&&) noexcept = default;

  /// Prefill (Keyformer Algorithm 1, prompt phase), as `Cache::prefill` with
  /// `shared_heads`: the sequence holds exactly `prompt_len` tokens (appended
  /// with `PagePool::append`, positions strictly ascending); `logits`
  /// `[q_head][P][P]` (causal part read; may be null for `NoScore`), `gumbel`
  /// optional injected ζ in the same layout. Token unit: keeps
  /// `selection.prefill_keep`'s `min(k, P)` tokens in position order and frees
  /// the pages left empty. Page unit: evicts `floor((P − k) / page_size)`
  /// middle pages (when `P >= k + page_size`), lowest score first.
  /// O(n_q_heads · P²) scoring, O(P · n_kv_heads · head_dim) compaction.
  /// Throws `std::invalid_argument` as `Cache::prefill` does (the same budget
  /// rules, see `resolve_budget`), for a page table that fails
  /// `PagePool::check_table`, and (page unit) if `k < start_pages · page_size + max(w, 1)`.
  void prefill(const float* logits, std::size_t prompt_len, const float* gumbel = nullptr) override {
    const std::size_t nkv = kv_.n_kv_heads, P = prompt_len, ps = kv_.page_size;
    const std::size_t cap = kv_.capacity();
    detail::require(!prefilled_, "kvevict::PagedCache::prefill: already prefilled; call reset() for a new sequence");
    detail::require(P >= 1, "kvevict::PagedCache::prefill: prompt_len must be >= 1 (got 0)");
    detail::require(*kv_.length == P, "kvevict::PagedCache::prefill: prompt_len = ", P,
                    " but the sequence's length = ", *kv_.length, " (append the prompt's K/V first)");
    pool_->check_table(kv_.typed<unsigned char>(), "kvevict::PagedCache::prefill");
    const std::int64_t* pos = kv_.positions;
    for (std::size_t s = 1; s < P; ++s)
      detail::require(pos[s] > pos[s - 1], "kvevict::PagedCache::prefill: positions must be strictly ascending by "
                                           "slot (slot ", s, " has ", pos[s], ", slot ", s - 1, " has ", pos[s - 1],
                      ")");
    const auto [k, w] = resolve_budget(config_.budget.resolve(P), "kvevict::PagedCache::prefill");
    const float tau = checked_tau(0, "prefill");

    if (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::PagedCache::prefill: logits must be non-null");
      const Xoshiro256pp saved = rng_;
      std::fill(increments_.begin(), increments_.begin() + static_cast<std::ptrdiff_t>(nkv * cap), 0.0f);
      const float inv_tau = 1.0f / tau;
      for (std::size_t h = 0; h < config_.n_q_heads; ++h) {
        float* acc = increments_.data() + (h / group_) * cap;
        for (std::size_t r = Score::kPrefillLastRow ? P - 1 : 0; r < P; ++r) {
          const std::size_t offset = (h * P + r) * P;
          if (!score_row(logits + offset, gumbel, offset, r + 1, inv_tau)) {
            rng_ = saved;
            throw std::invalid_argument(detail::concat("kvevict::PagedCache::prefill: logits row ", r, " of q_head ",
                                                       h, " contains NaN or +inf"));
          }
          detail::add_chunks(row_.data(), chunk_f_.data(), r + 1, acc, false);
        }
      }
      for (std::size_t j = 0; j < nkv; ++j) std::copy_n(increments_.data() + j * cap, P, scores_.data() + j * cap);
    } else {
      std::fill(scores_.begin(), scores_.end(), 0.0f);
    }

    // The newest prompt position, before compaction may evict it (w = 0): a decode step's token
    // must come after every position of the prompt, kept or not (as in Cache).
    const std::int64_t last_prompt_position = kv_.positions[P - 1];

    // ---- nothing below can throw ----
    sum_scores_over_heads(P);
    std::size_t m = P;
    ring_size_ = ring_count_ = ring_next_ = 0;
    if (paged_.unit == EvictUnit::token) {
      m = selection_.prefill_keep(row_.data(), P, k, w, index_.data());
      compact_in_order(m);
      free_tail_pages(P, m);
      ring_size_ = w;
      for (std::size_t s = m - std::min(w, m); s < m; ++s) ring_push(kv_.positions[s], s);
    } else if (P >= k + ps) {
      const std::size_t evictions = (P - k) / ps;
      const std::size_t hi = middle_end(P, w);
      compute_page_scores(hi);
      std::fill_n(page_mark_.data(), kv_.max_pages, std::uint8_t{0});
      for (std::size_t e = 0; e < evictions; ++e) page_mark_[lowest_page(hi)] = 1;
      m = remove_marked_pages(P);
    }
    last_position_ = last_prompt_position;
    k_ = k;
    w_ = w;
    n_ = m;
    step_ = 0;
    tau_ = tau;
    prefilled_ = true;
  }

  /// One decode step, as `Cache::decode_step` with `shared_heads`: the engine
  /// appended the new token (`PagePool::append`, a larger position than any
  /// before) so the sequence holds `n = previous length + 1` tokens; `logits`
  /// `[q_head][n]` by logical slot (may be null for `NoScore`), `gumbel`
  /// optional `[q_head][n]`. Scores the step at τ_t; token unit: if `n > k`
  /// evicts the selection's victim (the hole is filled with slot `n − 1`) and
  /// frees the last page if it became empty; page unit: if `n − k >= page_size`
  /// evicts the lowest-scoring middle page. O(n_q_heads · n) scoring +
  /// O(n) selection + O(n_kv_heads · head_dim) bytes moved (token) or O(n)
  /// ints/floats shifted (page, once per `page_size` steps). No heap allocation.
  /// Throws `std::invalid_argument` as `Cache::decode_step` does and if the
  /// last page of the table is not a page in use of the pool; state unchanged.
  void decode_step(const float* logits, std::size_t n, const float* gumbel = nullptr) override {
    const std::size_t nkv = kv_.n_kv_heads, cap = kv_.capacity(), ps = kv_.page_size;
    detail::require(prefilled_, "kvevict::PagedCache::decode_step: call prefill() first");
    detail::require(n == n_ + 1, "kvevict::PagedCache::decode_step: n = ", n, " but the cache holds ", n_,
                    " tokens (append exactly one token, then pass n = ", n_ + 1, ")");
    detail::require(*kv_.length == n, "kvevict::PagedCache::decode_step: the sequence's length = ", *kv_.length,
                    ", expected n = ", n, " (append the new token's K/V first)");
    const std::int32_t last_page = kv_.table[(n - 1) / ps];
    detail::require(last_page >= 0 && static_cast<std::size_t>(last_page) < pool_->num_pages() &&
                        pool_->in_use(last_page),
                    "kvevict::PagedCache::decode_step: page_table[", (n - 1) / ps, "] = ", last_page,
                    " is not a page in use of the pool");
    const std::int64_t new_pos = kv_.positions[n - 1];
    detail::require(new_pos > last_position_, "kvevict::PagedCache::decode_step: new token's position ", new_pos,
                    " must be larger than the last one, ", last_position_);
    const float tau = checked_tau(step_ + 1, "decode_step");

    if (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::PagedCache::decode_step: logits must be non-null");
      const Xoshiro256pp saved = rng_;
      const float inv_tau = 1.0f / tau;
      for (std::size_t j = 0; j < nkv; ++j) {
        float* s = scores_.data() + j * cap;
        std::copy_n(s, n, increments_.data() + j * cap);
        s[n - 1] = 0.0f;
        for (std::size_t t = 0; t < group_; ++t) {
          const std::size_t h = j * group_ + t;
          if (!score_row(logits + h * n, gumbel, h * n, n, inv_tau)) {
            for (std::size_t i = 0; i <= j; ++i) std::copy_n(increments_.data() + i * cap, n, scores_.data() + i * cap);
            rng_ = saved;
            throw std::invalid_argument(
                detail::concat("kvevict::PagedCache::decode_step: logits of q_head ", h, " contain NaN or +inf"));
          }
          detail::add_chunks(row_.data(), chunk_f_.data(), n, s, !Score::kAccumulates && t == 0);
        }
      }
      // ---- nothing below can throw ----
    } else {
      for (std::size_t j = 0; j < nkv; ++j) scores_[j * cap + n - 1] = 0.0f;
    }

    last_position_ = new_pos;
    n_ = n;
    if (paged_.unit == EvictUnit::token) {
      ring_push(new_pos, n - 1);
      if (n > k_) {
        const std::int64_t recent_from = recent_threshold();
        sum_scores_over_heads(n);
        evict_slot(pick_victim(row_.data(), n, recent_from), n);
        free_tail_pages(n, n - 1);
        n_ = n - 1;
      }
    } else if (n >= k_ + ps) {
      sum_scores_over_heads(n);
      const std::size_t hi = middle_end(n, w_);
      compute_page_scores(hi);
      std::fill_n(page_mark_.data(), kv_.max_pages, std::uint8_t{0});
      page_mark_[lowest_page(hi)] = 1;
      n_ = remove_marked_pages(n);
    }
    ++step_;
    tau_ = tau;
  }

  /// Ends the sequence: returns all its pages to the pool
  /// (`PagePool::release_sequence`: table entries `kNoPage`, length 0), scores
  /// 0, step 0, re-seeds the generator. Throws `std::invalid_argument` (nothing
  /// changed) if the table holds an entry that is not a page in use. O(capacity).
  void reset(std::uint64_t seed) override {
    pages_freed_ += pool_->release_sequence(kv_.typed<unsigned char>());
    std::fill(scores_.begin(), scores_.end(), 0.0f);
    rng_.seed(seed);
    config_.seed = seed;
    prefilled_ = false;
    k_ = w_ = n_ = step_ = 0;
    ring_size_ = ring_count_ = ring_next_ = 0;
    std::fill(recent_flag_.begin(), recent_flag_.end(), std::uint8_t{0});
    last_position_ = std::numeric_limits<std::int64_t>::min();
    tau_ = 0.0f;
  }
  /// `reset(seed)` with the configuration's seed.
  void reset() { reset(config_.seed); }

  std::size_t budget() const override { return k_; }
  std::size_t recent_window() const override { return w_; }
  std::size_t step() const override { return step_; }
  float temperature() const override { return tau_; }
  std::size_t length(std::size_t h) const override {
    check_head(h, "length");
    return *kv_.length;
  }
  const float* scores(std::size_t h) const override {
    check_head(h, "scores");
    return scores_.data() + h * kv_.capacity();
  }
  const std::int64_t* positions(std::size_t h) const override {
    check_head(h, "positions");
    return kv_.positions;
  }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    check_head(h, "retained_positions");
    std::vector<std::int64_t> out(kv_.positions, kv_.positions + *kv_.length);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// Token unit: reorders the tracked logical slots (`[0, n)`, n = the length
  /// after the last prefill / decode step; before prefill, the sequence's
  /// length) into ascending position order (K, V of every head, positions and
  /// scores together; pages stay where they are), as `Cache` does; a slot
  /// appended since the last step stays where it is. Page unit: slots are
  /// always in position order; nothing to do. O(n log n + n · n_kv_heads · head_dim).
  void restore_position_order() override {
    if (paged_.unit == EvictUnit::page) return;
    const std::size_t n = prefilled_ ? n_ : *kv_.length;
    sort_by_position(n);
    std::fill_n(recent_flag_.data(), n, std::uint8_t{0});
    for (std::size_t c = 0; c < ring_count_; ++c) {
      const std::size_t idx = (ring_next_ + ring_size_ - ring_count_ + c) % ring_size_;
      recent_slot_[idx] = n - ring_count_ + c;
      recent_flag_[n - ring_count_ + c] = 1;
    }
  }
  std::size_t pages_in_use() const override { return (*kv_.length + kv_.page_size - 1) / kv_.page_size; }
  std::size_t pages_freed() const override { return pages_freed_; }
  EvictUnit evict_unit() const override { return paged_.unit; }

  /// Query heads per KV head (`g`).
  std::size_t group_size() const { return group_; }
  /// The configuration (with the latest seed).
  const CacheConfig& config() const { return config_; }
  /// The paged settings.
  const PagedEvictionConfig& paged_config() const { return paged_; }

 private:
  /// Resolves `w` for budget `k` and checks the pair, with the rules of
  /// `Cache::resolve_budget` (kept identical so that the token unit equals the
  /// contiguous cache): an accumulated score's ratio window `q > 0` resolves to
  /// at least 1 token when `k >= 2`; `selection.validate(k, w)`. Plus the paged
  /// capacity: `k + 1` slots (token unit; a step appends before it evicts) or
  /// `k + page_size` (page unit: a page goes when the sequence reaches it), and
  /// for the page unit `k >= start_pages · page_size + max(w, 1)`.
  std::pair<std::size_t, std::size_t> resolve_budget(std::size_t k, const char* who) const {
    std::size_t w = config_.recent.resolve(k);
    if (Score::kAccumulates && config_.recent.is_ratio() && config_.recent.ratio_value() > 0.0 && k >= 2 && w == 0)
      w = 1;
    selection_.validate(k, w);
    const std::size_t ps = kv_.page_size;
    const std::size_t need = paged_.unit == EvictUnit::page ? k + ps : k + 1;
    detail::require(need <= kv_.capacity(), who, ": budget k = ", k, " needs a sequence capacity >= ", need,
                    paged_.unit == EvictUnit::page ? " (k + page_size)" : " (k + 1)", ", but max_pages ",
                    kv_.max_pages, " * page_size ", ps, " = ", kv_.capacity());
    if (paged_.unit == EvictUnit::page)
      detail::require(k >= paged_.start_pages * ps + std::max<std::size_t>(w, 1), who,
                      ": page unit needs k >= start_pages * page_size + max(w, 1) (k = ", k, ", start_pages = ",
                      paged_.start_pages, ", page_size = ", ps, ", w = ", w, ")");
    return {k, w};
  }
  float checked_tau(std::size_t t, const char* who) const {
    if (!Score::kUsesTemperature) return 1.0f;
    const float tau = temperature_(t);
    detail::require(detail::valid_tau(tau), "kvevict::PagedCache::", who, ": temperature at step ", t,
                    " must be finite and >= 1.17549435e-38 (FLT_MIN) (got ", tau, ")");
    return tau;
  }
  bool score_row(const float* x, const float* gumbel, std::size_t offset, std::size_t count, float inv_tau) {
    float* e = row_.data();
    float* f = chunk_f_.data();
    if (!score_.noisy()) return detail::softmax_chunks(x, detail::NoNoise{}, count, inv_tau, e, f);
    if (gumbel != nullptr)
      return detail::softmax_chunks(x, detail::GivenNoise{gumbel + offset}, count, inv_tau, e, f);
    return detail::softmax_chunks(x, detail::DrawnNoise{&rng_}, count, inv_tau, e, f);
  }
  void check_head(std::size_t h, const char* who) const {
    detail::require(h < kv_.n_kv_heads, "kvevict::PagedCache::", who, ": KV head ", h, " out of range (n_kv_heads = ",
                    kv_.n_kv_heads, ")");
  }
  /// row_[0, n) = Σ_j scores of KV head j (head 0 first, as `Cache`).
  void sum_scores_over_heads(std::size_t n) {
    std::fill_n(row_.data(), n, 0.0f);
    for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) {
      const float* s = scores_.data() + j * kv_.capacity();
      for (std::size_t i = 0; i < n; ++i) row_[i] += s[i];
    }
  }
  /// Moves the kept logical slots `index_[0, m)` (ascending) to `[0, m)`.
  void compact_in_order(std::size_t m) {
    const std::size_t cap = kv_.capacity();
    for (std::size_t c = 0; c < m; ++c) {
      const std::size_t from = index_[c];
      if (from == c) continue;
      kv_.copy_slot(from, c);
      kv_.positions[c] = kv_.positions[from];
      for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) scores_[j * cap + c] = scores_[j * cap + from];
    }
    *kv_.length = m;
  }
  /// Returns the pages of a sequence shrunk from `before` to `after` tokens
  /// that no longer hold a token (table entries set to `kNoPage`).
  void free_tail_pages(std::size_t before, std::size_t after) {
    const std::size_t ps = kv_.page_size;
    for (std::size_t i = (after + ps - 1) / ps; i < (before + ps - 1) / ps; ++i) {
      pool_->release(kv_.table[i]);  // validated: in use, listed once
      kv_.table[i] = kNoPage;
      ++pages_freed_;
    }
    *kv_.length = after;
  }
  /// Evicts logical slot `victim` by moving slot `n − 1` into it (all KV heads).
  void evict_slot(std::size_t victim, std::size_t n) {
    const std::size_t last = n - 1, cap = kv_.capacity();
    if (victim != last) {
      kv_.copy_slot(last, victim);
      kv_.positions[victim] = kv_.positions[last];
      for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) scores_[j * cap + victim] = scores_[j * cap + last];
      if (ring_size_ > 0) {
        recent_flag_[victim] = recent_flag_[last];
        recent_flag_[last] = 0;
        recent_slot_[(ring_next_ + ring_size_ - 1) % ring_size_] = victim;
      }
    }
  }
  std::size_t pick_victim(const float* scores, std::size_t n, std::int64_t recent_from) const {
    (void)recent_from;  // the window is the per-slot flags
    return selection_.victim(scores, recent_flag_.data(), kv_.positions, n);
  }
  void ring_push(std::int64_t position, std::size_t slot) {
    if (ring_size_ == 0) return;
    if (ring_count_ == ring_size_) recent_flag_[recent_slot_[ring_next_]] = 0;
    recent_slot_[ring_next_] = slot;
    recent_flag_[slot] = 1;
    recent_ring_[ring_next_] = position;
    ring_next_ = (ring_next_ + 1) % ring_size_;
    if (ring_count_ < ring_size_) ++ring_count_;
  }
  std::int64_t recent_threshold() const {
    if (ring_size_ == 0) return std::numeric_limits<std::int64_t>::max();
    if (ring_count_ < ring_size_) return std::numeric_limits<std::int64_t>::min();
    return recent_ring_[ring_next_];
  }
  /// Page unit: end (exclusive table index) of the middle area of a sequence of
  /// `n` tokens: the first page holding one of the last `max(w, 1)` tokens.
  std::size_t middle_end(std::size_t n, std::size_t w) const { return (n - std::max<std::size_t>(w, 1)) / kv_.page_size; }
  /// page_score_[i] for the middle pages `[start_pages, hi)` from row_ (full pages).
  void compute_page_scores(std::size_t hi) {
    const std::size_t ps = kv_.page_size;
    for (std::size_t i = paged_.start_pages; i < hi; ++i) {
      float sum = 0.0f;
      for (std::size_t o = 0; o < ps; ++o) sum += row_[i * ps + o];
      page_score_[i] = paged_.page_score == PageScore::mean ? sum / static_cast<float>(ps) : sum;
    }
  }
  /// The unmarked middle page with the lowest score; ties: the older (lower index).
  std::size_t lowest_page(std::size_t hi) const {
    std::size_t best = hi;
    for (std::size_t i = paged_.start_pages; i < hi; ++i)
      if (page_mark_[i] == 0 && (best == hi || page_score_[i] < page_score_[best])) best = i;
    return best;  // < hi: the budget check guarantees enough middle pages
  }
  /// Removes the marked (full) pages of a sequence of `n` tokens from the table,
  /// returns them to the pool and shifts the later pages' entries, positions and
  /// scores down. No K/V bytes move. Returns the new length.
  std::size_t remove_marked_pages(std::size_t n) {
    const std::size_t ps = kv_.page_size, cap = kv_.capacity(), used = (n + ps - 1) / ps;
    std::size_t out = 0;
    for (std::size_t i = 0; i < used; ++i) {
      if (page_mark_[i] != 0) {
        pool_->release(kv_.table[i]);
        ++pages_freed_;
        continue;
      }
      if (out != i) {
        kv_.table[out] = kv_.table[i];
        const std::size_t len = std::min(ps, n - i * ps);
        std::memmove(kv_.positions + out * ps, kv_.positions + i * ps, len * sizeof(std::int64_t));
        for (std::size_t j = 0; j < kv_.n_kv_heads; ++j)
          std::memmove(scores_.data() + j * cap + out * ps, scores_.data() + j * cap + i * ps, len * sizeof(float));
      }
      ++out;
    }
    for (std::size_t i = out; i < used; ++i) kv_.table[i] = kNoPage;
    const std::size_t m = n - (used - out) * ps;
    *kv_.length = m;
    return m;
  }
  /// Cycle-following permutation of the logical slots into ascending position order.
  void sort_by_position(std::size_t n) {
    const std::size_t nkv = kv_.n_kv_heads, cap = kv_.capacity(), rb = kv_.row_bytes;
    std::int64_t* pos = kv_.positions;
    std::iota(index_.begin(), index_.begin() + static_cast<std::ptrdiff_t>(n), std::size_t{0});
    std::sort(index_.begin(), index_.begin() + static_cast<std::ptrdiff_t>(n),
              [pos](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
    for (std::size_t c = 0; c < n; ++c) {
      if (index_[c] == c) continue;
      for (std::size_t h = 0; h < nkv; ++h) {  // save slot c
        std::memcpy(tmp_row_.data() + (2 * h) * rb, kv_.k_row(h, c), rb);
        std::memcpy(tmp_row_.data() + (2 * h + 1) * rb, kv_.v_row(h, c), rb);
        increments_[h * cap] = scores_[h * cap + c];  // increments_ is free scratch outside a call
      }
      const std::int64_t tmp_pos = pos[c];
      std::size_t cur = c;
      while (index_[cur] != c) {
        const std::size_t src = index_[cur];
        kv_.copy_slot(src, cur);
        pos[cur] = pos[src];
        for (std::size_t h = 0; h < nkv; ++h) scores_[h * cap + cur] = scores_[h * cap + src];
        index_[cur] = cur;
        cur = src;
      }
      for (std::size_t h = 0; h < nkv; ++h) {
        std::memcpy(kv_.k_row(h, cur), tmp_row_.data() + (2 * h) * rb, rb);
        std::memcpy(kv_.v_row(h, cur), tmp_row_.data() + (2 * h + 1) * rb, rb);
        scores_[h * cap + cur] = increments_[h * cap];
      }
      pos[cur] = tmp_pos;
      index_[cur] = cur;
    }
  }

  CacheConfig config_;
  PagedEvictionConfig paged_;
  detail::ErasedPagedKV kv_;
  PagePool* pool_;
  Score score_;
  Temperature temperature_;
  Selection selection_;
  Xoshiro256pp rng_;
  std::size_t group_ = 1;
  std::vector<float> scores_;       // [kv_head][capacity], by logical slot
  std::vector<float> increments_;   // [kv_head][capacity]: prefill increments; decode backup; sort scratch
  std::vector<float> chunk_f_;      // [2 * chunks of capacity]
  std::vector<float> row_;          // [capacity]: one softmax row, then the scores summed over KV heads
  std::vector<std::size_t> index_;  // [capacity] selection / sort scratch
  std::vector<std::int64_t> recent_ring_;  // token unit: last w appended positions
  std::vector<std::size_t> recent_slot_;   // token unit: their logical slots (ring order)
  std::vector<std::uint8_t> recent_flag_;  // token unit: [capacity], 1 = slot in the window
  std::vector<float> page_score_;          // page unit: [max_pages]
  std::vector<std::uint8_t> page_mark_;    // page unit: [max_pages], 1 = to evict
  std::vector<unsigned char> tmp_row_;     // [n_kv_heads][2][row_bytes]
  std::size_t ring_size_ = 0, ring_count_ = 0, ring_next_ = 0;
  std::int64_t last_position_ = std::numeric_limits<std::int64_t>::min();
  std::size_t k_ = 0, w_ = 0, n_ = 0, step_ = 0, pages_freed_ = 0;
  float tau_ = 0.0f;
  bool prefilled_ = false;
};

/// Keyformer, H2O, StreamingLLM and TOVA over paged storage (see `policies.hpp`).
using PagedKeyformer = PagedCache<GumbelLogitScore, LinearTemperature, RecentTopKSelection>;
using PagedH2O = PagedCache<AccumulatedAttentionScore, ConstantTemperature, RecentTopKSelection>;
using PagedStreamingLLM = PagedCache<NoScore, ConstantTemperature, SinkRecentSelection>;
using PagedTOVA = PagedCache<CurrentAttentionScore, ConstantTemperature, RecentTopKSelection>;

/// Builds policy `p` over one paged sequence, exactly as `make_cache` builds
/// it over a contiguous view (same parameters, same checks: keyformer needs
/// `horizon >= 1`, tova a zero recent window). `config.shared_heads` must be
/// true. Throws `std::invalid_argument` as the constructors do.
template <class T>
std::unique_ptr<PagedCacheInterface> make_paged_cache(Policy p, const CacheConfig& config,
                                                      const PagedEvictionConfig& paged, const PagedKVView<T>& kv,
                                                      PagePool& pool, const PolicyParams& params = PolicyParams()) {
  switch (p) {
    case Policy::keyformer:
      return std::make_unique<PagedKeyformer>(config, paged, kv, pool, GumbelLogitScore{params.gumbel_noise},
                                              LinearTemperature(params.tau_init, params.tau_end, params.horizon));
    case Policy::h2o:
      return std::make_unique<PagedH2O>(config, paged, kv, pool);
    case Policy::streaming_llm:
      return std::make_unique<PagedStreamingLLM>(config, paged, kv, pool, NoScore{}, ConstantTemperature(),
                                                 SinkRecentSelection{params.sinks});
    case Policy::window:
      return std::make_unique<PagedStreamingLLM>(config, paged, kv, pool, NoScore{}, ConstantTemperature(),
                                                 SinkRecentSelection{0});
    case Policy::tova:
      detail::require(config.recent.resolve(1u << 30) == 0,
                      "kvevict::make_paged_cache: TOVA has no recent window; set config.recent to 0");
      return std::make_unique<PagedTOVA>(config, paged, kv, pool);
  }
  throw std::invalid_argument("kvevict::make_paged_cache: unknown policy");
}

}  // namespace kvevict
