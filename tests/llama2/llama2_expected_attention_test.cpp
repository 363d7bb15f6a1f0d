// llama2_expected_attention_test — Engine::set_expected_attention: block 0's kept positions after the prefill and
// after every decode step equal an independent replay of Expected Attention's selection; errors; prefill_batch.
// SPDX-License-Identifier: Apache-2.0
//
// Block 0's pre-RoPE queries depend on the token alone (q = Wq · rmsnorm(embedding)), and its keys and values on
// the token and its position, so the test rebuilds them from the weights and a full-cache engine, and replays the
// selection with the library's `expected_attention_scores` one KV head at a time: prefill keeps the top k of the
// prompt by score (sinks always), each decode step the held tokens plus the new one minus the lowest score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/attention/rope.hpp"
#include "kvevict/kv/kv_buffer.hpp"
#include "kvevict/score/expected_attention.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "test_support.hpp"

namespace {

using llama2::Engine;
using llama2::Model;
using llama2_test::Header;

// Weights uniform in ±0.3 · `scale`: at 3 the logits spread over several nats, so the position and the statistics
// the scores are computed at matter (at 1 the expected attention is close to uniform).
Model make_model(const Header& h, std::uint32_t seed, float scale = 3.0f) {
  llama2_test::TempFile f("kvevict_ea_engine");
  std::vector<float> w = llama2_test::random_weights(h, seed);
  for (float& x : w) x *= scale;
  llama2_test::write_checkpoint(f.path, h, w);
  return Model::load(f.path);
}

const std::vector<int> kTokens = {1, 5, 17, 3, 30, 8, 8, 21, 2, 11, 19, 4, 27, 6, 13, 9, 22, 7, 14, 25};
constexpr std::size_t kPrompt = 12;

kvevict::ExpectedAttentionOptions options() {
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 2;
  o.n_future_positions = 8;
  return o;
}

llama2::EvictionSettings ea_settings(std::size_t k) {
  llama2::EvictionSettings s;
  s.policy = "tova";
  s.budget = kvevict::Budget::tokens(k);
  s.recent = kvevict::RecentWindow::ratio(0.0);
  s.expected_attention = options();
  return s;
}

// Block 0's pre-RoPE projection of `token`: W · rmsnorm(embedding), W `[out][dim]` row-major.
std::vector<float> project(const Model& m, int token, const float* w, std::size_t out) {
  const llama2::Config& c = m.config();
  const float* x = m.token_embedding() + static_cast<std::size_t>(token) * c.dim;
  const float* g = m.layer(0).rms_att;
  float ss = 0.0f;
  for (std::size_t j = 0; j < c.dim; ++j) ss += x[j] * x[j];
  ss = 1.0f / std::sqrt(ss / static_cast<float>(c.dim) + c.rms_eps);
  std::vector<float> xb(c.dim), y(out, 0.0f);
  for (std::size_t j = 0; j < c.dim; ++j) xb[j] = g[j] * (ss * x[j]);
  for (std::size_t i = 0; i < out; ++i)
    for (std::size_t j = 0; j < c.dim; ++j) y[i] += w[i * c.dim + j] * xb[j];
  return y;
}

// The replay of block 0, KV head j: the positions it holds, ascending.
struct Replay {
  const Model& m;
  const kvevict::KVView<float>& full;  // a full-cache engine's block 0 over the whole sequence: slot = position
  std::size_t j, k;
  kvevict::ExpectedAttentionOptions o = options();
  kvevict::QueryStatistics stats;
  std::vector<std::int64_t> held;
  std::vector<float> held_scores;  // the last scoring's score of each held position (same order as `held`)

  Replay(const Model& model, const kvevict::KVView<float>& f, std::size_t kv_head, std::size_t budget)
      : m(model), full(f), j(kv_head), k(budget),
        stats(model.config().n_heads / model.config().n_kv_heads, model.config().head_dim()) {}

