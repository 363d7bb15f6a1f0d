// score/mean_attention.hpp — an accumulated score ranked as a mean: each token's summed attention divided by the
// number of queries that scored it (`MeanAttention<Base>`; kvpress's ObservedAttentionPress is H2O's at prefill).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kvevict/concepts.hpp"
#include "kvevict/score/score_policies.hpp"

namespace kvevict {

/// `Base`'s accumulated score, ranked as a mean over the queries that scored each token, one composable score
/// policy. `Base` is any score that accumulates softmax rows of the logits over every prompt row
/// (`kUsesLogits`, `kAccumulates`, not `kPrefillLastRow`, no `first_scored_row`, `selection_scores` or `key_score`
/// hook): `AccumulatedAttentionScore` (`H2OMean`) or `GumbelLogitScore` (`KeyformerMean`). Its flags and `noisy()`
/// are `Base`'s (it derives from it), and the scores the cache stores are `Base`'s sums, bit for bit.
///
/// **Why.** A causal prompt row `i` scores only the tokens at or before it, so a sum over rows
/// favours old tokens: the token at position 0 is scored by all `P` prompt rows, the one at `P − 1` by one. H2O's
/// heavy hitters (Zhang et al. 2023, §4) rank the sum; kvpress's ObservedAttentionPress (NVIDIA kvpress 0.5,
/// `observed_attention_press.py`: `attentions.sum(2) / arange(n, 0, -1)`) ranks the mean, "the average attention
/// weight it receives from all query tokens". This policy ranks that mean at every cut and every decode step.
///
/// **What is ranked.** For a live token at position `p`, `c(p) = newest − p + 1` with `newest` the position of the
/// last query scored (at a prefill cut the chunk's last prompt position; at a decode step the new token's): every
/// query at a position in `[p, newest]` scored the token (each prompt row scores every retained token at or
/// before it, each decode step every retained token), so the mean is `score / c(p)` (in float:
/// `s / (float(newest − p) + 1)`, the difference exact in 64 bits over the whole int64 range, one division; a GQA group's query heads count once, as for the sum). This assumes one query per position
/// (consecutive positions, as engines number tokens); positions with gaps count the gaps. Recent tokens are
/// kept by the recent window `w` whatever their mean (kvpress's press has `w = 0`). The selection then ranks the
/// means exactly as it ranks sums (`RecentTopKSelection`: the recent window plus the top `k − w` means, ties to
/// the older token). O(n) divisions per cut or step and KV head, in the cache's scratch; no allocation.
///
/// Works with `Cache` (per-head and shared selection, chunked and bounded prefill, the per-head decode step) and
/// with `PagedCache`'s token unit; `PagedCache`'s page unit ranks pages by summed scores and refuses this score
/// at construction (`std::invalid_argument`).
template <class Base>
struct MeanAttention : Base {
  static_assert(Base::kUsesLogits && Base::kAccumulates && !Base::kPrefillLastRow,
                "kvevict: MeanAttention<Base> needs a Base score that accumulates softmax rows of the logits over "
                "every prompt row (kUsesLogits, kAccumulates, not kPrefillLastRow), e.g. AccumulatedAttentionScore "
                "or GumbelLogitScore");
  static_assert(!detail::declares_first_scored_row<Base> && !detail::declares_selection_scores<Base> &&
                    !detail::declares_key_score<Base>,
                "kvevict: MeanAttention<Base> counts every query at or after a token, so Base must score every "
                "prompt row with the logits (no first_scored_row, selection_scores or key_score hook)");
  /// Detected by the caches (`detail::ranks_mean`): rank `score / (newest − position + 1)`.
  static constexpr bool kRanksMean = true;

  MeanAttention() = default;
  /// The mean of `base`'s score (e.g. `GumbelLogitScore{false}`: Keyformer without noise).
  explicit MeanAttention(Base base) : Base(std::move(base)) {}
};

}  // namespace kvevict
