// detail/scorer_base.hpp — the state every `Scorer` holds (the score policy, its noise seed, one prefill
// accumulator per query head), the scores a selection ranks (the selection hooks, mean attention) and the scoring of
// the policies that read keys, not logits (`key_score`, the anchor hooks).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kvevict/concepts.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/detail/key_reader.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/score/score_policies.hpp"

namespace kvevict {
namespace detail {

/// The most query heads a cache accepts (2^16; models have at most a few hundred). A cache allocates
/// `2 · n_q_heads · capacity` floats of accumulators, so the count is bounded before any allocation.
inline constexpr std::size_t kMaxQHeads = std::size_t{1} << 16;

/// Checks a cache's query-head count before anything is allocated for it: `1 <= n_q_heads <= 2^16`,
/// a multiple of `n_kv_heads` (>= 1, the view was validated), and `n_q_heads · capacity` floats
/// addressable. Returns the group size `g = n_q_heads / n_kv_heads`. Throws `std::invalid_argument`
/// "<who>: n_q_heads (…) must be …" naming the value. O(1).
inline std::size_t checked_group(std::size_t n_q_heads, std::size_t n_kv_heads, std::size_t capacity,
                                 const char* who) {
  require(n_q_heads >= 1 && n_q_heads % n_kv_heads == 0, who, ": n_q_heads (", n_q_heads,
          ") must be a positive multiple of the view's n_kv_heads (", n_kv_heads, ")");
  require(n_q_heads <= kMaxQHeads, who, ": n_q_heads (", n_q_heads, ") exceeds 2^16 = ", kMaxQHeads);
  require(capacity <= (std::size_t{1} << 62) / sizeof(float) / n_q_heads, who, ": n_q_heads (", n_q_heads,
          ") * capacity (", capacity, ") floats of score accumulators exceed the address space");
  return n_q_heads / n_kv_heads;
}

/// `score`, after checking a Keyformer score's `noise_scale` (any score deriving from `GumbelLogitScore`):
/// throws `std::invalid_argument` "<who>: noise_scale must be in (0, 1] (got s)" for s outside (0, 1] or NaN.
/// O(1).
template <class Score>
const Score& checked_noise_scale(const Score& score, const char* who) {
  if constexpr (std::is_base_of_v<GumbelLogitScore, Score>)
    require(score.noise_scale > 0.0f && score.noise_scale <= 1.0f, who, ": noise_scale must be in (0, 1] (got ",
            score.noise_scale, ")");
  return score;
}

/// The base of `Scorer` (scorer.hpp): the score policy, the noise seed, the prefill accumulators
/// `acc_` (`[q_head][capacity]`: query head `j · g + t` of KV head `j`) and the hooks of a score that reads the
/// K rows instead of logits (`key_score`: `score_keys`, `score_key_step`; the anchor hooks: `score_anchor`,
/// `take_anchor`), with their scratch, and the scores a selection ranks (`selection_scores`, `ranked`,
/// `cut_scores`, `check_budget`). `Scorer` adds the softmax kernel over logits, the folds and `check_selection`.
template <class Score>
class ScorerBase : private KeyScratch<reads_keys<Score>> {
  using Keys = KeyScratch<reads_keys<Score>>;

 public:
  const Score& policy() const { return score_; }
  /// Sets the seed of the drawn noise.
  void seed(std::uint64_t seed) { seed_ = seed; }
  /// Takes `other`'s state (`Cache::copy_state_from`): the score policy `score` (a copy of other's, made by the
  /// caller before any change), the noise seed and the prefill accumulators (each query head's first
  /// `min(capacities)` slots; other has this scorer's query heads). The executor and the scratch stay this
  /// scorer's. O(n_q_heads · capacity); no allocation.
  void copy_state(const ScorerBase& other, Score&& score) {
    score_ = std::move(score);
    seed_ = other.seed_;
    const std::size_t c = std::min(stride_, other.stride_);
    for (std::size_t h = 0; h < n_kv_heads_ * group_; ++h) std::copy_n(other.acc(h), c, acc(h));
  }

