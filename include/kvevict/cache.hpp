// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// cache.hpp — the per-layer evicting cache that composes a score policy, a
// temperature schedule and a selection policy over a KV view.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvevict/budget.hpp"
#include "kvevict/cache_interface.hpp"
#include "kvevict/core/check.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/score/gumbel.hpp"
#include "kvevict/score/softmax_accumulate.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvevict {

/// Configuration shared by every policy.
struct CacheConfig {
  /// Query heads of the layer; must be a positive multiple `g · n_kv_heads` of
  /// the view's KV heads (GQA: query head `h` reads KV head `h / g`; MHA: g = 1).
  std::size_t n_q_heads = 0;
  /// Budget `k`, tokens kept per KV head (count, or fraction of the prompt).
  Budget budget = Budget::ratio(0.5);
  /// Recent window `w` (count, or fraction of `k`); must resolve to `<= k`.
  RecentWindow recent = RecentWindow::tokens(0);
  /// `true`: one selection for the whole layer from scores summed over KV
  /// heads, so every head keeps the same tokens. `false` (default, as in
  /// Keyformer and H2O): each KV head selects independently.
  bool shared_heads = false;
  /// Seed of the cache's Gumbel generator (same seed => same result).
  std::uint64_t seed = 0;
};

namespace detail {
/// Whether a selection policy has the `victim_flagged(scores, recent_flags,
/// positions, n)` fast path (see `RecentTopKSelection`).
template <class S, class = void>
struct has_victim_flagged : std::false_type {};
template <class S>
struct has_victim_flagged<S, std::void_t<decltype(std::declval<const S&>().victim_flagged(
                                 static_cast<const float*>(nullptr), static_cast<const std::uint8_t*>(nullptr),
                                 static_cast<const std::int64_t*>(nullptr), std::size_t{0}))>> : std::true_type {};

/// Byte-level access to a `KVView<T>`'s rows so that `Cache` need not be
/// templated on the element type. Rows are moved with `memcpy`.
struct ErasedKV {
  unsigned char* k = nullptr;
  unsigned char* v = nullptr;
  std::int64_t* positions = nullptr;
  std::size_t* lengths = nullptr;
  std::size_t n_kv_heads = 0, capacity = 0, row_bytes = 0, head_stride = 0, slot_stride = 0;  // strides in bytes

  template <class T>
  static ErasedKV from(const KVView<T>& view) {
    view.validate();
    ErasedKV e;
    e.k = reinterpret_cast<unsigned char*>(view.k);
    e.v = reinterpret_cast<unsigned char*>(view.v);
    e.positions = view.positions;
    e.lengths = view.lengths;
    e.n_kv_heads = view.n_kv_heads;
    e.capacity = view.capacity;
    e.row_bytes = view.head_dim * sizeof(T);
    e.head_stride = view.head_stride * sizeof(T);
    e.slot_stride = view.slot_stride * sizeof(T);
    return e;
  }
  unsigned char* k_row(std::size_t h, std::size_t s) const { return k + h * head_stride + s * slot_stride; }
  unsigned char* v_row(std::size_t h, std::size_t s) const { return v + h * head_stride + s * slot_stride; }
  std::int64_t* pos(std::size_t h) const { return positions + h * capacity; }
  void copy_row(std::size_t h, std::size_t from, std::size_t to) const {
    std::memcpy(k_row(h, to), k_row(h, from), row_bytes);
    std::memcpy(v_row(h, to), v_row(h, from), row_bytes);
  }
};
}  // namespace detail

