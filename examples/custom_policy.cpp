// docs/writing-a-policy.md: a selection policy that keeps the first token (an
// attention sink) for good, plus H2O's recent window and heavy hitters among the others.
#include <kvevict/kvevict.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <vector>

struct SinkHeavyHitterSelection {  // the contract: kvevict/concepts.hpp
  void validate(std::size_t k, std::size_t w) const {
    if (k < 2 || w > k - 1) throw std::invalid_argument("SinkHeavyHitterSelection: needs k >= 2 and w <= k - 1");
  }
  std::size_t prefill_keep(const float* scores, std::size_t n, std::size_t k, std::size_t w,
                           std::size_t* out) const noexcept {  // token 0, then select_keep's rule on 1..n-1
    out[0] = 0;
    const std::size_t m = n < 2 ? n : 1 + kvevict::select_keep_unchecked(scores + 1, n - 1, k - 1, w, out + 1);
    for (std::size_t i = 1; i < m; ++i) ++out[i];
    return m;
  }
  std::size_t victim(const float* scores, const std::uint8_t* recent, const std::int64_t* positions,
                     std::size_t n) const noexcept {  // lowest score; not recent, not the sink
    std::size_t sink = 0, best = n;
    for (std::size_t i = 1; i < n; ++i) sink = positions[i] < positions[sink] ? i : sink;
    for (std::size_t i = 0; i < n; ++i)
      if (i != sink && !recent[i] && (best == n || scores[i] < scores[best])) best = i;
    return best;
  }
};
using SinkH2O =
    kvevict::Cache<kvevict::AccumulatedAttentionScore, kvevict::ConstantTemperature, SinkHeavyHitterSelection>;

int main() {
  kvevict::KVBuffer<float> store(1, 9, 1);  // 1 KV head, capacity 9, head_dim 1
  kvevict::KVView<float> kv = store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = 1;
  config.budget = kvevict::Budget::tokens(4);
  config.recent = kvevict::RecentWindow::tokens(1);
  SinkH2O cache(config, kv);
  const float zero = 0.0f, minus_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t p = 0; p < 8; ++p) kv.append(p, &zero, &zero);
  std::vector<float> x(64, minus_inf);  // [1][8][8]: query r attends to token r - 1 only (token 0 for r = 0)
  for (std::size_t r = 0; r < 8; ++r) x[r * 8 + (r == 0 ? 0 : r - 1)] = 0.0f;
  cache.prefill(x.data(), 8);
  std::printf("kept");
  for (std::int64_t p : cache.retained_positions(0)) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
}
