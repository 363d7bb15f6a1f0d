// The reliability rules of a Cache's configuration: every
// configuration is checked in one place (`Cache::resolve_budget`) before any
// state changes, for every policy; the budget edge rules; the valid τ range;
// and call orders the documentation allows. Each case is a regression seed of
// the fuzzers too (fuzz/corpus).
#include <cfloat>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::causal_logits;
using Positions = std::vector<std::int64_t>;
constexpr float kInf = std::numeric_limits<float>::infinity();

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

/// Everything a failed call must leave as it was: lengths, positions, scores,
/// K and V bytes of every live slot, step and τ.
struct State {
  std::vector<std::size_t> lengths;
  std::vector<std::int64_t> positions;
  std::vector<float> scores, kv;
  std::size_t step = 0;
  float tau = 0.0f;
  static State of(const kvevict::CacheInterface& cache, const kvevict::KVView<float>& view) {
    State s;
    s.step = cache.step();
    s.tau = cache.temperature();
    for (std::size_t h = 0; h < view.n_kv_heads; ++h) {
      s.lengths.push_back(view.length(h));
      for (std::size_t i = 0; i < view.length(h); ++i) {
        s.positions.push_back(view.head_positions(h)[i]);
        s.scores.push_back(cache.scores(h)[i]);
        for (std::size_t d = 0; d < view.head_dim; ++d) {
          s.kv.push_back(view.k_row(h, i)[d]);
          s.kv.push_back(view.v_row(h, i)[d]);
        }
      }
    }
    return s;
  }
  bool operator==(const State& o) const {
    return lengths == o.lengths && positions == o.positions && scores == o.scores && kv == o.kv && step == o.step &&
           tau == o.tau;
  }
};

kvevict::CacheConfig config(std::size_t n_q, kvevict::Budget k, kvevict::RecentWindow w) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = k;
  c.recent = w;
  return c;
}

// ---------------------------------------------------------------------------
// StreamingLLM / window: w > k, sinks > k, a recent window they would ignore.

// A heap-buffer-overflow found by fuzzing: 1 KV head, capacity 9, head_dim 2,
// budget 4, recent 50, 2 sinks. Now rejected at construction, naming w and k.
TEST(CacheConfig, StreamingLLMRecentWindowLargerThanBudgetIsRejectedAtConstruction) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  auto kv = buf.view();
  const auto c = config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(50));
  EXPECT_EQ(message_of([&] {
              kvevict::StreamingLLM cache(c, kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{2});
            }),
            "kvevict::SinkRecentSelection: recent window w = 50 exceeds budget k = 4 (StreamingLLM/window keep the "
            "sinks + the most recent k - sinks tokens; set the recent window to 0)");
  EXPECT_EQ(kv.length(0), 0u);
}

// The same configuration with a ratio budget is only known at prefill: rejected there, view unchanged,
// and the rest of the sequence (five decode steps, restore_position_order) runs after a valid prefill.
TEST(CacheConfig, StreamingLLMWindowCheckedAtPrefillForARatioBudget) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  auto kv = buf.view();
  kvevict::StreamingLLM cache(config(1, kvevict::Budget::ratio(0.5), kvevict::RecentWindow::tokens(50)), kv, {},
                              kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{2});
  for (int p = 0; p < 8; ++p) append_token(kv, p);
  const State before = State::of(cache, kv);
  EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 8); }),
            "kvevict::SinkRecentSelection: recent window w = 50 exceeds budget k = 4 (StreamingLLM/window keep the "
            "sinks + the most recent k - sinks tokens; set the recent window to 0)");
  EXPECT_EQ(State::of(cache, kv), before);

  kvevict::KVBuffer<float> ok_buf(1, 9, 2);
  auto ok_kv = ok_buf.view();
  kvevict::StreamingLLM ok(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(0)), ok_kv, {},
                           kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{2});
  for (int p = 0; p < 8; ++p) append_token(ok_kv, p);
  ok.prefill(nullptr, 8);
  const float zeros[5] = {0, 0, 0, 0, 0};
  for (int t = 0; t < 5; ++t) {
    append_token(ok_kv, 8 + t);
    ok.decode_step(zeros, 5);
  }
  ok.restore_position_order();
  EXPECT_EQ(Positions(ok.positions(0), ok.positions(0) + 4), (Positions{0, 1, 11, 12}));
  EXPECT_TRUE(kvtest::rows_aligned(ok_kv));
}

TEST(CacheConfig, StreamingLLMRejectsAnyRecentWindowAndSinksAboveBudget) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  auto kv = buf.view();
  EXPECT_EQ(message_of([&] {
              kvevict::StreamingLLM c(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(2)), kv, {},
                                      kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{1});
            }),
            "kvevict::SinkRecentSelection: recent window w = 2 with budget k = 4: StreamingLLM/window always keep the "
            "most recent k - sinks = 3 tokens; set the recent window to 0");
  EXPECT_EQ(message_of([&] {
              kvevict::StreamingLLM c(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(0)), kv, {},
                                      kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{5});
            }),
            "kvevict::SinkRecentSelection: sinks = 5 exceeds budget k = 4");
  // make_cache reaches the same checks.
  kvevict::PolicyParams params;
  params.sinks = 2;
  EXPECT_EQ(message_of([&] {
              (void)kvevict::make_cache(kvevict::Policy::window,
                                        config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::ratio(0.5)), kv);
            }),
            "kvevict::SinkRecentSelection: recent window w = 2 with budget k = 4: StreamingLLM/window always keep the "
            "most recent k - sinks = 4 tokens; set the recent window to 0");
}

