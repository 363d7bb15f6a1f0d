// kvevict-replay semantics: hand-computed traces with exact kept sets and scores for every policy.
//
// Rows are written as `tau * ln(a_j)` over the columns a query can see, so that the softmax at
// temperature tau is exactly `a_j / sum(a)` and every score below is a sum of simple fractions.
// Entries of evicted columns are set to large values (100, 50, ...): they must never be read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "replay_test_support.hpp"

namespace {

using rtest::json;
using Kept = std::vector<std::vector<std::int64_t>>;
using Scores = std::vector<std::vector<double>>;

void expect_line(const json& line, std::size_t t, double tau, const Kept& kept, const Scores& scores) {
  SCOPED_TRACE(line.dump());
  EXPECT_EQ(line.at("t").get<std::size_t>(), t);
  EXPECT_NEAR(line.at("tau").get<double>(), tau, 1e-6);
  EXPECT_EQ(line.at("kept").get<Kept>(), kept);
  const Scores got = line.at("scores").get<Scores>();
  ASSERT_EQ(got.size(), scores.size());
  for (std::size_t h = 0; h < scores.size(); ++h) {
    ASSERT_EQ(got[h].size(), scores[h].size()) << "KV head " << h;
    for (std::size_t i = 0; i < scores[h].size(); ++i) EXPECT_NEAR(got[h][i], scores[h][i], 1e-5) << "KV head " << h;
  }
}

/// One head, P = 4, N = 6. Decode row t is scaled by tau_t (1 for H2O, τ_s for Keyformer).
///   prefill rows (τ = 1):  row0 {0:1}  row1 {0:1, 1:1}  row2 {0:2, 1:1, 2:1}  row3 {0:4, 1:1, 2:2, 3:1}
///   scores 0: 1 + 1/2 + 1/2 + 1/2 = 2.5   1: 1/2 + 1/4 + 1/8 = 0.875   2: 1/4 + 1/4 = 0.5   3: 1/8
///   k = 3, w = 1: recent {3}, key tokens top-2 of {0, 1, 2} = {0, 1}      -> [0, 1, 3]
///   t = 4 sees {0, 1, 3, 4} with weights {1, 1, 4, 2} / 8: scores 2.625, 1, 0.625, 0.25;
///         recent {4}; the lowest other is 3                             -> [0, 1, 4]
///   t = 5 sees {0, 1, 4, 5} with weights {1, 6, 2, 1} / 10: scores 2.725, 1.6, 0.45, 0.1;
///         recent {5}; the lowest other is 4                             -> [0, 1, 5]
replay::Trace two_step_trace(double tau4, double tau5) {
  replay::Trace tr = rtest::make_trace(1, 6, 4);
  rtest::set_row(tr, 0, 0, {{0, 1}});
  rtest::set_row(tr, 0, 1, {{0, 1}, {1, 1}});
  rtest::set_row(tr, 0, 2, {{0, 2}, {1, 1}, {2, 1}});
  rtest::set_row(tr, 0, 3, {{0, 4}, {1, 1}, {2, 2}, {3, 1}});
  rtest::set_row(tr, 0, 4, {{0, 1}, {1, 1}, {3, 4}, {4, 2}}, tau4);
  rtest::set_entry(tr, 0, 4, 2, 100.0f);  // evicted at prefill
  rtest::set_row(tr, 0, 5, {{0, 1}, {1, 6}, {4, 2}, {5, 1}}, tau5);
  rtest::set_entry(tr, 0, 5, 2, 50.0f);  // evicted
  rtest::set_entry(tr, 0, 5, 3, -7.0f);  // evicted at t = 4
  return tr;
}

void expect_two_step(const rtest::Run& run, double tau3, double tau4, double tau5) {
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, tau3, {{0, 1, 3}}, {{2.5, 0.875, 0.125}});
  expect_line(lines[1], 4, tau4, {{0, 1, 4}}, {{2.625, 1.0, 0.25}});
  expect_line(lines[2], 5, tau5, {{0, 1, 5}}, {{2.725, 1.6, 0.1}});
}

