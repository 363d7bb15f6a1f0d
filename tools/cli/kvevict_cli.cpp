// kvevict tools — cli/kvevict_cli.cpp: the shared flags of the three tools: parsing, validation, options.
// SPDX-License-Identifier: Apache-2.0
// (Resolving them for a prompt: resolve.cpp; environment and files: files.cpp; run_tool: run_tool.cpp.)
#include "cli/kvevict_cli.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "cli/detail.hpp"

namespace kvcli {
namespace {

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

using detail::is_eviction_policy;
using detail::typed;

}  // namespace

UsageError::UsageError(const std::string& flag, const std::string& problem)
    : std::runtime_error(problem.empty() ? flag : flag + ": " + problem), flag_(flag) {}

Amount parse_amount(const std::string& text, const std::string& flag, AmountKind kind) {
  Amount a;
  const std::string problem = parse_amount_text(text, kind, a);
  if (!problem.empty()) throw UsageError(flag, problem);
  return a;
}

std::uint64_t parse_count(const std::string& text, const std::string& flag, std::uint64_t min, std::uint64_t max) {
  const std::string range = max == UINT64_MAX ? "an integer >= " + std::to_string(min)
                                              : "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!all_digits(text)) throw UsageError(flag, "expected " + range + ", got '" + text + "'");
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max) throw UsageError(flag, "expected " + range + ", got '" + text + "'");
  return v;
}

float parse_float(const std::string& text, const std::string& flag) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = text.empty() ? 0.0 : std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || text.find_first_of(" \t\n") != std::string::npos)
    throw UsageError(flag, "expected a number, got '" + text + "'");
  if (!std::isfinite(v) || std::fabs(v) > 3.0e38) throw UsageError(flag, "must be finite (got '" + text + "')");
  return static_cast<float>(v);
}