TEST(CacheConfig, RecentTopKRejectsWindowAboveBudgetAtConstructionForEveryScorePolicy) {
  kvevict::KVBuffer<float> buf(2, 9, 2);
  auto kv = buf.view();
  const auto c = config(2, kvevict::Budget::tokens(3), kvevict::RecentWindow::tokens(4));
  const std::string want = "kvevict::RecentTopKSelection: recent window w = 4 exceeds budget k = 3";
  EXPECT_EQ(message_of([&] { kvevict::H2O x(c, kv); }), want);
  EXPECT_EQ(message_of([&] { kvevict::TOVA x(c, kv); }), want);
  EXPECT_EQ(message_of([&] { kvevict::Keyformer x(c, kv, {}, kvevict::LinearTemperature(1, 2, 4)); }), want);
}

TEST(CacheConfig, CapacityMustHoldTheBudgetPlusTheAppendedToken) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  EXPECT_EQ(message_of([&] {
              kvevict::H2O c(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(1)), kv);
            }),
            "kvevict::Cache: budget k = 4 needs a view of capacity >= k + 1 = 5 (a decode step appends before it "
            "evicts), but the capacity is 4");
  kvevict::H2O fits(config(1, kvevict::Budget::tokens(3), kvevict::RecentWindow::tokens(1)), kv);
  EXPECT_EQ(fits.budget(), 0u);  // resolved at prefill
}

// ---------------------------------------------------------------------------
// Budget edge rules.

TEST(CacheConfig, RatioBudgetOnAOneTokenPromptKeepsOneToken) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, kvevict::Budget::ratio(0.6), kvevict::RecentWindow::ratio(0.3)), kv);
  append_token(kv, 0);
  const float x[] = {0.0f};
  cache.prefill(x, 1);
  EXPECT_EQ(cache.budget(), 1u);
  EXPECT_EQ(cache.recent_window(), 0u);  // k = 1: no floor
  append_token(kv, 1);
  const float row[] = {0.0f, 0.0f};
  cache.decode_step(row, 2);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0}));  // ties keep the older token
}

// w = 0 with an accumulated score: every new token is evicted in its own step, forever.
TEST(CacheConfig, H2OWithoutRecentWindowEvictsEveryNewTokenInItsOwnStep) {
  kvevict::KVBuffer<float> buf(1, 5, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(0)), kv);
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  const auto x = causal_logits(1, 4, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 4);
  EXPECT_EQ(cache.recent_window(), 0u);
  const float zeros[5] = {0, 0, 0, 0, 0};
  for (int t = 0; t < 5; ++t) {
    append_token(kv, 4 + t);
    cache.decode_step(zeros, 5);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 3})) << "after step " << t + 1;
  }
}

TEST(CacheConfig, RatioRecentWindowResolvesToAtLeastOneTokenForAccumulatedScores) {
  auto resolved = [](kvevict::Policy p, kvevict::RecentWindow w, std::size_t k) {
    kvevict::KVBuffer<float> buf(1, 16, 2);
    auto kv = buf.view();
    kvevict::PolicyParams params;
    params.horizon = 4;
    auto cache = kvevict::make_cache(p, config(1, kvevict::Budget::tokens(k), w), kv, params);
    for (int i = 0; i < 8; ++i) append_token(kv, i);
    const auto x = causal_logits(1, 8, [](auto, auto, auto) { return 0.0f; });
    cache->prefill(x.data(), 8);
    return cache->recent_window();
  };
  using kvevict::Policy;
  using kvevict::RecentWindow;
  EXPECT_EQ(resolved(Policy::h2o, RecentWindow::ratio(0.3), 3), 1u);        // floor(0.9) = 0 -> 1
  EXPECT_EQ(resolved(Policy::keyformer, RecentWindow::ratio(0.3), 3), 1u);  // same rule
  EXPECT_EQ(resolved(Policy::h2o, RecentWindow::ratio(0.3), 1), 0u);        // k = 1: w = 1 would leave no key token
  EXPECT_EQ(resolved(Policy::h2o, RecentWindow::ratio(0.0), 3), 0u);        // an explicit 0 stays 0
  EXPECT_EQ(resolved(Policy::h2o, RecentWindow::tokens(0), 3), 0u);
  EXPECT_EQ(resolved(Policy::h2o, RecentWindow::ratio(0.3), 10), 3u);       // floor(3.0): no change
}

// ---------------------------------------------------------------------------
// The valid τ range: finite and >= FLT_MIN, checked before any state changes.

