// tests/llama2/llama2_hooks_test.cpp — the engine's hooks (Engine::set_hooks, llama2::EngineHooks): which
// calls a prefill and decode steps make, in order; a rotary position moves the RoPE of the query and key;
// the hooks stay across reset and go with set_hooks(nullptr).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "hook_log.hpp"
#include "test_support.hpp"

namespace {

using llama2::Engine;
using llama2::Model;
using llama2_test::Header;

Model make_model(const Header& h, std::uint32_t seed) {
  llama2_test::TempFile f("kvevict_hooks");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, seed));
  return Model::load(f.path);
}

std::vector<float> logits_of(const float* l, std::size_t n) { return std::vector<float>(l, l + n); }

TEST(Llama2Hooks, AFullCacheEngineReportsEveryLayersRotationAndAttentionOfEveryStep) {
  const Model m = make_model(Header{}, 44);  // 2 layers
  Engine e(m);
  std::vector<std::string> calls;
  e.set_hooks(std::make_unique<llama2_test::HookLog>(calls));
  ASSERT_NE(e.hooks(), nullptr);
  e.step(3);
  e.step(4);
  e.reset();  // the hooks stay
  e.step(5);
  EXPECT_EQ(calls, (std::vector<std::string>{"rot 0 0", "att 0 1", "rot 1 0", "att 1 1", "rot 0 1", "att 0 2",
                                             "rot 1 1", "att 1 2", "rot 0 0", "att 0 1", "rot 1 0", "att 1 1"}));
  e.set_hooks(nullptr);
  EXPECT_EQ(e.hooks(), nullptr);
  e.step(6);
  EXPECT_EQ(calls.size(), 12u);
}

TEST(Llama2Hooks, AnEvictingEngineReportsEachCacheAtThePromptsEndAndAfterEveryStep) {
  const Model m = make_model(Header{}, 45);
  llama2::EvictionSettings s;
  s.policy = "h2o";
  s.budget = kvevict::Budget::tokens(3);
  s.recent = kvevict::RecentWindow::tokens(1);
  s.params.horizon = 4;
  auto e = llama2::make_engine(m, s);
  std::vector<std::string> calls;
  e->set_hooks(std::make_unique<llama2_test::HookLog>(calls));
  e->prefill({1, 5, 17, 3});  // the prompt's rows go to the caches without a rotary call
  e->step(30);
  EXPECT_EQ(calls, (std::vector<std::string>{"cache 0 prompt", "cache 1 prompt", "rot 0 4", "att 0 4", "cache 0 step",
                                             "rot 1 4", "att 1 4", "cache 1 step"}));
}

// The default hooks change nothing, bit for bit; a rotary position shifted by 3 changes the logits.
TEST(Llama2Hooks, TheRotaryPositionIsWhereTheQueryAndKeyAreRotated) {
  const Model m = make_model(Header{}, 46);
  const std::size_t vocab = m.config().vocab_size;
  Engine plain(m), hooked(m), shifted(m);
  std::vector<std::string> sink;
  hooked.set_hooks(std::make_unique<llama2::EngineHooks>());
  shifted.set_hooks(std::make_unique<llama2_test::HookLog>(sink, 3));
  EXPECT_EQ(hooked.prefill({1, 5, 17}), plain.prefill({1, 5, 17}));
  shifted.prefill({1, 5, 17});
  bool differs = false;
  for (int t : {3, 30, 8}) {
    const auto want = logits_of(plain.step(t), vocab);
    ASSERT_EQ(logits_of(hooked.step(t), vocab), want);
    differs |= logits_of(shifted.step(t), vocab) != want;
  }
  EXPECT_TRUE(differs);
}

/// Returns a fixed rotary position at block `layer`, the true one elsewhere.
class FixedRotary final : public llama2::EngineHooks {
 public:
  FixedRotary(std::size_t layer, std::size_t rot) : layer_(layer), rot_(rot) {}
  std::size_t rotary_position(const Engine&, std::size_t layer, std::size_t position) override {
    return layer == layer_ ? rot_ : position;
  }

