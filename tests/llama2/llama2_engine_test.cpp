// tests/llama2/llama2_engine_test.cpp — the engine on small synthetic checkpoints: the prefill and
// decode paths agree, the tied and untied classifiers agree, a policy whose budget is never reached
// changes nothing, and an evicting policy keeps every layer at its budget.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "test_support.hpp"

namespace {

using llama2::Engine;
using llama2::Model;
using llama2_test::Header;

Model make_model(const Header& h, std::uint32_t seed) {
  llama2_test::TempFile f("kvevict_engine");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, seed));
  return Model::load(f.path);
}

const std::vector<int> kTokens = {1, 5, 17, 3, 30, 8, 8, 21, 2, 11, 19, 4, 27, 6, 13, 9};

// Logits of every position of kTokens through step() only.
std::vector<std::vector<float>> step_logits(Engine& engine, const std::vector<int>& tokens) {
  std::vector<std::vector<float>> out;
  for (int t : tokens) {
    const float* l = engine.step(t);
    out.emplace_back(l, l + engine.config().vocab_size);
  }
  return out;
}

void expect_prefill_matches_steps(const Header& h) {
  const Model m = make_model(h, 21);
  Engine a(m), b(m);
  const llama2::RowMatrix& pre = a.prefill(kTokens);
  const auto steps = step_logits(b, kTokens);
  ASSERT_EQ(pre.rows(), static_cast<Eigen::Index>(kTokens.size()));
  for (std::size_t t = 0; t < kTokens.size(); ++t)
    for (std::size_t v = 0; v < m.config().vocab_size; ++v)
      ASSERT_NEAR(pre(static_cast<Eigen::Index>(t), static_cast<Eigen::Index>(v)), steps[t][v], 1e-4f)
          << "position " << t << " token " << v;
  EXPECT_EQ(a.position(), kTokens.size());
  EXPECT_EQ(a.retained(0), kTokens.size());
  EXPECT_EQ(a.kv_bytes_held(), a.kv_bytes_full());
}

TEST(Llama2Engine, PrefillMatchesTokenByTokenWithGQA) { expect_prefill_matches_steps(Header{}); }

TEST(Llama2Engine, PrefillMatchesTokenByTokenWithMHA) {
  Header h;
  h.n_kv_heads = h.n_heads;
  expect_prefill_matches_steps(h);
}

TEST(Llama2Engine, UntiedClassifierEqualToTheEmbeddingGivesTheTiedLogits) {
  const Header tied;
  Header untied = tied;
  untied.vocab_size = -tied.vocab_size;
  auto w = llama2_test::random_weights(tied, 5);
  auto w_untied = w;
  w_untied.insert(w_untied.end(), w.begin(), w.begin() + tied.vocab_size * tied.dim);  // classifier = embedding
  llama2_test::TempFile f1("kvevict_tied"), f2("kvevict_untied");
  llama2_test::write_checkpoint(f1.path, tied, w);
  llama2_test::write_checkpoint(f2.path, untied, w_untied);
  const Model m1 = Model::load(f1.path), m2 = Model::load(f2.path);
  Engine e1(m1), e2(m2);
  const auto a = step_logits(e1, kTokens), b = step_logits(e2, kTokens);
  EXPECT_EQ(a, b);
}

llama2::EvictionSettings settings(const char* policy, kvevict::Budget budget) {
  llama2::EvictionSettings s;
  s.policy = policy;
  s.budget = budget;
  const bool windowed = std::string(policy) != "full" && kvevict::takes_recent_window(kvevict::parse_policy(policy));
  s.recent = kvevict::RecentWindow::ratio(windowed ? 0.3 : 0.0);
  s.params.horizon = 16;
  s.params.snap_window = 2;  // SnapKV: L <= k for the budgets below
  s.params.snap_kernel = 3;
  s.seed = 3;
  return s;
}

TEST(Llama2Engine, PolicyWhoseBudgetIsNeverReachedChangesNothing) {
  const Model m = make_model(Header{}, 22);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 6), rest(kTokens.begin() + 6, kTokens.end());
  Engine full(m);
  const llama2::RowMatrix expected_prefill = full.prefill(prompt);
  const auto expected = step_logits(full, rest);
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova", "snapkv"}) {
    Engine e(m, llama2::make_cache_factory(settings(policy, kvevict::Budget::tokens(40)), m.config().n_heads));
    EXPECT_EQ(e.prefill(prompt), expected_prefill) << policy;
    EXPECT_EQ(step_logits(e, rest), expected) << policy;
    EXPECT_EQ(e.retained(1), kTokens.size()) << policy;
  }
}

