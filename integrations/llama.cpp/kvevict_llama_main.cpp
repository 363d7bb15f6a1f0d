// kvevict-llama: run a GGUF model in llama.cpp with a kvevict policy deciding which positions to drop.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-llama --model m.gguf --prompt-file text.txt --prompt-tokens 1000 --steps 32 --policy h2o --budget 256
//   kvevict-llama --model m.gguf --prompt-file text.txt --prompt-tokens 2048 --teacher-force 255 --policy keyformer --budget 0.2
//   kvevict-llama --model m.gguf --prompt "Once upon a time" --steps 32 --no-kvevict   # llama.cpp alone
//
// Generate mode (default): greedy decoding of --steps tokens; stdout: one line "ids: <id> <id> ...".
// Teacher-forced mode (--teacher-force T): the text's first P + T + 1 tokens (after --skip-tokens); the prompt is
// P (--prompt-tokens), then T decode steps, each feeding the text's next token with eviction and predicting the
// one after it (kvevict-quality's windows of P + T + 1 tokens); stdout: one JSON line
// {"nll":mean NLL in nats/token,"predictions":T,...}.
// The shared flags (--policy, --budget, --recent, --sinks, --tau-init, --tau-end, --seed) and exit codes are
// those of every kvevict tool (docs/tools.md); integrations/llama.cpp/README.md has the rest.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <time.h>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "file_output.hpp"
#include "kvevict_llama.hpp"
#include "parallel_run.hpp"
#include "tool_support.hpp"
#include "npy.hpp"
#include "trace.hpp"

using kvevict_llama_tool::check_step;
using kvevict_llama_tool::cpu_seconds;
using kvevict_llama_tool::g_verbose;
using kvevict_llama_tool::log_callback;
using kvevict_llama_tool::read_file;
using kvevict_llama_tool::tokenize;
using kvevict_llama_tool::write_kept_line;