  void add_query(std::size_t position) {
    const llama2::Config& c = m.config();
    const std::size_t g = c.n_heads / c.n_kv_heads, d = c.head_dim();
    const std::vector<float> q = project(m, kTokens[position], m.layer(0).wq, c.dim);
    stats.add(q.data() + j * g * d, 1);  // the group of KV head j: query heads j·g .. j·g + g - 1
  }
  // Scores of `candidates` (in that slot order) at the next position `next`.
  std::vector<float> scores(const std::vector<std::int64_t>& candidates, std::size_t next) const {
    const std::size_t d = m.config().head_dim();
    kvevict::KVBuffer<float> buf(1, candidates.size(), d);
    kvevict::KVView<float> kv = buf.view();
    for (std::int64_t p : candidates)
      kv.append(p, full.k_row(j, static_cast<std::size_t>(p)), full.v_row(j, static_cast<std::size_t>(p)));
    std::vector<float> out(candidates.size());
    kvevict::ExpectedAttentionScratch ws;
    kvevict::expected_attention_scores(stats, kv, {kvevict::RopeStyle::interleaved, m.config().rope_theta},
                                       static_cast<std::int64_t>(next), o, out.data(), out.size(), ws);
    return out;
  }
  void prefill(std::size_t P) {
    for (std::size_t t = o.n_sink; t < P; ++t) add_query(t);
    std::vector<std::int64_t> all(P);
    std::iota(all.begin(), all.end(), 0);
    const std::vector<float> s = scores(all, P);
    std::vector<std::size_t> order(P);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
    std::vector<std::size_t> top(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min(k, P)));
    std::sort(top.begin(), top.end());
    held.clear();
    held_scores.clear();
    for (std::size_t i : top) {
      held.push_back(all[i]);
      held_scores.push_back(s[i]);
    }
  }
  void step(std::size_t t) {
    add_query(t);
    held.push_back(static_cast<std::int64_t>(t));
    std::vector<float> s = scores(held, t + 1);
    if (held.size() > k) {
      const auto worst = std::min_element(s.begin(), s.end()) - s.begin();
      held.erase(held.begin() + worst);
      s.erase(s.begin() + worst);
    }
    held_scores = s;
  }
};

std::vector<std::int64_t> kept(const Engine& e, std::size_t layer, std::size_t j) {
  std::vector<std::int64_t> p = e.cache(layer)->retained_positions(j);
  std::sort(p.begin(), p.end());
  return p;
}

// The cache's scores of KV head j's non-sink tokens against the replay's, each normalised to sum 1 over them (the
// cache holds the softmax of log(score) summed over the GQA group: the same ratios). Sinks score the layer's
// largest score + 1 (over both KV heads, which the one-head replay does not see): always kept, not compared.
void expect_scores(const Engine& e, const Replay& r, const char* when) {
  const kvevict::CacheInterface& cache = *e.cache(0);
  const std::size_t n = cache.length(r.j);
  ASSERT_EQ(n, r.held.size()) << when;
  const auto sink = [&](std::int64_t p) { return p < static_cast<std::int64_t>(r.o.n_sink); };
  double cs = 0.0, rs = 0.0;
  for (std::size_t s = 0; s < n; ++s)
    if (!sink(cache.positions(r.j)[s])) cs += cache.scores(r.j)[s];
  for (std::size_t i = 0; i < n; ++i)
    if (!sink(r.held[i])) rs += r.held_scores[i];
  for (std::size_t s = 0; s < n; ++s) {
    const std::int64_t p = cache.positions(r.j)[s];
    if (sink(p)) continue;
    const auto at = static_cast<std::size_t>(std::find(r.held.begin(), r.held.end(), p) - r.held.begin());
    ASSERT_LT(at, n) << when;
    EXPECT_NEAR(cache.scores(r.j)[s] / cs, r.held_scores[at] / rs, 2e-4)
        << when << ", KV head " << r.j << ", position " << p;
  }
}

std::string invalid_argument_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

::testing::AssertionResult has(const std::string& what, const char* part) {
  if (what.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << what << "' lacks '" << part << "'";
}

struct NoHooks : llama2::EngineHooks {};

}  // namespace