 private:
  std::size_t layer_, rot_;
};

// Issue 37: the hook's result indexed the RoPE tables unchecked: context() gave a heap-buffer-overflow in
// Engine::rope, 2^40 a SEGV. It is checked before the block changes; the engine is then reset.
TEST(Llama2Hooks, ARotaryPositionOutsideTheContextThrowsNamingTheHookAndTheValue) {
  const Model m = make_model(Header{}, 47);  // seq_len 48, 2 layers
  Engine e(m);
  for (const std::size_t rot : {std::size_t{48}, std::size_t{1} << 40}) {
    e.set_hooks(std::make_unique<FixedRotary>(1, rot));
    e.prefill({1, 5, 17});
    try {
      e.step(4);
      FAIL() << "accepted rotary position " << rot;
    } catch (const std::invalid_argument& x) {
      EXPECT_EQ(std::string(x.what()), "llama2::Engine: EngineHooks::rotary_position returned " + std::to_string(rot) +
                                           " for block 1, position 3; it must be < context() = 48");
    }
    EXPECT_EQ(e.position(), 0u);
  }
  e.set_hooks(std::make_unique<FixedRotary>(0, 47));  // the last position of the table is fine
  e.prefill({1, 5});
  EXPECT_NO_THROW(e.step(3));
}

}  // namespace

// Without hooks an evicting engine scores each KV head while its logits are hot (Engine::attend_hot and
// the cache's per-head decode step); with hooks installed it runs the whole-layer decode_step. Both give
// the same logits and the same retained positions, bit for bit, for every policy, both selections and any
// thread count (a GQA model: 4 query heads over 2 KV heads; 30 steps past a budget of 8).
TEST(Llama2Hooks, PerHeadScoringWithoutHooksGivesTheBitsOfTheWholeLayerStep) {
  const Model m = make_model(Header{}, 46);
  const std::vector<int> prompt = {1, 5, 9, 3, 7, 2, 8, 4, 6, 11, 13, 10, 12, 14, 15, 17, 16, 18, 19, 20};
  for (const char* policy : {"keyformer", "h2o", "tova", "streaming", "window"})
    for (bool shared : {false, true})
      for (std::size_t threads : {std::size_t{1}, std::size_t{3}}) {
        llama2::EvictionSettings s;
        s.policy = policy;
        s.budget = kvevict::Budget::tokens(8);
        s.recent = kvevict::RecentWindow::tokens(std::string(policy) == "keyformer" || std::string(policy) == "h2o" ? 2 : 0);
        s.shared_heads = shared;
        s.params.horizon = 30;
        s.params.sinks = 2;
        auto hot = llama2::make_engine(m, s);
        auto whole = llama2::make_engine(m, s);
        whole->set_hooks(std::make_unique<llama2::EngineHooks>());
        hot->set_threads(threads);
        whole->set_threads(threads);
        hot->prefill(prompt);
        whole->prefill(prompt);
        const std::string what = std::string(policy) + (shared ? " shared" : " per-head") + " threads " +
                                 std::to_string(threads);
        int token = 3;
        for (int t = 0; t < 26; ++t) {
          const std::vector<float> a = logits_of(hot->step(token), m.config().vocab_size);
          const std::vector<float> b = logits_of(whole->step(token), m.config().vocab_size);
          ASSERT_EQ(a, b) << what << " step " << t;
          for (std::size_t l = 0; l < m.config().n_layers; ++l)
            for (std::size_t j = 0; j < m.config().n_kv_heads; ++j)
              ASSERT_EQ(hot->cache(l)->retained_positions(j), whole->cache(l)->retained_positions(j))
                  << what << " step " << t << " layer " << l << " KV head " << j;
          token = (token * 7 + 3) % static_cast<int>(m.config().vocab_size);
        }
        EXPECT_EQ(hot->retained(0), 8u) << what;
      }
}
