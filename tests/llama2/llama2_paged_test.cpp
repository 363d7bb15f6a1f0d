// tests/llama2/llama2_paged_test.cpp — the engine's paged KV layout: with the token unit
// its greedy ids (and every logit) equal those of the contiguous layout with shared_heads for every
// policy, on synthetic checkpoints and on stories260K in ../shared; the page unit keeps the pool
// exact and frees pages; bad settings are rejected.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "test_support.hpp"

namespace {

using llama2::Engine;
using llama2::EvictionSettings;
using llama2::KvLayout;
using llama2::Model;

const char* const kPolicies[] = {"keyformer", "h2o", "streaming", "window", "tova"};

EvictionSettings settings(const std::string& policy, std::size_t budget, std::size_t horizon) {
  EvictionSettings s;
  s.policy = policy;
  s.budget = kvevict::Budget::tokens(budget);
  s.recent = kvevict::RecentWindow::ratio(kvevict::takes_recent_window(kvevict::parse_policy(policy)) ? 0.3 : 0.0);
  s.shared_heads = true;
  s.params.horizon = horizon;
  s.seed = 11;
  return s;
}

struct GreedyRun {
  std::vector<int> ids;
  std::vector<std::vector<float>> logits;
  std::size_t pages_freed = 0;
};

// Greedy decoding (temperature 0) of `n_new` tokens after `prompt`; checks after every step that
// each block's pool holds exactly ceil(retained / page_size) pages.
GreedyRun greedy(const Model& m, const EvictionSettings& s, const std::vector<int>& prompt, std::size_t n_new) {
  auto engine = llama2::make_engine(m, s);
  const std::size_t vocab = m.config().vocab_size;
  const llama2::RowMatrix& pre = engine->prefill(prompt);
  GreedyRun r;
  const float* logits = pre.row(pre.rows() - 1).data();
  for (std::size_t i = 0; i < n_new; ++i) {
    r.logits.emplace_back(logits, logits + vocab);
    const int next = llama2::argmax(logits, vocab);
    r.ids.push_back(next);
    logits = engine->step(next);
    if (engine->paged())
      for (std::size_t l = 0; l < m.config().n_layers; ++l) {
        const std::size_t len = engine->retained(l), ps = s.page_size;
        EXPECT_EQ(engine->page_pool(l).used_pages(), (len + ps - 1) / ps) << "layer " << l;
      }
  }
  r.pages_freed = engine->pages_freed();
  return r;
}

void expect_paged_token_equals_contiguous_shared(const Model& m, const std::vector<int>& prompt, std::size_t budget,
                                                 std::size_t n_new) {
  for (const char* policy : kPolicies) {
    EvictionSettings contiguous = settings(policy, budget, n_new);
    const GreedyRun want = greedy(m, contiguous, prompt, n_new);
    for (std::size_t ps : {std::size_t{16}, std::size_t{8}, std::size_t{1}})
      for (kvevict::PageLayout layout : {kvevict::PageLayout::NHD, kvevict::PageLayout::HND}) {
        EvictionSettings paged = contiguous;
        paged.kv_layout = KvLayout::paged;
        paged.page_size = ps;
        paged.page_layout = layout;
        const GreedyRun got = greedy(m, paged, prompt, n_new);
        EXPECT_EQ(got.ids, want.ids) << policy << " page_size " << ps << " " << kvevict::page_layout_name(layout);
        EXPECT_EQ(got.logits, want.logits) << policy << " page_size " << ps;
        EXPECT_GT(got.pages_freed, 0u) << policy << " page_size " << ps;
      }
  }
}

Model synthetic_model(std::uint32_t seed) {
  llama2_test::Header h;
  llama2_test::TempFile f("kvevict_paged");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, seed));
  return Model::load(f.path);
}

TEST(Llama2Paged, TokenUnitEqualsContiguousSharedHeadsOnASyntheticModel) {
  const Model m = synthetic_model(31);  // GQA: 4 query heads, 2 KV heads, seq_len 48
  const std::vector<int> prompt = {1, 5, 17, 3, 30, 8, 8, 21, 2, 11, 19, 4, 27, 6, 13, 9, 22, 7, 3, 14};
  expect_paged_token_equals_contiguous_shared(m, prompt, 12, 24);
}

