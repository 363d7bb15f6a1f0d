// kvevict tools — kvevict-generate: text generation with a Llama model (GGUF or llama2.c) whose KV cache
// is evicted by kvevict (Keyformer, H2O, StreamingLLM, window, TOVA, SnapKV) or kept in full.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-generate --prompt "Once upon a time" --policy keyformer --budget 50% --steps 200
//   kvevict-generate --prompt-ids 1 --temperature 0 --print-ids      # no tokenizer needed
//   kvevict-generate --prompt "Once upon a time" --dump-logits layer0.json --dump-layer 0   # a kvevict-replay trace
//
// stdout: the text (prompt + generation), or the generated ids one per line with --print-ids.
// stderr: one summary line (resolved k, w, sinks; tokens/s; retained KV entries per layer; KV bytes held vs
//         full cache; why generation stopped); with --dump-logits, a line naming the trace and its replay
//         command comes first.
// The shared flags (--policy, --budget, --recent, --sinks, --tau-init, --tau-end, --seed), the environment
// variables (KVEVICT_SHARED_DIR, KVEVICT_MODEL_DIR) and the exit codes are those of every kvevict tool
// (tools/cli, docs/tools.md): 0 ok, 2 usage or input error (bad flag, model, tokenizer,
// prompt), 1 failure at run time.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/logit_dump.hpp"
#include "llama2/model.hpp"
#include "llama2/model_files.hpp"
#include "llama2/sampler.hpp"
#include "llama2/tokenizer.hpp"

namespace {

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const bool digits = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || item.size() > 9)
      throw kvcli::UsageError("--prompt-ids", "expected comma-separated token ids such as 1,403,261, got '" + text + "'");
    ids.push_back(std::stoi(item));
  }
  if (ids.empty()) throw kvcli::UsageError("--prompt-ids", "is empty; give token ids such as 1,403,261");
  return ids;
}

