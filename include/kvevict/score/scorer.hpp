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
#include "kvevict/core/simd.hpp"
#include "kvevict/score/chunk_rows.hpp"
#include "kvevict/score/snapkv_score.hpp"
#include "kvevict/score/softmax_accumulate.hpp"

namespace kvevict {
namespace detail {

/// The scoring half of a `Cache` (and of a `PagedCache`): owns the score policy, the Gumbel generator,
/// the prefill accumulators (one per query head) and the kernel's scratch
/// (allocated once), and adds `softmax((x + ζ) / τ)` of each logits row into
/// the scores of the row's KV head (`q_head / g`) with
/// `softmax_chunks` + `add_chunks` — the kernel behind `accumulate_softmax`.
/// Scores are `[kv_head][stride]` floats owned by the caller (`SlotTable`).
/// All-or-nothing: a NaN / `+inf` in `x + ζ` throws `std::invalid_argument`
/// with the scores and the generator exactly as before.
template <class Score>
class Scorer {
 public:
  /// Scratch for rows of up to `capacity` slots; `n_kv_heads` heads of `group`
  /// query heads each. `who` names the owning cache class in error messages
  /// (a string literal, e.g. "kvevict::Cache"). Allocates O(n_q_heads ·
  /// capacity) floats, once.
  Scorer(Score score, std::size_t n_kv_heads, std::size_t group, std::size_t capacity, std::uint64_t seed,
         const char* who = "kvevict::Cache")
      : score_(std::move(score)),
        who_(who),
        rng_(seed),
        n_kv_heads_(n_kv_heads),
        group_(group),
        stride_(capacity),
        acc_(n_kv_heads * group * capacity, 0.0f),
        backup_(n_kv_heads * group * capacity, 0.0f),
        row_(capacity, 0.0f),
        chunk_f_(2 * chunk_count(capacity), 0.0f),
        pooled_(has_observation_window<Score> ? capacity : 0, 0.0f) {}

  const Score& policy() const { return score_; }
  /// Re-seeds the Gumbel generator.
  void seed(std::uint64_t seed) { rng_.seed(seed); }

  /// Prefill, one chunk (one-shot prefill is the chunk `held = 0, C = P`): the
  /// chunk's queries `i` sit at slots `held + i`; each query head `h` adds, row
  /// by row in ascending `i`, `softmax((x + ζ) / τ)` of `rows.row(h, i)` (over
  /// slots `[0, held + i]`) into its own accumulator `acc[h]` (TOVA: the
  /// chunk's last row replaces it; SnapKV: only rows from `first_row(C)`). Per-query-head accumulators summed only by
  /// `fold` make the result the same, bit for bit, for every chunking of a
  /// prompt: each `acc[h][s]` adds the same rows in the same order. The new
  /// slots `[held, held + C)` start at 0. ζ is `rows.noise(h, i)`, else drawn
  /// (q_head-major, then rows, then slots: the noise order of the one-shot
  /// prefill when `C = P`). All-or-nothing: on a NaN / `+inf` in `x + ζ` (or an
  /// exception from `rows`) `acc[·][0, held)` and the generator are restored
  /// and `std::invalid_argument` names the cache class, the calling `method`
  /// (e.g. "prefill_chunk"), the chunk row and the q_head.
  /// O(n_q_heads · C · (held + C)); no allocation.
  void score_chunk(ChunkRows& rows, std::size_t held, std::size_t C, float inv_tau, const char* method) {
    const Xoshiro256pp saved = rng_;
    const std::size_t n = held + C, nq = n_kv_heads_ * group_;
    for (std::size_t h = 0; h < nq; ++h) {
      std::copy_n(acc(h), held, backup_.data() + h * stride_);
      std::fill(acc(h) + held, acc(h) + n, 0.0f);
    }
    auto restore = [&] {
      for (std::size_t h = 0; h < nq; ++h) std::copy_n(backup_.data() + h * stride_, held, acc(h));
      rng_ = saved;
    };
    for (std::size_t h = 0; h < nq; ++h) {
      for (std::size_t i = first_row(C); i < C; ++i) {
        const std::size_t len = held + i + 1;
        bool ok = false;
        try {
          ok = softmax_row(rows.row(h, i), rows.noise(h, i), len, inv_tau);
        } catch (...) {
          restore();
          throw;
        }
        if (!ok) {
          restore();
          throw std::invalid_argument(
              concat(who_, "::", method, ": logits row ", i, " of q_head ", h, " contains NaN or +inf"));
        }
        add_chunks(row_.data(), chunk_f_.data(), len, acc(h), !Score::kAccumulates);
      }
    }
  }

