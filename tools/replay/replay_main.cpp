// kvevict tools — kvevict-replay: replay an eviction policy over one layer's attention-logit trace.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-replay trace.json --policy keyformer --budget 64 --recent 8 --noise none
//   kvevict-replay --logits layer0.npy --prompt-len 100 --q-heads-per-kv 1 --policy h2o --budget 50%
//
// The shared flags (--policy, --budget, --recent, --sinks, --tau-init, --tau-end, --seed) and the exit
// codes are those of every kvevict tool (tools/cli, docs/tools.md).
// stdout: JSON Lines, one after prefill (t = P - 1) and one per decode position t:
//   {"t":t,"tau":τ,"kept":[[positions of KV head 0, ascending],...],"scores":[[matching scores],...]}
// stderr: one summary line with the resolved k, w and sinks.
// Exit codes: 0 ok; 2 bad input (one line on stderr naming the flag or field and the problem); 1 other failure.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "cli/kvevict_cli.hpp"
#include "file_input.hpp"
#include "replay.hpp"
#include "trace.hpp"

namespace {

// Whether `path` is a NumPy .npy file (its magic "\x93NUMPY", or the name's extension when it cannot be read):
// given as the positional JSON trace, it gets a message that says to pass it with --logits.
bool looks_like_npy(const std::string& path) {
  if (path == "-") return false;
  // Opening a FIFO would block: load_trace_json names what it is instead.
  if (kvtools::file_problem(path).rfind("is not", 0) == 0) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[6] = {};
  if (in.read(magic, sizeof magic)) return std::string(magic, sizeof magic) == "\x93NUMPY";
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Replay a KV-cache eviction policy (kvevict) over one layer's attention-logit trace and print what it keeps."};
  std::string trace_path, logits_path, gumbel_path, noise = "auto", prompt_len_text, group_text, gen_steps_text;
  kvcli::EvictionFlags flags;

  auto* trace_opt = app.add_option("trace", trace_path,
                                   "JSON trace {prompt_len, q_heads_per_kv, logits [H_q][N][N], gumbel (optional)}, "
                                   "or - for stdin");
  app.add_option("--logits", logits_path, "logits as float32 .npy [H_q, N, N] (instead of a JSON trace)")
      ->excludes(trace_opt);
  app.add_option("--gumbel", gumbel_path, "Gumbel noise as float32 .npy [H_q, N, N] (with --logits)")
      ->needs(app.get_option("--logits"));
  app.add_option("--prompt-len", prompt_len_text, "prompt length P (required with --logits; overrides the JSON field)")
      ->type_name("INT");
  app.add_option("--q-heads-per-kv", group_text, "query heads per KV head g (default 1; overrides the JSON field)")
      ->type_name("INT");
  kvcli::ToolSpec spec;
  spec.allow_full = false;
  spec.default_policy = "keyformer";
  spec.default_seed = 42;
  kvcli::add_eviction_options(app, flags, spec);
  app.add_option("--gen-steps", gen_steps_text, "Keyformer horizon T of the temperature schedule (default N - P)")
      ->type_name("INT");
  app.add_option("--noise", noise,
                 "Keyformer noise: none, gumbel (seeded generator), trace (the trace's gumbel), "
                 "auto (default: trace if the trace has gumbel, else gumbel)")
      ->type_name("none|gumbel|trace|auto");
  app.add_flag("--shared-heads", flags.shared_heads, "one selection per layer instead of one per KV head");
  app.add_option("--head-budgets", flags.head_budgets_text,
                 "how the layer's budget is shared among its KV heads: uniform (default: k each) or adaptive (AdaKV: "
                 "k x KV heads in total, shared by score, each head keeping its recent window and at least ALPHA "
                 "(default 0.2) of its k - w key tokens); keyformer, h2o, snapkv, tova")
      ->type_name("uniform|adaptive|adaptive:ALPHA");

  return kvcli::run_tool("kvevict-replay", app, argc, argv, [&]() -> int {
    try {
      // Every flag first, before any file is read; a policy the replay cannot run before its options.
      if (flags.policy_text == "knorm" || flags.policy_text == "keydiff")
        throw kvcli::UsageError("--policy", flags.policy_text + " scores each token from its key, which a trace of "
                                            "logits does not hold (expected keyformer, h2o, streaming, window, tova "
                                            "or snapkv)");
      flags.validate();
      // Keyformer's own flags with another policy: an error, as every unused flag (the default is accepted).
      if (flags.policy != "keyformer" &&
          !(flags.policy == "snapkv" && flags.snap_decode == kvevict::SnapDecode::keyformer)) {
        const std::string drop = " (the policy is " + flags.policy + "); drop ";
        if (noise != "auto")
          throw kvcli::UsageError("--noise", "only --policy keyformer draws noise" + drop + "--noise");
        if (!gen_steps_text.empty())
          throw kvcli::UsageError("--gen-steps", "only --policy keyformer has a temperature schedule" + drop +
                                                     "--gen-steps");
        if (!gumbel_path.empty())
          throw kvcli::UsageError("--gumbel", "only --policy keyformer reads Gumbel noise" + drop + "--gumbel");
      }
      replay::Options options;
      options.policy = flags.policy;
      options.noise = replay::parse_noise(noise);
      options.seed = flags.seed;
      options.tau_init = flags.tau_init;
      options.tau_end = flags.tau_end;
      options.sinks = flags.sinks;
      options.shared_heads = flags.shared_heads;
      options.head_budgets = flags.head_budgets;
      if (flags.snap_window_given) options.snap_window = flags.snap_window;
      options.snap_kernel = flags.snap_kernel;
      options.snap_pooling = flags.snap_pooling;
      options.snap_decode = flags.snap_decode;
      options.mean_attention = flags.mean_attention;
      std::optional<std::size_t> prompt_len, q_heads_per_kv;
      if (!prompt_len_text.empty()) prompt_len = kvcli::parse_count(prompt_len_text, "--prompt-len");
      if (!group_text.empty()) q_heads_per_kv = kvcli::parse_count(group_text, "--q-heads-per-kv");
      if (!gen_steps_text.empty()) options.gen_steps = kvcli::parse_count(gen_steps_text, "--gen-steps");

      replay::Trace trace;
      if (!logits_path.empty()) {
        trace = replay::load_trace_npy(logits_path, gumbel_path);
        if (!prompt_len) throw replay::InputError("--prompt-len", "required with --logits");
      } else if (!trace_path.empty()) {
        if (looks_like_npy(trace_path))
          throw replay::InputError("trace", "'" + trace_path + "' is an .npy file, not a JSON trace: pass it with "
                                            "--logits " + trace_path + " (and --prompt-len P)");
        trace = replay::load_trace_json(trace_path);
      } else {
        throw replay::InputError("trace", "give a JSON trace file (or - for stdin), or --logits FILE.npy");
      }
      if (prompt_len) trace.prompt_len = prompt_len;
      if (q_heads_per_kv) trace.q_heads_per_kv = q_heads_per_kv;
      replay::validate(trace);

      // k, w, sinks resolved exactly as kvevict-generate and kvevict-quality do.
      const kvcli::Resolved r = kvcli::resolve(flags, trace.P());
      options.budget = r.k;
      // snapkv decodes by H2O's rule with the recent window w, as in kvevict-generate; tova's is 0 unless given.
      options.recent = (flags.policy == "keyformer" || flags.policy == "h2o" || flags.policy == "snapkv" ||
                        flags.policy == "tova") ? r.w : 0;
      std::ios::sync_with_stdio(false);
      replay::replay(trace, options, std::cout);
      std::cout.flush();
      if (!std::cout) throw std::runtime_error("stdout: write error");
      std::cerr << "kvevict-replay: [" << flags.policy << ' ' << r.describe() << "] prompt " << trace.P()
                << " tok, " << trace.n_tokens - trace.P() << " decode positions\n";
      return kvcli::kExitOk;
    } catch (const replay::InputError& e) {
      throw kvcli::UsageError(e.what(), "");  // already "field: problem"
    } catch (const nlohmann::json::exception& e) {  // a value the reader did not expect: input, not a crash
      std::string m = e.what();
      if (m.rfind("[json.exception.", 0) == 0 && m.find("] ") != std::string::npos) m = m.substr(m.find("] ") + 2);
      throw kvcli::UsageError(trace_path.empty() ? "--logits" : "trace '" + trace_path + "'", m);
    }
  });
}
