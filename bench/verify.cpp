// The naive comparator must do the same job as kvevict: same kept tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench_common.hpp"
#include "decode_bench.hpp"

namespace kvbench {
namespace {

float hashed(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t salt) {
  kvevict::Xoshiro256pp gen(((a * 1000003u + b) * 1000033u + c) * 31u + salt);
  return static_cast<float>(gen() >> 40) / 16777216.0f;  // [0, 1)
}

int verify_group(std::size_t g) {
  const std::size_t k = 48, w = 14, d = 4, steps = 300;
  const Shape s{k, d, g};
  kvevict::KVBuffer<float> buffer(kKVHeads, k + 1, d);
  auto kv = buffer.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = s.n_q();
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(w);
  kvevict::Keyformer ours(cfg, kv, kvevict::GumbelLogitScore{}, kvevict::LinearTemperature(2.0f, 2.0f, 1));
  NaiveKeyformer<float> naive(s, k, w, 2.0f, 0);
  std::vector<float> row(kKVHeads * d, 0.0f);
  for (std::size_t p = 0; p < k; ++p) {
    kv.append(static_cast<std::int64_t>(p), row.data(), row.data());
    naive.append(static_cast<std::int64_t>(p), row.data(), row.data());
  }
  std::vector<float> masked(s.n_q() * k * k, -std::numeric_limits<float>::infinity());
  ours.prefill(masked.data(), k);  // scores 0, nothing evicted: the naive state
  int bad = 0;
  std::vector<float> xo(s.n_q() * (k + 1)), zo(xo.size()), xn(xo.size()), zn(xo.size());
  for (std::size_t t = 1; t <= steps; ++t) {
    const auto pos = static_cast<std::int64_t>(k - 1 + t);
    kv.append(pos, row.data(), row.data());
    naive.append(pos, row.data(), row.data());
    const std::size_t n = k + 1;
    for (std::size_t h = 0; h < s.n_q(); ++h)
      for (std::size_t i = 0; i < n; ++i) {
        const auto po = static_cast<std::uint64_t>(kv.head_positions(h / g)[i]);
        const auto pn = static_cast<std::uint64_t>(naive.positions(h / g)[i]);
        xo[h * n + i] = 8.0f * hashed(t, h, po, 1) - 4.0f;
        xn[h * n + i] = 8.0f * hashed(t, h, pn, 1) - 4.0f;
        zo[h * n + i] = -std::log(-std::log((hashed(t, h, po, 2) * 16777216.0f + 0.5f) / 16777216.0f));
        zn[h * n + i] = -std::log(-std::log((hashed(t, h, pn, 2) * 16777216.0f + 0.5f) / 16777216.0f));
      }
    ours.decode_step(xo.data(), n, zo.data());
    naive.step(xn.data(), zn.data());
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      std::vector<std::int64_t> a = ours.retained_positions(j);
      std::vector<std::int64_t> b(naive.positions(j), naive.positions(j) + naive.length());
      std::sort(b.begin(), b.end());
      if (a != b) ++bad;
    }
  }
  std::printf("verify naive == kvevict Keyformer, g=%zu, %zu steps x %zu KV heads: %d mismatches\n", g, steps,
              kKVHeads, bad);
  return bad;
}

}  // namespace

int verify_naive_matches_kvevict() { return verify_group(1) + verify_group(4); }

}  // namespace kvbench
