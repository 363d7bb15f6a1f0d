// tests/cache_test.cpp — kvevict::Cache with exact expected values: H2O's accumulated scores, the prefill cut and
// decode eviction, GQA and KV heads, temperature, and eviction that is permanent with original positions and
// aligned rows. Gumbel noise: cache_noise_test.cpp; bad input: cache_errors_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "cache_test_util.hpp"
#include "test_util.hpp"

namespace {

using cache_test::config;
using cache_test::kInf;
using cache_test::Positions;
using kvtest::append_token;
using kvtest::causal_logits;
using kvtest::rows_aligned;

using DeterministicKeyformer =
    kvevict::Cache<kvevict::GumbelLogitScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;

// ---------------------------------------------------------------------------
// Score accumulation (H2O), prefill cut, decode eviction with hole filling.

TEST(Cache, H2OPrefillScoresEvictsAndFillsTheHoleWithTheLastSlot) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 2, 1), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  // All-zero logits: rows give [1], [1/2, 1/2], [1/3, 1/3, 1/3].
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 2), (Positions{0, 2}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 0.5f + 1.0f / 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 1.0f / 3);
  EXPECT_TRUE(rows_aligned(kv));

  // Decode: position 3 joins; uniform row adds 1/3 each; position 2 (score 2/3) goes,
  // its slot 1 is filled with the new token from slot 2.
  append_token(kv, 3);
  const float row[] = {0.0f, 0.0f, 0.0f};
  cache.decode_step(row, 3);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 2), (Positions{0, 3}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 0.5f + 2.0f / 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 1.0f / 3);  // the new token's own-step score
  EXPECT_TRUE(rows_aligned(kv));
  EXPECT_EQ(cache.step(), 1u);
}

TEST(Cache, NewTokenJoinsWithItsOwnStepScoreAndNothingEvictedBelowBudget) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 5, 1), kv);
  append_token(kv, 0);
  const float x0[] = {0.0f};
  cache.prefill(x0, 1);
  append_token(kv, 1);
  const float row[] = {0.0f, std::log(3.0f)};
  cache.decode_step(row, 2);
  ASSERT_EQ(cache.length(0), 2u);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.25f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.75f);
}

TEST(Cache, MinusInfinityLogitsAddNothing) {
  kvevict::KVBuffer<float> buf(1, 9, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 8, 0), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  // Token 1 is masked for every query.
  const auto x = causal_logits(1, 3, [](auto, auto, std::size_t c) { return c == 1 ? -kInf : 0.0f; });
  cache.prefill(x.data(), 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.0f + 1.0f + 0.5f);
  EXPECT_EQ(cache.scores(0)[1], 0.0f);
  EXPECT_FLOAT_EQ(cache.scores(0)[2], 0.5f);
}

// ---------------------------------------------------------------------------
// GQA and heads.

TEST(Cache, GqaScoreOfAKvHeadIsTheSumOverItsQueryHeads) {
  // 2 KV heads, 4 query heads: q0, q1 -> kv0; q2, q3 -> kv1.
  kvevict::KVBuffer<float> buf(2, 9, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(4, 8, 0), kv);
  append_token(kv, 0);
  append_token(kv, 1);
  // Row 1 per query head: q0 [0, ln3] q1 [0, 0] q2 [ln3, 0] q3 [-inf, 0]; row 0 gives 1 each.
  const float l3 = std::log(3.0f);
  const float rows[4][2] = {{0.0f, l3}, {0.0f, 0.0f}, {l3, 0.0f}, {-kInf, 0.0f}};
  const auto x = causal_logits(4, 2, [&](std::size_t h, std::size_t r, std::size_t c) {
    return r == 0 ? 0.0f : rows[h][c];
  });
  cache.prefill(x.data(), 2);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 2.0f + 0.25f + 0.5f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.75f + 0.5f);
  EXPECT_FLOAT_EQ(cache.scores(1)[0], 2.0f + 0.75f + 0.0f);
  EXPECT_FLOAT_EQ(cache.scores(1)[1], 0.25f + 1.0f);
  EXPECT_EQ(cache.group_size(), 2u);
}