std::string format_bytes(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text with a llama2.c model whose KV cache is managed by kvevict."};
  std::string model_path, tokenizer_path, prompt, prompt_ids_text, steps_text = "256", temperature_text = "0.8";
  std::string dump_path, dump_layer_text = "0", threads_text;
  bool print_ids = false, no_noise = false;
  kvcli::EvictionFlags flags;
  app.add_option("--model", model_path,
                 "a llama-architecture GGUF file or a llama2.c .bin checkpoint (the format is read from the file's "
                 "magic), or a folder holding exactly one (default: $KVEVICT_MODEL_DIR, else "
                 "$KVEVICT_SHARED_DIR/models/stories260K, else ../shared/models/stories260K)");
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece .model (default: a GGUF model's own vocabulary, else the .model beside the "
                 "checkpoint)");
  auto* prompt_opt = app.add_option("--prompt", prompt, "prompt text (BOS is prepended for llama2.c models, and for GGUF "
                                    "models whose tokenizer.ggml.add_bos_token says so)");
  app.add_option("--prompt-ids", prompt_ids_text, "prompt as token ids, e.g. 1,403,261 (used as given: include BOS = 1)")
      ->excludes(prompt_opt);
  app.add_option("--steps", steps_text,
                 "tokens to generate at most (default 256); stops early at the end token (llama2.c: BOS, GGUF: EOS) "
                 "or when the token predicted at the model's last position is out")
      ->type_name("INT");
  app.add_option("--temperature", temperature_text, "sampling temperature, >= 0; 0 = greedy (default 0.8)")
      ->type_name("FLOAT");
  kvcli::ToolSpec spec;
  spec.default_policy = "full";
  spec.seed_sampler = true;  // --seed also seeds the sampler, for every policy
  spec.kv_layout = true;
  spec.layer_budgets = true;
  spec.prefill_chunk = true;
  spec.prefill_chunk_help = "prefill the prompt in chunks of C tokens (docs/long-prompts.md); the ids equal "
                            "the one-shot prefill's for every policy (the noise is a function of the token's "
                            "position); default: one shot";
  kvcli::add_eviction_options(app, flags, spec);
  app.add_flag("--no-noise", no_noise, "Keyformer without Gumbel noise (deterministic)");
  app.add_option("--threads", threads_text,
                 "worker threads of the engine's step and prefill (attention heads, the caches' scoring), >= 1 "
                 "(default: the number of hardware threads); the output is the same for every count")
      ->type_name("INT");
  app.add_flag("--print-ids", print_ids, "print the generated token ids, one per line, instead of text");
  auto* dump_opt = app.add_option("--dump-logits", dump_path,
                                  "write block --dump-layer's attention logits for the whole run (full cache) as a "
                                  "kvevict-replay trace: FILE.npy (float32 [H_q, N, N]) or JSON");
  app.add_option("--dump-layer", dump_layer_text, "block whose logits --dump-logits writes (default 0)")
      ->type_name("INT")
      ->needs(dump_opt);

  return kvcli::run_tool("kvevict-generate", app, argc, argv, [&]() -> int {
    // ---- every flag first (no file is read before the flags are known to be good) ----
    flags.validate();
    std::size_t steps = kvcli::parse_count(steps_text, "--steps");
    const float temperature = kvcli::parse_float(temperature_text, "--temperature");
    if (temperature < 0.0f)
      throw kvcli::UsageError("--temperature", "must be >= 0 (got " + temperature_text + "); 0 = greedy");
    const std::size_t dump_layer = kvcli::parse_count(dump_layer_text, "--dump-layer");
    const unsigned threads = kvcli::parse_threads(threads_text);
    const std::size_t prefill_chunk = flags.prefill_chunk;
    const bool bounded_prefill = flags.bounded_prefill;
    if (no_noise && flags.policy != "keyformer")
      throw kvcli::UsageError("--no-noise", "only --policy keyformer adds Gumbel noise (the policy is " + flags.policy +
                                                "); drop --no-noise");
    if (!dump_path.empty() && flags.policy != "full")
      throw kvcli::UsageError("--dump-logits", "records the full cache's attention; use it with --policy full (got "
                                               "--policy " + flags.policy + ")");
    if (!dump_path.empty() && flags.paged)
      throw kvcli::UsageError("--dump-logits", "records a contiguous full cache; drop --kv-layout paged");
    const std::vector<int> given_ids = prompt_ids_text.empty() ? std::vector<int>() : parse_ids(prompt_ids_text);
    if (!dump_path.empty()) {  // no output may be an input: checked before anything is loaded or written
      kvcli::FileRoles roles;
      llama2::add_model_inputs(roles, model_path, tokenizer_path);
      roles.output("--dump-logits", dump_path).check();
      kvcli::check_output_file(dump_path, "--dump-logits");
    }

    // ---- locate, recognise and load the model and its tokenizer (needed for --prompt and text output) ----
    llama2::LoadedModel files = llama2::load_model(model_path, tokenizer_path, prompt_ids_text.empty() || !print_ids);
    const std::string& model_file = files.model_file;
    const llama2::Model& model = files.model;
    const llama2::Config& cfg = model.config();
    const std::optional<llama2::Tokenizer>& tokenizer = files.tokenizer;

    // ---- prompt ----
    const std::string prompt_flag = prompt_ids_text.empty() ? "--prompt" : "--prompt-ids";
    const std::vector<int> prompt_ids = [&] {
      if (!prompt_ids_text.empty()) return given_ids;
      try {
        return tokenizer->encode(prompt, files.add_bos);
      } catch (const std::invalid_argument& e) {  // a byte the vocabulary cannot encode, or no BOS token
        throw kvcli::UsageError("--prompt", "cannot be encoded with " + files.tokenizer_source + ": " +
                                                kvcli::strip_origin(e.what()));
      }
    }();
    if (prompt_ids.empty()) throw kvcli::UsageError("--prompt", "encodes to no tokens; give a non-empty prompt");
    for (int id : prompt_ids)
      if (id < 0 || static_cast<std::size_t>(id) >= cfg.vocab_size)
        throw kvcli::UsageError("--prompt-ids", "token id " + std::to_string(id) +
                                                    " is outside the model's vocabulary [0, " +
                                                    std::to_string(cfg.vocab_size) + ")");
    if (prompt_ids.size() > cfg.seq_len)
      throw kvcli::UsageError(prompt_flag, "the prompt has " + std::to_string(prompt_ids.size()) +
                                               " tokens; the model's context is " + std::to_string(cfg.seq_len) +
                                               " positions; give a shorter prompt");
    if (dump_layer >= cfg.n_layers)
      throw kvcli::UsageError("--dump-layer", std::to_string(dump_layer) + " is out of range: the model has " +
                                                  std::to_string(cfg.n_layers) + " layers (0.." +
                                                  std::to_string(cfg.n_layers - 1) + ")");
    // The prompt fills positions 0..P-1; the token predicted at the last position seq_len - 1 is the
    // (seq_len - P + 1)-th generated token, and it needs no position of its own (llama2.c does the same).
    const std::size_t context_limit = cfg.seq_len - prompt_ids.size() + 1;
    steps = std::min(steps, context_limit);

    // ---- eviction policy: k, w, sinks resolved as every kvevict tool resolves them ----
    const kvcli::Resolved resolved = kvcli::resolve(flags, prompt_ids.size());
    llama2::EvictionSettings ev = llama2::eviction_settings(flags, resolved, flags.policy);
    ev.params.horizon = std::max<std::size_t>(steps, 1);
    ev.params.gumbel_noise = !no_noise;
    ev.prompt_len = prompt_ids.size();
    try {  // a schedule that does not fit the model (weights per layer, floor) names the flag
      (void)llama2::layer_budget_tokens(ev, cfg.n_layers);
    } catch (const std::invalid_argument& e) {
      throw kvcli::UsageError("--layer-budgets", kvcli::strip_origin(e.what()));
    }
    ev.prefill_chunk = prefill_chunk;
    ev.bounded_prefill = bounded_prefill;
    if (bounded_prefill && resolved.k + prefill_chunk > cfg.seq_len + 1)
      throw kvcli::UsageError("--bounded-prefill", "budget k = " + std::to_string(resolved.k) + " plus --prefill-chunk " +
                                                       std::to_string(prefill_chunk) + " exceeds the model's context + 1 = " +
                                                       std::to_string(cfg.seq_len + 1) + " slots");
    std::optional<llama2::LogitDump> dump;
    if (!dump_path.empty()) dump.emplace(dump_layer, cfg.n_heads, cfg.n_kv_heads);
    llama2::PagedKVOptions paged_options;
    paged_options.page_size = flags.page_size;
    llama2::Engine engine = flags.paged
                                ? llama2::Engine(model, paged_options,
                                                 llama2::make_paged_cache_factory(ev, cfg.n_heads, cfg.n_layers))
                                : llama2::Engine(model,
                                                 dump ? dump->factory()
                                                      : llama2::make_cache_factory(ev, cfg.n_heads, cfg.n_layers),
                                                 prefill_chunk);
    engine.set_threads(threads);
    engine.set_prefill_logits(llama2::PrefillLogits::last);  // generation reads the last position's only
    llama2::Sampler sampler(temperature, flags.seed);

    // ---- generate ----
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const llama2::RowMatrix& prompt_logits = engine.prefill(prompt_ids);
    const float* logits = prompt_logits.row(prompt_logits.rows() - 1).data();
    const auto t1 = Clock::now();
    std::vector<int> generated;
    std::string stopped;
    while (stopped.empty()) {
      if (generated.size() == steps) {
        stopped = steps == context_limit
                      ? "the model's context of " + std::to_string(cfg.seq_len) + " positions is reached"
                      : "--steps " + std::to_string(steps) + " tokens generated";
        break;
      }
      const int next = sampler.sample(logits, cfg.vocab_size);
      if (next == files.end_id) {  // llama2.c: BOS ends the story; GGUF: the vocabulary's EOS
        stopped = files.end_name();
        break;
      }
      generated.push_back(next);
      if (generated.size() < steps) logits = engine.step(next);
    }
    const auto t2 = Clock::now();
    if (dump) {  // the tokens the engine ran: the prompt and every generated token but the last
      std::vector<int> ran(prompt_ids.begin(), prompt_ids.end());
      ran.insert(ran.end(), generated.begin(), generated.end());
      ran.resize(engine.position());
      dump->write(dump_path, model_file, ran);
      const bool npy = dump_path.size() >= 4 && dump_path.compare(dump_path.size() - 4, 4, ".npy") == 0;
      std::cerr << "kvevict-generate: wrote layer " << dump_layer << "'s logits for " << engine.position()
                << " tokens; replay them with: kvevict-replay "
                << (npy ? "--logits " + dump_path + " --prompt-len " + std::to_string(prompt_ids.size()) +
                              " --q-heads-per-kv " + std::to_string(cfg.n_heads / cfg.n_kv_heads)
                        : dump_path)
                << " --policy ...\n";
    }

    // ---- output ----
    if (print_ids) {
      for (int id : generated) std::cout << id << '\n';
    } else {
      std::vector<int> all(prompt_ids.begin(), prompt_ids.end());
      all.insert(all.end(), generated.begin(), generated.end());
      std::cout << tokenizer->decode(all) << '\n';
    }
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("stdout: write error");
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    std::ostringstream summary;
    summary.precision(1);
    summary << std::fixed << "[" << flags.policy;
    if (flags.policy != "full") summary << ' ' << resolved.describe();
    if (ev.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform)
      summary << " layer-budgets=" << flags.layer_budgets_label;
    const bool adaptive = ev.head_budgets.is_adaptive();
    if (adaptive) summary << " head-budgets=adaptive:" << std::setprecision(2) << ev.head_budgets.floor << std::setprecision(1);
    summary << "] prompt " << prompt_ids.size() << " tok (" << prefill_s * 1e3 << " ms), generated " << generated.size()
            << " tok, " << (decode_s > 0 ? static_cast<double>(generated.size()) / decode_s : 0.0)
            << " tok/s | retained per layer" << (adaptive ? " (mean over KV heads, which differ)" : "") << ":";
    // Head-adaptive budgets: the KV heads of a layer hold different counts whose total is k x KV heads.
    auto retained = [&](std::size_t l) {
      if (!adaptive) return engine.retained(l);
      std::size_t sum = 0;
      for (std::size_t j = 0; j < cfg.n_kv_heads; ++j) sum += engine.retained(l, j);
      return sum / cfg.n_kv_heads;
    };
    bool all_equal = true;
    for (std::size_t l = 1; l < cfg.n_layers; ++l) all_equal = all_equal && retained(l) == retained(0);
    if (all_equal && cfg.n_layers > 8)  // e.g. SmolLM2's 30 layers: "1024 (each of 30 layers)"
      summary << ' ' << retained(0) << " (each of " << cfg.n_layers << " layers)";
    else
      for (std::size_t l = 0; l < cfg.n_layers; ++l) summary << ' ' << retained(l);
    summary << " of " << engine.position() << " | KV held " << format_bytes(engine.kv_bytes_held()) << " vs full "
            << format_bytes(engine.kv_bytes_full()) << " ("
            << 100.0 * static_cast<double>(engine.kv_bytes_held()) / static_cast<double>(engine.kv_bytes_full())
            << "%)";
    if (engine.paged())
      summary << " | pages in use " << engine.pages_in_use() << ", freed " << engine.pages_freed() << " (page size "
              << flags.page_size << ", " << (flags.evict_pages ? "page" : "token") << " unit)";
    summary << " | stopped: " << stopped;
    std::cerr << summary.str() << std::endl;
    return kvcli::kExitOk;
  });
}
