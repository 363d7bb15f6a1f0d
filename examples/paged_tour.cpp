// The manual's "Paged KV caches" loop (docs/paged.md) as a program: one layer, one sequence on a page pool,
// H2O evicting on the pages, logits from kvevict::paged_attention_logits. Built and run by the tests;
// docs/paged.md shows this file verbatim (scripts/check_readme_snippets.py fails when they drift).
#include <kvevict/kvevict.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  const std::size_t prompt_len = 20, steps = 8, num_pages = 8, page_size = 4, max_pages = 6;
  const std::size_t n_kv = 2, n_q = 4, head_dim = 16;
  auto rows = [&](std::size_t heads, std::int64_t pos, float phase) {  // stand-ins for the model's rows
    std::vector<float> r(heads * head_dim);
    for (std::size_t i = 0; i < r.size(); ++i) r[i] = std::sin(phase + 0.37f * float(pos) * float(i % 7 + 1));
    return r;
  };
  // The layer's pools, NHD [num_pages][page_size][n_kv][head_dim]; FlashInfer's combined pool
  // kv[num_pages][2][...] would be k = kv, v = kv + E, page_stride_elements = 2 * E (E = one page).
  std::vector<float> k_pool(num_pages * page_size * n_kv * head_dim), v_pool(k_pool.size());
  kvevict::PagePool pool(num_pages);  // shared by every sequence of the layer
  std::vector<std::int32_t> table(max_pages, kvevict::kNoPage);
  std::vector<std::int64_t> positions(max_pages * page_size);
  std::size_t length = 0;
  kvevict::PagedKVView<float> seq{k_pool.data(), v_pool.data(), num_pages, page_size, n_kv, head_dim,
                                  kvevict::PageLayout::NHD, table.data(), max_pages, &length, positions.data()};
  kvevict::CacheConfig config;
  config.n_q_heads = n_q;
  config.budget = kvevict::Budget::tokens(10);
  config.recent = kvevict::RecentWindow::ratio(0.3);  // w = floor(0.3 * 10) = 3
  config.shared_heads = true;                        // required: a page slot holds every KV head
  kvevict::PagedEvictionConfig paged;                // token unit; or {EvictUnit::page, 1}
  auto cache = kvevict::make_paged_cache(kvevict::Policy::h2o, config, paged, seq, pool);

  // Prefill: append every prompt token (pages are taken as they fill); row t of the causal logits
  // [q_head][P][P] is query t over slots [0, t].
  const float scale = 1.0f / std::sqrt(float(head_dim));
  std::vector<float> prompt_logits(n_q * prompt_len * prompt_len), logits(n_q * max_pages * page_size);
  for (std::size_t t = 0; t < prompt_len; ++t) {
    pool.append(seq, std::int64_t(t), rows(n_kv, t, 0.0f).data(), rows(n_kv, t, 1.0f).data());
    kvevict::paged_attention_logits(seq, rows(n_q, t, 2.0f).data(), n_q, logits.data(), scale);
    for (std::size_t h = 0; h < n_q; ++h)
      for (std::size_t c = 0; c <= t; ++c)
        prompt_logits[(h * prompt_len + t) * prompt_len + c] = logits[h * (t + 1) + c];
  }
  std::printf("prompt: %zu tokens in %zu pages\n", length, pool.used_pages());
  cache->prefill(prompt_logits.data(), prompt_len);  // keeps k = 10; the emptied pages go back to the pool
  std::printf("after prefill: %zu tokens in %zu pages\n", length, pool.used_pages());

  std::vector<float> out(n_q * head_dim);
  for (std::size_t pos = prompt_len; pos < prompt_len + steps; ++pos) {
    pool.append(seq, std::int64_t(pos), rows(n_kv, pos, 0.0f).data(), rows(n_kv, pos, 1.0f).data());
    const std::vector<float> q = rows(n_q, pos, 2.0f);
    kvevict::paged_attention_logits(seq, q.data(), n_q, logits.data(), scale);  // [q_head][length], by slot
    for (std::size_t h = 0; h < n_q; ++h) {  // out[h] = softmax(x[h]) · V over the live slots of KV head h / 2
      const float* x = logits.data() + h * length;
      const float mx = *std::max_element(x, x + length);
      float sum = 0.0f;
      std::fill(out.begin() + std::ptrdiff_t(h * head_dim), out.begin() + std::ptrdiff_t((h + 1) * head_dim), 0.0f);
      for (std::size_t s = 0; s < length; ++s) {
        const float p = std::exp(x[s] - mx);
        sum += p;
        for (std::size_t i = 0; i < head_dim; ++i) out[h * head_dim + i] += p * seq.v_row(h / (n_q / n_kv), s)[i];
      }
      for (std::size_t i = 0; i < head_dim; ++i) out[h * head_dim + i] /= sum;
    }
    cache->decode_step(logits.data(), length);  // evicts one slot; an emptied page goes back at once
  }
  std::printf("after %zu steps: %zu tokens in %zu pages, keeps", steps, length, pool.used_pages());
  for (std::int64_t p : cache->retained_positions(0)) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
  cache->reset(0);  // sequence done: every page back to the pool
  std::printf("after reset: %zu pages in use\n", pool.used_pages());
}
