// tests/llama2/llama2_chunked_prefill_test.cpp — chunked prefill on the real stories260K checkpoint
// (../shared): with chunks of 64 the greedy ids equal the one-shot prefill's for every policy
//, and a bounded prefill keeps every block at its budget through a long prompt.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
constexpr int kBos = 1;

fs::path model_path() { return llama2_test::shared_dir() / "models" / "stories260K" / "stories260K.bin"; }
fs::path ids_path() { return llama2_test::shared_dir() / "reference" / "stories260K_greedy_from_bos.ids"; }

// BOS + the first `n` ids of llama2.c's greedy story: a natural prompt of n + 1 tokens.
std::vector<int> story_prompt(std::size_t n) {
  std::vector<int> ids{kBos};
  std::ifstream in(ids_path());
  for (int id; ids.size() <= n && in >> id;) ids.push_back(id);
  return ids;
}

std::vector<int> greedy(llama2::Engine& engine, const std::vector<int>& prompt, std::size_t max_new) {
  const llama2::RowMatrix& pre = engine.prefill(prompt);
  const float* logits = pre.row(pre.rows() - 1).data();
  std::vector<int> out;
  while (out.size() < max_new && engine.position() < engine.config().seq_len) {
    out.push_back(llama2::argmax(logits, engine.config().vocab_size));
    logits = engine.step(out.back());
  }
  return out;
}

llama2::EvictionSettings settings(const std::string& policy, kvevict::Budget budget) {
  llama2::EvictionSettings s;
  s.policy = policy;
  s.budget = budget;
  const bool no_window = policy == "tova" || policy == "streaming" || policy == "window";
  s.recent = kvevict::RecentWindow::ratio(no_window ? 0.0 : 0.3);
  s.params.horizon = 100;
  s.params.gumbel_noise = true;  // drawn noise is the same for every chunking
  s.seed = 5;
  return s;
}

TEST(Stories260KChunkedPrefill, ChunksOf64GiveTheOneShotGreedyIds) {
  KVEVICT_REQUIRE_SHARED_FILE(model_path());
  KVEVICT_REQUIRE_SHARED_FILE(ids_path());
  const llama2::Model model = llama2::Model::load(model_path().string());
  const std::vector<int> prompt = story_prompt(200);  // 201 tokens: 3 full chunks of 64 and one of 9
  ASSERT_EQ(prompt.size(), 201u);
  for (const std::string policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    auto s = settings(policy, kvevict::Budget::ratio(0.5));
    llama2::Engine one(model, llama2::make_cache_factory(s, model.config().n_heads));
    s.prefill_chunk = 64;
    llama2::Engine chunked(model, llama2::make_cache_factory(s, model.config().n_heads), 64);
    const auto expected = greedy(one, prompt, 100);
    ASSERT_EQ(expected.size(), 100u) << policy;
    EXPECT_EQ(greedy(chunked, prompt, 100), expected) << policy;
  }
}

TEST(Stories260KChunkedPrefill, BoundedPrefillKeepsEveryBlockAtItsBudget) {
  KVEVICT_REQUIRE_SHARED_FILE(model_path());
  KVEVICT_REQUIRE_SHARED_FILE(ids_path());
  const llama2::Model model = llama2::Model::load(model_path().string());
  const std::vector<int> prompt = story_prompt(300);
  for (const std::string policy : {"keyformer", "h2o"}) {
    auto s = settings(policy, kvevict::Budget::tokens(64));
    s.prefill_chunk = 32;
    s.bounded_prefill = true;
    llama2::Engine a(model, llama2::make_cache_factory(s, model.config().n_heads), 32),
        b(model, llama2::make_cache_factory(s, model.config().n_heads), 32);
    const auto ids = greedy(a, prompt, 50);
    EXPECT_EQ(ids.size(), 50u) << policy;
    EXPECT_EQ(greedy(b, prompt, 50), ids) << policy;  // deterministic
    for (std::size_t l = 0; l < model.config().n_layers; ++l)
      for (std::size_t h = 0; h < model.config().n_kv_heads; ++h) EXPECT_EQ(a.retained(l, h), 64u) << policy;
  }
}

}  // namespace
