// Paged decode-step benchmarks: kvevict's PagedCache step on page-table storage (page
// size 16, NHD), token unit and page unit, timed in the same iterations as the engine's attention
// step and the contiguous Cache's step with shared_heads on the same layer shape.
#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"
#include "decode_bench.hpp"

namespace kvbench {
namespace {

constexpr std::size_t kPageSize = 16;
constexpr std::uint64_t kPagedSeed = 1234;

kvevict::CacheConfig shared_config(kvevict::Policy policy, const Shape& s) {
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = s.n_q();
  cfg.budget = kvevict::Budget::tokens(s.n);
  cfg.recent = kvevict::RecentWindow::ratio(policy == kvevict::Policy::tova ? 0.0 : 0.3);
  cfg.shared_heads = true;
  cfg.seed = kPagedSeed;
  return cfg;
}

/// One layer of 8 KV heads at steady state three ways, filled with the same K/V rows and logits:
/// a contiguous view with `Cache` (shared_heads) and two paged sequences (token and page unit)
/// drawing from one `PagePool`. The attention runs on the contiguous view; its logits feed the
/// contiguous and the token-unit step (both hold n = k + 1 slots at a step); the page-unit
/// sequence (between k + 1 and k + 16 slots) gets fixed random logits of its own length.
struct PagedLayer {
  Shape shape;
  kvevict::Policy policy;
  kvevict::KVBuffer<float> buffer;
  kvevict::KVView<float> kv;
  std::unique_ptr<kvevict::CacheInterface> contiguous;
  std::size_t max_pages;
  std::vector<float> k_pages, v_pages;
  kvevict::PagePool pool;
  struct Sequence {
    std::vector<std::int32_t> table;
    std::vector<std::int64_t> positions;
    std::size_t length = 0;
    kvevict::PagedKVView<float> view;
    std::unique_ptr<kvevict::PagedCacheInterface> cache;
  };
  Sequence token, page;
  DecodeAttention<float> attention;
  std::vector<float> q, logits, page_logits, out, k_new, v_new;
  std::int64_t next_pos = 0;

  PagedLayer(kvevict::Policy p, const Shape& s)
      : shape(s),
        policy(p),
        buffer(kKVHeads, s.n + 1, s.d),
        kv(buffer.view()),
        max_pages((s.n + kPageSize) / kPageSize + 1),
        k_pages(2 * max_pages * kPageSize * kKVHeads * s.d),
        v_pages(k_pages.size()),
        pool(2 * max_pages),
        attention(s, s.n + 1),
        q(s.n_q() * s.d),
        logits(s.n_q() * (s.n + 1)),
        page_logits(s.n_q() * (s.n + kPageSize)),
        out(s.n_q() * s.d),
        k_new(kKVHeads * s.d),
        v_new(kKVHeads * s.d) {
    kvevict::PolicyParams params;
    params.horizon = 1024;
    const auto cfg = shared_config(p, s);
    contiguous = kvevict::make_cache(p, cfg, kv, params);
    init(token, kvevict::EvictUnit::token, cfg, params);
    init(page, kvevict::EvictUnit::page, cfg, params);
    fill_normal(q.data(), q.size(), 1);
    fill_normal(k_new.data(), k_new.size(), 2);
    fill_normal(v_new.data(), v_new.size(), 3);
    fill_normal(page_logits.data(), page_logits.size(), 6);
    fill_to_budget();
  }

  void init(Sequence& seq, kvevict::EvictUnit unit, const kvevict::CacheConfig& cfg,
            const kvevict::PolicyParams& params) {
    seq.table.assign(max_pages, kvevict::kNoPage);
    seq.positions.assign(max_pages * kPageSize, 0);
    seq.view.k = k_pages.data();
    seq.view.v = v_pages.data();
    seq.view.num_pages = 2 * max_pages;
    seq.view.page_size = kPageSize;
    seq.view.n_kv_heads = kKVHeads;
    seq.view.head_dim = shape.d;
    seq.view.layout = kvevict::PageLayout::NHD;
    seq.view.page_table = seq.table.data();
    seq.view.max_pages = max_pages;
    seq.view.length = &seq.length;
    seq.view.positions = seq.positions.data();
    kvevict::PagedEvictionConfig pc;
    pc.unit = unit;
    pc.start_pages = unit == kvevict::EvictUnit::page ? 1 : 0;
    seq.cache = kvevict::make_paged_cache(policy, cfg, pc, seq.view, pool, params);
  }