TEST(Cache, KvHeadsSelectIndependentlyOrSharedWhenAsked) {
  // Head 0 attends to token 0, head 1 to token 1; k = 2, w = 1 keeps token 2 plus one key token.
  const auto x = causal_logits(2, 3, [](std::size_t h, std::size_t r, std::size_t c) {
    if (r == 0) return 0.0f;
    return c == h ? 5.0f : 0.0f;
  });
  {
    kvevict::KVBuffer<float> buf(2, 8, 2);
    auto kv = buf.view();
    kvevict::H2O cache(config(2, 2, 1), kv);
    for (int p = 0; p < 3; ++p) append_token(kv, p);
    cache.prefill(x.data(), 3);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{1, 2}));
    EXPECT_TRUE(rows_aligned(kv));
  }
  {
    kvevict::KVBuffer<float> buf(2, 8, 2);
    auto kv = buf.view();
    auto c = config(2, 2, 1);
    c.shared_heads = true;
    kvevict::H2O cache(c, kv);
    for (int p = 0; p < 3; ++p) append_token(kv, p);
    cache.prefill(x.data(), 3);
    // Summed over heads token 0 has 1 + p0 + p0' > token 1: both heads keep {0, 2}.
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2}));
    EXPECT_EQ(cache.retained_positions(1), (Positions{0, 2}));
    EXPECT_TRUE(rows_aligned(kv));
  }
}

// ---------------------------------------------------------------------------
// Temperature.

TEST(Cache, HigherTemperatureFlattensOneStepButKeepsItsOrder) {
  auto run = [](float tau) {
    kvevict::KVBuffer<float> buf(1, 9, 2);
    auto kv = buf.view();
    DeterministicKeyformer cache(config(1, 8, 0), kv, kvevict::GumbelLogitScore{false},
                                 kvevict::ConstantTemperature(tau));
    for (int p = 0; p < 4; ++p) append_token(kv, p);
    const float row[] = {2.0f, 0.5f, -1.0f, 1.0f};
    // Only the last row matters for the comparison: the others are masked out.
    const auto x = causal_logits(1, 4, [&](auto, std::size_t r, std::size_t c) {
      return r == 3 ? row[c] : (c == r ? 0.0f : -kInf);
    });
    cache.prefill(x.data(), 4);
    std::vector<float> inc(cache.scores(0), cache.scores(0) + 4);
    inc[0] -= 1.0f;  // rows 0..2 gave their own token 1 each
    inc[1] -= 1.0f;
    inc[2] -= 1.0f;
    return inc;
  };
  const auto cold = run(1.0f), hot = run(2.0f);
  EXPECT_NEAR(cold[0], std::exp(2.0) / (std::exp(2.0) + std::exp(0.5) + std::exp(-1.0) + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(hot[0], std::exp(1.0) / (std::exp(1.0) + std::exp(0.25) + std::exp(-0.5) + std::exp(0.5)), 1e-6);
  for (std::size_t a = 0; a < 4; ++a)
    for (std::size_t b = 0; b < 4; ++b) EXPECT_EQ(cold[a] < cold[b], hot[a] < hot[b]);
  EXPECT_LT(hot[0], cold[0]);
  EXPECT_GT(hot[2], cold[2]);
}

TEST(Cache, TemperatureOverSeveralRowsCanChangeTheSelectionButNeverTheBudget) {
  // Found by search (see commit message): k = 2, w = 1 keeps token 3 plus the best of {0, 1, 2}.
  // tau = 1: scores [1.380, 1.456, 1.132] -> keeps 1; tau = 2: [1.645, 1.348, 0.905] -> keeps 0.
  const float L[4][4] = {{3, 0, 0, 0}, {-3, -1, 0, 0}, {0, 3, 3, 0}, {0, -1, 1, -2}};
  auto run = [&](float tau) {
    kvevict::KVBuffer<float> buf(1, 8, 2);
    auto kv = buf.view();
    DeterministicKeyformer cache(config(1, 2, 1), kv, kvevict::GumbelLogitScore{false},
                                 kvevict::ConstantTemperature(tau));
    for (int p = 0; p < 4; ++p) append_token(kv, p);
    const auto x = causal_logits(1, 4, [&](auto, std::size_t r, std::size_t c) { return L[r][c]; });
    cache.prefill(x.data(), 4);
    EXPECT_EQ(cache.length(0), 2u);
    return cache.retained_positions(0);
  };
  EXPECT_EQ(run(1.0f), (Positions{1, 3}));
  EXPECT_EQ(run(2.0f), (Positions{0, 3}));
}

TEST(Cache, KeyformerUsesTauInitAtPrefillAndTheLinearScheduleAfter) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(1, 3, 1), kv, kvevict::GumbelLogitScore{false},
                           kvevict::LinearTemperature(1.0f, 2.0f, 2));
  append_token(kv, 0);
  const float x0[] = {0.0f};
  cache.prefill(x0, 1);
  EXPECT_FLOAT_EQ(cache.temperature(), 1.0f);
  std::vector<float> row(8, 0.0f);
  const float expected_tau[] = {1.5f, 2.0f, 2.0f, 2.0f};
  for (int t = 1; t <= 4; ++t) {
    append_token(kv, t);
    row[0] = 2.0f;  // tau divides this logit
    cache.decode_step(row.data(), kv.length(0));
    EXPECT_FLOAT_EQ(cache.temperature(), expected_tau[t - 1]);
    EXPECT_LE(cache.length(0), 3u);  // the budget, whatever tau
  }
  // Step 1 at tau = 1.5 on [2, 0]: token 0 gains e^(2/1.5) / (e^(2/1.5) + 1).
  kvevict::KVBuffer<float> buf2(1, 16, 2);
  auto kv2 = buf2.view();
  kvevict::Keyformer one(config(1, 3, 1), kv2, kvevict::GumbelLogitScore{false},
                         kvevict::LinearTemperature(1.0f, 2.0f, 2));
  append_token(kv2, 0);
  one.prefill(x0, 1);
  append_token(kv2, 1);
  const float r1[] = {2.0f, 0.0f};
  one.decode_step(r1, 2);
  const double e = std::exp(2.0 / 1.5);
  EXPECT_NEAR(one.scores(0)[0], 1.0 + e / (e + 1.0), 1e-6);
}

