// The oracle bound of kvevict-quality (bench/quality/oracle.hpp) on a 2-step hand example: the
// future-attention table (softmax per query head, summed over the GQA group, suffix sums over the
// steps) and the tokens the oracle keeps at the prefill cut and at each decode step.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kv/kv_buffer.hpp>

#include "oracle.hpp"

namespace {

// logits = log(p), so that each row's softmax is p exactly (up to rounding).
std::vector<float> logs(const std::vector<double>& p) {
  std::vector<float> out;
  for (double v : p) out.push_back(static_cast<float>(std::log(v)));
  return out;
}

void append(kvevict::KVView<float> kv, std::int64_t pos) {
  const float k[] = {static_cast<float>(pos), 0.0f}, v[] = {0.0f, 0.0f};
  kv.append(pos, k, v);
}

// 1 layer, 1 KV head with 2 query heads (GQA group 2), prompt of 4 tokens (positions 0..3), two
// decode steps (positions 4 and 5), budget k = 3, recent window w = 1.
//   step 0 (n = 5): q0 = (.1 .4 .2 .1 .2), q1 = (.2 .2 .2 .2 .2)         -> sum (.3 .6 .4 .3 .4)
//   step 1 (n = 6): q0 = (.3 .05 .05 .3 .1 .2), q1 = (.1 .1 .1 .3 .2 .2) -> sum (.4 .15 .15 .6 .3 .4)
// future(0) = (.7 .75 .55 .9 .7 .4), future(1) = (.4 .15 .15 .6 .3 .4), future(2) = 0.
kvquality::FutureAttention hand_table() {
  kvquality::FutureAttention table;
  table.reset(1, 1, 2, 2, 6);
  const std::vector<std::int64_t> pos{0, 1, 2, 3, 4, 5};
  std::vector<float> s0 = logs({.1, .4, .2, .1, .2}), q1 = logs({.2, .2, .2, .2, .2});
  s0.insert(s0.end(), q1.begin(), q1.end());
  std::vector<float> s1 = logs({.3, .05, .05, .3, .1, .2}), r1 = logs({.1, .1, .1, .3, .2, .2});
  s1.insert(s1.end(), r1.begin(), r1.end());
  table.add_step(0, 0, s0.data(), 5, pos.data());
  table.add_step(0, 1, s1.data(), 6, pos.data());
  table.finish();
  return table;
}

TEST(Oracle, FutureAttentionSumsTheGroupAndTheRestOfTheSteps) {
  const kvquality::FutureAttention table = hand_table();
  const std::vector<double> f0{.7, .75, .55, .9, .7, .4}, f1{.4, .15, .15, .6, .3, .4};
  for (std::size_t p = 0; p < 6; ++p) {
    EXPECT_NEAR(table.future(0, 0, 0)[p], f0[p], 1e-6) << p;
    EXPECT_NEAR(table.future(0, 0, 1)[p], f1[p], 1e-6) << p;
    EXPECT_EQ(table.future(0, 0, 2)[p], 0.0) << p;
  }
  EXPECT_THROW(table.future(0, 0, 3), std::invalid_argument);
  EXPECT_THROW(table.future(1, 0, 0), std::invalid_argument);
}

TEST(Oracle, TwoStepHandExampleKeepsWhatTheFutureAttends) {
  const kvquality::FutureAttention table = hand_table();
  kvevict::KVBuffer<float> store(1, 8, 2);
  auto kv = store.view();
  kvevict::CacheConfig config;
  config.n_q_heads = 2;
  config.budget = kvevict::Budget::tokens(3);
  config.recent = kvevict::RecentWindow::tokens(1);
  kvquality::OracleCache oracle(config, kv, table, 0);
  for (std::int64_t p = 0; p < 4; ++p) append(kv, p);
  const std::vector<float> ignored(2 * 8, 0.0f);
  // Prefill cut: recent = {3}; of 0, 1, 2 the two with the largest future(0): 1 (.75) and 0 (.7).
  oracle.prefill(nullptr, 4);
  EXPECT_EQ(oracle.retained_positions(0), (std::vector<std::int64_t>{0, 1, 3}));
  // Step 0: recent = {4}; future(1) of 0, 1, 3 = .4, .15, .6: position 1 goes.
  append(kv, 4);
  oracle.decode_step(ignored.data(), 4);
  EXPECT_EQ(oracle.retained_positions(0), (std::vector<std::int64_t>{0, 3, 4}));
  // Step 1 (the window's last): nothing is attended any more (future(2) = 0): a tie, and ties keep
  // the older token, so the newest non-recent token, 4, goes.
  append(kv, 5);
  oracle.decode_step(ignored.data(), 4);
  EXPECT_EQ(oracle.retained_positions(0), (std::vector<std::int64_t>{0, 3, 5}));
  EXPECT_EQ(oracle.step(), 2u);
  // A third step is beyond the table.
  append(kv, 6);
  EXPECT_THROW(oracle.decode_step(ignored.data(), 4), std::logic_error);
}

TEST(Oracle, RejectsSharedHeadsAndAMismatchedGroup) {
  const kvquality::FutureAttention table = hand_table();
  kvevict::KVBuffer<float> store(1, 8, 2);
  kvevict::CacheConfig config;
  config.n_q_heads = 2;
  config.budget = kvevict::Budget::tokens(3);
  config.shared_heads = true;
  EXPECT_THROW(kvquality::OracleCache(config, store.view(), table, 0), std::invalid_argument);
  config.shared_heads = false;
  config.n_q_heads = 1;
  EXPECT_THROW(kvquality::OracleCache(config, store.view(), table, 0), std::invalid_argument);
  kvquality::FutureAttention empty;
  EXPECT_THROW(empty.reset(1, 1, 1, 0, 4), std::invalid_argument);
  const std::vector<float> row{0.0f, 0.0f};
  const std::vector<std::int64_t> bad{0, 9};
  kvquality::FutureAttention t;
  t.reset(1, 1, 1, 1, 4);
  EXPECT_THROW(t.add_step(0, 0, row.data(), 2, bad.data()), std::invalid_argument);
  EXPECT_THROW(t.future(0, 0, 0), std::logic_error);
}

}  // namespace
