// tests/llama2/llama2_batch_test.cpp — Engine::prefill_batch and Engine::step_batch give every engine
// bit for bit what its own prefill and steps give (every policy, both KV layouts, hooks), and refuse bad
// batches without changing an engine; Engine's `context` sizes an engine below the model's seq_len.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
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
using llama2::EvictionSettings;
using llama2::Model;
using llama2_test::Header;

// Large enough that every weight product has several 64-row tasks (dim 96: 2, hidden 160: 3, vocab 200: 4).
Header batch_header() {
  Header h;
  h.dim = 96;
  h.hidden_dim = 160;
  h.n_heads = 4;
  h.n_kv_heads = 2;
  h.vocab_size = 200;
  h.seq_len = 64;
  return h;
}

Model make_model(const Header& h, std::uint32_t seed) {
  llama2_test::TempFile f("kvevict_batch");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, seed));
  return Model::load(f.path);
}

std::vector<int> tokens_from(std::uint32_t seed, std::size_t n, int vocab) {
  std::vector<int> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<int>((seed * 2654435761u + i * 40503u) % 997u) % vocab);
  return t;
}

constexpr std::size_t kPrompt = 20, kSteps = 12;

EvictionSettings settings(const std::string& policy) {
  EvictionSettings s;
  s.policy = policy;
  s.budget = kvevict::Budget::tokens(12);
  const bool no_recent = policy == "tova" || policy == "streaming" || policy == "window";
  s.recent = no_recent ? kvevict::RecentWindow::tokens(0) : kvevict::RecentWindow::ratio(0.3);
  s.params.horizon = kSteps;
  s.params.snap_window = 8;
  s.seed = 7;
  return s;
}

// The engines of the batch: every policy, a shared-heads and a paged (token and page unit) one.
std::vector<std::unique_ptr<Engine>> make_engines(const Model& m) {
  std::vector<std::unique_ptr<Engine>> out;
  for (const char* p : {"keyformer", "h2o", "tova", "snapkv", "streaming", "window"})
    out.push_back(llama2::make_engine(m, settings(p)));
  EvictionSettings shared = settings("keyformer");
  shared.shared_heads = true;
  out.push_back(llama2::make_engine(m, shared));
  EvictionSettings paged = settings("h2o");
  paged.kv_layout = llama2::KvLayout::paged;
  paged.page_size = 4;
  out.push_back(llama2::make_engine(m, paged));
  paged.policy = "keyformer";
  paged.evict_unit = kvevict::EvictUnit::page;
  out.push_back(llama2::make_engine(m, paged));
  out.push_back(std::make_unique<Engine>(m));  // a full cache
  return out;
}

// What an engine holds: per block and KV head, its slots' positions (paged: the retained count).
std::vector<std::vector<std::int64_t>> held(const Engine& e) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t l = 0; l < e.config().n_layers; ++l)
    for (std::size_t h = 0; h < e.config().n_kv_heads; ++h) {
      if (e.paged()) {
        out.push_back({static_cast<std::int64_t>(e.retained(l, h))});
        continue;
      }
      const auto pos = e.view(l).head_positions(h);
      out.emplace_back(pos, pos + e.retained(l, h));
    }
  return out;
}

std::vector<float> row(const float* p, std::size_t n) {
  std::vector<float> v(n);
  std::copy_n(p, n, v.data());
  return v;
}

