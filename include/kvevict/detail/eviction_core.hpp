// detail/eviction_core.hpp — the state, policies and checks that `Cache` and `PagedCache` share.
// SPDX-License-Identifier: Apache-2.0
//
// Internal: the base class under both caches. It owns the configuration, the slot storage (its
// type is the cache's: `SlotTable` or `PagedSlotTable`), the scorer, the temperature schedule, the
// selection and the sequence state (k, w, n, step, τ, last position, prefilled), and implements the
// checks and the getters once. Above it, detail/head_eviction.hpp holds the token eviction paths both caches
// run (the cut, the decode-step eviction, the recent window); each cache adds its storage's prefill and protocol.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "kvevict/detail/budget_rule.hpp"
#include "kvevict/cache_config.hpp"
#include "kvevict/concepts.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/detail/scorer.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvevict {
namespace detail {

/// The eviction core of a cache class `kvevict::Cache` or `kvevict::PagedCache` (its `Interface`,
/// `CacheInterface` or `PagedCacheInterface`, is this class's base): the members and checks both
/// caches share. `Slots` is the storage (`detail::SlotTable` or `detail::PagedSlotTable`): it must
/// provide `kv()` (with `n_kv_heads`), `capacity()`, `scores(h)` (`[capacity]` floats of KV head
/// `h`), `all_scores()` (`[kv_head][capacity]`), `clear_scores()` and `reset_window(w)`.
/// Error messages name the cache as `name` ("kvevict::Cache" or "kvevict::PagedCache"), so they
/// read as they did when each cache carried its own copy. Not copyable; moving is `noexcept`, and a
/// moved-from core throws `std::logic_error` from every public member (`live`).
template <class Interface, class Slots, class Score, class Temperature, class Selection>
class EvictionCore : public Interface {
  // The policy contracts (kvevict/concepts.hpp): one readable error per missing member.
  static_assert(cache_policy_static_asserts<Score, Temperature, Selection>::value,
                "kvevict: the policies do not satisfy their contracts");

 public:
  using score_type = Score;              ///< what a token's score is
  using temperature_type = Temperature;  ///< τ per step
  using selection_type = Selection;      ///< which tokens stay

  EvictionCore(const EvictionCore&) = delete;
  EvictionCore& operator=(const EvictionCore&) = delete;
  EvictionCore(EvictionCore&&) noexcept = default;
  EvictionCore& operator=(EvictionCore&&) noexcept = default;

  /// The budget `k` of the current sequence (0 before prefill). O(1); throws `std::logic_error`
  /// if moved from.
  std::size_t budget() const override {
    live("budget");
    return k_;
  }
  /// The recent window `w` of the current sequence (0 before prefill). O(1).
  std::size_t recent_window() const override {
    live("recent_window");
    return w_;
  }
  /// Decode steps since the prefill. O(1).
  std::size_t step() const override {
    live("step");
    return step_;
  }
  /// τ of the last prefill or step (0 before any). O(1).
  float temperature() const override {
    live("temperature");
    return tau_;
  }
  /// Scores of KV head `h`, `[capacity]` by slot; throws `std::invalid_argument` if `h >= n_kv_heads`.
  const float* scores(std::size_t h) const override { return slots_.scores(check_head(h, "scores")); }

  /// Runs the scoring of `prefill`, `prefill_chunk` (when its rows are `concurrent()`) and
  /// `decode_step` as tasks on `executor` (core/executor.hpp; the default is serial); the
  /// referenced executor must outlive its use. Prefill splits across query heads; a step
  /// across KV heads, and across 512-slot chunks of a row when n_kv_heads < workers. Scores,
  /// kept sets and errors are bit-identical for every executor. Allocates the per-task
  /// scratch, O(min(workers, n_q_heads) · capacity) floats, here (never in a step).
  void set_executor(ExecutorRef executor) override {
    live("set_executor");
    scorer_.set_executor(executor);
  }
  std::size_t group_size() const { return group_; }        ///< Query heads per KV head (`g`).
  const CacheConfig& config() const { return config_; }  ///< The configuration (with the latest seed).
  /// The score policy, the temperature schedule and the selection policy in use.
  const Score& score_policy() const { return scorer_.policy(); }
  const Temperature& temperature_schedule() const { return temperature_; }
  const Selection& selection_policy() const { return selection_; }

