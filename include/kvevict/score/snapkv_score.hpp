// score/snapkv_score.hpp — SnapKV's prefill score (Li et al. 2024, arXiv 2404.14469, §4.1–4.2):
// the attention of the last `L` prompt queries (the observation window), pooled over positions,
// composed with any accumulating decode score (`ObservationWindowScore<Decode>`; SnapKV = H2O's decode).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cfloat>
#include <cstddef>
#include <string>

#include "kvevict/detail/check.hpp"
#include "kvevict/score/score_policies.hpp"

namespace kvevict {

/// SnapKV's 1-D pooling of the observation-window scores over positions (§4.2, "clustering via pooling").
enum class Pooling {
  max,  ///< maximum over the kernel (the authors' LongBench setting)
  avg   ///< sum over the kernel / kernel size (zero padding: PyTorch `avg_pool1d`, `count_include_pad`)
};

/// Parses "max" / "maxpool" or "avg" / "avgpool"; throws `std::invalid_argument` naming the value otherwise.
inline Pooling parse_pooling(const std::string& name) {
  if (name == "max" || name == "maxpool") return Pooling::max;
  if (name == "avg" || name == "avgpool") return Pooling::avg;
  throw std::invalid_argument(
      detail::concat("kvevict::parse_pooling: unknown pooling '", name, "' (expected max or avg)"));
}
/// "max" or "avg".
inline const char* pooling_name(Pooling p) { return p == Pooling::avg ? "avg" : "max"; }

/// SnapKV's observation-window prefill (Li et al. 2024, §4, Algorithm / Listing 1) over the decode score
/// `Decode`, one composable score policy: the prefill is SnapKV's, every decode step is `Decode`'s. `Decode`
/// is any score that accumulates softmax rows of the logits (`kUsesLogits`, `kAccumulates`, not
/// `kPrefillLastRow`, no key score): `AccumulatedAttentionScore` (H2O's rule: `SnapKVScore`, the paper's
/// SnapKV) or `GumbelLogitScore` (Keyformer's: the observation window's rows and every decode step add
/// `softmax((x + ζ) / τ)`, τ from the cache's schedule, noise as `Decode::noisy()` says). Its flags and
/// `noisy()` are `Decode`'s (it derives from it). Composed with a selection in presets.hpp: `SnapKV`
/// (H2O decode, `RecentTopKSelection`), `SnapKVKeyformer` (Keyformer decode, `LinearTemperature`,
/// `RecentTopKSelection`), `SnapKVWindow` (decode by sliding window, `TopKThenWindowSelection`).
///
/// **Prefill.** Only the last `L' = min(L, P)` prompt rows are scored (the observation window): each such
/// row `r` of query head `h` adds `softmax(x[h][r][0..r])` — softmax over the row's full causal extent —
/// into h's accumulator; a KV head's score is the sum over its GQA group's query heads (as for H2O). These
/// raw sums are the cache's scores. For the *selection* only, the scores of the candidates `[0, P − L')`
/// (the tokens before the window) are smoothed by `pool` (kernel `K`, odd, centred; the window is clipped
/// at both ends of `[0, P − L')`: max pooling takes the maximum of the in-range values, average pooling
/// divides their sum by `K`, i.e. pads with zeros, as PyTorch's `max_pool1d` / `avg_pool1d` with
/// `padding = K / 2` in the authors' code), and the window's own tokens get the score `FLT_MAX`, so that
/// `select_keep` keeps the window plus the top `k − L'` of the pooled others (ties to the older token).
/// With a decode recent window `w > L` the last `w` prompt tokens are kept as well (select_keep's rule).
///
/// **Decode.** `Decode`'s rule: every decode step adds its softmax row to the raw scores (`SnapKVScore`:
/// plain `softmax(x)`, τ = 1, H2O's rule; the `SnapKVWindow` selection ignores the scores and evicts the
/// oldest token). With `GumbelLogitScore` the observation window's prompt rows are scored as Keyformer
/// scores the prompt (ζ drawn per row with the same keys, τ_0): with `L = P <= k` (nothing cut, every
/// prompt row scored) `SnapKVKeyformer` holds Keyformer's scores bit for bit after prefill and after
/// every decode step (test `ObservationWindow.KeyformerDecodeWithTheWholePromptIsKeyformer`).
///
/// **Defaults** `L = 32`, `K = 7`, max pooling: the authors' LongBench configuration (observation window
/// 32, kernel 7, max pooling); their reference code's constructor defaults differ (64 / 5 / avg).
///
/// **Chunked prefill** is not supported: which rows are the last `L` is unknown until the prompt ends, and
/// keeping every row's softmax until then would need `L · n` floats per query head; `Cache::prefill_chunk`
/// throws `std::invalid_argument` for this score. `L > k` is rejected when the budget is resolved.
///
/// Built on the optional Score hooks of concepts.hpp, which the caches call for any score:
/// `first_scored_row` (the observation window), `kWholePrompt` (no chunks), `selection_scores`
/// (the pooling) and `validate_budget` (`L <= k`).
template <class Decode>
struct ObservationWindowScore : Decode {
  static_assert(Decode::kUsesLogits && Decode::kAccumulates && !Decode::kPrefillLastRow,
                "kvevict: ObservationWindowScore<Decode> needs a Decode score that accumulates softmax rows of the "
                "logits (kUsesLogits, kAccumulates, not kPrefillLastRow), e.g. AccumulatedAttentionScore or "
                "GumbelLogitScore");
  static constexpr const char* kName = "SnapKV";                                ///< in error messages
  static constexpr const char* kWholePrompt = "scores the last L prompt rows";  ///< so no chunked prefill