TEST(Llama2Paged, TokenUnitEqualsContiguousSharedHeadsOnStories260K) {
  const auto dir = llama2_test::shared_dir();
  const auto model_path = dir / "models" / "stories260K" / "stories260K.bin";
  const auto ids_path = dir / "reference" / "stories260K_greedy_from_bos.ids";
  KVEVICT_REQUIRE_SHARED_FILE(model_path);
  KVEVICT_REQUIRE_SHARED_FILE(ids_path);
  std::vector<int> prompt = {1};  // BOS, then the first 99 ids of llama2.c's greedy story
  {
    std::ifstream in(ids_path);
    for (int id; prompt.size() < 100 && in >> id;) prompt.push_back(id);
  }
  ASSERT_EQ(prompt.size(), 100u);
  const Model m = Model::load(model_path.string());
  expect_paged_token_equals_contiguous_shared(m, prompt, 48, 120);
}

TEST(Llama2Paged, PageUnitRunsFreesPagesAndStaysWithinBudgetPlusAPage) {
  const Model m = synthetic_model(32);
  const std::vector<int> prompt = {1, 5, 17, 3, 30, 8, 8, 21, 2, 11, 19, 4, 27, 6, 13, 9, 22, 7, 3, 14};
  for (const char* policy : kPolicies) {
    EvictionSettings s = settings(policy, 12, 20);
    s.kv_layout = KvLayout::paged;
    s.page_size = 4;
    s.evict_unit = kvevict::EvictUnit::page;
    s.start_pages = 1;
    auto engine = llama2::make_engine(m, s);
    engine->prefill(prompt);
    for (int t = 0; t < 20; ++t) {
      engine->step(t % 32);
      for (std::size_t l = 0; l < m.config().n_layers; ++l) {
        const std::size_t len = engine->retained(l);
        EXPECT_GE(len, 12u) << policy;
        EXPECT_LE(len, 12u + 4u - 1u) << policy;
        EXPECT_EQ(engine->page_pool(l).used_pages(), (len + 3) / 4) << policy;
        const auto& view = engine->paged_view(l);
        for (std::size_t s2 = 1; s2 < len; ++s2)  // the page unit never reorders: positions ascend
          ASSERT_LT(view.positions[s2 - 1], view.positions[s2]) << policy;
      }
    }
    EXPECT_GT(engine->pages_freed(), 0u) << policy;
    EXPECT_EQ(engine->pages_in_use(), m.config().n_layers * ((engine->retained(0) + 3) / 4)) << policy;
  }
}

TEST(Llama2Paged, SettingsAreValidated) {
  const Model m = synthetic_model(33);
  EvictionSettings s = settings("h2o", 12, 20);
  s.evict_unit = kvevict::EvictUnit::page;  // with the contiguous layout
  try {
    llama2::make_engine(m, s);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "llama2::make_engine: evict_unit = page needs kv_layout = paged");
  }
  s.evict_unit = kvevict::EvictUnit::token;
  s.start_pages = 2;
  EXPECT_THROW(llama2::make_engine(m, s), std::invalid_argument);
  s.start_pages = 0;
  s.kv_layout = KvLayout::paged;
  s.page_size = 0;
  EXPECT_THROW(llama2::make_engine(m, s), std::invalid_argument);
  s.page_size = 4;
  s.start_pages = 1;  // token unit
  EXPECT_THROW(llama2::make_engine(m, s), std::invalid_argument);
  EXPECT_EQ(llama2::parse_kv_layout("paged"), KvLayout::paged);
  EXPECT_THROW(llama2::parse_kv_layout("blocks"), std::invalid_argument);
  // A paged engine has no contiguous view, and the reverse.
  s.start_pages = 0;
  auto paged = llama2::make_engine(m, s);
  EXPECT_THROW(paged->view(0), std::logic_error);
  auto contiguous = llama2::make_engine(m, settings("h2o", 12, 20));
  EXPECT_THROW(contiguous->paged_view(0), std::logic_error);
  EXPECT_EQ(contiguous->pages_in_use(), 0u);
}

TEST(Llama2Paged, FullCacheOnPagesMatchesTheContiguousFullCache) {
  const Model m = synthetic_model(34);
  const std::vector<int> prompt = {1, 5, 17, 3, 30, 8};
  EvictionSettings s;  // policy "full"
  const GreedyRun want = greedy(m, s, prompt, 30);
  s.kv_layout = KvLayout::paged;
  s.page_size = 5;
  const GreedyRun got = greedy(m, s, prompt, 30);
  EXPECT_EQ(got.logits, want.logits);
  EXPECT_EQ(got.pages_freed, 0u);
}

}  // namespace
