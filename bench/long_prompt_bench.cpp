// Long-prompt prefill benchmarks: Keyformer's prefill scoring against the
// prompt length P, one-shot (materialised [q_head][P][P] logits) vs chunked (C = 512,
// materialised [q_head][C][n] chunk logits) vs Q·K-tiled (prefill_chunk_qk), unbounded
// and bounded (k = 1024). 8 KV heads, d = 128, g = 1, float K/V.
//
// Each benchmark reports the scoring time (the cache's calls only: prefill, or every
// prefill_chunk / prefill_chunk_qk plus finish_prefill; the Q·K GEMM is part of the
// latter) and the process's peak resident memory (getrusage ru_maxrss), so run each in
// its own process: bench/long_prompt.sh does (see bench/docs/long-prompts.md).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"
#include "decode_bench.hpp"

namespace kvbench {
namespace {

constexpr std::size_t kDim = 128, kChunk = 512, kBudget = 1024;
constexpr double kOneShotLogitsLimit = 4.0 * (1u << 30);  // bytes; above it the one-shot prefill is skipped

enum class Mode { one_shot, chunked, chunked_qk, bounded, bounded_qk };

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::one_shot: return "OneShot";
    case Mode::chunked: return "Chunked";
    case Mode::chunked_qk: return "ChunkedQK";
    case Mode::bounded: return "Bounded";
    case Mode::bounded_qk: return "BoundedQK";
  }
  return "?";
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

// Cheap deterministic values in [-4, 4) (an LCG): logits whose exact values do not matter.
void fill_fast(float* out, std::size_t count, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1u;
  for (std::size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<float>(x >> 8) * (8.0f / 16777216.0f) - 4.0f;
  }
}

void bm_long_prompt(benchmark::State& state, Mode mode, std::size_t P) {
  const std::size_t nq = kKVHeads;
  const bool bounded = mode == Mode::bounded || mode == Mode::bounded_qk;
  const bool qk = mode == Mode::chunked_qk || mode == Mode::bounded_qk;
  const std::size_t capacity = bounded ? kBudget + kChunk : P + 1;
  kvevict::KVBuffer<float> buffer(kKVHeads, capacity, kDim);
  kvevict::KVView<float> kv = buffer.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = nq;
  cfg.budget = kvevict::Budget::tokens(kBudget);
  cfg.recent = kvevict::RecentWindow::tokens(kBudget / 4);
  cfg.seed = 1234;
  cfg.max_prefill_chunk = mode == Mode::one_shot ? 0 : kChunk;
  cfg.bounded_prefill = bounded;
  kvevict::Keyformer cache(cfg, kv, kvevict::GumbelLogitScore{}, kvevict::LinearTemperature(1.0f, 2.0f, 1024));

  // The engine's side: K/V rows of one chunk (reused for every chunk: values do not
  // change the cost), the chunk's queries, and the logits the mode needs.
  std::vector<float> k_rows(kChunk * kKVHeads * kDim), v_rows(k_rows.size()), q(kChunk * nq * kDim);
  fill_normal(k_rows.data(), k_rows.size(), 1);
  fill_normal(v_rows.data(), v_rows.size(), 2);
  fill_normal(q.data(), q.size(), 3);
  std::vector<float> logits;
  std::unique_ptr<kvevict::QKChunkScratch> scratch;
  if (mode == Mode::one_shot)
    logits.resize(nq * P * P);
  else if (!qk)
    logits.resize(nq * kChunk * std::min(capacity, P));
  else
    scratch = std::make_unique<kvevict::QKChunkScratch>(capacity, kDim);
  fill_fast(logits.data(), logits.size(), 7);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));

  double seconds = 0.0;
  for (auto _ : state) {
    cache.reset();
    seconds = 0.0;
    for (std::size_t held = 0; held < P; held += kChunk) {
      const std::size_t len = mode == Mode::one_shot ? P : std::min(kChunk, P - held);
      for (std::size_t i = 0; i < len; ++i) {
        const std::size_t r = i % kChunk;
        kv.append(static_cast<std::int64_t>(held + i), k_rows.data() + r * kKVHeads * kDim,
                  v_rows.data() + r * kKVHeads * kDim);
      }
      const std::size_t n = kv.length(0);
      const auto t0 = Clock::now();
      if (mode == Mode::one_shot)
        cache.prefill(logits.data(), P);
      else if (qk)
        kvevict::prefill_chunk_qk(cache, kv, q.data(), len, nq, scale, *scratch);
      else
        cache.prefill_chunk(logits.data(), len, n);
      seconds += seconds_since(t0);
      if (mode == Mode::one_shot) break;
    }
    if (mode != Mode::one_shot) {
      const auto t0 = Clock::now();
      cache.finish_prefill();
      seconds += seconds_since(t0);
    }
    state.SetIterationTime(seconds);
    benchmark::DoNotOptimize(cache.scores(0)[0]);
  }
  state.counters["P"] = static_cast<double>(P);
  state.counters["C"] = mode == Mode::one_shot ? static_cast<double>(P) : static_cast<double>(kChunk);
  state.counters["kept"] = static_cast<double>(cache.length(0));
  state.counters["scoring_ms"] = 1e3 * seconds;
  state.counters["logits_MiB"] = static_cast<double>(logits.size() * sizeof(float)) / (1u << 20);
  state.counters["kv_MiB"] = 2.0 * kKVHeads * static_cast<double>(capacity * kDim * sizeof(float)) / (1u << 20);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

}  // namespace

void register_long_prompt_benchmarks() {
  for (std::size_t P : {std::size_t{2048}, std::size_t{8192}, std::size_t{32768}})
    for (Mode m : {Mode::one_shot, Mode::chunked, Mode::chunked_qk, Mode::bounded, Mode::bounded_qk}) {
      // One-shot logits are n_q_heads · P² floats: 32 GiB at P = 32768, more than this machine has.
      const double one_shot_bytes = 4.0 * kKVHeads * static_cast<double>(P) * static_cast<double>(P);
      if (m == Mode::one_shot && one_shot_bytes > kOneShotLogitsLimit) continue;
      const std::string name = std::string("LongPrompt/") + mode_name(m) + "/P:" + std::to_string(P);
      benchmark::RegisterBenchmark(name.c_str(), bm_long_prompt, m, P)
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace kvbench
