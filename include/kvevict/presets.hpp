// presets.hpp — the ready-made policies: type aliases and a runtime factory.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kvevict/cache.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/score/mean_attention.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/score/snapkv_score.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/selection/sink_recent_selection.hpp"
#include "kvevict/selection/topk_then_window_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvevict {

namespace detail {
/// The one Policy → types table: the cache type of each ready-made policy over the cache template `C`
/// (`Cache` or `PagedCache`, both `C<Score, Temperature, Selection>`). The aliases below
/// (`Keyformer`, …, `PagedKeyformer`, …) and both factories (`make_cache`, `make_paged_cache`,
/// through `make_policy`) read it, so a policy is listed once. Compile time only.
template <template <class, class, class> class C>
struct PolicyTypes {
  using keyformer = C<GumbelLogitScore, LinearTemperature, RecentTopKSelection>;
  using h2o = C<AccumulatedAttentionScore, ConstantTemperature, RecentTopKSelection>;
  using streaming_llm = C<NoScore, ConstantTemperature, SinkRecentSelection>;  // also `Policy::window`
  using tova = C<CurrentAttentionScore, ConstantTemperature, RecentTopKSelection>;
  using snapkv = C<SnapKVScore, ConstantTemperature, RecentTopKSelection>;
  using snapkv_window = C<SnapKVScore, ConstantTemperature, TopKThenWindowSelection>;
  using snapkv_keyformer = C<ObservationWindowScore<GumbelLogitScore>, LinearTemperature, RecentTopKSelection>;
  using h2o_mean = C<MeanAttention<AccumulatedAttentionScore>, ConstantTemperature, RecentTopKSelection>;
  using keyformer_mean = C<MeanAttention<GumbelLogitScore>, LinearTemperature, RecentTopKSelection>;
  using knorm = C<KeyNormScore, ConstantTemperature, RecentTopKSelection>;
  using keydiff = C<KeyDiffScore, ConstantTemperature, RecentTopKSelection>;
};
/// A type passed as a value (`make_policy` hands the cache type to its builder this way).
template <class T>
struct TypeTag {
  using type = T;  ///< the type carried
};
}  // namespace detail

/// Keyformer (Adnan et al., MLSys 2024): Gumbel-logit score, τ rising linearly
/// from τ_init to τ_end over T steps, recent window + top-(k − w) key tokens.
/// With `RecentWindow::tokens(0)` every new token is evicted in its own decode
/// step (its one-step score is below every accumulated one); a ratio window
/// resolves to at least 1 token when `k >= 2` (see `RecentWindow`).
using Keyformer = detail::PolicyTypes<Cache>::keyformer;
/// H2O (Zhang et al., NeurIPS 2023): accumulated attention, recent window + heavy hitters.
/// `RecentWindow::tokens(0)` evicts every new token in its own step, as for Keyformer.
using H2O = detail::PolicyTypes<Cache>::h2o;
/// StreamingLLM (Xiao et al., ICLR 2024): `sinks` attention sinks + the most
/// recent `k − sinks` tokens; window attention is `sinks = 0`. Its window is
/// `k − sinks`: the configuration's recent window must be 0 (else
/// `std::invalid_argument`), and `sinks <= k`.
using StreamingLLM = detail::PolicyTypes<Cache>::streaming_llm;
/// TOVA (Oren et al., 2024): keep the top-k of the current step's attention.
using TOVA = detail::PolicyTypes<Cache>::tova;

/// SnapKV (Li et al. 2024, arXiv 2404.14469): prefill keeps the observation window plus the top `k − L`
/// pooled window-attention scores (`SnapKVScore`); decoding continues by H2O accumulation (recent window
/// `w` + heavy hitters). Prefill must be one-shot (`prefill`, not `prefill_chunk`); `L <= k`.
using SnapKV = detail::PolicyTypes<Cache>::snapkv;
/// SnapKV's prefill selection followed by a sliding window while decoding (the oldest token goes).
using SnapKVWindow = detail::PolicyTypes<Cache>::snapkv_window;
/// SnapKV's observation-window prefill, then Keyformer's decode: every step adds `softmax((x + ζ) / τ_t)`
/// (Gumbel noise unless `GumbelLogitScore{false}`), τ rising linearly from τ_init to τ_end over T steps, recent
/// window `w` + key tokens (`ObservationWindowScore<GumbelLogitScore>`, snapkv_score.hpp). The observation
/// window's prompt rows are scored as Keyformer scores them (noise, τ_0). One-shot prefill; `L <= k`.
using SnapKVKeyformer = detail::PolicyTypes<Cache>::snapkv_keyformer;

