// Expected Attention (score/expected_attention.hpp): the query statistics and the average RoPE rotation by hand, the
// scores of a hand example in closed form, 40 random layers (both RoPE pairings, GQA, ragged heads, sinks, ε, half of
// them from a position far from 0 in a slot order that is not position order) against a double reference that
// averages rope.hpp's own rotations, a TOVA cache ranking by them at prefill and at a decode step, the sinks of a
// sequence that does not start at 0, the FLT_MIN floor of the logits, the errors, and sizes whose products overflow
// std::size_t (issue 51, items 5, 6, 9 and 12).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::invalid_argument_message;

using Positions = std::vector<std::int64_t>;


TEST(QueryStatistics, MeanAndPopulationCovarianceByHand) {
  kvevict::QueryStatistics st(1, 2);
  const float q[] = {1, 2, 3, 6};
  st.add(q, 2);
  EXPECT_EQ(st.count(), 2u);
  double mu[2], cov[4];
  st.mean(0, mu);
  st.covariance(0, cov);
  EXPECT_EQ(mu[0], 2.0);
  EXPECT_EQ(mu[1], 4.0);
  // E[q qᵀ] = [[5, 10], [10, 20]], minus μμᵀ = [[4, 8], [8, 16]]
  EXPECT_EQ(cov[0], 1.0);
  EXPECT_EQ(cov[1], 2.0);
  EXPECT_EQ(cov[2], 2.0);
  EXPECT_EQ(cov[3], 4.0);
  st.clear();
  EXPECT_EQ(st.count(), 0u);
  EXPECT_THROW(st.mean(0, mu), std::invalid_argument);
}

TEST(QueryStatistics, HeadsAreSeparateAndBadRowsAddNothing) {
  kvevict::QueryStatistics st(2, 1);
  const float q[] = {1, 10, 3, 30};  // [row][q_head][1]
  st.add(q, 2);
  double m0, m1;
  st.mean(0, &m0);
  st.mean(1, &m1);
  EXPECT_EQ(m0, 2.0);
  EXPECT_EQ(m1, 20.0);
  const float bad[] = {1, std::numeric_limits<float>::quiet_NaN()};
  try {
    st.add(bad, 1);
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::QueryStatistics::add: q[0][1][0] is nan (must be finite)");
  }
  EXPECT_EQ(st.count(), 2u);
  st.mean(1, &m1);
  EXPECT_EQ(m1, 20.0);
  EXPECT_THROW(st.add(nullptr, 1), std::invalid_argument);
  st.add(nullptr, 0);  // nothing to add
  EXPECT_THROW(st.mean(2, &m0), std::invalid_argument);
  EXPECT_THROW(kvevict::QueryStatistics(0, 4), std::invalid_argument);
  EXPECT_THROW(kvevict::QueryStatistics(4, 0), std::invalid_argument);
}

TEST(AverageRopeRotation, ByHand) {
  double c[2], s[2];
  // d = 4, θ = 100: frequencies 1 and 1/10. Positions 0 and 1.
  kvevict::average_rope_rotation(4, {kvevict::RopeStyle::interleaved, 100.0}, 0, 2, c, s);
  EXPECT_DOUBLE_EQ(c[0], (1.0 + std::cos(1.0)) / 2);
  EXPECT_DOUBLE_EQ(s[0], std::sin(1.0) / 2);
  EXPECT_DOUBLE_EQ(c[1], (1.0 + std::cos(0.1)) / 2);
  EXPECT_DOUBLE_EQ(s[1], std::sin(0.1) / 2);
  // One position: the rotation at that position.
  kvevict::average_rope_rotation(4, {kvevict::RopeStyle::half_split, 100.0}, 7, 1, c, s);
  EXPECT_DOUBLE_EQ(c[0], std::cos(7.0));
  EXPECT_DOUBLE_EQ(s[1], std::sin(0.7));
  EXPECT_THROW(kvevict::average_rope_rotation(4, {}, 0, 0, c, s), std::invalid_argument);
  EXPECT_THROW(kvevict::average_rope_rotation(3, {}, 0, 1, c, s), std::invalid_argument);
  EXPECT_THROW(kvevict::average_rope_rotation(4, {kvevict::RopeStyle::interleaved, -1.0}, 0, 1, c, s),
               std::invalid_argument);
}

/// One layer: `n_kv` KV heads, capacity 16, head_dim d; append(p, k, v) writes the same rows to every head.
struct Layer {
  Layer(std::size_t n_kv, std::size_t d) : buf(n_kv, 16, d) {}
  kvevict::KVBuffer<float> buf;
  kvevict::KVView<float> kv = buf.view();
};

