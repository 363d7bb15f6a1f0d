// MeanAttention<Base> (score/mean_attention.hpp): the selections rank score / (newest − position + 1) while
// the stored scores stay the sums; H2OMean and KeyformerMean through make_cache, chunked prefill, the
// per-head step, the paged twin, and the errors. Hand-computed expected values.
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using Positions = std::vector<std::int64_t>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

kvevict::CacheConfig config(std::size_t k, std::size_t w, std::size_t n_q = 1) {
  return kvtest::token_config(k, w, n_q);
}

/// P = 4, one query head: row r has logit 0 at the listed slots only, so it adds 1 / |set| to each:
///   row 0: {0}, row 1: {0}, row 2: {2}, row 3: {3}.
/// Sums [2, 0, 1, 1]; queries that scored each token (newest = 3): [4, 3, 2, 1]; means [0.5, 0, 0.5, 1].
std::vector<float> prompt_logits() {
  const std::size_t P = 4;
  std::vector<float> x(P * P, kNegInf);
  x[0 * P + 0] = 0.0f;
  x[1 * P + 0] = 0.0f;
  x[2 * P + 2] = 0.0f;
  x[3 * P + 3] = 0.0f;
  return x;
}

struct Layer {
  kvevict::KVBuffer<float> buf{1, 8, 2};
  kvevict::KVView<float> kv = buf.view();
  void fill(std::int64_t first, std::size_t P) {
    for (std::size_t i = 0; i < P; ++i) append_token(kv, first + static_cast<std::int64_t>(i));
  }
};

std::vector<float> scores_of(const kvevict::CacheInterface& c) {
  return std::vector<float>(c.scores(0), c.scores(0) + c.length(0));
}

std::unique_ptr<kvevict::CacheInterface> h2o(const kvevict::CacheConfig& cfg, kvevict::KVView<float> kv, bool mean) {
  kvevict::PolicyParams p;
  p.mean_attention = mean;
  return kvevict::make_cache(kvevict::Policy::h2o, cfg, kv, p);
}

/// The hand example prefilled twice, k = 2, w = 0: H2O (`a`, over `sum`) and H2OMean (`b`, over `mean`).
struct Prefilled {
  Layer sum, mean;
  std::unique_ptr<kvevict::CacheInterface> a = h2o(config(2, 0), sum.kv, false), b = h2o(config(2, 0), mean.kv, true);
  Prefilled() {
    const auto x = prompt_logits();
    sum.fill(0, 4);
    mean.fill(0, 4);
    a->prefill(x.data(), 4);
    b->prefill(x.data(), 4);
  }
};

TEST(MeanAttention, PrefillCutRanksTheMeanAndStoresTheSum) {
  Prefilled t;
  auto& a = t.a;
  auto& b = t.b;
  // H2O: the top-2 sums are 2 (position 0), then the tie 1 = 1 goes to the older token (2).
  EXPECT_EQ(a->retained_positions(0), (Positions{0, 2}));
  EXPECT_EQ(scores_of(*a), (std::vector<float>{2.0f, 1.0f}));
  // H2OMean: the top-2 means are 1 (position 3), then the tie 0.5 = 0.5 goes to the older token (0).
  EXPECT_EQ(b->retained_positions(0), (Positions{0, 3}));
  EXPECT_EQ(scores_of(*b), (std::vector<float>{2.0f, 1.0f}));  // the sums, not the means
  EXPECT_TRUE(kvtest::rows_aligned(t.mean.kv));
}