void EvictionFlags::validate() {
  // --policy
  if (!policy_text.empty()) {
    if (policy_text != "full" && !is_eviction_policy(policy_text) && policy_text != "streamingllm")
      throw UsageError("--policy", "unknown policy '" + policy_text +
                                       "' (expected keyformer, h2o, streaming, window, tova, snapkv, knorm or keydiff" +
                                       (allow_full ? std::string(", or full") : std::string()) + ")");
    if (policy_text == "full" && !allow_full)
      throw UsageError("--policy", "'full' keeps every token; this tool replays an eviction policy (expected "
                                   "keyformer, h2o, streaming, window, tova, snapkv, knorm or keydiff)");
    policy = policy_text == "streamingllm" ? "streaming" : policy_text;
  }
  const bool any = sweep;  // the tool runs every policy: policy-specific flags all apply
  const bool evicts = any || is_eviction_policy(policy);
  const std::string for_policy = "--policy " + policy;

  // --budget / --budget-ratio
  if (!budget_ratio_text.empty()) {
    parse_float(budget_ratio_text, "--budget-ratio");  // the syntax: a finite number
    const std::string problem = check_amount_fraction(std::strtod(budget_ratio_text.c_str(), nullptr),
                                                      AmountKind::budget, budget_ratio_text, budget);
    if (!problem.empty()) throw UsageError("--budget-ratio", problem);
    budget_given = true;
    budget_flag = "--budget-ratio";
  } else if (!budget_text.empty()) {
    budget = parse_amount(budget_text, "--budget", AmountKind::budget);
    budget_given = true;
    budget_flag = "--budget";
  } else {
    budget = parse_amount(defaults::kBudget, "--budget", AmountKind::budget);
  }
  if (budget_given && !evicts)
    throw UsageError(budget_flag, "--policy full keeps every token and has no budget; drop " + budget_flag +
                                      " or choose an eviction policy (--policy keyformer)");

  // --recent / --recent-ratio
  recent.reset();
  if (!recent_ratio_text.empty()) {
    parse_float(recent_ratio_text, "--recent-ratio");  // the syntax: a finite number
    Amount a;
    const std::string problem = check_amount_fraction(std::strtod(recent_ratio_text.c_str(), nullptr),
                                                      AmountKind::recent, recent_ratio_text, a);
    if (!problem.empty()) throw UsageError("--recent-ratio", problem);
    recent = a;
    recent_flag = "--recent-ratio";
  } else if (!recent_text.empty()) {
    recent = parse_amount(recent_text, "--recent", AmountKind::recent);
    recent_flag = "--recent";
  }
  if (recent && !any) {
    const bool zero = recent->is_ratio ? recent->ratio == 0.0 : recent->tokens == 0;
    if (!evicts)
      throw UsageError(recent_flag, "--policy full keeps every token and has no recent window; drop " + recent_flag);
    if ((policy == "streaming" || policy == "window") && !zero)
      throw UsageError(recent_flag, "streaming and window keep the most recent k - sinks tokens (window: sinks = 0); "
                                    "their recent window is not set separately (" + for_policy + "): drop " +
                                        recent_flag + " and set the size with --budget");
  }
  if (recent && !recent->is_ratio && budget_given && !budget.is_ratio && recent->tokens > budget.tokens)
    throw UsageError(recent_flag, "w = " + std::to_string(recent->tokens) + " exceeds the budget k = " +
                                      std::to_string(budget.tokens) + " (" + typed(budget_flag, budget) +
                                      "); lower " + recent_flag + " or raise " + budget_flag);

  // --sinks
  if (!sinks_text.empty()) {
    sinks = static_cast<std::size_t>(parse_count(sinks_text, "--sinks", 0, 1u << 30));
    sinks_given = true;
    if (!any && policy != "streaming" && sinks != 4)  // the default changes nothing: accepted
      throw UsageError("--sinks", "only --policy streaming has attention sinks (the policy is " + policy +
                                      "); drop --sinks");
    if (budget_given && !budget.is_ratio && sinks > budget.tokens)
      throw UsageError("--sinks", "S = " + std::to_string(sinks) + " exceeds the budget k = " +
                                      std::to_string(budget.tokens) + " (" + typed(budget_flag, budget) +
                                      "); lower --sinks or raise " + budget_flag);
  }

  // --tau-init / --tau-end and --seed: Keyformer's schedule and noise (also SnapKV's keyformer decode)
  const bool keyformer_decode = policy == "keyformer" || (policy == "snapkv" && snap_decode_text == "keyformer");
  for (auto [text, flag, value] : {std::tuple<const std::string&, const char*, float*>{tau_init_text, "--tau-init", &tau_init},
                                   std::tuple<const std::string&, const char*, float*>{tau_end_text, "--tau-end", &tau_end}}) {
    if (text.empty()) continue;
    const float v = parse_float(text, flag);
    if (!(v >= 1e-6f && v <= 1e6f))
      throw UsageError(flag, "must be finite and > 0, in [1e-6, 1e6] (got " + text + ")");
    if (!any && !keyformer_decode && v != *value)  // the default changes nothing: accepted
      throw UsageError(flag, std::string("only --policy keyformer (or snapkv with --snap-decode keyformer) has a "
                                         "temperature schedule (the policy is ") + policy + "); drop " + flag);
    *value = v;
  }

  // --seed
  if (!seed_text.empty()) {
    const std::uint64_t v = parse_count(seed_text, "--seed");
    if (seed_keyformer_only && !any && !keyformer_decode && v != seed)  // the default changes nothing: accepted
      throw UsageError("--seed", "only --policy keyformer (or snapkv with --snap-decode keyformer) draws random noise (the policy is " + policy +
                                     "); drop --seed");
    seed = v;
  }

  // --snap-window, --snap-kernel, --snap-pooling, --snap-decode (SnapKV)
  const bool snap = any || policy == "snapkv";
  auto only_snapkv = [&](const char* flag, const std::string& what) {
    throw UsageError(flag, "only --policy snapkv has " + what + " (the policy is " + policy + "); drop " + flag);
  };
  if (!snap_window_text.empty()) {
    const std::size_t L = static_cast<std::size_t>(parse_count(snap_window_text, "--snap-window", 1, 1u << 30));
    if (!snap && L != 32) only_snapkv("--snap-window", "an observation window");
    if (snap && budget_given && !budget.is_ratio && L > budget.tokens)
      throw UsageError("--snap-window", "L = " + std::to_string(L) + " exceeds the budget k = " +
                                            std::to_string(budget.tokens) + " (" + typed(budget_flag, budget) +
                                            "); lower --snap-window or raise " + budget_flag);
    snap_window = L;
    snap_window_given = snap;
  }
  if (!snap_kernel_text.empty()) {
    const std::size_t K = static_cast<std::size_t>(parse_count(snap_kernel_text, "--snap-kernel", 1, 1u << 20));
    if (K % 2 == 0)
      throw UsageError("--snap-kernel", "must be odd (got " + snap_kernel_text +
                                            "): the pooling window is centred on each token");
    if (!snap && K != 7) only_snapkv("--snap-kernel", "a pooling kernel");
    snap_kernel = K;
  }
  if (!snap_pooling_text.empty()) {
    if (snap_pooling_text != "max" && snap_pooling_text != "avg")
      throw UsageError("--snap-pooling", "unknown pooling '" + snap_pooling_text + "' (expected max or avg)");
    snap_pooling = kvevict::parse_pooling(snap_pooling_text);
    if (!snap && snap_pooling != kvevict::Pooling::max) only_snapkv("--snap-pooling", "pooling");
  }
  if (!snap_decode_text.empty()) {
    if (snap_decode_text != "h2o" && snap_decode_text != "window" && snap_decode_text != "keyformer")
      throw UsageError("--snap-decode", "unknown decode rule '" + snap_decode_text +
                                            "' (expected h2o, window or keyformer)");
    snap_decode = kvevict::parse_snap_decode(snap_decode_text);
    if (!snap && snap_decode != kvevict::SnapDecode::h2o) only_snapkv("--snap-decode", "a decode rule");
  }

  // --mean-attention (h2o, keyformer: rank the accumulated score as a mean over the queries that scored it)
  if (mean_attention && !any && policy != "h2o" && policy != "keyformer")
    throw UsageError("--mean-attention", "only --policy h2o or keyformer accumulates a score over every query (the "
                                         "policy is " + policy + "); drop --mean-attention");

  // --layer-budgets (per-layer budgets)
  if (!layer_budgets_text.empty()) {
    try {
      layer_budgets = kvevict::parse_layer_budgets(layer_budgets_text);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--layer-budgets", strip_origin(e.what()));
    }
    layer_budgets_label = layer_budgets.kind == kvevict::LayerBudgets::Kind::weights ? "weights" : layer_budgets_text;
    if (layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform && !evicts)
      throw UsageError("--layer-budgets", "--policy full keeps every token in every layer; drop --layer-budgets or "
                                          "choose an eviction policy");
  }

  // --head-budgets (AdaKV's head-adaptive split of a layer's budget); checked against the layout below
  kvevict::HeadBudgets split;
  if (!head_budgets_text.empty())
    if (const std::string problem = parse_head_budgets(head_budgets_text, split); !problem.empty())
      throw UsageError("--head-budgets", problem);
  if (split.is_adaptive()) {
    if (!evicts)
      throw UsageError("--head-budgets", "--policy full keeps every token; drop --head-budgets or choose an "
                                         "eviction policy");
    if (!any && policy != "keyformer" && policy != "h2o" && policy != "snapkv" && policy != "tova")
      throw UsageError("--head-budgets", "adaptive shares the budget by attention scores: --policy keyformer, h2o, "
                                         "snapkv or tova (the policy is " + policy + ")");
    if (shared_heads)
      throw UsageError("--head-budgets", "adaptive shares the budget among KV heads, --shared-heads keeps the same "
                                         "tokens on every head: drop one");
    if (bounded_prefill)
      throw UsageError("--head-budgets", "adaptive is not supported with --bounded-prefill (the chunks need every "
                                         "KV head at one length)");
    head_budgets = split;
  }

  // --kv-layout, --page-size, --evict-unit (paged KV storage)
  if (!kv_layout_text.empty() && kv_layout_text != "contiguous" && kv_layout_text != "paged")
    throw UsageError("--kv-layout", "unknown layout '" + kv_layout_text + "' (expected contiguous or paged)");
  paged = kv_layout_text == "paged";
  if (head_budgets.is_adaptive() && paged)
    throw UsageError("--head-budgets", "adaptive needs --kv-layout contiguous (a page slot holds every KV head's "
                                       "token: the paged layout selects once per layer)");
  if (!page_size_text.empty()) {
    if (!paged) throw UsageError("--page-size", "needs --kv-layout paged");
    // Bounded here, so that the page count ceil((seq_len + 1) / page_size) cannot wrap to 0 and a
    // page's storage cannot exhaust memory (the error names the flag, not the pool's internals).
    page_size = parse_count(page_size_text, "--page-size", 1, kMaxPageSize);
  }
  if (!evict_unit_text.empty()) {
    if (evict_unit_text != "token" && evict_unit_text != "page")
      throw UsageError("--evict-unit", "unknown unit '" + evict_unit_text + "' (expected token or page)");
    if (!paged) throw UsageError("--evict-unit", "needs --kv-layout paged");
    evict_pages = evict_unit_text == "page";
  }

  // --prefill-chunk, --bounded-prefill (chunked prefill)
  prefill_chunk = prefill_chunk_text.empty() ? 0 : parse_count(prefill_chunk_text, "--prefill-chunk", 1, 1u << 20);
  if (prefill_chunk != 0 && paged)
    throw UsageError("--prefill-chunk", "needs the contiguous KV layout (paged caches prefill in one shot); "
                                        "drop --kv-layout paged");
  if (prefill_chunk != 0 && !sweep && policy == "snapkv")
    throw UsageError("--prefill-chunk", "snapkv scores the prompt with its last L queries, so it prefills "
                                        "in one shot; drop --prefill-chunk");
  if (bounded_prefill && !sweep && policy == "full")
    throw UsageError("--bounded-prefill", "needs an evicting --policy (got full)");
}