  /// The scores a selection ranks at a prefill cut, for `n` candidates `scores[0, n)`: the scores
  /// themselves, or the score's `selection_scores` (SnapKV: pooled, the window at `FLT_MAX`) in
  /// scratch valid until the next call. O(n) plus the hook's cost; no allocation, no throw.
  /// A -0.0 from the hook is stored as +0.0 (the selections may rank by bits, where -0.0 sorts above
  /// every positive float); `check_selection` has checked the values before the cut.
  const float* selection_scores(const float* scores, std::size_t n) noexcept {
    if constexpr (has_selection_scores<Score>) {
      float* out = pooled_.data();
      score_.selection_scores(scores, n, out);
      KVEVICT_SIMD
      for (std::size_t i = 0; i < n; ++i) out[i] += 0.0f;  // -0.0 + +0.0 = +0.0; every other value unchanged
      return out;
    }
    return scores;
  }
  /// The scores a selection ranks for KV head `head` (or 0 for a shared selection) over `n` slots
  /// `scores[0, n)` at positions `positions[0, n)`, `newest` the last scored query's position: the scores
  /// themselves, or for a `kRanksMean` score (`MeanAttention`) `scores[i] / (float(newest − positions[i]) + 1)`
  /// (the difference taken in `std::uint64_t`, exact over the whole int64 range)
  /// in head `head`'s scratch (valid until the next call for that head; distinct heads may run
  /// concurrently). Requires `positions[i] <= newest`. O(n) for a mean, O(1) otherwise; no allocation, no throw.
  const float* ranked(const float* scores, const std::int64_t* positions, std::int64_t newest, std::size_t n,
                      std::size_t head) noexcept {
    if constexpr (ranks_mean<Score>()) {
      float* out = mean_.data() + head * stride_;
      // newest >= positions[i]: the difference fits std::uint64_t exactly (positions span all of int64, so the
      // signed difference could overflow), and float(d) + 1 >= 1 (d + 1 could wrap to 0).
      const std::uint64_t top = static_cast<std::uint64_t>(newest);
      for (std::size_t i = 0; i < n; ++i)
        out[i] = scores[i] / (static_cast<float>(top - static_cast<std::uint64_t>(positions[i])) + 1.0f);
      return out;
    } else {
      (void)positions, (void)newest, (void)n, (void)head;
      return scores;
    }
  }
  /// The scores a prefill cut ranks: `selection_scores(ranked(...))` (one of the two is the identity). O(n)
  /// plus the hook's cost; no allocation, no throw.
  const float* cut_scores(const float* scores, const std::int64_t* positions, std::int64_t newest, std::size_t n,
                          std::size_t head) noexcept {
    return selection_scores(ranked(scores, positions, newest, n, head), n);
  }
  /// Checks that the score can serve budget `k` with window `w` (its `validate_budget`, if any): its
  /// `std::invalid_argument` is rethrown as "<who>: <what>" (SnapKV: "<who>: SnapKV observation window
  /// L = … exceeds budget k = …"). O(1) plus the hook's cost.
  void check_budget(std::size_t k, std::size_t w, const char* who) const {
    if constexpr (has_validate_budget<Score>) {
      try {
        score_.validate_budget(k, w);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(concat(who, ": ", e.what()));
      }
    }
  }

  /// Key score, prefill slots `[s0, s1)`: `acc[j · g][s] = key_score(K row (j, s) as floats)`, the
  /// group's other accumulators 0 there, so that `fold` gives each KV head its key scores (`reload`
  /// and later chunks work as for logits); `k_row(j, s)` gives the row's bytes. Throws
  /// `std::invalid_argument` "<who>::<method>: key_score of KV head j, slot s is v (must be finite
  /// and >= 0)" at the first bad value, `acc[·][0, s0)` untouched. Serial; O(n_kv_heads · (s1 − s0)
  /// · head_dim); no allocation.
  template <class KRow>
  void score_keys(KRow k_row, std::size_t s0, std::size_t s1, const char* method) {
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      for (std::size_t s = s0; s < s1; ++s) acc(j * group_)[s] = key_of(k_row(j, s), j, s, method);
      for (std::size_t t = 1; t < group_; ++t) std::fill_n(acc(j * group_ + t) + s0, s1 - s0, 0.0f);
    }
  }
  /// Key score, decode step over `n` slots: `scores[j][n − 1] = key_score(K row of (j, n − 1))` for
  /// every KV head j, all or nothing (every head's value is checked before any is written; throws as
  /// `score_keys` with method "decode_step"). Serial; O(n_kv_heads · head_dim); no allocation.
  template <class KRow>
  void score_key_step(KRow k_row, std::size_t n, float* scores, std::size_t stride) {
    float* v = this->key_.data() + this->keys_.head_dim;
    for (std::size_t j = 0; j < n_kv_heads_; ++j) v[j] = key_of(k_row(j, n - 1), j, n - 1, "decode_step");
    for (std::size_t j = 0; j < n_kv_heads_; ++j) scores[j * stride + n - 1] = v[j];
  }