TEST(Llama2Batch, EveryEngineOfABatchGetsBitForBitItsOwnPrefillAndSteps) {
  const Model m = make_model(batch_header(), 91);
  const std::size_t vocab = m.config().vocab_size;
  const std::vector<int> prompt = tokens_from(3, kPrompt, static_cast<int>(vocab));
  const std::vector<int> next = tokens_from(5, kSteps, static_cast<int>(vocab));

  // Each engine alone: prefill logits, then each step's logits, what it holds and its hook calls.
  std::vector<std::unique_ptr<Engine>> alone = make_engines(m);
  std::vector<std::string> alone_calls;
  alone[1]->set_hooks(std::make_unique<llama2_test::HookLog>(alone_calls, 1));
  std::vector<std::vector<std::vector<float>>> want(alone.size());
  std::vector<std::vector<std::vector<std::int64_t>>> want_held(alone.size());
  std::vector<std::vector<float>> want_prefill;
  for (std::size_t e = 0; e < alone.size(); ++e) {
    const llama2::RowMatrix& pl = alone[e]->prefill(prompt);
    want_prefill.push_back(row(pl.data(), static_cast<std::size_t>(pl.size())));
    for (int t : next) want[e].push_back(row(alone[e]->step(t), vocab));
    want_held[e] = held(*alone[e]);
  }

  // The same engines in one batch, led by a full cache; the lead steps too.
  std::vector<std::unique_ptr<Engine>> batch = make_engines(m);
  std::vector<std::string> batch_calls;
  batch[1]->set_hooks(std::make_unique<llama2_test::HookLog>(batch_calls, 1));
  Engine lead(m);
  std::vector<Engine*> followers;
  for (auto& e : batch) followers.push_back(e.get());
  const llama2::RowMatrix& lp = Engine::prefill_batch(lead, followers, prompt);
  EXPECT_EQ(row(lp.data(), static_cast<std::size_t>(lp.size())), want_prefill.back());  // the full cache's
  std::vector<Engine*> all = followers;
  all.push_back(&lead);
  for (std::size_t i = 0; i < kSteps; ++i) {
    Engine::step_batch(all, std::vector<int>(all.size(), next[i]));
    for (std::size_t e = 0; e < batch.size(); ++e) {
      ASSERT_EQ(batch[e]->position(), kPrompt + i + 1);
      ASSERT_EQ(row(batch[e]->logits(), vocab), want[e][i]) << "engine " << e << " step " << i;
    }
    ASSERT_EQ(row(lead.logits(), vocab), want.back()[i]) << "the lead, step " << i;
  }
  for (std::size_t e = 0; e < batch.size(); ++e) EXPECT_EQ(held(*batch[e]), want_held[e]) << "engine " << e;
  EXPECT_EQ(batch_calls, alone_calls);
  EXPECT_FALSE(batch_calls.empty());
}

TEST(Llama2Batch, StepBatchTakesEachEnginesOwnTokenAndASubsetOfEngines) {
  const Model m = make_model(batch_header(), 92);
  const std::size_t vocab = m.config().vocab_size;
  Engine a(m), b(m), c(m), ref_a(m), ref_b(m);
  const std::vector<int> prompt = tokens_from(8, 6, static_cast<int>(vocab));
  Engine::prefill_batch(a, {&b, &c}, prompt);
  ref_a.prefill(prompt);
  ref_b.prefill(prompt);
  Engine::step_batch({&a, &b}, {11, 17});  // c stays where it is
  EXPECT_EQ(row(a.logits(), vocab), row(ref_a.step(11), vocab));
  EXPECT_EQ(row(b.logits(), vocab), row(ref_b.step(17), vocab));
  EXPECT_EQ(c.position(), 6u);
  const std::vector<Engine*> none;
  const std::vector<int> no_tokens;
  Engine::step_batch(none, no_tokens);  // an empty batch does nothing
  EXPECT_EQ(a.position(), 7u);
}

TEST(Llama2Batch, AContextBelowTheModelsSeqLenSizesTheEngineAndBoundsItsPositions) {
  const Model m = make_model(batch_header(), 93);
  const std::size_t vocab = m.config().vocab_size;
  Engine small(m, {}, 0, 24), big(m);
  EXPECT_EQ(small.context(), 24u);
  EXPECT_EQ(small.config().seq_len, 24u);
  EXPECT_EQ(big.context(), 64u);
  EXPECT_EQ(small.config().dim, m.config().dim);
  const std::vector<int> prompt = tokens_from(9, 20, static_cast<int>(vocab));
  small.prefill(prompt);
  big.prefill(prompt);
  for (int t : {1, 2, 3, 4}) EXPECT_EQ(row(small.step(t), vocab), row(big.step(t), vocab));
  try {
    small.step(5);
    FAIL() << "a step past the context";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "llama2::Engine::step: the context is full (position 24 = context)");
  }
  small.reset();
  try {
    small.prefill(tokens_from(9, 25, static_cast<int>(vocab)));
    FAIL() << "a prompt longer than the context";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "llama2::Engine::prefill: prompt length must be in [1, context = 24] (got 25)");
  }
  try {
    Engine too_big(m, {}, 0, 65);
    FAIL() << "a context above seq_len";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "llama2::Engine: context must be at most the model's seq_len = 64 (got 65)");
  }
  EvictionSettings s = settings("h2o");
  s.context = 65;
  EXPECT_THROW(llama2::make_engine(m, s), std::invalid_argument);
  s.context = 30;
  EXPECT_EQ(llama2::make_engine(m, s)->context(), 30u);
  s.kv_layout = llama2::KvLayout::paged;
  EXPECT_EQ(llama2::make_engine(m, s)->context(), 30u);
}

