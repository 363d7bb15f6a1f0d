// kvevict — bench/quality: what eviction costs in model quality, on a real model and real text.
// SPDX-License-Identifier: Apache-2.0
//
// Protocol (issue "Main job on real input"): the validation text is tokenized
// like the llama2.c reference (paragraphs split on blank lines, each encoded
// with BOS prefixed, ids concatenated) and cut into consecutive windows of
// `--window` (512) tokens. In each window the first `--prompt` (256) tokens are
// prefilled with full causal attention; then every layer's cache is cut to
// `k = max(1, floor(r * prompt))` with `w = floor(0.3 * k)` (--recent; at least 1 when k >= 2; StreamingLLM:
// k - sinks, window: k, TOVA: 0), and the remaining tokens
// are teacher-forced with eviction at every step. For each decode step (token
// t = prompt .. window-2 fed, token t+1 predicted; 255 predictions) we compare
// the policy's next-token distribution q with the full cache's p:
//   NLL  = -log q(target)            (nats)
//   KL   = sum_v p(v) (log p(v) - log q(v))   KL(full || policy), nats
//   top1 = [argmax q == argmax p]
// Per-window means are the units; each reported mean comes with the standard
// error over windows. Keyformer with noise is run for `--seeds` seeds; its
// table entry is the mean over seeds (± std over seeds of the per-seed means).
//
// KV layout (issue 11): --shared-heads (one selection per layer for all KV heads, contiguous), or
// --kv-layout paged --page-size N --evict-unit token|page (the same flags as kvevict-generate, through
// the shared CLI layer): every policy engine of the sweep then uses that layout; the full-cache
// reference is always the contiguous full cache, so every layout is compared with the same p.
// bench/quality/run_paged.sh writes the committed token- vs page-granular rows (paged.md).
//
// Rows and prefill (issue 15): --policies picks the rows; --prefill-chunk C [--bounded-prefill] makes every
// policy engine prefill the prompt in chunks of C tokens (bounded: cut to k after every chunk), while the
// full-cache reference keeps the one-shot prefill. bench/quality/run_bounded.sh writes bounded.md.
//
// Output: long-format CSV (one row per policy/budget/seed/window), a summary
// CSV, gnuplot data + script (NLL and KL against budget; bench/quality/run.sh
// renders the PNG), Markdown tables on stdout; progress on stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"

namespace {

// One policy configuration of the sweep.
struct Run {
  std::string label;   // "keyformer", "keyformer-nonoise", "h2o", ...
  std::string policy;  // kvevict policy name
  double ratio = 0.0;  // budget fraction of the prompt
  bool noise = true;
  std::uint64_t seed = 0;
  kvcli::Resolved kws;  // k, w, sinks (resolved for the prompt length)
};

// Per-window result of one run.
struct WindowResult {
  double nll = 0.0, kl = 0.0, top1 = 0.0;
};

// Full-cache reference for one window: log-probabilities of each prediction.
struct Reference {
  std::vector<std::vector<float>> logp;  // [prediction][vocab]
  std::vector<int> argmax;
  double nll = 0.0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Paragraphs separated by blank lines, each encoded with BOS, concatenated
// (the tokenization of ../shared/reference/README.md).
std::vector<int> tokenize_corpus(const llama2::Tokenizer& tok, const std::string& text) {
  std::vector<int> ids;
  std::istringstream in(text);
  std::string line, para;
  auto flush = [&] {
    if (para.empty()) return;
    const auto p = tok.encode(para, true);
    ids.insert(ids.end(), p.begin(), p.end());
    para.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
    } else {
      if (!para.empty()) para += '\n';
      para += line;
    }
  }
  flush();
  return ids;
}

void log_softmax(const float* logits, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  const float m = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - m));
  const float lse = m + static_cast<float>(std::log(sum));
  for (std::size_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int> window_tokens(const std::vector<int>& ids, std::size_t w, std::size_t len) {
  return std::vector<int>(ids.begin() + static_cast<std::ptrdiff_t>(w * len),
                          ids.begin() + static_cast<std::ptrdiff_t>((w + 1) * len));
}

Reference full_reference(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt) {
  Reference ref;
  engine.reset();
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lp;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t) {
    log_softmax(engine.step(tokens[t]), vocab, lp);
    ref.nll -= lp[static_cast<std::size_t>(tokens[t + 1])];
    ref.argmax.push_back(argmax(lp));
    ref.logp.push_back(lp);
  }
  ref.nll /= static_cast<double>(ref.logp.size());
  return ref;
}