TEST(ExpectedAttention, HandExampleInClosedForm) {
  // 1 KV head, 1 query head, d = 2, F = 1 at position 0 (R̄ = I), no sinks. μ = (2, 4), Σ = [[1, 2], [2, 4]].
  kvevict::QueryStatistics st(1, 2);
  const float q[] = {1, 2, 3, 6};
  st.add(q, 2);
  Layer l(1, 2);
  const float k[3][2] = {{1, 0}, {0, 1}, {0, 0}}, v[3][2] = {{3, 4}, {1, 0}, {0, 2}};
  for (int p = 0; p < 3; ++p) l.kv.append(p, k[p], v[p]);
  kvevict::ExpectedAttentionOptions o;
  o.n_future_positions = 1;
  o.n_sink = 0;
  kvevict::ExpectedAttentionScratch ws;
  float out[3];
  kvevict::expected_attention_scores(st, l.kv, {kvevict::RopeStyle::interleaved, 10000.0}, 0, o, out, 3, ws);
  // x = μ·k/√2 + ½ kᵀΣk / 2: k0: 2/√2 + 1/4; k1: 4/√2 + 1; k2: 0.
  const double x[3] = {2 / std::sqrt(2.0) + 0.25, 4 / std::sqrt(2.0) + 1.0, 0.0};
  const double z = std::exp(x[0]) + std::exp(x[1]) + std::exp(x[2]);
  const double norms[3] = {5, 1, 2};
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(out[s], std::exp(x[s]) / z * norms[s], 1e-6) << s;
  // Without the covariance, without ||v||, with ε.
  o.use_covariance = false;
  o.use_vnorm = false;
  kvevict::expected_attention_scores(st, l.kv, {kvevict::RopeStyle::interleaved, 10000.0}, 0, o, out, 3, ws);
  const double y[3] = {2 / std::sqrt(2.0), 4 / std::sqrt(2.0), 0.0};
  const double zy = std::exp(y[0]) + std::exp(y[1]) + std::exp(y[2]);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(out[s], std::exp(y[s]) / zy, 1e-6) << s;
  o.use_vnorm = true;
  o.epsilon = 0.5f;
  kvevict::expected_attention_scores(st, l.kv, {kvevict::RopeStyle::interleaved, 10000.0}, 0, o, out, 3, ws);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(out[s], (std::exp(y[s]) / zy + 0.5) * norms[s], 1e-6) << s;
  // Sinks: position 0 is one with n_sink = 1; it scores the largest other score + 1, the others softmax without it.
  o = {};
  o.n_future_positions = 1;
  o.n_sink = 1;
  kvevict::expected_attention_scores(st, l.kv, {kvevict::RopeStyle::interleaved, 10000.0}, 0, o, out, 3, ws);
  const double z12 = std::exp(x[1]) + std::exp(x[2]);
  const double s1 = std::exp(x[1]) / z12 * 1, s2 = std::exp(x[2]) / z12 * 2;
  EXPECT_NEAR(out[1], s1, 1e-6);
  EXPECT_NEAR(out[2], s2, 1e-6);
  EXPECT_NEAR(out[0], std::max(s1, s2) + 1.0, 1e-6);
}