// `what()` of the invalid_argument `f` throws ("" if it throws none or another type).
template <class F>
std::string invalid_argument_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    return "another exception";
  }
  return "";
}

TEST(Llama2Batch, ABadBatchIsRefusedNamingTheEngineAndChangesNoEngine) {
  const Model m = make_model(batch_header(), 94), other = make_model(batch_header(), 95);
  const std::vector<int> prompt = tokens_from(4, 8, 200);
  Engine lead(m), f1(m), f2(m), stranger(other), chunked(m, {}, 4), short_ctx(m, {}, 0, 6), started(m);
  started.step(1);
  const std::string pb = "llama2::Engine::prefill_batch: ";
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&f1, nullptr}, prompt); }),
            pb + "followers[1] is null");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&f1, &lead}, prompt); }),
            pb + "followers[1] is the lead");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&f1, &f2, &f1}, prompt); }),
            pb + "followers[2] is followers[0] again");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&stranger}, prompt); }),
            pb + "followers[0] runs another Model object than the lead");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&chunked}, prompt); }),
            pb + "followers[0] prefills in chunks of 4 (only a one-shot prefill can be shared)");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(chunked, {&f1}, prompt); }),
            pb + "the lead prefills in chunks of 4 (only a one-shot prefill can be shared)");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&started}, prompt); }),
            pb + "followers[0] is at position 1, not 0");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&short_ctx}, prompt); }),
            pb + "followers[0]'s context 6 is shorter than the prompt (8 tokens)");
  EXPECT_EQ(invalid_argument_of([&] { Engine::prefill_batch(lead, {&f1}, {1, 200}); }),
            pb + "token id 200 is outside the vocabulary [0, 200)");
  EXPECT_THROW(Engine::prefill_batch(started, {&f1}, prompt), std::logic_error);
  for (const Engine* e : {&lead, &f1, &f2}) EXPECT_EQ(e->position(), 0u);

  Engine::prefill_batch(lead, {&f1, &f2}, prompt);
  const std::string sb = "llama2::Engine::step_batch: ";
  EXPECT_EQ(invalid_argument_of([&] { Engine::step_batch({&lead, &f1}, {1}); }), sb + "2 engines but 1 tokens");
  EXPECT_EQ(invalid_argument_of([&] { Engine::step_batch({&lead, nullptr}, {1, 2}); }), sb + "engines[1] is null");
  EXPECT_EQ(invalid_argument_of([&] { Engine::step_batch({&lead, &f1, &lead}, {1, 2, 3}); }),
            sb + "engines[2] is engines[0] again");
  EXPECT_EQ(invalid_argument_of([&] { Engine::step_batch({&lead, &stranger}, {1, 2}); }),
            sb + "engines[1] runs another Model object than engines[0]");
  EXPECT_EQ(invalid_argument_of([&] { Engine::step_batch({&lead, &f1}, {1, -1}); }),
            "llama2::Engine::step_batch: token id -1 is outside the vocabulary [0, 200)");
  Engine full_ctx(m, {}, 0, 8);
  full_ctx.prefill(prompt);
  try {
    Engine::step_batch({&lead, &full_ctx}, {1, 2});
    FAIL() << "an engine at its context";
  } catch (const std::length_error& e) {
    EXPECT_STREQ(e.what(), "llama2::Engine::step_batch: engines[1]'s context is full (position 8 = context)");
  }
  for (const Engine* e : {&lead, &f1, &f2}) EXPECT_EQ(e->position(), 8u);
}

// A real cache whose prefill throws.
class ThrowingPrefill final : public kvevict::CacheInterface {
 public:
  explicit ThrowingPrefill(std::unique_ptr<kvevict::CacheInterface> inner) : inner_(std::move(inner)) {}
  void prefill(const float*, std::size_t, const float*) override { throw std::runtime_error("prefill refused"); }
  void decode_step(const float* logits, std::size_t n, const float* gumbel) override {
    inner_->decode_step(logits, n, gumbel);
  }
  void reset(std::uint64_t seed) override { inner_->reset(seed); }
  std::size_t budget() const override { return inner_->budget(); }
  std::size_t recent_window() const override { return inner_->recent_window(); }
  std::size_t step() const override { return inner_->step(); }
  float temperature() const override { return inner_->temperature(); }
  std::size_t length(std::size_t h) const override { return inner_->length(h); }
  const float* scores(std::size_t h) const override { return inner_->scores(h); }
  const std::int64_t* positions(std::size_t h) const override { return inner_->positions(h); }
  std::vector<std::int64_t> retained_positions(std::size_t h) const override {
    return inner_->retained_positions(h);
  }
  void restore_position_order() override { inner_->restore_position_order(); }

