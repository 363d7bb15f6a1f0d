// tests/llama2/llama2_no_allocation_test.cpp — Engine::step performs no heap allocation, with a
// full cache and with every eviction policy: counted by replacing the global operator new for this
// test executable.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "../support/allocation_counter.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "test_support.hpp"


namespace {

TEST(Llama2NoAllocation, DecodeStepsAllocateNothing) {
  llama2_test::Header h;
  h.seq_len = 64;
  llama2_test::TempFile f("kvevict_noalloc");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, 31));
  const llama2::Model model = llama2::Model::load(f.path);
  for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    llama2::EvictionSettings s;
    s.policy = policy;
    s.budget = kvevict::Budget::tokens(8);
    const std::string name = policy;
    s.recent = kvevict::RecentWindow::tokens(name != "full" && kvevict::takes_recent_window(kvevict::parse_policy(name)) ? 2 : 0);
    s.params.horizon = 40;
    llama2::Engine engine(model, llama2::make_cache_factory(s, model.config().n_heads));
    const long at_start = kvtest::allocation_count();
    engine.prefill({1, 4, 9, 16, 25, 6, 17, 30, 11, 2, 13, 24});
    const long before = kvtest::allocation_count();
    ASSERT_GT(before, at_start) << "the counter sees the prefill's allocations";
    for (int t = 0; t < 40; ++t) engine.step(t % 32);
    EXPECT_EQ(kvtest::allocation_count() - before, 0) << policy;
    EXPECT_EQ(engine.retained(0), std::string(policy) == "full" ? 52u : 8u) << policy;
  }
}

// Hooks that count their calls (Engine::set_hooks): a decode step calls them without allocating.
class CountingHooks final : public llama2::EngineHooks {
 public:
  explicit CountingHooks(std::size_t& calls) : calls_(calls) {}
  std::size_t rotary_position(const llama2::Engine&, std::size_t, std::size_t position) override {
    ++calls_;
    return position;
  }
  void decode_attention(const llama2::Engine&, std::size_t, const float*, std::size_t) override { ++calls_; }
  void after_cache(llama2::Engine&, std::size_t, kvevict::CacheInterface&, bool) override { ++calls_; }

 private:
  std::size_t& calls_;
};

TEST(Llama2NoAllocation, DecodeStepsWithHooksAllocateNothing) {
  llama2_test::Header h;
  h.seq_len = 64;
  llama2_test::TempFile f("kvevict_noalloc_hooks");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, 31));
  const llama2::Model model = llama2::Model::load(f.path);
  for (const char* policy : {"keyformer", "h2o", "streaming", "tova"}) {
    llama2::EvictionSettings s;
    s.policy = policy;
    s.budget = kvevict::Budget::tokens(8);
    s.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(kvevict::parse_policy(policy)) ? 2 : 0);
    s.params.horizon = 40;
    auto engine = llama2::make_engine(model, s);
    std::size_t calls = 0;
    engine->set_hooks(std::make_unique<CountingHooks>(calls));
    engine->prefill({1, 4, 9, 16, 25, 6, 17, 30, 11, 2, 13, 24});
    EXPECT_EQ(calls, model.config().n_layers) << policy << ": one after_cache per block at the prompt's end";
    const long before = kvtest::allocation_count();
    for (int t = 0; t < 40; ++t) engine->step(t % 32);
    EXPECT_EQ(kvtest::allocation_count() - before, 0) << policy;
    EXPECT_EQ(calls, model.config().n_layers + 40u * 3 * model.config().n_layers) << policy;
    EXPECT_EQ(engine->retained(0), 8u) << policy;
  }
}

TEST(Llama2NoAllocation, PagedDecodeStepsAllocateNothing) {
  llama2_test::Header h;
  h.seq_len = 64;
  llama2_test::TempFile f("kvevict_noalloc_paged");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, 31));
  const llama2::Model model = llama2::Model::load(f.path);
  for (auto unit : {kvevict::EvictUnit::token, kvevict::EvictUnit::page})
    for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
      llama2::EvictionSettings s;
      s.policy = policy;
      s.budget = kvevict::Budget::tokens(8);
      const std::string name = policy;
      s.recent = kvevict::RecentWindow::tokens(name != "full" && kvevict::takes_recent_window(kvevict::parse_policy(name)) ? 2 : 0);
      s.params.horizon = 40;
      s.kv_layout = llama2::KvLayout::paged;
      s.page_size = 4;
      s.evict_unit = unit;
      auto engine = llama2::make_engine(model, s);
      engine->prefill({1, 4, 9, 16, 25, 6, 17, 30, 11, 2, 13, 24});
      const long before = kvtest::allocation_count();
      for (int t = 0; t < 40; ++t) engine->step(t % 32);
      EXPECT_EQ(kvtest::allocation_count() - before, 0) << policy << " " << kvevict::evict_unit_name(unit);
      EXPECT_GT(engine->pages_in_use(), 0u);
    }
}

}  // namespace