/// H2O's accumulated attention ranked as a mean over the queries that scored each token (score/mean_attention.hpp):
/// recent window `w` + the top `k − w` means `s / (newest − position + 1)`. With `w = 0` its prefill cut is
/// kvpress's ObservedAttentionPress. `PolicyParams::mean_attention` with h2o.
using H2OMean = detail::PolicyTypes<Cache>::h2o_mean;
/// Keyformer's Gumbel-logit accumulation (noise, τ schedule) ranked as a mean over the queries that scored each
/// token: recent window `w` + the top `k − w` means. `PolicyParams::mean_attention` with keyformer.
using KeyformerMean = detail::PolicyTypes<Cache>::keyformer_mean;
/// Key norm (Devoto et al. 2024, kvpress's Knorm): recent window `w` + the top `k − w` of `1 / (1 + ||k||)`, each
/// token's score from its key alone when it enters (`KeyNormScore`). Reads no logits: it runs with fused attention.
/// `w = 0` is kvpress's KnormPress (the smallest key norms kept).
using KeyNorm = detail::PolicyTypes<Cache>::knorm;
/// KeyDiff (Park et al. 2025, kvpress's KeyDiffPress): recent window `w` + the top `k − w` of `1 − cos(k, anchor)`,
/// the anchor the mean unit key each KV head holds, every held token rescored whenever tokens enter
/// (`KeyDiffScore`; O(n · head_dim) per KV head and step). Reads no logits. `w = 0` is kvpress's KeyDiffPress.
using KeyDiff = detail::PolicyTypes<Cache>::keydiff;

/// The policies `make_cache` builds.
enum class Policy { keyformer, h2o, streaming_llm, window, tova, snapkv, knorm, keydiff };

/// SnapKV's decode rule (`PolicyParams::snap_decode`).
enum class SnapDecode {
  h2o,       ///< keep accumulating plain attention; recent window w + heavy hitters (`SnapKV`)
  window,    ///< evict the oldest retained token (`SnapKVWindow`)
  keyformer  ///< Keyformer's Gumbel-logit accumulation, τ schedule and noise (`SnapKVKeyformer`)
};
/// Parses "h2o", "window" or "keyformer"; throws `std::invalid_argument` naming the value otherwise.
inline SnapDecode parse_snap_decode(const std::string& name) {
  if (name == "h2o") return SnapDecode::h2o;
  if (name == "window") return SnapDecode::window;
  if (name == "keyformer") return SnapDecode::keyformer;
  throw std::invalid_argument(detail::concat("kvevict::parse_snap_decode: unknown decode rule '", name,
                                             "' (expected h2o, window or keyformer)"));
}
/// "h2o", "window" or "keyformer".
inline const char* snap_decode_name(SnapDecode d) {
  return d == SnapDecode::window ? "window" : d == SnapDecode::keyformer ? "keyformer" : "h2o";
}

/// Parses "keyformer", "h2o", "streaming" (or "streamingllm"), "window",
/// "tova", "snapkv", "knorm", "keydiff". Throws `std::invalid_argument` naming the bad value otherwise.
inline Policy parse_policy(const std::string& name) {
  if (name == "keyformer") return Policy::keyformer;
  if (name == "h2o") return Policy::h2o;
  if (name == "streaming" || name == "streamingllm") return Policy::streaming_llm;
  if (name == "window") return Policy::window;
  if (name == "tova") return Policy::tova;
  if (name == "snapkv") return Policy::snapkv;
  if (name == "knorm") return Policy::knorm;
  if (name == "keydiff") return Policy::keydiff;
  throw std::invalid_argument(detail::concat("kvevict::parse_policy: unknown policy '", name,
                                             "' (expected keyformer, h2o, streaming, window, tova, snapkv, knorm or "
                                             "keydiff)"));
}

/// Whether policy `p` takes a configured recent window `w` (`CacheConfig::recent`): Keyformer,
/// H2O, key norm, KeyDiff and SnapKV (its decode window; the observation window `L` is `PolicyParams::snap_window`) do. TOVA has none by
/// default (the paper's rule; it accepts one given explicitly: `accepts_recent_window`), and
/// StreamingLLM / window derive theirs from the budget (`k − sinks`), so for them the configured window must be 0 (else
/// the cache throws `std::invalid_argument`). O(1).
constexpr bool takes_recent_window(Policy p) {
  return p == Policy::keyformer || p == Policy::h2o || p == Policy::snapkv || p == Policy::knorm ||
         p == Policy::keydiff;
}

