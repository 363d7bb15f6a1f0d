// kvevict quickstart: the selection rule, then Keyformer on a small synthetic
// layer (2 KV heads, 4 query heads = GQA group 2) through prefill and 8 decode
// steps. Prints τ and each KV head's retained position IDs per step: heads
// keep different tokens, and positions are the original ones, never renumbered.
#include <cmath>
#include <cstdio>
#include <vector>

#include <kvevict/kvevict.hpp>

namespace {

void print_ids(const std::vector<std::size_t>& ids) {
  std::printf("[");
  for (std::size_t i = 0; i < ids.size(); ++i) std::printf(i ? ", %zu" : "%zu", ids[i]);
  std::printf("]\n");
}

void print_positions(const char* label, const std::vector<std::int64_t>& pos) {
  std::printf("%s[", label);
  for (std::size_t i = 0; i < pos.size(); ++i) std::printf(i ? ", %lld" : "%lld", static_cast<long long>(pos[i]));
  std::printf("]");
}

// Deterministic pseudo-random vector in [-1, 1) (a stand-in for projected K/Q rows).
std::vector<float> random_rows(kvevict::Xoshiro256pp& gen, std::size_t count) {
  std::vector<float> out(count);
  for (auto& x : out) x = static_cast<float>(gen() >> 40) / 8388608.0f - 1.0f;
  return out;
}

}  // namespace

int main() {
  // 1. The selection rule: recent window w = 1, budget k = 3.
  std::printf("select_keep([0.40, 0.20, 0.10, 0.05, 0.25], k=3, w=1) = ");
  print_ids(kvevict::select_keep({0.40f, 0.20f, 0.10f, 0.05f, 0.25f}, 3, 1));

  // 2. Keyformer on one synthetic layer.
  const std::size_t n_kv = 2, n_q = 4, d = 16, prompt = 12, steps = 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  kvevict::KVBuffer<float> buffer(n_kv, /*capacity=*/prompt + steps, d);
  kvevict::KVView<float> kv = buffer.view();

  kvevict::CacheConfig config;
  config.n_q_heads = n_q;
  config.budget = kvevict::Budget::tokens(6);       // k = 6 tokens per KV head
  config.recent = kvevict::RecentWindow::tokens(2); // w = 2 most recent always kept
  config.seed = 7;
  kvevict::Keyformer cache(config, kv, kvevict::GumbelLogitScore{},
                           kvevict::LinearTemperature(/*tau_init=*/1.0f, /*tau_end=*/2.0f, /*T=*/steps));

  kvevict::Xoshiro256pp gen(7);
  // Prefill: append the prompt's K/V, compute causal logits [q_head][P][P], score and cut.
  std::vector<std::vector<float>> queries;
  for (std::size_t t = 0; t < prompt; ++t) {
    const auto k_rows = random_rows(gen, n_kv * d), v_rows = random_rows(gen, n_kv * d);
    kv.append(static_cast<std::int64_t>(t), k_rows.data(), v_rows.data());
    queries.push_back(random_rows(gen, n_q * d));
  }
  std::vector<float> logits(n_q * prompt * prompt, 0.0f);
  for (std::size_t h = 0; h < n_q; ++h)
    for (std::size_t r = 0; r < prompt; ++r)
      for (std::size_t c = 0; c <= r; ++c) {
        float dot = 0.0f;
        for (std::size_t i = 0; i < d; ++i) dot += queries[r][h * d + i] * kv.k_row(h / (n_q / n_kv), c)[i];
        logits[(h * prompt + r) * prompt + c] = dot * scale;
      }
  cache.prefill(logits.data(), prompt);

  auto report = [&](const char* label) {
    std::printf("%-8s tau=%.3f  ", label, static_cast<double>(cache.temperature()));
    for (std::size_t j = 0; j < n_kv; ++j) {
      print_positions(j == 0 ? "kv_head0 " : "  kv_head1 ", cache.retained_positions(j));
    }
    std::printf("\n");
  };
  std::printf("\nKeyformer, k=%zu, w=%zu, %zu KV heads x GQA group %zu, prompt %zu tokens\n", cache.budget(),
              cache.recent_window(), n_kv, cache.group_size(), prompt);
  report("prefill");

  // Decode: append the new token's K/V, compute its logits over the retained slots, step.
  std::vector<float> step_logits(n_q * (prompt + steps));
  for (std::size_t t = 1; t <= steps; ++t) {
    const auto k_rows = random_rows(gen, n_kv * d), v_rows = random_rows(gen, n_kv * d);
    const auto q = random_rows(gen, n_q * d);
    kv.append(static_cast<std::int64_t>(prompt + t - 1), k_rows.data(), v_rows.data());
    const std::size_t n = kv.length(0);
    kvevict::attention_logits(kv, q.data(), n_q, step_logits.data(), scale);
    cache.decode_step(step_logits.data(), n);
    char label[16];
    std::snprintf(label, sizeof label, "step %zu", t);
    report(label);
  }
  return 0;
}