void add_eviction_options(CLI::App& app, EvictionFlags& flags, const ToolSpec& spec) {
  flags.allow_full = spec.allow_full;
  flags.sweep = !spec.policy;
  flags.policy = spec.default_policy;
  flags.seed = spec.default_seed;
  flags.seed_keyformer_only = !spec.seed_sampler;
  if (spec.policy)
    app.add_option("--policy", flags.policy_text,
                   std::string("KV-cache policy: keyformer, h2o, streaming, window, tova, snapkv, knorm, keydiff") +
                       (spec.allow_full ? ", or full (no eviction)" : "") + " (default " + spec.default_policy + ")")
        ->type_name("NAME");
  if (spec.budget) {
    auto* budget = app.add_option("--budget", flags.budget_text,
                                  "budget k, KV entries kept per KV head: tokens (64), or a fraction (0.5) or percent "
                                  "(50%) of the prompt length P: k = max(1, floor(0.5 P)); above 100% keeps more than "
                                  "the prompt; default 50%, at least sinks + 1 for streaming")
                      ->type_name("INT|FLOAT|N%");
    app.add_option("--budget-ratio", flags.budget_ratio_text, "same as --budget R*100% (e.g. 0.5 = 50%)")
        ->type_name("FLOAT")
        ->excludes(budget);
  }
  auto* recent = app.add_option("--recent", flags.recent_text,
                                "recent window w (keyformer, h2o, snapkv, knorm): tokens (8), or a fraction (0.3) or percent "
                                "(30%) of k, at most 100%: w = floor(0.3 k), at least 1 when k >= 2; default 30%; "
                                "tova: none unless given (1 = kvpress's TOVAPress; kvevict-llama's default); streaming/window have none")
                     ->type_name("INT|FLOAT|N%");
  app.add_option("--recent-ratio", flags.recent_ratio_text, "same as --recent Q*100% (e.g. 0.3 = 30%)")
      ->type_name("FLOAT")
      ->excludes(recent);
  app.add_option("--sinks", flags.sinks_text,
                 std::string(spec.policy ? "attention sinks of --policy streaming" : "attention sinks of the streaming "
                             "rows") + " (default " + std::to_string(defaults::kSinks) + ")")
      ->type_name("INT");
  if (spec.snapkv) {
    app.add_option("--snap-window", flags.snap_window_text,
                   "SnapKV observation window L: the last L prompt queries score the prompt, and those L tokens "
                   "are kept (default 32, or k when k < 32; must be <= k)")
        ->type_name("INT");
    app.add_option("--snap-kernel", flags.snap_kernel_text, "SnapKV pooling kernel K, odd (default 7; 1 = no pooling)")
        ->type_name("INT");
    app.add_option("--snap-pooling", flags.snap_pooling_text, "SnapKV pooling over positions: max (default) or avg")
        ->type_name("max|avg");
    app.add_option("--snap-decode", flags.snap_decode_text,
                   "SnapKV decode rule: h2o (default; accumulate attention, recent window --recent), window "
                   "(evict the oldest) or keyformer (Keyformer's Gumbel-logit accumulation, --tau-init/--tau-end, "
                   "--seed; recent window --recent)")
        ->type_name("h2o|window|keyformer");
  }
  if (spec.policy)
    app.add_flag("--mean-attention", flags.mean_attention,
                 "h2o, keyformer: rank each token's accumulated score divided by the number of queries that scored "
                 "it (kvevict::H2OMean / KeyformerMean; kvpress's ObservedAttention), instead of the sum");
  if (spec.layer_budgets)
    app.add_option("--layer-budgets", flags.layer_budgets_text,
                   "split of the total budget (layers x k) over the layers: uniform (default), pyramid (PyramidKV, "
                   "beta 20; snapkv keeps its L in every layer), pyramid:BETA, or one weight per layer (4,2,1,1)")
        ->type_name("uniform|pyramid|LIST");
  if (spec.tau) {
    app.add_option("--tau-init", flags.tau_init_text, "Keyformer temperature at prefill (default 1)")
        ->type_name("FLOAT");
    app.add_option("--tau-end", flags.tau_end_text, "Keyformer temperature after the last step (default 2)")
        ->type_name("FLOAT");
  }
  if (spec.seed)
    app.add_option("--seed", flags.seed_text,
                   std::string(spec.seed_sampler ? "seed of Keyformer's Gumbel noise and of the sampler"
                                                 : "seed of Keyformer's Gumbel noise") +
                       " (default " + std::to_string(spec.default_seed) + ")")
        ->type_name("INT");
  if (spec.kv_layout) {
    app.add_flag("--shared-heads", flags.shared_heads,
                 "one selection per layer for all KV heads (scores summed over KV heads); implied by --kv-layout paged");
    app.add_option("--head-budgets", flags.head_budgets_text,
                   "how a layer's budget is shared among its KV heads: uniform (default: k each) or adaptive (AdaKV: "
                   "k x KV heads in total, shared by score, each head keeping its recent window and at least ALPHA "
                   "(default 0.2) of its k - w key tokens); keyformer, h2o, snapkv, tova; contiguous layout")
        ->type_name("uniform|adaptive|adaptive:ALPHA");
    app.add_option("--kv-layout", flags.kv_layout_text,
                   "KV storage: contiguous (default) or paged (pages from a per-layer pool, addressed by a page table)")
        ->type_name("contiguous|paged");
    app.add_option("--page-size", flags.page_size_text,
                   "tokens per page with --kv-layout paged (default 16, at most 4096)")
        ->type_name("INT");
    app.add_option("--evict-unit", flags.evict_unit_text,
                   "with --kv-layout paged: token (default; equals --shared-heads on the contiguous layout) or page "
                   "(whole pages of the middle go, no K/V moved)")
        ->type_name("token|page");
  }
  if (spec.prefill_chunk) {
    auto* chunk =
        app.add_option("--prefill-chunk", flags.prefill_chunk_text, spec.prefill_chunk_help)->type_name("INT");
    app.add_flag("--bounded-prefill", flags.bounded_prefill,
                 "with --prefill-chunk: evict to the budget after every chunk, so each layer never holds more than "
                 "k + C tokens during the prompt")
        ->needs(chunk);
  }
}

void add_threads_option(CLI::App& app, std::string& text) {
  app.add_option("--threads", text, "worker threads, >= 1 (default: the number of hardware threads)")->type_name("INT");
}

unsigned parse_threads(const std::string& text) {
  if (text.empty()) return std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(parse_count(text, "--threads", 1, 1024));
}

}  // namespace kvcli
