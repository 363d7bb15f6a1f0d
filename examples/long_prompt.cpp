// The manual's "Long prompts" loop (docs/long-prompts.md) as a program: a prompt streamed in chunks with bounded
// prefill, scored straight from Q and K (prefill_chunk_qk), then decode steps. Built and run
// by the tests; docs/long-prompts.md shows this file verbatim.
#include <kvevict/kvevict.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t prompt_len = 40, chunk = 8, k = 12, n_kv_heads = 2, n_q_heads = 4, head_dim = 32;
  auto rows = [&](std::size_t heads, std::int64_t pos, float phase) {  // stand-ins for the model
    std::vector<float> r(heads * head_dim);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = std::sin(phase + 0.37f * float(pos) * float(i % 7 + 1));
    return r;
  };
  // Bounded prefill: the view never holds more than k + chunk tokens, whatever the prompt length.
  kvevict::KVBuffer<float> kv_store(n_kv_heads, /*capacity=*/k + chunk, head_dim);
  kvevict::KVView<float> kv = kv_store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = n_q_heads;
  config.budget = kvevict::Budget::tokens(k);  // bounded prefill needs k before the prompt ends
  config.recent = kvevict::RecentWindow::tokens(4);
  config.max_prefill_chunk = chunk;
  config.bounded_prefill = true;
  kvevict::H2O cache(config, kv);
  kvevict::QKChunkScratch scratch(kv.capacity, head_dim);  // O(row_tile · capacity) floats, once
  const float scale = 1.0f / std::sqrt(float(head_dim));

  std::size_t largest_view = 0;
  std::vector<float> q(chunk * n_q_heads * head_dim);  // the chunk's queries [C][q_head][head_dim]
  for (std::size_t start = 0; start < prompt_len; start += chunk) {
    const std::size_t len = std::min(chunk, prompt_len - start);
    for (std::size_t i = 0; i < len; ++i) {  // append the chunk's K/V (positions stay global)
      const auto pos = std::int64_t(start + i);
      kv.append(pos, rows(n_kv_heads, pos, 0.0f).data(), rows(n_kv_heads, pos, 1.0f).data());
      const auto qi = rows(n_q_heads, pos, 2.0f);
      std::copy(qi.begin(), qi.end(), q.begin() + std::ptrdiff_t(i * n_q_heads * head_dim));
    }
    largest_view = std::max(largest_view, kv.length(0));
    // ... the engine's fused attention for the chunk runs here, over the view ...
    kvevict::prefill_chunk_qk(cache, kv, q.data(), len, n_q_heads, scale, scratch);  // scores, cuts to k
  }
  cache.finish_prefill();

  std::vector<float> logits(n_q_heads * (k + 1));
  for (std::size_t pos = prompt_len; pos < prompt_len + 4; ++pos) {  // decode as usual
    kv.append(std::int64_t(pos), rows(n_kv_heads, pos, 0.0f).data(), rows(n_kv_heads, pos, 1.0f).data());
    kvevict::attention_logits(kv, rows(n_q_heads, pos, 2.0f).data(), n_q_heads, logits.data(), scale);
    cache.decode_step(logits.data(), kv.length(0));
  }
  std::printf("largest view %zu (k + C = %zu), kv_head 0 keeps", largest_view, k + chunk);
  for (std::int64_t p : cache.retained_positions(0)) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
}