/// Whether policy `p` accepts a configured recent window `w > 0`: the policies of `takes_recent_window`, and TOVA,
/// whose default is none (w = 1 is kvpress's TOVAPress rule: the token just added is never evicted). StreamingLLM
/// and window derive theirs from the budget. O(1).
constexpr bool accepts_recent_window(Policy p) { return takes_recent_window(p) || p == Policy::tova; }

/// Canonical name of a policy ("keyformer", "h2o", "streaming", "window", "tova", "snapkv", "knorm", "keydiff").
inline const char* policy_name(Policy p) {
  switch (p) {
    case Policy::keyformer: return "keyformer";
    case Policy::h2o: return "h2o";
    case Policy::streaming_llm: return "streaming";
    case Policy::window: return "window";
    case Policy::tova: return "tova";
    case Policy::snapkv: return "snapkv";
    case Policy::knorm: return "knorm";
    case Policy::keydiff: return "keydiff";
  }
  return "?";
}

/// Policy parameters that are not part of `CacheConfig`.
struct PolicyParams {
  float tau_init = 1.0f;     ///< Keyformer τ at prefill (paper: 1); also SnapKV with `snap_decode` keyformer
  float tau_end = 2.0f;      ///< Keyformer τ after T decode steps (paper: 2); also SnapKV's keyformer decode
  std::size_t horizon = 0;   ///< Keyformer T, the number of tokens to generate; must be >= 1 (and for snapkv + keyformer decode)
  bool gumbel_noise = true;  ///< Keyformer (and SnapKV's keyformer decode): add Gumbel noise (false = deterministic)
  float noise_scale = 1.0f;  ///< Keyformer (and SnapKV's keyformer decode): the noise is s · ζ, s in (0, 1] (ablation)
  std::size_t sinks = 4;     ///< StreamingLLM attention sinks (window ignores it: 0)
  std::size_t snap_window = 32;          ///< SnapKV observation window L (prompt rows; 1 <= L <= k)
  std::size_t snap_kernel = 7;           ///< SnapKV pooling kernel K (odd, >= 1)
  Pooling snap_pooling = Pooling::max;   ///< SnapKV pooling (max or avg)
  SnapDecode snap_decode = SnapDecode::h2o;  ///< SnapKV decode rule
  /// h2o, keyformer: rank each token's accumulated score divided by the number of queries that scored it
  /// (`H2OMean`, `KeyformerMean`; kvpress's ObservedAttention); false: rank the sum (H2O, Keyformer)
  bool mean_attention = false;
};

/// The SnapKV score of `params` over the decode score `decode` (`ObservationWindowScore<Decode>(snap_window,
/// snap_kernel, snap_pooling, decode)`; `SnapKVScore` by default); throws as its constructor does, with the
/// parameter's name ("snap_window", …) in the message.
template <class Decode = AccumulatedAttentionScore>
ObservationWindowScore<Decode> make_snapkv_score(const PolicyParams& params, Decode decode = Decode()) {
  detail::require(params.snap_window >= 1, "kvevict::make_cache: snap_window (SnapKV observation window L) must "
                  "be >= 1 (got 0)");
  detail::require(params.snap_kernel >= 1 && params.snap_kernel % 2 == 1, "kvevict::make_cache: snap_kernel "
                  "(SnapKV pooling kernel K) must be odd and >= 1 (got ", params.snap_kernel, ")");
  detail::require(params.snap_decode == SnapDecode::h2o || params.snap_decode == SnapDecode::window ||
                      params.snap_decode == SnapDecode::keyformer,
                  "kvevict::make_cache: unknown snap_decode ", static_cast<int>(params.snap_decode));
  return ObservationWindowScore<Decode>(params.snap_window, params.snap_kernel, params.snap_pooling, decode);
}