TEST(MeanAttention, DecodeVictimIsTheLowestMean) {
  Prefilled t;
  auto& a = t.a;
  auto& b = t.b;
  Layer& sum = t.sum;
  Layer& mean = t.mean;
  // Step at position 4; the row puts all its attention on the new token (slot 2).
  append_token(mean.kv, 4);
  const float row[3] = {kNegInf, kNegInf, 0.0f};
  b->decode_step(row, 3);
  // Sums [2, 1, 1] at positions [0, 3, 4]; queries [5, 2, 1]; means [0.4, 0.5, 1]: position 0 goes.
  EXPECT_EQ(b->retained_positions(0), (Positions{3, 4}));
  EXPECT_EQ(b->length(0), 2u);
  EXPECT_TRUE(kvtest::rows_aligned(mean.kv));
  // H2O on its own kept set [0, 2]: sums [2, 1, 1] at [0, 2, 4]; the tie evicts the newer (4).
  append_token(sum.kv, 4);
  a->decode_step(row, 3);
  EXPECT_EQ(a->retained_positions(0), (Positions{0, 2}));
}

/// H2OMean (k = 2, window `w`) over `layer`, prefilled with the hand example at positions `first`..`first + 3`.
std::unique_ptr<kvevict::CacheInterface> prefilled_mean(Layer& layer, std::size_t w, std::int64_t first) {
  const auto x = prompt_logits();
  auto c = h2o(config(2, w), layer.kv, true);
  layer.fill(first, 4);
  c->prefill(x.data(), 4);
  return c;
}

TEST(MeanAttention, RecentWindowIsKeptWhateverItsMean) {
  Layer mean;
  auto b = prefilled_mean(mean, 1, 0);
  // w = 1 keeps position 3; the one key token is the top mean of [0.5, 0, 0.5]: the older of the tie, 0.
  EXPECT_EQ(b->retained_positions(0), (Positions{0, 3}));
  append_token(mean.kv, 4);
  const float row[3] = {kNegInf, 0.0f, kNegInf};  // all attention to position 3
  b->decode_step(row, 3);
  // Sums [2, 2, 0] at [0, 3, 4]; 4 is the recent window; means of the others [2/5, 2/2]: position 0 goes.
  EXPECT_EQ(b->retained_positions(0), (Positions{3, 4}));
  // By slot: the new token (slot 2) filled position 0's hole (slot 0).
  EXPECT_EQ(Positions(b->positions(0), b->positions(0) + 2), (Positions{4, 3}));
  EXPECT_EQ(scores_of(*b), (std::vector<float>{0.0f, 2.0f}));
}

TEST(MeanAttention, PositionsWithAnOffsetCountFromTheNewestQuery) {
  // The same prompt at positions 100..103: the counts [4, 3, 2, 1] and so the kept set are unchanged.
  Layer mean;
  auto b = prefilled_mean(mean, 0, 100);
  EXPECT_EQ(b->retained_positions(0), (Positions{100, 103}));
}

TEST(MeanAttention, TheWholeInt64PositionRangeCountsWithoutOverflow) {
  // Prompt at INT64_MIN.., the step at INT64_MAX: newest − p is 2^64 − 1 − i (no signed overflow, UBSan runs this),
  // float(2^64 − 1 − i) + 1 = 2^64 for the prompt tokens, 1 for the new one: means [2, 1] / 2^64 and 1.
  // (K/V rows of zeros: test_util's row values are made from the position and would overflow themselves.)
  Layer mean;
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  const float zeros[2] = {0.0f, 0.0f};
  auto b = h2o(config(2, 0), mean.kv, true);
  for (std::int64_t i = 0; i < 4; ++i) mean.kv.append(lo + i, zeros, zeros);
  const auto x = prompt_logits();
  b->prefill(x.data(), 4);
  EXPECT_EQ(b->retained_positions(0), (Positions{lo, lo + 3}));
  mean.kv.append(hi, zeros, zeros);
  const float row[3] = {kNegInf, kNegInf, 0.0f};
  b->decode_step(row, 3);
  EXPECT_EQ(b->retained_positions(0), (Positions{lo, hi}));
}

