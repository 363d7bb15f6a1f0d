// Cache::prefill_from_attention (H2O's prompt scores from the column sums of the attention an engine computed):
// against a reference written here (each row's softmax in double, summed per query head), the kept positions equal
// Cache::prefill's on the same logits and the scores agree; GQA groups and a recent window; every refusal with its
// message, the cache unchanged and still able to prefill.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace {

constexpr std::size_t kD = 4;

struct Layer {
  kvevict::KVBuffer<float> store;
  std::unique_ptr<kvevict::CacheInterface> cache;
  Layer(kvevict::Policy policy, std::size_t nq, std::size_t nkv, std::size_t k, std::size_t w, std::size_t P)
      : store(nkv, std::max(P, k) + 1, kD), cache(make(policy, nq, k, w)) {
    auto view = store.view();
    std::vector<float> row(nkv * kD);
    for (std::size_t t = 0; t < P; ++t) {
      for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(t) + 0.01f * static_cast<float>(i);
      view.append(static_cast<std::int64_t>(t), row.data(), row.data());
    }
  }
  std::unique_ptr<kvevict::CacheInterface> make(kvevict::Policy policy, std::size_t nq, std::size_t k, std::size_t w) {
    kvevict::CacheConfig cfg;
    cfg.n_q_heads = nq;
    cfg.budget = kvevict::Budget::tokens(k);
    cfg.recent = w ? kvevict::RecentWindow::tokens(w) : kvevict::RecentWindow::none();
    kvevict::PolicyParams params;
    params.horizon = 8;
    return kvevict::make_cache(policy, cfg, store.view(), params);
  }
  std::vector<std::int64_t> kept(std::size_t j) { return cache->retained_positions(j); }
};

/// Random logits [q][P][P] (upper triangle -inf), spread wide enough that no two sums nearly tie.
std::vector<float> random_logits(std::size_t nq, std::size_t P, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> x(nq * P * P, -std::numeric_limits<float>::infinity());
  for (std::size_t q = 0; q < nq; ++q)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t c = 0; c <= r; ++c) x[(q * P + r) * P + c] = dist(rng);
  return x;
}

/// The reference: sums[q][c] = Σ_r softmax(x[q][r][0..r])[c], each row's softmax in double.
std::vector<float> column_sums(const std::vector<float>& x, std::size_t nq, std::size_t P) {
  std::vector<double> acc(nq * P, 0.0);
  for (std::size_t q = 0; q < nq; ++q)
    for (std::size_t r = 0; r < P; ++r) {
      const float* row = &x[(q * P + r) * P];
      double m = row[0], z = 0.0;
      for (std::size_t c = 0; c <= r; ++c) m = std::max(m, static_cast<double>(row[c]));
      for (std::size_t c = 0; c <= r; ++c) z += std::exp(row[c] - m);
      for (std::size_t c = 0; c <= r; ++c) acc[q * P + c] += std::exp(row[c] - m) / z;
    }
  return std::vector<float>(acc.begin(), acc.end());
}

struct Shape {
  std::size_t nq, nkv, P, k, w;
};

class AttentionPrefill : public ::testing::TestWithParam<Shape> {};

TEST_P(AttentionPrefill, KeepsWhatPrefillKeepsFromTheLogits) {
  const Shape s = GetParam();
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const auto x = random_logits(s.nq, s.P, seed);
    const auto sums = column_sums(x, s.nq, s.P);
    Layer a(kvevict::Policy::h2o, s.nq, s.nkv, s.k, s.w, s.P), b(kvevict::Policy::h2o, s.nq, s.nkv, s.k, s.w, s.P);
    a.cache->prefill(x.data(), s.P);
    b.cache->prefill_from_attention(sums.data(), s.P);
    for (std::size_t j = 0; j < s.nkv; ++j) {
      ASSERT_EQ(a.kept(j), b.kept(j)) << "seed " << seed << ", KV head " << j;
      ASSERT_EQ(b.kept(j).size(), std::min(s.k, s.P));
      const float *sa = a.cache->scores(j), *sb = b.cache->scores(j);
      for (std::size_t i = 0; i < a.cache->length(j); ++i) EXPECT_NEAR(sa[i], sb[i], 1e-5f * std::max(1.0f, sa[i]));
    }
    EXPECT_EQ(b.cache->budget(), s.k);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionPrefill,
                         ::testing::Values(Shape{1, 1, 12, 5, 0}, Shape{4, 2, 24, 7, 2}, Shape{6, 2, 40, 9, 3},
                                           Shape{3, 3, 9, 9, 1}, Shape{2, 1, 6, 10, 0}));

TEST(AttentionPrefill, ExactScoresFromSumsThatAreExact) {
  // Sums of quarters are exact in float: the scores are the group's sums, bit for bit (0.75, 1.75, 2.5, 3).
  Layer l(kvevict::Policy::h2o, 2, 1, 2, 0, 4);
  const std::vector<float> sums{0.25f, 1.5f, 0.5f, 1.75f, 0.5f, 0.25f, 2.0f, 1.25f};
  l.cache->prefill_from_attention(sums.data(), 4);
  EXPECT_EQ(l.kept(0), (std::vector<std::int64_t>{2, 3}));
  const float* scores = l.cache->scores(0);
  EXPECT_EQ(std::vector<float>(scores, scores + l.cache->length(0)), (std::vector<float>{2.5f, 3.0f}));
}

std::string message_of(kvevict::CacheInterface& c, const float* sums, std::size_t P) {
  try {
    c.prefill_from_attention(sums, P);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(AttentionPrefill, RefusesAndLeavesTheCacheUnchanged) {
  const std::vector<float> sums(2 * 4, 0.5f);
  Layer l(kvevict::Policy::h2o, 2, 1, 2, 0, 4);
  auto bad = sums;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(message_of(*l.cache, bad.data(), 4),
            "kvevict::Cache::prefill_from_attention: sums[1][1] = nan (must be finite and >= 0: a sum of attention "
            "probabilities)");
  bad[5] = -0.5f;
  EXPECT_EQ(message_of(*l.cache, bad.data(), 4),
            "kvevict::Cache::prefill_from_attention: sums[1][1] = -0.5 (must be finite and >= 0: a sum of attention "
            "probabilities)");
  EXPECT_EQ(message_of(*l.cache, nullptr, 4), "kvevict::Cache::prefill_from_attention: sums must be non-null");
  EXPECT_NE(message_of(*l.cache, sums.data(), 3).find("prompt_len"), std::string::npos);  // the view holds 4
  EXPECT_EQ(l.cache->length(0), 4u);
  EXPECT_FALSE(l.cache->budget_resolved());
  l.cache->prefill_from_attention(sums.data(), 4);  // still fine after the refusals
  EXPECT_EQ(l.kept(0).size(), 2u);
  EXPECT_EQ(message_of(*l.cache, sums.data(), 4),
            "kvevict::Cache::prefill_from_attention: already prefilled; call reset() for a new sequence");

  Layer kf(kvevict::Policy::keyformer, 2, 1, 2, 0, 4);
  EXPECT_EQ(message_of(*kf.cache, sums.data(), 4),
            "kvevict::Cache::prefill_from_attention: needs H2O's score (AccumulatedAttentionScore: the attention each "
            "token received); this cache scores the prompt otherwise: use prefill");
  EXPECT_FALSE(kf.cache->budget_resolved());
}

}  // namespace
