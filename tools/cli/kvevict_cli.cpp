// kvevict tools — cli/kvevict_cli.cpp: the command-line layer shared by the three tools.
// SPDX-License-Identifier: Apache-2.0
#include "cli/kvevict_cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <sstream>
#include <thread>

#include "file_input.hpp"

namespace fs = std::filesystem;

namespace kvcli {
namespace {

constexpr double kMaxTokens = 9007199254740992.0;  // 2^53: counts beyond cannot be represented exactly

bool all_digits(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

bool is_eviction_policy(const std::string& p) {
  return p == "keyformer" || p == "h2o" || p == "streaming" || p == "window" || p == "tova" || p == "snapkv";
}

// "--budget 50%" / "--budget-ratio 0.5" as the user typed it, for messages.
std::string typed(const std::string& flag, const Amount& a) { return flag + " " + a.text; }

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
                                       "' (expected keyformer, h2o, streaming, window, tova or snapkv" +
                                       (allow_full ? std::string(", or full") : std::string()) + ")");
    if (policy_text == "full" && !allow_full)
      throw UsageError("--policy", "'full' keeps every token; this tool replays an eviction policy (expected "
                                   "keyformer, h2o, streaming, window, tova or snapkv)");
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
    if (policy == "tova" && !zero)
      throw UsageError(recent_flag, "tova has no recent window; it must be 0 (got " + recent->text + "); drop " +
                                        recent_flag);
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

  // --tau-init / --tau-end
  for (auto [text, flag, value] : {std::tuple<const std::string&, const char*, float*>{tau_init_text, "--tau-init", &tau_init},
                                   std::tuple<const std::string&, const char*, float*>{tau_end_text, "--tau-end", &tau_end}}) {
    if (text.empty()) continue;
    const float v = parse_float(text, flag);
    if (!(v >= 1e-6f && v <= 1e6f))
      throw UsageError(flag, "must be finite and > 0, in [1e-6, 1e6] (got " + text + ")");
    if (!any && policy != "keyformer" && v != *value)  // the default changes nothing: accepted
      throw UsageError(flag, std::string("only --policy keyformer has a temperature schedule (the policy is ") +
                                 policy + "); drop " + flag);
    *value = v;
  }

  // --seed
  if (!seed_text.empty()) {
    const std::uint64_t v = parse_count(seed_text, "--seed");
    if (seed_keyformer_only && !any && policy != "keyformer" && v != seed)  // the default changes nothing: accepted
      throw UsageError("--seed", "only --policy keyformer draws random noise (the policy is " + policy +
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
    if (snap_decode_text != "h2o" && snap_decode_text != "window")
      throw UsageError("--snap-decode", "unknown decode rule '" + snap_decode_text + "' (expected h2o or window)");
    snap_decode = kvevict::parse_snap_decode(snap_decode_text);
    if (!snap && snap_decode != kvevict::SnapDecode::h2o) only_snapkv("--snap-decode", "a decode rule");
  }

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

  // --kv-layout, --page-size, --evict-unit (paged KV storage)
  if (!kv_layout_text.empty() && kv_layout_text != "contiguous" && kv_layout_text != "paged")
    throw UsageError("--kv-layout", "unknown layout '" + kv_layout_text + "' (expected contiguous or paged)");
  paged = kv_layout_text == "paged";
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
                   std::string("KV-cache policy: keyformer, h2o, streaming, window, tova, snapkv") +
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
                                "recent window w (keyformer, h2o, snapkv): tokens (8), or a fraction (0.3) or percent "
                                "(30%) of k, at most 100%: w = floor(0.3 k), at least 1 when k >= 2; default 30%; "
                                "tova: 0; streaming/window have none")
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
                   "SnapKV decode rule: h2o (default; accumulate attention, recent window --recent) or window "
                   "(evict the oldest)")
        ->type_name("h2o|window");
  }
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

std::string Resolved::describe() const {
  return "k=" + std::to_string(k) + " w=" + std::to_string(w) + " sinks=" + std::to_string(sinks) +
         (snap_window != 0 ? " L=" + std::to_string(snap_window) : std::string());
}

