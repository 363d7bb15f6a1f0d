// kvevict — bench/quality/rows.cpp: parsing the report's row specs (rows.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "rows.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "cli/kvevict_cli.hpp"

namespace kvquality {
namespace {

const std::vector<std::string> kBases{"keyformer", "keyformer-nonoise", "h2o",    "streaming", "window",
                                      "tova",      "snapkv",            "knorm", "keydiff", "oracle",
                                      "expected-attention"};

[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw kvcli::UsageError("--policies", "row '" + spec + "': " + why + " (see --help for the row syntax)");
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

std::string row_spec_help() {
  return "rows to run, comma-separated specs BASE[+MOD]...[@KEY=VALUE]... (default: keyformer,keyformer-nonoise,"
         "h2o,streaming,window,tova,snapkv). BASE: keyformer, keyformer-nonoise, h2o, streaming, window, tova, snapkv, knorm "
         "(key norm: 1 / (1 + ||k||), no logits), keydiff (1 - cos(k, mean unit key), no logits), expected-attention (Expected Attention: the "
         "attention expected from the statistics of past pre-RoPE queries, kvpress's defaults, no recent window), oracle (the "
         "reference bound: evicts the token the full cache attends least over the rest of the window; not a "
         "policy). MOD: +shared (one selection per layer), +reindexed (positions re-indexed after each eviction), "
         "+pyramid (PyramidKV per-layer budgets, beta 20), +adakv (AdaKV: the layer's k x KV heads shared among its KV "
         "heads by score, each keeping at least alpha (0.2) of k - w key tokens), +mean (h2o/keyformer: rank the accumulated score divided by "
         "the number of queries that scored each token, kvevict::H2OMean / KeyformerMean), "
         "+boundedC (bounded prefill in chunks of C). KEY: @recent=Q (w = floor(Q k), keyformer/h2o/snapkv/knorm/keydiff/oracle; tova: "
         "none unless given, no floor of 1), "
         "@seeds=N (Keyformer with noise), @noise=S (Keyformer's noise scaled by S in (0, 1]), @kernel=K (snapkv pooling kernel, odd), @decode=h2o|window|keyformer "
         "(snapkv decode rule; keyformer: Gumbel noise and the tau schedule), @alpha=A (+adakv's floor, in [0, 1]). E.g. keyformer@recent=0.5,h2o+shared,"
         "keyformer+bounded32@seeds=3,snapkv@kernel=11@decode=keyformer,oracle";
}

RowSpec parse_row_spec(const std::string& text) {
  RowSpec row;
  row.label = text;
  if (text.empty()) bad(text, "empty spec");
  // Split off the @KEY=VALUE parts, then the +MOD parts.
  std::vector<std::string> keys;
  std::size_t at = text.find('@');
  const std::string head = text.substr(0, at);
  while (at != std::string::npos) {
    const std::size_t next = text.find('@', at + 1);
    keys.push_back(text.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  std::vector<std::string> parts;
  for (std::size_t b = 0;;) {
    const std::size_t e = head.find('+', b);
    parts.push_back(head.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  const std::string& base = parts[0];
  if (std::find(kBases.begin(), kBases.end(), base) == kBases.end())
    bad(text, "unknown base '" + base +
                  "'; expected keyformer, keyformer-nonoise, h2o, streaming, window, tova, snapkv, knorm, keydiff, "
                  "expected-attention or oracle");
  row.expected = base == "expected-attention";
  row.policy = base == "keyformer-nonoise" ? "keyformer" : row.expected ? "tova" : base;
  row.noise = base != "keyformer-nonoise";
  const bool oracle = row.policy == "oracle";
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& m = parts[i];
    if (std::find(parts.begin() + 1, parts.begin() + static_cast<std::ptrdiff_t>(i), m) !=
        parts.begin() + static_cast<std::ptrdiff_t>(i))
      bad(text, "modifier '+" + m + "' given twice");
    if (m == "shared") {
      row.shared = true;
    } else if (m == "reindexed") {
      row.reindexed = true;
    } else if (m == "pyramid") {
      row.pyramid = true;
    } else if (m == "adakv") {
      row.adakv = true;
    } else if (m == "mean") {
      if (row.policy != "h2o" && row.policy != "keyformer")
        bad(text, "+mean needs h2o, keyformer or keyformer-nonoise (it ranks an accumulated score as a mean)");
      row.mean = true;
    } else if (m.rfind("bounded", 0) == 0 && all_digits(m.substr(7)) && std::stoul(m.substr(7)) >= 1) {
      if (row.bounded_chunk != 0) bad(text, "two +bounded modifiers");
      row.bounded_chunk = std::stoul(m.substr(7));
    } else {
      bad(text, "unknown modifier '+" + m +
                    "'; expected +shared, +reindexed, +pyramid, +mean, +adakv or +boundedC (C >= 1, e.g. +bounded32)");
    }
    if (oracle) bad(text, "the oracle takes no modifier ('+" + m +
                      "'): it selects per KV head, original positions, uniform budgets, one-shot prefill");
  }
  if (row.expected) {
    if (row.reindexed) bad(text, "expected-attention and +reindexed: the re-indexing hook would bypass its rows");
    if (row.bounded_chunk != 0) bad(text, "expected-attention needs a one-shot prefill (no +bounded)");
  }
  if (row.adakv) {
    if (row.policy != "keyformer" && row.policy != "h2o" && row.policy != "snapkv" && row.policy != "tova")
      bad(text, "+adakv needs a score from the logits (keyformer, keyformer-nonoise, h2o, snapkv, tova or expected-attention): the KV "
                "heads share the layer's budget by their attention");
    if (row.shared) bad(text, "+adakv shares the budget among KV heads, +shared keeps the same tokens on every head");
    if (row.reindexed) bad(text, "+adakv and +reindexed: the re-indexing hook reads every KV head at one length");
    if (row.bounded_chunk != 0) bad(text, "+adakv is not supported with +bounded (the chunks need equal lengths)");
  }
  // @decode first: whether @seeds applies depends on it.
  for (const std::string& kv : keys) {
    if (kv.rfind("decode=", 0) != 0) continue;
    const std::string value = kv.substr(7);
    if (!row.snap_decode.empty()) bad(text, "@decode given twice");
    if (row.policy != "snapkv") bad(text, "@decode needs snapkv (the decode rule after SnapKV's prefill)");
    if (value != "h2o" && value != "window" && value != "keyformer")
      bad(text, "@decode=" + value + " must be h2o, window or keyformer");
    row.snap_decode = value;
  }
  for (const std::string& kv : keys) {
    const std::size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq), value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (eq == std::string::npos || value.empty()) bad(text, "'@" + kv + "' needs a value, e.g. @recent=0.5 or @seeds=3");
    if (key == "recent") {
      if (row.recent) bad(text, "@recent given twice");
      if (row.policy != "keyformer" && row.policy != "h2o" && row.policy != "snapkv" && row.policy != "knorm" &&
          row.policy != "keydiff" && (row.policy != "tova" || row.expected) && !oracle)
        bad(text, "@recent needs keyformer, keyformer-nonoise, h2o, snapkv, knorm, keydiff, tova or oracle (" + base +
                      " has no separate recent window)");
      char* end = nullptr;
      const double q = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !std::isfinite(q) || q < 0.0 || q > 1.0)
        bad(text, "@recent=" + value + " must be a fraction of k in [0, 1]");
      row.recent = q;
      row.recent_text = value;
    } else if (key == "decode") {
      // parsed above
    } else if (key == "noise") {
      if (row.noise_scale) bad(text, "@noise given twice");
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(v > 0.0 && v <= 1.0))
        bad(text, "@noise=" + value + " must be a noise scale in (0, 1]");
      if (!row.seeded()) bad(text, "@noise needs keyformer with noise, or snapkv@decode=keyformer");
      row.noise_scale = static_cast<float>(v);
    } else if (key == "kernel") {
      if (row.snap_kernel) bad(text, "@kernel given twice");
      if (row.policy != "snapkv") bad(text, "@kernel needs snapkv (its pooling kernel)");
      if (!all_digits(value) || std::stoul(value) % 2 == 0 || std::stoul(value) > 1000001)
        bad(text, "@kernel=" + value + " must be an odd integer in [1, 1000001]");
      row.snap_kernel = std::stoul(value);
    } else if (key == "alpha") {
      if (row.adakv_alpha) bad(text, "@alpha given twice");
      if (!row.adakv) bad(text, "@alpha needs +adakv (AdaKV's floor per KV head)");
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(v >= 0.0 && v <= 1.0))
        bad(text, "@alpha=" + value + " must be a share of the key budget in [0, 1]");
      row.adakv_alpha = static_cast<float>(v);
    } else if (key == "seeds") {
      if (row.seeds) bad(text, "@seeds given twice");
      if (!row.seeded())
        bad(text, "@seeds needs keyformer with noise, or snapkv@decode=keyformer (the other rows are deterministic)");
      if (!all_digits(value) || std::stoul(value) == 0 || std::stoul(value) > 1000)
        bad(text, "@seeds=" + value + " must be an integer in [1, 1000]");
      row.seeds = std::stoul(value);
    } else {
      bad(text, "unknown key '@" + key +
                    "'; expected @recent=Q, @seeds=N, @noise=S, @kernel=K, @decode=D or @alpha=A");
    }
  }
  return row;
}

std::vector<RowSpec> parse_row_specs(const std::vector<std::string>& texts) {
  if (texts.empty()) throw kvcli::UsageError("--policies", "give at least one row, e.g. keyformer,h2o");
  std::vector<RowSpec> rows;
  for (const std::string& t : texts) {
    for (const RowSpec& r : rows)
      if (r.label == t) throw kvcli::UsageError("--policies", "row '" + t + "' is given twice");
    rows.push_back(parse_row_spec(t));
  }
  return rows;
}

}  // namespace kvquality
