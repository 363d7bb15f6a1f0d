// kvevict example — kvevict-replay: replay an eviction policy over one layer's attention-logit trace.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-replay trace.json --policy keyformer --budget 64 --recent 8 --noise none
//   kvevict-replay --logits layer0.npy --prompt-len 100 --q-heads-per-kv 1 --policy h2o --budget-ratio 0.5
//
// stdout: JSON Lines, one after prefill (t = P - 1) and one per decode position t:
//   {"t":t,"tau":τ,"kept":[[positions of KV head 0, ascending],...],"scores":[[matching scores],...]}
// Exit codes: 0 ok; 2 bad input (one line on stderr naming the field and the problem); 1 other failure.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>

#include "replay.hpp"
#include "trace.hpp"

namespace {

constexpr int kExitBadInput = 2;
constexpr int kExitFailure = 1;

// CLI11 would read "-1" into an unsigned option as 2^64 - 1: accept digits only.
const CLI::Validator kCount(
    [](std::string& value) -> std::string {
      if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos) return "";
      return "expected a non-negative integer, got '" + value + "'";
    },
    "INT>=0");

int report(const std::string& message, int code) {
  std::string line = message;
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::cerr << "kvevict-replay: " << line << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Replay a KV-cache eviction policy (kvevict) over one layer's attention-logit trace and print what it keeps."};
  std::string trace_path, logits_path, gumbel_path, noise = "auto";
  std::optional<std::size_t> prompt_len, q_heads_per_kv;
  replay::Options options;

  auto* trace_opt = app.add_option("trace", trace_path,
                                   "JSON trace {prompt_len, q_heads_per_kv, logits [H_q][N][N], gumbel (optional)}, "
                                   "or - for stdin");
  app.add_option("--logits", logits_path, "logits as float32 .npy [H_q, N, N] (instead of a JSON trace)")
      ->excludes(trace_opt);
  app.add_option("--gumbel", gumbel_path, "Gumbel noise as float32 .npy [H_q, N, N] (with --logits)")
      ->needs(app.get_option("--logits"));
  app.add_option("--prompt-len", prompt_len, "prompt length P (required with --logits; overrides the JSON field)")
      ->check(kCount);
  app.add_option("--q-heads-per-kv", q_heads_per_kv, "query heads per KV head g (default 1; overrides the JSON field)")
      ->check(kCount);
  app.add_option("--policy", options.policy, "keyformer, h2o, streaming, window or tova")->capture_default_str();
  auto* budget = app.add_option("--budget", options.budget, "budget k: tokens kept per KV head")->check(kCount);
  app.add_option("--budget-ratio", options.budget_ratio, "budget k = floor(r * P) (default r = 0.5)")->excludes(budget);
  auto* recent = app.add_option("--recent", options.recent, "recent window w in tokens (default 0)")->check(kCount);
  app.add_option("--recent-ratio", options.recent_ratio, "recent window w = floor(q * k)")->excludes(recent);
  app.add_option("--sinks", options.sinks, "attention sinks (streaming)")->check(kCount)->capture_default_str();
  app.add_option("--tau-init", options.tau_init, "Keyformer temperature at prefill")->capture_default_str();
  app.add_option("--tau-end", options.tau_end, "Keyformer temperature after T decode steps")->capture_default_str();
  app.add_option("--gen-steps", options.gen_steps, "Keyformer horizon T of the temperature schedule (default N - P)")
      ->check(kCount);
  app.add_option("--noise", noise,
                 "Keyformer noise: none, gumbel (seeded generator), trace (the trace's gumbel), "
                 "auto (trace if the trace has gumbel, else gumbel)")
      ->capture_default_str();
  app.add_option("--seed", options.seed, "seed of the Gumbel generator (--noise gumbel)")
      ->check(kCount)
      ->capture_default_str();
  app.add_flag("--shared-heads", options.shared_heads, "one selection per layer instead of one per KV head");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    return report(e.what(), kExitBadInput);
  }

  try {
    options.noise = replay::parse_noise(noise);
    replay::Trace trace;
    if (!logits_path.empty()) {
      trace = replay::load_trace_npy(logits_path, gumbel_path);
      if (!prompt_len) throw replay::InputError("--prompt-len", "required with --logits");
    } else if (!trace_path.empty()) {
      trace = replay::load_trace_json(trace_path);
    } else {
      throw replay::InputError("trace", "give a JSON trace file (or - for stdin), or --logits FILE.npy");
    }
    if (prompt_len) trace.prompt_len = prompt_len;
    if (q_heads_per_kv) trace.q_heads_per_kv = q_heads_per_kv;
    std::ios::sync_with_stdio(false);
    replay::replay(trace, options, std::cout);
    std::cout.flush();
    if (!std::cout) return report("stdout: write error", kExitFailure);
    return 0;
  } catch (const replay::InputError& e) {
    return report(e.what(), kExitBadInput);
  } catch (const std::invalid_argument& e) {  // the library rejected an argument
    return report(e.what(), kExitBadInput);
  } catch (const std::length_error& e) {
    return report(e.what(), kExitBadInput);
  } catch (const std::bad_alloc&) {
    return report("out of memory (is the trace too large?)", kExitFailure);
  } catch (const std::exception& e) {
    return report(e.what(), kExitFailure);
  }
}
