// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// score/scorer.hpp — runs a score policy over a layer's logits with the one
// softmax kernel: prompt rows at prefill, one row per query head per decode step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kvevict/core/check.hpp"
#include "kvevict/core/random.hpp"
#include "kvevict/score/softmax_accumulate.hpp"

namespace kvevict {
namespace detail {

/// The scoring half of a `Cache` (and of a `PagedCache`): owns the score policy, the Gumbel generator
/// and the kernel's scratch (allocated once), and adds `softmax((x + ζ) / τ)` of
/// each logits row into the scores of the row's KV head (`q_head / g`) with
/// `softmax_chunks` + `add_chunks` — the kernel behind `accumulate_softmax`.
/// Scores are `[kv_head][stride]` floats owned by the caller (`SlotTable`).
/// All-or-nothing: a NaN / `+inf` in `x + ζ` throws `std::invalid_argument`
/// with the scores and the generator exactly as before.
template <class Score>
class Scorer {
 public:
  /// Scratch for rows of up to `capacity` slots; `n_kv_heads` heads of `group`
  /// query heads each. `who` names the owning cache class in error messages
  /// (a string literal, e.g. "kvevict::Cache").
  Scorer(Score score, std::size_t n_kv_heads, std::size_t group, std::size_t capacity, std::uint64_t seed,
         const char* who = "kvevict::Cache")
      : score_(std::move(score)),
        who_(who),
        rng_(seed),
        n_kv_heads_(n_kv_heads),
        group_(group),
        backup_(n_kv_heads * capacity, 0.0f),
        row_(capacity, 0.0f),
        chunk_f_(2 * chunk_count(capacity), 0.0f) {}

  const Score& policy() const { return score_; }
  /// Re-seeds the Gumbel generator.
  void seed(std::uint64_t seed) { rng_.seed(seed); }

  /// Prefill: `scores[j][0, P) = Σ` over the query heads `h` of KV head `j` and
  /// the causal rows `r` (TOVA: the last row only) of `softmax((x[h][r][0..r] +
  /// ζ) / τ)`; `logits` (and `gumbel`, optional) are `[q_head][P][P]`. Throws
  /// naming the row and query head of a NaN / `+inf`. O(n_q_heads · P²).
  void score_prompt(const float* logits, const float* gumbel, std::size_t P, float inv_tau, float* scores,
                    std::size_t stride) {
    const Xoshiro256pp saved = rng_;
    std::fill(backup_.begin(), backup_.end(), 0.0f);  // the increments, copied into scores at the end
    for (std::size_t h = 0; h < n_kv_heads_ * group_; ++h) {
      float* acc = backup_.data() + (h / group_) * stride;
      for (std::size_t r = Score::kPrefillLastRow ? P - 1 : 0; r < P; ++r) {
        const std::size_t offset = (h * P + r) * P;
        if (!softmax_row(logits + offset, gumbel, offset, r + 1, inv_tau)) {
          rng_ = saved;
          throw std::invalid_argument(
              concat(who_, "::prefill: logits row ", r, " of q_head ", h, " contains NaN or +inf"));
        }
        add_chunks(row_.data(), chunk_f_.data(), r + 1, acc, false);
      }
    }
    for (std::size_t j = 0; j < n_kv_heads_; ++j) std::copy_n(backup_.data() + j * stride, P, scores + j * stride);
  }

  /// Decode step over `n` slots: the new slot `n − 1` starts at 0, then each
  /// query head's row `x[h][0, n)` (`logits`, `gumbel` optional: `[q_head][n]`)
  /// adds its softmax into KV head `h / g`'s scores (`kAccumulates == false`:
  /// the group's first row replaces them). In place, KV head by KV head, q_head
  /// order (the documented noise order); each head's scores are backed up first
  /// and restored, with the generator, if a row holds NaN / `+inf`.
  /// O(n_q_heads · n), no allocation.
  void score_step(const float* logits, const float* gumbel, std::size_t n, float inv_tau, float* scores,
                  std::size_t stride) {
    const Xoshiro256pp saved = rng_;
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      float* s = scores + j * stride;
      std::copy_n(s, n, backup_.data() + j * stride);
      s[n - 1] = 0.0f;
      for (std::size_t t = 0; t < group_; ++t) {
        const std::size_t h = j * group_ + t;
        if (!softmax_row(logits + h * n, gumbel, h * n, n, inv_tau)) {
          for (std::size_t i = 0; i <= j; ++i) std::copy_n(backup_.data() + i * stride, n, scores + i * stride);
          rng_ = saved;
          throw std::invalid_argument(
              concat(who_, "::decode_step: logits of q_head ", h, " contain NaN or +inf"));
        }
        add_chunks(row_.data(), chunk_f_.data(), n, s, !Score::kAccumulates && t == 0);
      }
    }
  }

  /// `Σ_j scores[j][0, n)` (for a selection shared by every KV head), in scratch
  /// valid until the next call. O(n_kv_heads · n).
  const float* sum_over_heads(const float* scores, std::size_t stride, std::size_t n) {
    std::fill_n(row_.data(), n, 0.0f);
    for (std::size_t j = 0; j < n_kv_heads_; ++j)
      for (std::size_t i = 0; i < n; ++i) row_[i] += scores[j * stride + i];
    return row_.data();
  }

 private:
  /// The kernel on one row: `x + ζ` when the policy is noisy (ζ injected at
  /// `gumbel + offset`, or drawn from the generator). False on NaN / `+inf`.
  bool softmax_row(const float* x, const float* gumbel, std::size_t offset, std::size_t n, float inv_tau) {
    float* e = row_.data();
    float* f = chunk_f_.data();
    if (!score_.noisy()) return softmax_chunks(x, NoNoise{}, n, inv_tau, e, f);
    if (gumbel != nullptr) return softmax_chunks(x, GivenNoise{gumbel + offset}, n, inv_tau, e, f);
    return softmax_chunks(x, DrawnNoise{&rng_}, n, inv_tau, e, f);
  }

  Score score_;
  const char* who_;
  Xoshiro256pp rng_;
  std::size_t n_kv_heads_ = 0, group_ = 1;
  std::vector<float> backup_;   // [kv_head][stride]: prefill's increments; decode's score backup
  std::vector<float> row_;      // [capacity]: one row's numerators, or the summed scores
  std::vector<float> chunk_f_;  // [2 * chunks]: one row's per-chunk factors
};

}  // namespace detail
}  // namespace kvevict