TEST(MeanAttention, ChunkedAndBoundedPrefillEqualOneShot) {
  // Two chunks of 2 rows: chunk c's rows [2c, 2c + 2) over slots [0, 2c + 2), row-major [row][slot]. Bounded
  // (max_prefill_chunk = 2) cuts after the second chunk with newest = 3: every count is the one-shot one.
  const auto x = prompt_logits();
  for (bool bounded : {false, true}) {
    Layer one, chunked;
    kvevict::CacheConfig cfg = config(2, 0);
    auto a = h2o(cfg, one.kv, true);
    cfg.bounded_prefill = bounded;
    cfg.max_prefill_chunk = bounded ? 2 : 0;
    auto b = h2o(cfg, chunked.kv, true);
    one.fill(0, 4);
    a->prefill(x.data(), 4);
    for (std::size_t c = 0; c < 2; ++c) {
      chunked.fill(static_cast<std::int64_t>(2 * c), 2);
      const std::size_t n = 2 * c + 2;
      std::vector<float> rows(2 * n);
      for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t s = 0; s < n; ++s) rows[r * n + s] = x[(2 * c + r) * 4 + s];
      b->prefill_chunk(rows.data(), 2, n);
    }
    b->finish_prefill();
    EXPECT_EQ(b->retained_positions(0), (Positions{0, 3})) << "bounded " << bounded;
    EXPECT_EQ(scores_of(*b), scores_of(*a)) << "bounded " << bounded;
  }
}

TEST(MeanAttention, PerHeadStepEqualsDecodeStep) {
  // 2 KV heads of 2 query heads each; per-head selection; the split step gives decode_step's kept sets.
  kvevict::CacheConfig cfg = config(3, 1, 4);
  kvevict::KVBuffer<float> b1(2, 8, 2), b2(2, 8, 2);
  auto kv1 = b1.view(), kv2 = b2.view();
  kvevict::PolicyParams p;
  p.mean_attention = true;
  auto a = kvevict::make_cache(kvevict::Policy::h2o, cfg, kv1, p);
  auto b = kvevict::make_cache(kvevict::Policy::h2o, cfg, kv2, p);
  const std::size_t P = 5;
  for (int i = 0; i < static_cast<int>(P); ++i) append_token(kv1, i), append_token(kv2, i);
  std::vector<float> x(4 * P * P);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 11) * 0.25f;
  a->prefill(x.data(), P);
  b->prefill(x.data(), P);
  for (int t = 0; t < 6; ++t) {
    append_token(kv1, static_cast<int>(P) + t);
    append_token(kv2, static_cast<int>(P) + t);
    const std::size_t n = kv1.length(0);
    std::vector<float> row(4 * n);
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>((i * 53 + 7 * t) % 13) * 0.3f;
    a->decode_step(row.data(), n);
    b->begin_decode_step(n);
    for (std::size_t j = 0; j < 2; ++j) b->score_decode_head(j, row.data() + j * 2 * n);
    b->end_decode_step();
    for (std::size_t j = 0; j < 2; ++j) {
      ASSERT_EQ(b->retained_positions(j), a->retained_positions(j)) << "step " << t << " head " << j;
      ASSERT_EQ(std::vector<float>(b->scores(j), b->scores(j) + b->length(j)),
                std::vector<float>(a->scores(j), a->scores(j) + a->length(j)));
    }
  }
}

TEST(MeanAttention, KeyformerMeanWithoutNoiseAtTauOneIsH2OMean) {
  // Keyformer's accumulation with ζ = 0 and τ = 1 (tau_init = tau_end = 1) is plain softmax: the same bits.
  const auto x = prompt_logits();
  Layer h, kf;
  auto a = h2o(config(2, 0), h.kv, true);
  kvevict::PolicyParams p;
  p.mean_attention = true;
  p.gumbel_noise = false;
  p.tau_init = p.tau_end = 1.0f;
  p.horizon = 4;
  auto b = kvevict::make_cache(kvevict::Policy::keyformer, config(2, 0), kf.kv, p);
  h.fill(0, 4);
  kf.fill(0, 4);
  a->prefill(x.data(), 4);
  b->prefill(x.data(), 4);
  EXPECT_EQ(b->retained_positions(0), (Positions{0, 3}));
  EXPECT_EQ(scores_of(*b), scores_of(*a));
}