// set_threads runs the step's attention heads and every cache's scoring on a pool;
// prefill logits, step logits and kept positions are bit-identical for 1, 2, 3 and 7 threads,
// also after reset (the rebuilt caches get the pool too) and for the paged layout.
TEST(Llama2Engine, ThreadsGiveBitIdenticalResults) {
  const Model m = make_model(Header{}, 27);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 9), rest(kTokens.begin() + 9, kTokens.end());
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova"}) {
    for (bool paged : {false, true}) {
      auto s = settings(policy, kvevict::Budget::ratio(0.5));
      s.shared_heads = paged;
      s.kv_layout = paged ? llama2::KvLayout::paged : llama2::KvLayout::contiguous;
      auto run = [&](std::size_t threads) {
        auto e = llama2::make_engine(m, s);
        e->set_threads(threads);
        EXPECT_EQ(e->threads(), threads);
        e->prefill(prompt);
        e->reset();  // the rebuilt caches keep the pool
        const llama2::RowMatrix pre = e->prefill(prompt);
        std::vector<std::vector<float>> out{std::vector<float>(pre.data(), pre.data() + pre.size())};
        for (const auto& l : step_logits(*e, rest)) out.push_back(l);
        for (std::size_t l = 0; l < m.config().n_layers; ++l) {
          const auto kept = e->cache(l)->retained_positions(0);
          out.emplace_back(kept.begin(), kept.end());
        }
        return out;
      };
      const auto serial = run(1);
      for (std::size_t threads : {2, 3, 7}) EXPECT_EQ(run(threads), serial) << policy << " paged " << paged << " threads " << threads;
    }
  }
  Engine e(m);
  EXPECT_THROW(e.set_threads(0), std::invalid_argument);
}

TEST(Llama2Engine, EvictingPolicyKeepsEveryLayerAtItsBudget) {
  const Model m = make_model(Header{}, 23);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 10), rest(kTokens.begin() + 10, kTokens.end());
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova", "snapkv"}) {
    Engine e(m, llama2::make_cache_factory(settings(policy, kvevict::Budget::ratio(0.5)), m.config().n_heads));
    Engine full(m);
    full.prefill(prompt);
    e.prefill(prompt);
    for (std::size_t l = 0; l < m.config().n_layers; ++l)
      for (std::size_t h = 0; h < m.config().n_kv_heads; ++h) ASSERT_EQ(e.retained(l, h), 5u) << policy;
    for (int t : rest) {
      const float* logits = e.step(t);
      full.step(t);
      for (std::size_t v = 0; v < m.config().vocab_size; ++v) ASSERT_TRUE(std::isfinite(logits[v])) << policy;
      for (std::size_t l = 0; l < m.config().n_layers; ++l) {
        ASSERT_EQ(e.retained(l), 5u) << policy;
        // Every policy but TOVA (no recent window) keeps the token just appended.
        if (std::string(policy) == "tova") continue;
        const auto& view = e.view(l);
        bool has_newest = false;
        for (std::size_t s = 0; s < view.length(0); ++s)
          has_newest |= view.head_positions(0)[s] == static_cast<std::int64_t>(e.position() - 1);
        EXPECT_TRUE(has_newest) << policy << " layer " << l;
      }
    }
    EXPECT_EQ(e.kv_bytes_held(), m.config().n_layers * 5 * 2 * m.config().kv_dim() * sizeof(float)) << policy;
    EXPECT_EQ(e.kv_bytes_full(), full.kv_bytes_held()) << policy;
  }
}