  void append_all(const float* k, const float* v) {
    kv.append(next_pos, k, v);
    pool.append(token.view, next_pos, k, v);
    pool.append(page.view, next_pos, k, v);
    ++next_pos;
  }

  /// A short prefill, then non-evicting steps with fully masked logits and zero injected noise
  /// (cheap, documented to add nothing) up to n = k, then 64 real steps.
  void fill_to_budget() {
    const std::size_t P = std::min<std::size_t>(shape.n, 64);
    std::vector<float> prompt_logits(shape.n_q() * P * P, 0.0f);
    fill_normal(prompt_logits.data(), prompt_logits.size(), 5);
    std::vector<float> rows(kKVHeads * shape.d * 2);
    for (std::size_t p = 0; p < P; ++p) {
      fill_normal(rows.data(), rows.size(), 100 + p);
      append_all(rows.data(), rows.data() + kKVHeads * shape.d);
    }
    contiguous->prefill(prompt_logits.data(), P);
    token.cache->prefill(prompt_logits.data(), P);
    page.cache->prefill(prompt_logits.data(), P);
    std::vector<float> masked(shape.n_q() * (shape.n + kPageSize), -std::numeric_limits<float>::infinity());
    std::vector<float> zeros(masked.size(), 0.0f);
    while (kv.length(0) < shape.n) {
      fill_normal(rows.data(), rows.size(), 100 + static_cast<std::uint64_t>(next_pos));
      append_all(rows.data(), rows.data() + kKVHeads * shape.d);
      const std::size_t n = kv.length(0);
      contiguous->decode_step(masked.data(), n, zeros.data());
      token.cache->decode_step(masked.data(), n, zeros.data());
      page.cache->decode_step(masked.data(), page.length, zeros.data());
    }
    for (int t = 0; t < 64; ++t) {
      append_all(k_new.data(), v_new.data());
      attention.run(kv, q.data(), logits.data(), out.data());
      contiguous->decode_step(logits.data(), kv.length(0));
      token.cache->decode_step(logits.data(), token.length);
      page.cache->decode_step(page_logits.data(), page.length);
    }
    if (kv.length(0) != shape.n || token.length != shape.n) throw std::logic_error("kvbench: paged layer not at budget");
  }
};

struct PagedKey {
  kvevict::Policy policy{};
  std::size_t n = 0, d = 0, g = 0;
  bool operator==(const PagedKey& o) const { return policy == o.policy && n == o.n && d == o.d && g == o.g; }
};

PagedLayer& layer_for(kvevict::Policy policy, const Shape& s) {
  static std::unique_ptr<PagedLayer> held;
  static PagedKey key{};
  const PagedKey want{policy, s.n, s.d, s.g};
  if (!held || !(key == want)) {
    held.reset();
    held = std::make_unique<PagedLayer>(policy, s);
    key = want;
  }
  return *held;
}

/// Each iteration: append the new token to the contiguous view and attend (attention_us), append
/// it to the paged sequence (append_us, PagePool::append), then the contiguous shared-heads step
/// (contiguous_us) and the paged step (the reported time), in alternating order.
void bm_paged_step(benchmark::State& state, kvevict::Policy policy, kvevict::EvictUnit unit, Shape s) {
  PagedLayer& layer = layer_for(policy, s);
  PagedLayer::Sequence& seq = unit == kvevict::EvictUnit::token ? layer.token : layer.page;
  PagedLayer::Sequence& other = unit == kvevict::EvictUnit::token ? layer.page : layer.token;
  double attn_s = 0.0, contig_s = 0.0, append_s = 0.0, paged_s = 0.0;
  const float* paged_logits = unit == kvevict::EvictUnit::token ? layer.logits.data() : layer.page_logits.data();
  const float* other_logits = unit == kvevict::EvictUnit::token ? layer.page_logits.data() : layer.logits.data();
  bool contiguous_first = true;
  for (auto _ : state) {
    const std::int64_t pos = layer.next_pos++;
    const auto t0 = Clock::now();
    layer.kv.append(pos, layer.k_new.data(), layer.v_new.data());
    layer.attention.run(layer.kv, layer.q.data(), layer.logits.data(), layer.out.data());
    const auto t1 = Clock::now();
    layer.pool.append(seq.view, pos, layer.k_new.data(), layer.v_new.data());
    const auto t2 = Clock::now();
    double c = 0.0, p = 0.0;
    // The two steps alternate in order, so neither always finds the other's data in the caches.
    for (int pass = 0; pass < 2; ++pass) {
      const auto a = Clock::now();
      if ((pass == 0) == contiguous_first) {
        layer.contiguous->decode_step(layer.logits.data(), layer.kv.length(0));
        c = std::chrono::duration<double>(Clock::now() - a).count();
      } else {
        seq.cache->decode_step(paged_logits, seq.length);
        p = std::chrono::duration<double>(Clock::now() - a).count();
      }
    }
    contiguous_first = !contiguous_first;
    // Keep the other unit's sequence in step (untimed), so that both stay valid for later runs.
    layer.pool.append(other.view, pos, layer.k_new.data(), layer.v_new.data());
    other.cache->decode_step(other_logits, other.length);
    attn_s += std::chrono::duration<double>(t1 - t0).count();
    append_s += std::chrono::duration<double>(t2 - t1).count();
    contig_s += c;
    paged_s += p;
    state.SetIterationTime(p);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["n"] = static_cast<double>(s.n);
  state.counters["d"] = static_cast<double>(s.d);
  state.counters["g"] = static_cast<double>(s.g);
  state.counters["page_size"] = static_cast<double>(kPageSize);
  state.counters["attention_us"] = 1e6 * attn_s / iters;
  state.counters["contiguous_us"] = 1e6 * contig_s / iters;
  state.counters["append_us"] = 1e6 * append_s / iters;
  state.counters["paged_over_contiguous"] = paged_s / contig_s;
  state.counters["paged_over_attention"] = paged_s / attn_s;
  state.counters["pages_in_use"] = static_cast<double>(seq.cache->pages_in_use());
}

const char* policy_label(kvevict::Policy p) {
  switch (p) {
    case kvevict::Policy::keyformer: return "Keyformer";
    case kvevict::Policy::h2o: return "H2O";
    case kvevict::Policy::streaming_llm: return "StreamingLLM";
    case kvevict::Policy::window: return "Window";
    case kvevict::Policy::tova: return "TOVA";
    case kvevict::Policy::snapkv: return "SnapKV";
    case kvevict::Policy::knorm: return "KeyNorm";
    case kvevict::Policy::keydiff: return "KeyDiff";
  }
  return "?";
}

}  // namespace

void register_paged_benchmarks(const Grid& grid) {
  if (!grid.types.count("float")) return;
  for (std::size_t d : grid.head_dims)
    for (std::size_t n : grid.sizes) {
      if (n > 32768) continue;  // the range; fills are O(n^2)
      const Shape s{n, d, 1};
      const double est = kv_bytes<float>(s) / 6e9;  // the attention step dominates each iteration
      const auto iters = static_cast<benchmark::IterationCount>(
          std::min(2000.0, std::max(10.0, grid.wall_per_benchmark / std::max(est, 1e-6))));
      for (auto p : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                     kvevict::Policy::window, kvevict::Policy::tova})
        for (auto unit : {kvevict::EvictUnit::token, kvevict::EvictUnit::page}) {
          const std::string name = std::string("Paged") + policy_label(p) + "DecodeStep/" +
                                   kvevict::evict_unit_name(unit) + "/float/n:" + std::to_string(n) +
                                   "/d:" + std::to_string(d) + "/g:1/page:16";
          benchmark::RegisterBenchmark(name.c_str(), bm_paged_step, p, unit, s)
              ->UseManualTime()
              ->Iterations(iters)
              ->Unit(benchmark::kMicrosecond);
        }
    }
}

}  // namespace kvbench