  /// The first of a chunk's `C` rows that is scored: 0; `C − 1` for `kPrefillLastRow` (TOVA); `C −
  /// min(L, C)` for an observation-window score (SnapKV, one-shot prefill only: `held = 0`).
  std::size_t first_row(std::size_t C) const {
    if constexpr (has_observation_window<Score>) return C - std::min(C, score_.observation_window());
    return Score::kPrefillLastRow ? C - 1 : 0;
  }
  /// The scores a selection ranks at a prefill cut, for `n` candidates `scores[0, n)`: the scores
  /// themselves, or for an observation-window score (SnapKV) its `selection_scores` (pooled, the window
  /// at `FLT_MAX`) in scratch valid until the next call. O(n · K); no allocation, no throw.
  const float* selection_scores(const float* scores, std::size_t n) noexcept {
    if constexpr (has_observation_window<Score>) {
      score_.selection_scores(scores, n, pooled_.data());
      return pooled_.data();
    }
    return scores;
  }
  /// Checks that the score can serve budget `k` (SnapKV: `L <= k`). Throws `std::invalid_argument`
  /// "<who>: SnapKV observation window L = … exceeds budget k = …". O(1).
  void check_budget(std::size_t k, const char* who) const {
    if constexpr (has_observation_window<Score>)
      require(score_.observation_window() <= k, who, ": SnapKV observation window L = ",
              score_.observation_window(), " exceeds budget k = ", k);
  }

  /// `scores[j][0, n) = Σ_t acc[j · g + t][0, n)` (t ascending): the prefill
  /// scores of each KV head from its query heads' accumulators. O(n_q_heads · n).
  void fold(float* scores, std::size_t stride, std::size_t n) const {
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      float* s = scores + j * stride;
      std::copy_n(acc(j * group_), n, s);
      for (std::size_t t = 1; t < group_; ++t) {
        const float* a = acc(j * group_ + t);
        KVEVICT_SIMD
        for (std::size_t i = 0; i < n; ++i) s[i] += a[i];
      }
    }
  }
  /// One-shot prefill into `scores` (`[kv_head][stride]`): `score_chunk` of the
  /// whole prompt (`held = 0`, `C = P`; `logits`, `gumbel` optional:
  /// `[q_head][P][P]`, causal part read) then `fold` over `[0, P)` — the path of
  /// `Cache::prefill`, so a `PagedCache` scores the prompt bit for bit as a
  /// `Cache` does. Throws as `score_chunk` ("<who>::prefill: logits row r of
  /// q_head h contains NaN or +inf"), `scores` and the generator unchanged.
  /// O(n_q_heads · P²); no allocation.
  void score_prompt(const float* logits, const float* gumbel, std::size_t P, float inv_tau, float* scores,
                    std::size_t stride) {
    MaterializedChunk rows(logits, gumbel, P, P);
    score_chunk(rows, 0, P, inv_tau, "prefill");
    fold(scores, stride, P);
  }
  /// After a cut moved the scores (bounded prefill): `acc[j · g] = scores[j]`,
  /// the group's other accumulators 0, over slots `[0, m)`, so that `fold` gives
  /// the scores back and later chunks add to them. O(n_q_heads · m).
  void reload(const float* scores, std::size_t stride, std::size_t m) {
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      std::copy_n(scores + j * stride, m, acc(j * group_));
      for (std::size_t t = 1; t < group_; ++t) std::fill_n(acc(j * group_ + t), m, 0.0f);
    }
  }