/// The reference: R̄ as a d×d matrix whose column a is the mean over t of rope.hpp's rotation of the basis vector
/// e_a to position t; μ' = R̄μ, Σ' = R̄ΣR̄ᵀ; x = μ'·k/√d + ½ kᵀΣ'k/d; softmax over non-sinks; group mean; (+ε)·||v||.
std::vector<std::vector<double>> reference(const kvevict::QueryStatistics& st, const kvevict::KVView<float>& kv,
                                           const kvevict::RopeSpec& rope, std::int64_t next,
                                           const kvevict::ExpectedAttentionOptions& o) {
  const std::size_t d = kv.head_dim, nq = st.n_q_heads(), g = nq / kv.n_kv_heads;
  std::vector<double> R(d * d, 0.0);  // [row][col]
  for (std::size_t a = 0; a < d; ++a)
    for (std::size_t t = 0; t < o.n_future_positions; ++t) {
      std::vector<double> e(d, 0.0);
      e[a] = 1.0;
      kvevict::detail::rotate_row_unchecked(e.data(), d, static_cast<double>(next) + static_cast<double>(t), rope);
      for (std::size_t r = 0; r < d; ++r) R[r * d + a] += e[r] / static_cast<double>(o.n_future_positions);
    }
  // The sinks of head j: its n_sink held tokens with the lowest position IDs (docs/api.md), by a full sort of
  // (position, slot) pairs.
  std::vector<std::vector<bool>> sink(kv.n_kv_heads);
  for (std::size_t j = 0; j < kv.n_kv_heads; ++j) {
    std::vector<std::pair<std::int64_t, std::size_t>> by_pos;
    for (std::size_t s = 0; s < kv.length(j); ++s) by_pos.emplace_back(kv.head_positions(j)[s], s);
    std::sort(by_pos.begin(), by_pos.end());
    sink[j].assign(kv.length(j), false);
    for (std::size_t i = 0; i < by_pos.size() && i < o.n_sink; ++i) sink[j][by_pos[i].second] = true;
  }
  std::vector<std::vector<double>> out(kv.n_kv_heads);
  double max_score = 0.0;
  for (std::size_t j = 0; j < kv.n_kv_heads; ++j) {
    const std::size_t n = kv.length(j);
    std::vector<double> att(n, 0.0);
    for (std::size_t hh = 0; hh < g; ++hh) {
      std::vector<double> mu(d), cov(d * d), mu2(d, 0.0), cov2(d * d, 0.0), tmp(d * d, 0.0);
      st.mean(j * g + hh, mu.data());
      st.covariance(j * g + hh, cov.data());
      for (std::size_t r = 0; r < d; ++r)
        for (std::size_t a = 0; a < d; ++a) mu2[r] += R[r * d + a] * mu[a];
      for (std::size_t r = 0; r < d; ++r)
        for (std::size_t c = 0; c < d; ++c)
          for (std::size_t a = 0; a < d; ++a) tmp[r * d + c] += R[r * d + a] * cov[a * d + c];
      for (std::size_t r = 0; r < d; ++r)
        for (std::size_t c = 0; c < d; ++c)
          for (std::size_t a = 0; a < d; ++a) cov2[r * d + c] += tmp[r * d + a] * R[c * d + a];
      std::vector<double> x(n, 0.0);
      double m = -1e300;
      for (std::size_t s = 0; s < n; ++s) {
        const float* k = kv.k_row(j, s);
        double lin = 0.0, quad = 0.0;
        for (std::size_t a = 0; a < d; ++a) lin += mu2[a] * k[a];
        for (std::size_t a = 0; a < d; ++a)
          for (std::size_t b = 0; b < d; ++b) quad += k[a] * cov2[a * d + b] * k[b];
        x[s] = lin / std::sqrt(static_cast<double>(d)) + (o.use_covariance ? 0.5 * quad / static_cast<double>(d) : 0.0);
        if (!sink[j][s]) m = std::max(m, x[s]);
      }
      double z = 0.0;
      for (std::size_t s = 0; s < n; ++s)
        if (!sink[j][s]) z += std::exp(x[s] - m);
      for (std::size_t s = 0; s < n; ++s)
        if (!sink[j][s]) att[s] += std::exp(x[s] - m) / z;
    }
    for (std::size_t s = 0; s < n; ++s) {
      double v = att[s] / static_cast<double>(g);
      if (o.use_vnorm) {
        double sq = 0.0;
        for (std::size_t e = 0; e < d; ++e) sq += double(kv.v_row(j, s)[e]) * kv.v_row(j, s)[e];
        v = (v + o.epsilon) * std::sqrt(sq);
      }
      att[s] = v;
      if (!sink[j][s]) max_score = std::max(max_score, v);
    }
    out[j] = att;
  }
  for (std::size_t j = 0; j < kv.n_kv_heads; ++j)
    for (std::size_t s = 0; s < kv.length(j); ++s)
      if (sink[j][s]) out[j][s] = max_score + 1.0;
  return out;
}