// Head-adaptive budgets (AdaKV, kvevict::HeadBudgets::adaptive): each layer's KV heads share its k x 2 tokens,
// so they hold different counts whose total is exact after the prefill and every step; the attention reads each
// head over its own length (finite logits; 1 and 3 threads bit-identical); alpha = 1 (the floor is the whole key
// budget) is the uniform split and gives the uniform engine's logits bit for bit; the paged layout refuses it.
TEST(Llama2Engine, HeadAdaptiveBudgetsShareEachLayersTotal) {
  const Model m = make_model(Header{}, 23);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 10), rest(kTokens.begin() + 10, kTokens.end());
  const std::size_t H = m.config().n_kv_heads;
  bool ragged = false;
  for (const char* policy : {"keyformer", "h2o", "snapkv", "tova"}) {
    auto run = [&](float alpha, bool adaptive, std::size_t threads) {
      auto s = settings(policy, kvevict::Budget::ratio(0.5));
      if (adaptive) s.head_budgets = kvevict::HeadBudgets::adaptive(alpha);
      auto e = llama2::make_engine(m, s);
      e->set_threads(threads);
      const llama2::RowMatrix pre = e->prefill(prompt);
      std::vector<std::vector<float>> out{std::vector<float>(pre.data(), pre.data() + pre.size())};
      auto check_layers = [&] {
        for (std::size_t l = 0; l < m.config().n_layers; ++l) {
          std::size_t sum = 0;
          for (std::size_t j = 0; j < H; ++j) {
            sum += e->retained(l, j);
            ragged = ragged || e->retained(l, j) != e->retained(l, 0);
            const auto kept = e->cache(l)->retained_positions(j);
            out.emplace_back(kept.begin(), kept.end());
          }
          EXPECT_EQ(sum, 5u * H) << policy << " layer " << l;
        }
      };
      check_layers();
      for (int t : rest) {
        const float* logits = e->step(t);
        out.emplace_back(logits, logits + m.config().vocab_size);
        for (std::size_t v = 0; v < m.config().vocab_size; ++v) EXPECT_TRUE(std::isfinite(logits[v])) << policy;
        check_layers();
      }
      return out;
    };
    const auto serial = run(0.0f, true, 1);
    EXPECT_EQ(run(0.0f, true, 3), serial) << policy;
    EXPECT_EQ(run(1.0f, true, 1), run(0.0f, false, 1)) << policy << ": alpha = 1 is the uniform split";
  }
  EXPECT_TRUE(ragged) << "some layer's KV heads hold different counts";
  auto s = settings("h2o", kvevict::Budget::ratio(0.5));
  s.head_budgets = kvevict::HeadBudgets::adaptive(0.2f);
  s.kv_layout = llama2::KvLayout::paged;
  s.shared_heads = true;
  try {
    (void)llama2::make_engine(m, s);
    ADD_FAILURE() << "the paged layout took head-adaptive budgets";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_budgets = adaptive needs kv_layout = contiguous"), std::string::npos)
        << e.what();
  }
}

TEST(Llama2Engine, RejectsMisuse) {
  const Model m = make_model(Header{}, 24);
  Engine e(m);
  EXPECT_THROW(e.prefill({}), std::invalid_argument);
  EXPECT_THROW(e.prefill({1, 32}), std::invalid_argument);  // vocab is 32
  EXPECT_THROW(e.step(-1), std::invalid_argument);
  e.prefill({1, 2});
  EXPECT_THROW(e.prefill({1, 2}), std::logic_error);
  e.reset();
  EXPECT_EQ(e.position(), 0u);
  EXPECT_EQ(e.retained(0), 0u);
  for (int i = 0; i < 48; ++i) e.step(i % 32);
  EXPECT_THROW(e.step(1), std::length_error);  // seq_len is 48
}

