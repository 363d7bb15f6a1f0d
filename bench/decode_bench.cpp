// Decode-step benchmarks: each policy's steady-state step, timed side by side
// with the engine's attention step on the same layer; the attention step alone;
// and the naive step side by side with kvevict's Keyformer step.
#include "decode_bench.hpp"

#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

namespace kvbench {
namespace {

constexpr float kTauInit = 1.0f, kTauEnd = 2.0f;
constexpr std::size_t kHorizon = 1024;  // steady state runs past it: τ = 2
constexpr std::uint64_t kSeed = 1234;

kvevict::CacheConfig make_config(kvevict::Policy policy, const Shape& s) {
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = s.n_q();
  cfg.budget = kvevict::Budget::tokens(s.n);
  // Keyformer / H2O: recent window 30% of k; TOVA has none; StreamingLLM and
  // window derive theirs from the budget (k - sinks), so theirs must be 0.
  cfg.recent = kvevict::RecentWindow::ratio(kvevict::takes_recent_window(policy) ? 0.3 : 0.0);
  cfg.seed = kSeed;
  return cfg;
}

/// One layer at steady state: a view of 8 KV heads holding n = k tokens, an
/// evicting cache over it, the engine's attention and the step's buffers.
/// Filled once per shape (kept across Google Benchmark's repeated calls).
template <class T>
struct DecodeLayer {
  Shape shape;
  kvevict::Policy policy;
  kvevict::KVBuffer<T> buffer;
  kvevict::KVView<T> kv;
  std::unique_ptr<kvevict::CacheInterface> cache;
  DecodeAttention<T> attention;
  std::vector<float> q, logits, out;
  std::vector<T> k_new, v_new;
  std::int64_t next_pos = 0;

  DecodeLayer(kvevict::Policy p, const Shape& s)
      : shape(s),
        policy(p),
        buffer(kKVHeads, s.n + 1, s.d),
        kv(buffer.view()),
        attention(s, s.n + 1),
        q(s.n_q() * s.d),
        logits(s.n_q() * (s.n + 1)),
        out(s.n_q() * s.d),
        k_new(kKVHeads * s.d),
        v_new(kKVHeads * s.d) {
    kvevict::PolicyParams params;
    params.tau_init = kTauInit;
    params.tau_end = kTauEnd;
    params.horizon = kHorizon;
    cache = kvevict::make_cache(p, make_config(p, s), kv, params);
    fill_normal(q.data(), q.size(), 1);
    fill_normal(k_new.data(), k_new.size(), 2);
    fill_normal(v_new.data(), v_new.size(), 3);
    // K/V content: random rows, written straight into the engine-owned storage.
    std::vector<T> rows(kKVHeads * (s.n + 1) * s.d);
    fill_normal(rows.data(), rows.size(), 4);
    for (std::size_t j = 0; j < kKVHeads; ++j)
      for (std::size_t slot = 0; slot <= s.n; ++slot) {
        std::copy_n(rows.data() + (j * (s.n + 1) + slot) * s.d, s.d, kv.k_row(j, slot));
        std::copy_n(rows.data() + ((kKVHeads - 1 - j) * (s.n + 1) + slot) * s.d, s.d, kv.v_row(j, slot));
      }
    fill_to_budget();
  }

  /// Brings the cache to n = k tokens: a short prefill, then decode steps that
  /// do not evict (n <= k). The filling steps pass fully masked logits (-inf)
  /// and injected zero noise, which the kernel documents as adding nothing, so
  /// that filling 131072 tokens costs O(n^2) cheap passes rather than O(n^2)
  /// Gumbel draws. Then 64 real steps (attention logits) settle the scores.
  void fill_to_budget() {
    const std::size_t P = std::min<std::size_t>(shape.n, 64);
    std::vector<float> prompt_logits(shape.n_q() * P * P, 0.0f);
    fill_normal(prompt_logits.data(), prompt_logits.size(), 5);
    for (std::size_t p = 0; p < P; ++p) kv.append(next_pos++, k_new.data(), v_new.data());
    // Fake append: the rows of the slots are already random; only length and position change.
    cache->prefill(prompt_logits.data(), P);
    std::vector<float> masked(shape.n_q() * (shape.n + 1), -std::numeric_limits<float>::infinity());
    std::vector<float> zeros(masked.size(), 0.0f);
    while (kv.length(0) < shape.n) {
      const std::size_t n = kv.length(0) + 1;
      for (std::size_t j = 0; j < kKVHeads; ++j) {
        kv.head_positions(j)[n - 1] = next_pos;
        kv.lengths[j] = n;
      }
      ++next_pos;
      cache->decode_step(masked.data(), n, zeros.data());
    }
    for (int t = 0; t < 64; ++t) {
      kv.append(next_pos++, k_new.data(), v_new.data());
      attention.run(kv, q.data(), logits.data(), out.data());
      cache->decode_step(logits.data(), kv.length(0));
    }
    if (kv.length(0) != shape.n) throw std::logic_error("kvbench: layer not at budget");
  }

