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
// KV layout: --shared-heads (one selection per layer for all KV heads, contiguous), or
// --kv-layout paged --page-size N --evict-unit token|page (the same flags as kvevict-generate, through
// the shared CLI layer): every policy engine of the sweep then uses that layout; the full-cache
// reference is always the contiguous full cache, so every layout is compared with the same p.
// bench/quality/run_paged.sh writes the committed token- vs page-granular rows (paged.md).
//
// Rows and prefill (issues 14, 15): --policies picks the rows as specs (rows.hpp): a policy plus
// per-row variants (+shared, +reindexed, +boundedC, @recent=Q, @seeds=N) and the oracle bound
// (oracle.hpp), so that one invocation compares every row with one full-cache reference.
// --prefill-chunk C [--bounded-prefill] makes every policy engine prefill the prompt in chunks of C
// tokens (bounded: cut to k after every chunk), while the full-cache reference keeps the one-shot
// prefill. bench/quality/run_bounded.sh writes bounded.md; bench/quality/run_policies.sh policies.md.
// The measurement itself (corpus, reference, NLL / KL / top-1, statistics) is quality_eval.cpp.
//
// Documents (issue "Quality on a real model at long context"): --data DIR takes the folder's *.rst and
// *.txt files as documents, each tokenized whole with the model's own tokenizer (BOS first only where the
// model adds one: LoadedModel::add_bos), cut into windows that never cross a document's end, taken
// round-robin over the documents (kvquality::document_windows). In this mode the report also lists the
// windows and splits the paired NLL increase by the distance from each target token to its previous
// occurrence in the window (kvquality::recurrence_classes). --retrieval N replaces the windows with the
// needle-retrieval task of retrieval.hpp (N prompts per depth, P = --prompt tokens each, greedy answer).
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
#include "llama2/model_files.hpp"
#include "llama2/tokenizer.hpp"
#include "oracle.hpp"
#include "quality_eval.hpp"
#include "reindex.hpp"
#include "retrieval.hpp"
#include "rows.hpp"