 protected:
  /// Takes the validated storage `slots` (its constructor checked the view, so that a bad view is
  /// reported before the query heads), then checks `config.n_q_heads` against the view
  /// (`detail::checked_group`: a positive multiple of n_kv_heads, at most 2^16, capacity · n_q_heads
  /// floats addressable) before the scorer allocates O(n_q_heads · capacity) floats for it. `keys`
  /// reads the view's K rows for a key score (`detail::key_reader<Score, T>`). Throws
  /// `std::invalid_argument` "<name>: n_q_heads (…) …" naming the value.
  EvictionCore(const CacheConfig& config, Slots slots, Score score, Temperature temperature, Selection selection,
               const char* name, KeyReader keys)
      : config_(config),
        slots_(std::move(slots)),
        scorer_(std::move(score), slots_.kv().n_kv_heads,
                checked_group(config.n_q_heads, slots_.kv().n_kv_heads, slots_.capacity(), name), slots_.capacity(),
                config.seed, name, keys),
        temperature_(std::move(temperature)),
        selection_(std::move(selection)),
        group_(config.n_q_heads / slots_.kv().n_kv_heads),
        name_(name) {}
  ~EvictionCore() override = default;

  /// The view of the storage.
  const auto& kv() const { return slots_.kv(); }

  /// The budget rule shared by both caches: `detail::resolve_budget` (detail/budget_rule.hpp: the recent
  /// window, `selection.validate(k, w)`, the capacity `need`), then the score's `validate_budget(k, w)`
  /// if it has one (`Scorer::check_budget`; SnapKV: L <= k). Returns `{k, w}`. Called before any state
  /// changes; throws `std::invalid_argument` "<who>: …" naming the values.
  std::pair<std::size_t, std::size_t> resolve_kw(std::size_t k, const CapacityNeed& need, const char* who) const {
    const auto kw = detail::resolve_budget<Score>(config_.recent, selection_, k, need, who);
    scorer_.check_budget(kw.first, kw.second, who);
    return kw;
  }

  /// τ_t of the schedule, checked (finite, >= FLT_MIN); 1 for a policy without temperature.
  /// Throws `std::invalid_argument` "<name>::<who>: temperature at step t …". O(1).
  float checked_tau(std::size_t t, const char* who) const {
    if (!Score::kUsesTemperature) return 1.0f;
    const float tau = temperature_(t);
    require(valid_tau(tau), name_, "::", who, ": temperature at step ", t,
            " must be finite and >= 1.17549435e-38 (FLT_MIN) (got ", tau, ")");
    return tau;
  }

  /// The scoring of a decode step over `n` slots whose new token (slot `n − 1`) has position
  /// `new_pos`: each query head's row of `logits` (`[q_head][n]`, `gumbel` optional, same layout)
  /// adds `softmax((x + ζ) / tau)` into its KV head's scores (`Scorer::score_step`, with
  /// rollback); a key score (`key_score`) gives the new slot its key's score on each KV head
  /// (`Scorer::score_key_step`, O(n_kv_heads · head_dim)); the anchor hooks rescore every held slot against the
  /// anchor of the `n` held keys (`score_held_keys`, O(n_kv_heads · n · head_dim)); any other score without logits
  /// gives it 0.
  /// O(n_q_heads · n), no allocation. Throws `std::invalid_argument` (scores unchanged) if `logits`
  /// is null when needed, a logit is NaN / `+inf`, or a key or anchor score is not finite and >= 0.
  void score_step(const float* logits, const float* gumbel, std::size_t n, float tau, std::int64_t new_pos) {
    if constexpr (Score::kUsesLogits) {
      require(logits != nullptr, name_, "::decode_step: logits must be non-null");
      scorer_.score_step(logits, gumbel, n, 1.0f / tau, slots_.all_scores(), slots_.capacity(),
                         static_cast<std::uint64_t>(new_pos));
    } else if constexpr (has_key_score<Score>) {
      scorer_.score_key_step([this](std::size_t j, std::size_t s) { return kv().k_row(j, s); }, n,
                             slots_.all_scores(), slots_.capacity());
    } else if constexpr (has_anchor_score<Score>) {
      score_held_keys(n, "decode_step");
      scorer_.take_anchor(slots_.all_scores(), slots_.capacity(), n);
    } else {
      for (std::size_t j = 0; j < kv().n_kv_heads; ++j) slots_.scores(j)[n - 1] = 0.0f;
    }
  }

