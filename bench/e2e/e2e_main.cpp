// kvevict bench — e2e/e2e_main.cpp: kvevict-e2e, one end-to-end decode run (prefill, decode, batch) of one
// policy at one prompt length, printed as one CSV row; bench/e2e/run.sh runs the grid and writes the report.
// SPDX-License-Identifier: Apache-2.0
//
//   kvevict-e2e --model M.gguf --text doc.rst --prompt 2048 --generate 512 --policy keyformer
//               --budget 50% --batch-memory 2 --batch-steps 32 --threads 2 [--header]
//
// What one run measures (a fresh process per run, so that the peak RSS is this run's):
//  1. single sequence: the first `--prompt` P tokens of `--text` prefilled (one shot, next-token logits for
//     the last position only), then `--generate` G decode steps, each fed the greedy token (the end token
//     does not stop it: every run decodes exactly G tokens). Wall time of each phase, the KV bytes held
//     after the prompt and at most during decode, and the process's peak RSS after this phase
//     (getrusage ru_maxrss). The engine is built with `context = P + G`, so its buffers hold what this
//     sequence needs, no more.
//  2. batch at a fixed KV memory (unless `--batch-memory 0`): the budget is M = F full-cache sequences at
//     their last position, `F * kv_bytes_full(P + G)`; the sequences that fit are
//     `n = floor(M / held)`, `held` = the most KV bytes the single run held during decode (what a server
//     with a shared page pool allocates per sequence; this engine's own buffers are sized per sequence, see
//     bench/docs/end-to-end.md). n engines prefill the prompt together (`Engine::prefill_batch`: one forward pass),
//     then `--batch-steps` S steps of `Engine::step_batch` (each weight block read once for all n), timed:
//     aggregate tokens/s = n * S / seconds.
// stdout: a CSV row (--header: the header line first). stderr: one progress line per phase.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model_files.hpp"
#include "llama2/sampler.hpp"
#include "thread_pool.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Peak resident set of this process so far, in bytes (Linux: ru_maxrss is in KiB).
std::size_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::size_t>(usage.ru_maxrss) * 1024;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kvcli::UsageError("--text", "cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string default_text() {
  const char* shared = std::getenv("KVEVICT_SHARED_DIR");
  return std::string(shared && *shared ? shared : "../shared") + "/data/python-howto/tutorial.rst";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One end-to-end decode run of a Llama model with a kvevict policy: prefill, decode, and a batch at "
               "a fixed KV memory, as one CSV row (bench/e2e/run.sh runs the grid)."};
  std::string model_path, text_path = default_text(), prompt_text = "2048", generate_text = "512";
  std::string batch_memory_text = "2", batch_steps_text = "32", threads_text;
  bool header = false;
  kvcli::EvictionFlags flags;
  app.add_option("--model", model_path, "a llama-architecture GGUF or llama2.c checkpoint (default as kvevict-generate)");
  app.add_option("--text", text_path, "the document whose first --prompt tokens are the prompt (default "
                                      "$KVEVICT_SHARED_DIR/data/python-howto/tutorial.rst, else ../shared/...)");
  app.add_option("--prompt", prompt_text, "prompt length P in tokens (default 2048)")->type_name("INT");
  app.add_option("--generate", generate_text, "decode steps G (default 512); P + G must fit the model's context")
      ->type_name("INT");
  app.add_option("--batch-memory", batch_memory_text,
                 "the batch's KV memory in full-cache sequences F (default 2; 0 = no batch phase)")
      ->type_name("INT");
  app.add_option("--batch-steps", batch_steps_text, "timed step_batch steps S of the batch phase (default 32)")
      ->type_name("INT");
  kvcli::add_threads_option(app, threads_text);
  app.add_flag("--header", header, "print the CSV header line before the row");
  kvcli::ToolSpec spec;
  spec.default_policy = "full";
  kvcli::add_eviction_options(app, flags, spec);

  return kvcli::run_tool("kvevict-e2e", app, argc, argv, [&]() -> int {
    flags.validate();
    const std::size_t prompt_len = kvcli::parse_count(prompt_text, "--prompt", 1, 1u << 20);
    const std::size_t generate = kvcli::parse_count(generate_text, "--generate", 1, 1u << 20);
    const std::size_t batch_memory = kvcli::parse_count(batch_memory_text, "--batch-memory", 0, 1024);
    const std::size_t batch_steps = kvcli::parse_count(batch_steps_text, "--batch-steps", 1, 1u << 20);
    const unsigned threads = kvcli::parse_threads(threads_text);
    if (batch_steps > generate)
      throw kvcli::UsageError("--batch-steps", std::to_string(batch_steps) + " is above --generate " +
                                                   std::to_string(generate) + " (the engines hold P + G positions)");
    const std::string text = read_file(text_path);

    llama2::LoadedModel files = llama2::load_model(model_path, "", true);
    const llama2::Model& model = files.model;
    const llama2::Config& cfg = model.config();
    if (prompt_len + generate > cfg.seq_len)
      throw kvcli::UsageError("--generate", "--prompt " + std::to_string(prompt_len) + " plus --generate " +
                                                std::to_string(generate) + " exceeds the model's context of " +
                                                std::to_string(cfg.seq_len) + " positions");
    std::vector<int> tokens = files.tokenizer->encode(text, files.add_bos);
    if (tokens.size() < prompt_len)
      throw kvcli::UsageError("--text", "'" + text_path + "' has " + std::to_string(tokens.size()) +
                                            " tokens; --prompt asks for " + std::to_string(prompt_len));
    tokens.resize(prompt_len);

    const kvcli::Resolved resolved = kvcli::resolve(flags, prompt_len);
    llama2::EvictionSettings ev = llama2::eviction_settings(flags, resolved, flags.policy);
    ev.params.horizon = generate;
    ev.prompt_len = prompt_len;
    ev.context = prompt_len + generate;
    const std::string label = flags.policy == "full" ? "full" : flags.policy + " " + resolved.describe();

    // ---- 1. one sequence ----
    kvtools::ThreadPool pool(threads);
    std::unique_ptr<llama2::Engine> engine = llama2::make_engine(model, ev);
    engine->set_pool(threads > 1 ? &pool : nullptr);
    engine->set_prefill_logits(llama2::PrefillLogits::last);
    auto t0 = Clock::now();
    const llama2::RowMatrix& prompt_logits = engine->prefill(tokens);
    const double prefill_s = seconds_since(t0);
    const std::size_t held_prompt = engine->kv_bytes_held();
    int next = llama2::argmax(prompt_logits.data(), cfg.vocab_size);
    std::cerr << "kvevict-e2e: [" << label << "] P=" << prompt_len << " prefill " << prefill_s << " s\n";
    std::size_t held_decode = 0;
    t0 = Clock::now();
    for (std::size_t i = 0; i < generate; ++i) {
      const float* logits = engine->step(next);
      held_decode = std::max(held_decode, engine->kv_bytes_held());
      next = llama2::argmax(logits, cfg.vocab_size);
    }
    const double decode_s = seconds_since(t0);
    const std::size_t kv_full = engine->kv_bytes_full();  // at position P + G
    const std::size_t rss = peak_rss_bytes();
    std::cerr << "kvevict-e2e: [" << label << "] decode " << generate << " tok in " << decode_s << " s ("
              << static_cast<double>(generate) / decode_s << " tok/s)\n";
    engine.reset();

    // ---- 2. a batch in the KV memory of F full sequences ----
    std::size_t fit = 0;
    double batch_prefill_s = 0.0, batch_s = 0.0;
    if (batch_memory > 0) {
      fit = batch_memory * kv_full / held_decode;
      std::vector<std::unique_ptr<llama2::Engine>> owned;
      std::vector<llama2::Engine*> batch;
      for (std::size_t i = 0; i < fit; ++i) {
        llama2::EvictionSettings evi = ev;
        evi.seed = ev.seed + i;  // independent Gumbel noise per sequence (Keyformer); other policies ignore it
        owned.push_back(llama2::make_engine(model, evi));
        owned.back()->set_pool(threads > 1 ? &pool : nullptr);
        owned.back()->set_prefill_logits(llama2::PrefillLogits::last);
        batch.push_back(owned.back().get());
      }
      t0 = Clock::now();
      const llama2::RowMatrix& logits0 =
          llama2::Engine::prefill_batch(*batch[0], std::vector<llama2::Engine*>(batch.begin() + 1, batch.end()), tokens);
      batch_prefill_s = seconds_since(t0);
      std::vector<int> next_ids(fit, llama2::argmax(logits0.data(), cfg.vocab_size));
      t0 = Clock::now();
      for (std::size_t s = 0; s < batch_steps; ++s) {
        llama2::Engine::step_batch(batch, next_ids);
        for (std::size_t i = 0; i < fit; ++i) next_ids[i] = llama2::argmax(batch[i]->logits(), cfg.vocab_size);
      }
      batch_s = seconds_since(t0);
      std::cerr << "kvevict-e2e: [" << label << "] batch of " << fit << " in " << batch_memory
                << " full sequences' KV: " << static_cast<double>(fit * batch_steps) / batch_s << " tok/s\n";
    }

    if (header)
      std::cout << "policy,label,k,prompt,generate,threads,prefill_s,decode_s,decode_tok_s,kv_held_prompt_bytes,"
                   "kv_held_decode_bytes,kv_full_bytes,peak_rss_bytes,batch_memory_seqs,batch_seqs,batch_steps,"
                   "batch_prefill_s,batch_decode_s,batch_tok_s\n";
    std::cout.precision(6);
    std::cout << flags.policy << ',' << label << ','
              << (flags.policy == "full" ? prompt_len + generate : resolved.k) << ',' << prompt_len << ','
              << generate << ',' << threads << ',' << prefill_s << ',' << decode_s << ','
              << static_cast<double>(generate) / decode_s << ',' << held_prompt << ',' << held_decode << ','
              << kv_full << ',' << rss << ',' << batch_memory << ',' << fit << ',' << batch_steps << ','
              << batch_prefill_s << ',' << batch_s << ','
              << (batch_s > 0 ? static_cast<double>(fit * batch_steps) / batch_s : 0.0) << '\n';
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("stdout: write error");
    return kvcli::kExitOk;
  });
}