 private:
  std::unique_ptr<kvevict::CacheInterface> inner_;
};

TEST(Llama2Batch, AFollowerCacheThatThrowsInThePrefillResetsTheWholeBatch) {
  const Model m = make_model(batch_header(), 96);
  llama2::CacheFactory h2o = llama2::make_cache_factory(settings("h2o"), m.config().n_heads, m.config().n_layers);
  Engine bad(m, [h2o](std::size_t layer, const kvevict::KVView<float>& view) -> std::unique_ptr<kvevict::CacheInterface> {
    return std::make_unique<ThrowingPrefill>(h2o(layer, view));
  });
  Engine good(m, h2o), lead(m);
  const std::vector<int> prompt = tokens_from(4, 8, 200);
  try {
    Engine::prefill_batch(lead, {&good, &bad}, prompt);
    FAIL() << "the follower's cache threw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "prefill refused");
  }
  for (const Engine* e : {&lead, &good, &bad}) EXPECT_EQ(e->position(), 0u);
  for (std::size_t l = 0; l < m.config().n_layers; ++l) EXPECT_EQ(good.retained(l), 0u);
  Engine::prefill_batch(lead, {&good}, prompt);  // and the batch can run again
  EXPECT_EQ(good.position(), 8u);
}

/// Throws from block 1's after_cache hook at decode step `fail_at` (counted from 0), else does nothing.
class ThrowAtStep final : public llama2::EngineHooks {
 public:
  explicit ThrowAtStep(int fail_at) : fail_at_(fail_at) {}
  void after_cache(Engine&, std::size_t layer, kvevict::CacheInterface&, bool prompt) override {
    if (prompt || layer != 1) return;
    if (step_++ == fail_at_) throw std::runtime_error("hook failed at block 1");
  }

 private:
  int fail_at_, step_ = 0;
};

// Issue 37: a hook that threw inside step_batch left every engine of the batch mid-step (block 0 had the
// new token, block 1 not): a retry failed ("new token's position 6 must be larger than the last one,
// 6") until reset(). Now the failing engine is reset and the others complete the step: their steps after
// the failed one are bit for bit those of engines that never saw a failure.
TEST(Llama2Batch, AHookThatThrowsResetsItsEngineAndTheOthersCompleteTheStep) {
  const Model m = make_model(batch_header(), 93);
  const std::size_t vocab = m.config().vocab_size;
  const std::vector<int> prompt = tokens_from(4, 10, static_cast<int>(vocab)), next = tokens_from(6, 6, 200);
  std::vector<std::unique_ptr<Engine>> run, ref;
  for (const char* p : {"h2o", "keyformer", "snapkv"}) {
    run.push_back(llama2::make_engine(m, settings(p)));
    ref.push_back(llama2::make_engine(m, settings(p)));
  }
  run[1]->set_hooks(std::make_unique<ThrowAtStep>(2));
  for (std::size_t e = 0; e < run.size(); ++e) {
    run[e]->prefill(prompt);
    ref[e]->prefill(prompt);
  }
  const std::vector<Engine*> batch = {run[0].get(), run[1].get(), run[2].get()};
  for (std::size_t i = 0; i < next.size(); ++i) {
    const std::vector<int> tokens(3, next[i]);
    if (i == 2) {
      try {
        Engine::step_batch(batch, tokens);
        FAIL() << "the hook did not throw";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "hook failed at block 1");
      }
      EXPECT_EQ(run[1]->position(), 0u);  // reset: empty caches
      EXPECT_EQ(run[1]->retained(0), 0u);
      run[1]->prefill(prompt);  // usable again at once
      for (std::size_t j = 0; j <= i; ++j) run[1]->step(next[j]);
      ref[1]->step(next[i]);
    } else {
      Engine::step_batch(batch, tokens);
      ref[1]->step(next[i]);
    }
    for (std::size_t e : {0u, 2u}) {
      ASSERT_EQ(run[e]->position(), prompt.size() + i + 1);
      ASSERT_EQ(row(run[e]->logits(), vocab), row(ref[e]->step(next[i]), vocab)) << "engine " << e << " step " << i;
      ASSERT_EQ(held(*run[e]), held(*ref[e])) << "engine " << e << " step " << i;
    }
    ASSERT_EQ(row(run[1]->logits(), vocab), row(ref[1]->logits(), vocab)) << "step " << i;
  }
}

}  // namespace
