// Tests of the baseline policies (StreamingLLM, window, TOVA) and the runtime factory.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::causal_logits;
using kvtest::rows_aligned;
using Positions = std::vector<std::int64_t>;

kvevict::CacheConfig config(std::size_t n_q, std::size_t k, std::size_t w) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  return c;
}

TEST(StreamingLLM, KeepsSinksPlusMostRecentWithOriginalPositions) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::StreamingLLM cache(config(1, 4, 0), kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{2});
  for (int p = 0; p < 6; ++p) append_token(kv, p);
  cache.prefill(nullptr, 6);  // no scores needed
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 4, 5}));
  append_token(kv, 6);
  cache.decode_step(nullptr, 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 5, 6}));
  EXPECT_EQ(cache.positions(0)[2], 6);  // position 4's slot was filled with the new token
  append_token(kv, 7);
  cache.decode_step(nullptr, 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 6, 7}));
  EXPECT_TRUE(rows_aligned(kv));
}

TEST(StreamingLLM, ShortPromptSinksAreTheOldestRetainedTokens) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::StreamingLLM cache(config(1, 4, 0), kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{3});
  append_token(kv, 0);
  append_token(kv, 1);
  cache.prefill(nullptr, 2);
  for (int p = 2; p <= 5; ++p) {
    append_token(kv, p);
    cache.decode_step(nullptr, kv.length(0));
  }
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 5}));
}

TEST(StreamingLLM, SinksLargerThanBudgetThrow) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  auto c = config(1, 2, 0);
  c.budget = kvevict::Budget::ratio(0.5);  // k = 2 at prefill (a token budget would throw at construction)
  kvevict::StreamingLLM cache(c, kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{3});
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  try {
    cache.prefill(nullptr, 4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::SinkRecentSelection: sinks = 3 exceeds budget k = 2");
  }
  EXPECT_EQ(kv.length(0), 4u);
}

TEST(Window, IsASlidingWindowOverPositions) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  auto cache = kvevict::make_cache(kvevict::Policy::window, config(2, 3, 0), kv);
  for (int p = 0; p < 6; ++p) append_token(kv, p);
  cache->prefill(nullptr, 6);
  EXPECT_EQ(cache->retained_positions(1), (Positions{3, 4, 5}));
  append_token(kv, 6);
  cache->decode_step(nullptr, 4);
  EXPECT_EQ(cache->retained_positions(0), (Positions{4, 5, 6}));
  EXPECT_EQ(cache->retained_positions(1), (Positions{4, 5, 6}));
}

TEST(TOVA, KeepsTopKOfTheCurrentStepsAttentionOnly) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::TOVA cache(config(1, 2, 0), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const float l3 = std::log(3.0f);
  // Only the last prompt row counts: softmax([0, ln3, 0]) = [1/5, 3/5, 1/5]; tie 0 vs 2 keeps 0.
  const auto x = causal_logits(1, 3, [&](auto, std::size_t r, std::size_t c) {
    if (r < 2) return c == 2 ? 0.0f : 9.0f;  // earlier rows would favour 0 and 1 heavily: ignored
    return c == 1 ? l3 : 0.0f;
  });
  cache.prefill(x.data(), 3);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 0.2f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.6f);
  append_token(kv, 3);
  // Slots hold positions [0, 1, 3]: softmax([0, 0, ln2]) = [1/4, 1/4, 1/2]; the score is replaced,
  // and the tie between 0 and 1 evicts the newer, 1.
  const float row[] = {0.0f, 0.0f, std::log(2.0f)};
  cache.decode_step(row, 3);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 2), (Positions{0, 3}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 0.25f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.5f);
}

TEST(TOVA, ARecentWindowOfOneKeepsTheNewestTokenAsKvpressDoes) {
  // The paper's TOVA evicts the token just added when its attention is the lowest; w = 1 (kvpress's TOVAPress)
  // keeps it and ranks only the older ones.
  for (const std::size_t w : {0u, 1u}) {
    kvevict::KVBuffer<float> buf(1, 8, 2);
    auto kv = buf.view();
    kvevict::TOVA cache(config(1, 2, w), kv);
    for (int p = 0; p < 2; ++p) append_token(kv, p);
    const auto x = causal_logits(1, 2, [](auto, std::size_t, std::size_t) { return 0.0f; });
    cache.prefill(x.data(), 2);
    append_token(kv, 2);
    // softmax([ln4, ln3, 0]) = [1/2, 3/8, 1/8]: the newest, position 2, has the lowest attention.
    const float row[] = {std::log(4.0f), std::log(3.0f), 0.0f};
    cache.decode_step(row, 3);
    const Positions kept(cache.positions(0), cache.positions(0) + 2);
    EXPECT_EQ(kept, (w == 0 ? Positions{0, 1} : Positions{0, 2})) << "w = " << w;
    EXPECT_FLOAT_EQ(cache.scores(0)[0], 0.5f) << "w = " << w;
    EXPECT_FLOAT_EQ(cache.scores(0)[1], w == 0 ? 0.375f : 0.125f) << "w = " << w;
  }
}

TEST(MakeCache, BuildsEveryPolicyAndValidates) {
  for (const char* name : {"keyformer", "h2o", "streaming", "window", "tova", "snapkv", "knorm", "keydiff"}) {
    kvevict::KVBuffer<float> buf(2, 16, 4);
    auto kv = buf.view();
    kvevict::PolicyParams params;
    params.horizon = 4;
    params.snap_window = 2;  // SnapKV: L <= k = 4
    auto cache = kvevict::make_cache(kvevict::parse_policy(name), config(4, 4, 0), kv, params);
    for (int p = 0; p < 8; ++p) append_token(kv, p);
    const auto x = causal_logits(4, 8, [](std::size_t h, std::size_t r, std::size_t c) {
      return std::sin(static_cast<float>(h * 31 + r * 7 + c));
    });
    cache->prefill(x.data(), 8);
    EXPECT_EQ(cache->length(0), 4u) << name;
    EXPECT_STREQ(kvevict::policy_name(kvevict::parse_policy(name)), name);
  }
  kvevict::KVBuffer<float> buf(2, 16, 4);
  EXPECT_THROW(kvevict::make_cache(kvevict::Policy::keyformer, config(4, 4, 0), buf.view()), std::invalid_argument);
  EXPECT_NO_THROW(kvevict::make_cache(kvevict::Policy::tova, config(4, 4, 1), buf.view()));  // kvpress's TOVAPress
  try {
    kvevict::parse_policy("h20");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kvevict::parse_policy: unknown policy 'h20' (expected keyformer, h2o, streaming, window, tova, "
                 "snapkv, knorm or keydiff)");
  }
}

}  // namespace