namespace {

using kvquality::fmt;
using kvquality::mean_se;
using kvquality::read_file;
using kvquality::tokenize_corpus;
using kvquality::window_tokens;
using kvquality::fmt_signed;
using kvquality::RowSpec;
using kvquality::Stat;
using kvquality::WindowResult;

// One engine of the sweep: a row at one budget ratio (and one seed for Keyformer with noise).
struct Run {
  std::string label;      // the row spec as typed: "keyformer", "h2o+shared", "oracle", ...
  const RowSpec* row;     // its parsed spec
  double ratio = 0.0;     // budget fraction of the prompt
  std::uint64_t seed = 0;
  kvcli::Resolved kws;    // k, w, sinks (resolved for the prompt length)
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvevict quality report: NLL, KL(full || policy) and top-1 agreement of every eviction policy "
               "against the full KV cache, on consecutive windows of a text."};
  std::string model_path, tokenizer_path, data_path, windows_opt = "32", window_text = "512", prompt_text = "256",
                                                     seeds_text = "5", threads_text, step_threads_text = "1",
                                                     out_prefix = "quality", retrieval_text = "0",
                                                     retrieval_format_text = "plain", retrieval_seed_text = "1",
                                                     needle_repeats_text = "1", answer_tokens_text = "8";
  std::vector<std::string> labels{"keyformer", "keyformer-nonoise", "h2o", "streaming", "window", "tova", "snapkv"};
  std::vector<std::string> ratio_texts{"0.1", "0.2", "0.3", "0.5", "0.7", "0.9"};
  kvcli::EvictionFlags flags;
  app.add_option("--model", model_path,
                 "a llama-architecture GGUF file or a llama2.c checkpoint, or a folder holding exactly one (default: "
                 "$KVEVICT_MODEL_DIR, else "
                 "$KVEVICT_SHARED_DIR/models/stories260K)");
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece model (default: a GGUF model's own vocabulary, else the .model "
                 "beside the checkpoint)");
  app.add_option("--data", data_path,
                 "validation text, paragraphs separated by blank lines (default: "
                 "$KVEVICT_SHARED_DIR/data/tinystories-val/tinystories_val.txt), or a folder of documents (its "
                 "*.rst and *.txt files, each tokenized whole; windows never cross a document)");
  app.add_option("--windows", windows_opt, "number of windows from the start of the text, or 'all' (default 32)")
      ->type_name("INT|all");
  app.add_option("--window", window_text, "tokens per window, >= 4 (default 512)")->type_name("INT");
  app.add_option("--prompt", prompt_text, "prompt tokens prefilled at full attention, <= --window - 2 (default 256)")
      ->type_name("INT");
  app.add_option("--ratios", ratio_texts,
                 "budget fractions r of the prompt, in (0, 1], as fractions (0.5) or percents (50%): "
                 "k = max(1, floor(r * prompt)) (default 0.1,0.2,0.3,0.5,0.7,0.9)")
      ->type_name("FLOAT|N%")
      ->delimiter(',');
  kvcli::ToolSpec spec;
  spec.policy = false;  // every policy is run
  spec.budget = false;  // --ratios sweeps the budget
  spec.seed = false;    // --seeds: Keyformer runs with seeds 1..S
  spec.kv_layout = true;  // --shared-heads, --kv-layout, --page-size, --evict-unit (as kvevict-generate)
  spec.layer_budgets = true;  // --layer-budgets applies to every row of the sweep (labels "h2o+pyramid")
  spec.prefill_chunk = true;  // --prefill-chunk / --bounded-prefill apply to every policy row
  spec.prefill_chunk_help = "every policy prefills the prompt in chunks of C tokens (README \"Long prompts\"); "
                            "default: one shot. The full-cache reference always prefills in one shot";
  kvcli::add_eviction_options(app, flags, spec);
  app.add_option("--seeds", seeds_text, "Keyformer seeds (noise on): 1..S (default 5)")->type_name("INT");
  app.add_option("--policies", labels, kvquality::row_spec_help())
      ->delimiter(',');
  app.add_option("--threads", threads_text,
                 "windows evaluated at once, one worker thread each, >= 1 (default: the number of hardware threads)")
      ->type_name("INT");
  app.add_option("--step-threads", step_threads_text,
                 "workers inside each engine's step and prefill (attention heads, the caches' scoring; kvevict's "
                 "executor), per --threads worker, >= 1 (default 1); the results are the same for every value")
      ->type_name("INT");
  app.add_option("--retrieval", retrieval_text,
                 "needle retrieval instead of windows: N prompts per depth (10/50/90%) of --prompt tokens each, "
                 "from the documents of --data DIR; greedy answer, digits exact (default 0: off)")
      ->type_name("INT");
  app.add_option("--retrieval-format", retrieval_format_text,
                 "plain (excerpt, then 'Question: ... Answer: ... is') or chat (ChatML user turn, ids 1 and 2; "
                 "default plain)")
      ->type_name("plain|chat");
  app.add_option("--retrieval-seed", retrieval_seed_text, "seed of the retrieval prompts (default 1)")->type_name("INT");
  app.add_option("--needle-repeats", needle_repeats_text, "copies of the needle line per prompt, >= 1 (default 1)")
      ->type_name("INT");
  app.add_option("--answer-tokens", answer_tokens_text, "greedy tokens generated per answer, >= 1 (default 8)")
      ->type_name("INT");
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
    const std::size_t prefill_chunk = flags.prefill_chunk;
    const std::size_t retrieval_n = kvcli::parse_count(retrieval_text, "--retrieval", 0, 100000);
    kvquality::RetrievalSpec rspec;
    try {
      rspec.format = kvquality::parse_retrieval_format(retrieval_format_text);
    } catch (const std::invalid_argument& e) {
      throw kvcli::UsageError("--retrieval-format", e.what());
    }
    rspec.seed = kvcli::parse_count(retrieval_seed_text, "--retrieval-seed", 0, ~std::size_t{0} >> 1);
    rspec.needle_repeats = kvcli::parse_count(needle_repeats_text, "--needle-repeats", 1, 100);
    const std::size_t answer_tokens = kvcli::parse_count(answer_tokens_text, "--answer-tokens", 1, 1024);
    rspec.prompt = prompt;
    rspec.per_depth = retrieval_n;
    const bool bounded_prefill = flags.bounded_prefill;
    const std::vector<RowSpec> rows = [&] {
      std::vector<RowSpec> parsed = kvquality::parse_row_specs(labels);
      const bool global_schedule = flags.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform;
      for (RowSpec& row : parsed) {
        if (flags.paged && (row.reindexed || row.bounded_chunk != 0))
          throw kvcli::UsageError("--policies", "row '" + row.label +
                                                    "': +reindexed and +boundedC need the contiguous KV layout; drop "
                                                    "--kv-layout paged");
        if (row.policy == "snapkv" && (prefill_chunk != 0 || row.bounded_chunk != 0))
          throw kvcli::UsageError(row.bounded_chunk != 0 ? "--policies" : "--prefill-chunk",
                                  "snapkv scores the prompt with its last L queries, so it prefills in one shot "
                                  "(row '" + row.label + "'); leave snapkv out of --policies, or drop "
                                  "--prefill-chunk / +bounded");
        if (global_schedule && row.pyramid)
          throw kvcli::UsageError("--policies", "row '" + row.label + "': +pyramid with --layer-budgets " +
                                                    flags.layer_budgets_label + "; use one of them");
        // --layer-budgets other than uniform applies to every row but the oracle, labelled with it.
        if (global_schedule && row.policy != "oracle") row.label += "+" + flags.layer_budgets_label;
      }
      return parsed;
    }();
    labels.clear();
    for (const RowSpec& row : rows) labels.push_back(row.label);
    if (retrieval_n > 0)
      for (const RowSpec& row : rows)
        if (row.policy == "oracle")
          throw kvcli::UsageError("--policies", "the oracle bound needs the full cache's attention over a "
                                                "teacher-forced window; leave it out with --retrieval");
    const bool any_oracle =
        std::any_of(rows.begin(), rows.end(), [](const RowSpec& r) { return r.policy == "oracle"; });
    std::vector<double> ratios;
    for (const std::string& t : ratio_texts) {  // fractions ("0.5", also "1") and percents ("50%"), as every tool
      kvcli::Amount a;
      const bool percent = !t.empty() && t.back() == '%';
      if (!percent) {
        kvcli::parse_float(t, "--ratios");  // the syntax: a number
        a.is_ratio = true;
        a.ratio = std::strtod(t.c_str(), nullptr);
      }
      const std::string problem = percent ? kvcli::parse_amount_text(t, kvcli::AmountKind::budget, a) : "";
      if (!problem.empty() || !(a.ratio > 0.0 && a.ratio <= 1.0))
        throw kvcli::UsageError("--ratios", "each ratio must be in (0, 1] (got " + t + "): give a fraction such as "
                                            "0.5 or a percentage such as 50%");
      ratios.push_back(a.ratio);
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
    // (row: its @recent=Q replaces --recent.)
    // The flags of one row at one ratio: its @recent=Q replaces --recent, +pyramid sets the schedule.
    auto flags_for = [&](double ratio, const RowSpec* row) {
      kvcli::EvictionFlags f = flags;
      if (row != nullptr && row->pyramid) {
        f.layer_budgets = kvevict::LayerBudgets::make_pyramid();
        f.layer_budgets_label = "pyramid";
      }
      if (row != nullptr && row->recent) {
        kvcli::Amount q;
        q.is_ratio = true;
        q.ratio = *row->recent;
        q.text = row->recent_text;
        f.recent = q;
        f.recent_flag = "--policies (" + row->label + ")";
      }
      f.budget.is_ratio = true;
      f.budget.ratio = ratio;
      std::ostringstream typed;
      typed << ratio;
      f.budget.text = typed.str();
      f.budget_given = true;
      f.budget_flag = "--ratios";
      return f;
    };
    auto resolved_for = [&](const std::string& policy, double ratio, const RowSpec* row = nullptr) {
      return kvcli::resolve(flags_for(ratio, row), prompt, policy);
    };
    for (double r : ratios)
      for (const RowSpec& row : rows) resolved_for(row.budget_policy(), r, &row);
    kvcli::check_output_prefix(out_prefix, "--out");

    llama2::LoadedModel files = llama2::load_model(model_path, tokenizer_path, true);
    const llama2::Model& model = files.model;
    if (retrieval_n > 0 && rspec.format == kvquality::RetrievalFormat::chat) {
      // ChatML framing needs the model's own <|im_start|> / <|im_end|> ids (SmolLM2: 1 and 2).
      const llama2::GgufVocab* vocab = model.vocab();
      auto id_of = [&](const char* piece) {
        if (vocab != nullptr)
          for (std::size_t i = 0; i < vocab->tokens.size(); ++i)
            if (vocab->tokens[i] == piece) return static_cast<int>(i);
        throw kvcli::UsageError("--retrieval-format", std::string("chat needs the token ") + piece +
                                                          " in the model's vocabulary (a GGUF chat model); use plain");
      };
      rspec.im_start = id_of("<|im_start|>");
      rspec.im_end = id_of("<|im_end|>");
    }
    if (window > model.config().seq_len)
      throw kvcli::UsageError("--window", std::to_string(window) + " exceeds the model's context of " +
                                              std::to_string(model.config().seq_len) + " positions");
    const llama2::Tokenizer& tok = *files.tokenizer;
    if (data_path.empty()) data_path = kvcli::shared_dir() + "/data/tinystories-val/tinystories_val.txt";
    std::string text;
    try {
      if (!std::filesystem::is_directory(data_path)) text = read_file(data_path);
    } catch (const std::runtime_error& e) {
      throw kvcli::UsageError("--data", e.what());
    }
    const bool doc_mode = std::filesystem::is_directory(data_path);
    if (retrieval_n > 0 && !doc_mode)
      throw kvcli::UsageError("--retrieval", "needs --data to be a folder of documents (got the file '" + data_path +
                                                 "')");
    std::vector<int> ids;                       // --data FILE: the whole text
    std::vector<std::string> doc_names;         // --data DIR: the documents' file names
    std::vector<std::vector<int>> doc_ids;      //   and their tokens
    std::vector<kvquality::DocWindow> doc_wins;  //   and the windows
    std::size_t available = 0, n_windows = 0;
    if (!doc_mode) {
      ids = tokenize_corpus(tok, text);
      available = ids.size() / window;
      if (available == 0)
        throw kvcli::UsageError("--data", "'" + data_path + "' has " + std::to_string(ids.size()) +
                                              " tokens, less than one --window of " + std::to_string(window));
      if (n_windows_wanted > available)
        throw kvcli::UsageError("--windows", windows_opt + " exceeds the " + std::to_string(available) +
                                                 " windows of " + std::to_string(window) + " tokens in '" + data_path +
                                                 "'");
      n_windows = n_windows_wanted == 0 ? available : n_windows_wanted;
    } else {
      std::vector<std::size_t> lengths;
      std::vector<std::string> paths;
      try {
        paths = kvquality::list_documents(data_path);
      } catch (const std::runtime_error& e) {
        throw kvcli::UsageError("--data", e.what());
      }
      for (const std::string& path : paths) {
        doc_names.push_back(std::filesystem::path(path).filename().string());
        try {
          doc_ids.push_back(tok.encode(read_file(path), files.add_bos));
        } catch (const std::runtime_error& e) {  // e.g. a FIFO named x.txt in the folder
          throw kvcli::UsageError("--data", e.what());
        }
        lengths.push_back(doc_ids.back().size());
      }
      available = kvquality::document_windows(lengths, window, 0).size();
      if (retrieval_n == 0) {
        if (available == 0)
          throw kvcli::UsageError("--data", "no document in '" + data_path + "' has a --window of " +
                                                std::to_string(window) + " tokens");
        if (n_windows_wanted > available)
          throw kvcli::UsageError("--windows", windows_opt + " exceeds the " + std::to_string(available) +
                                                   " windows of " + std::to_string(window) +
                                                   " tokens in the documents of '" + data_path + "'");
        doc_wins = kvquality::document_windows(lengths, window, n_windows_wanted);
        n_windows = doc_wins.size();
      }
    }
    // Window w's tokens.
    auto tokens_of = [&](std::size_t w) {
      if (!doc_mode) return window_tokens(ids, w, window);
      const std::vector<int>& d = doc_ids[doc_wins[w].doc];
      const auto from = d.begin() + static_cast<std::ptrdiff_t>(doc_wins[w].offset);
      return std::vector<int>(from, from + static_cast<std::ptrdiff_t>(window));
    };
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
      for (const RowSpec& row : rows) {
        const std::size_t n_seeds = row.seeded() ? row.seeds.value_or(seeds) : 1;
        for (std::size_t sd = 1; sd <= n_seeds; ++sd)
          runs.push_back({row.label, &row, r, row.seeded() ? sd : 0, resolved_for(row.budget_policy(), r, &row)});
      }
    }
    // A non-uniform schedule must fit the model (one weight per layer, ...).
    for (const Run& run : runs) {
      if (run.row->policy == "oracle") continue;
      const kvcli::EvictionFlags f = flags_for(run.ratio, run.row);
      if (f.layer_budgets.kind == kvevict::LayerBudgets::Kind::uniform) continue;
      llama2::EvictionSettings s;
      s.budget = kvevict::Budget::tokens(run.kws.k);
      s.layer_budgets = kvcli::layer_budgets_for(f, run.kws, run.row->policy);
      s.prompt_len = prompt;
      try {
        (void)llama2::layer_budget_tokens(s, model.config().n_layers);
      } catch (const std::invalid_argument& e) {
        throw kvcli::UsageError(run.row->pyramid ? "--policies" : "--layer-budgets", kvcli::strip_origin(e.what()));
      }
    }
    auto row_of = [&](const std::string& label) -> const RowSpec& {
      for (const RowSpec& row : rows)
        if (row.label == label) return row;
      throw std::logic_error("kvevict-quality: no row '" + label + "'");
    };
    // One engine per run, for windows with `horizon` decode steps (`future`: the oracle rows' view).
    // `context`: the positions the engine must hold (a window, or a retrieval prompt and its answer).
    auto make_engine_for = [&](const Run& run, kvquality::FutureAttention& future, std::size_t horizon,
                               kvtools::ThreadPool* step_pool, std::size_t context) -> std::unique_ptr<llama2::Engine> {
          const RowSpec& row = *run.row;
          if (row.policy == "oracle") {
            kvevict::CacheConfig config;
            config.n_q_heads = model.config().n_heads;
            config.budget = kvevict::Budget::tokens(run.kws.k);
            config.recent = kvevict::RecentWindow::tokens(run.kws.w);
            auto e = std::make_unique<llama2::Engine>(
                model,
                [config, &future](std::size_t layer,
                                  const kvevict::KVView<float>& view) -> std::unique_ptr<kvevict::CacheInterface> {
                  return std::make_unique<kvquality::OracleCache>(config, view, future, layer);
                },
                0, context);
            return e;  // serial: the oracle cache has no parallel scoring
          }
          // The row's flags (--ratios, @recent, +pyramid): per-layer budgets take the recent window as a
          // ratio of each layer's k.
          llama2::EvictionSettings s = llama2::eviction_settings(flags_for(run.ratio, &row), run.kws, row.policy);
          s.params.horizon = horizon;
          s.params.gumbel_noise = row.noise;
          s.prompt_len = prompt;
          s.seed = run.seed;
          s.shared_heads = s.shared_heads || row.shared;
          s.prefill_chunk = row.bounded_chunk != 0 ? row.bounded_chunk : prefill_chunk;
          s.bounded_prefill = row.bounded_chunk != 0 || bounded_prefill;
          // A chunked row runs alone at the model's full context: its capacity must hold k + C during the
          // prefill (CacheConfig::max_prefill_chunk), which a window-sized context may not.
          s.context = s.prefill_chunk != 0 ? 0 : context;
          std::unique_ptr<llama2::Engine> e = llama2::make_engine(model, s);
          if (row.reindexed) kvquality::reindex_positions(*e);
          e->set_pool(step_pool);
          return e;
    };
    // Every run's engine, built once per worker and sized for `context` positions (a GGUF model's context,
    // e.g. 8192 positions, would make each engine's KV buffers four times a 2K window's).
    auto make_engines = [&](kvquality::FutureAttention& future, std::size_t horizon, kvtools::ThreadPool* step_pool,
                            std::size_t context) {
      std::vector<std::unique_ptr<llama2::Engine>> engines;
      for (const Run& run : runs) engines.push_back(make_engine_for(run, future, horizon, step_pool, context));
      return engines;
    };
    if (retrieval_n > 0) {
      // ---- the retrieval task: every run (and the full cache) answers every prompt greedily ----
      if (prompt + answer_tokens > model.config().seq_len)
        throw kvcli::UsageError("--prompt", std::to_string(prompt) + " + --answer-tokens " +
                                                std::to_string(answer_tokens) + " exceeds the model's context of " +
                                                std::to_string(model.config().seq_len) + " positions");
      std::vector<kvquality::RetrievalItem> items;
      rspec.doc_names = doc_names;  // a too-short document is named by its file
      try {
        items = kvquality::make_retrieval_items(
            doc_ids, [&](const std::string& t) { return tok.encode(t, false); }, rspec);
      } catch (const std::invalid_argument& e) {
        // Name the flag that can fix it: the documents are too short for the excerpt (--data), the
        // needle copies fill the prompt (--needle-repeats), or the prompt is too short (--prompt).
        std::string what = e.what();
        const std::string prefix = "make_retrieval_items: ";
        if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
        const char* flag = what.rfind("document ", 0) == 0 ? "--data"
                           : (what.find("no room") != std::string::npos && rspec.needle_repeats > 1) ? "--needle-repeats"
                                                                                                      : "--prompt";
        throw kvcli::UsageError(flag, what);
      }
      // answers[run + 1][item]; answers[0]: the full cache.
      std::vector<std::vector<std::string>> answers(runs.size() + 1, std::vector<std::string>(items.size()));
      std::atomic<std::size_t> next_item{0}, items_done{0};
      std::mutex mu;
      std::exception_ptr error;
      const auto start = std::chrono::steady_clock::now();
      const int end_id = files.end_id;
      // The greedy answers of `es[0]` (the lead, e.g. the full cache) and of every other engine to prompt `p`,
      // all in one batch: the prompt runs once (prefill_batch), then each answer token is one step_batch of
      // the engines still answering. The same answers as each engine's own prefill (last-position logits)
      // and steps, bit for bit. A lone engine (chunked prefill, which cannot share a prompt) prefills alone.
      auto answer_all = [&](const std::vector<llama2::Engine*>& es, const std::vector<int>& p) {
        llama2::Engine& lead = *es[0];
        const std::vector<llama2::Engine*> followers(es.begin() + 1, es.end());
        lead.reset();
        for (llama2::Engine* f : followers) f->reset();
        const llama2::RowMatrix& lp =
            followers.empty() ? lead.prefill(p) : llama2::Engine::prefill_batch(lead, followers, p);
        const std::size_t vocab = model.config().vocab_size;
        std::vector<const float*> logits(es.size(), lp.data() + static_cast<std::size_t>(lp.rows() - 1) * vocab);
        std::vector<std::vector<int>> out(es.size());
        std::vector<bool> answering(es.size(), true);
        for (std::size_t i = 0; i < answer_tokens; ++i) {
          std::vector<llama2::Engine*> step_es;
          std::vector<int> step_ids;
          std::vector<std::size_t> step_of;
          for (std::size_t e = 0; e < es.size(); ++e) {
            if (!answering[e]) continue;
            const int id = static_cast<int>(std::max_element(logits[e], logits[e] + vocab) - logits[e]);
            if (id == end_id || (rspec.format == kvquality::RetrievalFormat::chat && id == rspec.im_end)) {
              answering[e] = false;
              continue;
            }
            out[e].push_back(id);
            const std::string text = tok.decode(out[e]);
            // Stop once a run of digits has ended (the score reads only the first run).
            const std::string digits = kvquality::first_digits(text);
            if (!digits.empty() && text.find(digits) + digits.size() < text.size()) {
              answering[e] = false;
              continue;
            }
            if (i + 1 < answer_tokens) step_es.push_back(es[e]), step_ids.push_back(id), step_of.push_back(e);
          }
          if (step_es.empty()) break;
          llama2::Engine::step_batch(step_es, step_ids);
          for (std::size_t j = 0; j < step_es.size(); ++j) logits[step_of[j]] = step_es[j]->logits();
        }
        std::vector<std::string> texts;
        for (const std::vector<int>& o : out) texts.push_back(tok.decode(o));
        return texts;
      };
      const std::size_t answer_context = prompt + answer_tokens;
      auto rworker = [&] {
        try {
          std::unique_ptr<kvtools::ThreadPool> step_pool;
          if (step_threads > 1) step_pool = std::make_unique<kvtools::ThreadPool>(step_threads);
          llama2::Engine full(model, {}, 0, answer_context);
          full.set_prefill_logits(llama2::PrefillLogits::last);  // an answer reads the last position's only
          full.set_pool(step_pool.get());
          kvquality::FutureAttention unused;
          std::vector<std::unique_ptr<llama2::Engine>> engines =
              make_engines(unused, answer_tokens, step_pool.get(), answer_context);
          // answers[0] and the one-shot runs answer in one batch led by the full cache; chunked ones alone.
          std::vector<llama2::Engine*> batch{&full};
          std::vector<std::size_t> batch_answer{0}, alone;
          for (std::size_t r = 0; r < runs.size(); ++r) {
            engines[r]->set_prefill_logits(llama2::PrefillLogits::last);
            if (engines[r]->prefill_chunk() == 0)
              batch.push_back(engines[r].get()), batch_answer.push_back(r + 1);
            else
              alone.push_back(r);
          }
          for (std::size_t i; (i = next_item.fetch_add(1)) < items.size();) {
            const std::vector<std::string> got = answer_all(batch, items[i].prompt);
            for (std::size_t b = 0; b < batch.size(); ++b) answers[batch_answer[b]][i] = got[b];
            for (std::size_t r : alone) answers[r + 1][i] = answer_all({engines[r].get()}, items[i].prompt)[0];
            const std::size_t d = ++items_done;
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::lock_guard<std::mutex> lock(mu);
            std::cerr << "  prompt " << d << "/" << items.size() << "  " << fmt(secs, 1) << " s, ETA "
                      << fmt(secs / static_cast<double>(d) * static_cast<double>(items.size() - d), 0) << " s\n";
          }
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
          next_item = items.size();
        }
      };
      std::cerr << "kvevict-quality: retrieval, " << items.size() << " prompts of " << prompt << " tokens ("
                << retrieval_format_text << "), " << runs.size() + 1 << " runs each, " << threads << " threads\n";
      std::vector<std::thread> rpool;
      for (unsigned i = 0; i < threads; ++i) rpool.emplace_back(rworker);
      for (auto& t : rpool) t.join();
      if (error) std::rethrow_exception(error);
      auto correct = [&](std::size_t a, std::size_t i) {
        return kvquality::first_digits(answers[a][i]) == items[i].code;
      };
      auto quoted = [](const std::string& t) {
        std::string q = "\"";
        for (char c : t) {
          if (c == '"') q += "\"\"";
          else if (c == '\n') q += "\\n";
          else q += c;
        }
        return q + "\"";
      };
      std::ostringstream csv;
      csv << "policy,ratio,k,seed,prompt,document,offset,depth,code,answer,correct\n";
      for (std::size_t a = 0; a <= runs.size(); ++a)
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (a == 0) csv << "full,1," << prompt << ",0,";
          else
            csv << runs[a - 1].label << "," << runs[a - 1].ratio << "," << runs[a - 1].kws.k << ","
                << runs[a - 1].seed << ",";
          csv << i << "," << doc_names[items[i].doc] << "," << items[i].offset << "," << items[i].depth << ","
              << items[i].code << "," << quoted(answers[a][i]) << "," << (correct(a, i) ? 1 : 0) << "\n";
        }
      // Markdown: accuracy per row and ratio, by depth and overall (seeded rows: over seeds and prompts).
      std::cout << "Retrieval: " << items.size() << " prompts (" << retrieval_n << " per depth) of " << prompt
                << " tokens, format " << retrieval_format_text << ", needle x" << rspec.needle_repeats << ", seed "
                << rspec.seed << ", greedy answer of at most " << answer_tokens
                << " tokens; correct = its first run of digits equals the code.\n\n| row | r | k |";
      for (unsigned d : rspec.depths) std::cout << " depth " << d << "% |";
      std::cout << " all |\n|---|---|---|";
      for (std::size_t i = 0; i <= rspec.depths.size(); ++i) std::cout << "---|";
      std::cout << "\n";
      auto row_line = [&](const std::string& label, const std::string& r, std::size_t k,
                          const std::vector<std::size_t>& which) {
        std::cout << "| " << label << " | " << r << " | " << k << " |";
        std::size_t all_ok = 0, all_n = 0;
        for (unsigned d : rspec.depths) {
          std::size_t ok = 0, n = 0;
          for (std::size_t a : which)
            for (std::size_t i = 0; i < items.size(); ++i)
              if (items[i].depth == d) ok += correct(a, i) ? 1 : 0, ++n;
          all_ok += ok, all_n += n;
          std::cout << " " << ok << "/" << n << " |";
        }
        std::cout << " " << all_ok << "/" << all_n << " (" << fmt(100.0 * static_cast<double>(all_ok) /
                                                               static_cast<double>(all_n), 0) << "%) |\n";
      };
      row_line("full", "1", prompt, {0});
      for (double r : ratios)
        for (const RowSpec& row : rows) {
          std::vector<std::size_t> which;
          std::size_t k = 0;
          for (std::size_t a = 0; a < runs.size(); ++a)
            if (runs[a].row == &row && runs[a].ratio == r) which.push_back(a + 1), k = runs[a].kws.k;
          std::ostringstream rt;
          rt << r;
          row_line(row.label, rt.str(), k, which);
        }
      std::cout << "\nPrompts (document @ excerpt offset, depth, code):";
      for (std::size_t i = 0; i < items.size(); ++i)
        std::cout << (i ? "; " : " ") << doc_names[items[i].doc] << "@" << items[i].offset << " " << items[i].depth
                  << "% " << items[i].code;
      std::cout << "\n";
      kvcli::write_file_atomically(out_prefix + "_retrieval.csv", csv.str());
      std::cout.flush();
      if (!std::cout) throw std::runtime_error("stdout: write error");
      std::cerr << "wrote " << out_prefix << "_retrieval.csv\n";
      return kvcli::kExitOk;
    }

    std::size_t n_tokens = ids.size();
    for (const std::vector<int>& d : doc_ids) n_tokens += d.size();
    std::cerr << "kvevict-quality: " << (doc_mode ? std::to_string(doc_ids.size()) + " documents, " : std::string())
              << n_tokens << " tokens, " << n_windows << " of " << available
              << " windows of " << window << " (prompt " << prompt << "), " << runs.size() << " runs per window, "
              << threads << " threads x " << step_threads << " step threads\n";

    // results[run][window]; full_nll[window].
    std::vector<std::vector<WindowResult>> results(runs.size(), std::vector<WindowResult>(n_windows));
    std::vector<double> full_nll(n_windows);
    std::vector<std::vector<double>> full_token_nll(n_windows);
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex err_mutex;
    std::exception_ptr first_error;  // rethrown whole: a bad paged configuration stays an input error (exit 2)
    const auto t0 = std::chrono::steady_clock::now();
    auto worker = [&] {
      try {
        // One step pool per window worker, shared by its engines (they run one after another).
        std::unique_ptr<kvtools::ThreadPool> step_pool;
        if (step_threads > 1) step_pool = std::make_unique<kvtools::ThreadPool>(step_threads);
        llama2::Engine full(model, {}, 0, window);
        full.set_prefill_logits(llama2::PrefillLogits::last);  // the windows score decode steps only
        kvquality::FutureAttention future;  // the oracle rows' view of the full cache's future attention
        const llama2::Config& mc = model.config();
        future.reset(mc.n_layers, mc.n_kv_heads, mc.n_heads / mc.n_kv_heads, window - prompt - 1, window);
        full.set_pool(step_pool.get());
        std::vector<std::unique_ptr<llama2::Engine>> engines =
            make_engines(future, window - prompt - 1, step_pool.get(), window);
        // One batch with the full cache (its prompt once, each token one pass over the weights for all runs);
        // the oracle rows in a second batch, once the full cache's future attention is recorded; runs with a
        // chunked prefill (which cannot share the prompt) one by one. The same numbers as one run at a time.
        std::vector<llama2::Engine*> batch, oracle_batch;
        std::vector<std::size_t> batch_run, oracle_run, alone;
        for (std::size_t r = 0; r < runs.size(); ++r) {
          engines[r]->set_prefill_logits(llama2::PrefillLogits::last);
          if (engines[r]->prefill_chunk() != 0)
            alone.push_back(r);
          else if (runs[r].row->policy == "oracle")
            oracle_batch.push_back(engines[r].get()), oracle_run.push_back(r);
          else
            batch.push_back(engines[r].get()), batch_run.push_back(r);
        }
        std::vector<WindowResult> got;
        for (std::size_t w; (w = next.fetch_add(1)) < n_windows;) {
          const auto tokens = tokens_of(w);
          const kvquality::Reference ref =
              kvquality::evaluate_with_reference(full, batch, tokens, prompt, got, any_oracle ? &future : nullptr);
          for (std::size_t b = 0; b < batch.size(); ++b) results[batch_run[b]][w] = std::move(got[b]);
          full_nll[w] = ref.nll;
          full_token_nll[w] = ref.token_nll;
          if (!oracle_batch.empty()) {
            kvquality::evaluate_batch(full, oracle_batch, tokens, prompt, ref, got);
            for (std::size_t b = 0; b < oracle_batch.size(); ++b) results[oracle_run[b]][w] = std::move(got[b]);
          }
          for (std::size_t r : alone) results[r][w] = evaluate(*engines[r], tokens, prompt, ref);
          const std::size_t d = ++done;
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::lock_guard<std::mutex> lock(err_mutex);
          std::cerr << "  window " << d << "/" << n_windows << "  " << fmt(secs, 1) << " s, ETA "
                    << fmt(secs / static_cast<double>(d) * static_cast<double>(n_windows - d), 0) << " s\n";
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
      std::size_t seeds = 0;  // runs averaged (Keyformer with noise: its seeds; else 1)
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
        Cell c{mean_se(nll), mean_se(kl), mean_se(top1), 0.0, idx.size(), mean_se(dnll)};
        // Sample standard deviation over seeds of the per-seed mean NLL (se * sqrt(n)).
        if (seed_means.size() > 1)
          c.seed_std_nll = mean_se(seed_means).se * std::sqrt(static_cast<double>(seed_means.size()));
        table[{label, ratio}] = c;
      }
    const Stat full = mean_se(full_nll);
    {
      std::ostringstream csv;
      csv << "policy,ratio,k,nll,nll_se,delta_nll,delta_nll_se,kl,kl_se,top1,top1_se,nll_seed_std,w,seeds\n";
      for (const auto& label : labels)
        for (double ratio : ratios) {
          const Cell& c = table[{label, ratio}];
          csv << label << "," << ratio << "," << resolved_for("h2o", ratio).k << ","
              << fmt(c.nll.mean, 6) << "," << fmt(c.nll.se, 6) << "," << fmt(c.dnll.mean, 6) << ","
              << fmt(c.dnll.se, 6) << "," << fmt(c.kl.mean, 6) << ","
              << fmt(c.kl.se, 6) << "," << fmt(c.top1.mean, 6) << "," << fmt(c.top1.se, 6) << ","
              << fmt(c.seed_std_nll, 6) << "," << resolved_for(row_of(label).budget_policy(), ratio, &row_of(label)).w
              << "," << c.seeds << "\n";
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
    std::cout << "Row specs (--policies): +shared = one selection per layer; +reindexed = positions re-indexed after "
                 "every eviction; +pyramid = PyramidKV per-layer budgets; +boundedC = bounded prefill in chunks of C; "
                 "@recent=Q = w = floor(Q k); oracle = evicts the token the full cache attends least over the rest "
                 "of the window (per KV head, w as h2o; a reference bound, not a policy).\n";
    if (flags.layer_budgets.kind != kvevict::LayerBudgets::Kind::uniform)
      std::cout << "Per-layer budgets: " << flags.layer_budgets_label
                << " (kvevict::layer_budgets; the layers' total equals layers x k; snapkv keeps L in every layer).\n";
    if (std::any_of(rows.begin(), rows.end(), [](const RowSpec& row) { return row.policy == "snapkv"; }))
      std::cout << "SnapKV: observation window L = "
                << (flags.snap_window_given ? std::to_string(flags.snap_window) : std::string("min(32, k)"))
                << ", pooling " << kvevict::pooling_name(flags.snap_pooling) << " over K = " << flags.snap_kernel
                << ", decode " << kvevict::snap_decode_name(flags.snap_decode) << ".\n";
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
        if (c.seeds > 1) std::cout << " (" << c.seeds << " seeds, std " << fmt(c.seed_std_nll, 4) << ")";
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

    // Documents: which windows, and the paired NLL increase by the target's distance to its previous
    // occurrence in the window (per window: mean over its tokens of the class; then mean ± se over the
    // windows that have the class).
    std::string recurrence_csv, windows_csv;
    if (doc_mode) {
      const char* class_names[kvquality::kRecurrenceClasses] = {"none", "near", "mid", "far"};
      const std::string class_heads[kvquality::kRecurrenceClasses] = {
          "no previous occurrence", "< 64 back", "64.." + std::to_string(prompt / 2) + " back",
          "> " + std::to_string(prompt / 2) + " back"};
      std::vector<std::vector<kvquality::Recurrence>> classes(n_windows);
      std::size_t counts[kvquality::kRecurrenceClasses] = {0, 0, 0, 0};
      for (std::size_t w = 0; w < n_windows; ++w) {
        classes[w] = kvquality::recurrence_classes(tokens_of(w), prompt, prompt / 2);
        for (kvquality::Recurrence c : classes[w]) ++counts[static_cast<int>(c)];
      }
      std::ostringstream rcsv, wcsv;
      wcsv << "window,document,offset,tokens\n";
      for (std::size_t w = 0; w < n_windows; ++w)
        wcsv << w << "," << doc_names[doc_wins[w].doc] << "," << doc_wins[w].offset << "," << window << "\n";
      rcsv << "policy,ratio,class,delta_nll,delta_nll_se,windows,tokens\n";
      std::cout << "\nNLL increase over the full cache by the target token's distance to its previous occurrence in "
                   "the window (nats/token; per window the mean over its tokens of the class, then mean ± standard "
                   "error over windows). Tokens per class over all windows:";
      for (std::size_t c = 0; c < kvquality::kRecurrenceClasses; ++c)
        std::cout << (c ? ", " : " ") << class_heads[c] << " " << counts[c];
      std::cout << ".\n\n| policy | r |";
      for (const std::string& h : class_heads) std::cout << " " << h << " |";
      std::cout << "\n|---|---|---|---|---|---|\n";
      for (const auto& label : labels)
        for (double ratio : ratios) {
          std::vector<std::size_t> idx;
          for (std::size_t r = 0; r < runs.size(); ++r)
            if (runs[r].label == label && runs[r].ratio == ratio) idx.push_back(r);
          std::vector<double> per_class[kvquality::kRecurrenceClasses];
          for (std::size_t w = 0; w < n_windows; ++w) {
            double sum[kvquality::kRecurrenceClasses] = {0, 0, 0, 0};
            std::size_t n[kvquality::kRecurrenceClasses] = {0, 0, 0, 0};
            for (std::size_t i = 0; i < classes[w].size(); ++i) {
              double q = 0.0;
              for (std::size_t r : idx) q += results[r][w].token_nll[i] / static_cast<double>(idx.size());
              const int c = static_cast<int>(classes[w][i]);
              sum[c] += q - full_token_nll[w][i];
              ++n[c];
            }
            for (std::size_t c = 0; c < kvquality::kRecurrenceClasses; ++c)
              if (n[c] > 0) per_class[c].push_back(sum[c] / static_cast<double>(n[c]));
          }
          std::cout << "| " << label << " | " << ratio << " |";
          for (std::size_t c = 0; c < kvquality::kRecurrenceClasses; ++c) {
            const Stat st = mean_se(per_class[c]);
            rcsv << label << "," << ratio << "," << class_names[c] << "," << fmt(st.mean, 6) << "," << fmt(st.se, 6)
                 << "," << per_class[c].size() << "," << counts[c] << "\n";
            std::cout << " " << (per_class[c].empty() ? std::string("-")
                                                       : fmt_signed(st.mean, 4) + " ± " + fmt(st.se, 4))
                      << " |";
          }
          std::cout << "\n";
        }
      std::cout << "\nWindows (document @ first token):";
      for (std::size_t w = 0; w < n_windows; ++w)
        std::cout << (w ? "; " : " ") << doc_names[doc_wins[w].doc] << "@" << doc_wins[w].offset;
      std::cout << " (" << n_windows << " of the " << available << " windows of the documents).\n";
      recurrence_csv = rcsv.str();
      windows_csv = wcsv.str();
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
         << "set multiplot layout 1,2 title '"
         << (doc_mode ? std::filesystem::path(files.model_file).filename().string() + " on the documents of " +
                            std::filesystem::path(data_path).filename().string()
                      : std::string("stories260K on TinyStories-val"))
         << ": " << n_windows << " windows x "
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
    if (doc_mode) {
      kvcli::write_file_atomically(out_prefix + "_recurrence.csv", recurrence_csv);
      kvcli::write_file_atomically(out_prefix + "_windows.csv", windows_csv);
    }
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("stdout: write error");
    std::cerr << "wrote " << out_prefix << ".csv, " << out_prefix << "_summary.csv, " << out_prefix
              << "_plot.dat, " << out_prefix << ".gp\n";
    return kvcli::kExitOk;
  }, {{"--policy", "this tool runs the rows of --policies (e.g. --policies h2o,keyformer); see --help"},
        {"--budget", "this tool sweeps the budget with --ratios (e.g. --ratios 0.5 or --ratios 50%)"},
        {"--budget-ratio", "this tool sweeps the budget with --ratios (e.g. --ratios 0.5)"},
        {"--seed", "--seeds S runs Keyformer with the seeds 1..S"}});
}