TEST(Llama2Engine, BudgetRejectedAtPrefillLeavesTheEngineReset) {
  const Model m = make_model(Header{}, 25);
  auto s = settings("keyformer", kvevict::Budget::ratio(0.5));
  s.recent = kvevict::RecentWindow::tokens(3);
  Engine e(m, llama2::make_cache_factory(s, m.config().n_heads));
  EXPECT_THROW(e.prefill({1, 2}), std::invalid_argument);  // k = 1 < w = 3
  EXPECT_EQ(e.position(), 0u);
  EXPECT_EQ(e.retained(0), 0u);
  e.prefill({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(e.retained(0), 4u);
}

TEST(Llama2Engine, RatioBudgetOnAOneTokenPromptKeepsOneToken) {
  const Model m = make_model(Header{}, 25);
  Engine e(m, llama2::make_cache_factory(settings("keyformer", kvevict::Budget::ratio(0.5)), m.config().n_heads));
  e.prefill({1});  // max(1, floor(0.5 * 1)) = 1
  EXPECT_EQ(e.retained(0), 1u);
  e.step(2);
  EXPECT_EQ(e.retained(0), 1u);
}

// Per-layer budgets: PyramidKV over 5 layers, k = 6, a 10-token prompt: b_min = 6 / 20 = 0.3,
// b_max = 11.7 > 10 = P, so b_max = 10 and b_min = 12 - 10 = 2: [10, 8, 6, 4, 2] (total 30 = 5 x 6).
// Every layer holds exactly its budget after the prompt and after every decode step, with h2o and with
// snapkv (L = 2 kept in every layer: 2 + [7.8, 5.9, 4, 2.1, 0.2] rounds to the same budgets), with
// both of SnapKV's decode rules.
TEST(Llama2Engine, PyramidBudgetsPerLayerWithH2OAndSnapKV) {
  Header h;
  h.n_layers = 5;
  const Model m = make_model(h, 27);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 10), rest(kTokens.begin() + 10, kTokens.end());
  const std::vector<std::size_t> expected{10, 8, 6, 4, 2};
  for (const char* policy : {"h2o", "snapkv", "snapkv-window"}) {
    const bool snap_window = std::string(policy) == "snapkv-window";
    auto s = settings(snap_window ? "snapkv" : policy, kvevict::Budget::tokens(6));
    s.params.snap_decode = snap_window ? kvevict::SnapDecode::window : kvevict::SnapDecode::h2o;
    s.layer_budgets = kvevict::LayerBudgets::make_pyramid(20.0, std::string(policy) == "h2o" ? 0 : 2);
    s.prompt_len = prompt.size();
    EXPECT_EQ(llama2::layer_budget_tokens(s, 5), expected) << policy;
    const auto engine = llama2::make_engine(m, s);
    engine->prefill(prompt);
    for (std::size_t l = 0; l < 5; ++l)
      for (std::size_t kv = 0; kv < m.config().n_kv_heads; ++kv)
        ASSERT_EQ(engine->retained(l, kv), expected[l]) << policy << " layer " << l;
    for (int t : rest) {
      const float* logits = engine->step(t);
      for (std::size_t v = 0; v < m.config().vocab_size; ++v) ASSERT_TRUE(std::isfinite(logits[v])) << policy;
      for (std::size_t l = 0; l < 5; ++l) ASSERT_EQ(engine->retained(l), expected[l]) << policy << " layer " << l;
    }
    EXPECT_EQ(engine->kv_bytes_held(), 30 * 2 * m.config().kv_dim() * sizeof(float)) << policy;
  }
}

TEST(Llama2Engine, PerLayerBudgetsAreRejectedWhereTheyCannotApply) {
  auto s = settings("h2o", kvevict::Budget::ratio(0.5));
  s.layer_budgets = kvevict::LayerBudgets::make_pyramid();
  EXPECT_THROW(llama2::make_cache_factory(s, 4, 2), std::invalid_argument);  // a ratio budget
  s.budget = kvevict::Budget::tokens(6);
  EXPECT_THROW(llama2::make_cache_factory(s, 4), std::invalid_argument);      // number of layers unknown
  EXPECT_NO_THROW(llama2::make_cache_factory(s, 4, 2));
  s.layer_budgets = kvevict::LayerBudgets::make_weights({1, 2, 3});
  EXPECT_THROW(llama2::make_cache_factory(s, 4, 2), std::invalid_argument);   // 3 weights for 2 layers
  auto snap = settings("snapkv", kvevict::Budget::tokens(6));
  snap.prefill_chunk = 4;
  EXPECT_THROW(llama2::make_cache_factory(snap, 4, 2), std::invalid_argument);  // one-shot prefill only
}

// Chunked prefill: same prefill logits, same kept tokens, same decode logits as the
// one-shot prefill, for every policy and chunk size (Keyformer with its drawn noise: ζ is a pure
// function of (seed, query head, prompt row, slot)).
TEST(Llama2Engine, ChunkedPrefillEqualsOneShotForEveryPolicyAndChunkSize) {
  const Model m = make_model(Header{}, 26);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 13), rest(kTokens.begin() + 13, kTokens.end());
  for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    auto s = settings(policy, kvevict::Budget::ratio(0.5));
    s.params.sinks = 2;
    Engine one(m, llama2::make_cache_factory(s, m.config().n_heads));
    const llama2::RowMatrix expected_prefill = one.prefill(prompt);
    // Kept positions after the prompt, [layer][kv_head] (the view's, ascending).
    auto kept = [&](const Engine& e) {
      std::vector<std::vector<std::int64_t>> out;
      for (std::size_t l = 0; l < m.config().n_layers; ++l)
        for (std::size_t h = 0; h < m.config().n_kv_heads; ++h) {
          const auto* pos = e.view(l).head_positions(h);
          out.emplace_back(pos, pos + e.retained(l, h));
          std::sort(out.back().begin(), out.back().end());
        }
      return out;
    };
    const auto expected_kept = kept(one);
    const auto expected = step_logits(one, rest);
    for (std::size_t C : {1, 4, 13, 64}) {
      s.prefill_chunk = C;
      Engine e(m, llama2::make_cache_factory(s, m.config().n_heads), C);
      EXPECT_EQ(e.prefill(prompt), expected_prefill) << policy << " C=" << C;
      EXPECT_EQ(kept(e), expected_kept) << policy << " C=" << C;
      EXPECT_EQ(step_logits(e, rest), expected) << policy << " C=" << C;
    }
  }
}

