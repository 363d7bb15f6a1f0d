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

/// Keyformer's reference: sums[q][c] = Σ_r softmax((x[q][r][0..r] + ζ) / τ)[c] in double, ζ of query head q, row r,
/// slot c as `spec` says the cache draws it.
std::vector<float> gumbel_sums(const std::vector<float>& x, std::size_t nq, std::size_t P, const kvevict::PromptSums& spec) {
  std::vector<double> acc(nq * P, 0.0);
  std::vector<float> zeta(P);
  std::vector<double> y(P);
  for (std::size_t q = 0; q < nq; ++q)
    for (std::size_t r = 0; r < P; ++r) {
      kvevict::fill_gumbel_row(kvevict::gumbel_row_key(spec.seed, q, r), 0, zeta.data(), r + 1);
      double m = -INFINITY, z = 0.0;
      for (std::size_t c = 0; c <= r; ++c) {
        y[c] = (static_cast<double>(x[(q * P + r) * P + c]) + (spec.noise ? spec.noise_scale * zeta[c] : 0.0)) / spec.tau;
        m = std::max(m, y[c]);
      }
      for (std::size_t c = 0; c <= r; ++c) z += std::exp(y[c] - m);
      for (std::size_t c = 0; c <= r; ++c) acc[q * P + c] += std::exp(y[c] - m) / z;
    }
  return std::vector<float>(acc.begin(), acc.end());
}

TEST_P(AttentionPrefill, KeyformerKeepsWhatPrefillKeepsFromTheLogits) {
  const Shape s = GetParam();
  for (unsigned seed = 1; seed <= 5; ++seed) {
    const auto x = random_logits(s.nq, s.P, seed);
    Layer a(kvevict::Policy::keyformer, s.nq, s.nkv, s.k, s.w, s.P),
        b(kvevict::Policy::keyformer, s.nq, s.nkv, s.k, s.w, s.P);
    const kvevict::PromptSums spec = b.cache->prompt_sums();
    ASSERT_EQ(spec.kind, kvevict::PromptSums::Kind::gumbel);
    EXPECT_TRUE(spec.noise);
    EXPECT_EQ(spec.noise_scale, 1.0f);
    EXPECT_EQ(spec.tau, 1.0f);  // the linear schedule's τ_init
    const auto sums = gumbel_sums(x, s.nq, s.P, spec);
    a.cache->prefill(x.data(), s.P);
    b.cache->prefill_from_attention(sums.data(), s.P);
    for (std::size_t j = 0; j < s.nkv; ++j) {
      ASSERT_EQ(a.kept(j), b.kept(j)) << "seed " << seed << ", KV head " << j;
      const float *sa = a.cache->scores(j), *sb = b.cache->scores(j);
      for (std::size_t i = 0; i < a.cache->length(j); ++i) EXPECT_NEAR(sa[i], sb[i], 1e-5f * std::max(1.0f, sa[i]));
    }
    EXPECT_EQ(b.cache->temperature(), a.cache->temperature());
  }
}

TEST(AttentionPrefill, PromptSumsFollowTheSeedAndTheSchedule) {
  kvevict::KVBuffer<float> store(1, 8, kD);
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = 2;
  cfg.budget = kvevict::Budget::tokens(4);
  cfg.seed = 1234;
  kvevict::PolicyParams params;
  params.horizon = 8;
  params.tau_init = 1.25f;
  params.gumbel_noise = false;
  params.noise_scale = 0.5f;
  auto kf = kvevict::make_cache(kvevict::Policy::keyformer, cfg, store.view(), params);
  kvevict::PromptSums spec = kf->prompt_sums();
  EXPECT_EQ(spec.kind, kvevict::PromptSums::Kind::gumbel);
  EXPECT_EQ(spec.seed, 1234u);
  EXPECT_EQ(spec.tau, 1.25f);
  EXPECT_FALSE(spec.noise);
  EXPECT_EQ(spec.noise_scale, 0.5f);
  kf->reset(99);
  EXPECT_EQ(kf->prompt_sums().seed, 99u);
  params = kvevict::PolicyParams{};
  EXPECT_EQ(kvevict::make_cache(kvevict::Policy::h2o, cfg, store.view(), params)->prompt_sums().kind,
            kvevict::PromptSums::Kind::attention);
  EXPECT_EQ(kvevict::make_cache(kvevict::Policy::tova, cfg, store.view(), params)->prompt_sums().kind,
            kvevict::PromptSums::Kind::none);
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

  Layer tova(kvevict::Policy::tova, 2, 1, 2, 0, 4);
  EXPECT_EQ(message_of(*tova.cache, sums.data(), 4),
            "kvevict::Cache::prefill_from_attention: needs H2O's score (AccumulatedAttentionScore: the attention each "
            "token received) or Keyformer's (GumbelLogitScore); this cache scores the prompt otherwise: use prefill");
  EXPECT_FALSE(tova.cache->budget_resolved());
  EXPECT_EQ(tova.cache->prompt_sums().kind, kvevict::PromptSums::Kind::none);
}

}  // namespace