TEST(ReplaySemantics, SelectionExampleAsOneStepTrace) {
  // README: select_keep([0.40, 0.20, 0.10, 0.05, 0.25], k=3, w=1) = [0, 1, 4]. As a trace: P = N = 5,
  // rows 0..3 fully masked (-inf: they add nothing), row 4 = ln(scores): prefill's scores are
  // exactly the example's, and the cut keeps the recent token 4 plus the top two of 0..3.
  rtest::TempDir dir;
  replay::Trace tr = rtest::make_trace(1, 5, 5);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t j = 0; j <= t; ++j) rtest::set_entry(tr, 0, t, j, -rtest::kInf);
  rtest::set_row(tr, 0, 4, {{0, 0.40}, {1, 0.20}, {2, 0.10}, {3, 0.05}, {4, 0.25}});
  replay::save_trace_npy(tr, dir.file("example.npy"));
  for (const char* policy : {"h2o", "keyformer --noise none"}) {
    const auto run = rtest::run_replay(
        dir, "--logits " + dir.file("example.npy") + " --prompt-len 5 --budget 3 --recent 1 --policy " + policy);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const auto lines = run.lines();
    ASSERT_EQ(lines.size(), 1u);
    expect_line(lines[0], 4, 1.0, {{0, 1, 4}}, {{0.40, 0.20, 0.25}});
  }
}

TEST(ReplaySemantics, H2OTwoSteps) {
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_step_trace(1.0, 1.0));
  expect_two_step(rtest::run_replay(dir, file + " --policy h2o --budget 3 --recent 1"), 1, 1, 1);
}

TEST(ReplaySemantics, KeyformerWithoutNoiseTwoSteps) {
  // τ = 1, 1.5, 2 (τ_init 1, τ_end 2, T = N - P = 2): the trace's decode rows are scaled by τ, so
  // softmax(x / τ) gives the same fractions as above.
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_step_trace(1.5, 2.0));
  expect_two_step(rtest::run_replay(dir, file + " --policy keyformer --noise none --budget 3 --recent 1"), 1, 1.5, 2);
}

TEST(ReplaySemantics, KeyformerTemperatureSchedule) {
  rtest::TempDir dir;
  // τ_s = τ_init + s (τ_end - τ_init) / T: T = 4, τ_end = 3 gives 1.5 and 2 again.
  auto file = rtest::save_json(dir, "a.json", two_step_trace(1.5, 2.0));
  expect_two_step(rtest::run_replay(dir, file + " --noise none --budget 3 --recent 1 --tau-end 3 --gen-steps 4"), 1,
                  1.5, 2);
  // Held at τ_end after T steps: T = 1, τ_end = 1.5 gives 1.5, 1.5.
  file = rtest::save_json(dir, "b.json", two_step_trace(1.5, 1.5));
  expect_two_step(rtest::run_replay(dir, file + " --noise none --budget 3 --recent 1 --tau-end 1.5 --gen-steps 1"), 1,
                  1.5, 1.5);
  // τ_init scales the prefill: τ_init = 2 on prefill rows scaled by 2 (τ_end = 2 holds).
  replay::Trace tr = two_step_trace(2.0, 2.0);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t j = 0; j <= t; ++j) tr.logits[tr.index(0, t, j)] *= 2.0f;
  file = rtest::save_json(dir, "c.json", tr);
  expect_two_step(rtest::run_replay(dir, file + " --noise none --budget 3 --recent 1 --tau-init 2 --tau-end 2"), 2, 2,
                  2);
}

