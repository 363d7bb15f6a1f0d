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

#include "cli/kvevict_cli.hpp"
#include "quality_run.hpp"

namespace kvquality {

int QualityRun::execute() {
  // ---- every flag first, then the output folder, then the files ----
  validate();
  load_inputs();
  build_runs();
  if (retrieval_n > 0) return run_retrieval();
  evaluate_windows();
  return write_report();
}

}  // namespace kvquality

int main(int argc, char** argv) {
  CLI::App app{"kvevict quality report: NLL, KL(full || policy) and top-1 agreement of every eviction policy "
               "against the full KV cache, on consecutive windows of a text."};
  kvquality::QualityRun quality;
  quality.add_options(app);
  return kvcli::run_tool(
      "kvevict-quality", app, argc, argv, [&]() -> int { return quality.execute(); },
      {{"--policy", "this tool runs the rows of --policies (e.g. --policies h2o,keyformer); see --help"},
       {"--budget", "this tool sweeps the budget with --ratios (e.g. --ratios 0.5 or --ratios 50%)"},
       {"--budget-ratio", "this tool sweeps the budget with --ratios (e.g. --ratios 0.5)"},
       {"--seed", "--seeds S runs Keyformer with the seeds 1..S"}});
}