  /// The engine's part of a step: write the new token's K/V, attend.
  void append_and_attend() {
    kv.append(next_pos++, k_new.data(), v_new.data());
    attention.run(kv, q.data(), logits.data(), out.data());
  }
  void evict() { cache->decode_step(logits.data(), kv.length(0)); }
  /// The same step with the cache scoring each KV head right after its logits (per-head decode step):
  /// append, `begin_decode_step`, the attention with `score_decode_head(j)` after head j's q·K, then
  /// `end_decode_step`. Adds the wall seconds of the cache's calls to `evict_wall` (steady_clock, about
  /// 20 ns a reading: a thread-CPU-time reading costs a system call, ~0.5 µs, which at 10 calls per step
  /// would be most of a cheap policy's step at n = 4096).
  void attend_and_evict_hot(double& evict_wall) {
    kv.append(next_pos++, k_new.data(), v_new.data());
    const std::size_t n = kv.length(0), g = shape.g;
    auto timed = [&](auto&& call) {
      const auto t0 = Clock::now();
      call();
      evict_wall += std::chrono::duration<double>(Clock::now() - t0).count();
    };
    timed([&] { cache->begin_decode_step(n); });
    attention.run(kv, q.data(), logits.data(), out.data(), [&](std::size_t j) {
      timed([&] { cache->score_decode_head(j, logits.data() + j * g * n); });
    });
    timed([&] { cache->end_decode_step(); });
  }
};

/// Keeps the most recent fixture alive across Google Benchmark's repeated
/// calls of one benchmark (iteration-count probing) and frees it when the shape changes.
template <class Fixture, class Key, class Make>
Fixture& memo(const Key& key, Make make) {
  static std::unique_ptr<Fixture> held;
  static Key held_key{};
  if (!held || !(held_key == key)) {
    held.reset();
    held = make();
    held_key = key;
  }
  return *held;
}

struct LayerKey {
  kvevict::Policy policy{};
  std::size_t n = 0, d = 0, g = 0;
  bool operator==(const LayerKey& o) const { return policy == o.policy && n == o.n && d == o.d && g == o.g; }
};

void set_shape_counters(benchmark::State& state, const Shape& s) {
  state.counters["n"] = static_cast<double>(s.n);
  state.counters["d"] = static_cast<double>(s.d);
  state.counters["g"] = static_cast<double>(s.g);
}

/// CPU time of the calling thread (seconds): unlike the wall clock, it does not count the time the
/// thread waits while other processes run, so it stays meaningful on a loaded machine.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// The counters of an eviction step timed beside its attention step over `iters` iterations (seconds
/// summed): wall and thread-CPU microseconds, the eviction's share of the attention, and its CPU ns per
/// (query head × token).
void set_step_counters(benchmark::State& state, const Shape& s, double iters, double attn_s, double evict_s,
                       double attn_cpu, double evict_cpu) {
  set_shape_counters(state, s);
  state.counters["attention_us"] = 1e6 * attn_s / iters;
  state.counters["evict_us"] = 1e6 * evict_s / iters;
  state.counters["evict_over_attention"] = evict_s / attn_s;
  state.counters["attention_cpu_us"] = 1e6 * attn_cpu / iters;
  state.counters["evict_cpu_ns_per_elem"] = 1e9 * evict_cpu / iters / static_cast<double>(s.n_q() * s.n);
  state.counters["evict_over_attention_cpu"] = evict_cpu / attn_cpu;
}

/// Eviction step of `policy`, timed side by side with the attention step it
/// rides on: each iteration appends the new token and runs the attention
/// (timed as attention), then `decode_step` (timed as eviction; the reported
/// time). Counters: attention_us and evict_over_attention from the same iterations;
/// evict_cpu_ns_per_elem and attention_cpu_us, the same from the thread's CPU time
/// (ns per (query head × token): the step's time / (8g · n)).
template <class T>
void bm_evict_step(benchmark::State& state, kvevict::Policy policy, Shape s) {
  auto& layer = memo<DecodeLayer<T>>(LayerKey{policy, s.n, s.d, s.g},
                                     [&] { return std::make_unique<DecodeLayer<T>>(policy, s); });
  double evict_s = 0.0, attn_s = 0.0, evict_cpu = 0.0, attn_cpu = 0.0;
  for (auto _ : state) {
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    layer.append_and_attend();
    const auto t1 = Clock::now();
    const double c1 = thread_cpu_seconds();
    layer.evict();
    const auto t2 = Clock::now();
    const double c2 = thread_cpu_seconds();
    const double a = std::chrono::duration<double>(t1 - t0).count();
    const double e = std::chrono::duration<double>(t2 - t1).count();
    attn_s += a;
    evict_s += e;
    attn_cpu += c1 - c0;
    evict_cpu += c2 - c1;
    state.SetIterationTime(e);
  }
  const double iters = static_cast<double>(state.iterations());
  set_step_counters(state, s, iters, attn_s, evict_s, attn_cpu, evict_cpu);
}

/// `bm_evict_step` with the per-head decode step: each KV head scored (and, per-head selection, its
/// victim evicted) right after the attention computed its logits, while they are in L1/L2 (issue 36).
/// The same counters, from the same iterations: the eviction is the cache's calls (begin, one per KV
/// head, end; wall clock), the attention is the rest of the iteration; the CPU-time counters scale the
/// wall split by the iteration's thread CPU time / wall time (on an idle machine, about 1). The state is
/// the same, bit for bit, as `bm_evict_step`'s (tests/per_head_step_test.cpp); it shares that
/// benchmark's layer.
template <class T>
void bm_evict_step_hot(benchmark::State& state, kvevict::Policy policy, Shape s) {
  auto& layer = memo<DecodeLayer<T>>(LayerKey{policy, s.n, s.d, s.g},
                                     [&] { return std::make_unique<DecodeLayer<T>>(policy, s); });
  double evict_s = 0.0, total_s = 0.0, total_cpu = 0.0;
  for (auto _ : state) {
    double e_wall = 0.0;
    const double c0 = thread_cpu_seconds();
    const auto t0 = Clock::now();
    layer.attend_and_evict_hot(e_wall);
    total_s += std::chrono::duration<double>(Clock::now() - t0).count();
    total_cpu += thread_cpu_seconds() - c0;
    evict_s += e_wall;
    state.SetIterationTime(e_wall);
  }
  const double iters = static_cast<double>(state.iterations());
  const double cpu_per_wall = total_cpu / total_s;
  const double evict_cpu = evict_s * cpu_per_wall, attn_s = total_s - evict_s, attn_cpu = total_cpu - evict_cpu;
  set_step_counters(state, s, iters, attn_s, evict_s, attn_cpu, evict_cpu);
}

/// The attention step alone (no eviction; n stays at k: the new token's K/V
/// overwrite the last slot).
template <class T>
void bm_attention_step(benchmark::State& state, Shape s) {
  kvevict::KVBuffer<T> buffer(kKVHeads, s.n, s.d);
  auto kv = buffer.view();
  std::vector<T> rows(kKVHeads * s.d);
  for (std::size_t p = 0; p < s.n; ++p) {
    fill_normal(rows.data(), rows.size(), p);
    kv.append(static_cast<std::int64_t>(p), rows.data(), rows.data());
  }
  DecodeAttention<T> attention(s, s.n);
  std::vector<float> q(s.n_q() * s.d), logits(s.n_q() * s.n), out(s.n_q() * s.d);
  fill_normal(q.data(), q.size(), 1);
  for (auto _ : state) {
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      std::copy_n(rows.data() + j * s.d, s.d, kv.k_row(j, s.n - 1));
      std::copy_n(rows.data() + j * s.d, s.d, kv.v_row(j, s.n - 1));
    }
    attention.run(kv, q.data(), logits.data(), out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_shape_counters(state, s);
  state.counters["kv_bytes"] = kv_bytes<T>(s);
  state.counters["kv_GBps"] =
      benchmark::Counter(kv_bytes<T>(s), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

/// kvevict's Keyformer step and the naive step on the same shape and the same
/// logits, side by side (each iteration: one naive step, one kvevict step). The
/// reported time is the naive step; counters ours_us and naive_over_ours.
template <class T>
struct NaivePair {
  Shape shape;
  DecodeLayer<T> ours;  // reuses the filled layer (logits from its attention)
  NaiveKeyformer<T> naive;
  NaivePair(const Shape& s)
      : shape(s), ours(kvevict::Policy::keyformer, s), naive(s, s.n, static_cast<std::size_t>(0.3 * s.n), kTauEnd, kSeed) {
    for (std::size_t i = 0; i < s.n; ++i) {  // same token count, same K/V rows as the layer
      std::vector<T> k(kKVHeads * s.d), v(kKVHeads * s.d);
      for (std::size_t j = 0; j < kKVHeads; ++j) {
        std::copy_n(ours.kv.k_row(j, i), s.d, k.data() + j * s.d);
        std::copy_n(ours.kv.v_row(j, i), s.d, v.data() + j * s.d);
      }
      naive.append(ours.kv.head_positions(0)[i], k.data(), v.data());
    }
  }
};

template <class T>
void bm_naive_step(benchmark::State& state, Shape s) {
  auto& pair = memo<NaivePair<T>>(LayerKey{kvevict::Policy::keyformer, s.n, s.d, s.g},
                                  [&] { return std::make_unique<NaivePair<T>>(s); });
  // One set of real attention logits, reused: both steps cost the same whatever the values.
  pair.ours.append_and_attend();
  pair.ours.evict();
  double naive_s = 0.0, ours_s = 0.0;
  for (auto _ : state) {
    const std::int64_t pos = pair.ours.next_pos;
    pair.naive.append(pos, pair.ours.k_new.data(), pair.ours.v_new.data());
    pair.ours.kv.append(pair.ours.next_pos++, pair.ours.k_new.data(), pair.ours.v_new.data());
    const auto t0 = Clock::now();
    pair.naive.step(pair.ours.logits.data());
    const auto t1 = Clock::now();
    pair.ours.evict();
    const auto t2 = Clock::now();
    const double a = std::chrono::duration<double>(t1 - t0).count();
    naive_s += a;
    ours_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(a);
  }
  const double iters = static_cast<double>(state.iterations());
  set_shape_counters(state, s);
  state.counters["ours_us"] = 1e6 * ours_s / iters;
  state.counters["naive_over_ours"] = naive_s / ours_s;
}

const char* bench_name(kvevict::Policy p) {
  switch (p) {
    case kvevict::Policy::keyformer: return "KeyformerDecodeStep";
    case kvevict::Policy::h2o: return "H2ODecodeStep";
    case kvevict::Policy::streaming_llm: return "StreamingLLMDecodeStep";
    case kvevict::Policy::window: return "WindowDecodeStep";
    case kvevict::Policy::tova: return "TOVADecodeStep";
    case kvevict::Policy::snapkv: return "SnapKVDecodeStep";
    case kvevict::Policy::knorm: return "KeyNormDecodeStep";
    case kvevict::Policy::keydiff: return "KeyDiffDecodeStep";
  }
  return "?";
}

std::string shape_suffix(const char* type, const Shape& s) {
  return std::string("/") + type + "/n:" + std::to_string(s.n) + "/d:" + std::to_string(s.d) +
         "/g:" + std::to_string(s.g);
}

/// Iterations for a benchmark that runs the attention step every iteration:
/// about `grid.wall_per_benchmark` seconds of wall time, from a rough attention
/// estimate (K+V bytes at 6 GB/s; 16-bit and g > 1 cost more compute). A fixed
/// count, because Google Benchmark would size the run by the (small) eviction
/// time alone and spend minutes in attention.
template <class T>
benchmark::IterationCount iterations_for(const Grid& grid, const Shape& s) {
  double est = kv_bytes<T>(s) / 6e9 * (s.g > 1 ? 2.0 : 1.0) * (std::is_same<T, float>::value ? 1.0 : 1.5);
  const double it = grid.wall_per_benchmark / std::max(est, 1e-6);
  return static_cast<benchmark::IterationCount>(std::min(2000.0, std::max(10.0, it)));
}

template <class T>
void register_type(const Grid& grid) {
  for (std::size_t d : grid.head_dims)
    for (std::size_t g : grid.groups)
      for (std::size_t n : grid.sizes) {
        const Shape s{n, d, g};
        const std::string sfx = shape_suffix(type_name<T>(), s);
        benchmark::RegisterBenchmark(("AttentionDecodeStep" + sfx).c_str(), bm_attention_step<T>, s)
            ->UseRealTime()
            ->MinTime(grid.min_time)
            ->Unit(benchmark::kMicrosecond);
        for (auto p : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                       kvevict::Policy::window, kvevict::Policy::tova}) {
          benchmark::RegisterBenchmark((std::string(bench_name(p)) + sfx).c_str(), bm_evict_step<T>, p, s)
              ->UseManualTime()
              ->Iterations(iterations_for<T>(grid, s))
              ->Unit(benchmark::kMicrosecond);
          // The per-head decode step beside it (issue 36): "KeyformerDecodeStepHot/float/n:.../d:.../g:...".
          benchmark::RegisterBenchmark((std::string(bench_name(p)) + "Hot" + sfx).c_str(), bm_evict_step_hot<T>, p, s)
              ->UseManualTime()
              ->Iterations(iterations_for<T>(grid, s))
              ->Unit(benchmark::kMicrosecond);
        }
        if (grid.naive_sizes.count(n) != 0)
          benchmark::RegisterBenchmark(("NaiveDecodeStep" + sfx).c_str(), bm_naive_step<T>, s)
              ->UseManualTime()
              ->MinTime(grid.min_time)
              ->Unit(benchmark::kMicrosecond);
      }
}

}  // namespace

void register_decode_benchmarks(const Grid& grid) {
  if (grid.types.count("float")) register_type<float>(grid);
  if (grid.types.count("half")) register_type<Eigen::half>(grid);
}

}  // namespace kvbench