/// An evicting KV cache for one transformer layer (policy-based design):
///
///  - `Score`       — what a token's score is (`GumbelLogitScore` for
///                    Keyformer, `AccumulatedAttentionScore` for H2O,
///                    `CurrentAttentionScore` for TOVA, `NoScore`);
///  - `Temperature` — τ per step (`LinearTemperature`, `ConstantTemperature`,
///                    `IncrementTemperature`); never changes the budget;
///  - `Selection`   — which tokens stay (`RecentTopKSelection`,
///                    `SinkRecentSelection`).
///
/// The cache does not own K and V: it works on the engine's `KVView<T>` and
/// owns only the scores `[kv_head][capacity]` (float), scratch space and the
/// noise generator, all allocated in the constructor. It keeps, per KV head,
/// slots `[0, length)` live with K row, V row, position ID and score aligned;
/// eviction removes tokens for good and never renumbers position IDs.
///
/// Engine protocol for one sequence (see README "API tour"):
///  1. append the prompt's `P` tokens to the view (`KVView::append`, positions
///     ascending), compute the causal logits `x[q_head][P][P]`, call
///     `prefill(x, P)`: scores every row at τ_0 and cuts every KV head to
///     `min(k, P)` tokens (the recent window and the key tokens);
///  2. per generated token: append its K/V (slot `n − 1` of every head), compute
///     the logits `x[q_head][n]` over slots `[0, n)`, call `decode_step(x, n)`:
///     scores the step at τ_t and, if `n > k`, evicts one token per KV head by
///     filling its slot with slot `n − 1` (O(head_dim) data moved).
///
/// Errors: every call validates all arguments and the view's state before it
/// changes anything, and throws `std::invalid_argument` (naming the argument
/// and value) or `std::length_error`; the cache, the view and the generator are
/// then exactly as before. `decode_step` performs no heap allocation.
///
/// Thread safety: none; one cache per layer per sequence, used by one thread.
template <class Score, class Temperature, class Selection>
class Cache final : public CacheInterface {
 public:
  using score_policy = Score;
  using temperature_policy = Temperature;
  using selection_policy = Selection;

  /// Builds a cache over `kv` (lengths must be 0). Allocates
  /// O(n_kv_heads · capacity) floats and indices once.
  /// Throws `std::invalid_argument` if the view is invalid or not empty,
  /// `config.n_q_heads` is not a positive multiple of `kv.n_kv_heads`, or — when
  /// the budget is a token count, so that `k` and `w` are known now — the
  /// configuration fails `resolve_budget` (see there: `w > k`, sinks, capacity).
  template <class T>
  Cache(const CacheConfig& config, const KVView<T>& kv, Score score = Score(), Temperature temperature = Temperature(),
        Selection selection = Selection())
      : config_(config),
        kv_(detail::ErasedKV::from(kv)),
        score_(std::move(score)),
        temperature_(std::move(temperature)),
        selection_(std::move(selection)),
        rng_(config.seed) {
    const std::size_t nkv = kv_.n_kv_heads;
    detail::require(config.n_q_heads >= 1 && config.n_q_heads % nkv == 0, "kvevict::Cache: n_q_heads (",
                    config.n_q_heads, ") must be a positive multiple of the view's n_kv_heads (", nkv, ")");
    for (std::size_t h = 0; h < nkv; ++h)
      detail::require(kv_.lengths[h] == 0, "kvevict::Cache: the view must be empty at construction (lengths[", h,
                      "] = ", kv_.lengths[h], ")");
    group_ = config.n_q_heads / nkv;
    if (!config.budget.is_ratio()) (void)resolve_budget(config.budget.token_count(), "kvevict::Cache");
    const std::size_t cap = kv_.capacity;
    scores_.assign(nkv * cap, 0.0f);
    increments_.assign(nkv * cap, 0.0f);
    chunk_f_.assign(2 * detail::chunk_count(cap), 0.0f);
    row_.assign(cap, 0.0f);
    index_.assign(cap, 0);
    recent_ring_.assign(cap, 0);
    recent_slot_.assign(nkv * cap, 0);
    recent_flag_.assign(nkv * cap, 0);
    tmp_row_.assign(2 * kv_.row_bytes, 0);
  }

  // Copying would alias the same view: forbid it; moving is fine.
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  Cache(Cache&&) noexcept = default;
  Cache& operator=(Cache&&) noexcept = default;