int main(int argc, char** argv) {
  CLI::App app{"Run a GGUF model in llama.cpp with a kvevict policy (one selection for the whole model) deciding "
               "which KV positions to drop."};
  std::string model_path, prompt, prompt_file, prompt_tokens_text, skip_text, steps_text = "32", teacher_text, ctx_text,
                                                                    batch_text = "64", threads_text, fa = "off", score_rows = "per-head", parallel_text = "1", stride_text, kv_unified = "on", swa_full = "off",
                                                                    kept_out, trace_out, keys_out;
  bool no_kvevict = false, ignore_eos = false, count_only = false, print_tokens = false, bounded = false;
  kvcli::EvictionFlags flags;
  app.add_option("--model", model_path,
                 "GGUF model file (default $KVEVICT_SHARED_DIR/models/stories260K/stories260K.gguf)");
  auto* prompt_opt = app.add_option("--prompt", prompt, "prompt text");
  app.add_option("--prompt-file", prompt_file, "read the prompt (or the teacher-forced text) from FILE")
      ->excludes(prompt_opt);
  app.add_option("--prompt-tokens", prompt_tokens_text,
                 "prompt length P: the first P tokens of the text (default: all of them; teacher-forced: all but "
                 "the last T)")
      ->type_name("INT");
  app.add_option("--skip-tokens", skip_text, "drop the text's first N tokens (a window further into a document)")
      ->type_name("INT");
  auto* steps_opt = app.add_option("--steps", steps_text, "generate: tokens to generate (greedy), each one decoded "
                                                          "(default 32)")
                        ->type_name("INT");
  app.add_option("--teacher-force", teacher_text,
                 "scoring mode: T teacher-forced decode steps after the P prompt tokens, each predicting the "
                 "text's next token; prints the mean NLL")
      ->type_name("INT");
  app.add_option("--ctx-size", ctx_text, "llama.cpp context (cells); default P + steps (or P + T)")->type_name("INT");
  app.add_option("--batch", batch_text, "prompt chunk: tokens per llama_decode (n_batch = n_ubatch; default 64)")
      ->type_name("INT");
  app.add_option("--threads", threads_text, "llama.cpp threads (default: the hardware's)")->type_name("INT");
  app.add_option("--flash-attn", fa, "on or off (default off; policies that score need off)")->type_name("on|off");
  auto* score_rows_opt =
      app.add_option("--score-rows", score_rows,
                     "per-head (default: each layer's every head scored as its own query head, Keyformer Eq. 7 per "
                     "head) or summed (one row: the probabilities summed over layers and heads, read in place)")
          ->type_name("per-head|summed");
  app.add_option("--parallel", parallel_text,
                 "N sequences in one llama_context (one kvevict budget each, one shared pool of cells), decoded "
                 "together: sequence i's window starts at token i * --seq-stride of the text (default 1)")
      ->type_name("INT");
  app.add_option("--seq-stride", stride_text,
                 "--parallel: tokens between the sequences' windows (default: one window, P or P + T + 1)")
      ->type_name("INT");
  auto* unified_opt =
      app.add_option("--kv-unified", kv_unified,
                     "--parallel: on (default: one pool of cells, every token attends every sequence's cells, masked) "
                     "or off (a stream of n_ctx / N cells per sequence: a token attends its own sequence's cells)")
          ->type_name("on|off");
  app.add_option("--swa-full", swa_full,
                 "models with sliding-window layers: off (default, as llama.cpp's tools: the sliding layers' cache "
                 "holds their window + a batch) or on (a full-size sliding cache, llama_context_default_params')")
      ->type_name("on|off");
  app.add_flag("--bounded-prefill", bounded,
               "cut the prompt to the budget after every --batch chunk (kvevict's bounded prefill), so a sequence "
               "never holds more than k + --batch cells");
  app.add_flag("--no-kvevict", no_kvevict, "llama.cpp alone: the same loop without the callback or kvevict");
  auto* ignore_eos_opt = app.add_flag("--ignore-eos", ignore_eos, "generate: do not stop at an end-of-generation token");
  app.add_option("--kept-out", kept_out, "write the kept positions after the prompt and every step (kvevict-replay's "
                                         "JSON Lines)");
  app.add_option("--trace-out", trace_out, "write the model-wide logits the cache was given as float32 .npy "
                                           "[n_layer*n_head, N, N] (--score-rows summed: [1, N, N]) for kvevict-replay");
  app.add_option("--keys-out", keys_out, "--policy knorm or keydiff: write the keys the cache was given as float32 .npy "
                                         "[n_global_layers*n_head_kv, N, head_dim] (after RoPE; head_dim: the GGUF's attention.key_length, "
                                         "else n_embd/n_head)");
  app.add_flag("--verbose", g_verbose, "show llama.cpp's log");
  app.add_flag("--count-tokens", count_only, "print the text's token count (llama.cpp's tokenizer, with BOS) and exit");
  app.add_flag("--print-tokens", print_tokens,
               "print the text's token ids (llama.cpp's tokenizer, with BOS), space-separated on one line, and exit");
  kvcli::ToolSpec spec;
  spec.default_policy = "full";
  spec.snapkv = false;
  kvcli::add_eviction_options(app, flags, spec);

  return kvcli::run_tool("kvevict-llama", app, argc, argv, [&]() -> int {
    flags.validate();
    // llama.cpp decodes a sequence's next token only right after the last position it holds, so TOVA here keeps the
    // newest token: a recent window of 1 by default (kvpress's TOVAPress rule; the paper's w = 0 could evict the token
    // just decoded and stop the run). A TOVA run that never evicts its newest token keeps the same sets either way.
    if (flags.policy == "tova" && !flags.recent) flags.recent = kvcli::Amount{false, 0.0, 1, "1"};
    const bool full = flags.policy == "full";
    if (flags.policy == "snapkv")
      throw kvcli::UsageError("--policy", "snapkv scores the prompt with its last L queries in one shot; "
                                          "kvevict-llama prefills in chunks of --batch tokens, so it is not "
                                          "supported here");
    if (no_kvevict && !full)
      throw kvcli::UsageError("--no-kvevict", "runs llama.cpp without kvevict: it needs --policy full (got " +
                                                  flags.policy + ")");
    if (fa != "on" && fa != "off") throw kvcli::UsageError("--flash-attn", "expected on or off, got '" + fa + "'");
    const bool flash = fa == "on";
    const kvevict::Policy policy = full ? kvevict::Policy::h2o : kvevict::parse_policy(flags.policy);
    if (flash && !full && kvevict_llama::Evictor::needs_scores(policy))
      throw kvcli::UsageError("--flash-attn", "on: --policy " + flags.policy +
                                                  " scores tokens from attention probabilities, which llama.cpp "
                                                  "does not compute with flash attention; use --flash-attn off, or "
                                                  "--policy streaming, window, knorm, keydiff or full");
    if (score_rows != "per-head" && score_rows != "summed")
      throw kvcli::UsageError("--score-rows", "expected per-head or summed, got '" + score_rows + "'");
    if (score_rows_opt->count() > 0 && (full || !kvevict_llama::Evictor::needs_scores(policy)))
      throw kvcli::UsageError("--score-rows", "chooses how attention becomes scores: it needs a --policy that scores "
                                              "from attention (h2o, keyformer or tova; got " +
                                                  (no_kvevict ? std::string("--no-kvevict") : flags.policy) + ")");
    const std::size_t n_seq = kvcli::parse_count(parallel_text, "--parallel", 1, 256);
    if (n_seq == 1 && !stride_text.empty())
      throw kvcli::UsageError("--seq-stride", "places the windows of --parallel N > 1 sequences (got --parallel 1)");
    if (swa_full != "on" && swa_full != "off")
      throw kvcli::UsageError("--swa-full", "expected on or off, got '" + swa_full + "'");
    if (kv_unified != "on" && kv_unified != "off")
      throw kvcli::UsageError("--kv-unified", "expected on or off, got '" + kv_unified + "'");
    if (unified_opt->count() > 0 && n_seq == 1)
      throw kvcli::UsageError("--kv-unified", "chooses how --parallel N > 1 sequences share the cells (got --parallel 1)");
    if (kv_unified == "off" && !no_kvevict && !full && !ignore_eos && teacher_text.empty())
      throw kvcli::UsageError("--kv-unified", "off with an evicting policy needs every sequence to run all its steps "
                                              "(--ignore-eos or --teacher-force): a sequence that ended would split "
                                              "llama.cpp's batch into several ubatches");
    if (bounded && (full || no_kvevict))
      throw kvcli::UsageError("--bounded-prefill", "cuts the prompt to the budget: it needs an evicting --policy (got " +
                                                       (no_kvevict ? std::string("--no-kvevict") : flags.policy) + ")");
    if (n_seq > 1) {
      if (!trace_out.empty())
        throw kvcli::UsageError("--trace-out", "records one sequence; it cannot be combined with --parallel");
      if (!keys_out.empty())
        throw kvcli::UsageError("--keys-out", "records one sequence; it cannot be combined with --parallel");
      if (!full && kvevict_llama::Evictor::needs_keys(policy))
        throw kvcli::UsageError("--parallel", "--policy " + flags.policy + " reads each batch's keys (Kcur) for one "
                                              "sequence; with several sequences use a policy that scores from "
                                              "attention or positions");
    }
    const bool teacher = !teacher_text.empty();
    // The generate-only flags with --teacher-force: an error, not an option silently ignored.
    if (teacher && steps_opt->count() > 0)
      throw kvcli::UsageError("--steps", "generates tokens; --teacher-force scores the text's own tokens instead (give "
                                         "one of the two)");
    if (teacher && ignore_eos_opt->count() > 0)
      throw kvcli::UsageError("--ignore-eos", "applies to generation; --teacher-force scores the text's own tokens and "
                                              "never stops early (drop --ignore-eos)");
    const std::size_t T = teacher ? kvcli::parse_count(teacher_text, "--teacher-force", 1)
                                  : kvcli::parse_count(steps_text, "--steps", 0);
    const std::size_t C = kvcli::parse_count(batch_text, "--batch", 1, 1u << 16);
    const int threads = threads_text.empty()
                            ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                            : static_cast<int>(kvcli::parse_count(threads_text, "--threads", 1, 1024));
    if (!trace_out.empty() && full) throw kvcli::UsageError("--trace-out", "needs an evicting --policy");
    if (!kept_out.empty() && full) throw kvcli::UsageError("--kept-out", "needs an evicting --policy");
    if (!trace_out.empty() && kvevict_llama::Evictor::needs_keys(policy))
      throw kvcli::UsageError("--trace-out", "--policy " + flags.policy + " scores each token from its keys, not from "
                                             "logits; record the keys with --keys-out");
    if (!keys_out.empty() && (full || !kvevict_llama::Evictor::needs_keys(policy)))
      throw kvcli::UsageError("--keys-out", "records the keys a key score is given: it needs --policy knorm or keydiff (got " +
                                                (no_kvevict ? std::string("--no-kvevict") : flags.policy) + ")");
    // The files, before any is opened for writing and before any work: no output may be an input (the model,
    // the prompt file) or another output, and each output's folder must be writable. Outputs are written
    // whole or not at all (a temporary file renamed into place at the end).
    if (model_path.empty()) model_path = kvcli::shared_dir() + "/models/stories260K/stories260K.gguf";
    kvcli::FileRoles roles;
    roles.input("--model", model_path).input("--prompt-file", prompt_file);
    roles.output("--kept-out", kept_out).output("--trace-out", trace_out).output("--keys-out", keys_out);
    roles.check();
    for (const auto& [path, flag] : {std::pair<const std::string&, const char*>{kept_out, "--kept-out"},
                                     {trace_out, "--trace-out"}, {keys_out, "--keys-out"}})
      if (!path.empty()) kvcli::check_output_file(path, flag);

    {
      struct stat st {};
      if (stat(model_path.c_str(), &st) != 0) throw kvcli::UsageError("--model", "'" + model_path + "' does not exist");
      if (!S_ISREG(st.st_mode)) throw kvcli::UsageError("--model", "'" + model_path + "' is not a regular file");
    }
    const std::string text = !prompt_file.empty() ? read_file(prompt_file, "--prompt-file") : prompt;
    if (text.empty() && !prompt_file.empty())
      throw kvcli::UsageError("--prompt-file", "'" + prompt_file + "' is empty; give a file with the prompt's text");
    if (text.empty())
      throw kvcli::UsageError(prompt_opt->count() > 0 ? "--prompt" : "--prompt-file",
                              prompt_opt->count() > 0 ? "is empty; give the prompt's text"
                                                      : "no prompt: give --prompt TEXT or --prompt-file FILE");

    llama_log_set(log_callback, nullptr);
    llama_backend_init();
    llama_model_params mparams = llama_model_default_params();
    mparams.n_gpu_layers = 0;
    std::unique_ptr<llama_model, decltype(&llama_model_free)> model(
        llama_model_load_from_file(model_path.c_str(), mparams), llama_model_free);
    if (!model)
      throw kvcli::UsageError("--model", "llama.cpp cannot load '" + model_path +
                                             "' (not a GGUF model it supports; --verbose shows its log)");
    // Before any token: a recurrent or hybrid memory cannot drop a middle range of positions.
    if (!full && (llama_model_is_recurrent(model.get()) || llama_model_is_hybrid(model.get())))
      throw kvcli::UsageError("--model", "the model's memory is recurrent or hybrid: llama.cpp cannot drop a middle "
                                         "range of its positions (llama_memory_seq_rm), so nothing can be evicted; "
                                         "use --policy full");
    // Before any token: a model with sliding-window layers whose layout kvevict does not know (or with no global
    // layer) cannot be scored, its cells not tracked (llama_layers.hpp).
    if (!no_kvevict) {
      try {
        (void)kvevict_llama::LayerKinds::of(model.get());
      } catch (const std::invalid_argument& e) {
        throw kvcli::UsageError("--model", e.what());
      }
    }
    const llama_vocab* vocab = llama_model_get_vocab(model.get());
    if (llama_vocab_type(vocab) == LLAMA_VOCAB_TYPE_NONE)
      throw kvcli::UsageError("--model", "'" + model_path + "' has no vocabulary: llama.cpp cannot tokenize text for it");
    std::vector<llama_token> tokens = tokenize(vocab, text);
    if (print_tokens || count_only) {
      if (print_tokens && count_only)
        throw kvcli::UsageError("--print-tokens", "prints the ids; --count-tokens prints their count (give one)");
      const char* what = print_tokens ? "--print-tokens" : "--count-tokens";
      if (!skip_text.empty() || !prompt_tokens_text.empty())
        throw kvcli::UsageError(!skip_text.empty() ? "--skip-tokens" : "--prompt-tokens",
                                std::string("selects tokens for a run; ") + what + " reports the whole text (drop it)");
    }
    if (print_tokens) {
      for (std::size_t i = 0; i < tokens.size(); ++i) std::printf(i ? " %d" : "%d", tokens[i]);
      std::printf("\n");
      if (std::fflush(stdout) != 0) throw std::runtime_error("stdout: write error");
      return kvcli::kExitOk;
    }
    if (count_only) {
      std::printf("%zu\n", tokens.size());
      return kvcli::kExitOk;
    }
    if (!skip_text.empty()) {
      const std::size_t skip = kvcli::parse_count(skip_text, "--skip-tokens");
      if (skip >= tokens.size())
        throw kvcli::UsageError("--skip-tokens", std::to_string(skip) + " is not below the text's " +
                                                     std::to_string(tokens.size()) + " tokens");
      tokens.erase(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(skip));
    }

    // P prompt tokens, then T steps (generate) or T predictions (teacher-forced: P + T + 1 tokens of the text).
    std::size_t P = tokens.size() - (teacher ? std::min(T + 1, tokens.size()) : 0);
    if (!prompt_tokens_text.empty()) P = kvcli::parse_count(prompt_tokens_text, "--prompt-tokens", 1);
    if (P == 0 || P + (teacher ? T + 1 : 0) > tokens.size())
      throw kvcli::UsageError(prompt_tokens_text.empty() ? (prompt_file.empty() ? "--prompt" : "--prompt-file")
                                                         : "--prompt-tokens",
                              "the text has " + std::to_string(tokens.size()) + " tokens; " +
                                  (teacher ? "P + T + 1 = " + std::to_string(P + T + 1) : "P = " + std::to_string(P)) +
                                  " needed");
    const std::size_t decode_steps = T;  // tokens fed one at a time after the prompt
    const std::size_t N = P + decode_steps;

    std::size_t k = N;
    kvevict::CacheConfig config;
    kvevict::PolicyParams params;
    if (!full) {
      const kvcli::Resolved r = kvcli::resolve(flags, P);
      k = r.k;
      params = kvcli::policy_params(flags, r);
      params.horizon = std::max<std::size_t>(decode_steps, 1);
      params.gumbel_noise = true;
      config.budget = kvevict::Budget::tokens(r.k);
      config.recent = kvcli::recent_for(flags, r, flags.policy);
      // TOVA's ratio has no floor of 1, so only a token count helps it.
      const std::string ratio_hint = policy == kvevict::Policy::tova ? "" : ", or a ratio with k >= 2";
      if (kvevict::accepts_recent_window(policy) && r.w == 0)
        throw kvcli::UsageError(flags.recent ? flags.recent_flag
                                : flags.budget_given ? flags.budget_flag
                                : prompt_tokens_text.empty() ? (prompt_file.empty() ? "--prompt" : "--prompt-file")
                                                             : "--prompt-tokens",
                                "w = 0 (k = " + std::to_string(r.k) + "): llama.cpp decodes each new token at the "
                                "position right after the last one "
                                "the sequence holds, so the newest token must be kept; give a recent window w >= 1 "
                                "(--recent 1" + ratio_hint + ")");
      const std::string k_flag = flags.budget_given ? flags.budget_flag
                                 : prompt_tokens_text.empty() ? (prompt_file.empty() ? "--prompt" : "--prompt-file")
                                                              : "--prompt-tokens";
      if (policy == kvevict::Policy::streaming_llm && r.w == 0)  // k == sinks: no recent token is kept
        throw kvcli::UsageError(flags.sinks_given ? "--sinks" : k_flag,
                                "k = " + std::to_string(r.k) + " holds only the " + std::to_string(r.sinks) +
                                    " attention sinks: llama.cpp decodes each new token right after the last "
                                    "position the sequence holds, so streaming needs k >= sinks + 1");
      config.seed = flags.seed;
    }
    if (n_seq > 1) {
      kvevict_llama_tool::ParallelRun pr;
      pr.model = model.get();
      pr.vocab = vocab;
      pr.n_seq = n_seq;
      pr.P = P;
      pr.T = T;
      pr.teacher = teacher;
      const std::size_t window = teacher ? P + T + 1 : P;
      pr.stride = stride_text.empty() ? window : kvcli::parse_count(stride_text, "--seq-stride", 1);
      if ((n_seq - 1) * pr.stride + window > tokens.size())
        throw kvcli::UsageError(stride_text.empty() ? "--parallel" : "--seq-stride",
                                std::to_string(n_seq) + " windows of " + std::to_string(window) + " tokens, " +
                                    std::to_string(pr.stride) + " apart, need " +
                                    std::to_string((n_seq - 1) * pr.stride + window) + " tokens; the text has " +
                                    std::to_string(tokens.size()) +
                                    (skip_text.empty() ? std::string() : " (after --skip-tokens)"));
      const std::size_t need =
          kvevict_llama_tool::parallel_min_cells(!full, kv_unified == "on", bounded, n_seq, P, T, k, C);
      // Streams of n_ctx / N cells: each must hold its sequence whole (llama.cpp alone).
      pr.n_ctx = ctx_text.empty() ? need : kvcli::parse_count(ctx_text, "--ctx-size", 1, 1u << 24);
      if (pr.n_ctx < need)
        throw kvcli::UsageError("--ctx-size", std::to_string(pr.n_ctx) + " cells are fewer than the " +
                                                  std::to_string(need) + " the run needs (" +
                                                  (full ? "every sequence's P + steps"
                                                   : kv_unified == "off"
                                                       ? "a stream of the largest prompt or k + 1, plus 1, per sequence"
                                                       : "k + 1 per sequence, one prompt, the batch") +
                                                  "); raise --ctx-size or leave it out");
      pr.tokens = std::move(tokens);
      pr.C = C;
      pr.threads = threads;
      pr.flash = flash;
      pr.no_kvevict = no_kvevict;
      pr.full = full;
      pr.ignore_eos = ignore_eos;
      pr.policy = policy;
      pr.policy_name = flags.policy;
      pr.config = config;
      pr.params = params;
      pr.k = k;
      pr.unified = kv_unified == "on";
      pr.swa_full = swa_full == "on";
      pr.bounded = bounded;
      pr.rows = score_rows == "summed" ? kvevict_llama::ScoreRows::summed : kvevict_llama::ScoreRows::per_head;
      std::optional<kvtools::AtomicOutput> kept_file;
      if (!kept_out.empty()) {
        try {
          kept_file.emplace(kept_out);
        } catch (const std::runtime_error& e) {
          throw kvcli::UsageError("--kept-out", e.what());
        }
        pr.kept = &kept_file->stream();
      }
      const int rc = kvevict_llama_tool::run_parallel(pr);
      if (kept_file) {
        try {
          kept_file->commit();
        } catch (const std::runtime_error& e) {
          throw std::runtime_error(std::string("--kept-out: ") + e.what());
        }
      }
      llama_backend_free();
      return rc;
    }
    const std::size_t n_ctx = ctx_text.empty() ? N : kvcli::parse_count(ctx_text, "--ctx-size", 1, 1u << 24);
    const std::string ctx_flag = ctx_text.empty() ? "--ctx-size (default P + steps)" : "--ctx-size";
    const std::string ctx_named = ctx_text.empty() ? "the default --ctx-size (P + steps = " + std::to_string(n_ctx) + ")"
                                                   : "--ctx-size " + std::to_string(n_ctx);
    // A bounded prefill holds at most k + C of the prompt's positions (cut after every chunk).
    if (P > n_ctx && !(bounded && std::min(P, k + C) <= n_ctx))
      throw kvcli::UsageError(ctx_flag, "the prompt's P = " + std::to_string(P) + " tokens do not fit in " +
                                            std::to_string(n_ctx) + " cells; raise --ctx-size or shorten the prompt" +
                                            (bounded ? " (with --bounded-prefill: k + --batch = " +
                                                           std::to_string(k + C) + " cells)"
                                                     : std::string()));
    if (full && N > n_ctx)
      throw kvcli::UsageError(ctx_flag, std::to_string(N) + " positions (P + steps) do not fit in " +
                                            std::to_string(n_ctx) + " cells with --policy full; raise --ctx-size");
    if (!full && k + 1 > n_ctx)
      throw kvcli::UsageError(flags.budget_flag, "k = " + std::to_string(k) + " exceeds the context: " + ctx_named +
                                                     " holds at most " + std::to_string(n_ctx - 1) +
                                                     " kept positions besides the token being decoded; lower " +
                                                     flags.budget_flag + " or raise --ctx-size");

    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx = static_cast<uint32_t>(n_ctx);
    cparams.n_batch = static_cast<uint32_t>(C);
    cparams.n_ubatch = static_cast<uint32_t>(C);
    cparams.n_seq_max = 1;
    cparams.swa_full = swa_full == "on";
    cparams.n_threads = threads;
    cparams.n_threads_batch = threads;
    cparams.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cparams.no_perf = true;
    std::unique_ptr<kvevict_llama::Evictor> ev;
    if (!no_kvevict && !(full && flash)) {  // a full cache with flash attention: no scores, nothing to track
      ev = std::make_unique<kvevict_llama::Evictor>(policy, config, params, N, !full);
      if (score_rows == "summed") ev->set_score_rows(kvevict_llama::ScoreRows::summed);
      if (bounded) ev->set_bounded_prefill(C);
      cparams.cb_eval = kvevict_llama::eval_callback;
      cparams.cb_eval_user_data = ev.get();
    }
    std::unique_ptr<llama_context, decltype(&llama_free)> ctx(llama_init_from_model(model.get(), cparams), llama_free);
    if (!ctx) throw std::runtime_error("llama_init_from_model failed");
    llama_memory_t mem = llama_get_memory(ctx.get());
    if (ev) {
      try {
        ev->attach(ctx.get(), model.get());
      } catch (const std::invalid_argument& e) {
        throw kvcli::UsageError("--model", e.what());
      }
      if (!trace_out.empty()) ev->record_trace();
      if (!keys_out.empty()) ev->record_keys();
    }
    std::optional<kvtools::AtomicOutput> kept_out_file;  // renamed into place once the run succeeded
    if (!kept_out.empty()) {
      try {
        kept_out_file.emplace(kept_out);
      } catch (const std::runtime_error& e) {
        throw kvcli::UsageError("--kept-out", e.what());
      }
    }
    std::ostream* kept_file = kept_out_file ? &kept_out_file->stream() : nullptr;

    llama_batch batch = llama_batch_init(static_cast<int32_t>(C), 0, 1);
    struct BatchGuard {
      llama_batch& b;
      ~BatchGuard() { llama_batch_free(b); }
    } batch_guard{batch};
    std::size_t next_pos = 0;
    std::vector<std::int64_t> before;
    // Decodes tokens[from, from + n) (the last one with logits) and lets kvevict score and evict.
    auto decode = [&](const llama_token* ids, std::size_t n, std::size_t step) {
      const std::size_t first = ev ? static_cast<std::size_t>(ev->begin(n)) : next_pos;
      if (ev) before = ev->kept();
      batch.n_tokens = static_cast<int32_t>(n);
      for (std::size_t i = 0; i < n; ++i) {
        batch.token[i] = ids[i];
        batch.pos[i] = static_cast<llama_pos>(first + i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i + 1 == n;
      }
      const int rc = llama_decode(ctx.get(), batch);
      if (ev) kvevict_llama::take_callback_error();
      if (rc != 0) throw std::runtime_error("llama_decode returned " + std::to_string(rc));
      next_pos = first + n;
      if (!ev) return;
      try {
        ev->end();
      } catch (const kvevict_llama::SeqRmRefused& e) {
        throw kvcli::UsageError("--model", e.what());
      }
      if (ev->prompt_len() != 0) {
        check_step(*ev, mem, k, n, before, first, step);
        if (kept_file && ev->cache()) write_kept_line(*kept_file, first, *ev->cache());
      }
    };
    auto logits_row = [&]() { return llama_get_logits_ith(ctx.get(), -1); };
    const int n_vocab = llama_vocab_n_tokens(vocab);

    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < P; i += C) decode(tokens.data() + i, std::min(C, P - i), i);
    if (ev) {
      try {
        ev->end_prompt();
      } catch (const kvevict_llama::SeqRmRefused& e) {
        throw kvcli::UsageError("--model", e.what());
      }
      if (kept_file && ev->cache()) write_kept_line(*kept_file, P - 1, *ev->cache());
    }
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu1 = cpu_seconds();

    std::vector<llama_token> out;
    double nll = 0.0;
    auto greedy = [&]() {
      const float* l = logits_row();
      return static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
    };
    auto target_nll = [&](llama_token target) {
      const float* l = logits_row();
      const float m = *std::max_element(l, l + n_vocab);
      double s = 0.0;
      for (int i = 0; i < n_vocab; ++i) s += std::exp(static_cast<double>(l[i] - m));
      return -(static_cast<double>(l[target] - m) - std::log(s));
    };
    if (teacher) {
      for (std::size_t i = 0; i < T; ++i) {
        decode(&tokens[P + i], 1, P + i);
        nll += target_nll(tokens[P + i + 1]);
      }
    } else {
      for (std::size_t i = 0; i < T; ++i) {
        const llama_token id = greedy();
        out.push_back(id);
        decode(&id, 1, P + i);
        if (!ignore_eos && llama_vocab_is_eog(vocab, id)) break;
      }
    }
    const auto t2 = std::chrono::steady_clock::now();
    const double decode_cpu = cpu_seconds() - cpu1;
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    const std::size_t steps_done = teacher ? decode_steps : out.size();

    if (teacher) {
      std::printf("{\"nll\":%.6f,\"predictions\":%zu,\"prompt\":%zu,\"policy\":\"%s\",\"k\":%zu}\n",
                  nll / static_cast<double>(T), T, P, flags.policy.c_str(), k);
    } else {
      std::printf("ids:");
      for (llama_token id : out) std::printf(" %d", id);
      std::printf("\n");
    }
    if (std::fflush(stdout) != 0) throw std::runtime_error("stdout: write error");
    if (!trace_out.empty()) {
      replay::Trace tr;
      tr.n_q_heads = ev->n_q_heads();
      tr.n_tokens = N;
      tr.prompt_len = P;
      tr.q_heads_per_kv = ev->n_q_heads();
      tr.logits = ev->trace();
      replay::save_trace_npy(tr, trace_out);
    }
    if (!keys_out.empty())
      replay::write_npy_f32(keys_out, {ev->n_kv_heads(), N, ev->head_dim()}, ev->recorded_keys().data());
    if (kept_out_file) {
      try {
        kept_out_file->commit();
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("--kept-out: ") + e.what());
      }
    }
    std::fprintf(stderr,
                 "kvevict-llama: [%s k=%zu] prompt %zu tok in %.3f s, %zu decode steps in %.3f s (%.2f tok/s; "
                 "%.3f CPU s, %.2f tok/CPU s)",
                 flags.policy.c_str(), k, P, prefill_s, steps_done, decode_s,
                 decode_s > 0 ? static_cast<double>(steps_done) / decode_s : 0.0, decode_cpu,
                 decode_cpu > 0 ? static_cast<double>(steps_done) / decode_cpu : 0.0);
    if (ev && !flash)
      std::fprintf(stderr, "; most cells seen %zu, dropped %zu, cells reused %zu, compactions %zu",
                   ev->cell_map().max_visible(), ev->dropped(), ev->cell_map().reused(), ev->compactions());
    if (ev && ev->layer_kinds().hybrid())
      std::fprintf(stderr, "; layers: %zu global of %zu (the others a sliding window of %zu; its cells seen %zu)",
                   ev->layer_kinds().n_global, ev->layer_kinds().global.size(), ev->layer_kinds().window,
                   ev->sliding_visible_cells());
    if (ev && flash)  // no kq_soft_max, so no mask: the cells are not tracked
      std::fprintf(stderr, "; dropped %zu, compactions %zu (flash attention: cells not tracked)", ev->dropped(),
                   ev->compactions());
    if (!trace_out.empty())
      std::fprintf(stderr, "; replay: kvevict-replay --logits %s --prompt-len %zu --q-heads-per-kv %zu --gen-steps %zu",
                   trace_out.c_str(), P, ev->n_q_heads(), std::max<std::size_t>(decode_steps, 1));
    std::fprintf(stderr, "\n");
    llama_backend_free();
    return kvcli::kExitOk;
  });
}