  /// Decode step over `n` slots: the new slot `n − 1` starts at 0, then each
  /// query head's row `x[h][0, n)` (`logits`, `gumbel` optional: `[q_head][n]`)
  /// adds its softmax into KV head `h / g`'s scores (`kAccumulates == false`:
  /// the group's first row replaces them). In place, KV head by KV head, q_head
  /// order (the documented noise order). Every row is checked first
  /// (`row_accepted`, a read-only pass): on a NaN / `+inf` nothing changes (scores,
  /// generator) and `std::invalid_argument` names the q_head — no backup copy
  /// of the scores, so the step reads and writes each score once per row.
  /// O(n_q_heads · n), no allocation.
  void score_step(const float* logits, const float* gumbel, std::size_t n, float inv_tau, float* scores,
                  std::size_t stride) {
    const bool noisy = score_.noisy();
    for (std::size_t h = 0; h < n_kv_heads_ * group_; ++h)
      if (!row_accepted(logits + h * n, noisy && gumbel != nullptr ? gumbel + h * n : nullptr, n))
        throw std::invalid_argument(concat(who_, "::decode_step: logits of q_head ", h, " contain NaN or +inf"));
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      float* s = scores + j * stride;
      s[n - 1] = 0.0f;
      for (std::size_t t = 0; t < group_; ++t) {
        const std::size_t h = j * group_ + t;
        // Cannot fail: row_accepted passed (the same test on the same values).
        (void)softmax_row(logits + h * n, gumbel != nullptr ? gumbel + h * n : nullptr, n, inv_tau);
        add_chunks(row_.data(), chunk_f_.data(), n, s, !Score::kAccumulates && t == 0);
      }
    }
  }

  /// `Σ_j scores[j][0, n)` (for a selection shared by every KV head), in scratch
  /// valid until the next call. O(n_kv_heads · n).
  const float* sum_over_heads(const float* scores, std::size_t stride, std::size_t n) {
    float* sum = row_.data();
    std::fill_n(sum, n, 0.0f);
    for (std::size_t j = 0; j < n_kv_heads_; ++j) {
      const float* s = scores + j * stride;
      KVEVICT_SIMD
      for (std::size_t i = 0; i < n; ++i) sum[i] += s[i];
    }
    return sum;
  }

 private:
  float* acc(std::size_t h) { return acc_.data() + h * stride_; }
  const float* acc(std::size_t h) const { return acc_.data() + h * stride_; }
  /// The kernel on one row: `x + ζ` when the policy is noisy (ζ injected as
  /// `zeta`, or drawn from the generator when null). False on NaN / `+inf`.
  bool softmax_row(const float* x, const float* zeta, std::size_t n, float inv_tau) {
    float* e = row_.data();
    float* f = chunk_f_.data();
    if (!score_.noisy()) return softmax_chunks(x, NoNoise{}, n, inv_tau, e, f);
    if (zeta != nullptr) return softmax_chunks(x, GivenNoise{zeta}, n, inv_tau, e, f);
    return softmax_chunks(x, DrawnNoise{&rng_}, n, inv_tau, e, f);
  }

  Score score_;
  const char* who_;
  Xoshiro256pp rng_;
  std::size_t n_kv_heads_ = 0, group_ = 1, stride_ = 0;
  std::vector<float> acc_;      // [q_head][stride]: prefill accumulators, one per query head
  std::vector<float> backup_;   // [q_head][stride]: acc_ before a chunk (prefill)
  std::vector<float> row_;      // [capacity]: one row's numerators, or the summed scores
  std::vector<float> chunk_f_;  // [2 * chunks]: one row's per-chunk factors
  std::vector<float> pooled_;   // [capacity] (SnapKV only, else empty): the pooled selection scores
};

}  // namespace detail
}  // namespace kvevict
