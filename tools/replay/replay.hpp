// kvevict tools — replay/replay.hpp: run a kvevict policy over a logit trace.
// SPDX-License-Identifier: Apache-2.0
//
// The replay drives the library itself (`kvevict::make_cache` over a `KVBuffer<float>` with
// head_dim 1: K/V contents do not influence selection), so its output is the library's semantics
// stated as data:
//
//   prefill   P tokens appended at positions 0..P-1; logits rows 0..P-1 as [q_head][P][P];
//             the cache scores them at τ_init and cuts every KV head to k.
//   decode    for t = P..N-1: position t is appended; query head h's row t is restricted to the
//             positions its KV head h / g retains (in the cache's slot order) plus t; the cache
//             scores the step at τ_s, s = t - P + 1, and cuts back to k (with head-adaptive budgets,
//             --head-budgets adaptive, each KV head back to its own share: the rows are laid out with
//             the stride n = the longest head's length, head j's read on its own length).
//
// After prefill and after every decode position one JSON line is written:
//   {"t": t, "tau": τ, "kept": [[positions of KV head 0, ascending], ...], "scores": [[...], ...]}
// with t = P - 1 for the prefill line and τ the temperature the cache used (1 for policies
// without a temperature).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <kvevict/presets.hpp>
#include <optional>
#include <string>

#include "trace.hpp"

namespace replay {

/// Where Keyformer's Gumbel noise ζ comes from.
enum class Noise {
  automatic,  ///< the trace's `gumbel` if it has one, else the library's generator
  none,       ///< no noise (Keyformer's deterministic variant, GumbelLogitScore{false})
  gumbel,     ///< the library's seeded generator (--seed)
  trace,      ///< the trace's `gumbel` array (an error if it has none)
};

/// Parses "auto", "none", "gumbel", "trace". Throws `InputError` ("--noise") otherwise.
Noise parse_noise(const std::string& name);

/// The command-line options of kvevict-replay, unresolved (checked by `replay`).
struct Options {
  std::string policy = "keyformer";      ///< keyformer, h2o, streaming, window, tova, snapkv
  std::optional<std::size_t> budget;     ///< --budget K
  std::optional<double> budget_ratio;    ///< --budget-ratio r (k = floor(r * P)); default 0.5
  std::optional<std::size_t> recent;     ///< --recent W
  std::optional<double> recent_ratio;    ///< --recent-ratio q (w = floor(q * k)); default w = 0
  std::size_t sinks = 4;                 ///< --sinks S (streaming)
  float tau_init = 1.0f;                 ///< --tau-init
  float tau_end = 2.0f;                  ///< --tau-end
  std::optional<std::size_t> gen_steps;  ///< --gen-steps T; default N - P (at least 1)
  Noise noise = Noise::automatic;        ///< --noise
  std::uint64_t seed = 0;                ///< --seed (the cache's Gumbel generator)
  bool shared_heads = false;             ///< --shared-heads
  kvevict::HeadBudgets head_budgets;     ///< --head-budgets (AdaKV: the heads hold different lengths)
  std::optional<std::size_t> snap_window;  ///< --snap-window L (snapkv); default min(32, k)
  std::size_t snap_kernel = 7;           ///< --snap-kernel K (snapkv, odd)
  kvevict::Pooling snap_pooling = kvevict::Pooling::max;       ///< --snap-pooling
  kvevict::SnapDecode snap_decode = kvevict::SnapDecode::h2o;  ///< --snap-decode
  bool mean_attention = false;           ///< --mean-attention (h2o, keyformer: H2OMean, KeyformerMean)
};

/// Validates `trace` and `options` (throwing `InputError` naming the field), then replays the
/// policy over the trace and writes the JSON Lines to `out`.
void replay(const Trace& trace, const Options& options, std::ostream& out);

}  // namespace replay