// The engine's RoPE is kvevict's interleaved RopeSpec at the model's θ (what its Expected Attention averages),
// and block 0's kept positions and their scores equal the replay after the prefill and after each of 8 decode
// steps.
TEST(Llama2ExpectedAttention, BlockZeroKeepsWhatTheReplaySelects) {
  const Model m = make_model(Header{}, 31);
  const llama2::Config& c = m.config();
  Engine full(m);
  full.prefill(kTokens);
  const kvevict::KVView<float>& fv = full.view(0);
  for (std::size_t p = 0; p < kTokens.size(); ++p) {
    std::vector<float> key = project(m, kTokens[p], m.layer(0).wk, c.kv_dim());
    for (std::size_t j = 0; j < c.n_kv_heads; ++j) {
      kvevict::rope_rotate(key.data() + j * c.head_dim(), c.head_dim(), static_cast<double>(p),
                           {kvevict::RopeStyle::interleaved, c.rope_theta});
      for (std::size_t i = 0; i < c.head_dim(); ++i)
        ASSERT_NEAR(fv.k_row(j, p)[i], key[j * c.head_dim() + i], 1e-5f) << "position " << p << " head " << j;
    }
  }
  const std::size_t k = 6;
  auto e = llama2::make_engine(m, ea_settings(k));
  ASSERT_TRUE(e->expected_attention().has_value());
  e->prefill(std::vector<int>(kTokens.begin(), kTokens.begin() + kPrompt));
  std::vector<Replay> replay;
  for (std::size_t j = 0; j < c.n_kv_heads; ++j) replay.emplace_back(m, fv, j, k);
  bool differ = false;
  for (std::size_t j = 0; j < c.n_kv_heads; ++j) {
    replay[j].prefill(kPrompt);
    EXPECT_EQ(kept(*e, 0, j), replay[j].held) << "prefill, KV head " << j;
    expect_scores(*e, replay[j], "prefill");
    EXPECT_TRUE(std::binary_search(replay[j].held.begin(), replay[j].held.end(), 0) &&
                std::binary_search(replay[j].held.begin(), replay[j].held.end(), 1))
        << "the sinks are kept";
  }
  for (std::size_t t = kPrompt; t < kTokens.size(); ++t) {
    const float* logits = e->step(kTokens[t]);
    for (std::size_t v = 0; v < c.vocab_size; ++v) ASSERT_TRUE(std::isfinite(logits[v]));
    for (std::size_t j = 0; j < c.n_kv_heads; ++j) {
      replay[j].step(t);
      EXPECT_EQ(kept(*e, 0, j), replay[j].held) << "step at position " << t << ", KV head " << j;
      expect_scores(*e, replay[j], "decode step");
      differ = differ || kept(*e, 0, j) != kept(*e, 0, 0);
    }
    for (std::size_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(e->retained(l, 0), k) << "layer " << l;
  }
  EXPECT_TRUE(differ) << "the KV heads rank differently somewhere (else the test is weak)";
  // The selection differs from plain TOVA on the logits (else the wiring could be a no-op).
  auto s = ea_settings(k);
  s.expected_attention.reset();
  auto tova = llama2::make_engine(m, s);
  tova->prefill(kTokens);
  auto ea = llama2::make_engine(m, ea_settings(k));
  ea->prefill(kTokens);
  bool other = false;
  for (std::size_t l = 0; l < c.n_layers; ++l)
    for (std::size_t j = 0; j < c.n_kv_heads; ++j) other = other || kept(*tova, l, j) != kept(*ea, l, j);
  EXPECT_TRUE(other);
  // reset() clears the statistics: the same sequence again gives the same sets.
  std::vector<std::vector<std::int64_t>> before;
  for (std::size_t l = 0; l < c.n_layers; ++l) before.push_back(kept(*ea, l, 1));
  ea->reset();
  ea->prefill(kTokens);
  for (std::size_t l = 0; l < c.n_layers; ++l) EXPECT_EQ(kept(*ea, l, 1), before[l]) << "layer " << l;
}

// prefill_batch: a follower with Expected Attention keeps what it keeps alone, and a lead without it keeps plain
// TOVA's selection (the last logits rows it is given are the computed ones), and the other way round.
TEST(Llama2ExpectedAttention, PrefillBatchGivesEachEngineItsOwnRows) {
  const Model m = make_model(Header{}, 32);
  const std::vector<int> prompt(kTokens.begin(), kTokens.begin() + 14);
  auto plain_settings = ea_settings(5);
  plain_settings.expected_attention.reset();
  auto sets = [&](Engine& e) {
    std::vector<std::vector<std::int64_t>> out;
    for (std::size_t l = 0; l < m.config().n_layers; ++l)
      for (std::size_t j = 0; j < m.config().n_kv_heads; ++j) out.push_back(kept(e, l, j));
    return out;
  };
  auto alone_ea = llama2::make_engine(m, ea_settings(5));
  auto alone_plain = llama2::make_engine(m, plain_settings);
  alone_ea->prefill(prompt);
  alone_plain->prefill(prompt);
  ASSERT_NE(sets(*alone_ea), sets(*alone_plain));
  {
    auto lead = llama2::make_engine(m, plain_settings);
    auto f1 = llama2::make_engine(m, ea_settings(5));
    auto f2 = llama2::make_engine(m, plain_settings);
    Engine::prefill_batch(*lead, {f1.get(), f2.get()}, prompt);
    EXPECT_EQ(sets(*lead), sets(*alone_plain));
    EXPECT_EQ(sets(*f1), sets(*alone_ea));
    EXPECT_EQ(sets(*f2), sets(*alone_plain));
  }
  {
    auto lead = llama2::make_engine(m, ea_settings(5));
    auto f1 = llama2::make_engine(m, plain_settings);
    Engine::prefill_batch(*lead, {f1.get()}, prompt);
    EXPECT_EQ(sets(*lead), sets(*alone_ea));
    EXPECT_EQ(sets(*f1), sets(*alone_plain));
  }
}

// With AdaKV's head-adaptive budgets (kvpress's AdaKV(ExpectedAttention)) each layer's KV heads share k x H_kv.
TEST(Llama2ExpectedAttention, HeadAdaptiveBudgetsKeepEachLayersTotal) {
  const Model m = make_model(Header{}, 33);
  auto s = ea_settings(6);
  s.head_budgets = kvevict::HeadBudgets::adaptive(0.2f);
  auto e = llama2::make_engine(m, s);
  e->prefill(std::vector<int>(kTokens.begin(), kTokens.begin() + kPrompt));
  auto total = [&](std::size_t l) { return e->retained(l, 0) + e->retained(l, 1); };
  for (std::size_t l = 0; l < m.config().n_layers; ++l) EXPECT_EQ(total(l), 12u) << "layer " << l;
  for (std::size_t t = kPrompt; t < kTokens.size(); ++t) {
    const float* logits = e->step(kTokens[t]);
    for (std::size_t v = 0; v < m.config().vocab_size; ++v) ASSERT_TRUE(std::isfinite(logits[v]));
    for (std::size_t l = 0; l < m.config().n_layers; ++l) EXPECT_EQ(total(l), 12u) << "layer " << l;
  }
}

TEST(Llama2ExpectedAttention, RejectsWhatItCannotRank) {
  const Model m = make_model(Header{}, 34);
  auto s = ea_settings(6);
  s.policy = "h2o";
  EXPECT_TRUE(has(invalid_argument_of([&] { llama2::make_engine(m, s); }), "expected_attention needs policy \"tova\""));
  s = ea_settings(6);
  s.prefill_chunk = 4;
  EXPECT_TRUE(has(invalid_argument_of([&] { llama2::make_engine(m, s); }), "one-shot prefill (prefill_chunk = 0, got 4)"));
  s = ea_settings(6);
  s.kv_layout = llama2::KvLayout::paged;
  EXPECT_TRUE(has(invalid_argument_of([&] { llama2::make_engine(m, s); }), "kv_layout = contiguous"));

  Engine no_cache(m);
  EXPECT_TRUE(has(invalid_argument_of([&] { no_cache.set_expected_attention(options()); }), "has no eviction cache"));
  EXPECT_FALSE(no_cache.expected_attention().has_value());

  auto plain = ea_settings(6);
  plain.expected_attention.reset();
  auto e = llama2::make_engine(m, plain);
  auto o = options();
  o.n_future_positions = 0;
  EXPECT_TRUE(has(invalid_argument_of([&] { e->set_expected_attention(o); }), "n_future_positions must be >= 1"));
  o = options();
  o.epsilon = -1.0f;
  EXPECT_TRUE(has(invalid_argument_of([&] { e->set_expected_attention(o); }), "epsilon must be finite and >= 0"));
  o.epsilon = std::nanf("");
  EXPECT_TRUE(has(invalid_argument_of([&] { e->set_expected_attention(o); }), "epsilon must be finite and >= 0"));
  EXPECT_FALSE(e->expected_attention().has_value()) << "a refused call changes nothing";

  e->set_hooks(std::make_unique<NoHooks>());
  EXPECT_TRUE(has(invalid_argument_of([&] { e->set_expected_attention(options()); }), "hooks are installed"));
  e->set_hooks(nullptr);
  e->set_expected_attention(options());
  EXPECT_TRUE(has(invalid_argument_of([&] { e->set_hooks(std::make_unique<NoHooks>()); }),
                  "ranks by Expected Attention"));
  EXPECT_EQ(e->hooks(), nullptr);

  e->prefill({1, 2, 3});
  EXPECT_THROW(e->set_expected_attention(std::nullopt), std::logic_error);
  EXPECT_TRUE(e->expected_attention().has_value());
  e->reset();
  e->set_expected_attention(std::nullopt);
  EXPECT_FALSE(e->expected_attention().has_value());
}