namespace detail {
/// The factory both `make_cache` and `make_paged_cache` are: checks the policy-level parameters
/// (`who` names the factory in the messages), builds the policies of `p` from `params` and returns
/// `build(TypeTag<X>{}, policies...)` with `X` = `PolicyTypes<C>`'s cache type for `p` (see
/// `make_cache` for the mapping); `build` constructs an `X` from the view, the pool and
/// `policies...` (the policies it is not given are default-constructed) and returns it as a
/// `std::unique_ptr<Interface>`. Throws `std::invalid_argument` for `horizon == 0` with keyformer
/// (`LinearTemperature`), bad SnapKV parameters
/// (`make_snapkv_score`), an unknown `p`, and whatever `build` throws.
template <template <class, class, class> class C, class Interface, class Build>
std::unique_ptr<Interface> make_policy(Policy p, const PolicyParams& params, const char* who, Build&& build) {
  using Types = PolicyTypes<C>;
  const bool keyformer_score =
      p == Policy::keyformer || (p == Policy::snapkv && params.snap_decode == SnapDecode::keyformer);
  require(keyformer_score || params.noise_scale == 1.0f, who, ": noise_scale = ", params.noise_scale,
          " is Keyformer's (policy keyformer, or snapkv with snap_decode keyformer); leave it 1 for ", policy_name(p));
  require(!params.mean_attention || p == Policy::keyformer || p == Policy::h2o, who,
          ": mean_attention ranks an accumulated score over every prompt row (policy h2o or keyformer); it does not "
          "apply to ", policy_name(p));
  if (params.mean_attention) {
    if (p == Policy::h2o) return build(TypeTag<typename Types::h2o_mean>{});
    return build(TypeTag<typename Types::keyformer_mean>{},
                 MeanAttention<GumbelLogitScore>(GumbelLogitScore{params.gumbel_noise, params.noise_scale}),
                 LinearTemperature(params.tau_init, params.tau_end, params.horizon));
  }
  switch (p) {
    case Policy::keyformer:
      return build(TypeTag<typename Types::keyformer>{}, GumbelLogitScore{params.gumbel_noise, params.noise_scale},
                   LinearTemperature(params.tau_init, params.tau_end, params.horizon));
    case Policy::h2o:
      return build(TypeTag<typename Types::h2o>{});
    case Policy::streaming_llm:
      return build(TypeTag<typename Types::streaming_llm>{}, NoScore{}, ConstantTemperature(),
                   SinkRecentSelection{params.sinks});
    case Policy::window:
      return build(TypeTag<typename Types::streaming_llm>{}, NoScore{}, ConstantTemperature(),
                   SinkRecentSelection{0});
    case Policy::tova:
      return build(TypeTag<typename Types::tova>{});
    case Policy::snapkv:
      if (params.snap_decode == SnapDecode::window)
        return build(TypeTag<typename Types::snapkv_window>{}, make_snapkv_score(params));
      if (params.snap_decode == SnapDecode::keyformer)
        return build(TypeTag<typename Types::snapkv_keyformer>{},
                     make_snapkv_score(params, GumbelLogitScore{params.gumbel_noise, params.noise_scale}),
                     LinearTemperature(params.tau_init, params.tau_end, params.horizon));
      return build(TypeTag<typename Types::snapkv>{}, make_snapkv_score(params));
    case Policy::knorm:
      return build(TypeTag<typename Types::knorm>{});
    case Policy::keydiff:
      return build(TypeTag<typename Types::keydiff>{});
  }
  throw std::invalid_argument(concat(who, ": unknown policy"));
}
}  // namespace detail

/// Builds the policy `p` over the view, for engines choosing it at run time.
///  - keyformer: `Keyformer` with `LinearTemperature(tau_init, tau_end, horizon)` (`KeyformerMean` with
///    `mean_attention`);
///  - h2o: `H2O` (`H2OMean` with `mean_attention`); tova: `TOVA` (the paper's rule keeps no recent window,
///    `config.recent` none; a window w >= 1 keeps the w newest tokens whatever their attention, and w = 1 is
///    kvpress's TOVAPress, which never evicts the token just added);
///  - streaming: `StreamingLLM` with `params.sinks`; window: `StreamingLLM` with 0 sinks;
///  - snapkv: `SnapKV` (decode h2o), `SnapKVWindow` (decode window) or `SnapKVKeyformer` (decode keyformer:
///    `LinearTemperature(tau_init, tau_end, horizon)`, noise as `gumbel_noise`) with `make_snapkv_score(params)`;
///  - knorm: `KeyNorm` (scores from the keys alone: the logits may be `nullptr`);
///  - keydiff: `KeyDiff` (every held key against their mean: the logits may be `nullptr`).
/// Throws `std::invalid_argument` as the constructors do (`noise_scale` outside (0, 1]), for `noise_scale`
/// other than 1 with a policy without Keyformer's score, for `mean_attention` with a policy other than h2o and
/// keyformer, for `horizon == 0`
/// with keyformer (or snapkv with keyformer decode), and for bad SnapKV
/// parameters (`snap_window` 0 or above a token budget, `snap_kernel` even or 0).
template <class T>
std::unique_ptr<CacheInterface> make_cache(Policy p, const CacheConfig& config, KVView<T> kv,
                                           const PolicyParams& params = PolicyParams()) {
  return detail::make_policy<Cache, CacheInterface>(
      p, params, "kvevict::make_cache", [&](auto type, auto&&... policies) -> std::unique_ptr<CacheInterface> {
        using X = typename decltype(type)::type;
        return std::make_unique<X>(config, kv, std::forward<decltype(policies)>(policies)...);
      });
}

}  // namespace kvevict