  /// Prefill: scores the prompt and evicts to budget (Keyformer Algorithm 1,
  /// prompt phase).
  ///
  /// Preconditions: every KV head of the view holds exactly `prompt_len` live
  /// slots with strictly ascending position IDs, identical across heads, and
  /// this is the first prefill since construction or `reset`.
  ///
  /// `logits`: `[q_head][P][P]` row-major, `x[h][r][c]` = logit of the query at
  /// slot `r` against slot `c`; only `c <= r` is read (the causal part; `-inf`
  /// entries count as masked). May be `nullptr` for `NoScore`.
  /// `gumbel`: optional pre-drawn ζ in the same layout, used instead of the
  /// generator (read only where the logits are); `nullptr` draws from the
  /// generator. Either way ζ is used only if the score policy is noisy
  /// (Keyformer with noise on); other policies ignore it.
  ///
  /// Resolves and checks `k` and `w` with `resolve_budget`; each row r
  /// adds `softmax((x[h][r][0..r] + ζ) / τ_0)` to the scores of KV head
  /// `h / g` (TOVA: last row only); then keeps `selection.prefill_keep`'s
  /// tokens, compacted in ascending position order into slots `[0, min(k, P))`.
  /// O(n_q_heads · P²) for scoring, O(n_kv_heads · P · head_dim) for compaction.
  ///
  /// Throws `std::invalid_argument` on a second prefill, `prompt_len == 0`,
  /// lengths ≠ `prompt_len`, unordered or mismatched positions, a budget the
  /// selection cannot serve (`resolve_budget`: `w > k`, `sinks > k`, a window
  /// given to StreamingLLM, capacity < `k + 1`), τ_0 outside the valid range
  /// (finite, >= FLT_MIN), a null `logits` when scores need it, or a NaN /
  /// `+inf` value of `x + ζ`. Every check runs before any state changes.
  void prefill(const float* logits, std::size_t prompt_len, const float* gumbel = nullptr) override {
    const std::size_t nkv = kv_.n_kv_heads, P = prompt_len;
    detail::require(!prefilled_, "kvevict::Cache::prefill: already prefilled; call reset() for a new sequence");
    detail::require(P >= 1, "kvevict::Cache::prefill: prompt_len must be >= 1 (got 0)");
    for (std::size_t h = 0; h < nkv; ++h)
      detail::require(kv_.lengths[h] == P, "kvevict::Cache::prefill: prompt_len = ", P, " but the view's lengths[",
                      h, "] = ", kv_.lengths[h], " (append the prompt's K/V first)");
    for (std::size_t h = 0; h < nkv; ++h) {
      const std::int64_t* pos = kv_.pos(h);
      for (std::size_t s = 0; s < P; ++s) {
        detail::require(s == 0 || pos[s] > pos[s - 1], "kvevict::Cache::prefill: positions of KV head ", h,
                        " must be strictly ascending by slot (slot ", s, " has ", pos[s], ")");
        detail::require(pos[s] == kv_.pos(0)[s], "kvevict::Cache::prefill: KV heads 0 and ", h,
                        " disagree on the position of slot ", s);
      }
    }
    const auto [k, w] = resolve_budget(config_.budget.resolve(P), "kvevict::Cache::prefill");
    const float tau = checked_tau(0, "prefill");

    if (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::Cache::prefill: logits must be non-null");
      const Xoshiro256pp saved = rng_;
      std::fill(increments_.begin(), increments_.begin() + static_cast<std::ptrdiff_t>(nkv * kv_.capacity), 0.0f);
      const float inv_tau = 1.0f / tau;
      for (std::size_t h = 0; h < config_.n_q_heads; ++h) {
        float* acc = increments_.data() + (h / group_) * kv_.capacity;
        for (std::size_t r = Score::kPrefillLastRow ? P - 1 : 0; r < P; ++r) {
          const std::size_t offset = (h * P + r) * P;
          if (!score_row(logits + offset, gumbel, offset, r + 1, inv_tau)) {
            rng_ = saved;
            throw std::invalid_argument(detail::concat("kvevict::Cache::prefill: logits row ", r, " of q_head ", h,
                                                       " contains NaN or +inf"));
          }
          detail::add_chunks(row_.data(), chunk_f_.data(), r + 1, acc, false);
        }
      }
      for (std::size_t j = 0; j < nkv; ++j)
        std::copy_n(increments_.data() + j * kv_.capacity, P, scores_.data() + j * kv_.capacity);
    } else {
      std::fill(scores_.begin(), scores_.end(), 0.0f);
    }

    // The newest prompt position, before compaction may evict it (w = 0): a decode step's token
    // must come after every position of the prompt, kept or not.
    const std::int64_t last_prompt_position = kv_.pos(0)[P - 1];

    // ---- nothing below can throw ----
    std::size_t m = 0;
    if (config_.shared_heads) {
      sum_scores_over_heads(P);
      m = selection_.prefill_keep(row_.data(), P, k, w, index_.data());
      for (std::size_t j = 0; j < nkv; ++j) compact_in_order(j, m);
    } else {
      for (std::size_t j = 0; j < nkv; ++j) {
        m = selection_.prefill_keep(scores_.data() + j * kv_.capacity, P, k, w, index_.data());
        compact_in_order(j, m);
      }
    }
    // Recent window: the last min(w, P) prompt tokens, now the last slots.
    ring_size_ = w;
    ring_count_ = 0;
    ring_next_ = 0;
    for (std::size_t s = m - std::min(w, m); s < m; ++s) ring_push(kv_.pos(0)[s], s);
    last_position_ = last_prompt_position;
    k_ = k;
    w_ = w;
    n_ = m;
    step_ = 0;
    tau_ = tau;
    prefilled_ = true;
  }