Resolved resolve(const EvictionFlags& f, std::size_t prompt_len, const std::string& policy_override) {
  const std::string& policy = policy_override.empty() ? f.policy : policy_override;
  Resolved r;
  if (!is_eviction_policy(policy)) return r;
  const double P = static_cast<double>(prompt_len);
  if (f.budget.is_ratio) {
    const double k = std::floor(f.budget.ratio * P);
    if (k > kMaxTokens)
      throw UsageError(f.budget_flag, typed(f.budget_flag, f.budget) + " of a " + std::to_string(prompt_len) +
                                          "-token prompt is above 2^53 tokens; give a smaller value");
    r.k = std::max<std::size_t>(1, static_cast<std::size_t>(k));
  } else {
    r.k = f.budget.tokens;
  }
  const std::string budget_desc =
      f.budget_given ? typed(f.budget_flag, f.budget) +
                           (f.budget.is_ratio ? " of a " + std::to_string(prompt_len) + "-token prompt" : std::string())
                     : "the default --budget 50% of a " + std::to_string(prompt_len) + "-token prompt";
  if (policy == "streaming") {
    r.sinks = f.sinks;
    if (!f.budget_given) r.k = std::max(r.k, f.sinks + 1);  // documented floor of the default budget
    if (r.sinks > r.k)
      throw UsageError("--sinks", "S = " + std::to_string(r.sinks) + " exceeds the budget k = " + std::to_string(r.k) +
                                      " (" + budget_desc + "); lower --sinks or raise " + f.budget_flag);
    r.w = r.k - r.sinks;
    return r;
  }
  if (policy == "window") {
    r.w = r.k;
    return r;
  }
  if (policy == "tova") return r;  // w = 0
  // keyformer, h2o, snapkv
  const Amount recent = f.recent ? *f.recent : parse_amount(defaults::kRecent, "--recent", AmountKind::recent);
  if (recent.is_ratio) {
    r.w = static_cast<std::size_t>(std::floor(recent.ratio * static_cast<double>(r.k)));
    if (recent.ratio > 0.0 && r.k >= 2) r.w = std::max<std::size_t>(r.w, 1);
  } else {
    r.w = recent.tokens;
  }
  if (r.w > r.k)
    throw UsageError(f.recent_flag, "w = " + std::to_string(r.w) + " exceeds the budget k = " + std::to_string(r.k) +
                                        " (" + budget_desc + "); lower " + f.recent_flag + " or raise " + f.budget_flag);
  if (policy == "snapkv") {
    r.snap_window = f.snap_window_given ? f.snap_window : default_snap_window(r.k);
    if (r.snap_window > r.k)
      throw UsageError("--snap-window", "L = " + std::to_string(r.snap_window) + " exceeds the budget k = " +
                                            std::to_string(r.k) + " (" + budget_desc + "); lower --snap-window or "
                                            "raise " + f.budget_flag);
  }
  return r;
}

kvevict::PolicyParams policy_params(const EvictionFlags& f, const Resolved& r) {
  kvevict::PolicyParams p;
  p.tau_init = f.tau_init;
  p.tau_end = f.tau_end;
  p.sinks = r.sinks;
  if (r.snap_window != 0) p.snap_window = r.snap_window;
  p.snap_kernel = f.snap_kernel;
  p.snap_pooling = f.snap_pooling;
  p.snap_decode = f.snap_decode;
  return p;
}

kvevict::RecentWindow recent_for(const EvictionFlags& f, const Resolved& r, const std::string& policy) {
  if (policy != "keyformer" && policy != "h2o" && policy != "snapkv") return kvevict::RecentWindow::tokens(0);
  const bool per_layer = f.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform;
  if (per_layer && (!f.recent || f.recent->is_ratio))
    return kvevict::RecentWindow::ratio(f.recent ? f.recent->ratio : 0.3);
  return kvevict::RecentWindow::tokens(r.w);
}

kvevict::LayerBudgets layer_budgets_for(const EvictionFlags& f, const Resolved& r, const std::string& policy) {
  kvevict::LayerBudgets s = f.layer_budgets;
  if (s.kind == kvevict::LayerBudgets::Kind::pyramid && policy == "snapkv") s.reserved = r.snap_window;
  return s;
}

Resolved resolve(const EvictionFlags& flags, std::size_t prompt_len) { return resolve(flags, prompt_len, ""); }

// ---- environment and files -----------------------------------------------------------------------

std::string shared_dir() {
  const char* env = std::getenv("KVEVICT_SHARED_DIR");
  return env != nullptr && *env != '\0' ? env : "../shared";
}

std::string model_dir() {
  const char* env = std::getenv("KVEVICT_MODEL_DIR");
  return env != nullptr && *env != '\0' ? env : shared_dir() + "/models/stories260K";
}