TEST(ReplaySemantics, KeyformerAddsInjectedGumbelBeforeDividingByTau) {
  // x = the τ = 1 trace, ζ = (τ_s - 1) x on the decode rows: softmax((x + ζ) / τ_s) = softmax(x).
  rtest::TempDir dir;
  replay::Trace tr = two_step_trace(1.0, 1.0);
  const replay::Trace scaled = two_step_trace(1.5, 2.0);
  tr.gumbel.assign(tr.logits.size(), 0.0f);
  for (std::size_t t = 4; t < 6; ++t)
    for (std::size_t j = 0; j <= t; ++j) tr.gumbel[tr.index(0, t, j)] = scaled.logit(0, t, j) - tr.logit(0, t, j);
  const auto file = rtest::save_json(dir, "t.json", tr);
  expect_two_step(rtest::run_replay(dir, file + " --policy keyformer --noise trace --budget 3 --recent 1"), 1, 1.5, 2);
  // --noise auto uses the trace's gumbel too.
  expect_two_step(rtest::run_replay(dir, file + " --budget 3 --recent 1"), 1, 1.5, 2);
  // Without the noise the τ-scaled decode scores differ: at t = 5 the weights are {1, 6^(1/2), 2^(1/2), 1}.
  const auto run = rtest::run_replay(dir, file + " --noise none --budget 3 --recent 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.lines().at(2).at("scores"), json::parse("[[2.725,1.6,0.1]]"));
}

TEST(ReplaySemantics, TovaTwoStepsKeepsTopOfTheCurrentRowAndBreaksTiesForTheOlder) {
  //   prefill uses the last prompt row only: {0:4, 1:1, 2:2, 3:1} / 8; k = 3, w = 0: 0 and 2, then
  //     1 and 3 tie at 1/8 and the older (1) stays                       -> [0, 1, 2]
  //   t = 4 sees {0, 1, 2, 4}, weights {1, 2, 4, 1} / 8: 0 and 4 tie, the newer (4) goes -> [0, 1, 2]
  //   t = 5 sees {0, 1, 2, 5}, weights {4, 1, 1, 2} / 8: 1 and 2 tie, 2 goes            -> [0, 1, 5]
  rtest::TempDir dir;
  replay::Trace tr = rtest::make_trace(1, 6, 4);
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t j = 0; j <= t; ++j) rtest::set_entry(tr, 0, t, j, 0.0f);  // not read by TOVA
  rtest::set_row(tr, 0, 3, {{0, 4}, {1, 1}, {2, 2}, {3, 1}});
  rtest::set_row(tr, 0, 4, {{0, 1}, {1, 2}, {2, 4}, {4, 1}});
  rtest::set_entry(tr, 0, 4, 3, 100.0f);
  rtest::set_row(tr, 0, 5, {{0, 4}, {1, 1}, {2, 1}, {5, 2}});
  rtest::set_entry(tr, 0, 5, 3, 100.0f);
  rtest::set_entry(tr, 0, 5, 4, 100.0f);
  const auto file = rtest::save_json(dir, "t.json", tr);
  const auto run = rtest::run_replay(dir, file + " --policy tova --budget 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{0, 1, 2}}, {{0.5, 0.125, 0.25}});
  expect_line(lines[1], 4, 1, {{0, 1, 2}}, {{0.125, 0.25, 0.5}});
  expect_line(lines[2], 5, 1, {{0, 1, 5}}, {{0.5, 0.125, 0.25}});
}

TEST(ReplaySemantics, TovaWithARecentWindowOfOneKeepsTheNewestToken) {
  //   prefill, last prompt row {0:2, 1:1, 2:1} / 4, k = 2. w = 0: 0, then 1 and 2 tie and the older stays -> [0, 1];
  //     w = 1 (--recent 1, kvpress's TOVAPress): 2 is the window, 0 the top of the rest     -> [0, 2]
  //   t = 3, row {0:2, 1:1, 2:1, 3:1} / 4 over what each holds: w = 0 sees {0, 1, 3}, 1 and 3 tie and the newest (3)
  //     goes -> [0, 1]; w = 1 sees {0, 2, 3}, keeps 3 and the top of {0, 2}              -> [0, 3]
  rtest::TempDir dir;
  replay::Trace tr = rtest::make_trace(1, 4, 3);
  for (std::size_t t = 0; t < 2; ++t)
    for (std::size_t j = 0; j <= t; ++j) rtest::set_entry(tr, 0, t, j, 0.0f);  // not read by TOVA
  rtest::set_row(tr, 0, 2, {{0, 2}, {1, 1}, {2, 1}});
  rtest::set_row(tr, 0, 3, {{0, 2}, {1, 1}, {2, 1}, {3, 1}});
  const auto file = rtest::save_json(dir, "t.json", tr);
  const auto paper = rtest::run_replay(dir, file + " --policy tova --budget 2");
  const auto kvpress = rtest::run_replay(dir, file + " --policy tova --budget 2 --recent 1");
  ASSERT_EQ(paper.exit_code, 0) << paper.err;
  ASSERT_EQ(kvpress.exit_code, 0) << kvpress.err;
  const auto p = paper.lines(), q = kvpress.lines();
  ASSERT_EQ(p.size(), 2u);
  ASSERT_EQ(q.size(), 2u);
  expect_line(p[0], 2, 1, {{0, 1}}, {{0.5, 0.25}});
  expect_line(p[1], 3, 1, {{0, 1}}, {{0.5, 0.25}});
  expect_line(q[0], 2, 1, {{0, 2}}, {{0.5, 0.25}});
  expect_line(q[1], 3, 1, {{0, 3}}, {{0.5, 0.25}});
  EXPECT_NE(kvpress.err.find("[tova k=2 w=1 sinks=0]"), std::string::npos) << kvpress.err;
}

TEST(ReplaySemantics, StreamingAndWindowTwoSteps) {
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_step_trace(1.0, 1.0));
  auto run = rtest::run_replay(dir, file + " --policy streaming --sinks 1 --budget 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{0, 2, 3}}, {{0, 0, 0}});
  expect_line(lines[1], 4, 1, {{0, 3, 4}}, {{0, 0, 0}});
  expect_line(lines[2], 5, 1, {{0, 4, 5}}, {{0, 0, 0}});

  run = rtest::run_replay(dir, file + " --policy window --budget 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{1, 2, 3}}, {{0, 0, 0}});
  expect_line(lines[1], 4, 1, {{2, 3, 4}}, {{0, 0, 0}});
  expect_line(lines[2], 5, 1, {{3, 4, 5}}, {{0, 0, 0}});
}

/// Two query heads over two KV heads (g = 1): head 0 is `two_step_trace`; head 1 keeps other tokens.
///   head 1 prefill: row0 {0:1}  row1 {0:1, 1:3}  row2 {0:1, 1:1, 2:6}  row3 {0:1, 1:1, 2:4, 3:2}
///     scores 0: 1 + 1/4 + 1/8 + 1/8 = 1.5   1: 3/4 + 1/8 + 1/8 = 1   2: 3/4 + 1/2 = 1.25   3: 1/4
///     recent {3}, top-2 of {0, 1, 2} = {0, 2}                              -> [0, 2, 3]
///   t = 4 sees {0, 2, 3, 4}, weights {1, 1, 4, 2} / 8: 1.625, 1.375, 0.75, 0.25; 3 goes -> [0, 2, 4]
///   t = 5 sees {0, 2, 4, 5}, weights {2, 1, 6, 1} / 10: 1.825, 1.475, 0.85, 0.1; 4 goes -> [0, 2, 5]
/// Row t of each head has large values at the columns only the *other* KV head retains.
replay::Trace two_head_trace() {
  replay::Trace one = two_step_trace(1.0, 1.0);
  replay::Trace tr = rtest::make_trace(2, 6, 4);
  std::copy(one.logits.begin(), one.logits.end(), tr.logits.begin());
  rtest::set_row(tr, 1, 0, {{0, 1}});
  rtest::set_row(tr, 1, 1, {{0, 1}, {1, 3}});
  rtest::set_row(tr, 1, 2, {{0, 1}, {1, 1}, {2, 6}});
  rtest::set_row(tr, 1, 3, {{0, 1}, {1, 1}, {2, 4}, {3, 2}});
  rtest::set_row(tr, 1, 4, {{0, 1}, {2, 1}, {3, 4}, {4, 2}});
  rtest::set_entry(tr, 1, 4, 1, 100.0f);
  rtest::set_row(tr, 1, 5, {{0, 2}, {2, 1}, {4, 6}, {5, 1}});
  rtest::set_entry(tr, 1, 5, 1, 50.0f);
  rtest::set_entry(tr, 1, 5, 3, -7.0f);
  return tr;
}

TEST(ReplaySemantics, EachKVHeadReadsItsOwnRetainedPositions) {
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_head_trace());
  const auto run = rtest::run_replay(dir, file + " --policy h2o --budget 3 --recent 1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{0, 1, 3}, {0, 2, 3}}, {{2.5, 0.875, 0.125}, {1.5, 1.25, 0.25}});
  expect_line(lines[1], 4, 1, {{0, 1, 4}, {0, 2, 4}}, {{2.625, 1.0, 0.25}, {1.625, 1.375, 0.25}});
  expect_line(lines[2], 5, 1, {{0, 1, 5}, {0, 2, 5}}, {{2.725, 1.6, 0.1}, {1.825, 1.475, 0.1}});
}

TEST(ReplaySemantics, SharedHeadsSelectOnceFromScoresSummedOverKVHeads) {
  // Summed prefill scores: 2.5 + 1.5 = 4, 0.875 + 1 = 1.875, 0.5 + 1.25 = 1.75, 0.125 + 0.25 = 0.375:
  // recent {3}, top-2 of {0, 1, 2} = {0, 1} for both heads; each head reports its own scores.
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_head_trace());
  const auto run = rtest::run_replay(dir, file + " --policy h2o --budget 3 --recent 1 --shared-heads");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{0, 1, 3}, {0, 1, 3}}, {{2.5, 0.875, 0.125}, {1.5, 1.0, 0.25}});
  for (const auto& line : lines) EXPECT_EQ(line["kept"][0], line["kept"][1]) << line.dump();
}

