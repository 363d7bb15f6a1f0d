// Prefill benchmarks: Keyformer's scoring of the causal P x P logits and the
// cut to budget, timed side by side with the engine's causal attention prefill
// that produces those logits.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"
#include "decode_bench.hpp"

namespace kvbench {
namespace {

template <class T>
struct PrefillLayer {
  Shape shape;  // shape.n = P
  kvevict::KVBuffer<T> buffer;
  kvevict::KVView<T> kv;
  kvevict::Keyformer cache;
  PrefillAttention<T> attention;
  std::vector<float> q, logits;

  static kvevict::CacheConfig config(const Shape& s) {
    kvevict::CacheConfig cfg;
    cfg.n_q_heads = s.n_q();
    cfg.budget = kvevict::Budget::ratio(0.5);
    cfg.recent = kvevict::RecentWindow::ratio(0.3);
    cfg.seed = 1234;
    return cfg;
  }
  explicit PrefillLayer(const Shape& s)
      : shape(s),
        buffer(kKVHeads, s.n, s.d),
        kv(buffer.view()),
        cache(config(s), kv, kvevict::GumbelLogitScore{}, kvevict::LinearTemperature(1.0f, 2.0f, 1024)),
        attention(s, s.n),
        q(s.n_q() * s.n * s.d),
        logits(s.n_q() * s.n * s.n, -std::numeric_limits<float>::infinity()) {
    fill_normal(q.data(), q.size(), 1);
    std::vector<T> rows(kKVHeads * s.d);
    for (std::size_t p = 0; p < s.n; ++p) {
      fill_normal(rows.data(), rows.size(), 100 + p);
      kv.append(static_cast<std::int64_t>(p), rows.data(), rows.data());
    }
  }
  /// Back to a freshly appended prompt (K/V bytes are whatever they are: the
  /// cost does not depend on them).
  void restore() {
    cache.reset();
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      for (std::size_t p = 0; p < shape.n; ++p) kv.head_positions(j)[p] = static_cast<std::int64_t>(p);
      kv.lengths[j] = shape.n;
    }
  }
};

template <class T>
void bm_prefill(benchmark::State& state, Shape s) {
  auto layer = std::make_unique<PrefillLayer<T>>(s);
  double attn_s = 0.0, evict_s = 0.0;
  for (auto _ : state) {
    layer->restore();
    const auto t0 = Clock::now();
    layer->attention.run(layer->kv, layer->q.data(), layer->logits.data());
    const auto t1 = Clock::now();
    layer->cache.prefill(layer->logits.data(), s.n);
    const auto t2 = Clock::now();
    const double a = std::chrono::duration<double>(t1 - t0).count();
    const double e = std::chrono::duration<double>(t2 - t1).count();
    attn_s += a;
    evict_s += e;
    state.SetIterationTime(e);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["P"] = static_cast<double>(s.n);
  state.counters["d"] = static_cast<double>(s.d);
  state.counters["g"] = static_cast<double>(s.g);
  state.counters["attention_ms"] = 1e3 * attn_s / iters;
  state.counters["prefill_ms"] = 1e3 * evict_s / iters;
  state.counters["prefill_over_attention"] = evict_s / attn_s;
}

template <class T>
void register_type(const Grid& grid) {
  for (std::size_t d : grid.head_dims)
    for (std::size_t g : grid.prefill_groups)
      for (std::size_t P : grid.prompt_lens) {
        const Shape s{P, d, g};
        const std::string name = std::string("KeyformerPrefill/") + type_name<T>() + "/P:" + std::to_string(P) +
                                 "/d:" + std::to_string(d) + "/g:" + std::to_string(g);
        benchmark::RegisterBenchmark(name.c_str(), bm_prefill<T>, s)
            ->UseManualTime()
            ->MinTime(grid.evict_min_time)
            ->Unit(benchmark::kMillisecond);
      }
}

}  // namespace

void register_prefill_benchmarks(const Grid& grid) {
  if (grid.prefill_types.count("float")) register_type<float>(grid);
  if (grid.prefill_types.count("half")) register_type<Eigen::half>(grid);
}

}  // namespace kvbench