// ---------------------------------------------------------------------------
// Eviction is permanent, positions are original, rows stay aligned (float and 16-bit).

template <class T>
void long_run_keeps_rows_aligned_and_never_readmits() {
  kvevict::KVBuffer<T> buf(2, 12, 4);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(4, 6, 2, 9), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 12));
  for (int p = 0; p < 8; ++p) append_token(kv, p);
  kvevict::Xoshiro256pp gen(1);
  std::vector<float> x(4 * 8 * 8);
  kvevict::fill_gumbel(gen, x.data(), x.size());  // arbitrary finite logits
  cache.prefill(x.data(), 8);
  std::vector<std::vector<bool>> gone(2, std::vector<bool>(20, false));
  for (int t = 8; t < 20; ++t) {
    std::vector<Positions> before{cache.retained_positions(0), cache.retained_positions(1)};
    append_token(kv, t);
    std::vector<float> row(4 * kv.length(0));
    kvevict::fill_gumbel(gen, row.data(), row.size());
    cache.decode_step(row.data(), kv.length(0));
    ASSERT_TRUE(rows_aligned(kv));
    for (std::size_t h = 0; h < 2; ++h) {
      const Positions now = cache.retained_positions(h);
      ASSERT_EQ(now.size(), 6u);
      for (std::int64_t p : before[h])
        if (!std::binary_search(now.begin(), now.end(), p)) gone[h][static_cast<std::size_t>(p)] = true;
      for (std::int64_t p : now) ASSERT_FALSE(gone[h][static_cast<std::size_t>(p)]) << "position " << p << " returned";
      // The recent window (w = 2) is the two newest positions.
      ASSERT_EQ(now[5], t);
      ASSERT_EQ(now[4], t - 1);
    }
  }
  cache.restore_position_order();
  ASSERT_TRUE(rows_aligned(kv));
  for (std::size_t h = 0; h < 2; ++h) {
    const Positions slots(cache.positions(h), cache.positions(h) + cache.length(h));
    EXPECT_EQ(slots, cache.retained_positions(h));
  }
}

TEST(Cache, FloatRowsStayAlignedAndEvictedTokensNeverReturn) { long_run_keeps_rows_aligned_and_never_readmits<float>(); }
TEST(Cache, HalfRowsStayAlignedAndEvictedTokensNeverReturn) {
  long_run_keeps_rows_aligned_and_never_readmits<Eigen::half>();
}
TEST(Cache, BFloat16RowsStayAlignedAndEvictedTokensNeverReturn) {
  long_run_keeps_rows_aligned_and_never_readmits<Eigen::bfloat16>();
}

TEST(Cache, RestorePositionOrderKeepsScoresWithTheirTokens) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 3, 1), kv);
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);  // scores [11/6, 5/6, 1/3], nothing evicted
  // Step 1: position 0 masked; 1, 2, 3 gain 1/3 -> [11/6, 7/6, 2/3, 1/3]; 2 goes, its slot takes 3.
  append_token(kv, 3);
  const float row1[] = {-kInf, 0.0f, 0.0f, 0.0f};
  cache.decode_step(row1, 4);
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 1, 3}));
  // Step 2: only position 3 attended (+1 -> 4/3); 1 (7/6) goes, its slot takes 4.
  append_token(kv, 4);
  const float row2[] = {-kInf, -kInf, 0.0f, -kInf};
  cache.decode_step(row2, 4);
  ASSERT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 4, 3}));
  cache.restore_position_order();
  EXPECT_EQ(Positions(cache.positions(0), cache.positions(0) + 3), (Positions{0, 3, 4}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 11.0f / 6);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 4.0f / 3);
  EXPECT_EQ(cache.scores(0)[2], 0.0f);
  EXPECT_TRUE(rows_aligned(kv));
}

