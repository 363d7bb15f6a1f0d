// The per-head decode step (Cache::begin_decode_step / score_decode_head / end_decode_step, issue 36):
// for every policy, per-head and shared selection, GQA groups of 1 and 2, KV heads scored in any order
// and on concurrent threads, the state after every step is bit for bit `decode_step`'s with the rows
// concatenated; a bad head leaves that head and the open step unchanged; the protocol errors name the call.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvevict::Policy;

constexpr Policy kPolicies[] = {Policy::keyformer, Policy::h2o,    Policy::tova,
                                Policy::streaming_llm, Policy::window, Policy::snapkv};

// Deterministic logit of (row id, query head, position), -inf for ~1/16 (masked).
float logit_of(std::uint64_t row, std::uint64_t h, std::uint64_t col) {
  const std::uint32_t x = kvevict::detail::lowbias32(
      kvevict::detail::lowbias32(static_cast<std::uint32_t>(row * 7919u + h * 104729u)) ^ static_cast<std::uint32_t>(col));
  if ((x & 15u) == 0) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(x >> 8) / 16777216.0f * 8.0f - 4.0f;
}

using Snapshot = kvtest::CacheSnapshot;
using kvtest::snapshot;

enum class Mode { whole, ascending, descending, threads };

struct Case {
  Policy policy;
  bool shared;
  std::size_t n_kv, g;
};
std::string name(const Case& c, Mode m) {
  static const char* modes[] = {"decode_step", "ascending", "descending", "threads"};
  return std::string(kvevict::policy_name(c.policy)) + (c.shared ? " shared" : " per-head") + " n_kv " +
         std::to_string(c.n_kv) + " g " + std::to_string(c.g) + " " + modes[static_cast<int>(m)];
}

// One layer: a P-token prompt, then `steps` decode steps over n = k + 1 slots (rows above 512 slots: the
// chunked softmax spans chunks), each given to the cache as `mode` says. A snapshot after every step.
std::vector<Snapshot> run(const Case& c, Mode mode) {
  const std::size_t P = 1100, k = 1030, steps = 6, nq = c.n_kv * c.g;
  kvevict::KVBuffer<float> buf(c.n_kv, P + 1, 2);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = nq;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(c.policy) ? 8 : 0);
  cfg.shared_heads = c.shared;
  cfg.seed = 77;
  kvevict::PolicyParams params;
  params.horizon = steps;
  params.sinks = 4;
  auto cache = kvevict::make_cache(c.policy, cfg, kv, params);
  for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  // The prompt's logits depend on nq only: made once per nq (the 192 runs share 4 arrays, 58 MB kept to the
  // process's end; most of the test's time under the sanitizers went to remaking them). Only read after.
  static std::vector<std::vector<float>> prompt_logits(8);
  if (prompt_logits.at(nq).empty())
    prompt_logits[nq] = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t s) { return logit_of(r, h, s); });
  const std::vector<float>& x = prompt_logits[nq];
  cache->prefill(x.data(), P);
  std::vector<Snapshot> out;
  std::vector<float> rows(nq * (k + 1));
  for (std::size_t t = 0; t < steps; ++t) {
    kvtest::append_token(kv, static_cast<std::int64_t>(P + 3 * t));
    const std::size_t n = kv.length(0);
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t s = 0; s < n; ++s)
        rows[h * n + s] = logit_of(5000 + t, h, static_cast<std::uint64_t>(kv.head_positions(h / c.g)[s]));
    if (mode == Mode::whole) {
      cache->decode_step(rows.data(), n);
    } else {
      cache->begin_decode_step(n);
      auto head = [&](std::size_t j) { cache->score_decode_head(j, rows.data() + j * c.g * n); };
      if (mode == Mode::threads) {
        std::vector<std::thread> workers;
        for (std::size_t j = 0; j < c.n_kv; ++j) workers.emplace_back(head, j);
        for (auto& w : workers) w.join();
      } else {
        for (std::size_t i = 0; i < c.n_kv; ++i) head(mode == Mode::ascending ? i : c.n_kv - 1 - i);
      }
      cache->end_decode_step();
    }
    out.push_back(snapshot(*cache, c.n_kv));
    EXPECT_TRUE(kvtest::rows_aligned(kv.read_only())) << name(c, mode) << " step " << t;
  }
  return out;
}

TEST(PerHeadStep, BitIdenticalToDecodeStepForEveryPolicyOrderAndThread) {
  for (Policy p : kPolicies)
    for (bool shared : {false, true})
      for (std::size_t n_kv : {std::size_t{1}, std::size_t{3}})
        for (std::size_t g : {std::size_t{1}, std::size_t{2}}) {
          const Case c{p, shared, n_kv, g};
          const auto whole = run(c, Mode::whole);
          for (Mode m : {Mode::ascending, Mode::descending, Mode::threads}) {
            const auto parts = run(c, m);
            ASSERT_EQ(parts.size(), whole.size());
            for (std::size_t i = 0; i < parts.size(); ++i)
              EXPECT_TRUE(parts[i] == whole[i]) << name(c, m) << " after step " << i;
          }
        }
}

