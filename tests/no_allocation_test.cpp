// decode_step performs no heap allocation after construction: counted by
// replacing the global operator new for this test executable (tests/support).
#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

#include "support/allocation_counter.hpp"

#include <kvevict/kvevict.hpp>


namespace {

long count_decode_allocations(kvevict::Policy policy, bool shared_heads) {
  const std::size_t n_kv = 4, g = 2, d = 32, k = 64, prompt = 96, steps = 1000;
  kvevict::KVBuffer<float> buf(n_kv, k + 1 > prompt ? k + 1 : prompt, d);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv * g;
  cfg.budget = kvevict::Budget::tokens(k);
  // TOVA has no recent window; StreamingLLM and window derive theirs from the budget (k - sinks).
  const bool no_window = policy == kvevict::Policy::tova || policy == kvevict::Policy::streaming_llm ||
                         policy == kvevict::Policy::window;
  cfg.recent = kvevict::RecentWindow::tokens(no_window ? 0 : 16);
  cfg.shared_heads = shared_heads;
  kvevict::PolicyParams params;
  params.horizon = steps;
  auto cache = kvevict::make_cache(policy, cfg, kv, params);
  std::vector<float> rows(n_kv * d, 0.5f);
  for (std::size_t p = 0; p < prompt; ++p) kv.append(static_cast<std::int64_t>(p), rows.data(), rows.data());
  std::vector<float> logits(cfg.n_q_heads * prompt * prompt, 0.0f), q(cfg.n_q_heads * d, 0.1f);
  cache->prefill(logits.data(), prompt);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 7) * 0.1f;
  const long before = kvtest::allocation_count();
  for (std::size_t t = 0; t < steps; ++t) {
    kv.append(static_cast<std::int64_t>(prompt + t), rows.data(), rows.data());
    const std::size_t n = kv.length(0);
    kvevict::attention_logits(kv, q.data(), cfg.n_q_heads, logits.data(), 0.125f);
    cache->decode_step(logits.data(), n);
  }
  return kvtest::allocation_count() - before;
}

TEST(NoAllocation, DecodeStepsAllocateNothing) {
  for (auto policy : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                      kvevict::Policy::window, kvevict::Policy::tova})
    for (bool shared : {false, true})
      EXPECT_EQ(count_decode_allocations(policy, shared), 0)
          << kvevict::policy_name(policy) << (shared ? " shared" : " per-head");
}

TEST(NoAllocation, CounterSeesAllocations) {
  const long before = kvtest::allocation_count();
  void* p = ::operator new(64);  // a direct call cannot be elided, unlike a new-expression
  ::operator delete(p);
  EXPECT_EQ(kvtest::allocation_count() - before, 1);
}

}  // namespace
