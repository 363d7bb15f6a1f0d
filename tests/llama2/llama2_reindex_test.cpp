// tests/llama2/llama2_reindex_test.cpp — the engine's "positions re-indexed" option (Keyformer §4.4.1
// ablation; Engine::set_reindex_positions): without eviction it changes nothing, bit for bit; with
// eviction every retained key equals a fresh RoPE rotation of the same key at its cache index; misuse
// is rejected. Also the decode attention hook.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/attention/rope.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "test_support.hpp"

namespace {

using llama2::Engine;
using llama2::Model;
using llama2_test::Header;

Model make_model(const Header& h, std::uint32_t seed) {
  llama2_test::TempFile f("kvevict_reindex");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, seed));
  return Model::load(f.path);
}

const std::vector<int> kTokens = {1, 5, 17, 3, 30, 8, 8, 21, 2, 11, 19, 4, 27, 6, 13, 9, 22, 7, 15, 0};

llama2::EvictionSettings settings(const std::string& policy, std::size_t k, bool reindex) {
  llama2::EvictionSettings s;
  s.policy = policy;
  s.budget = kvevict::Budget::tokens(k);
  s.recent = kvevict::RecentWindow::tokens(policy == "keyformer" || policy == "h2o" ? 1 : 0);
  s.params.horizon = 16;
  s.seed = 3;
  s.reindex_positions = reindex;
  return s;
}

std::vector<float> logits_of(const float* l, std::size_t n) { return std::vector<float>(l, l + n); }

TEST(Llama2Reindex, WithoutEvictionTheIdsAndLogitsAreUnchanged) {
  const Model m = make_model(Header{}, 41);
  const std::size_t vocab = m.config().vocab_size;
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 8);
  for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    auto plain = llama2::make_engine(m, settings(policy, 40, false));
    auto reindexed = llama2::make_engine(m, settings(policy, 40, true));
    ASSERT_TRUE(reindexed->reindex_positions());
    EXPECT_EQ(reindexed->prefill(prompt), plain->prefill(prompt)) << policy;
    for (std::size_t t = 8; t < kTokens.size(); ++t)
      ASSERT_EQ(logits_of(reindexed->step(kTokens[t]), vocab), logits_of(plain->step(kTokens[t]), vocab)) << policy;
  }
}

// Layer 0's keys before RoPE depend on the token only, so the full cache's layer-0 key of position p,
// rotated back by p and forward to the cache index s (kvevict::rope_rotate, in double), is the key a
// re-indexed engine must hold at slot s — after the prefill cut and after every decode step.
void expect_keys_at_cache_index(const Engine& e, const Engine& full, const std::string& what) {
  const auto& view = e.view(0);
  const auto& ref = full.view(0);
  const std::size_t hd = view.head_dim;
  for (std::size_t h = 0; h < view.n_kv_heads; ++h)
    for (std::size_t s = 0; s < view.length(h); ++s) {
      const std::int64_t p = view.head_positions(h)[s];
      if (s > 0) {
        ASSERT_LT(view.head_positions(h)[s - 1], p) << what << ": slots in position order";
      }
      std::vector<float> want(ref.k_row(h, static_cast<std::size_t>(p)), ref.k_row(h, static_cast<std::size_t>(p)) + hd);
      kvevict::rope_rotate(want.data(), hd, static_cast<double>(s) - static_cast<double>(p));
      for (std::size_t i = 0; i < hd; ++i)
        ASSERT_NEAR(view.k_row(h, s)[i], want[i], 1e-5) << what << " head " << h << " slot " << s << " pos " << p;
    }
}

TEST(Llama2Reindex, RetainedKeysEqualAFreshRotationAtTheirCacheIndex) {
  const Model m = make_model(Header{}, 42);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 10);
  for (const char* policy : {"keyformer", "h2o", "streaming", "tova"}) {
    auto e = llama2::make_engine(m, settings(policy, 5, true));
    auto plain = llama2::make_engine(m, settings(policy, 5, false));
    Engine full(m);
    full.prefill(prompt);
    e->prefill(prompt);
    plain->prefill(prompt);
    expect_keys_at_cache_index(*e, full, std::string(policy) + " prefill");
    bool differs = false;
    for (std::size_t t = 10; t < kTokens.size(); ++t) {
      full.step(kTokens[t]);
      const auto got = logits_of(e->step(kTokens[t]), m.config().vocab_size);
      differs |= got != logits_of(plain->step(kTokens[t]), m.config().vocab_size);
      for (std::size_t l = 0; l < m.config().n_layers; ++l) ASSERT_EQ(e->retained(l), 5u);
      expect_keys_at_cache_index(*e, full, std::string(policy) + " step " + std::to_string(t));
    }
    EXPECT_TRUE(differs) << policy << ": re-indexing changed nothing although tokens were evicted";
  }
}

TEST(Llama2Reindex, MisuseIsRejected) {
  const Model m = make_model(Header{}, 43);
  Engine e(m);
  e.step(1);
  EXPECT_THROW(e.set_reindex_positions(true), std::logic_error);
  EXPECT_FALSE(e.reindex_positions());
  llama2::EvictionSettings s = settings("h2o", 5, true);
  s.kv_layout = llama2::KvLayout::paged;
  EXPECT_THROW(llama2::make_engine(m, s), std::invalid_argument);
  Engine paged(m, llama2::PagedKVOptions{});
  EXPECT_THROW(paged.set_reindex_positions(true), std::invalid_argument);
}

TEST(Llama2Reindex, AttentionHookSeesEveryLayersLogitsOfEveryStep) {
  const Model m = make_model(Header{}, 44);
  Engine e(m);
  std::vector<std::size_t> calls;  // layer * 100 + n
  e.set_decode_attention_hook([&](std::size_t layer, const float*, std::size_t n) { calls.push_back(layer * 100 + n); });
  e.step(3);
  e.step(4);
  e.reset();  // the hook stays
  e.step(5);
  EXPECT_EQ(calls, (std::vector<std::size_t>{1, 101, 2, 102, 1, 101}));
}

}  // namespace
