// Parallel decode steps: each scoring policy's steady-state step on W workers of
// the thread pool of tools/ (tools/thread_pool.hpp), W = 1, 2, 4, ... up to the hardware
// threads (and the hardware count itself). The cache is filled once per shape and shared by
// every W (`set_executor` switches the pool), so the rows compare the same layer.
//
//   ParallelDecodeStep/<policy>/float/n:<n>/d:128/g:<g>/workers:<W>
//
// Counters: ns_per_elem (wall time of one decode_step per query head × token, n_q · (n + 1))
// and speedup_vs_1 (the W = 1 row's time over this row's, same shape, same run; 1 for W = 1;
// 0 when the W = 1 row was filtered out).
// Wall-clock time (UseRealTime): the workers' CPU time is not the caller's.
#include "decode_bench.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"
#include "thread_pool.hpp"

namespace kvbench {
namespace {

constexpr std::size_t kD = 128;

/// One layer (8 KV heads, d = 128, float) whose cache holds n = k tokens, and the step's
/// logits (random, reused every step: the step's cost does not depend on their values).
struct ParallelLayer {
  Shape shape;
  kvevict::KVBuffer<float> buffer;
  kvevict::KVView<float> kv;
  std::unique_ptr<kvevict::CacheInterface> cache;
  std::vector<float> logits;
  std::int64_t next_pos = 0;

  ParallelLayer(kvevict::Policy p, const Shape& s, kvevict::ExecutorRef fill_executor)
      : shape(s), buffer(kKVHeads, s.n + 1, s.d), kv(buffer.view()), logits(s.n_q() * (s.n + 1)) {
    kvevict::CacheConfig cfg;
    cfg.n_q_heads = s.n_q();
    cfg.budget = kvevict::Budget::tokens(s.n);
    cfg.recent = kvevict::RecentWindow::ratio(kvevict::takes_recent_window(p) ? 0.3 : 0.0);
    cfg.seed = 1234;
    kvevict::PolicyParams params;
    params.horizon = 1024;
    cache = kvevict::make_cache(p, cfg, kv, params);
    cache->set_executor(fill_executor);
    fill_normal(logits.data(), logits.size(), 7);
    // Fill to the budget as DecodeLayer does: a short prefill, then non-evicting steps on
    // fully masked logits with zero injected noise (cheap passes), then real steps.
    const std::size_t P = std::min<std::size_t>(s.n, 64);
    std::vector<float> prompt(s.n_q() * P * P);
    fill_normal(prompt.data(), prompt.size(), 5);
    for (std::size_t t = 0; t < P; ++t) fake_append();
    cache->prefill(prompt.data(), P);
    std::vector<float> masked(logits.size(), -std::numeric_limits<float>::infinity()), zeros(logits.size(), 0.0f);
    while (kv.length(0) < s.n) {
      fake_append();
      cache->decode_step(masked.data(), kv.length(0), zeros.data());
    }
    for (int t = 0; t < 16; ++t) step();
  }
  /// The new token's slot: K/V rows are left as they are (only length and position change).
  void fake_append() {
    const std::size_t n = kv.length(0) + 1;
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      kv.head_positions(j)[n - 1] = next_pos;
      kv.lengths[j] = n;
    }
    ++next_pos;
  }
  void step() {
    fake_append();
    cache->decode_step(logits.data(), kv.length(0));
  }
};

kvtools::ThreadPool* pool_of(std::size_t workers) {
  static std::map<std::size_t, std::unique_ptr<kvtools::ThreadPool>> pools;
  if (workers <= 1) return nullptr;
  auto& p = pools[workers];
  if (!p) p = std::make_unique<kvtools::ThreadPool>(workers);
  return p.get();
}

using Key = std::tuple<kvevict::Policy, std::size_t, std::size_t>;  // policy, n, g

ParallelLayer& layer_of(kvevict::Policy p, const Shape& s) {
  static std::unique_ptr<ParallelLayer> held;
  static Key held_key{};
  const Key key{p, s.n, s.g};
  if (!held || held_key != key) {
    held.reset();
    kvtools::ThreadPool* fill = pool_of(std::max(1u, std::thread::hardware_concurrency()));
    held = std::make_unique<ParallelLayer>(p, s, fill ? kvevict::ExecutorRef(*fill) : kvevict::ExecutorRef());
    held_key = key;
  }
  return *held;
}

std::map<Key, double>& serial_ns() {
  static std::map<Key, double> m;
  return m;
}

void bm_parallel_step(benchmark::State& state, kvevict::Policy policy, Shape s, std::size_t workers) {
  ParallelLayer& layer = layer_of(policy, s);
  kvtools::ThreadPool* pool = pool_of(workers);
  layer.cache->set_executor(pool ? kvevict::ExecutorRef(*pool) : kvevict::ExecutorRef());
  const auto t0 = Clock::now();
  for (auto _ : state) layer.step();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double step_ns = 1e9 * seconds / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  const Key key{policy, s.n, s.g};
  if (workers == 1) serial_ns()[key] = step_ns;
  const auto serial = serial_ns().find(key);
  state.counters["n"] = static_cast<double>(s.n);
  state.counters["g"] = static_cast<double>(s.g);
  state.counters["workers"] = static_cast<double>(workers);
  state.counters["ns_per_elem"] = step_ns / static_cast<double>(s.n_q() * (s.n + 1));
  state.counters["speedup_vs_1"] = serial != serial_ns().end() ? serial->second / step_ns : 0.0;
}

const char* policy_label(kvevict::Policy p) { return kvevict::policy_name(p); }

}  // namespace

void register_parallel_benchmarks(const Grid& grid) {
  const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::size_t> workers;
  for (std::size_t w = 1; w < hw; w *= 2) workers.push_back(w);
  workers.push_back(hw);
  for (kvevict::Policy p : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::tova})
    for (std::size_t g : grid.groups)
      for (std::size_t n : grid.parallel_sizes)
        for (std::size_t w : workers) {
          const Shape s{n, kD, g};
          const std::string name = std::string("ParallelDecodeStep/") + policy_label(p) + "/float/n:" +
                                   std::to_string(n) + "/d:" + std::to_string(kD) + "/g:" + std::to_string(g) +
                                   "/workers:" + std::to_string(w);
          benchmark::RegisterBenchmark(name.c_str(), bm_parallel_step, p, s, w)
              ->UseRealTime()
              ->MinTime(grid.min_time)
              ->Unit(benchmark::kMicrosecond);
        }
}

}  // namespace kvbench