  /// The anchor hooks (concepts.hpp), over slots `[0, n)` of every KV head `j`: the anchor is 0, then
  /// `anchor_add` of the K rows `k_row(j, 0), …, k_row(j, n − 1)` (as floats), then `anchor_finish(anchor,
  /// head_dim, n)`; slot `s`'s score is `anchor_score(k_row(j, s), head_dim, anchor)`, into scratch (the
  /// scores are unchanged until `take_anchor`). Throws `std::invalid_argument` "<who>::<method>: anchor_score
  /// of KV head j, slot s is v (must be finite and >= 0)" at the first bad value. Serial; O(n_kv_heads · n ·
  /// head_dim), two reads of every K row; no allocation.
  template <class KRow>
  void score_anchor(KRow k_row, std::size_t n, const char* method) {
    if constexpr (has_anchor_score<Score>) {
      const std::size_t d = this->keys_.head_dim;
      float* key = this->key_.data();
      float* anchor = this->key_.data() + d + n_kv_heads_;
      for (std::size_t j = 0; j < n_kv_heads_; ++j) {
        std::fill_n(anchor, d, 0.0f);
        for (std::size_t s = 0; s < n; ++s) score_.anchor_add(this->row_floats(k_row(j, s), key), d, anchor);
        score_.anchor_finish(anchor, d, n);
        float* out = anchored_.data() + j * stride_;
        for (std::size_t s = 0; s < n; ++s) {
          const float v = score_.anchor_score(this->row_floats(k_row(j, s), key), d, anchor);
          require(std::isfinite(v) && v >= 0.0f, who_, "::", method, ": anchor_score of KV head ", j, ", slot ", s,
                  " is ", v, " (must be finite and >= 0)");
          out[s] = v + 0.0f;  // -0.0 becomes +0.0: the victim search ranks scores by their bits
        }
      }
    } else {
      (void)k_row, (void)n, (void)method;
    }
  }
  /// `scores[j][0, n) = ` the scores of the last `score_anchor` over `n` slots, every KV head. O(n_kv_heads · n);
  /// no throw.
  void take_anchor(float* scores, std::size_t stride, std::size_t n) const noexcept {
    if constexpr (has_anchor_score<Score>) {
      for (std::size_t j = 0; j < n_kv_heads_; ++j) std::copy_n(anchored_.data() + j * stride_, n, scores + j * stride);
    } else {
      (void)scores, (void)stride, (void)n;
    }
  }

 protected:
  /// See `Scorer::Scorer`. Allocates the accumulators (`n_kv_heads · group · capacity` floats) and, for a score
  /// reading keys, the key scratch (`2 · head_dim + n_kv_heads`) and the anchor scores (`n_kv_heads · capacity`).
  /// Throws `std::invalid_argument` for a Keyformer `noise_scale` outside (0, 1] or a missing key reader.
  ScorerBase(Score score, std::size_t n_kv_heads, std::size_t group, std::size_t capacity, std::uint64_t seed,
             const char* who, KeyReader keys)
      : Keys(checked_key_reader(checked_noise_scale(score, who), keys, who), n_kv_heads),
        score_(std::move(score)),
        who_(who),
        seed_(seed),
        n_kv_heads_(n_kv_heads),
        group_(group),
        stride_(capacity),
        acc_(n_kv_heads * group * capacity, 0.0f),
        pooled_(has_selection_scores<Score> ? capacity : 0, 0.0f),
        mean_(ranks_mean<Score>() ? n_kv_heads * capacity : 0, 0.0f),
        anchored_(has_anchor_score<Score> ? n_kv_heads * capacity : 0, 0.0f) {}

  float* acc(std::size_t h) { return acc_.data() + h * stride_; }
  const float* acc(std::size_t h) const { return acc_.data() + h * stride_; }

  Score score_;
  const char* who_;
  std::uint64_t seed_;
  std::size_t n_kv_heads_ = 0, group_ = 1, stride_ = 0;
  std::vector<float> acc_;       // [q_head][stride]: prefill accumulators, one per query head
  std::vector<float> pooled_;    // [capacity] (`selection_scores` only, else empty): the selection scores
  std::vector<float> mean_;      // [kv_head][stride] (`kRanksMean` only, else empty): the ranked means
  std::vector<float> anchored_;  // [kv_head][stride] (anchor hooks only, else empty): scores before take_anchor

 private:
  /// `key_score` of the K row at `row` (KV head `j`, slot `s`), checked finite and >= 0, a -0.0 returned
  /// as +0.0 (-0.0's bits sort above every positive float's in the victim search). Throws
  /// `std::invalid_argument` naming them otherwise. O(head_dim).
  float key_of(const unsigned char* row, std::size_t j, std::size_t s, const char* method) {
    const float v = score_.key_score(this->row_floats(row, this->key_.data()), this->keys_.head_dim);
    require(std::isfinite(v) && v >= 0.0f, who_, "::", method, ": key_score of KV head ", j, ", slot ", s, " is ", v,
            " (must be finite and >= 0)");
    return v + 0.0f;  // -0.0 becomes +0.0: the victim search ranks scores by their bits
  }
};

}  // namespace detail
}  // namespace kvevict
