// kvevict — bench/quality/rows.hpp: the rows of the quality report, as typed in --policies.
// SPDX-License-Identifier: Apache-2.0
//
// A row spec is `BASE[+MOD]...[@KEY=VALUE]...` (no spaces; default rows keyformer,keyformer-nonoise,h2o,
// streaming,window,tova,snapkv), e.g. `keyformer`, `keyformer@recent=0.5`,
// `keyformer+shared`, `h2o+reindexed`, `keyformer+bounded32@seeds=3`, `oracle`:
//   BASE  keyformer, keyformer-nonoise, h2o, streaming, window, tova, snapkv (SnapKV prefill, H2O decode,
//         L = min(32, k) as kvevict-generate, K = 7, max pooling), oracle
//         (oracle: the reference bound of bench/quality/oracle.hpp, not a runnable policy),
//         expected-attention (Expected Attention, arXiv 2510.00636, kvpress's defaults: a TOVA cache ranking by
//         the attention expected from the pre-RoPE query statistics, Engine::set_expected_attention; with
//         +adakv kvpress's AdaKV(ExpectedAttention))
//   +shared       one selection per layer for all KV heads (CacheConfig::shared_heads)
//   +pyramid      PyramidKV per-layer budgets (kvevict::LayerBudgets::make_pyramid(): β = 20; same total;
//                 snapkv keeps its observation window in every layer), the recent window a ratio of each
//                 layer's k
//   +reindexed    positions re-indexed after every eviction (reindex.hpp)
//   +adakv        AdaKV head-adaptive budgets (kvevict::HeadBudgets::adaptive): a layer's k · n_kv_heads
//                 tokens shared among its KV heads by score, each keeping its window and at least α (k − w)
//                 key tokens (@alpha=A, default 0.2); keyformer, h2o, snapkv, tova
//   +mean         h2o, keyformer: rank each token's accumulated score divided by the number of queries that
//                 scored it (kvevict::H2OMean / KeyformerMean; kvpress's ObservedAttention is h2o+mean@recent=0)
//   +boundedC     the prompt prefilled in chunks of C tokens, cut to k after each (bounded prefill)
//   @recent=Q     recent window w = floor(Q · k) (Q in [0, 1]) instead of --recent (keyformer, h2o, snapkv,
//                 knorm, keydiff, oracle; tova, whose window is otherwise none: --recent does not reach it)
//   @seeds=N      Keyformer with noise (also snapkv@decode=keyformer): seeds 1..N instead of --seeds
//   @noise=S      Keyformer's noise scaled by S in (0, 1] (kvevict::GumbelLogitScore::noise_scale; keyformer,
//                 snapkv@decode=keyformer)
//   @kernel=K     snapkv: pooling kernel K (odd) instead of --snap-kernel
//   @decode=D     snapkv: decode rule h2o, window or keyformer (kvevict::SnapKVKeyformer: Keyformer's noise,
//                 tau schedule --tau-init/--tau-end) instead of --snap-decode
// Every row of one invocation is compared with the same full-cache reference.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kvquality {

/// One row of the report, parsed from its spec (see the top of this file).
struct RowSpec {
  std::string label;                  ///< the spec as typed (the row's name in every output)
  std::string policy;                 ///< kvevict policy name, or "oracle"
  bool noise = true;                  ///< Keyformer's Gumbel noise (false for keyformer-nonoise)
  bool shared = false;                ///< +shared
  bool reindexed = false;             ///< +reindexed
  bool pyramid = false;               ///< +pyramid
  bool adakv = false;                 ///< +adakv (kvevict::HeadBudgets::adaptive)
  bool expected = false;              ///< expected-attention (policy "tova" with Engine::set_expected_attention)
  std::optional<float> adakv_alpha;   ///< @alpha=A (+adakv's floor), in [0, 1]; default 0.2
  bool mean = false;                  ///< +mean (PolicyParams::mean_attention)
  std::size_t bounded_chunk = 0;      ///< +boundedC (0: none)
  std::optional<double> recent;       ///< @recent=Q, a fraction of k
  std::string recent_text;            ///< Q as typed
  std::optional<std::size_t> seeds;   ///< @seeds=N
  std::optional<std::size_t> snap_kernel;  ///< @kernel=K (snapkv)
  std::optional<float> noise_scale;   ///< @noise=S (Keyformer's noise), in (0, 1]
  std::string snap_decode;            ///< @decode=D (snapkv): "h2o", "window", "keyformer", or "" (--snap-decode)
  /// Whether the row runs Keyformer's noise (several seeds): keyformer, or snapkv@decode=keyformer.
  bool seeded() const { return (policy == "keyformer" || (policy == "snapkv" && snap_decode == "keyformer")) && noise; }
  /// The policy whose k and w rules the row follows ("h2o" for the oracle).
  std::string budget_policy() const { return policy == "oracle" ? "h2o" : policy; }
};

/// Parses one row spec. Throws `kvcli::UsageError("--policies", ...)` naming the spec and the bad part
/// (unknown base, modifier or key; a modifier twice; @recent outside [0, 1] or with a policy without a
/// recent window; @seeds with a row that has no seeds; any modifier with the oracle).
RowSpec parse_row_spec(const std::string& text);

/// Parses every spec and rejects an empty list or a label given twice (`kvcli::UsageError("--policies")`).
std::vector<RowSpec> parse_row_specs(const std::vector<std::string>& texts);

/// The --policies help text: syntax, bases and modifiers.
std::string row_spec_help();

}  // namespace kvquality