TEST(ReplaySemantics, GroupedQueryHeadsSumIntoTheirKVHead) {
  // g = 2 (given on the command line): both query heads feed KV head 0, whose prefill scores are
  // the sums above.
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_head_trace());
  const auto run = rtest::run_replay(dir, file + " --policy h2o --budget 3 --recent 1 --q-heads-per-kv 2");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 3u);
  expect_line(lines[0], 3, 1, {{0, 1, 3}}, {{4.0, 1.875, 0.375}});
}

TEST(ReplaySemantics, BudgetAndRecentRatiosResolveAsTheLibraryDoes) {
  // k = floor(0.75 * 4) = 3, w = floor(0.34 * 3) = 1: the same run as --budget 3 --recent 1.
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", two_step_trace(1.0, 1.0));
  expect_two_step(rtest::run_replay(dir, file + " --policy h2o --budget-ratio 0.75 --recent-ratio 0.34"), 1, 1, 1);
}

TEST(ReplaySemantics, GeneratedNoiseIsSeededAndDeterministic) {
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", rtest::random_trace(4, 32, 16, 2, false));
  const std::string args = file + " --policy keyformer --budget 8 --recent 2";
  const auto a = rtest::run_replay(dir, args + " --noise gumbel --seed 7");
  const auto b = rtest::run_replay(dir, args + " --noise gumbel --seed 7");
  const auto c = rtest::run_replay(dir, args + " --noise gumbel --seed 8");
  const auto none = rtest::run_replay(dir, args + " --noise none");
  const auto automatic = rtest::run_replay(dir, args + " --seed 7");  // no gumbel in the trace: generator
  for (const auto* r : {&a, &b, &c, &none, &automatic}) ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out, automatic.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.out, none.out);
  EXPECT_EQ(a.lines().size(), 17u);
}

TEST(ReplaySemantics, EveryLineKeepsMinOfBudgetAndTokensWithTheRecentWindow) {
  rtest::TempDir dir;
  const auto file = rtest::save_json(dir, "t.json", rtest::random_trace(4, 40, 12, 2, true));
  const auto run = rtest::run_replay(dir, file + " --policy keyformer --budget 10 --recent 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 29u);
  for (const auto& line : lines) {
    const auto t = line.at("t").get<std::int64_t>();
    const Kept kept = line.at("kept").get<Kept>();
    ASSERT_EQ(kept.size(), 2u);
    for (const auto& head : kept) {
      ASSERT_EQ(head.size(), 10u) << line.dump();
      EXPECT_TRUE(std::is_sorted(head.begin(), head.end()));
      EXPECT_EQ(head.back(), t);
      EXPECT_EQ(head[7], t - 2);  // the recent window: t - 2, t - 1, t
    }
  }
}

}  // namespace