  /// A key score's prefill: the keys of slots `[s0, s1)` into the scorer's accumulators
  /// (`Scorer::score_keys`; `fold` then makes them the scores). Throws `std::invalid_argument`
  /// "<name>::<method>: key_score of KV head j, slot s is v …" (state unchanged). O(n_kv_heads · (s1 − s0) ·
  /// head_dim).
  void score_prompt_keys(std::size_t s0, std::size_t s1, const char* method) {
    scorer_.score_keys([this](std::size_t j, std::size_t s) { return kv().k_row(j, s); }, s0, s1, method);
  }

  /// The anchor hooks' scores of slots `[0, n)` on every KV head, against each head's anchor of those `n` keys,
  /// into the scorer's scratch (`Scorer::score_anchor`; `Scorer::take_anchor` makes them the scores). Throws
  /// `std::invalid_argument` "<name>::<method>: anchor_score of KV head j, slot s is v …" (state unchanged).
  /// O(n_kv_heads · n · head_dim); no-op for another score.
  void score_held_keys(std::size_t n, const char* method) {
    scorer_.score_anchor([this](std::size_t j, std::size_t s) { return kv().k_row(j, s); }, n, method);
  }

  /// The per-layer scores summed over KV heads (head 0 first), `[n]`: the row a shared selection
  /// reads. O(n_kv_heads · n); no allocation, no throw.
  const float* summed_scores(std::size_t n) {
    return scorer_.sum_over_heads(slots_.all_scores(), slots_.capacity(), n);
  }

  /// The state of a new sequence: scores 0, no recent window, noise seed `seed` (also stored in the
  /// configuration), k = w = n = step = 0, no last position, τ 0, not prefilled. O(n_kv_heads ·
  /// capacity); no throw (the cache runs its own checks first).
  void reset_state(std::uint64_t seed) noexcept {
    slots_.clear_scores();
    slots_.reset_window(0);
    scorer_.seed(seed);
    config_.seed = seed;
    prefilled_ = false;
    k_ = w_ = n_ = step_ = 0;
    last_position_ = std::numeric_limits<std::int64_t>::min();
    tau_ = 0.0f;
  }

  /// Takes `other`'s sequence state (`Cache::copy_state_from`, which checked that other has this core's
  /// configuration and view geometry): the noise seed, the slots (`SlotTable::copy_from`: K/V rows, positions,
  /// lengths, scores, recent window), the scorer's state and the policies (`score`, `temperature`, `selection`:
  /// copies of other's, made by the caller before any change), k, w, n, step, τ, the last position, prefilled.
  /// O(n_kv_heads · n · head_dim + n_q_heads · capacity); no allocation.
  void copy_core_state(const EvictionCore& other, Score&& score, Temperature&& temperature, Selection&& selection) {
    config_.seed = other.config_.seed;
    slots_.copy_from(other.slots_);
    scorer_.copy_state(other.scorer_, std::move(score));
    temperature_ = std::move(temperature);
    selection_ = std::move(selection);
    last_position_ = other.last_position_;
    k_ = other.k_, w_ = other.w_, n_ = other.n_, step_ = other.step_;
    tau_ = other.tau_;
    prefilled_ = other.prefilled_;
  }

  /// Throws `std::logic_error` naming `method` if this cache was moved from.
  void live(const char* method) const { live_.check(name_, method); }
  /// `h` if it is a KV head of the view; throws `std::invalid_argument` "<name>::<who>: KV head h out
  /// of range" otherwise (and `std::logic_error` if moved from). O(1).
  std::size_t check_head(std::size_t h, const char* who) const {
    live(who);
    require(h < kv().n_kv_heads, name_, "::", who, ": KV head ", h, " out of range (n_kv_heads = ", kv().n_kv_heads,
            ")");
    return h;
  }

  CacheConfig config_;
  Slots slots_;           // the view's rows + scores + recent flags, moved together
  Scorer<Score> scorer_;  // the score policy, the noise seed, the kernel's scratch
  Temperature temperature_;
  Selection selection_;
  std::size_t group_ = 1;
  std::int64_t last_position_ = std::numeric_limits<std::int64_t>::min();
  std::size_t k_ = 0, w_ = 0, n_ = 0, step_ = 0;  // budget, recent window, tokens tracked per KV head, steps
  float tau_ = 0.0f;
  bool prefilled_ = false;  // the prompt is finished: decode steps may follow
  const char* name_;        // "kvevict::Cache" or "kvevict::PagedCache", for messages
  LiveFlag live_;           // false once moved from: every call then throws std::logic_error
};

}  // namespace detail
}  // namespace kvevict
