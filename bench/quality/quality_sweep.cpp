// kvevict — bench/quality/quality_sweep.cpp: kvevict-quality's sweep: its runs, their engines, the windows evaluated.
// SPDX-License-Identifier: Apache-2.0
#include <atomic>
#include <chrono>
#include <exception>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "reindex.hpp"
#include "quality_run.hpp"

namespace kvquality {

void QualityRun::build_runs() {
  const llama2::Model& model = loaded->model;
  // The sweep.
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
}

const RowSpec& QualityRun::row_of(const std::string& label) const {
  for (const RowSpec& row : rows)
    if (row.label == label) return row;
  throw std::logic_error("kvevict-quality: no row '" + label + "'");
}

std::unique_ptr<llama2::Engine> QualityRun::make_engine_for(const Run& run, FutureAttention& future,
                                                            std::size_t horizon, kvtools::ThreadPool* step_pool,
                                                            std::size_t context) const {
  const llama2::Model& model = loaded->model;
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
  s.params.noise_scale = row.noise_scale.value_or(1.0f);
  s.params.mean_attention = row.mean;
  s.prompt_len = prompt;
  s.seed = run.seed;
  s.shared_heads = s.shared_heads || row.shared;
  if (row.adakv) s.head_budgets = kvevict::HeadBudgets::adaptive(row.adakv_alpha.value_or(0.2f));
  if (row.expected) s.expected_attention = kvevict::ExpectedAttentionOptions{};
  s.prefill_chunk = row.bounded_chunk != 0 ? row.bounded_chunk : prefill_chunk;
  s.bounded_prefill = row.bounded_chunk != 0 || bounded_prefill;
  // A chunked row runs alone at the model's full context: its capacity must hold k + C during the
  // prefill (CacheConfig::max_prefill_chunk), which a window-sized context may not.
  s.context = s.prefill_chunk != 0 ? 0 : context;
  std::unique_ptr<llama2::Engine> e = llama2::make_engine(model, s);
  if (row.reindexed) kvquality::reindex_positions(*e);
  e->set_pool(step_pool);
  return e;
}

std::vector<std::unique_ptr<llama2::Engine>> QualityRun::make_engines(FutureAttention& future, std::size_t horizon,
                                                                      kvtools::ThreadPool* step_pool,
                                                                      std::size_t context) const {
  std::vector<std::unique_ptr<llama2::Engine>> engines;
  for (const Run& run : runs) engines.push_back(make_engine_for(run, future, horizon, step_pool, context));
  return engines;
}

void QualityRun::evaluate_windows() {
  const llama2::Model& model = loaded->model;
  std::size_t n_tokens = ids.size();
  for (const std::vector<int>& d : doc_ids) n_tokens += d.size();
  std::cerr << "kvevict-quality: " << (doc_mode ? std::to_string(doc_ids.size()) + " documents, " : std::string())
            << n_tokens << " tokens, " << n_windows << " of " << available
            << " windows of " << window << " (prompt " << prompt << "), " << runs.size() << " runs per window, "
            << threads << " threads x " << step_threads << " step threads\n";

  // results[run][window]; full_nll[window].
  results.assign(runs.size(), std::vector<WindowResult>(n_windows));
  full_nll.assign(n_windows, 0.0);
  full_token_nll.assign(n_windows, std::vector<double>());
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
}

}  // namespace kvquality
