// detail/attention_prefill.hpp — Cache::prefill_from_attention: H2O's (or Keyformer's) prompt scores taken from the
// column sums of the attention probabilities an engine's attention kernel computed (Keyformer: its noisy tempered
// ones, `PromptSums`), instead of a second pass over the prompt's logits.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kvevict/cache_interface.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/detail/erased_kv.hpp"
#include "kvevict/detail/score_hooks.hpp"
#include "kvevict/score/score_policies.hpp"

namespace kvevict {
namespace detail {

/// The body of `Cache::prefill_from_attention(sums, P)`: `sums` `[q_head][P]` row-major, `sums[h][c]` the attention
/// probability query head h's prompt rows gave slot c, summed over the rows (Keyformer: `softmax((x + s·ζ) / τ₀)`
/// with the cache's ζ, `Cache::prompt_sums`); they become the query heads'
/// accumulators, KV head j's scores their sum over j's group (q_head order, as `prefill` folds them), then
/// `selection.prefill_keep`'s tokens are kept, compacted in position order. O(n_q_heads · P) reads and copies, then
/// the cut (O(n_kv_heads · P · head_dim)); allocates nothing. Every check runs before any state changes; throws
/// `std::invalid_argument` "kvevict::Cache::prefill_from_attention: …" for a score other than H2O's or Keyformer's
/// (`AccumulatedAttentionScore`, `GumbelLogitScore`), a second prefill, a chunked prefill in progress, a view that does not hold exactly
/// `P` prompt tokens (as `prefill`), a budget `resolve_budget` refuses, a null `sums`, or a value that is not finite
/// and >= 0; `std::logic_error` on a moved-from cache or an open per-head step.
template <class C>
void prefill_cache_from_attention(C& cache, const float* sums, std::size_t P) {
  using Score = typename C::score_type;
  const char* who = "kvevict::Cache::prefill_from_attention";
  cache.live("prefill_from_attention");
  cache.no_open_step("prefill_from_attention");
  require(std::is_same<Score, AccumulatedAttentionScore>::value || std::is_same<Score, GumbelLogitScore>::value, who,
          ": needs H2O's score (AccumulatedAttentionScore: the attention each token received) or Keyformer's "
          "(GumbelLogitScore); this cache scores the prompt otherwise: use prefill");
  require(!cache.prefilled_, who, ": already prefilled; call reset() for a new sequence");
  require(!cache.chunking_, who, ": a chunked prefill is in progress; call finish_prefill()");
  check_prompt_view(cache.kv(), P);
  const auto kw = cache.resolve_budget(cache.config_.budget.resolve(P), who);
  const float tau = cache.checked_tau(0, "prefill_from_attention");
  require(sums != nullptr, who, ": sums must be non-null");
  const std::size_t nq = cache.config_.n_q_heads;
  (void)checked_mul(who, "n_q_heads * prompt_len (the sums)", nq, P);
  for (std::size_t h = 0; h < nq; ++h)
    for (std::size_t c = 0; c < P; ++c) {
      const float v = sums[h * P + c];
      require(std::isfinite(v) && v >= 0.0f, who, ": sums[", h, "][", c, "] = ", v, " (must be finite and >= 0: a ",
              "sum of attention probabilities)");
    }
  static_assert((!std::is_same<Score, AccumulatedAttentionScore>::value &&
                 !std::is_same<Score, GumbelLogitScore>::value) ||
                    !has_selection_scores<Score>,
                "prefill_from_attention loads the sums after its checks: a score with "
                "selection_scores would need scorer_.check_selection on them first");
  // ---- nothing below can throw ----
  cache.scorer_.load_sums(sums, P);
  cache.take_chunk(P, tau);
  cache.finish(kw.first, kw.second);
}

/// The body of `Cache::prompt_sums()`: `attention` for H2O (`AccumulatedAttentionScore`); `gumbel` for Keyformer
/// (`GumbelLogitScore`, not its mean-attention variant) with the cache's seed, τ₀ = the temperature at step 0, its
/// noise scale and noise switch; `none` otherwise. Throws `std::invalid_argument` when τ₀ is not finite and
/// >= FLT_MIN (as `prefill` would).
template <class C>
PromptSums prompt_sums_of(const C& cache) {
  using Score = typename C::score_type;
  PromptSums spec;
  if constexpr (std::is_same<Score, AccumulatedAttentionScore>::value) {
    spec.kind = PromptSums::Kind::attention;
  } else if constexpr (std::is_same<Score, GumbelLogitScore>::value) {
    spec.kind = PromptSums::Kind::gumbel;
    spec.seed = cache.config().seed;
    spec.tau = cache.checked_tau(0, "prompt_sums");
    spec.noise_scale = cache.score_policy().noise_scale;
    spec.noise = cache.score_policy().gumbel_noise;
  }
  return spec;
}

}  // namespace detail
}  // namespace kvevict
