// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// presets.hpp — the ready-made policies: type aliases and a runtime factory.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "kvevict/cache.hpp"
#include "kvevict/core/check.hpp"
#include "kvevict/score/score_policies.hpp"
#include "kvevict/selection/recent_topk_selection.hpp"
#include "kvevict/selection/sink_recent_selection.hpp"
#include "kvevict/temperature/temperature_schedules.hpp"

namespace kvevict {

/// Keyformer (Adnan et al., MLSys 2024): Gumbel-logit score, τ rising linearly
/// from τ_init to τ_end over T steps, recent window + top-(k − w) key tokens.
/// With `RecentWindow::tokens(0)` every new token is evicted in its own decode
/// step (its one-step score is below every accumulated one); a ratio window
/// resolves to at least 1 token when `k >= 2` (see `RecentWindow`).
using Keyformer = Cache<GumbelLogitScore, LinearTemperature, RecentTopKSelection>;
/// H2O (Zhang et al., NeurIPS 2023): accumulated attention, recent window + heavy hitters.
/// `RecentWindow::tokens(0)` evicts every new token in its own step, as for Keyformer.
using H2O = Cache<AccumulatedAttentionScore, ConstantTemperature, RecentTopKSelection>;
/// StreamingLLM (Xiao et al., ICLR 2024): `sinks` attention sinks + the most
/// recent `k − sinks` tokens; window attention is `sinks = 0`. Its window is
/// `k − sinks`: the configuration's recent window must be 0 (else
/// `std::invalid_argument`), and `sinks <= k`.
using StreamingLLM = Cache<NoScore, ConstantTemperature, SinkRecentSelection>;
/// TOVA (Oren et al., 2024): keep the top-k of the current step's attention.
using TOVA = Cache<CurrentAttentionScore, ConstantTemperature, RecentTopKSelection>;

/// The policies `make_cache` builds.
enum class Policy { keyformer, h2o, streaming_llm, window, tova };

/// Parses "keyformer", "h2o", "streaming" (or "streamingllm"), "window",
/// "tova". Throws `std::invalid_argument` naming the bad value otherwise.
inline Policy parse_policy(const std::string& name) {
  if (name == "keyformer") return Policy::keyformer;
  if (name == "h2o") return Policy::h2o;
  if (name == "streaming" || name == "streamingllm") return Policy::streaming_llm;
  if (name == "window") return Policy::window;
  if (name == "tova") return Policy::tova;
  throw std::invalid_argument(detail::concat("kvevict::parse_policy: unknown policy '", name,
                                             "' (expected keyformer, h2o, streaming, window or tova)"));
}

/// Whether policy `p` takes a configured recent window `w` (`CacheConfig::recent`): Keyformer and
/// H2O do. TOVA has none, and StreamingLLM / window derive theirs from the budget (`k − sinks`), so
/// for them the configured window must be 0 (else the cache throws `std::invalid_argument`). O(1).
constexpr bool takes_recent_window(Policy p) { return p == Policy::keyformer || p == Policy::h2o; }

/// Canonical name of a policy ("keyformer", "h2o", "streaming", "window", "tova").
inline const char* policy_name(Policy p) {
  switch (p) {
    case Policy::keyformer: return "keyformer";
    case Policy::h2o: return "h2o";
    case Policy::streaming_llm: return "streaming";
    case Policy::window: return "window";
    case Policy::tova: return "tova";
  }
  return "?";
}

/// Policy parameters that are not part of `CacheConfig`.
struct PolicyParams {
  float tau_init = 1.0f;     ///< Keyformer τ at prefill (paper: 1)
  float tau_end = 2.0f;      ///< Keyformer τ after T decode steps (paper: 2)
  std::size_t horizon = 0;   ///< Keyformer T, the number of tokens to generate; must be >= 1
  bool gumbel_noise = true;  ///< Keyformer: add Gumbel noise (false = deterministic variant)
  std::size_t sinks = 4;     ///< StreamingLLM attention sinks (window ignores it: 0)
};

/// Builds the policy `p` over the view, for engines choosing it at run time.
///  - keyformer: `Keyformer` with `LinearTemperature(tau_init, tau_end, horizon)`;
///  - h2o: `H2O`; tova: `TOVA` (requires `config.recent.is_none()`: `none()`, 0
///    tokens or ratio 0; TOVA has no recent window);
///  - streaming: `StreamingLLM` with `params.sinks`; window: `StreamingLLM` with 0 sinks.
/// Throws `std::invalid_argument` as the constructors do, for `horizon == 0`
/// with keyformer, and for a non-zero recent window with tova.
template <class T>
std::unique_ptr<CacheInterface> make_cache(Policy p, const CacheConfig& config, KVView<T> kv,
                                           const PolicyParams& params = PolicyParams()) {
  switch (p) {
    case Policy::keyformer:
      return std::make_unique<Keyformer>(config, kv, GumbelLogitScore{params.gumbel_noise},
                                         LinearTemperature(params.tau_init, params.tau_end, params.horizon));
    case Policy::h2o:
      return std::make_unique<H2O>(config, kv);
    case Policy::streaming_llm:
      return std::make_unique<StreamingLLM>(config, kv, NoScore{}, ConstantTemperature(),
                                            SinkRecentSelection{params.sinks});
    case Policy::window:
      return std::make_unique<StreamingLLM>(config, kv, NoScore{}, ConstantTemperature(), SinkRecentSelection{0});
    case Policy::tova:
      detail::require(config.recent.is_none(),
                      "kvevict::make_cache: TOVA has no recent window; set config.recent to 0");
      return std::make_unique<TOVA>(config, kv);
  }
  throw std::invalid_argument("kvevict::make_cache: unknown policy");
}

}  // namespace kvevict