WindowResult evaluate(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                      const Reference& ref) {
  WindowResult r;
  engine.reset();
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lq;
  std::size_t i = 0;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t, ++i) {
    log_softmax(engine.step(tokens[t]), vocab, lq);
    r.nll -= lq[static_cast<std::size_t>(tokens[t + 1])];
    double kl = 0.0;
    const auto& lp = ref.logp[i];
    for (std::size_t v = 0; v < vocab; ++v) kl += std::exp(static_cast<double>(lp[v])) * (lp[v] - lq[v]);
    r.kl += kl;
    r.top1 += argmax(lq) == ref.argmax[i] ? 1.0 : 0.0;
  }
  r.nll /= static_cast<double>(i);
  r.kl /= static_cast<double>(i);
  r.top1 /= static_cast<double>(i);
  return r;
}

struct Stat {
  double mean = 0.0, se = 0.0;
};
Stat mean_se(const std::vector<double>& x) {
  Stat s;
  if (x.empty()) return s;
  for (double v : x) s.mean += v;
  s.mean /= static_cast<double>(x.size());
  if (x.size() > 1) {
    double var = 0.0;
    for (double v : x) var += (v - s.mean) * (v - s.mean);
    var /= static_cast<double>(x.size() - 1);
    s.se = std::sqrt(var / static_cast<double>(x.size()));
  }
  return s;
}

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string fmt_signed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f", prec, v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvevict quality report: NLL, KL(full || policy) and top-1 agreement of every eviction policy "
               "against the full KV cache, on consecutive windows of a text."};
  std::string model_path, tokenizer_path, data_path, windows_opt = "32", window_text = "512", prompt_text = "256",
                                                     seeds_text = "5", threads_text, step_threads_text = "1",
                                                     out_prefix = "quality", prefill_chunk_text;
  bool bounded_prefill = false;
  const std::vector<std::string> all_labels{"keyformer", "keyformer-nonoise", "h2o", "streaming", "window", "tova"};
  std::vector<std::string> labels = all_labels;
  std::vector<std::string> ratio_texts{"0.1", "0.2", "0.3", "0.5", "0.7", "0.9"};
  kvcli::EvictionFlags flags;
  app.add_option("--model", model_path,
                 "llama2.c checkpoint, or a folder holding exactly one (default: $KVEVICT_MODEL_DIR, else "
                 "$KVEVICT_SHARED_DIR/models/stories260K)");
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece model (default: the .model beside the checkpoint)");
  app.add_option("--data", data_path,
                 "validation text, paragraphs separated by blank lines (default: "
                 "$KVEVICT_SHARED_DIR/data/tinystories-val/tinystories_val.txt)");
  app.add_option("--windows", windows_opt, "number of windows from the start of the text, or 'all' (default 32)");
  app.add_option("--window", window_text, "tokens per window, >= 4 (default 512)");
  app.add_option("--prompt", prompt_text, "prompt tokens prefilled at full attention, <= --window - 2 (default 256)");
  app.add_option("--ratios", ratio_texts,
                 "budget fractions r of the prompt, in (0, 1]: k = max(1, floor(r * prompt)) (default "
                 "0.1,0.2,0.3,0.5,0.7,0.9)")
      ->delimiter(',');
  kvcli::ToolSpec spec;
  spec.policy = false;  // every policy is run
  spec.budget = false;  // --ratios sweeps the budget
  spec.seed = false;    // --seeds: Keyformer runs with seeds 1..S
  spec.kv_layout = true;  // --shared-heads, --kv-layout, --page-size, --evict-unit (as kvevict-generate)
  kvcli::add_eviction_options(app, flags, spec);
  app.add_option("--seeds", seeds_text, "Keyformer seeds (noise on): 1..S (default 5)");
  app.add_option("--policies", labels,
                 "rows to run, a subset of keyformer,keyformer-nonoise,h2o,streaming,window,tova (default: all)")
      ->delimiter(',');
  auto* chunk_opt = app.add_option("--prefill-chunk", prefill_chunk_text,
                                   "every policy prefills the prompt in chunks of C tokens (README \"Long prompts\"); "
                                   "default: one shot. The full-cache reference always prefills in one shot");
  app.add_flag("--bounded-prefill", bounded_prefill,
               "with --prefill-chunk: evict to the budget after every chunk (each layer holds at most k + C tokens "
               "during the prompt)")
      ->needs(chunk_opt);
  app.add_option("--threads", threads_text,
                 "windows evaluated at once, one worker thread each, >= 1 (default: the number of hardware threads)")
      ->type_name("N");
  app.add_option("--step-threads", step_threads_text,
                 "workers inside each engine's step and prefill (attention heads, the caches' scoring; kvevict's "
                 "executor), per --threads worker, >= 1 (default 1); the results are the same for every value")
      ->type_name("M");
  app.add_option("--out", out_prefix,
                 "output prefix: PREFIX.csv, PREFIX_summary.csv, PREFIX_plot.dat, PREFIX.gp (default quality); its "
                 "folder must exist; each file is written whole or not at all");

  return kvcli::run_tool("kvevict-quality", app, argc, argv, [&]() -> int {
    // ---- every flag first, then the output folder, then the files ----
    flags.validate();
    const std::size_t window = kvcli::parse_count(window_text, "--window", 4, 1u << 20);
    const std::size_t prompt = kvcli::parse_count(prompt_text, "--prompt", 1, 1u << 20);
    if (prompt + 2 > window)
      throw kvcli::UsageError("--prompt", std::to_string(prompt) + " must be at most --window - 2 = " +
                                              std::to_string(window - 2) + "; lower --prompt or raise --window");
    const std::size_t seeds = kvcli::parse_count(seeds_text, "--seeds", 1, 1000);
    const unsigned threads = kvcli::parse_threads(threads_text);
    const std::size_t step_threads = kvcli::parse_count(step_threads_text, "--step-threads", 1, 1024);
    const std::size_t prefill_chunk =
        prefill_chunk_text.empty() ? 0 : kvcli::parse_count(prefill_chunk_text, "--prefill-chunk", 1, 1u << 20);
    if (prefill_chunk != 0 && flags.paged)
      throw kvcli::UsageError("--prefill-chunk", "needs the contiguous KV layout (paged caches prefill in one shot); "
                                                 "drop --kv-layout paged");
    if (labels.empty()) throw kvcli::UsageError("--policies", "give at least one row, e.g. keyformer,h2o");
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (std::find(all_labels.begin(), all_labels.end(), labels[i]) == all_labels.end())
        throw kvcli::UsageError("--policies", "unknown row '" + labels[i] +
                                                  "'; expected keyformer, keyformer-nonoise, h2o, streaming, window "
                                                  "or tova");
      if (std::find(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(i), labels[i]) !=
          labels.begin() + static_cast<std::ptrdiff_t>(i))
        throw kvcli::UsageError("--policies", "row '" + labels[i] + "' is given twice");
    }
    auto wanted = [&](const char* label) { return std::find(labels.begin(), labels.end(), label) != labels.end(); };
    std::vector<double> ratios;
    for (const std::string& t : ratio_texts) {
      const float r = kvcli::parse_float(t, "--ratios");
      if (!(r > 0.0f && r <= 1.0f)) throw kvcli::UsageError("--ratios", "each ratio must be in (0, 1] (got " + t + ")");
      ratios.push_back(std::strtod(t.c_str(), nullptr));
    }
    if (ratios.empty()) throw kvcli::UsageError("--ratios", "give at least one ratio, e.g. 0.5");
    std::size_t n_windows_wanted = 0;  // 0 = all
    if (windows_opt != "all") {
      const bool digits = !windows_opt.empty() && windows_opt.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || windows_opt.size() > 9 || std::stoul(windows_opt) == 0)
        throw kvcli::UsageError("--windows", "expected a positive integer or 'all', got '" + windows_opt + "'");
      n_windows_wanted = std::stoul(windows_opt);
    }
    // k, w, sinks per policy and ratio, resolved as every kvevict tool resolves them (errors name the flags).
    auto resolved_for = [&](const std::string& policy, double ratio) {
      kvcli::EvictionFlags f = flags;
      f.budget.is_ratio = true;
      f.budget.ratio = ratio;
      std::ostringstream typed;
      typed << ratio;
      f.budget.text = typed.str();
      f.budget_given = true;
      f.budget_flag = "--ratios";
      return kvcli::resolve(f, prompt, policy);
    };
    for (double r : ratios)
      for (const std::string& label : labels) resolved_for(label == "keyformer-nonoise" ? "keyformer" : label, r);
    kvcli::check_output_prefix(out_prefix, "--out");

    const std::string model_file = kvcli::find_checkpoint(model_path.empty() ? kvcli::model_dir() : model_path,
                                                          "--model");
    std::optional<llama2::Model> loaded;
    try {
      loaded.emplace(llama2::Model::load(model_file));
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      throw kvcli::UsageError("--model", kvcli::strip_origin(e.what()));
    }
    const llama2::Model& model = *loaded;
    if (window > model.config().seq_len)
      throw kvcli::UsageError("--window", std::to_string(window) + " exceeds the model's context of " +
                                              std::to_string(model.config().seq_len) + " positions");
    if (tokenizer_path.empty()) tokenizer_path = kvcli::find_tokenizer_beside(model_file);
    if (tokenizer_path.empty() || !std::filesystem::is_regular_file(tokenizer_path))
      throw kvcli::UsageError("--tokenizer", tokenizer_path.empty()
                                                 ? "no SentencePiece tokenizer (*.model) beside '" + model_file +
                                                       "'; give --tokenizer FILE.model"
                                                 : "no file '" + tokenizer_path + "'");
    std::optional<llama2::Tokenizer> tok_holder;
    try {
      tok_holder.emplace(tokenizer_path);
    } catch (const std::exception&) {
      throw kvcli::UsageError("--tokenizer", "'" + tokenizer_path + "' is not a SentencePiece model");
    }
    const llama2::Tokenizer& tok = *tok_holder;
    if (static_cast<std::size_t>(tok.vocab_size()) != model.config().vocab_size)
      throw kvcli::UsageError("--tokenizer", "'" + tokenizer_path + "' has " + std::to_string(tok.vocab_size()) +
                                                 " pieces but the model '" + model_file + "' has vocab_size " +
                                                 std::to_string(model.config().vocab_size) +
                                                 "; pass the model's own tokenizer");
    if (data_path.empty()) data_path = kvcli::shared_dir() + "/data/tinystories-val/tinystories_val.txt";
    std::string text;
    try {
      text = read_file(data_path);
    } catch (const std::runtime_error& e) {
      throw kvcli::UsageError("--data", e.what());
    }
    const std::vector<int> ids = tokenize_corpus(tok, text);
    const std::size_t available = ids.size() / window;
    if (available == 0)
      throw kvcli::UsageError("--data", "'" + data_path + "' has " + std::to_string(ids.size()) +
                                            " tokens, less than one --window of " + std::to_string(window));
    if (n_windows_wanted > available)
      throw kvcli::UsageError("--windows", windows_opt + " exceeds the " + std::to_string(available) + " windows of " +
                                               std::to_string(window) + " tokens in '" + data_path + "'");
    const std::size_t n_windows = n_windows_wanted == 0 ? available : n_windows_wanted;
    const std::string recent_desc = flags.recent ? flags.recent_flag + " " + flags.recent->text : "--recent 30%";
    // The KV layout every policy engine uses, as the flags typed it (for the report's first line).
    const std::string layout_desc =
        flags.paged ? "paged, page size " + std::to_string(flags.page_size) + ", evict unit " +
                          (flags.evict_pages ? "page" : "token") + " (one selection per layer)"
                    : flags.shared_heads ? "contiguous, --shared-heads (one selection per layer)"
                                         : "contiguous (one selection per KV head)";

    // The sweep.
    std::vector<Run> runs;
    for (double r : ratios) {
      if (wanted("keyformer"))
        for (std::size_t s = 1; s <= seeds; ++s)
          runs.push_back({"keyformer", "keyformer", r, true, s, resolved_for("keyformer", r)});
      if (wanted("keyformer-nonoise"))
        runs.push_back({"keyformer-nonoise", "keyformer", r, false, 0, resolved_for("keyformer", r)});
      for (const char* policy : {"h2o", "streaming", "window", "tova"})
        if (wanted(policy)) runs.push_back({policy, policy, r, false, 0, resolved_for(policy, r)});
    }
    std::cerr << "kvevict-quality: " << ids.size() << " tokens, " << n_windows << " of " << available
              << " windows of " << window << " (prompt " << prompt << "), " << runs.size() << " runs per window, "
              << threads << " threads x " << step_threads << " step threads\n";

    // results[run][window]; full_nll[window].
    std::vector<std::vector<WindowResult>> results(runs.size(), std::vector<WindowResult>(n_windows));
    std::vector<double> full_nll(n_windows);
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex err_mutex;
    std::exception_ptr first_error;  // rethrown whole: a bad paged configuration stays an input error (exit 2)
    const auto t0 = std::chrono::steady_clock::now();
    auto worker = [&] {
      try {
        // One step pool per window worker, shared by its engines (they run one after another).
        std::unique_ptr<kvexample::ThreadPool> step_pool;
        if (step_threads > 1) step_pool = std::make_unique<kvexample::ThreadPool>(step_threads);
        llama2::Engine full(model);
        full.set_pool(step_pool.get());
        std::vector<std::unique_ptr<llama2::Engine>> engines;
        for (const Run& run : runs) {
          llama2::EvictionSettings s;
          s.policy = run.policy;
          s.budget = kvevict::Budget::tokens(run.kws.k);
          s.recent = kvevict::RecentWindow::tokens(run.policy == "keyformer" || run.policy == "h2o" ? run.kws.w : 0);
          s.params.horizon = window - prompt - 1;
          s.params.gumbel_noise = run.noise;
          s.params.sinks = run.kws.sinks;
          s.params.tau_init = flags.tau_init;
          s.params.tau_end = flags.tau_end;
          s.seed = run.seed;
          s.shared_heads = flags.shared_heads || flags.paged;
          s.kv_layout = flags.paged ? llama2::KvLayout::paged : llama2::KvLayout::contiguous;
          s.page_size = flags.page_size;
          s.evict_unit = flags.evict_pages ? kvevict::EvictUnit::page : kvevict::EvictUnit::token;
          s.prefill_chunk = prefill_chunk;
          s.bounded_prefill = bounded_prefill;
          engines.push_back(llama2::make_engine(model, s));
          engines.back()->set_pool(step_pool.get());
        }
        for (std::size_t w; (w = next.fetch_add(1)) < n_windows;) {
          const auto tokens = window_tokens(ids, w, window);
          const Reference ref = full_reference(full, tokens, prompt);
          full_nll[w] = ref.nll;
          for (std::size_t r = 0; r < runs.size(); ++r) results[r][w] = evaluate(*engines[r], tokens, prompt, ref);
          const std::size_t d = ++done;
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::lock_guard<std::mutex> lock(err_mutex);
          std::cerr << "  window " << d << "/" << n_windows << "  " << fmt(secs, 1) << " s\n";
        }
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mutex);
        if (!first_error) first_error = std::current_exception();
        next = n_windows;
      }
    };
    std::vector<std::thread> pool;
    for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
    if (first_error) std::rethrow_exception(first_error);

    // Every output is built in memory and written whole (temporary file + rename) at the end.
    std::string long_csv, summary_csv, plot_dat, plot_gp;
    // Long-format CSV.
    {
      std::ostringstream csv;
      csv << "policy,ratio,k,w,seed,window,nll,kl,top1\n";
      for (std::size_t w = 0; w < n_windows; ++w)
        csv << "full,1," << prompt << ",0,0," << w << "," << fmt(full_nll[w], 6) << ",0,1\n";
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const std::size_t k = runs[r].kws.k, wr = runs[r].kws.w;
        for (std::size_t w = 0; w < n_windows; ++w)
          csv << runs[r].label << "," << runs[r].ratio << "," << k << "," << wr << "," << runs[r].seed << "," << w
              << "," << fmt(results[r][w].nll, 6) << "," << fmt(results[r][w].kl, 6) << ","
              << fmt(results[r][w].top1, 6) << "\n";
      }
      long_csv = csv.str();
    }

    // Summary: per (label, ratio) over windows; Keyformer-with-noise: per-window mean over seeds,
    // and the std over seeds of the per-seed means.
    struct Cell {
      Stat nll, kl, top1;
      double seed_std_nll = 0.0;
      Stat dnll;  // paired: per-window NLL minus the full cache's NLL of the same window
    };
    std::map<std::pair<std::string, double>, Cell> table;
    for (const auto& label : labels)
      for (double ratio : ratios) {
        std::vector<std::size_t> idx;
        for (std::size_t r = 0; r < runs.size(); ++r)
          if (runs[r].label == label && runs[r].ratio == ratio) idx.push_back(r);
        std::vector<double> nll(n_windows, 0.0), kl(n_windows, 0.0), top1(n_windows, 0.0), seed_means;
        for (std::size_t r : idx) {
          double m = 0.0;
          for (std::size_t w = 0; w < n_windows; ++w) {
            nll[w] += results[r][w].nll / static_cast<double>(idx.size());
            kl[w] += results[r][w].kl / static_cast<double>(idx.size());
            top1[w] += results[r][w].top1 / static_cast<double>(idx.size());
            m += results[r][w].nll / static_cast<double>(n_windows);
          }
          seed_means.push_back(m);
        }
        std::vector<double> dnll(n_windows);
        for (std::size_t w = 0; w < n_windows; ++w) dnll[w] = nll[w] - full_nll[w];
        Cell c{mean_se(nll), mean_se(kl), mean_se(top1), 0.0, mean_se(dnll)};
        // Sample standard deviation over seeds of the per-seed mean NLL (se * sqrt(n)).
        if (seed_means.size() > 1)
          c.seed_std_nll = mean_se(seed_means).se * std::sqrt(static_cast<double>(seed_means.size()));
        table[{label, ratio}] = c;
      }
    const Stat full = mean_se(full_nll);
    {
      std::ostringstream csv;
      csv << "policy,ratio,k,nll,nll_se,delta_nll,delta_nll_se,kl,kl_se,top1,top1_se,nll_seed_std\n";
      for (const auto& label : labels)
        for (double ratio : ratios) {
          const Cell& c = table[{label, ratio}];
          csv << label << "," << ratio << "," << resolved_for("h2o", ratio).k << ","
              << fmt(c.nll.mean, 6) << "," << fmt(c.nll.se, 6) << "," << fmt(c.dnll.mean, 6) << ","
              << fmt(c.dnll.se, 6) << "," << fmt(c.kl.mean, 6) << ","
              << fmt(c.kl.se, 6) << "," << fmt(c.top1.mean, 6) << "," << fmt(c.top1.se, 6) << ","
              << fmt(c.seed_std_nll, 6) << "\n";
        }
      summary_csv = csv.str();
    }

    // Markdown tables.
    auto header = [&](const std::string& what) {
      std::cout << "\n" << what << "\n\n| policy |";
      for (double r : ratios) std::cout << " r = " << r << " (k = " << resolved_for("h2o", r).k << ") |";
      std::cout << "\n|---|";
      for (std::size_t i = 0; i < ratios.size(); ++i) std::cout << "---|";
      std::cout << "\n";
    };
    std::cout << "Windows: " << n_windows << " x " << window << " tokens (prompt " << prompt << ", "
              << window - prompt - 1 << " scored predictions each); w from " << recent_desc
              << " of k; StreamingLLM sinks = " << flags.sinks << "; Keyformer: " << seeds
              << " seeds, tau " << flags.tau_init << " -> " << flags.tau_end << ". Means over windows ± standard error.\n";
    std::cout << "KV layout of the policies: " << layout_desc << "; the full cache is contiguous.\n";
    if (prefill_chunk != 0)
      std::cout << "Prefill of the policies: chunks of " << prefill_chunk << " tokens"
                << (bounded_prefill ? ", bounded (cut to k after every chunk: at most k + " +
                                          std::to_string(prefill_chunk) + " tokens held during the prompt)"
                                    : " (unbounded: equals the one-shot prefill)")
                << "; the full cache prefills in one shot.\n";
    std::cout << "Full cache NLL: " << fmt(full.mean, 4) << " ± " << fmt(full.se, 4) << " nats/token\n";
    header("Mean NLL (nats/token)");
    for (const auto& label : labels) {
      std::cout << "| " << label << " |";
      for (double r : ratios) {
        const Cell& c = table[{label, r}];
        std::cout << " " << fmt(c.nll.mean, 4) << " ± " << fmt(c.nll.se, 4);
        if (c.seed_std_nll > 0.0) std::cout << " (seed std " << fmt(c.seed_std_nll, 4) << ")";
        std::cout << " |";
      }
      std::cout << "\n";
    }
    header("NLL increase over the full cache, paired per window (nats/token)");
    for (const auto& label : labels) {
      std::cout << "| " << label << " |";
      for (double r : ratios)
        std::cout << " " << fmt_signed(table[{label, r}].dnll.mean, 4) << " ± " << fmt(table[{label, r}].dnll.se, 4) << " |";
      std::cout << "\n";
    }
    header("Mean KL(full || policy) (nats)");
    for (const auto& label : labels) {
      std::cout << "| " << label << " |";
      for (double r : ratios) std::cout << " " << fmt(table[{label, r}].kl.mean, 4) << " ± " << fmt(table[{label, r}].kl.se, 4) << " |";
      std::cout << "\n";
    }
    header("Top-1 agreement with the full cache");
    for (const auto& label : labels) {
      std::cout << "| " << label << " |";
      for (double r : ratios)
        std::cout << " " << fmt(table[{label, r}].top1.mean, 3) << " ± " << fmt(table[{label, r}].top1.se, 3) << " |";
      std::cout << "\n";
    }

    // gnuplot data (one block per policy) and script (run by bench/quality/run.sh).
    {
      std::ostringstream dat;
      for (const auto& label : labels) {
        dat << "# " << label << "\n# ratio nll nll_se kl kl_se top1 top1_se delta_nll delta_nll_se\n";
        for (double r : ratios) {
          const Cell& c = table[{label, r}];
          dat << r << " " << fmt(c.nll.mean, 6) << " " << fmt(c.nll.se, 6) << " " << fmt(c.kl.mean, 6) << " "
              << fmt(c.kl.se, 6) << " " << fmt(c.top1.mean, 6) << " " << fmt(c.top1.se, 6) << " "
              << fmt(c.dnll.mean, 6) << " " << fmt(c.dnll.se, 6) << "\n";
        }
        dat << "\n\n";
      }
      std::ostringstream gp;
      gp << "set terminal pngcairo size 1200,480 font ',10'\nset output '" << out_prefix << ".png'\n"
         << "set multiplot layout 1,2 title 'stories260K on TinyStories-val: " << n_windows << " windows x "
         << window << " tokens, prompt " << prompt << "; error bars = standard error over windows'\n"
         << "set grid\nset xlabel 'budget k / prompt length'\nset xrange [0:1]\nset key top right\n"
         << "set ylabel 'NLL - full-cache NLL (nats/token; full cache: " << fmt(full.mean, 3) << ")'\n"
         << "plot 0 title 'full cache' lw 2 dt 2 lc 'black'";
      for (std::size_t i = 0; i < labels.size(); ++i)
        gp << ", '" << out_prefix << "_plot.dat' index " << i << " using 1:8:9 with yerrorlines lt " << i + 1
           << " title '" << labels[i] << "' noenhanced";
      gp << "\nset ylabel 'KL(full || policy) (nats)'\nset logscale y\nplot";
      for (std::size_t i = 0; i < labels.size(); ++i)
        gp << (i ? "," : "") << " '" << out_prefix << "_plot.dat' index " << i
           << " using 1:4:5 with yerrorlines lt " << i + 1 << " title '" << labels[i] << "' noenhanced";
      gp << "\nunset multiplot\n";
      plot_dat = dat.str();
      plot_gp = gp.str();
    }
    kvcli::write_file_atomically(out_prefix + ".csv", long_csv);
    kvcli::write_file_atomically(out_prefix + "_summary.csv", summary_csv);
    kvcli::write_file_atomically(out_prefix + "_plot.dat", plot_dat);
    kvcli::write_file_atomically(out_prefix + ".gp", plot_gp);
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("stdout: write error");
    std::cerr << "wrote " << out_prefix << ".csv, " << out_prefix << "_summary.csv, " << out_prefix
              << "_plot.dat, " << out_prefix << ".gp\n";
    return kvcli::kExitOk;
  });
}