  /// One decode step (Keyformer Algorithm 1, generation phase; H2O §4; TOVA).
  ///
  /// Preconditions: the engine appended the new token's K/V to every KV head
  /// (slot `n − 1`, same position on every head, larger than any position seen
  /// before), so every head holds `n = previous length + 1` slots.
  ///
  /// `logits`: `[q_head][n]` row-major, by slot as the engine's attention reads
  /// the view (may be `nullptr` for `NoScore`). `gumbel`: optional injected ζ,
  /// `[q_head][n]`, used as in `prefill` (only by a noisy score policy).
  ///
  /// Each query head's row adds `softmax((x + ζ) / τ_t)` into its KV head's
  /// scores (TOVA: replaces them), `τ_t = temperature(step + 1)`; the new token
  /// thereby gets the score of its own step. If `n > k`, each KV head (or the
  /// layer, with `shared_heads`) evicts `selection.victim(...)`: the hole is
  /// filled with slot `n − 1`. "Recent" is decided by position: the `w` most
  /// recently appended tokens.
  /// O(n_q_heads · n) scoring + O(n_kv_heads · n) selection + O(n_kv_heads ·
  /// head_dim) data moved. No heap allocation. Memory passes: the logits are
  /// read once (each row's softmax in one streaming pass, the noise drawn and
  /// used in L1-sized chunks), each KV head's scores are copied once (for the
  /// all-or-nothing guarantee) and updated in place once per query row, and
  /// the victim search reads the head's scores and positions once.
  ///
  /// Throws `std::invalid_argument` before prefill, if `n` or any length is not
  /// `previous length + 1`, the new position is not the same on every head or
  /// not larger than the last one, τ_t is not finite and > 0, `logits` is null
  /// when needed, or a logit is NaN / `+inf`; the state is then unchanged.
  void decode_step(const float* logits, std::size_t n, const float* gumbel = nullptr) override {
    const std::size_t nkv = kv_.n_kv_heads;
    detail::require(prefilled_, "kvevict::Cache::decode_step: call prefill() first");
    detail::require(n == n_ + 1, "kvevict::Cache::decode_step: n = ", n, " but the cache holds ", n_,
                    " tokens per KV head (append exactly one token, then pass n = ", n_ + 1, ")");
    for (std::size_t h = 0; h < nkv; ++h)
      detail::require(kv_.lengths[h] == n, "kvevict::Cache::decode_step: the view's lengths[", h, "] = ",
                      kv_.lengths[h], ", expected n = ", n, " (append the new token's K/V to every head first)");
    const std::int64_t new_pos = kv_.pos(0)[n - 1];
    detail::require(new_pos > last_position_, "kvevict::Cache::decode_step: new token's position ", new_pos,
                    " must be larger than the last one, ", last_position_);
    for (std::size_t h = 1; h < nkv; ++h)
      detail::require(kv_.pos(h)[n - 1] == new_pos, "kvevict::Cache::decode_step: KV head ", h,
                      " has new position ", kv_.pos(h)[n - 1], ", KV head 0 has ", new_pos);
    const float tau = checked_tau(step_ + 1, "decode_step");

    if (Score::kUsesLogits) {
      detail::require(logits != nullptr, "kvevict::Cache::decode_step: logits must be non-null");
      // Scores are updated in place, KV head by KV head, each query row in one
      // streaming pass (q_head order, so the noise is drawn in the documented
      // order). Before a KV head's scores change they are copied to
      // increments_; a NaN / +inf row (found by the same pass) restores every
      // copied head and the generator, so the error leaves no trace.
      const Xoshiro256pp saved = rng_;
      const float inv_tau = 1.0f / tau;
      for (std::size_t j = 0; j < nkv; ++j) {
        float* s = scores_.data() + j * kv_.capacity;
        std::copy_n(s, n, increments_.data() + j * kv_.capacity);
        s[n - 1] = 0.0f;
        for (std::size_t t = 0; t < group_; ++t) {
          const std::size_t h = j * group_ + t;
          if (!score_row(logits + h * n, gumbel, h * n, n, inv_tau)) {
            for (std::size_t i = 0; i <= j; ++i)
              std::copy_n(increments_.data() + i * kv_.capacity, n, scores_.data() + i * kv_.capacity);
            rng_ = saved;
            throw std::invalid_argument(
                detail::concat("kvevict::Cache::decode_step: logits of q_head ", h, " contain NaN or +inf"));
          }
          detail::add_chunks(row_.data(), chunk_f_.data(), n, s, !Score::kAccumulates && t == 0);
        }
      }
      // ---- nothing below can throw ----
    } else {
      for (std::size_t j = 0; j < nkv; ++j) scores_[j * kv_.capacity + n - 1] = 0.0f;
    }

    ring_push(new_pos, n - 1);
    last_position_ = new_pos;
    if (n > k_) {
      const std::int64_t recent_from = recent_threshold();
      if (config_.shared_heads) {
        sum_scores_over_heads(n);
        const std::size_t victim = pick_victim(row_.data(), 0, n, recent_from);
        for (std::size_t j = 0; j < nkv; ++j) evict(j, victim, n);
      } else {
        for (std::size_t j = 0; j < nkv; ++j)
          evict(j, pick_victim(scores_.data() + j * kv_.capacity, j, n, recent_from), n);
      }
      n_ = n - 1;
    } else {
      n_ = n;
    }
    ++step_;
    tau_ = tau;
  }