// H2O over 1 KV head, g = 1, k = 2, w = 0: a 2-token prompt, then a step over 3 slots. Prompt scores:
// row 0 = [1], row 1 = softmax([0, ln 3]) = [0.25, 0.75] -> [1.25, 0.75]. Step logits [0, -inf, -inf]
// over slots (positions 0, 1, 2) add [1, 0, 0] -> [2.25, 0.75, 0]: the new token (score 0) is the
// victim, so nothing moves and the positions stay [0, 1].
TEST(PerHeadStep, ExactH2OStep) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = 1;
  cfg.budget = kvevict::Budget::tokens(2);
  cfg.recent = kvevict::RecentWindow::tokens(0);
  auto cache = kvevict::make_cache(Policy::h2o, cfg, kv);
  kvtest::append_token(kv, 0);
  kvtest::append_token(kv, 1);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> prompt = {0.0f, std::nanf(""), 0.0f, std::log(3.0f)};
  cache->prefill(prompt.data(), 2);
  kvtest::append_token(kv, 2);
  const std::vector<float> step = {0.0f, -inf, -inf};
  cache->begin_decode_step(3);
  cache->score_decode_head(0, step.data());
  // the victim is found (per-head selection) but the view is unchanged until end_decode_step
  EXPECT_EQ(cache->length(0), 3u);
  cache->end_decode_step();
  ASSERT_EQ(cache->length(0), 2u);
  EXPECT_EQ(cache->positions(0)[0], 0);
  EXPECT_EQ(cache->positions(0)[1], 1);
  EXPECT_FLOAT_EQ(cache->scores(0)[0], 2.25f);
  EXPECT_FLOAT_EQ(cache->scores(0)[1], 0.75f);
  EXPECT_EQ(cache->step(), 1u);
}

// A NaN in head 1's rows: that call throws naming the q_head, head 1 and the open step are unchanged, the
// call succeeds when repeated with good rows, and the step ends as decode_step's.
TEST(PerHeadStep, BadHeadIsUnchangedAndCanBeRetried) {
  for (bool shared : {false, true}) {
    const std::size_t n_kv = 3, g = 2, nq = n_kv * g, P = 40, k = 30;
    auto make = [&](kvevict::KVBuffer<float>& buf) {
      kvevict::CacheConfig cfg;
      cfg.n_q_heads = nq;
      cfg.budget = kvevict::Budget::tokens(k);
      cfg.recent = kvevict::RecentWindow::tokens(4);
      cfg.shared_heads = shared;
      kvevict::PolicyParams params;
      params.horizon = 8;
      auto kv = buf.view();
      auto cache = kvevict::make_cache(Policy::keyformer, cfg, kv, params);
      for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
      const auto x = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t s) { return logit_of(r, h, s); });
      cache->prefill(x.data(), P);
      kvtest::append_token(kv, static_cast<std::int64_t>(P));
      return cache;
    };
    kvevict::KVBuffer<float> buf_a(n_kv, P + 1, 2), buf_b(n_kv, P + 1, 2);
    auto ref = make(buf_a);
    auto cache = make(buf_b);
    const std::size_t n = k + 1;
    std::vector<float> rows(nq * n);
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t s = 0; s < n; ++s)
        rows[h * n + s] = logit_of(9, h, static_cast<std::uint64_t>(buf_b.view().head_positions(h / g)[s]));
    ref->decode_step(rows.data(), n);

    cache->begin_decode_step(n);
    cache->score_decode_head(0, rows.data());
    const Snapshot before = snapshot(*cache, n_kv);
    std::vector<float> bad(rows.begin() + 2 * n, rows.begin() + 4 * n);  // KV head 1: q_heads 2 and 3
    bad[n + 5] = std::numeric_limits<float>::quiet_NaN();                 // in q_head 3
    try {
      cache->score_decode_head(1, bad.data());
      ADD_FAILURE() << "no throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("score_decode_head: logits of q_head 3 contain NaN or +inf"),
                std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(snapshot(*cache, n_kv) == before);
    cache->score_decode_head(1, rows.data() + 2 * n);
    cache->score_decode_head(2, rows.data() + 4 * n);
    cache->end_decode_step();
    EXPECT_TRUE(snapshot(*cache, n_kv) == snapshot(*ref, n_kv)) << (shared ? "shared" : "per-head");
  }
}