TEST(ExpectedAttention, MatchesTheReferenceOnRandomLayers) {
  std::mt19937 rng(35);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t n_kv = 1 + trial % 2, g = 1 + (trial / 2) % 3, d = trial % 3 == 0 ? 8 : 4;
    // Trials 20..39: the sequence starts at position 1000 + trial, in a slot order that is not position order.
    const std::int64_t first = trial < 20 ? 0 : 1000 + trial;
    Layer l(n_kv, d);
    std::vector<float> k(n_kv * d), v(n_kv * d);
    for (std::int64_t p = 0; p < 12; ++p) {
      for (auto& e : k) e = normal(rng);
      for (auto& e : v) e = normal(rng);
      l.kv.append(first + (trial < 20 ? p : (p * 5) % 12), k.data(), v.data());
    }
    // Ragged heads in slot order that is not position order: head 1 drops slot 3 (moved from the end).
    if (n_kv == 2) {
      auto copy = [&](std::size_t dst, std::size_t src) {
        std::copy_n(l.kv.k_row(1, src), d, l.kv.k_row(1, dst));
        std::copy_n(l.kv.v_row(1, src), d, l.kv.v_row(1, dst));
        l.kv.head_positions(1)[dst] = l.kv.head_positions(1)[src];
      };
      copy(3, 11);
      l.kv.lengths[1] = 11;
    }
    kvevict::QueryStatistics st(n_kv * g, d);
    std::vector<float> q(5 * n_kv * g * d);
    for (auto& e : q) e = 0.5f + normal(rng);
    st.add(q.data(), 5);
    kvevict::ExpectedAttentionOptions o;
    o.n_future_positions = 1 + static_cast<std::size_t>(trial) * 7;
    o.n_sink = static_cast<std::size_t>(trial % 4 + (trial >= 36 ? 10 : 0));  // 36..39: n_sink >= a head's length
    o.use_covariance = trial % 5 != 4;
    o.use_vnorm = trial % 6 != 5;
    o.epsilon = trial % 3 == 1 ? 0.25f : 0.0f;
    const kvevict::RopeSpec rope{trial % 2 ? kvevict::RopeStyle::half_split : kvevict::RopeStyle::interleaved,
                                 trial % 4 < 2 ? 10000.0 : 500.0};
    const std::int64_t next = first + 12 + trial;
    const std::size_t stride = 13;
    std::vector<float> out(n_kv * stride, -7.0f);
    kvevict::ExpectedAttentionScratch ws;
    kvevict::expected_attention_scores(st, l.kv, rope, next, o, out.data(), stride, ws);
    const auto ref = reference(st, l.kv, rope, next, o);
    for (std::size_t j = 0; j < n_kv; ++j) {
      for (std::size_t s = 0; s < l.kv.length(j); ++s)
        EXPECT_NEAR(out[j * stride + s], ref[j][s], 2e-5 * std::max(1.0, ref[j][s])) << trial << " " << j << " " << s;
      for (std::size_t s = l.kv.length(j); s < stride; ++s) EXPECT_EQ(out[j * stride + s], -7.0f);  // untouched
    }
    // The logits rows: log of the KV head's score on every query head of its group.
    std::vector<float> rows(n_kv * g * stride, -7.0f);
    kvevict::expected_attention_logits(st, l.kv, rope, next, o, rows.data(), stride, ws);
    for (std::size_t h = 0; h < n_kv * g; ++h)
      for (std::size_t s = 0; s < l.kv.length(h / g); ++s)
        EXPECT_EQ(rows[h * stride + s], std::log(std::max(out[(h / g) * stride + s], FLT_MIN)));
  }
}

TEST(ExpectedAttention, ATovaCacheRanksByItAtPrefillAndDecode) {
  // 1 KV head, GQA group of 2, d = 4, P = 10, k = 4.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Layer l(1, 4);
  kvevict::CacheConfig cfg = kvtest::token_config(4, 0, 2);
  cfg.recent = kvevict::RecentWindow::none();
  kvevict::TOVA cache(cfg, l.kv);  // built on the empty view
  for (std::int64_t p = 0; p < 10; ++p) {
    float k[4], v[4];
    for (auto& e : k) e = normal(rng);
    for (auto& e : v) e = normal(rng);
    l.kv.append(p, k, v);
  }
  kvevict::QueryStatistics st(2, 4);
  std::vector<float> q(6 * 2 * 4);
  for (auto& e : q) e = normal(rng);
  st.add(q.data(), 6);
  const kvevict::RopeSpec rope{};
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 1;
  kvevict::ExpectedAttentionScratch ws;
  std::vector<float> scores(16), rows(2 * 16);
  kvevict::expected_attention_scores(st, l.kv, rope, 10, o, scores.data(), 16, ws);
  kvevict::expected_attention_logits(st, l.kv, rope, 10, o, rows.data(), 16, ws);
  std::vector<std::size_t> order(10);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  Positions want(order.begin(), order.begin() + 4);
  std::sort(want.begin(), want.end());
  ASSERT_EQ(want.front(), 0);  // the sink

  kvevict::SingleRowLogits last(rows.data(), 2, 16, 9);
  cache.prefill_chunk(last, 10, 10);
  cache.finish_prefill();
  EXPECT_EQ(cache.retained_positions(0), want);
  // Its scores: the group sum of softmax(log score) = 2 · score / Σ score, in the kept order.
  const double total = std::accumulate(scores.begin(), scores.begin() + 10, 0.0);
  for (std::size_t s = 0; s < 4; ++s)
    EXPECT_NEAR(cache.scores(0)[s], 2.0 * scores[static_cast<std::size_t>(cache.positions(0)[s])] / total, 1e-6);

  // A decode step: token 10 joins, the statistics take its query, the cache evicts the lowest expected score.
  float k[4] = {0.1f, -0.2f, 0.3f, 0.0f}, v[4] = {1, 1, 1, 1}, qn[8];
  for (auto& e : qn) e = normal(rng);
  l.kv.append(10, k, v);
  st.add(qn, 1);
  // The step's logits are [q_head][n], n = 5 live slots (the row stride decode_step takes).
  kvevict::expected_attention_scores(st, l.kv, rope, 11, o, scores.data(), 5, ws);
  kvevict::expected_attention_logits(st, l.kv, rope, 11, o, rows.data(), 5, ws);
  const std::size_t victim =
      static_cast<std::size_t>(std::min_element(scores.begin(), scores.begin() + 5) - scores.begin());
  Positions held(cache.positions(0), cache.positions(0) + 5), after;
  for (std::size_t s = 0; s < 5; ++s)
    if (s != victim) after.push_back(held[s]);
  std::sort(after.begin(), after.end());
  cache.decode_step(rows.data(), 5);
  EXPECT_EQ(cache.retained_positions(0), after);
}