// PrefillLogits::last (what kvevict-generate uses): prefill returns [1][vocab], the last row of the
// full [P][vocab] within rounding (a one-row product is Eigen's matrix-vector kernel, which sums in
// another order: a few ulp), one-shot and chunked; the caches and the next steps are bit for bit unchanged.
TEST(Llama2Engine, PrefillOfTheLastRowOnlyIsTheLastRowOfTheFullPrefill) {
  const Model m = make_model(Header{}, 27);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 13), rest(kTokens.begin() + 13, kTokens.end());
  auto s = settings("keyformer", kvevict::Budget::ratio(0.5));
  Engine all(m, llama2::make_cache_factory(s, m.config().n_heads));
  const llama2::RowMatrix full = all.prefill(prompt);
  const auto expected = step_logits(all, rest);
  for (std::size_t C : {0, 4}) {
    s.prefill_chunk = C;
    Engine last(m, llama2::make_cache_factory(s, m.config().n_heads), C);
    last.set_prefill_logits(llama2::PrefillLogits::last);
    const llama2::RowMatrix& one = last.prefill(prompt);
    ASSERT_EQ(one.rows(), 1) << "C=" << C;
    for (Eigen::Index v = 0; v < full.cols(); ++v)
      ASSERT_NEAR(one(0, v), full(full.rows() - 1, v), 1e-6f) << "C=" << C << " token " << v;
    EXPECT_EQ(step_logits(last, rest), expected) << "C=" << C;
  }
}

// Bounded prefill: every layer ends the prompt at its budget, and a prompt that fits the
// budget gives the one-shot logits exactly.
TEST(Llama2Engine, BoundedPrefillKeepsTheBudgetAndEqualsOneShotWhenThePromptFits) {
  const Model m = make_model(Header{}, 27);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 14);
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova"}) {
    auto s = settings(policy, kvevict::Budget::tokens(6));
    s.params.sinks = 2;
    s.prefill_chunk = 4;
    s.bounded_prefill = true;
    Engine e(m, llama2::make_cache_factory(s, m.config().n_heads), 4);
    e.prefill(prompt);
    for (std::size_t l = 0; l < m.config().n_layers; ++l)
      for (std::size_t h = 0; h < m.config().n_kv_heads; ++h) EXPECT_EQ(e.retained(l, h), 6u) << policy;
    for (int t : {3, 4, 5}) EXPECT_TRUE(std::isfinite(e.step(t)[0])) << policy;
    EXPECT_EQ(e.retained(1), 6u) << policy;

    s.budget = kvevict::Budget::tokens(20);  // the prompt fits: nothing is cut
    Engine bounded(m, llama2::make_cache_factory(s, m.config().n_heads), 4);
    s.prefill_chunk = 0;
    s.bounded_prefill = false;
    Engine one(m, llama2::make_cache_factory(s, m.config().n_heads));
    EXPECT_EQ(bounded.prefill(prompt), one.prefill(prompt)) << policy;
  }
}

TEST(Llama2Engine, BoundedPrefillNeedsAChunkAndAnEvictingPolicy) {
  auto s = settings("h2o", kvevict::Budget::tokens(6));
  s.bounded_prefill = true;
  EXPECT_THROW(llama2::make_cache_factory(s, 4), std::invalid_argument);
  s.prefill_chunk = 4;
  s.policy = "full";
  EXPECT_THROW(llama2::make_cache_factory(s, 4), std::invalid_argument);
}

TEST(Llama2Engine, UnknownPolicyIsRejected) {
  llama2::EvictionSettings s;
  s.policy = "lru";
  EXPECT_THROW(llama2::make_cache_factory(s, 4), std::invalid_argument);
}

}  // namespace
