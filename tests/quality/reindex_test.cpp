// tests/quality/reindex_test.cpp — the quality harness's "positions re-indexed" rows (Keyformer §4.4.1
// ablation; bench/quality/reindex.hpp, on the engine's hooks): without eviction it changes nothing, bit for
// bit; with eviction every retained key equals a fresh RoPE rotation of the same key at its cache index;
// a re-indexed decode step allocates nothing; misuse is rejected.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "../support/allocation_counter.hpp"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/attention/rope.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "reindex.hpp"
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

llama2::EvictionSettings settings(const std::string& policy, std::size_t k) {
  llama2::EvictionSettings s;
  s.policy = policy;
  s.budget = kvevict::Budget::tokens(k);
  s.recent = kvevict::RecentWindow::tokens(policy == "keyformer" || policy == "h2o" ? 1 : 0);
  s.params.horizon = 16;
  s.seed = 3;
  return s;
}

// An engine as `settings(policy, k)` describe it, re-indexed if `reindex`.
std::unique_ptr<Engine> make(const Model& m, const std::string& policy, std::size_t k, bool reindex) {
  auto e = llama2::make_engine(m, settings(policy, k));
  if (reindex) kvquality::reindex_positions(*e);
  return e;
}

std::vector<float> logits_of(const float* l, std::size_t n) { return std::vector<float>(l, l + n); }

TEST(Llama2Reindex, WithoutEvictionTheIdsAndLogitsAreUnchanged) {
  const Model m = make_model(Header{}, 41);
  const std::size_t vocab = m.config().vocab_size;
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 8);
  for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    auto plain = make(m, policy, 40, false);
    auto reindexed = make(m, policy, 40, true);
    ASSERT_TRUE(kvquality::reindexes_positions(*reindexed));
    ASSERT_FALSE(kvquality::reindexes_positions(*plain));
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
      const float* key = ref.k_row(h, static_cast<std::size_t>(p));
      std::vector<float> want(key, key + hd);
      kvevict::rope_rotate(want.data(), hd, static_cast<double>(s) - static_cast<double>(p));
      for (std::size_t i = 0; i < hd; ++i)
        ASSERT_NEAR(view.k_row(h, s)[i], want[i], 1e-5) << what << " head " << h << " slot " << s << " pos " << p;
    }
}

TEST(Llama2Reindex, RetainedKeysEqualAFreshRotationAtTheirCacheIndex) {
  const Model m = make_model(Header{}, 42);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 10);
  for (const char* policy : {"keyformer", "h2o", "streaming", "tova"}) {
    auto e = make(m, policy, 5, true);
    auto plain = make(m, policy, 5, false);
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
  EXPECT_THROW(kvquality::reindex_positions(e), std::logic_error);
  EXPECT_FALSE(kvquality::reindexes_positions(e));
  EXPECT_EQ(e.hooks(), nullptr);
  llama2::EvictionSettings s = settings("h2o", 5);
  s.kv_layout = llama2::KvLayout::paged;
  auto paged_h2o = llama2::make_engine(m, s);
  EXPECT_THROW(kvquality::reindex_positions(*paged_h2o), std::invalid_argument);
  EXPECT_EQ(paged_h2o->hooks(), nullptr);
  Engine paged(m, llama2::PagedKVOptions{});
  EXPECT_THROW(kvquality::reindex_positions(paged), std::invalid_argument);
}

// A step sorts the slots and re-rotates keys in place without allocating.
TEST(Llama2Reindex, ReindexedDecodeStepsAllocateNothing) {
  llama2_test::Header h;
  h.seq_len = 64;
  llama2_test::TempFile f("kvevict_noalloc_reindex");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, 31));
  const llama2::Model model = llama2::Model::load(f.path);
  for (const char* policy : {"keyformer", "h2o", "streaming", "tova"}) {
    llama2::EvictionSettings s;
    s.policy = policy;
    s.budget = kvevict::Budget::tokens(8);
    s.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(kvevict::parse_policy(policy)) ? 2 : 0);
    s.params.horizon = 40;
    auto engine = llama2::make_engine(model, s);
    kvquality::reindex_positions(*engine);
    engine->prefill({1, 4, 9, 16, 25, 6, 17, 30, 11, 2, 13, 24});
    const long before = kvtest::allocation_count();
    for (int t = 0; t < 40; ++t) engine->step(t % 32);
    EXPECT_EQ(kvtest::allocation_count() - before, 0) << policy;
    EXPECT_EQ(engine->retained(0), 8u) << policy;
  }
}

}  // namespace