TEST(ExpectedAttention, ErrorsNameTheArgumentAndWriteNothing) {
  Layer l(2, 4);
  const float k[8] = {1, 0, 0, 0, 0, 1, 0, 0}, v[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  for (std::int64_t p = 0; p < 3; ++p) l.kv.append(p, k, v);
  kvevict::QueryStatistics st(4, 4), empty(4, 4), wrong_d(4, 2), odd(3, 4);
  const float q[16] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
  st.add(q, 1);
  const float q2[8] = {};
  wrong_d.add(q2, 1);
  odd.add(q, 1);
  kvevict::ExpectedAttentionScratch ws;
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 0;  // every slot scored (a sink's key and value are never read by the softmax)
  std::vector<float> out(8, -7.0f);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  const kvevict::RopeSpec rope{};
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(empty, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: stats holds no query rows (add the prompt's queries first)");
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(wrong_d, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: stats.head_dim() = 2 but the view's head_dim is 4");
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(odd, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: stats.n_q_heads() = 3 is not a multiple of n_kv_heads = 2");
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, o, out.data(), 2, ws); }),
            "kvevict::expected_attention_scores: row_stride = 2 is below the longest KV head's 3 slots");
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, o, nullptr, 4, ws); }),
            "kvevict::expected_attention_scores: out must be non-null");
  kvevict::ExpectedAttentionOptions bad = o;
  bad.n_future_positions = 0;
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, bad, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: n_future_positions must be >= 1 (got 0)");
  bad = o;
  bad.epsilon = -1.0f;
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, bad, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: epsilon must be finite and >= 0 (got -1)");
  l.kv.k_row(1, 2)[0] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: the key of KV head 1, slot 2 is not finite");
  l.kv.k_row(1, 2)[0] = 0.0f;
  l.kv.v_row(0, 1)[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(message([&] { kvevict::expected_attention_scores(st, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: the value of KV head 0, slot 1 is not finite");
  EXPECT_EQ(message([&] { kvevict::expected_attention_logits(st, l.kv, rope, 3, o, out.data(), 4, ws); }),
            "kvevict::expected_attention_scores: the value of KV head 0, slot 1 is not finite");
  for (float x : out) EXPECT_EQ(x, -7.0f);  // nothing written by any failed call

  // SingleRowLogits serves only the last row: a score reading every prompt row (H2O) gets a clear error.
  const std::vector<float> rows(4 * 4, 0.0f);
  kvevict::SingleRowLogits last(rows.data(), 4, 4, 2);
  EXPECT_EQ(message([&] { last.row(0, 1); }),
            "kvevict::SingleRowLogits: the cache asks for row 1 of q_head 0 but only row 2 of 4 query heads is held "
            "(a score that reads every prompt row needs every row)");
  EXPECT_EQ(message([&] { last.row(4, 2); }),
            "kvevict::SingleRowLogits: the cache asks for row 2 of q_head 4 but only row 2 of 4 query heads is held "
            "(a score that reads every prompt row needs every row)");
  EXPECT_EQ(last.row(3, 2), rows.data() + 12);
  EXPECT_THROW(kvevict::SingleRowLogits(nullptr, 4, 4, 2), std::invalid_argument);
  EXPECT_THROW(kvevict::SingleRowLogits(rows.data(), 0, 4, 2), std::invalid_argument);
}

// ---- issue 51: sizes whose product overflows std::size_t (items 5 and 6) ------------------------------------------

TEST(QueryStatistics, SizesWhoseProductOverflowsAreRefusedByName) {
  // Item 5: n_q_heads · head_dim wrapped to 0, both buffers were empty and add() wrote through them.
  EXPECT_EQ(invalid_argument_message([] { kvevict::QueryStatistics st(std::size_t{1} << 62, 4); }),
            "kvevict::QueryStatistics: n_q_heads * head_dim * head_dim = 4611686018427387904 * 4 * 4 overflows "
            "std::size_t");
  EXPECT_EQ(invalid_argument_message([] { kvevict::QueryStatistics st(4, std::size_t{1} << 32); }),
            "kvevict::QueryStatistics: n_q_heads * head_dim * head_dim = 4 * 4294967296 * 4294967296 overflows "
            "std::size_t");
  // add(): the rows' element count n_rows · n_q_heads · head_dim is checked before any row is read; nothing added.
  kvevict::QueryStatistics st(2, 4);
  const float q[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  st.add(q, 1);
  EXPECT_EQ(invalid_argument_message([&] { st.add(q, std::size_t{1} << 62); }),
            "kvevict::QueryStatistics::add: n_rows * n_q_heads * head_dim = 4611686018427387904 * 2 * 4 overflows "
            "std::size_t");
  EXPECT_EQ(st.count(), 1u);
  double mu[4];
  st.mean(1, mu);
  EXPECT_EQ(mu[0], 5.0);
  EXPECT_EQ(mu[3], 8.0);
}

/// A layer of 2 KV heads (d = 4, 3 tokens) and statistics of `n_q` query heads, for the stride tests.
struct TwoHeadLayer {
  explicit TwoHeadLayer(std::size_t n_q) : l(2, 4), st(n_q, 4) {
    const float k[8] = {1, 0, 0.5f, 0, 0, 1, 0, -0.5f}, v[8] = {1, 2, 2, 1, 0.5f, 1, 1, 1};
    for (std::int64_t p = 0; p < 3; ++p) l.kv.append(p, k, v);
    std::vector<float> q(n_q * 4);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
    st.add(q.data(), 1);
    st.add(q.data(), 1);
  }
  Layer l;
  kvevict::QueryStatistics st;
};

TEST(ExpectedAttention, ARowStrideWhoseExtentOverflowsIsRefusedBeforeAnyScratchOrWrite) {
  // Item 6: 2 KV heads, row_stride = 2^63. n_kv_heads · row_stride wrapped to 0, the scratch was sized 1 float and
  // head 1's slot s was written at 1 · 2^63 + s (a heap overflow in Release, an Eigen assertion in Debug).
  TwoHeadLayer t(2);
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 1;
  const kvevict::RopeSpec rope{};
  kvevict::ExpectedAttentionScratch ws;
  const std::size_t huge = std::size_t{1} << 63;
  std::vector<float> out(16, -7.0f);
  const std::vector<float> k0(t.l.kv.k_row(0, 0), t.l.kv.k_row(0, 0) + 2 * 16 * 4);
  EXPECT_EQ(invalid_argument_message(
                [&] { kvevict::expected_attention_logits(t.st, t.l.kv, rope, 3, o, out.data(), huge, ws); }),
            "kvevict::expected_attention_logits: n_q_heads * row_stride = 2 * 9223372036854775808 overflows "
            "std::size_t");
  EXPECT_EQ(invalid_argument_message(
                [&] { kvevict::expected_attention_scores(t.st, t.l.kv, rope, 3, o, out.data(), huge, ws); }),
            "kvevict::expected_attention_scores: n_kv_heads * row_stride = 2 * 9223372036854775808 overflows "
            "std::size_t");
  // A larger group: the logits' extent is n_q_heads · row_stride (4 · 2^62 wraps, 2 · 2^62 does not).
  TwoHeadLayer t4(4);
  EXPECT_EQ(invalid_argument_message([&] {
              kvevict::expected_attention_logits(t4.st, t4.l.kv, rope, 3, o, out.data(), std::size_t{1} << 62, ws);
            }),
            "kvevict::expected_attention_logits: n_q_heads * row_stride = 4 * 4611686018427387904 overflows "
            "std::size_t");
  // Nothing written, the view, the statistics and the scratch as before: a later call gives the bits a fresh
  // scratch gives.
  for (float x : out) EXPECT_EQ(x, -7.0f);
  EXPECT_EQ(std::vector<float>(t.l.kv.k_row(0, 0), t.l.kv.k_row(0, 0) + 2 * 16 * 4), k0);
  EXPECT_EQ(t.l.kv.length(0), 3u);
  EXPECT_EQ(t.l.kv.length(1), 3u);
  EXPECT_EQ(t.st.count(), 2u);
  std::vector<float> after(2 * 3), fresh(2 * 3);
  kvevict::ExpectedAttentionScratch ws_fresh;
  kvevict::expected_attention_logits(t.st, t.l.kv, rope, 3, o, after.data(), 3, ws);
  kvevict::expected_attention_logits(t.st, t.l.kv, rope, 3, o, fresh.data(), 3, ws_fresh);
  EXPECT_EQ(after, fresh);
}

TEST(ExpectedAttention, TheScratchFollowsTheHeldSlotsNotTheRowStride) {
  // One KV head and one query head: row_stride = 2^62 addresses only row 0, so the call is valid; the scratch used
  // to be sized n_kv_heads · row_stride floats (std::bad_alloc from Eigen, std::length_error from the logits' vector).
  Layer l(1, 4);
  const float k[3][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0.5f, 0.5f, 0, 0}}, v[3][4] = {{1, 1, 0, 0}, {0, 2, 0, 0},
                                                                                    {1, 0, 0, 0}};
  for (std::int64_t p = 0; p < 3; ++p) l.kv.append(p, k[p], v[p]);
  kvevict::QueryStatistics st(1, 4);
  const float q[8] = {1, 0.5f, 0, 0, 0, 1, 0.25f, 0};
  st.add(q, 2);
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 1;
  const kvevict::RopeSpec rope{};
  kvevict::ExpectedAttentionScratch ws;
  std::vector<float> want(3), got(3), want_rows(3), got_rows(3);
  kvevict::expected_attention_scores(st, l.kv, rope, 3, o, want.data(), 3, ws);
  kvevict::expected_attention_logits(st, l.kv, rope, 3, o, want_rows.data(), 3, ws);
  EXPECT_NO_THROW(kvevict::expected_attention_scores(st, l.kv, rope, 3, o, got.data(), std::size_t{1} << 62, ws));
  EXPECT_NO_THROW(
      kvevict::expected_attention_logits(st, l.kv, rope, 3, o, got_rows.data(), std::size_t{1} << 62, ws));
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_rows, want_rows);
}

// ---- issue 51, item 9: the sinks are the n_sink held tokens with the lowest position IDs ----------------------------

TEST(ExpectedAttention, SinksAreTheLowestHeldPositionsWhereverTheSequenceStarts) {
  // The hand example of HandExampleInClosedForm at positions 100, 101, 102 instead of 0, 1, 2: with n_sink = 1 the
  // token at 100 is the sink (it was none: no position is below 1), the others softmax without it.
  kvevict::QueryStatistics st(1, 2);
  const float q[] = {1, 2, 3, 6};  // μ = (2, 4), Σ = [[1, 2], [2, 4]]
  st.add(q, 2);
  const float k[3][2] = {{1, 0}, {0, 1}, {0, 0}}, v[3][2] = {{3, 4}, {1, 0}, {0, 2}};
  kvevict::ExpectedAttentionOptions o;
  o.n_future_positions = 1;  // at next_position 0: R̄ = I
  o.n_sink = 1;
  kvevict::ExpectedAttentionScratch ws;
  const kvevict::RopeSpec rope{kvevict::RopeStyle::interleaved, 10000.0};
  {
    Layer l(1, 2);
    for (int s = 0; s < 3; ++s) l.kv.append(100 + s, k[s], v[s]);
    float out[3];
    kvevict::expected_attention_scores(st, l.kv, rope, 0, o, out, 3, ws);
    const double x1 = 4 / std::sqrt(2.0) + 1.0, x2 = 0.0, z12 = std::exp(x1) + std::exp(x2);
    const double s1 = std::exp(x1) / z12 * 1, s2 = std::exp(x2) / z12 * 2;
    EXPECT_NEAR(out[1], s1, 1e-6);
    EXPECT_NEAR(out[2], s2, 1e-6);
    EXPECT_NEAR(out[0], std::max(s1, s2) + 1.0, 1e-6);
  }
  {
    // Slot order is not position order (positions 102, 100, 101 by slot), n_sink = 2: the sinks are slots 1 and 2.
    // Slot 0 is the only token softmaxed: attention exactly 1, score 1 · ||(3, 4)|| = 5; the sinks 5 + 1.
    Layer l(1, 2);
    const std::int64_t pos[3] = {102, 100, 101};
    for (int s = 0; s < 3; ++s) l.kv.append(pos[s], k[s], v[s]);
    o.n_sink = 2;
    float out[3];
    kvevict::expected_attention_scores(st, l.kv, rope, 0, o, out, 3, ws);
    EXPECT_EQ(out[0], 5.0f);
    EXPECT_EQ(out[1], 6.0f);
    EXPECT_EQ(out[2], 6.0f);
  }
}

TEST(ExpectedAttention, ATovaCacheKeepsTheSinksOfASequenceFromPosition1000) {
  // 1 KV head, 1 query head, d = 2, k = 4, n_sink = 2, positions 1000..1009. Every key is 0, so every expected logit
  // is 0 and a live token's score is ||v|| / (live tokens). Tokens 1000 and 1001 have v = 0 (score 0 if they were
  // not sinks); token 1000 + i has v = (i − 1, 0) for i >= 2. The sinks score 8/8 + 1 = 2, so the kept set is
  // {1000, 1001} and the two largest norms, {1008, 1009} (the old rule, position < n_sink, kept 1006..1009).
  Layer l(1, 2);
  kvevict::CacheConfig cfg = kvtest::token_config(4, 0, 1);
  cfg.recent = kvevict::RecentWindow::none();
  kvevict::TOVA cache(cfg, l.kv);
  const float zero[2] = {0, 0};
  for (std::int64_t i = 0; i < 10; ++i) {
    const float v[2] = {i >= 2 ? static_cast<float>(i - 1) : 0.0f, 0.0f};
    l.kv.append(1000 + i, zero, v);
  }
  kvevict::QueryStatistics st(1, 2);
  const float q[4] = {1, -1, 0.5f, 2};
  st.add(q, 2);
  kvevict::ExpectedAttentionOptions o;
  o.n_sink = 2;
  kvevict::ExpectedAttentionScratch ws;
  const kvevict::RopeSpec rope{};
  std::vector<float> scores(10), rows(10);
  kvevict::expected_attention_scores(st, l.kv, rope, 1010, o, scores.data(), 10, ws);
  EXPECT_EQ(scores[0], 2.0f);
  EXPECT_EQ(scores[1], 2.0f);
  EXPECT_EQ(scores[9], 1.0f);  // 8 · (1/8)
  kvevict::expected_attention_logits(st, l.kv, rope, 1010, o, rows.data(), 10, ws);
  kvevict::SingleRowLogits last(rows.data(), 1, 10, 9);
  cache.prefill_chunk(last, 10, 10);
  cache.finish_prefill();
  EXPECT_EQ(cache.retained_positions(0), (Positions{1000, 1001, 1008, 1009}));
  // A decode step: token 1010 with v = (0.5, 0) scores 0.5 / 3 among the live 1008, 1009, 1010 and goes; the
  // sinks are still the two lowest held positions.
  const float v_new[2] = {0.5f, 0.0f};
  l.kv.append(1010, zero, v_new);
  st.add(q, 1);
  kvevict::expected_attention_logits(st, l.kv, rope, 1011, o, rows.data(), 5, ws);
  cache.decode_step(rows.data(), 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{1000, 1001, 1008, 1009}));
}

// ---- issue 51, item 12: the documented FLT_MIN floor of the logits ----------------------------------------------

TEST(ExpectedAttention, AZeroScoreTiesAtTheFloorLogFltMin) {
  // 1 KV head, 1 query head, d = 2, F = 1 at next_position 0 (R̄ = I), no sinks, no covariance. Keys 0 give x = 0:
  // each of the 3 tokens gets attention 1/3 (z = 1 + 1 + 1 = 3 exactly). Values (3, 4), (0, 0), (0, 2): scores
  // 5/3, 0 (a zero value vector), 2/3; the logits log(5/3), log(FLT_MIN) = −126 ln 2, log(2/3).
  kvevict::QueryStatistics st(1, 2);
  const float q[] = {1, 2, 3, 6};  // μ = (2, 4)
  st.add(q, 2);
  Layer l(1, 2);
  const float zero[2] = {0, 0}, v[3][2] = {{3, 4}, {0, 0}, {0, 2}};
  for (int s = 0; s < 3; ++s) l.kv.append(s, zero, v[s]);
  kvevict::ExpectedAttentionOptions o;
  o.n_future_positions = 1;
  o.n_sink = 0;
  o.use_covariance = false;
  kvevict::ExpectedAttentionScratch ws;
  const kvevict::RopeSpec rope{kvevict::RopeStyle::interleaved, 10000.0};
  float out[3], rows[3];
  kvevict::expected_attention_scores(st, l.kv, rope, 0, o, out, 3, ws);
  kvevict::expected_attention_logits(st, l.kv, rope, 0, o, rows, 3, ws);
  const double kLogFltMin = -126.0 * 0.693147180559945309417;  // log(2^-126)
  EXPECT_NEAR(out[0], 5.0 / 3.0, 1e-6);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 2.0 / 3.0, 1e-6);
  EXPECT_NEAR(rows[0], std::log(5.0 / 3.0), 1e-6);
  EXPECT_EQ(rows[1], std::log(FLT_MIN));  // the floor, not −inf
  EXPECT_NEAR(rows[1], kLogFltMin, 1e-5);
  EXPECT_NEAR(rows[2], std::log(2.0 / 3.0), 1e-6);
  // ε > 0 adds to the attention, not to the score: (1/3 + 1/4) · 0 is still 0, on the floor.
  o.epsilon = 0.25f;
  kvevict::expected_attention_scores(st, l.kv, rope, 0, o, out, 3, ws);
  kvevict::expected_attention_logits(st, l.kv, rope, 0, o, rows, 3, ws);
  EXPECT_NEAR(out[0], (1.0 / 3.0 + 0.25) * 5.0, 1e-6);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(rows[1], std::log(FLT_MIN));
  // Attention that underflows gives a 0 score too, with a value vector that is not 0: key (−100, 0) has
  // x = μ · k / √2 = −200 / √2 ≈ −141.4, and exp(−141.4) is below the smallest float. Both zeros tie at the floor.
  Layer u(1, 2);
  const float far[2] = {-100, 0}, one[2] = {1, 0};
  u.kv.append(0, zero, one);
  u.kv.append(1, far, one);
  u.kv.append(2, zero, v[1]);
  o.epsilon = 0.0f;
  kvevict::expected_attention_scores(st, u.kv, rope, 0, o, out, 3, ws);
  kvevict::expected_attention_logits(st, u.kv, rope, 0, o, rows, 3, ws);
  EXPECT_EQ(out[0], 0.5f);  // exp(0) / (1 + 0 + 1) · ||(1, 0)||
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(rows[0], std::log(0.5f));
  EXPECT_EQ(rows[1], std::log(FLT_MIN));
  EXPECT_EQ(rows[2], std::log(FLT_MIN));
}

}  // namespace
