// kvevict-llama --parallel N (parallel_run.hpp): N sequences of one llama_context, one Evictor each (Sequences),
// prompts one at a time, then one llama_batch of one token per sequence per decode step.
// SPDX-License-Identifier: Apache-2.0
#include "parallel_run.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/kvevict_cli.hpp"
#include "kvevict_sequences.hpp"
#include "tool_support.hpp"

namespace kvevict_llama_tool {

std::size_t parallel_min_cells(bool evicting, bool unified, bool bounded, std::size_t n_seq, std::size_t P,
                               std::size_t T, std::size_t k, std::size_t C) {
  if (!evicting) return n_seq * (P + T);
  const std::size_t prompt = bounded ? std::min(P, k + C) : P;  // the most cells a prompt holds before its cut
  if (!unified) return n_seq * (std::max(prompt, k + 1) + 1);
  return (n_seq - 1) * (k + 1) + std::max(prompt, k + 1) + n_seq;
}

namespace {

// One sequence's progress: its window of the text, the next token to feed, its outputs.
struct Seq {
  std::size_t start = 0;    // first token of its window in run.tokens
  std::size_t next_pos = 0;  // positions decoded so far
  llama_token feed = 0;      // the token of the next decode step
  std::vector<llama_token> ids;
  double nll = 0.0;
  std::size_t predictions = 0;
  bool done = false;
};

double target_nll(const float* l, int n_vocab, llama_token target) {
  const float m = *std::max_element(l, l + n_vocab);
  double s = 0.0;
  for (int i = 0; i < n_vocab; ++i) s += std::exp(static_cast<double>(l[i] - m));
  return -(static_cast<double>(l[target] - m) - std::log(s));
}

}  // namespace

int run_parallel(const ParallelRun& run) {
  const std::size_t n_seq = run.n_seq, P = run.P, T = run.T;
  const bool evicting = !run.no_kvevict && !run.full;
  const int n_vocab = llama_vocab_n_tokens(run.vocab);

  std::unique_ptr<kvevict_llama::Sequences> seqs;
  if (!run.no_kvevict && !(run.full && run.flash)) {
    std::vector<std::unique_ptr<kvevict_llama::Evictor>> evs;
    for (std::size_t i = 0; i < n_seq; ++i) {
      evs.push_back(std::make_unique<kvevict_llama::Evictor>(run.policy, run.config, run.params, P + T, !run.full));
      if (run.rows == kvevict_llama::ScoreRows::summed) evs.back()->set_score_rows(run.rows);
      if (run.bounded) evs.back()->set_bounded_prefill(run.C);
    }
    seqs = std::make_unique<kvevict_llama::Sequences>(std::move(evs));
  }
  const std::size_t batch_cap = std::max(run.C, n_seq);
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = static_cast<uint32_t>(run.n_ctx);
  cparams.n_batch = static_cast<uint32_t>(batch_cap);
  cparams.n_ubatch = static_cast<uint32_t>(batch_cap);
  cparams.n_seq_max = static_cast<uint32_t>(n_seq);
  cparams.swa_full = run.swa_full;
  cparams.kv_unified = run.unified;  // one pool of cells: what one sequence frees, any other can use
  cparams.n_threads = run.threads;
  cparams.n_threads_batch = run.threads;
  cparams.flash_attn_type = run.flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cparams.no_perf = true;
  if (seqs) {
    cparams.cb_eval = kvevict_llama::Sequences::eval_callback;
    cparams.cb_eval_user_data = seqs.get();
  }
  std::unique_ptr<llama_context, decltype(&llama_free)> ctx(llama_init_from_model(const_cast<llama_model*>(run.model),
                                                                                  cparams),
                                                            llama_free);
  if (!ctx) throw std::runtime_error("llama_init_from_model failed");
  llama_memory_t mem = llama_get_memory(ctx.get());
  if (seqs) {
    try {
      seqs->attach(ctx.get(), run.model, run.unified);
    } catch (const std::invalid_argument& e) {
      throw kvcli::UsageError("--model", e.what());
    }
  }

  llama_batch batch = llama_batch_init(static_cast<int32_t>(batch_cap), 0, 1);
  struct BatchGuard {
    llama_batch& b;
    ~BatchGuard() { llama_batch_free(b); }
  } batch_guard{batch};
  std::vector<Seq> s(n_seq);
  for (std::size_t i = 0; i < n_seq; ++i) s[i].start = i * run.stride;
  std::vector<std::vector<std::int64_t>> before(n_seq);
  std::vector<std::size_t> first(n_seq, 0);

  // Decodes the batch; then each listed sequence's evictor ends it (scores, evicts) and the step is checked.
  auto decode = [&](const std::vector<std::size_t>& which, std::size_t n_each, std::size_t step) {
    const int rc = llama_decode(ctx.get(), batch);
    kvevict_llama::take_callback_error();
    if (rc != 0) throw std::runtime_error("llama_decode returned " + std::to_string(rc));
    if (!seqs) return;
    for (std::size_t i : which) {
      kvevict_llama::Evictor& ev = seqs->at(i);
      try {
        ev.end();
      } catch (const kvevict_llama::SeqRmRefused& e) {
        throw kvcli::UsageError("--model", e.what());
      }
      if (ev.prompt_len() != 0) {
        check_step(ev, mem, run.k, n_each, before[i], first[i], step);
        if (run.kept && ev.cache()) write_kept_line(*run.kept, first[i], *ev.cache(), static_cast<int>(i));
      }
    }
  };
  auto add = [&](std::size_t row, llama_token id, std::size_t pos, std::size_t seq, bool logits) {
    batch.token[row] = id;
    batch.pos[row] = static_cast<llama_pos>(pos);
    batch.n_seq_id[row] = 1;
    batch.seq_id[row][0] = static_cast<llama_seq_id>(seq);
    batch.logits[row] = logits;
  };
  auto greedy = [&](const float* l) { return static_cast<llama_token>(std::max_element(l, l + n_vocab) - l); };

  // The prompts, one sequence at a time; each is cut to its budget, then the context compacted.
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < n_seq; ++i) {
    const llama_token* ids = run.tokens.data() + s[i].start;
    for (std::size_t j = 0; j < P; j += run.C) {
      const std::size_t n = std::min(run.C, P - j);
      if (seqs) {
        before[i] = seqs->at(i).kept();
        first[i] = static_cast<std::size_t>(seqs->at(i).begin(n, 0));
      } else {
        first[i] = j;
      }
      batch.n_tokens = static_cast<int32_t>(n);
      for (std::size_t r = 0; r < n; ++r) add(r, ids[j + r], j + r, i, r + 1 == n);
      decode({i}, n, j);
    }
    s[i].next_pos = P;
    // The sequence's first decode token, before another prompt overwrites the logits.
    s[i].feed = run.teacher ? ids[P] : greedy(llama_get_logits_ith(ctx.get(), -1));
    if (seqs) {
      kvevict_llama::Evictor& ev = seqs->at(i);
      try {
        ev.end_prompt();
      } catch (const kvevict_llama::SeqRmRefused& e) {
        throw kvcli::UsageError("--model", e.what());
      }
      if (run.kept && ev.cache()) write_kept_line(*run.kept, P - 1, *ev.cache(), static_cast<int>(i));
      if (ev.dropped() > 0) seqs->maybe_compact(true);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu1 = cpu_seconds();

  // Decode steps: one token per live sequence, all in one batch.
  std::size_t decoded = 0;
  std::vector<std::size_t> rows;
  for (std::size_t step = 0; step < T; ++step) {
    rows.clear();
    for (std::size_t i = 0; i < n_seq; ++i)
      if (!s[i].done) rows.push_back(i);
    if (rows.empty()) break;
    batch.n_tokens = static_cast<int32_t>(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::size_t i = rows[r];
      if (!run.teacher) s[i].ids.push_back(s[i].feed);
      if (seqs) {
        before[i] = seqs->at(i).kept();
        // One pool: the batch's row r. A stream each: row 0 of the batch's stream r (its sequences in id order).
        first[i] = static_cast<std::size_t>(run.unified ? seqs->at(i).begin(1, r) : seqs->at(i).begin(1, 0, r));
      } else {
        first[i] = s[i].next_pos;
      }
      add(r, s[i].feed, first[i], i, true);
    }
    decode(rows, 1, P + step);
    decoded += rows.size();
    for (std::size_t r = 0; r < rows.size(); ++r) {
      Seq& q = s[rows[r]];
      const float* l = llama_get_logits_ith(ctx.get(), static_cast<int32_t>(r));
      ++q.next_pos;
      if (run.teacher) {
        const llama_token target = run.tokens[q.start + P + step + 1];
        q.nll += target_nll(l, n_vocab, target);
        ++q.predictions;
        q.feed = target;
        continue;
      }
      const bool eog = llama_vocab_is_eog(run.vocab, q.feed);
      q.feed = greedy(l);
      if (eog && !run.ignore_eos) {  // the sequence ended: its cells go back to the pool
        q.done = true;
        if (seqs)
          seqs->release(rows[r]);
        else if (!llama_memory_seq_rm(mem, static_cast<llama_seq_id>(rows[r]), -1, -1))
          throw std::runtime_error("llama_memory_seq_rm refused to free sequence " + std::to_string(rows[r]));
      }
    }
    if (seqs && evicting) seqs->maybe_compact();
  }
  const auto t2 = std::chrono::steady_clock::now();
  const double cpu2 = cpu_seconds();

  for (std::size_t i = 0; i < n_seq; ++i) {
    if (run.teacher) {
      std::printf("{\"seq\":%zu,\"nll\":%.6f,\"predictions\":%zu,\"prompt\":%zu,\"policy\":\"%s\",\"k\":%zu}\n", i,
                  s[i].nll / static_cast<double>(std::max<std::size_t>(s[i].predictions, 1)), s[i].predictions, P,
                  run.policy_name.c_str(), run.k);
    } else {
      std::printf("ids[%zu]:", i);
      for (llama_token id : s[i].ids) std::printf(" %d", id);
      std::printf("\n");
    }
  }
  if (std::fflush(stdout) != 0) throw std::runtime_error("stdout: write error");
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count(), decode_cpu = cpu2 - cpu1;
  // A cell's F16 K and V in the global layers (a sliding-window layer's cache is its own, of a fixed size).
  const kvevict_llama::LayerKinds kinds = kvevict_llama::LayerKinds::of(run.model);
  const auto n_head_kv = static_cast<std::size_t>(llama_model_n_head_kv(run.model));
  const double cell_bytes =
      static_cast<double>(kinds.n_global * n_head_kv * kvevict_llama::key_head_dim(run.model) * 2 * 2);
  std::fprintf(stderr,
               "kvevict-llama: [%s k=%zu] %zu sequences (%s), n_ctx %zu cells (%.1f MB of F16 K/V%s): prompts %zu x "
               "%zu tok in %.3f s, %zu decode tokens in %.3f s (%.2f tok/s; %.3f CPU s, %.2f tok/CPU s)",
               run.policy_name.c_str(), run.k, n_seq, run.unified ? "one pool of cells" : "a stream each", run.n_ctx,
               static_cast<double>(run.n_ctx) * cell_bytes / 1e6, kinds.hybrid() ? " in the global layers" : "",
               n_seq, P, prefill_s, decoded, decode_s, decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0.0,
               decode_cpu, decode_cpu > 0 ? static_cast<double>(decoded) / decode_cpu : 0.0);
  if (seqs) {
    std::size_t dropped = 0, reused = 0;
    for (std::size_t i = 0; i < n_seq; ++i) {
      dropped += seqs->at(i).dropped();
      reused += seqs->at(i).cell_map().reused();
    }
    if (run.flash)  // no kq_soft_max, so no mask: the cells are not tracked
      std::fprintf(stderr, "; dropped %zu, compactions %zu (flash attention: cells not tracked)", dropped,
                   seqs->compactions());
    else
      std::fprintf(stderr, "; dropped %zu, cells reused %zu, compactions %zu", dropped, reused, seqs->compactions());
  }
  std::fprintf(stderr, "\n");
  return kvcli::kExitOk;
}

}  // namespace kvevict_llama_tool