void expect_throw(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no throw; expected '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PerHeadStep, ProtocolErrorsNameTheCallAndChangeNothing) {
  const std::size_t n_kv = 2, P = 8;
  kvevict::KVBuffer<float> buf(n_kv, P + 2, 2);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv;
  cfg.budget = kvevict::Budget::tokens(6);
  cfg.recent = kvevict::RecentWindow::tokens(2);
  auto cache = kvevict::make_cache(Policy::h2o, cfg, kv);
  std::vector<float> rows(n_kv * (P + 1), 0.5f);
  expect_throw([&] { cache->begin_decode_step(1); }, "begin_decode_step: call prefill() first");
  for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  const auto x = kvtest::causal_logits(n_kv, P, [](std::size_t, std::size_t, std::size_t) { return 0.0f; });
  cache->prefill(x.data(), P);
  expect_throw([&] { cache->score_decode_head(0, rows.data()); }, "score_decode_head: no decode step is open");
  expect_throw([&] { cache->end_decode_step(); }, "end_decode_step: no decode step is open");
  kvtest::append_token(kv, 100);
  expect_throw([&] { cache->begin_decode_step(8); },
               "begin_decode_step: n = 8 but the cache holds 6 tokens per KV head (append exactly one token, then "
               "pass n = 7)");
  const Snapshot start = snapshot(*cache, n_kv);
  cache->begin_decode_step(7);
  expect_throw([&] { cache->begin_decode_step(7); }, "begin_decode_step: a per-head decode step is open");
  expect_throw([&] { cache->decode_step(rows.data(), 7); }, "decode_step: a per-head decode step is open");
  expect_throw([&] { cache->restore_position_order(); }, "restore_position_order: a per-head decode step is open");
  expect_throw([&] { cache->prefill(x.data(), P); }, "prefill: a per-head decode step is open");
  expect_throw([&] { cache->score_decode_head(2, rows.data()); }, "score_decode_head: kv_head 2 out of range (n_kv_heads = 2)");
  expect_throw([&] { cache->score_decode_head(0, nullptr); }, "score_decode_head: logits must be non-null");
  cache->score_decode_head(1, rows.data());
  expect_throw([&] { cache->score_decode_head(1, rows.data()); }, "score_decode_head: KV head 1 was already scored");
  expect_throw([&] { cache->end_decode_step(); }, "end_decode_step: KV head 0 was not scored");
  cache->score_decode_head(0, rows.data());
  cache->end_decode_step();
  EXPECT_EQ(cache->step(), 1u);
  EXPECT_FALSE(snapshot(*cache, n_kv) == start);
  // reset abandons an open step: the next sequence starts clean
  kvtest::append_token(kv, 101);
  cache->begin_decode_step(7);
  cache->reset(5);
  for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  cache->prefill(x.data(), P);
  EXPECT_EQ(cache->step(), 0u);
}

// A cache without the per-head step (the interface's defaults) says so.
TEST(PerHeadStep, InterfaceDefaultsThrowLogicError) {
  struct Minimal final : kvevict::CacheInterface {
    void prefill(const float*, std::size_t, const float*) override {}
    void decode_step(const float*, std::size_t, const float*) override {}
    void reset(std::uint64_t) override {}
    std::size_t budget() const override { return 0; }
    std::size_t recent_window() const override { return 0; }
    std::size_t step() const override { return 0; }
    float temperature() const override { return 0; }
    std::size_t length(std::size_t) const override { return 0; }
    const float* scores(std::size_t) const override { return nullptr; }
    const std::int64_t* positions(std::size_t) const override { return nullptr; }
    std::vector<std::int64_t> retained_positions(std::size_t) const override { return {}; }
    void restore_position_order() override {}
  } m;
  EXPECT_THROW(m.begin_decode_step(1), std::logic_error);
  EXPECT_THROW(m.score_decode_head(0, nullptr), std::logic_error);
  EXPECT_THROW(m.end_decode_step(), std::logic_error);
}

}  // namespace

namespace {

// attention_logits_row is attention_logits's row of one query head, bit for bit; bad arguments throw.
TEST(PerHeadStep, AttentionLogitsRowIsTheRowOfAttentionLogits) {
  const std::size_t n_kv = 3, g = 2, d = 8, n = 37;
  kvevict::KVBuffer<float> buf(n_kv, n, d);
  auto kv = buf.view();
  for (std::size_t t = 0; t < n; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  std::vector<float> q(n_kv * g * d);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = logit_of(1, i, 2) * 0.01f;
  std::vector<float> all(n_kv * g * n), row(n);
  kvevict::attention_logits(kv, q.data(), n_kv * g, all.data(), 0.3535f);
  for (std::size_t h = 0; h < n_kv * g; ++h) {
    kvevict::attention_logits_row(kv.read_only(), h / g, q.data() + h * d, row.data(), 0.3535f);
    EXPECT_EQ(0, std::memcmp(row.data(), all.data() + h * n, n * sizeof(float))) << "q_head " << h;
  }
  expect_throw([&] { kvevict::attention_logits_row(kv.read_only(), 3, q.data(), row.data(), 1.0f); },
               "kvevict::attention_logits_row: kv_head 3 out of range (n_kv_heads = 3)");
  expect_throw([&] { kvevict::attention_logits_row(kv.read_only(), 0, nullptr, row.data(), 1.0f); },
               "kvevict::attention_logits_row: q and out must be non-null");
}

}  // namespace
