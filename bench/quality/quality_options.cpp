// kvevict — bench/quality/quality_options.cpp: kvevict-quality's flags: defined, validated, resolved per row.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "llama2/model_files.hpp"
#include "quality_eval.hpp"
#include "quality_run.hpp"

namespace kvquality {

void QualityRun::add_options(CLI::App& app) {
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
  spec.prefill_chunk_help = "every policy prefills the prompt in chunks of C tokens (docs/long-prompts.md); "
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
  app.add_option("--prompts-out", prompts_out,
                 "--retrieval: also write the prompts to FILE, one line each: index, depth %, code, then the prompt's "
                 "token ids, space-separated (bench/quality/kvpress/retrieval.py reads it)")
      ->type_name("FILE");
  app.add_option("--answer-tokens", answer_tokens_text, "greedy tokens generated per answer, >= 1 (default 8)")
      ->type_name("INT");
  app.add_option("--out", out_prefix,
                 "output prefix: PREFIX.csv, PREFIX_summary.csv, PREFIX_plot.dat, PREFIX.gp (default quality); its "
                 "folder must exist; each file is written whole or not at all");
}

void QualityRun::validate() {
  flags.validate();
  window = kvcli::parse_count(window_text, "--window", 4, 1u << 20);
  prompt = kvcli::parse_count(prompt_text, "--prompt", 1, 1u << 20);
  if (prompt + 2 > window)
    throw kvcli::UsageError("--prompt", std::to_string(prompt) + " must be at most --window - 2 = " +
                                            std::to_string(window - 2) + "; lower --prompt or raise --window");
  seeds = kvcli::parse_count(seeds_text, "--seeds", 1, 1000);
  threads = kvcli::parse_threads(threads_text);
  step_threads = kvcli::parse_count(step_threads_text, "--step-threads", 1, 1024);
  prefill_chunk = flags.prefill_chunk;
  retrieval_n = kvcli::parse_count(retrieval_text, "--retrieval", 0, 100000);
  try {
    rspec.format = kvquality::parse_retrieval_format(retrieval_format_text);
  } catch (const std::invalid_argument& e) {
    throw kvcli::UsageError("--retrieval-format", e.what());
  }
  rspec.seed = kvcli::parse_count(retrieval_seed_text, "--retrieval-seed", 0, ~std::size_t{0} >> 1);
  rspec.needle_repeats = kvcli::parse_count(needle_repeats_text, "--needle-repeats", 1, 100);
  answer_tokens = kvcli::parse_count(answer_tokens_text, "--answer-tokens", 1, 1024);
  rspec.prompt = prompt;
  rspec.per_depth = retrieval_n;
  bounded_prefill = flags.bounded_prefill;
  rows = [&] {
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
      // The global flags against each row: refused here, naming the flags, before the model is loaded
      // (the library would refuse them later with its own parameter names).
      if (row.adakv && flags.paged)
        throw kvcli::UsageError("--kv-layout", "paged with row '" + row.label + "': +adakv gives each KV head its "
                                               "own length, and a page slot holds every KV head's token; drop "
                                               "--kv-layout paged or +adakv");
      if (row.adakv && flags.shared_heads)
        throw kvcli::UsageError("--shared-heads", "with row '" + row.label + "': +adakv shares the budget among KV "
                                                  "heads, --shared-heads keeps the same tokens on every head; drop "
                                                  "one of them");
      if (row.adakv && flags.bounded_prefill)
        throw kvcli::UsageError("--bounded-prefill", "with row '" + row.label + "': +adakv is not supported with a "
                                                     "bounded prefill (the chunks need every KV head at one length); "
                                                     "drop --bounded-prefill or +adakv");
      if (row.expected && prefill_chunk != 0)
        throw kvcli::UsageError("--prefill-chunk", "with row '" + row.label + "': expected-attention needs a "
                                                   "one-shot prefill (its query statistics come from the whole "
                                                   "prompt); drop --prefill-chunk or leave the row out");
      if (row.expected && flags.paged)
        throw kvcli::UsageError("--kv-layout", "paged with row '" + row.label + "': expected-attention ranks a "
                                               "contiguous TOVA cache; drop --kv-layout paged or leave the row out");
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
  if (!prompts_out.empty() && retrieval_n == 0)
    throw kvcli::UsageError("--prompts-out", "writes the --retrieval prompts; add --retrieval N");
  if (retrieval_n > 0)
    for (const RowSpec& row : rows)
      if (row.policy == "oracle")
        throw kvcli::UsageError("--policies", "the oracle bound needs the full cache's attention over a "
                                              "teacher-forced window; leave it out with --retrieval");
  any_oracle =
      std::any_of(rows.begin(), rows.end(), [](const RowSpec& r) { return r.policy == "oracle"; });
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
  n_windows_wanted = 0;  // 0 = all
  if (windows_opt != "all") {
    const bool digits = !windows_opt.empty() && windows_opt.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || windows_opt.size() > 9 || std::stoul(windows_opt) == 0)
      throw kvcli::UsageError("--windows", "expected a positive integer or 'all', got '" + windows_opt + "'");
    n_windows_wanted = std::stoul(windows_opt);
  }
  // k, w, sinks per policy and ratio, resolved as every kvevict tool resolves them (errors name the flags).
  for (double r : ratios)
    for (const RowSpec& row : rows) resolved_for(row.budget_policy(), r, &row);
  check_files();
}

void QualityRun::check_files() const {
  // The output folders first (they need no model), then: no output may be an input or another output
  // (compared as files, not spellings), before anything is loaded or written: the model, its tokenizer, the text
  // or every document of the folder.
  kvcli::check_output_prefix(out_prefix, "--out");
  if (!prompts_out.empty()) kvcli::check_output_file(prompts_out, "--prompts-out");
  kvcli::FileRoles roles;
  llama2::add_model_inputs(roles, model_path, tokenizer_path);
  const std::string data = data_path.empty() ? kvcli::shared_dir() + "/data/tinystories-val/tinystories_val.txt"
                                             : data_path;
  std::error_code ec;
  if (std::filesystem::is_directory(data, ec)) {
    try {
      for (const std::string& doc : kvquality::list_documents(data)) roles.input("--data", doc);
    } catch (const std::runtime_error& e) {
      throw kvcli::UsageError("--data", e.what());
    }
  } else {
    roles.input("--data", data);
  }
  for (const char* suffix : {".csv", "_summary.csv", "_plot.dat", ".gp", "_recurrence.csv", "_windows.csv",
                             "_retrieval.csv"})
    roles.output(std::string("--out (") + out_prefix + suffix + ")", out_prefix + suffix);
  roles.output("--prompts-out", prompts_out);
  roles.check();
}

kvcli::EvictionFlags QualityRun::flags_for(double ratio, const RowSpec* row) const {
  kvcli::EvictionFlags f = flags;
  // The tool's --recent is the window of the policies that keep one by default; TOVA (and the expected-attention
  // rows, which rank with TOVA) take a window only from their own @recent.
  if (row != nullptr && row->policy == "tova") f.recent.reset();
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
  if (row != nullptr && row->snap_kernel) f.snap_kernel = *row->snap_kernel;
  if (row != nullptr && !row->snap_decode.empty()) f.snap_decode = kvevict::parse_snap_decode(row->snap_decode);
  f.budget.is_ratio = true;
  f.budget.ratio = ratio;
  std::ostringstream typed;
  typed << ratio;
  f.budget.text = typed.str();
  f.budget_given = true;
  f.budget_flag = "--ratios";
  return f;
}

kvcli::Resolved QualityRun::resolved_for(const std::string& policy, double ratio, const RowSpec* row) const {
  kvcli::EvictionFlags f = flags_for(ratio, row);
  if (row == nullptr && policy == "tova") f.recent.reset();  // as flags_for: a TOVA window comes from @recent only
  return kvcli::resolve(f, prompt, policy);
}

}  // namespace kvquality
