// detail/scorer.hpp — runs a score policy: over a layer's logits with the one softmax kernel
// (prompt rows at prefill, one row per query head per decode step), or over its keys (`key_score`).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kvevict/concepts.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/detail/key_reader.hpp"
#include "kvevict/detail/scorer_base.hpp"
#include "kvevict/detail/simd.hpp"
#include "kvevict/score/chunk_rows.hpp"
#include "kvevict/score/gumbel.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/score/softmax_accumulate.hpp"

namespace kvevict {
namespace detail {

/// The scoring half of a `Cache` (and of a `PagedCache`): owns the score policy, the noise seed,
/// the prefill accumulators (one per query head) and the kernel's scratch
/// (allocated at construction and by `set_executor`), and adds
/// `softmax((x + ζ) / τ)` of each logits row into the scores of the row's KV
/// head (`q_head / g`) with `softmax_pass` + `softmax_combine` + `add_chunks` —
/// the kernel behind `accumulate_softmax`. Scores are `[kv_head][stride]`
/// floats owned by the caller (`SlotTable`). Drawn ζ is `fill_gumbel_row` with
/// key `gumbel_row_key(seed, q_head, query position)`, a pure function of its
/// inputs.
///
/// Parallel work runs through the `ExecutorRef` of `set_executor`
/// (serial by default). Prefill splits across query heads (each owns its
/// accumulator); a decode step splits across KV heads and, when there are
/// fewer KV heads than workers, each head's row across chunk-aligned slot ranges
/// (phase 1 per range, the fixed-order combine on the caller, phase 3 per range).
/// Every element sees the same operations in the same order for any worker
/// count and any split: the results are bit-identical for W = 1, 2, 3, ...
/// All-or-nothing: a NaN / `+inf` in `x + ζ` throws `std::invalid_argument`
/// with the scores exactly as before.
///
/// The score's optional hooks (concepts.hpp) are called here and in its base `ScorerBase` only: `first_scored_row` (`first_row`),
/// `selection_scores`, `validate_budget` (`check_budget`), `key_score` (`score_keys`, `score_key_step`), the anchor
/// hooks (`score_anchor`, `take_anchor`).
template <class Score>
class Scorer : public ScorerBase<Score> {
  using Base = ScorerBase<Score>;
  using Base::score_, Base::who_, Base::seed_, Base::n_kv_heads_, Base::group_, Base::stride_, Base::acc_, Base::acc,
      Base::selection_scores, Base::pooled_;

 public:
  /// Scratch for rows of up to `capacity` slots; `n_kv_heads` heads of `group`
  /// query heads each. `who` names the owning cache class in error messages
  /// (a string literal, e.g. "kvevict::Cache"); `keys` reads the view's K rows for a key score
  /// (`detail::key_reader`; empty otherwise). Allocates O(n_q_heads · capacity) floats, once
  /// (+ `capacity` for `selection_scores`, + `2 · head_dim + n_kv_heads` for a score reading keys, + `n_kv_heads ·
  /// capacity` for the anchor hooks).
  Scorer(Score score, std::size_t n_kv_heads, std::size_t group, std::size_t capacity, std::uint64_t seed,
         const char* who = "kvevict::Cache", KeyReader keys = KeyReader{})
      : Base(std::move(score), n_kv_heads, group, capacity, seed, who, keys),
        chunks_(chunk_count(capacity)),
        backup_(n_kv_heads * group * capacity, 0.0f),
        row_(capacity, 0.0f),
        f_(n_kv_heads * group * 2 * chunks_, 0.0f),
        bad_(n_kv_heads * group, 0),
        errors_(n_kv_heads * group) {}

  /// Runs later calls through `executor` (see `Cache::set_executor`): sizes the
  /// per-task row scratch for `min(executor.workers(), n_q_heads)` tasks.
  /// Allocates O(min(W, n_q_heads) · capacity) floats (here, never in a step);
  /// strong guarantee on `std::bad_alloc`.
  void set_executor(ExecutorRef executor) {
    const std::size_t tasks = std::max<std::size_t>(1, std::min(executor.workers(), n_kv_heads_ * group_));
    if (tasks * stride_ > row_.size()) row_.resize(tasks * stride_, 0.0f);
    executor_ = executor;
  }
  /// The executor in use (serial by default).
  ExecutorRef executor() const { return executor_; }

