// The README's engine loop: one layer, a Keyformer cache at half the prompt, prefill, decode steps.
#include <kvevict/kvevict.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t P = 12, T = 6, n_kv = 2, n_q = 4, d = 64;  // prompt, new tokens, KV heads, query heads, head_dim
  auto rows = [&](std::size_t heads, std::size_t pos, float phase) {  // stand-ins for the model's K, V, Q rows
    std::vector<float> r(heads * d);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = std::sin(phase + 0.37f * float(pos) * float(i % 7 + 1));
    return r;
  };
  kvevict::KVBuffer<float> store(n_kv, /*capacity=*/P + 1, d);  // the engine's K/V: [kv_head][slot][head_dim]
  kvevict::KVView<float> kv = store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = n_q;
  config.budget = kvevict::Budget::ratio(0.5);        // k = floor(0.5 * P) = 6
  config.recent = kvevict::RecentWindow::ratio(0.3);  // w = floor(0.3 * k) = 1
  kvevict::Keyformer cache(config, kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, T));  // tau 1 -> 2 over T steps
  const float scale = 1.0f / std::sqrt(float(d));
  std::vector<float> prompt_x(n_q * P * P), x(n_q * (P + 1));  // logits [q_head][P][P] and [q_head][n]
  for (std::size_t t = 0; t < P; ++t) {  // prefill: append token t; its query's row sees slots [0, t]
    kv.append(t, rows(n_kv, t, 0.0f).data(), rows(n_kv, t, 1.0f).data());
    kvevict::attention_logits(kv, rows(n_q, t, 2.0f).data(), n_q, x.data(), scale);
    for (std::size_t h = 0; h < n_q; ++h)
      for (std::size_t c = 0; c <= t; ++c) prompt_x[(h * P + t) * P + c] = x[h * (t + 1) + c];
  }
  cache.prefill(prompt_x.data(), P);  // keeps k tokens per KV head
  for (std::size_t pos = P; pos < P + T; ++pos) {  // decode: append, logits over the n live slots, attend, step
    kv.append(pos, rows(n_kv, pos, 0.0f).data(), rows(n_kv, pos, 1.0f).data());
    kvevict::attention_logits(kv, rows(n_q, pos, 2.0f).data(), n_q, x.data(), scale);
    cache.decode_step(x.data(), kv.length(0));  // after attention, softmax(x[h]) · V[h / 2]: evicts if n > k
  }
  for (std::size_t h = 0; h < n_kv; ++h) {
    std::printf("kv_head %zu keeps", h);
    for (auto p : cache.retained_positions(h)) std::printf(" %lld", static_cast<long long>(p));
    std::printf("  (k = %zu, w = %zu, tau = %.1f)\n", cache.budget(), cache.recent_window(), cache.temperature());
  }
}