  /// Forgets the sequence: every length 0, scores 0, step 0, and re-seeds the
  /// generator with `seed`. The view's K/V bytes are left as they are. O(n_kv_heads · capacity).
  void reset(std::uint64_t seed) override {
    for (std::size_t h = 0; h < kv_.n_kv_heads; ++h) kv_.lengths[h] = 0;
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
  /// `reset(seed)` with the seed of the configuration.
  void reset() { reset(config_.seed); }

  std::size_t budget() const override { return k_; }
  std::size_t recent_window() const override { return w_; }
  std::size_t step() const override { return step_; }
  float temperature() const override { return tau_; }
  std::size_t length(std::size_t h) const override {
    check_head(h, "length");
    return kv_.lengths[h];
  }
  const float* scores(std::size_t h) const override {
    check_head(h, "scores");
    return scores_.data() + h * kv_.capacity;
  }
  const std::int64_t* positions(std::size_t h) const override {
    check_head(h, "positions");
    return kv_.pos(h);
  }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    check_head(h, "retained_positions");
    std::vector<std::int64_t> out(kv_.pos(h), kv_.pos(h) + kv_.lengths[h]);
    std::sort(out.begin(), out.end());
    return out;
  }
  /// Sorts the tokens the cache tracks (slots `[0, n)`, `n` = its length
  /// after the last prefill / decode step; before prefill, the view's length)
  /// into ascending position order, moving K, V, position and score together.
  /// Slots the engine appended since the last step (between `append` and
  /// `decode_step`) are not moved, so the pending step still sees them at
  /// slot `n`. O(n log n + n · head_dim) per KV head; allocates nothing.
  void restore_position_order() override {
    for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) {
      const std::size_t n = prefilled_ ? n_ : kv_.lengths[j];
      sort_head_by_position(j, n);
      // The window is now the last ring_count_ tracked slots, oldest first.
      std::size_t* slots = recent_slot_.data() + j * kv_.capacity;
      std::uint8_t* flags = recent_flag_.data() + j * kv_.capacity;
      std::fill_n(flags, n, std::uint8_t{0});
      for (std::size_t c = 0; c < ring_count_; ++c) {
        const std::size_t idx = (ring_next_ + ring_size_ - ring_count_ + c) % ring_size_;
        slots[idx] = n - ring_count_ + c;
        flags[n - ring_count_ + c] = 1;
      }
    }
  }

  /// Query heads per KV head (`g`).
  std::size_t group_size() const { return group_; }
  /// The configuration (with the latest seed).
  const CacheConfig& config() const { return config_; }
  const Score& score_policy_object() const { return score_; }
  const Temperature& temperature_schedule() const { return temperature_; }
  const Selection& selection_policy_object() const { return selection_; }

 private:
  /// The one place where a configuration meets a budget: resolves the recent
  /// window for budget `k` and checks the pair against the selection policy
  /// and the view. Called by the constructor when `k` is a token count, and by
  /// `prefill` (before any state changes) once `k = budget.resolve(P)` is known.
  ///  - `w = recent.resolve(k)`; for an accumulated-score policy (Keyformer,
  ///    H2O) a window given as a ratio `q > 0` resolves to at least 1 token
  ///    when `k >= 2` (so that the newest token is not evicted at once every
  ///    step, see `RecentWindow`); `tokens(0)` and `ratio(0)` stay 0.
  ///  - `selection.validate(k, w)`: `w <= k` (Keyformer, H2O, TOVA);
  ///    `sinks <= k` and no window of its own (StreamingLLM, window).
  ///  - capacity >= `k + 1`: a decode step appends its token before it evicts.
  /// Throws `std::invalid_argument` naming the values.
  std::pair<std::size_t, std::size_t> resolve_budget(std::size_t k, const char* who) const {
    std::size_t w = config_.recent.resolve(k);
    if (Score::kAccumulates && config_.recent.is_ratio() && config_.recent.ratio_value() > 0.0 && k >= 2 && w == 0)
      w = 1;
    selection_.validate(k, w);
    detail::require(k < kv_.capacity, who, ": budget k = ", k, " needs a view of capacity >= k + 1 = ", k + 1,
                    " (a decode step appends before it evicts), but the capacity is ", kv_.capacity);
    return {k, w};
  }
  float checked_tau(std::size_t t, const char* who) const {
    if (!Score::kUsesTemperature) return 1.0f;
    const float tau = temperature_(t);
    detail::require(detail::valid_tau(tau), "kvevict::Cache::", who, ": temperature at step ", t,
                    " must be finite and >= 1.17549435e-38 (FLT_MIN) (got ", tau, ")");
    return tau;
  }
  /// Softmax of one logits row (`x + ζ` when the score is noisy: ζ injected
  /// at `gumbel + offset`, or drawn from the generator) into `row_` and
  /// `chunk_f_`, see `detail::softmax_chunks`. Returns false on NaN / +inf.
  bool score_row(const float* x, const float* gumbel, std::size_t offset, std::size_t count, float inv_tau) {
    float* e = row_.data();
    float* f = chunk_f_.data();
    if (!score_.noisy()) return detail::softmax_chunks(x, detail::NoNoise{}, count, inv_tau, e, f);
    if (gumbel != nullptr)
      return detail::softmax_chunks(x, detail::GivenNoise{gumbel + offset}, count, inv_tau, e, f);
    return detail::softmax_chunks(x, detail::DrawnNoise{&rng_}, count, inv_tau, e, f);
  }
  void check_head(std::size_t h, const char* who) const {
    detail::require(h < kv_.n_kv_heads, "kvevict::Cache::", who, ": KV head ", h, " out of range (n_kv_heads = ",
                    kv_.n_kv_heads, ")");
  }
  void sum_scores_over_heads(std::size_t n) {
    std::fill_n(row_.data(), n, 0.0f);
    for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) {
      const float* s = scores_.data() + j * kv_.capacity;
      for (std::size_t i = 0; i < n; ++i) row_[i] += s[i];
    }
  }
  /// Moves the kept slots `index_[0, m)` (ascending) to `[0, m)` in order.
  void compact_in_order(std::size_t j, std::size_t m) {
    float* s = scores_.data() + j * kv_.capacity;
    std::int64_t* pos = kv_.pos(j);
    for (std::size_t c = 0; c < m; ++c) {
      const std::size_t from = index_[c];  // from >= c: forward moves never clobber a kept slot
      if (from == c) continue;
      kv_.copy_row(j, from, c);
      pos[c] = pos[from];
      s[c] = s[from];
    }
    kv_.lengths[j] = m;
  }
  /// Evicts slot `victim` of head `j` by moving slot `n − 1` (the newest
  /// token, in the window if w > 0) into it. O(head_dim).
  void evict(std::size_t j, std::size_t victim, std::size_t n) {
    const std::size_t last = n - 1;
    if (victim != last) {
      kv_.copy_row(j, last, victim);
      kv_.pos(j)[victim] = kv_.pos(j)[last];
      scores_[j * kv_.capacity + victim] = scores_[j * kv_.capacity + last];
      if (ring_size_ > 0) {
        std::uint8_t* flags = recent_flag_.data() + j * kv_.capacity;
        flags[victim] = flags[last];
        flags[last] = 0;
        recent_slot_[j * kv_.capacity + (ring_next_ + ring_size_ - 1) % ring_size_] = victim;
      }
    }
    kv_.lengths[j] = last;
  }
  /// The selection's victim for KV head `j` (its scores, or the layer's summed
  /// scores with `shared_heads`): through the selection's `victim_flagged` fast
  /// path when it has one (the window as per-slot flags), else `victim`.
  std::size_t pick_victim(const float* scores, std::size_t j, std::size_t n, std::int64_t recent_from) const {
    if constexpr (detail::has_victim_flagged<Selection>::value)
      return selection_.victim_flagged(scores, recent_flag_.data() + j * kv_.capacity, kv_.pos(j), n);
    else
      return selection_.victim(scores, kv_.pos(j), n, recent_from);
  }
  /// Enters the token at `slot` (same slot on every head) into the recent
  /// window; the oldest entry leaves it once the window is full.
  void ring_push(std::int64_t position, std::size_t slot) {
    if (ring_size_ == 0) return;
    for (std::size_t j = 0; j < kv_.n_kv_heads; ++j) {
      std::size_t* slots = recent_slot_.data() + j * kv_.capacity;
      std::uint8_t* flags = recent_flag_.data() + j * kv_.capacity;
      if (ring_count_ == ring_size_) flags[slots[ring_next_]] = 0;
      slots[ring_next_] = slot;
      flags[slot] = 1;
    }
    recent_ring_[ring_next_] = position;
    ring_next_ = (ring_next_ + 1) % ring_size_;
    if (ring_count_ < ring_size_) ++ring_count_;
  }
  /// Smallest position inside the recent window (tokens at or above it are recent).
  std::int64_t recent_threshold() const {
    if (ring_size_ == 0) return std::numeric_limits<std::int64_t>::max();
    if (ring_count_ < ring_size_) return std::numeric_limits<std::int64_t>::min();
    return recent_ring_[ring_next_];  // the oldest entry of a full ring
  }
  /// Cycle-following permutation of head j's slots into ascending position order.
  void sort_head_by_position(std::size_t j, std::size_t n) {
    std::int64_t* pos = kv_.pos(j);
    float* s = scores_.data() + j * kv_.capacity;
    std::iota(index_.begin(), index_.begin() + static_cast<std::ptrdiff_t>(n), std::size_t{0});
    std::sort(index_.begin(), index_.begin() + static_cast<std::ptrdiff_t>(n),
              [pos](std::size_t a, std::size_t b) { return pos[a] < pos[b]; });
    // index_[c] = slot whose token belongs at c.
    unsigned char* tmp_k = tmp_row_.data();
    unsigned char* tmp_v = tmp_row_.data() + kv_.row_bytes;
    for (std::size_t c = 0; c < n; ++c) {
      if (index_[c] == c) continue;
      std::memcpy(tmp_k, kv_.k_row(j, c), kv_.row_bytes);
      std::memcpy(tmp_v, kv_.v_row(j, c), kv_.row_bytes);
      const std::int64_t tmp_pos = pos[c];
      const float tmp_score = s[c];
      std::size_t cur = c;
      while (index_[cur] != c) {
        const std::size_t src = index_[cur];
        kv_.copy_row(j, src, cur);
        pos[cur] = pos[src];
        s[cur] = s[src];
        index_[cur] = cur;
        cur = src;
      }
      std::memcpy(kv_.k_row(j, cur), tmp_k, kv_.row_bytes);
      std::memcpy(kv_.v_row(j, cur), tmp_v, kv_.row_bytes);
      pos[cur] = tmp_pos;
      s[cur] = tmp_score;
      index_[cur] = cur;
    }
  }

  CacheConfig config_;
  detail::ErasedKV kv_;
  Score score_;
  Temperature temperature_;
  Selection selection_;
  Xoshiro256pp rng_;
  std::size_t group_ = 1;
  std::vector<float> scores_;      // [kv_head][capacity]
  std::vector<float> increments_;  // [kv_head][capacity]: prefill's increments; decode's score backup
  std::vector<float> chunk_f_;     // [2 * chunks of capacity], per-chunk softmax factors of one row
  std::vector<float> row_;         // [capacity] scratch
  std::vector<std::size_t> index_; // [capacity] selection scratch
  std::vector<std::int64_t> recent_ring_;  // last w appended positions
  std::vector<std::size_t> recent_slot_;   // [kv_head][capacity]: their slots (ring order)
  std::vector<std::uint8_t> recent_flag_;  // [kv_head][capacity]: 1 = slot in the window
  std::vector<unsigned char> tmp_row_;     // [2][row_bytes]: one K and one V row
  std::size_t ring_size_ = 0, ring_count_ = 0, ring_next_ = 0;
  std::int64_t last_position_ = std::numeric_limits<std::int64_t>::min();
  std::size_t k_ = 0, w_ = 0, n_ = 0, step_ = 0;
  float tau_ = 0.0f;
  bool prefilled_ = false;
};

}  // namespace kvevict
