// kvevict — bench/quality/quality_report.cpp: kvevict-quality's report of the windows: CSV, gnuplot, Markdown.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "quality_run.hpp"

namespace kvquality {

int QualityRun::write_report() {
  const llama2::LoadedModel& files = *loaded;
  const std::string recent_desc = flags.recent ? flags.recent_flag + " " + flags.recent->text : "--recent 30%";
  // The KV layout every policy engine uses, as the flags typed it (for the report's first line).
  const std::string layout_desc =
      flags.paged ? "paged, page size " + std::to_string(flags.page_size) + ", evict unit " +
                        (flags.evict_pages ? "page" : "token") + " (one selection per layer)"
                  : flags.shared_heads ? "contiguous, --shared-heads (one selection per layer)"
                                       : "contiguous (one selection per KV head)";

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
  // One table of a Cell's Stat per label and ratio: "mean ± se", the mean signed where asked.
  auto stat_table = [&](const std::string& title, Stat Cell::*stat, int digits, bool signed_mean) {
    header(title);
    for (const auto& label : labels) {
      std::cout << "| " << label << " |";
      for (double r : ratios) {
        const Stat& st = table[{label, r}].*stat;
        std::cout << " " << (signed_mean ? fmt_signed(st.mean, digits) : fmt(st.mean, digits)) << " ± "
                  << fmt(st.se, digits) << " |";
      }
      std::cout << "\n";
    }
  };
  stat_table("NLL increase over the full cache, paired per window (nats/token)", &Cell::dnll, 4, true);
  stat_table("Mean KL(full || policy) (nats)", &Cell::kl, 4, false);
  stat_table("Top-1 agreement with the full cache", &Cell::top1, 3, false);

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
}

}  // namespace kvquality
