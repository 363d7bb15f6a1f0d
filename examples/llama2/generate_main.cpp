// kvevict example — kvevict-generate: text generation with a llama2.c checkpoint whose KV cache
// is evicted by kvevict (Keyformer, H2O, StreamingLLM, window, TOVA) or kept in full.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-generate --prompt "Once upon a time" --policy keyformer --budget 50% --steps 200
//   kvevict-generate --prompt-ids 1 --temperature 0 --print-ids      # no tokenizer needed
//   kvevict-generate --prompt "Once upon a time" --dump-logits layer0.json --dump-layer 0   # a kvevict-replay trace
//
// stdout: the text (prompt + generation), or the generated ids one per line with --print-ids.
// stderr: one summary line (tokens/s, retained KV entries per layer, KV bytes held vs full cache);
//         with --dump-logits, a line naming the trace and its replay command comes first.
// Exit codes: 0 ok, 1 bad input or runtime error, 2 model or tokenizer not found.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/logit_dump.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "llama2/tokenizer.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int kExitMissingModel = 2;
constexpr const char* kDefaultModelDir = "../shared/models/stories260K";

// The model directory: $KVEVICT_MODEL_DIR, else ../shared/models/stories260K (relative to the CWD).
std::string default_model_dir() {
  const char* env = std::getenv("KVEVICT_MODEL_DIR");
  return (env != nullptr && *env != '\0') ? env : kDefaultModelDir;
}

// The first file (by name) in `dir` with extension `ext` whose name does not start with `skip_prefix`.
std::optional<fs::path> find_in_dir(const fs::path& dir, const std::string& ext, const std::string& skip_prefix) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && entry.path().extension() == ext &&
        (skip_prefix.empty() || name.rfind(skip_prefix, 0) != 0))
      found.push_back(entry.path());
  }
  if (found.empty()) return std::nullopt;
  return *std::min_element(found.begin(), found.end());
}

[[noreturn]] void missing(const std::string& what, const std::string& path) {
  std::cerr << "kvevict-generate: no " << what << " at '" << path << "'.\n"
            << "Download stories260K.bin and tok512.model from Hugging Face karpathy/tinyllamas (folder stories260K,\n"
            << "https://huggingface.co/karpathy/tinyllamas) into " << kDefaultModelDir
            << " (relative to the working directory),\n"
            << "or point --model/--tokenizer or the environment variable KVEVICT_MODEL_DIR at a llama2.c model.\n";
  std::exit(kExitMissingModel);
}