std::string help_footer() {
  return "Environment (all kvevict tools):\n"
         "  KVEVICT_SHARED_DIR  data root with models/ and data/ (default ../shared, relative to the working "
         "directory)\n"
         "  KVEVICT_MODEL_DIR   model folder: the llama2.c .bin checkpoint and the SentencePiece .model beside it\n"
         "                      (default $KVEVICT_SHARED_DIR/models/stories260K); --model/--tokenizer override it\n"
         "Exit codes: 0 success, 2 usage or input error (a bad flag, file, trace or model), 1 failure at run time.";
}

void check_llama2_checkpoint(const std::string& path, const std::string& flag) {
  const std::string who = flag + " '" + path + "'";
  // A FIFO would block in open and a device (/dev/zero) has no size: only regular files.
  if (const std::string problem = kvtools::file_problem(path); problem.rfind("is not", 0) == 0)
    throw UsageError(flag, "'" + path + "' " + problem);
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw UsageError(flag, "'" + path + "': cannot read (" + ec.message() + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag, "'" + path + "': cannot open (" + std::strerror(errno) + ")");
  unsigned char head[28] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const std::size_t got = static_cast<std::size_t>(in.gcount());
  auto not_ckpt = [&](const std::string& why) {
    return UsageError(flag, "'" + path + "' is not a llama2.c checkpoint (" + why + ")");
  };
  if (got >= 4 && std::memcmp(head, "GGUF", 4) == 0) return;  // GGUF: llama2::Model::load checks it whole
  if (got >= 4 && std::memcmp(head, "ak42", 4) == 0)
    throw not_ckpt("it is a newer llama2.c export (magic \"ak42\"); only the legacy format (export.py --version 0, as "
                   "in karpathy/tinyllamas) is supported");
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".model" || (got >= 2 && head[0] == 0x0a && std::memchr(head, 0xe2, got) != nullptr))
    throw not_ckpt("it looks like a SentencePiece tokenizer model; pass it as --tokenizer");
  if (got < 28) throw not_ckpt(std::to_string(size) + " bytes, shorter than the 28-byte header");
  bool text = true;
  for (unsigned char c : head) text = text && (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c < 0x7f));
  if (text) throw not_ckpt("it looks like a text file");
  std::int32_t h[7];
  std::memcpy(h, head, sizeof h);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  std::ostringstream desc;
  for (int i = 0; i < 7; ++i) desc << (i ? " " : "") << names[i] << "=" << h[i];
  for (int i = 0; i < 7; ++i) {
    const bool ok = i == 5 ? h[i] != 0 && h[i] > -(1 << 24) && h[i] < (1 << 24) : h[i] > 0 && h[i] < (1 << 24);
    if (!ok) throw not_ckpt("implausible header: " + desc.str());
  }
  if (h[0] % h[3] != 0 || h[3] % h[4] != 0 || (h[0] / h[3]) % 2 != 0)
    throw not_ckpt("inconsistent header: " + desc.str());
  // Size the header implies (all factors < 2^24, so the products fit in 64 bits with room to spare).
  const std::uint64_t d = static_cast<std::uint64_t>(h[0]), hid = static_cast<std::uint64_t>(h[1]),
                      L = static_cast<std::uint64_t>(h[2]), hd = d / static_cast<std::uint64_t>(h[3]),
                      kv = hd * static_cast<std::uint64_t>(h[4]),
                      V = static_cast<std::uint64_t>(h[5] < 0 ? -std::int64_t{h[5]} : h[5]),
                      T = static_cast<std::uint64_t>(h[6]);
  const std::uint64_t floats = V * d + L * d * 2 + L * d * d * 2 + L * kv * d * 2 + L * hid * d * 3 + d + T * hd +
                               (h[5] < 0 ? V * d : 0);
  const std::uint64_t expected = 28 + 4 * floats;
  if (size != expected)
    throw not_ckpt("the header (" + desc.str() + ") implies " + std::to_string(expected) + " bytes, the file has " +
                   std::to_string(size) + (size < expected ? "; a truncated download?" : ""));
}