  /// Prefill, one chunk (one-shot prefill is the chunk `held = 0, C = P`): the
  /// chunk's queries `i` sit at slots `held + i` and have query position
  /// `row0 + i` (their row in the prompt); each query head `h` adds, row by row in
  /// ascending `i`, `softmax((x + ζ) / τ)` of `rows.row(h, i)` (over slots
  /// `[0, held + i]`) into its own accumulator `acc[h]` (TOVA: the chunk's last
  /// row replaces it; a `first_scored_row` score: only rows from `first_row(C)`). Per-query-head accumulators summed
  /// only by `fold` make
  /// the result the same, bit for bit, for every chunking of a prompt and every
  /// executor: each `acc[h][s]` adds the same rows in the same order. The new
  /// slots `[held, held + C)` start at 0. ζ is `rows.noise(h, i)`, else drawn
  /// (`fill_gumbel_row(gumbel_row_key(seed, h, row0 + i), 0, ...)`: equal for
  /// every chunking). Query heads run as parallel tasks when `rows.concurrent()`.
  /// All-or-nothing: on a NaN / `+inf` in `x + ζ` (or an exception from `rows`)
  /// every `acc[·][0, held)` is restored and the first failure in (q_head, row)
  /// order is reported: `std::invalid_argument` names the cache class, the
  /// calling `method` (e.g. "prefill_chunk"), the chunk row and the q_head (an
  /// exception from `rows` is rethrown); a `first_scored_row(C) >= C` throws before any row is read.
  /// O(n_q_heads · C · (held + C)); no allocation.
  void score_chunk(ChunkRows& rows, std::size_t held, std::size_t C, float inv_tau, const char* method,
                   std::uint64_t row0 = 0) {
    const std::size_t nq = n_kv_heads_ * group_, first = first_row(C);
    if constexpr (has_first_scored_row<Score>)
      require(first < C, who_, "::", method, ": ", score_name<Score>(), "'s first_scored_row(", C, ") = ", first,
              " must be < prompt_len = ", C);
    const ExecutorRef ex = rows.concurrent() ? executor_ : ExecutorRef();
    const std::size_t tasks = std::min(ex.workers(), nq);
    ex.parallel_for(tasks, [&](std::size_t t) noexcept {
      float* e = row_.data() + t * stride_;
      for (std::size_t h = t * nq / tasks; h < (t + 1) * nq / tasks; ++h)
        bad_[h] = prefill_head(rows, h, held, C, first, inv_tau, row0, e, errors_[h]);
    });
    for (std::size_t h = 0; h < nq; ++h) {
      if (bad_[h] == 0) continue;
      for (std::size_t q = 0; q < nq; ++q) std::copy_n(backup_.data() + q * stride_, held, acc(q));
      const std::size_t i = bad_[h] - 1;
      if (errors_[h]) {
        std::exception_ptr err = std::move(errors_[h]);
        for (auto& x : errors_) x = nullptr;
        std::rethrow_exception(err);
      }
      for (auto& x : errors_) x = nullptr;
      throw std::invalid_argument(
          concat(who_, "::", method, ": logits row ", i, " of q_head ", h, " contains NaN or +inf"));
    }
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
  /// q_head h contains NaN or +inf"), `scores` unchanged.
  /// O(n_q_heads · P²); no allocation.
  void score_prompt(const float* logits, const float* gumbel, std::size_t P, float inv_tau, float* scores,
                    std::size_t stride) {
    MaterializedChunk rows(logits, gumbel, P, P);
    score_chunk(rows, 0, P, inv_tau, "prefill");
    fold(scores, stride, P);
  }
  /// `acc[h][0, P) = sums[h · P + (0, P)]` for every query head (`prefill_from_attention`: the column sums of
  /// the prompt's attention probabilities, checked by the caller). O(n_q_heads · P); cannot throw.
  void load_sums(const float* sums, std::size_t P) noexcept {
    for (std::size_t h = 0; h < n_kv_heads_ * group_; ++h) std::copy_n(sums + h * P, P, acc(h));
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

  /// Decode step over `n` slots whose new token has position `position` (the
  /// query position of the noise): the new slot `n − 1` starts at 0, then each
  /// query head's row `x[h][0, n)` (`logits`, `gumbel` optional: `[q_head][n]`)
  /// adds its softmax into KV head `h / g`'s scores in q_head order
  /// (`kAccumulates == false`: the group's first row replaces them). Tasks: one
  /// per KV head when `n_kv_heads >= W`, else `ceil(W / n_kv_heads)`
  /// chunk-aligned slot ranges per head (never more than the row's chunks).
  /// If a row holds NaN / `+inf`, every score is restored and
  /// `std::invalid_argument` names the lowest such q_head.
  /// O(n_q_heads · n), no allocation.
  void score_step(const float* logits, const float* gumbel, std::size_t n, float inv_tau, float* scores,
                  std::size_t stride, std::uint64_t position = 0) {
    const std::size_t W = executor_.workers(), chunks = chunk_count(n), nq = n_kv_heads_ * group_;
    auto row_of = [&](std::size_t h) { return logits + h * n; };
    auto zeta_of = [&](std::size_t h) { return gumbel != nullptr ? gumbel + h * n : nullptr; };
    if (n_kv_heads_ >= W || chunks <= 1) {  // whole heads: rows fused (pass + combine + add)
      // All-or-nothing without a backup copy of the scores (which cost a read and a write of every
      // score per step, and made the per-element cost grow once the scores left L2): every row is
      // checked first, read-only (`row_accepted`: exactly the rows the kernel rejects).
      // The check runs on the executor too (flags per q_head, then the lowest failing one throws).
      for_each_head(executor_, nq, [&](std::size_t h) noexcept {
        bad_[h] = !row_accepted(row_of(h), score_.noisy() ? zeta_of(h) : nullptr, n);
      });
      for (std::size_t h = 0; h < nq; ++h)
        if (bad_[h] != 0) throw_step(h);
      const std::size_t tasks = std::min(W, n_kv_heads_);
      executor_.parallel_for(tasks, [&](std::size_t t) noexcept {
        float* e = row_.data() + t * stride_;
        for (std::size_t j = t * n_kv_heads_ / tasks; j < (t + 1) * n_kv_heads_ / tasks; ++j) {
          float* s = scores + j * stride;
          s[n - 1] = 0.0f;
          for (std::size_t q = 0; q < group_; ++q) {
            const std::size_t h = j * group_ + q;
            float* f = f_.data() + h * 2 * chunks_;
            (void)softmax_row(row_of(h), zeta_of(h), n, inv_tau, position, h, 0, chunks, e, f, f + chunks_);
            softmax_combine(f, f + chunks_, chunks, inv_tau);
            add_chunks(e, f, n, s, !Score::kAccumulates && q == 0);
          }
        }
      });
      return;
    }
    // Fewer KV heads than workers: each head's row split into `parts` chunk ranges.
    // ceil(W / n_kv_heads) without `W + n_kv_heads − 1`, which wraps for W near SIZE_MAX.
    const std::size_t parts = std::min(chunks, W / n_kv_heads_ + (W % n_kv_heads_ != 0 ? 1 : 0));
    auto range = [&](std::size_t p) { return std::make_pair(p * chunks / parts, (p + 1) * chunks / parts); };
    executor_.parallel_for(n_kv_heads_ * parts, [&](std::size_t task) noexcept {  // phase 1: e, chunk sums, maxes
      const std::size_t j = task / parts;
      const auto [c0, c1] = range(task % parts);
      for (std::size_t q = 0; q < group_; ++q) {
        const std::size_t h = j * group_ + q;
        float* f = f_.data() + h * 2 * chunks_;
        softmax_row(row_of(h), zeta_of(h), n, inv_tau, position, h, c0, c1, backup_.data() + h * stride_, f,
                    f + chunks_);
      }
    });
    for (std::size_t h = 0; h < nq; ++h)  // all-or-nothing: nothing written yet
      if (softmax_bad(f_.data() + h * 2 * chunks_ + chunks_, chunks)) throw_step(h);
    for (std::size_t h = 0; h < nq; ++h)  // phase 2: the fixed-order combine, on the caller
      softmax_combine(f_.data() + h * 2 * chunks_, f_.data() + h * 2 * chunks_ + chunks_, chunks, inv_tau);
    executor_.parallel_for(n_kv_heads_ * parts, [&](std::size_t task) noexcept {  // phase 3: add into the scores
      const std::size_t j = task / parts;
      const auto [c0, c1] = range(task % parts);
      const std::size_t b = c0 * kChunk, len = std::min(n, c1 * kChunk) - b;
      float* s = scores + j * stride + b;
      if (b + len == n) s[len - 1] = 0.0f;  // the new slot n − 1 starts at 0
      for (std::size_t q = 0; q < group_; ++q) {
        const std::size_t h = j * group_ + q;
        add_chunks(backup_.data() + h * stride_ + b, f_.data() + h * 2 * chunks_ + c0, len, s,
                   !Score::kAccumulates && q == 0);
      }
    });
  }

  /// One KV head's part of `score_step`, for an engine that hands each KV head's logits over right
  /// after computing them (`Cache::score_decode_head`): the rows of KV head `j`'s query heads
  /// (`logits`, `gumbel` optional: `[g][row_stride]`, query head `j · g + q` at row `q`, its first `n`
  /// entries read; `row_stride` 0 means `n`) add their softmax into `scores[j][0, n)` exactly as
  /// `score_step` adds them (the new slot `n − 1` starts at 0; the same kernel, the same order: the same
  /// bits). Runs on the calling thread; calls for distinct `j` may run concurrently (each touches only
  /// its head's scores, chunk factors and its group's rows of the numerator scratch). All-or-nothing for
  /// head `j`: every row is checked first, read-only; on NaN / `+inf` `std::invalid_argument` names the
  /// q_head ("<who>::<method>: logits of q_head h contain NaN or +inf") and head `j`'s scores are
  /// unchanged. O(g · n), no allocation.
  void score_step_head(std::size_t j, const float* logits, const float* gumbel, std::size_t n, float inv_tau,
                       float* scores, std::size_t stride, std::uint64_t position, const char* method,
                       std::size_t row_stride = 0) {
    const std::size_t rs = row_stride != 0 ? row_stride : n;
    const std::size_t q = first_bad_row(j, logits, gumbel, n, rs);
    if (q != group_)
      throw std::invalid_argument(
          concat(who_, "::", method, ": logits of q_head ", j * group_ + q, " contain NaN or +inf"));
    add_head_rows(j, logits, gumbel, n, rs, inv_tau, scores, stride, position);
  }

  /// `score_step` for KV heads of different lengths (head-adaptive budgets, `HeadBudgets::adaptive`):
  /// KV head `j` holds `lens[j]` slots, its new slot is `lens[j] − 1`, and the rows of its query heads are
  /// `logits + h · row_stride` (`[q_head][row_stride]`, `row_stride >= max lens`; `gumbel` optional, same
  /// layout), their first `lens[j]` entries read. Every row is checked first (read-only; the lowest bad
  /// q_head throws `std::invalid_argument`, every score unchanged), then each KV head adds its rows as
  /// `score_step_head` does (the same kernel and order: with equal lengths, the same bits as `score_step`),
  /// one task per KV head on the executor. O(n_q_heads · max lens), no allocation.
  void score_step_ragged(const float* logits, const float* gumbel, std::size_t row_stride, const std::size_t* lens,
                         float inv_tau, float* scores, std::size_t stride, std::uint64_t position) {
    for_each_head(executor_, n_kv_heads_, [&](std::size_t j) noexcept {
      bad_[j] = first_bad_row(j, logits + j * group_ * row_stride,
                              gumbel != nullptr ? gumbel + j * group_ * row_stride : nullptr, lens[j], row_stride);
    });
    for (std::size_t j = 0; j < n_kv_heads_; ++j)
      if (bad_[j] != group_) throw_step(j * group_ + bad_[j]);
    for_each_head(executor_, n_kv_heads_, [&](std::size_t j) noexcept {
      add_head_rows(j, logits + j * group_ * row_stride,
                    gumbel != nullptr ? gumbel + j * group_ * row_stride : nullptr, lens[j], row_stride, inv_tau,
                    scores, stride, position);
    });
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

  /// The first of a chunk's `C` rows that is scored: the score's `first_scored_row(C)` (a
  /// `kWholePrompt` score, so one-shot prefill only: `held = 0`, `C = P`), else 0, or `C − 1` for
  /// `kPrefillLastRow` (TOVA).
  std::size_t first_row(std::size_t C) const {
    if constexpr (has_first_scored_row<Score>) return score_.first_scored_row(C);
    return Score::kPrefillLastRow ? C - 1 : 0;
  }
  /// Before a prefill cut over `n` slots changes any state: the score's `selection_scores` (if it has
  /// one) of the scores the cut will rank — each KV head's fold of the accumulators, or with `shared`
  /// their sum over KV heads, the same bits as `fold` then `sum_over_heads` — must all be finite and
  /// >= 0. Throws `std::invalid_argument` "<who>::<method>: <score>'s selection_scores of KV head j
  /// (shared: of the summed KV heads), slot s is v (must be finite and >= 0)" at the first bad value.
  /// Writes only scratch. O(n_q_heads · n) plus the hook's cost; no allocation. No-op without the hook.
  void check_selection(std::size_t n, bool shared, const char* method) {
    if constexpr (has_selection_scores<Score>) {
      float* s = row_.data();
      auto head = [&](std::size_t j, std::size_t i) {
        float v = acc(j * group_)[i];
        for (std::size_t t = 1; t < group_; ++t) v += acc(j * group_ + t)[i];
        return v;
      };
      for (std::size_t j = 0; j < (shared ? 1 : n_kv_heads_); ++j) {
        for (std::size_t i = 0; i < n; ++i) {
          if (!shared) {
            s[i] = head(j, i);
            continue;
          }
          float sum = 0.0f;
          for (std::size_t h = 0; h < n_kv_heads_; ++h) sum += head(h, i);
          s[i] = sum;
        }
        score_.selection_scores(s, n, pooled_.data());
        for (std::size_t i = 0; i < n; ++i) {
          const float v = pooled_[i];
          if (std::isfinite(v) && v >= 0.0f) continue;
          if (shared)
            throw std::invalid_argument(concat(who_, "::", method, ": ", score_name<Score>(),
                                               "'s selection_scores of the summed KV heads, slot ", i, " is ", v,
                                               " (must be finite and >= 0)"));
          throw std::invalid_argument(concat(who_, "::", method, ": ", score_name<Score>(),
                                             "'s selection_scores of KV head ", j, ", slot ", i, " is ", v,
                                             " (must be finite and >= 0)"));
        }
      }
    } else {
      (void)n, (void)shared, (void)method;
    }
  }

 private:
  /// Phase 1 on chunks `[c0, c1)` of one row: `x + ζ` when the policy is noisy
  /// (ζ injected as `zeta`, or drawn with key (seed, `q_head`, `position`)).
  /// False on NaN / `+inf`.
  bool softmax_row(const float* x, const float* zeta, std::size_t n, float inv_tau, std::uint64_t position,
                   std::size_t q_head, std::size_t c0, std::size_t c1, float* e, float* sum, float* mx) const {
    if (!score_.noisy()) return softmax_pass(x, NoNoise{}, n, inv_tau, c0, c1, e, sum, mx);
    if constexpr (std::is_base_of_v<GumbelLogitScore, Score>) {
      const float s = score_.noise_scale;
      if (s != 1.0f) {  // the ablation's scaled noise; s = 1 keeps the paths below and their bits
        if (zeta != nullptr) return softmax_pass(x, ScaledGivenNoise{zeta, s}, n, inv_tau, c0, c1, e, sum, mx);
        return softmax_pass(x, ScaledDrawnNoise{gumbel_row_key(seed_, q_head, position), s}, n, inv_tau, c0, c1, e,
                            sum, mx);
      }
    }
    if (zeta != nullptr) return softmax_pass(x, GivenNoise{zeta}, n, inv_tau, c0, c1, e, sum, mx);
    return softmax_pass(x, DrawnNoise{gumbel_row_key(seed_, q_head, position)}, n, inv_tau, c0, c1, e, sum, mx);
  }

  /// One query head's rows of a prefill chunk into `acc[h]` (backed up first);
  /// returns 0, or 1 + the first failing row (then `err` may hold what `rows` threw).
  std::size_t prefill_head(ChunkRows& rows, std::size_t h, std::size_t held, std::size_t C, std::size_t first,
                           float inv_tau, std::uint64_t row0, float* e, std::exception_ptr& err) noexcept {
    std::copy_n(acc(h), held, backup_.data() + h * stride_);
    std::fill(acc(h) + held, acc(h) + held + C, 0.0f);
    float* f = f_.data() + h * 2 * chunks_;
    for (std::size_t i = first; i < C; ++i) {
      const std::size_t len = held + i + 1, chunks = chunk_count(len);
      try {
        if (!softmax_row(rows.row(h, i), rows.noise(h, i), len, inv_tau, row0 + i, h, 0, chunks, e, f,
                         f + chunks_))
          return i + 1;
      } catch (...) {
        err = std::current_exception();
        return i + 1;
      }
      softmax_combine(f, f + chunks_, chunks, inv_tau);
      add_chunks(e, f, len, acc(h), !Score::kAccumulates);
    }
    return 0;
  }

  /// The first of KV head `j`'s `g` rows (`logits + q · row_stride`, `n` entries) that the kernel would
  /// reject (NaN / `+inf` in `x + ζ`), or `g` if none. Read-only; O(g · n).
  std::size_t first_bad_row(std::size_t j, const float* logits, const float* gumbel, std::size_t n,
                            std::size_t row_stride) const noexcept {
    (void)j;
    const bool noise_given = score_.noisy() && gumbel != nullptr;
    for (std::size_t q = 0; q < group_; ++q)
      if (!row_accepted(logits + q * row_stride, noise_given ? gumbel + q * row_stride : nullptr, n)) return q;
    return group_;
  }
  /// KV head `j`'s rows (checked) into `scores[j][0, n)`: the new slot `n − 1` starts at 0, then each row's
  /// softmax is added in q order (the first replaces them for `kAccumulates == false`). Scratch: the group's
  /// rows of `backup_` and its chunk factors. O(g · n); no throw.
  void add_head_rows(std::size_t j, const float* logits, const float* gumbel, std::size_t n, std::size_t row_stride,
                     float inv_tau, float* scores, std::size_t stride, std::uint64_t position) noexcept {
    const std::size_t chunks = chunk_count(n);
    float* e = backup_.data() + j * group_ * stride_;  // the group's first row of the split step's scratch
    float* s = scores + j * stride;
    s[n - 1] = 0.0f;
    for (std::size_t q = 0; q < group_; ++q) {
      const std::size_t h = j * group_ + q;
      float* f = f_.data() + h * 2 * chunks_;
      (void)softmax_row(logits + q * row_stride, gumbel != nullptr ? gumbel + q * row_stride : nullptr, n, inv_tau,
                        position, h, 0, chunks, e, f, f + chunks_);
      softmax_combine(f, f + chunks_, chunks, inv_tau);
      add_chunks(e, f, n, s, !Score::kAccumulates && q == 0);
    }
  }

  [[noreturn]] void throw_step(std::size_t q_head) const {
    throw std::invalid_argument(concat(who_, "::decode_step: logits of q_head ", q_head, " contain NaN or +inf"));
  }

  ExecutorRef executor_;
  std::size_t chunks_ = 0;
  std::vector<float> backup_;   // [q_head][stride]: acc_ before a chunk, or (split step) each row's numerators
  std::vector<float> row_;      // [task][capacity]: one row's numerators per task, or the summed scores
  std::vector<float> f_;        // [q_head][2 * chunks]: one row's chunk factors, then chunk maxes
  std::vector<std::size_t> bad_;              // [q_head] / [kv_head]: 0, or 1 + the failing row / q_head
  std::vector<std::exception_ptr> errors_;    // [q_head]: what `rows` threw, if anything
};

}  // namespace detail
}  // namespace kvevict