TEST(CacheConfig, TinyPositiveTemperatureIsRejectedByTheSchedule) {
  EXPECT_EQ(message_of([] { kvevict::LinearTemperature t(1e-40f, 2.0f, 10); }),
            "kvevict::LinearTemperature: tau_init must be finite and >= 1.17549435e-38 (FLT_MIN, so that 1/tau_init "
            "is finite) (got 9.99995e-41)");
  EXPECT_NO_THROW(kvevict::LinearTemperature(FLT_MIN, 2.0f, 10));
  EXPECT_THROW(kvevict::ConstantTemperature(1e-39f), std::invalid_argument);
}

/// A schedule that returns a fixed τ per step (no checks of its own), as a
/// user-written schedule might.
struct TableTemperature {
  std::vector<float> taus;
  float operator()(std::size_t t) const { return taus[std::min(t, taus.size() - 1)]; }
};

TEST(CacheConfig, TinyTemperatureAtPrefillThrowsBeforeAnyHeadIsTouched) {
  // 2 KV heads, head 1's rows all -inf: before the fix head 0 was compacted before the throw.
  kvevict::KVBuffer<float> buf(2, 4, 2);
  auto kv = buf.view();
  kvevict::Cache<kvevict::GumbelLogitScore, TableTemperature, kvevict::RecentTopKSelection> cache(
      config(2, kvevict::Budget::tokens(2), kvevict::RecentWindow::tokens(0)), kv, {}, TableTemperature{{1e-40f}});
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const auto x = causal_logits(2, 3, [](std::size_t h, auto, auto) { return h == 1 ? -kInf : 0.0f; });
  const State before = State::of(cache, kv);
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 3); }),
            "kvevict::Cache::prefill: temperature at step 0 must be finite and >= 1.17549435e-38 (FLT_MIN) (got "
            "9.99995e-41)");
  EXPECT_EQ(State::of(cache, kv), before);
}

TEST(CacheConfig, TemperatureFallingBelowTheRangeInDecodeThrowsAndLeavesTheStateUnchanged) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  kvevict::Cache<kvevict::GumbelLogitScore, TableTemperature, kvevict::RecentTopKSelection> cache(
      config(1, kvevict::Budget::tokens(2), kvevict::RecentWindow::tokens(1)), kv, {}, TableTemperature{{1.0f, 1e-40f}});
  for (int p = 0; p < 2; ++p) append_token(kv, p);
  const auto x = causal_logits(1, 2, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 2);
  append_token(kv, 2);
  const State before = State::of(cache, kv);
  const float row[] = {0.0f, 0.0f, 0.0f};
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 3); }),
            "kvevict::Cache::decode_step: temperature at step 1 must be finite and >= 1.17549435e-38 (FLT_MIN) (got "
            "9.99995e-41)");
  EXPECT_EQ(State::of(cache, kv), before);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_FALSE(std::isnan(cache.scores(0)[i]));
}

// ---------------------------------------------------------------------------
// Call orders: restore_position_order between append and decode_step.

TEST(CacheConfig, RestorePositionOrderBetweenAppendAndDecodeStepKeepsTheRecentWindow) {
  auto run = [](bool restore) {
    kvevict::KVBuffer<float> buf(1, 4, 2);
    auto kv = buf.view();
    kvevict::H2O cache(config(1, kvevict::Budget::tokens(3), kvevict::RecentWindow::tokens(2)), kv);
    for (int p = 0; p < 3; ++p) append_token(kv, p);
    const float x[] = {0, -kInf, -kInf, 0, 0, -kInf, 0, 0, -kInf};  // rows {0}, {0, 0}, {0, 0}
    cache.prefill(x, 3);
    append_token(kv, 3);
    if (restore) cache.restore_position_order();
    const float row[] = {0, 0, -kInf, 0};
    cache.decode_step(row, 4);
    EXPECT_TRUE(kvtest::rows_aligned(kv));
    return cache.retained_positions(0);
  };
  EXPECT_EQ(run(false), (Positions{0, 2, 3}));
  EXPECT_EQ(run(true), (Positions{0, 2, 3}));  // position 2 is inside w = 2 and stays
}

TEST(CacheConfig, RestorePositionOrderLeavesTheAppendedSlotWhereTheStepExpectsIt) {
  kvevict::KVBuffer<float> buf(1, 6, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, kvevict::Budget::tokens(4), kvevict::RecentWindow::tokens(1)), kv);
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  const auto x = causal_logits(1, 4, [](auto, std::size_t r, std::size_t c) { return 0.3f * r - 0.2f * c; });
  cache.prefill(x.data(), 4);
  for (int p = 4; p < 7; ++p) {
    append_token(kv, p);
    const float row[] = {0.1f, 0.4f, -0.2f, 0.0f, 0.3f};
    cache.decode_step(row, 5);
  }
  append_token(kv, 7);
  cache.restore_position_order();
  const std::int64_t* pos = cache.positions(0);
  EXPECT_TRUE(pos[0] < pos[1] && pos[1] < pos[2] && pos[2] < pos[3]);  // the tracked slots are sorted
  EXPECT_EQ(pos[4], 7);                                               // the pending token stays at slot n
  EXPECT_TRUE(kvtest::rows_aligned(kv));
}

}  // namespace