// "50%" -> ratio 0.5 (of `ratio_of`); "64" -> 64 tokens. Throws CLI::ValidationError otherwise.
struct Amount {
  bool is_ratio = false;
  double ratio = 0.0;
  std::size_t tokens = 0;
};
Amount parse_amount(const std::string& text, const std::string& option) {
  Amount a;
  try {
    std::size_t used = 0;
    if (!text.empty() && text.back() == '%') {
      a.is_ratio = true;
      a.ratio = std::stod(text.substr(0, text.size() - 1), &used) / 100.0;
      if (used + 1 == text.size()) return a;
    } else if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
      a.tokens = static_cast<std::size_t>(std::stoull(text, &used));
      return a;
    }
  } catch (const std::exception&) {
  }
  throw CLI::ValidationError(option, "expected a token count such as 64 or a percentage such as 50%, got '" + text + "'");
}

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      ids.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw CLI::ValidationError("--prompt-ids", "expected comma-separated integers such as 1,403,261, got '" + text + "'");
    }
  }
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
  std::string model_path, tokenizer_path, prompt, prompt_ids_text, policy = "full", budget_text = "50%", recent_text;
  std::size_t steps = 256, sinks = 4;
  float temperature = 0.8f, tau_init = 1.0f, tau_end = 2.0f;
  std::uint64_t seed = 42;
  bool print_ids = false, no_noise = false;
  app.add_option("--model", model_path,
                 "llama2.c .bin checkpoint, or a directory holding one (default: $KVEVICT_MODEL_DIR or " +
                     std::string(kDefaultModelDir) + ")");
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece .model (default: the .model beside the checkpoint)");
  app.add_option("--prompt", prompt, "prompt text (BOS is prepended)");
  app.add_option("--prompt-ids", prompt_ids_text, "prompt as token ids, e.g. 1,403,261 (used as given: include BOS = 1)")
      ->excludes(app.get_option("--prompt"));
  // Counts are unsigned: CLI11 would wrap "-1" to 2^64 - 1, so reject a sign before conversion.
  const CLI::Validator count(
      [](std::string& v) {
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return "expected a non-negative integer, got '" + v + "'";
        try {
          (void)std::stoull(v);
        } catch (const std::out_of_range&) {
          return "'" + v + "' exceeds 2^64 - 1";
        }
        return std::string();
      },
      "UINT");
  app.add_option("--steps", steps, "tokens to generate at most (stops early at BOS or the end of the context)")
      ->check(count)
      ->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--seed", seed, "seed of the sampler and of Keyformer's Gumbel noise")
      ->check(count)
      ->capture_default_str();
  app.add_option("--policy", policy, "KV-cache policy")
      ->check(CLI::IsMember({"full", "keyformer", "h2o", "streaming", "window", "tova"}))
      ->capture_default_str();
  app.add_option("--budget", budget_text, "KV entries kept per head: tokens (64) or percent of the prompt (50%)")
      ->capture_default_str();
  app.add_option("--recent", recent_text,
                 "recent window: tokens (8) or percent of the budget (30%); default 30%, 0 for tova");
  app.add_option("--sinks", sinks, "StreamingLLM attention sinks")->check(count)->capture_default_str();
  app.add_option("--tau-init", tau_init, "Keyformer temperature at prefill")->capture_default_str();
  app.add_option("--tau-end", tau_end, "Keyformer temperature after the last step")->capture_default_str();
  app.add_flag("--no-noise", no_noise, "Keyformer without Gumbel noise (deterministic)");
  app.add_flag("--print-ids", print_ids, "print the generated token ids, one per line, instead of text");
  std::string dump_path;
  std::size_t dump_layer = 0;
  auto* dump_opt = app.add_option("--dump-logits", dump_path,
                                  "write block --dump-layer's attention logits for the whole run (full cache) as a "
                                  "kvevict-replay trace: FILE.npy (float32 [H_q, N, N]) or JSON");
  app.add_option("--dump-layer", dump_layer, "block whose logits --dump-logits writes")
      ->check(count)
      ->needs(dump_opt)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, the tool's prefix, and exit code 1 like every other bad input.
    std::cerr << "kvevict-generate: " << e.what() << " (see --help)\n";
    return 1;
  }

  try {
    // ---- locate and load the model (exit 2 when it is not there) ----
    if (model_path.empty()) model_path = default_model_dir();
    fs::path model_file = model_path;
    if (fs::is_directory(model_file)) {
      const auto found = find_in_dir(model_file, ".bin", "tok");
      if (!found) missing("llama2.c checkpoint (*.bin)", model_path);
      model_file = *found;
    }
    if (!fs::is_regular_file(model_file)) missing("model", model_file.string());
    const llama2::Model model = llama2::Model::load(model_file.string());
    const llama2::Config& cfg = model.config();

    std::optional<llama2::Tokenizer> tokenizer;
    if (tokenizer_path.empty()) {
      if (const auto found = find_in_dir(model_file.parent_path().empty() ? "." : model_file.parent_path(), ".model", ""))
        tokenizer_path = found->string();
    }
    const bool need_tokenizer = prompt_ids_text.empty() || !print_ids;
    if (!tokenizer_path.empty() && fs::is_regular_file(tokenizer_path)) {
      tokenizer.emplace(tokenizer_path);
    } else if (need_tokenizer) {
      missing("SentencePiece tokenizer (*.model)", tokenizer_path.empty() ? model_file.parent_path().string() : tokenizer_path);
    }
    if (tokenizer && static_cast<std::size_t>(tokenizer->vocab_size()) != cfg.vocab_size)
      throw std::runtime_error("tokenizer '" + tokenizer_path + "' has " + std::to_string(tokenizer->vocab_size()) +
                               " pieces but the model's vocab_size is " + std::to_string(cfg.vocab_size));

    // ---- prompt ----
    const int bos = tokenizer ? tokenizer->bos_id() : 1;
    const std::vector<int> prompt_ids = prompt_ids_text.empty() ? tokenizer->encode(prompt, true) : parse_ids(prompt_ids_text);
    if (prompt_ids.empty()) throw std::runtime_error("the prompt is empty");
    if (prompt_ids.size() >= cfg.seq_len)
      throw std::runtime_error("the prompt has " + std::to_string(prompt_ids.size()) +
                               " tokens; the model's context is " + std::to_string(cfg.seq_len));
    steps = std::min(steps, cfg.seq_len - prompt_ids.size());

    // ---- eviction policy ----
    llama2::EvictionSettings ev;
    ev.policy = policy;
    const Amount budget = parse_amount(budget_text, "--budget");
    ev.budget = budget.is_ratio ? kvevict::Budget::ratio(budget.ratio) : kvevict::Budget::tokens(budget.tokens);
    // TOVA has no recent window; StreamingLLM and window derive theirs from the budget (k - sinks).
    if (recent_text.empty())
      recent_text = (policy == "tova" || policy == "streaming" || policy == "window") ? "0" : "30%";
    const Amount recent = parse_amount(recent_text, "--recent");
    ev.recent = recent.is_ratio ? kvevict::RecentWindow::ratio(recent.ratio) : kvevict::RecentWindow::tokens(recent.tokens);
    ev.params.tau_init = tau_init;
    ev.params.tau_end = tau_end;
    ev.params.horizon = std::max<std::size_t>(steps, 1);
    ev.params.gumbel_noise = !no_noise;
    ev.params.sinks = sinks;
    ev.seed = seed;
    std::optional<llama2::LogitDump> dump;
    if (!dump_path.empty()) {
      if (policy != "full")
        throw std::runtime_error("--dump-logits records the full cache's attention; use it with --policy full");
      if (dump_layer >= cfg.n_layers)
        throw std::runtime_error("--dump-layer " + std::to_string(dump_layer) + " is out of range: the model has " +
                                 std::to_string(cfg.n_layers) + " layers");
      dump.emplace(dump_layer, cfg.n_heads, cfg.n_kv_heads);
    }
    llama2::Engine engine(model, dump ? dump->factory() : llama2::make_cache_factory(ev, cfg.n_heads));
    llama2::Sampler sampler(temperature, seed);

    // ---- generate ----
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const llama2::RowMatrix& prompt_logits = engine.prefill(prompt_ids);
    const float* logits = prompt_logits.row(prompt_logits.rows() - 1).data();
    const auto t1 = Clock::now();
    std::vector<int> generated;
    while (generated.size() < steps) {
      const int next = sampler.sample(logits, cfg.vocab_size);
      if (next == bos) break;  // llama2.c convention: BOS ends the story
      generated.push_back(next);
      if (generated.size() < steps) logits = engine.step(next);
    }
    const auto t2 = Clock::now();
    if (dump) {  // the tokens the engine ran: the prompt and every generated token but the last
      std::vector<int> ran(prompt_ids.begin(), prompt_ids.end());
      ran.insert(ran.end(), generated.begin(), generated.end());
      ran.resize(engine.position());
      dump->write(dump_path, model_file.string(), ran);
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
      std::cout << tokenizer->decode(all) << std::endl;
    }
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    std::ostringstream summary;
    summary.precision(1);
    summary << std::fixed << "[" << policy;
    if (policy != "full") summary << " budget=" << budget_text << " recent=" << recent_text;
    summary << "] prompt " << prompt_ids.size() << " tok (" << prefill_s * 1e3 << " ms), generated " << generated.size()
            << " tok, " << (decode_s > 0 ? static_cast<double>(generated.size()) / decode_s : 0.0)
            << " tok/s | retained per layer:";
    for (std::size_t l = 0; l < cfg.n_layers; ++l) summary << ' ' << engine.retained(l);
    summary << " of " << engine.position() << " | KV held " << format_bytes(engine.kv_bytes_held()) << " vs full "
            << format_bytes(engine.kv_bytes_full()) << " ("
            << 100.0 * static_cast<double>(engine.kv_bytes_held()) / static_cast<double>(engine.kv_bytes_full())
            << "%)";
    std::cerr << summary.str() << std::endl;
    return 0;
  } catch (const CLI::ValidationError& e) {
    std::cerr << "kvevict-generate: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kvevict-generate: " << e.what() << '\n';
    return 1;
  }
}
