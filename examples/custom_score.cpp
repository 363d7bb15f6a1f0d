// docs/writing-a-policy.md: a score from the keys alone, so no attention logits (fused
// attention never writes them). Low key L2 norm ~ high attention: Devoto et al. 2024, arXiv 2406.11430.
#include <kvevict/kvevict.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>

struct KeyNormScore {  // the contract, required members and optional hooks: kvevict/concepts.hpp
  static constexpr bool kUsesLogits = false, kAccumulates = false, kUsesTemperature = false, kPrefillLastRow = false;
  bool noisy() const { return false; }
  float key_score(const float* key, std::size_t head_dim) const noexcept {  // in (0, 1], larger for smaller ||k||
    float sq = 0.0f;
    for (std::size_t i = 0; i < head_dim; ++i) sq += key[i] * key[i];
    return 1.0f / (1.0f + std::sqrt(sq));
  }
};
using KeyNormCache = kvevict::Cache<KeyNormScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;

int main() {
  kvevict::KVBuffer<float> store(1, 9, 2);  // 1 KV head, capacity 9, head_dim 2
  kvevict::KVView<float> kv = store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = 1;
  config.budget = kvevict::Budget::tokens(4);
  config.recent = kvevict::RecentWindow::tokens(1);
  KeyNormCache cache(config, kv);
  const float norm[8] = {1, 5, 2, 6, 3, 7, 0.5f, 8};  // token p's key is (norm[p], 0), its value 0
  auto append = [&](std::int64_t p) { const float k[2] = {norm[p], 0.0f}, v[2] = {}; kv.append(p, k, v); };
  auto print_kept = [&](const char* when) {
    std::printf("%s keeps", when);
    for (std::int64_t p : cache.retained_positions(0)) std::printf(" %lld", static_cast<long long>(p));
    std::printf("\n");
  };
  for (std::int64_t p = 0; p < 6; ++p) append(p);
  cache.prefill(nullptr, 6);  // no logits: each token's score is its key's
  print_kept("prefill");
  for (std::int64_t p = 6; p < 8; ++p) { append(p); cache.decode_step(nullptr, kv.length(0)); }
  print_kept("after 2 steps");
}