// restore_position_order() moves tokens between slots; the recent window
// (kept by slot inside the cache) must follow them: a cache that sorts its
// slots every few steps keeps exactly what an unsorted twin keeps.
TEST(Cache, DecodingAfterRestorePositionOrderKeepsTheSameTokens) {
  const std::size_t n_kv = 2, g = 2, k = 10, w = 3;
  auto value = [](std::size_t step, std::size_t h, std::int64_t pos, std::uint64_t salt) {
    kvevict::Xoshiro256pp gen(((step * 1000003u + h) * 1000033u + static_cast<std::uint64_t>(pos)) * 31u + salt);
    return static_cast<float>(gen() >> 40) / 16777216.0f;  // [0, 1)
  };
  for (const bool shared : {false, true}) {
    kvevict::KVBuffer<float> a_buf(n_kv, k + 1, 2), b_buf(n_kv, k + 1, 2);
    auto a_kv = a_buf.view(), b_kv = b_buf.view();
    auto cfg = config(n_kv * g, k, w);
    cfg.shared_heads = shared;
    kvevict::H2O a(cfg, a_kv), b(cfg, b_kv);
    for (int p = 0; p < 6; ++p) {
      append_token(a_kv, p);
      append_token(b_kv, p);
    }
    const auto x = causal_logits(n_kv * g, 6, [&](std::size_t h, std::size_t r, std::size_t c) {
      return 4.0f * value(r, h, static_cast<std::int64_t>(c), 1);
    });
    a.prefill(x.data(), 6);
    b.prefill(x.data(), 6);
    std::vector<float> xa(n_kv * g * (k + 1)), xb(xa.size());
    for (std::size_t t = 1; t <= 60; ++t) {
      const auto pos = static_cast<std::int64_t>(5 + t);
      append_token(a_kv, pos);
      append_token(b_kv, pos);
      const std::size_t n = a_kv.length(0);
      for (std::size_t h = 0; h < n_kv * g; ++h)
        for (std::size_t s = 0; s < n; ++s) {  // a logit is a function of (step, head, position), not of the slot
          xa[h * n + s] = 4.0f * value(100 + t, h, a_kv.head_positions(h / g)[s], 1);
          xb[h * n + s] = 4.0f * value(100 + t, h, b_kv.head_positions(h / g)[s], 1);
        }
      a.decode_step(xa.data(), n);
      b.decode_step(xb.data(), n);
      if (t % 3 == 0) a.restore_position_order();
      for (std::size_t j = 0; j < n_kv; ++j) {
        ASSERT_EQ(a.retained_positions(j), b.retained_positions(j)) << "step " << t << " head " << j;
        const Positions kept = a.retained_positions(j);  // the window: the w newest are always kept
        ASSERT_EQ(kept.back(), pos);
        ASSERT_EQ(kept[kept.size() - w], pos - static_cast<std::int64_t>(w) + 1);
      }
      ASSERT_TRUE(rows_aligned(a_kv));
    }
  }
}

TEST(Cache, PositionsAreNeverRenumberedEvenWithGapsAndOffsets) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::H2O cache(config(1, 2, 1), kv);
  const std::int64_t prompt[] = {100, 105, 107};
  for (auto p : prompt) append_token(kv, p);
  const auto x = causal_logits(1, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  EXPECT_EQ(cache.retained_positions(0), (Positions{100, 107}));
  append_token(kv, 200);
  const float row[] = {0.0f, 0.0f, 0.0f};
  cache.decode_step(row, 3);
  EXPECT_EQ(cache.retained_positions(0), (Positions{100, 200}));
}

TEST(Cache, ResetStartsANewSequenceWithTheSameSeedBehaviour) {
  kvevict::KVBuffer<float> buf(1, 16, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(1, 3, 1, 8), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  const auto x = causal_logits(1, 8, [](auto, auto, auto) { return 0.0f; });
  std::vector<Positions> runs;
  for (int rep = 0; rep < 2; ++rep) {
    for (int p = 0; p < 8; ++p) append_token(kv, p);
    cache.prefill(x.data(), 8);
    runs.push_back(cache.retained_positions(0));
    cache.reset();
    EXPECT_EQ(kv.length(0), 0u);
    EXPECT_EQ(cache.budget(), 0u);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
