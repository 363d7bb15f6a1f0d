// score/score_policies.hpp — what a token's score is: the score policies.
// SPDX-License-Identifier: Apache-2.0
//
// A score policy is a small traits struct; `Cache` runs the shared softmax
// kernel as the traits say. It may add optional hooks, called by both caches
// for any score: which prompt rows are scored (`first_scored_row`), whether it
// needs the whole prompt at once (`kWholePrompt`), the scores a prefill cut
// ranks (`selection_scores`), a budget check (`validate_budget`), or a score
// from each token's key alone instead of the logits (`key_score`; then no
// logits are needed at all), or from every key held (`anchor_add`, `anchor_finish`,
// `anchor_score`). SnapKVScore (snapkv_score.hpp) is built on them;
// KeyNormScore (below) is a key score, KeyDiffScore an anchor score;
// examples/custom_score.cpp writes one in 40 lines. The contract a
// custom score policy (and a custom temperature schedule) implements, hooks
// included, is written, and checked, in kvevict/concepts.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kvevict/detail/fixed_order_dot.hpp"
#include "kvevict/detail/no_contract.hpp"

namespace kvevict {

/// Keyformer's score (Adnan et al., MLSys 2024, §3.3, Eq. 7): every step, each
/// retained token's score grows by `softmax((x + ζ) / τ)` summed over the step's
/// query rows (and over the query heads of its GQA group), ζ ~ Gumbel(0, 1)
/// drawn afresh each step. `gumbel_noise = false` gives the deterministic
/// variant (`ζ = 0`, temperature still applied). `noise_scale = s` in (0, 1]
/// scales the noise, `softmax((x + s · ζ) / τ)` (an ablation knob, issue 35: the
/// paper's noise is s = 1, Gumbel(0, 1), whatever the logits' scale); s = 1 runs
/// the unscaled code, bit for bit as before. The cache throws
/// `std::invalid_argument` at construction for s outside (0, 1] or NaN.
struct GumbelLogitScore {
  static constexpr bool kUsesLogits = true;
  static constexpr bool kAccumulates = true;
  static constexpr bool kUsesTemperature = true;
  static constexpr bool kPrefillLastRow = false;
  bool gumbel_noise = true;  ///< draw ζ from the cache's seeded generator
  float noise_scale = 1.0f;  ///< s: the noise added is s · ζ, s in (0, 1]
  bool noisy() const { return gumbel_noise; }
};

/// H2O's heavy-hitter score (Zhang et al., NeurIPS 2023, §4): accumulated plain
/// attention `softmax(x)`, no noise, τ = 1 whatever the schedule says.
struct AccumulatedAttentionScore {
  static constexpr bool kUsesLogits = true;
  static constexpr bool kAccumulates = true;
  static constexpr bool kUsesTemperature = false;
  static constexpr bool kPrefillLastRow = false;
  bool noisy() const { return false; }
};

/// TOVA's score (Oren et al., 2024, §3): the current step's attention only,
/// `softmax(x)` of the newest query, summed over the group's query heads; it
/// replaces (does not add to) the previous score. At prefill the newest query is
/// the last prompt row.
struct CurrentAttentionScore {
  static constexpr bool kUsesLogits = true;
  static constexpr bool kAccumulates = false;
  static constexpr bool kUsesTemperature = false;
  static constexpr bool kPrefillLastRow = true;
  bool noisy() const { return false; }
};

/// No score: position-only policies (StreamingLLM, sliding window). The cache
/// ignores the logits argument (it may be `nullptr`) and all scores stay 0.
struct NoScore {
  static constexpr bool kUsesLogits = false;
  static constexpr bool kAccumulates = false;
  static constexpr bool kUsesTemperature = false;
  static constexpr bool kPrefillLastRow = false;
  bool noisy() const { return false; }
};

/// Key-norm score (Devoto et al., EMNLP 2024, arXiv 2406.11430, §3; kvpress's KnormPress): a key with a
/// small L2 norm draws much attention, so a token's score is `1 / (1 + ||k||)`, `||k||` the L2 norm of its
/// K row on each KV head (`head_dim` floats, summed in order, then `sqrt`), set once when the token enters
/// the cache and never changed. No logits are read (`nullptr` is accepted; given logits are ignored), so it
/// runs where attention is fused and never forms them. The ranking is kvpress's (`-||k||`, highest kept),
/// up to float rounding of `1 / (1 + ||k||)` (norms within one ulp tie). A key with a NaN element scores
/// NaN: the cache throws `std::invalid_argument` naming the KV head and slot (state unchanged); an
/// infinite one scores 0. O(head_dim) per token and KV head.
struct KeyNormScore {
  static constexpr const char* kName = "KeyNorm";
  static constexpr bool kUsesLogits = false;
  /// Scores persist (set once, never replaced); for a key score this flag only gives a ratio recent window
  /// H2O's floor of 1 token when k >= 2 (detail/budget_rule.hpp), as the tools resolve it.
  static constexpr bool kAccumulates = true;
  static constexpr bool kUsesTemperature = false;
  static constexpr bool kPrefillLastRow = false;
  bool noisy() const { return false; }
  /// `1 / (1 + sqrt(key[0]² + … + key[head_dim − 1]²))`, in (0, 1] for finite keys; the squares summed in
  /// index order, never contracted into FMAs (the same bits on every build: clang++ -march=native contracted them).
  KVEVICT_NO_CONTRACT_FN float key_score(const float* key, std::size_t head_dim) const noexcept {
    KVEVICT_NO_CONTRACT_BODY
    // Four squares per iteration, still added one after another in index order (the same bits): the loop's own
    // counter, compare and branch ran once per element, a third of its instructions at -O2.
    float sq = 0.0f;
    std::size_t i = 0;
    for (; i + 4 <= head_dim; i += 4) {
      sq += key[i] * key[i];
      sq += key[i + 1] * key[i + 1];
      sq += key[i + 2] * key[i + 2];
      sq += key[i + 3] * key[i + 3];
    }
    for (; i < head_dim; ++i) sq += key[i] * key[i];
    return 1.0f / (1.0f + std::sqrt(sq));
  }
};

/// KeyDiff's score (Park et al., 2025, arXiv 2504.15364, §3; kvpress's KeyDiffPress): keys that differ from the
/// others carry what the rest does not, so a token's score on a KV head is how far its key points from the
/// *anchor*, the mean of the unit-normalized keys the head holds: `1 − cos(k, a)`, in [0, 2], higher kept.
/// `a = (1/n) Σ k_i / max(||k_i||, 1e-12)` over the `n` held keys; `cos(k, a) = (k · â) / max(||k||, 1e-8)`, `â = a /
/// max(||a||, 1e-8)` (torch's `F.normalize` and `F.cosine_similarity` epsilons); a value below 0 from
/// rounding is stored as 0. Recomputed for every held token whenever tokens enter (the anchor hooks,
/// concepts.hpp), so it reads no logits (`nullptr` accepted). Norms and dot products are summed in one fixed
/// order of 16 lanes (`detail::dot_fixed_order`), never contracted into FMAs: the same bits on every build, at
/// 3.7× (baseline) to 6.3× (AVX2) fewer instructions than serial sums (bench/docs/instruction-counts.md). The
/// ranking is kvpress's (`−cos`, highest kept) up to float rounding. A key with a NaN or infinite element
/// makes its head's anchor (or its own score) NaN: the cache throws `std::invalid_argument` naming the KV head
/// and the first slot whose score is NaN (state unchanged). O(n · head_dim) per KV head per call.
struct KeyDiffScore {
  static constexpr const char* kName = "KeyDiff";
  static constexpr bool kUsesLogits = false;
  /// For an anchor score this flag only gives a ratio recent window H2O's floor of 1 token when k >= 2
  /// (detail/budget_rule.hpp), as for KeyNormScore.
  static constexpr bool kAccumulates = true;
  static constexpr bool kUsesTemperature = false;
  static constexpr bool kPrefillLastRow = false;
  bool noisy() const { return false; }
  /// `anchor += key / max(||key||, 1e-12)`. O(head_dim).
  KVEVICT_NO_CONTRACT_FN void anchor_add(const float* key, std::size_t head_dim, float* anchor) const noexcept {
    KVEVICT_NO_CONTRACT_BODY
    const float inv = 1.0f / std::max(norm(key, head_dim), 1e-12f);
    detail::add_scaled(key, inv, anchor, head_dim);
  }
  /// The mean `a = anchor / n`, then `a / max(||a||, 1e-8)`, in place. O(head_dim).
  KVEVICT_NO_CONTRACT_FN void anchor_finish(float* anchor, std::size_t head_dim, std::size_t n) const noexcept {
    KVEVICT_NO_CONTRACT_BODY
    const float inv_n = 1.0f / static_cast<float>(n);
    for (std::size_t i = 0; i < head_dim; ++i) anchor[i] *= inv_n;
    const float inv = 1.0f / std::max(norm(anchor, head_dim), 1e-8f);
    for (std::size_t i = 0; i < head_dim; ++i) anchor[i] *= inv;
  }
  /// `max(0, 1 − (key · anchor) / max(||key||, 1e-8))` against the finished anchor. O(head_dim).
  KVEVICT_NO_CONTRACT_FN float anchor_score(const float* key, std::size_t head_dim,
                                            const float* anchor) const noexcept {
    KVEVICT_NO_CONTRACT_BODY
    const float inv = 1.0f / std::max(norm(key, head_dim), 1e-8f);
    const float v = 1.0f - detail::dot_fixed_order(key, anchor, head_dim) * inv;
    return v > 0.0f ? v : (v == v ? 0.0f : v);  // rounding below 0 stored as 0; NaN passed on (the cache throws)
  }

 private:
  static float norm(const float* x, std::size_t d) noexcept { return std::sqrt(detail::dot_fixed_order(x, x, d)); }
};

}  // namespace kvevict