  /// The paper's defaults: `L = 32`, `K = 7`, max pooling; `Decode()`.
  ObservationWindowScore() = default;
  /// Observation window `window = L >= 1` prompt rows, pooling kernel `kernel = K` (odd, >= 1; 1 = no
  /// pooling), pooling kind, the decode score `decode` (e.g. `GumbelLogitScore{false}`: no noise). Throws
  /// `std::invalid_argument` naming the parameter and value for `L == 0`, `K == 0`, an even `K` or a
  /// pooling value outside the enum (the messages say "kvevict::SnapKVScore" whatever `Decode`).
  explicit ObservationWindowScore(std::size_t window, std::size_t kernel = 7, Pooling pooling = Pooling::max,
                                  Decode decode = Decode())
      : Decode(decode), window_(window), kernel_(kernel), pooling_(pooling) {
    detail::require(window >= 1, "kvevict::SnapKVScore: observation window L must be >= 1 (got 0)");
    detail::require(kernel >= 1 && kernel % 2 == 1, "kvevict::SnapKVScore: pooling kernel K must be odd and >= 1 (got ",
                    kernel, ")");
    detail::require(pooling == Pooling::max || pooling == Pooling::avg, "kvevict::SnapKVScore: unknown pooling ",
                    static_cast<int>(pooling));
  }

  /// The observation window `L` (prompt rows scored at prefill).
  std::size_t observation_window() const { return window_; }
  /// The first prompt row scored at prefill, `P − min(L, P)`: the observation window is the last `L'`
  /// rows. O(1).
  std::size_t first_scored_row(std::size_t prompt_len) const { return prompt_len - std::min(window_, prompt_len); }
  /// Rejects a budget below the observation window: throws `std::invalid_argument` "SnapKV observation
  /// window L = … exceeds budget k = …" (the cache prefixes its name) if `L > k`. O(1).
  void validate_budget(std::size_t k, std::size_t /*w*/) const {
    detail::require(window_ <= k, "SnapKV observation window L = ", window_, " exceeds budget k = ", k);
  }
  /// The pooling kernel `K`.
  std::size_t kernel() const { return kernel_; }
  /// The pooling kind.
  Pooling pooling() const { return pooling_; }

  /// `out[i]` = pooled `in` at `i` for `i` in `[0, n)`: over `j` in `[i − K/2, i + K/2] ∩ [0, n)`, the
  /// maximum (max) or the sum divided by `K` (avg). `in` and `out` must not overlap. O(n · K); no
  /// allocation, no throw. Example (K = 3): in `[1, 0, 0, 4]` → max `[1, 1, 4, 4]`, avg `[1/3, 1/3, 4/3, 4/3]`.
  void pool(const float* in, std::size_t n, float* out) const noexcept {
    const std::size_t half = kernel_ / 2;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t lo = i >= half ? i - half : 0, hi = std::min(n - 1, i + half);
      float acc = pooling_ == Pooling::max ? in[lo] : 0.0f;
      for (std::size_t j = lo; j <= hi; ++j) acc = pooling_ == Pooling::max ? std::max(acc, in[j]) : acc + in[j];
      out[i] = pooling_ == Pooling::max ? acc : acc / static_cast<float>(kernel_);
    }
  }

  /// The selection scores of `n` candidates (see above): `pool` over `[0, n − L')`, `FLT_MAX` over the
  /// window `[n − L', n)`, `L' = min(L, n)`, into `out[0, n)`. O(n · K); no allocation, no throw.
  void selection_scores(const float* scores, std::size_t n, float* out) const noexcept {
    const std::size_t before = n - std::min(window_, n);
    pool(scores, before, out);
    std::fill(out + before, out + n, FLT_MAX);
  }

 private:
  std::size_t window_ = 32;
  std::size_t kernel_ = 7;
  Pooling pooling_ = Pooling::max;
};

/// SnapKV as published (Li et al. 2024): the observation-window prefill, then H2O's accumulation of plain
/// attention while decoding.
using SnapKVScore = ObservationWindowScore<AccumulatedAttentionScore>;

}  // namespace kvevict