using kvtest::PagedLayer;

TEST(MeanAttention, PagedTokenUnitEqualsTheSharedCache) {
  const auto x = prompt_logits();
  kvevict::CacheConfig cfg = config(2, 0);
  cfg.shared_heads = true;
  Layer contiguous;
  auto a = h2o(cfg, contiguous.kv, true);
  contiguous.fill(0, 4);
  a->prefill(x.data(), 4);

  PagedLayer paged;
  kvevict::PolicyParams p;
  p.mean_attention = true;
  auto b = kvevict::make_paged_cache(kvevict::Policy::h2o, cfg, kvevict::PagedEvictionConfig{}, paged.view,
                                     paged.pool, p);
  for (int i = 0; i < 4; ++i) paged.append(i);
  b->prefill(x.data(), 4);
  EXPECT_EQ(b->retained_positions(0), (Positions{0, 3}));
  EXPECT_EQ(b->retained_positions(0), a->retained_positions(0));
  // The decode step of DecodeVictimIsTheLowestMean: position 0 goes.
  append_token(contiguous.kv, 4);
  paged.append(4);
  const float row[3] = {kNegInf, kNegInf, 0.0f};
  a->decode_step(row, 3);
  b->decode_step(row, 3);
  EXPECT_EQ(b->retained_positions(0), (Positions{3, 4}));
  EXPECT_EQ(b->retained_positions(0), a->retained_positions(0));
}

TEST(MeanAttention, Errors) {
  Layer l;
  kvevict::PolicyParams p;
  p.mean_attention = true;
  for (auto policy : {kvevict::Policy::tova, kvevict::Policy::snapkv, kvevict::Policy::streaming_llm,
                      kvevict::Policy::window}) {
    kvevict::CacheConfig cfg = config(2, 0);
    try {
      (void)kvevict::make_cache(policy, cfg, l.kv, p);
      ADD_FAILURE() << kvevict::policy_name(policy) << " accepted mean_attention";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("mean_attention"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(kvevict::policy_name(policy)), std::string::npos) << e.what();
    }
  }
  // The paged page unit ranks pages by summed scores: refused at construction.
  kvevict::CacheConfig cfg = config(4, 0);
  cfg.shared_heads = true;
  PagedLayer pl;
  kvevict::PagedEvictionConfig paged;
  paged.unit = kvevict::EvictUnit::page;
  try {
    (void)kvevict::make_paged_cache(kvevict::Policy::h2o, cfg, paged, pl.view, pl.pool, p);
    ADD_FAILURE() << "the page unit accepted mean_attention";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("token unit"), std::string::npos) << e.what();
  }
}

// The contract: kRanksMean needs an accumulating, all-rows logits score.
struct NotAccumulating {
  static constexpr bool kUsesLogits = true, kAccumulates = false, kUsesTemperature = false, kPrefillLastRow = false;
  static constexpr bool kRanksMean = true;
  bool noisy() const { return false; }
};
struct MistypedRanksMean {
  static constexpr bool kUsesLogits = true, kAccumulates = true, kUsesTemperature = false, kPrefillLastRow = false;
  static constexpr int kRanksMean = 1;
  bool noisy() const { return false; }
};
static_assert(kvevict::is_score_policy<kvevict::MeanAttention<kvevict::AccumulatedAttentionScore>>::value);
static_assert(kvevict::is_score_policy<kvevict::MeanAttention<kvevict::GumbelLogitScore>>::value);
static_assert(!kvevict::is_score_policy<NotAccumulating>::value);
static_assert(!kvevict::is_score_policy<MistypedRanksMean>::value);

}  // namespace
