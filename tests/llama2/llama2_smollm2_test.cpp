// tests/llama2/llama2_smollm2_test.cpp — (realmodel) the engine on SmolLM2-135M-Instruct's Q4_1 GGUF
// against Hugging Face transformers (scripts/oracle/smollm2_reference.py, float32 after dequantization):
// the full cache's logits at 32 positions of a 512-token document within 2e-3, the 128 greedy ids of a
// fixed prompt, and a Keyformer generation at a 50% budget that holds exactly k tokens per KV head.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "realmodel_support.hpp"

namespace {

nlohmann::json read_json(const std::string& name) {
  std::ifstream in(llama2_test::smollm2_reference_dir() / name);
  if (!in) throw std::runtime_error("cannot open " + name);
  return nlohmann::json::parse(in);
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    path_ = llama2_test::smollm2_gguf(why);
    if (!path_.empty()) model_ = new llama2::Model(llama2::Model::load(path_));
    why_ = why;
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) {
      if (llama2_test::models_required()) FAIL() << "SmolLM2 GGUF not available: " << why_;
      GTEST_SKIP() << "SmolLM2 GGUF not available (" << why_ << "); set KVEVICT_SMOLLM2_GGUF or run scripts/get-models.sh";
    }
  }
  static std::string path_, why_;
  static llama2::Model* model_;
};
std::string SmolLM2::path_, SmolLM2::why_;
llama2::Model* SmolLM2::model_ = nullptr;

TEST_F(SmolLM2, HyperparametersAndTensorTypesFromTheFile) {
  const llama2::Config& c = model_->config();
  EXPECT_EQ(c.n_layers, 30u);
  EXPECT_EQ(c.dim, 576u);
  EXPECT_EQ(c.hidden_dim, 1536u);
  EXPECT_EQ(c.n_heads, 9u);
  EXPECT_EQ(c.n_kv_heads, 3u);
  EXPECT_EQ(c.head_dim(), 64u);
  EXPECT_EQ(c.vocab_size, 49152u);
  EXPECT_EQ(c.seq_len, 8192u);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(model_->format(), "gguf (f32 x61, q4_1 x210, q8_0 x1)");
}

// Every reference top-20 logit within 2e-3 of ours, at 32 positions of one full-cache prefill.
TEST_F(SmolLM2, FullCacheLogitsMatchTransformersWithin2e3) {
  const nlohmann::json ref = read_json("logits_512.json");
  const auto ids = ref.at("ids").get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 512u);
  llama2::Engine engine(*model_);
  engine.set_threads(2);
  const llama2::RowMatrix& logits = engine.prefill(ids);
  double worst = 0.0;
  std::size_t checked = 0;
  for (const auto& at : ref.at("positions")) {
    const auto pos = at.at("position").get<Eigen::Index>();
    const auto top = at.at("ids").get<std::vector<int>>();
    const auto values = at.at("logits").get<std::vector<double>>();
    ASSERT_EQ(top.size(), 20u);
    for (std::size_t j = 0; j < top.size(); ++j) {
      const double diff = std::fabs(static_cast<double>(logits(pos, top[j])) - values[j]);
      worst = std::max(worst, diff);
      EXPECT_LE(diff, 2e-3) << "position " << pos << " id " << top[j];
      ++checked;
    }
    // Our argmax is the reference's (its top-1/top-2 gap exceeds the tolerance at every position checked).
    if (values[0] - values[1] > 4e-3) {
      EXPECT_EQ(llama2::argmax(logits.row(pos).data(), model_->config().vocab_size), top[0]) << "position " << pos;
    }
  }
  EXPECT_EQ(checked, 640u);
  std::cout << "[ SmolLM2 ] worst |logit - transformers| over 640 logits: " << worst << "\n";
}

std::vector<int> greedy(llama2::Engine& engine, const std::vector<int>& prompt, std::size_t n, std::size_t vocab) {
  const llama2::RowMatrix& pre = engine.prefill(prompt);
  const float* logits = pre.row(pre.rows() - 1).data();
  std::vector<int> out;
  while (out.size() < n) {
    out.push_back(llama2::argmax(logits, vocab));
    if (out.size() < n) logits = engine.step(out.back());
  }
  return out;
}

TEST_F(SmolLM2, GreedyIdsMatchTransformers) {
  const nlohmann::json ref = read_json("greedy_128.json");
  llama2::Engine engine(*model_);
  engine.set_threads(2);
  const auto want = ref.at("greedy_ids").get<std::vector<int>>();
  ASSERT_EQ(want.size(), 128u);
  EXPECT_EQ(greedy(engine, ref.at("prompt_ids").get<std::vector<int>>(), 128, model_->config().vocab_size), want);
}

// Keyformer at k = 50% of the prompt (w = 30% of k, τ 1 -> 2, Gumbel noise): every KV head of every layer
// holds exactly k tokens after each step, the prompt's last token predicts what the full cache predicts
// (the prefill attends to the whole prompt), the run is reproducible, and teacher-forced on the full
// cache's greedy continuation its top-1 agrees with the full cache on most steps.
TEST_F(SmolLM2, KeyformerAtHalfTheBudgetHoldsKAndStaysClose) {
  const nlohmann::json ref = read_json("logits_512.json");
  auto ids = ref.at("ids").get<std::vector<int>>();
  const std::vector<int> prompt(ids.begin(), ids.begin() + 256);
  const std::size_t V = model_->config().vocab_size, steps = 64, k = 128;

  llama2::Engine full(*model_);
  full.set_threads(2);
  const std::vector<int> continuation = greedy(full, prompt, steps, V);

  llama2::EvictionSettings ev;
  ev.policy = "keyformer";
  ev.budget = kvevict::Budget::ratio(0.5);
  ev.params.horizon = steps;
  ev.seed = 42;
  auto run = [&](std::vector<int>* top1) {
    auto engine = llama2::make_engine(*model_, ev);
    engine->set_threads(2);
    const llama2::RowMatrix& pre = engine->prefill(prompt);
    const float* logits = pre.row(pre.rows() - 1).data();
    for (std::size_t l = 0; l < model_->config().n_layers; ++l)
      for (std::size_t h = 0; h < model_->config().n_kv_heads; ++h) EXPECT_EQ(engine->retained(l, h), k);
    for (std::size_t s = 0; s < steps; ++s) {
      top1->push_back(llama2::argmax(logits, V));
      logits = engine->step(continuation[s]);
      for (std::size_t l = 0; l < model_->config().n_layers; ++l)
        for (std::size_t h = 0; h < model_->config().n_kv_heads; ++h) ASSERT_EQ(engine->retained(l, h), k);
    }
    EXPECT_EQ(engine->kv_bytes_held() * (256 + steps), engine->kv_bytes_full() * k);
  };
  std::vector<int> a, b;
  run(&a);
  run(&b);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), steps);
  EXPECT_EQ(a[0], continuation[0]);
  std::size_t agree = 0;
  for (std::size_t s = 0; s < steps; ++s) agree += a[s] == continuation[s];
  std::cout << "[ SmolLM2 ] Keyformer k = 128 of 256: top-1 agrees with the full cache on " << agree << " of " << steps
            << " teacher-forced steps\n";
  EXPECT_GE(agree, steps / 2);
}

}  // namespace
