// kvevict — bench/quality/quality_run.hpp: one kvevict-quality invocation: its flags, inputs, sweep and phases.
// SPDX-License-Identifier: Apache-2.0
//
// main() (quality_main.cpp) adds the flags with `add_options`, then `execute` runs the phases in order:
//   validate       every flag, then the output folder          (quality_options.cpp)
//   load_inputs    the model, the text or documents, windows    (quality_inputs.cpp)
//   build_runs     the engines of the sweep                     (quality_sweep.cpp)
//   run_retrieval  the needle-retrieval task and its report     (quality_retrieval_task.cpp), or
//   evaluate_windows, write_report  the windows and the report  (quality_sweep.cpp, quality_report.cpp)
// Errors are thrown as in every kvevict tool (kvcli::UsageError: exit code 2).
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "llama2/engine.hpp"
#include "llama2/model_files.hpp"
#include "oracle.hpp"
#include "quality_eval.hpp"
#include "retrieval.hpp"
#include "rows.hpp"
#include "thread_pool.hpp"

namespace kvquality {

// One engine of the sweep: a row at one budget ratio (and one seed for Keyformer with noise).
struct Run {
  std::string label;      // the row spec as typed: "keyformer", "h2o+shared", "oracle", ...
  const RowSpec* row;     // its parsed spec
  double ratio = 0.0;     // budget fraction of the prompt
  std::uint64_t seed = 0;
  kvcli::Resolved kws;    // k, w, sinks (resolved for the prompt length)
};

class QualityRun {
 public:
  /// Adds every flag of kvevict-quality to `app`, bound to this object's fields.
  void add_options(CLI::App& app);
  /// The whole run after parsing: validate, load_inputs, build_runs, then the retrieval task or the windows
  /// and their report. Returns the exit code.
  int execute();

 private:
  // ---- quality_options.cpp ----
  /// Checks every flag (errors name the flag), then the output folder; sets the validated fields.
  void validate();
  /// The output folders are writable; then the one rule for files (kvcli::FileRoles): no output (each file
  /// --out PREFIX names, --prompts-out) is the model, the tokenizer, --data's text or one of its documents, or
  /// another output. Throws `kvcli::UsageError` naming the flag (both flags for a pair). Loads nothing.
  void check_files() const;
  /// The flags of one row at one ratio: its @recent=Q replaces --recent, +pyramid sets the schedule.
  kvcli::EvictionFlags flags_for(double ratio, const RowSpec* row) const;
  /// k, w, sinks of `policy` at `ratio` (row: its @recent=Q, +pyramid), resolved as every kvevict tool does.
  kvcli::Resolved resolved_for(const std::string& policy, double ratio, const RowSpec* row = nullptr) const;
  // ---- quality_inputs.cpp ----
  /// Loads the model and the text (--data FILE) or the documents (--data DIR), and picks the windows.
  void load_inputs();
  /// Window w's tokens.
  std::vector<int> tokens_of(std::size_t w) const;
  // ---- quality_sweep.cpp ----
  /// The sweep: one run per row, ratio and seed; checks a non-uniform schedule against the model.
  void build_runs();
  /// The parsed spec of row `label`.
  const RowSpec& row_of(const std::string& label) const;
  /// One engine per run, for windows with `horizon` decode steps (`future`: the oracle rows' view).
  /// `context`: the positions the engine must hold (a window, or a retrieval prompt and its answer).
  std::unique_ptr<llama2::Engine> make_engine_for(const Run& run, FutureAttention& future, std::size_t horizon,
                                                  kvtools::ThreadPool* step_pool, std::size_t context) const;
  /// Every run's engine, built once per worker and sized for `context` positions (a GGUF model's context,
  /// e.g. 8192 positions, would make each engine's KV buffers four times a 2K window's).
  std::vector<std::unique_ptr<llama2::Engine>> make_engines(FutureAttention& future, std::size_t horizon,
                                                            kvtools::ThreadPool* step_pool,
                                                            std::size_t context) const;
  /// Every run and the full cache on every window (--threads workers): sets results, full_nll, full_token_nll.
  void evaluate_windows();
  // ---- quality_retrieval_task.cpp ----
  /// The retrieval task: every run (and the full cache) answers every prompt greedily; writes its report.
  int run_retrieval();
  // ---- quality_report.cpp ----
  /// The windows' report: the CSV files, the gnuplot data and script, the Markdown tables on stdout.
  int write_report();

  // The flags as typed (add_options).
  std::string model_path, tokenizer_path, data_path, windows_opt = "32", window_text = "512", prompt_text = "256",
                                                     seeds_text = "5", threads_text, step_threads_text = "1",
                                                     out_prefix = "quality", retrieval_text = "0",
                                                     retrieval_format_text = "plain", retrieval_seed_text = "1",
                                                     needle_repeats_text = "1", answer_tokens_text = "8",
                                                     prompts_out;
  std::vector<std::string> labels{"keyformer", "keyformer-nonoise", "h2o", "streaming", "window", "tova", "snapkv"};
  std::vector<std::string> ratio_texts{"0.1", "0.2", "0.3", "0.5", "0.7", "0.9"};
  kvcli::EvictionFlags flags;

  // Validated (validate).
  std::size_t window = 0, prompt = 0, seeds = 0, step_threads = 0, prefill_chunk = 0, retrieval_n = 0,
              answer_tokens = 0;
  unsigned threads = 0;
  RetrievalSpec rspec;
  bool bounded_prefill = false;
  std::vector<RowSpec> rows;
  bool any_oracle = false;
  std::vector<double> ratios;
  std::size_t n_windows_wanted = 0;  // 0 = all

  // The inputs (load_inputs).
  std::unique_ptr<llama2::LoadedModel> loaded;  // the model and its tokenizer
  bool doc_mode = false;
  std::vector<int> ids;                 // --data FILE: the whole text
  std::vector<std::string> doc_names;   // --data DIR: the documents' file names
  std::vector<std::vector<int>> doc_ids;  //   and their tokens
  std::vector<DocWindow> doc_wins;        //   and the windows
  std::size_t available = 0, n_windows = 0;

  // The sweep (build_runs) and its results (evaluate_windows): results[run][window]; full_nll[window].
  std::vector<Run> runs;
  std::vector<std::vector<WindowResult>> results;
  std::vector<double> full_nll;
  std::vector<std::vector<double>> full_token_nll;
};

}  // namespace kvquality