std::string find_checkpoint(const std::string& path, const std::string& flag) {
  std::error_code ec;
  const std::string where =
      "download stories260K.bin and tok512.model from https://huggingface.co/karpathy/tinyllamas (folder "
      "stories260K) into ../shared/models/stories260K, or point --model or KVEVICT_MODEL_DIR at a llama2.c or GGUF model";
  if (!fs::exists(path, ec)) throw UsageError(flag, "no model at '" + path + "'; " + where);
  if (fs::is_directory(path, ec)) {
    // llama2.c checkpoints first (a folder such as stories260K/ holds the .bin and a GGUF export of the
    // same model); a GGUF file only in a folder without one.
    std::vector<std::string> found, gguf;
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && e.path().extension() == ".bin" && name.rfind("tok", 0) != 0)
        found.push_back(e.path().string());
      if (e.is_regular_file() && e.path().extension() == ".gguf") gguf.push_back(e.path().string());
    }
    if (found.empty()) found = gguf;
    std::sort(found.begin(), found.end());
    if (found.empty())
      throw UsageError(flag, "no model (a llama2.c *.bin or a *.gguf) in the folder '" + path + "'; " + where);
    if (found.size() > 1) {
      std::string list;
      for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
      throw UsageError(flag, "the folder '" + path + "' holds several checkpoints (" + list +
                                 "); name one with --model FILE");
    }
    check_llama2_checkpoint(found.front(), flag);
    return found.front();
  }
  if (!fs::is_regular_file(path, ec)) throw UsageError(flag, "'" + path + "' is not a regular file");
  check_llama2_checkpoint(path, flag);
  return path;
}

std::string find_tokenizer_beside(const std::string& checkpoint) {
  fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.empty()) dir = ".";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".model") found.push_back(e.path().string());
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

void check_output_prefix(const std::string& prefix, const std::string& flag) {
  fs::path dir = fs::path(prefix).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError(flag, "cannot write '" + prefix + "': the folder '" + dir.string() +
                               "' does not exist; create it or choose another " + flag);
  const std::string probe = (dir / (".kvevict-probe." + std::to_string(::getpid()))).string();
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr)
    throw UsageError(flag, "cannot write in the folder '" + dir.string() + "' (" + std::strerror(errno) +
                               "); choose another " + flag);
  std::fclose(f);
  std::remove(probe.c_str());
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << contents;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error("cannot write '" + path + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write '" + path + "' (rename: " + why + ")");
  }
}

std::string strip_origin(const std::string& message) {
  std::string m = message;
  // "llama2::Model::load: ..." / "kvevict::Budget: ..." -> "..."
  while ((m.rfind("llama2::", 0) == 0 || m.rfind("kvevict::", 0) == 0) && m.find(": ") != std::string::npos)
    m = m.substr(m.find(": ") + 2);
  return m;
}

namespace {

// Levenshtein distance (insertions, deletions, substitutions), O(|a| · |b|).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string unknown_flag_message(const CLI::App& app, const std::string& typed,
                                 const std::map<std::string, std::string>& hints) {
  const std::string name = typed.substr(0, typed.find('='));
  if (const auto hint = hints.find(name); hint != hints.end()) return name + ": unknown flag; " + hint->second;
  std::string best;
  std::size_t best_distance = SIZE_MAX;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& long_name : opt->get_lnames()) {
      const std::string candidate = "--" + long_name;
      const bool prefix = candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0;
      const std::size_t d = prefix ? 1 : edit_distance(name, candidate);
      if (d < best_distance) best_distance = d, best = candidate;
    }
  }
  if (!best.empty() && best_distance <= std::max<std::size_t>(2, name.size() / 3))
    return name + ": unknown flag; did you mean " + best + "? (see --help)";
  return name + ": unknown flag (see --help)";
}

int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body,
             const std::map<std::string, std::string>& hints) {
  auto report = [&tool](const std::string& message, int code) {
    std::string line = message;
    for (char& c : line)
      if (c == '\n' || c == '\r') c = ' ';
    std::cerr << tool << ": " << line << std::endl;
    return code;
  };
  app.footer(help_footer());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    for (const std::string& arg : app.remaining())
      if (arg.size() > 1 && arg[0] == '-') return report(unknown_flag_message(app, arg, hints), kExitUsage);
    return report(std::string(e.what()) + " (see --help)", kExitUsage);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return report(std::string(e.what()) + " (see --help)", kExitUsage);
  }
  try {
    return body();
  } catch (const UsageError& e) {
    return report(e.what(), kExitUsage);
  } catch (const std::invalid_argument& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::length_error& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::out_of_range& e) {
    return report(strip_origin(e.what()), kExitUsage);
  } catch (const std::bad_alloc&) {
    return report("out of memory", kExitFailure);
  } catch (const std::exception& e) {
    return report(strip_origin(e.what()), kExitFailure);
  } catch (...) {
    return report("unknown failure", kExitFailure);
  }
}

}  // namespace kvcli
