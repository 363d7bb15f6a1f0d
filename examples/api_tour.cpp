// The manual's API tour (docs/api.md) as a program: built and run by the tests, and the page shows
// this file verbatim (scripts/check_readme_snippets.py fails when they drift).
#include <kvevict/kvevict.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t prompt_len = 12, max_new_tokens = 6, n_kv_heads = 4, n_q_heads = 8, head_dim = 64;
  // Stand-ins for the model: K/V rows [kv_head][head_dim] (keys RoPE'd at their
  // position) and a query [q_head][head_dim] per token.
  auto rows = [&](std::size_t heads, std::int64_t pos, float phase) {
    std::vector<float> r(heads * head_dim);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = std::sin(phase + 0.37f * float(pos) * float(i % 7 + 1));
    return r;
  };

  // One layer: 4 KV heads, 8 query heads (GQA group 2). The cache is built on an
  // empty view; capacity >= max(P, k + 1), as a decode step appends before it evicts.
  kvevict::KVBuffer<float> kv_store(n_kv_heads, /*capacity=*/prompt_len + 1, head_dim);
  kvevict::KVView<float> kv = kv_store.view();  // [kv_head][slot][head_dim], row-major

  kvevict::CacheConfig config;
  config.n_q_heads = n_q_heads;
  config.budget = kvevict::Budget::ratio(0.5);        // k = floor(0.5 * prompt_len) = 6
  config.recent = kvevict::RecentWindow::ratio(0.3);  // w = floor(0.3 * k) = 1
  config.seed = 1234;                                 // Gumbel noise: same seed, same result
  kvevict::Keyformer cache(config, kv, kvevict::GumbelLogitScore{},
                           kvevict::LinearTemperature(/*tau_init=*/1.0f, /*tau_end=*/2.0f, /*T=*/max_new_tokens));

  // Prefill: append every prompt token's K and V; query t sees slots [0, t]: its
  // logits are row t of the causal x[q_head][P][P] (your attention computes them anyway).
  const float scale = 1.0f / std::sqrt(float(head_dim));
  std::vector<float> prompt_logits(n_q_heads * prompt_len * prompt_len), logits(n_q_heads * (prompt_len + 1));
  for (std::size_t t = 0; t < prompt_len; ++t) {
    kv.append(std::int64_t(t), rows(n_kv_heads, t, 0.0f).data(), rows(n_kv_heads, t, 1.0f).data());
    kvevict::attention_logits(kv, rows(n_q_heads, t, 2.0f).data(), n_q_heads, logits.data(), scale);
    for (std::size_t h = 0; h < n_q_heads; ++h)
      for (std::size_t c = 0; c <= t; ++c)
        prompt_logits[(h * prompt_len + t) * prompt_len + c] = logits[h * (t + 1) + c];
  }
  cache.prefill(prompt_logits.data(), prompt_len);  // the view now holds min(k, P) tokens per KV head

  // Decode: append the new token, compute its logits over the live slots, attend, step.
  for (std::size_t pos = prompt_len; pos < prompt_len + max_new_tokens; ++pos) {
    kv.append(std::int64_t(pos), rows(n_kv_heads, pos, 0.0f).data(), rows(n_kv_heads, pos, 1.0f).data());
    const std::size_t n = kv.length(0);  // slot n - 1 of every KV head is the new token
    kvevict::attention_logits(kv, rows(n_q_heads, pos, 2.0f).data(), n_q_heads, logits.data(), scale);  // x[q_head][n]
    // ... softmax(x) · V over slots [0, n) of KV head h / 2 is the attention output ...
    cache.decode_step(logits.data(), n);  // scores, evicts one slot per KV head if n > k
  }
  for (std::size_t h = 0; h < n_kv_heads; ++h) {
    std::printf("kv_head %zu keeps", h);
    for (std::int64_t p : cache.retained_positions(h)) std::printf(" %lld", static_cast<long long>(p));
    std::printf("  (k = %zu, w = %zu, tau = %.1f)\n", cache.budget(), cache.recent_window(), cache.temperature());
  }
}
