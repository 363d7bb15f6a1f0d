// KeyNorm (KeyNormScore, score/score_policies.hpp) on a layer of several KV heads through decode steps (issue 51,
// item 11): every head's new token gets its own key's score, 1 / (1 + ||k||) with ||k|| computed here by hand (keys
// whose norms are exact), and every head evicts its own largest norm outside the recent window (kvpress's KnormPress
// keeps the small norms). Hand-derived kept sets after the prefill and after each step, for float and half views;
// then random keys against a reference in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using Positions = std::vector<std::int64_t>;

/// A key of head_dim 4 with the given L2 norm, all elements exact in float and half: a quadruple whose squares sum
/// to norm² exactly.
std::vector<float> key_with_norm(double norm) {
  struct Q {
    double n;
    float e[4];
  };
  static const Q table[] = {{1.5, {0.5f, 1, 1, 0}},  {2, {1, 1, 1, 1}},       {2.5, {0, 1.5f, 2, 0}},
                            {3, {1, 2, 2, 0}},       {3.5, {1, 1.5f, 3, 0}},  {4.5, {0.5f, 2, 4, 0}},
                            {5, {0, 3, 4, 0}},       {5.5, {1, 3, 4.5f, 0}},  {6, {2, 4, 4, 0}},
                            {6.5, {1.5f, 2, 6, 0}},  {7, {2, 3, 6, 0}},       {7.5, {1, 5, 5.5f, 0}},
                            {9, {1, 4, 8, 0}},       {11, {2, 6, 9, 0}},      {13, {3, 4, 12, 0}}};
  for (const Q& q : table)
    if (q.n == norm) return std::vector<float>(q.e, q.e + 4);
  ADD_FAILURE() << "no key of norm " << norm;
  return std::vector<float>(4, 0.0f);
}

/// The hand example's norms, [KV head][position]: 6 prompt tokens, then 6 decode steps.
constexpr double kNorms[3][12] = {
    {3, 9, 1.5, 7, 2.5, 5, /* steps */ 4.5, 11, 2, 6, 5.5, 13},
    {13, 1.5, 11, 2.5, 9, 3, /* steps */ 7, 2, 6.5, 3.5, 7.5, 4.5},
    {5, 5, 6, 1.5, 7, 9, /* steps */ 5, 3, 13, 2.5, 6, 1.5},  // equal norms: the newest of them goes first
};

/// Key of (head, position): the quadruple of its norm, rotated by head + position and with alternating signs, so
/// that every element index (the last included) carries weight.
std::vector<float> hand_key(std::size_t h, std::int64_t p) {
  const std::vector<float> base = key_with_norm(kNorms[h][p]);
  std::vector<float> k(4);
  for (std::size_t i = 0; i < 4; ++i) k[(i + h + static_cast<std::size_t>(p)) % 4] = (i + p) % 2 == 0 ? base[i] : -base[i];
  return k;
}

template <class T>
struct HandLayer {
  kvevict::KVBuffer<T> buf{3, 16, 4};
  kvevict::KVView<T> kv = buf.view();
  void append(std::int64_t p) {
    std::vector<T> k, v(12, T(0.0f));
    for (std::size_t h = 0; h < 3; ++h)
      for (float e : hand_key(h, p)) k.push_back(T(e));
    kv.append(p, k.data(), v.data());
  }
};

/// 1 / (1 + norm), the norm exact: the one rounding is the division's, in float as in double.
float want_score(double norm) { return static_cast<float>(1.0 / (1.0 + norm)); }

/// k = 4, w = 1, 3 KV heads of 2 query heads each. The prefill keeps, per head, the window {5} and the three
/// smallest norms of 0..4; each step the new token enters the window and the largest norm outside it goes
/// (equal norms: the newest). Derived by hand from kNorms:
///   head 0: {0, 2, 4, 5} -> 5 goes, 6 goes, 7 goes, 0 goes, 9 goes, 10 goes
///   head 1: {1, 3, 4, 5} -> 4 goes, 6, 5, 8, 9, 10
///   head 2: {0, 1, 3, 5} -> 5 goes, 6 (0, 1, 6 tie at 5: the newest), 1 (0 and 1 tie), 8, 0, 10
const Positions kKept[3][7] = {
    {{0, 2, 4, 5}, {0, 2, 4, 6}, {0, 2, 4, 7}, {0, 2, 4, 8}, {2, 4, 8, 9}, {2, 4, 8, 10}, {2, 4, 8, 11}},
    {{1, 3, 4, 5}, {1, 3, 5, 6}, {1, 3, 5, 7}, {1, 3, 7, 8}, {1, 3, 7, 9}, {1, 3, 7, 10}, {1, 3, 7, 11}},
    {{0, 1, 3, 5}, {0, 1, 3, 6}, {0, 1, 3, 7}, {0, 3, 7, 8}, {0, 3, 7, 9}, {3, 7, 9, 10}, {3, 7, 9, 11}},
};

template <class T>
void run_hand_example() {
  HandLayer<T> l;
  kvevict::KeyNorm cache(kvtest::token_config(4, 1, 6), l.kv);
  for (std::int64_t p = 0; p < 6; ++p) l.append(p);
  cache.prefill(nullptr, 6);
  auto check = [&](std::size_t t) {
    for (std::size_t h = 0; h < 3; ++h) {
      EXPECT_EQ(cache.retained_positions(h), kKept[h][t]) << "head " << h << " after step " << t;
      EXPECT_EQ(l.kv.length(h), 4u);
      // Every held token's score, by slot: 1 / (1 + its norm on this head).
      for (std::size_t s = 0; s < cache.length(h); ++s) {
        const std::int64_t p = cache.positions(h)[s];
        EXPECT_EQ(cache.scores(h)[s], want_score(kNorms[h][p])) << "head " << h << " position " << p;
      }
    }
  };
  check(0);
  for (std::int64_t p = 6; p < 12; ++p) {
    l.append(p);
    cache.decode_step(nullptr, l.kv.length(0));
    // The new token (in the window, so still held): its own key's score on each head.
    for (std::size_t h = 0; h < 3; ++h) {
      const std::int64_t* pos = cache.positions(h);
      const std::size_t s = static_cast<std::size_t>(std::find(pos, pos + cache.length(h), p) - pos);
      ASSERT_LT(s, cache.length(h)) << "head " << h << " lost the new token " << p;
      EXPECT_EQ(cache.scores(h)[s], want_score(kNorms[h][p])) << "head " << h << ", new token " << p;
    }
    check(static_cast<std::size_t>(p - 5));
  }
}

TEST(KeyNormDecode, EachHeadScoresItsNewTokenAndEvictsItsLargestNorm) { run_hand_example<float>(); }
TEST(KeyNormDecode, EachHeadScoresItsNewTokenAndEvictsItsLargestNormHalfView) { run_hand_example<Eigen::half>(); }

// Random keys (head_dim 7, 3 KV heads, GQA 2, k = 6, w = 2): after the prefill and each of 20 steps, every head's
// scores are 1 / (1 + ||k||) of its own keys (double reference, within float rounding) and its kept set is the
// reference's: the window plus the smallest norms, evicting the largest norm outside the window each step.
TEST(KeyNormDecode, RandomKeysMatchADoubleReference) {
  const std::size_t H = 3, d = 7, P = 10, T = 20, k = 6, w = 2;
  for (unsigned seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<std::vector<std::vector<float>>> keys(H, std::vector<std::vector<float>>(P + T, std::vector<float>(d)));
    for (auto& head : keys)
      for (auto& key : head)
        for (float& e : key) e = nd(rng);
    auto norm = [&](std::size_t h, std::int64_t p) {
      double sq = 0.0;
      for (float e : keys[h][static_cast<std::size_t>(p)]) sq += static_cast<double>(e) * e;
      return std::sqrt(sq);
    };
    kvevict::KVBuffer<float> buf(H, P + T, d);
    auto kv = buf.view();
    kvevict::KeyNorm cache(kvtest::token_config(k, w, 2 * H), kv);
    auto append = [&](std::size_t p) {
      std::vector<float> kk, vv(H * d, 0.0f);
      for (std::size_t h = 0; h < H; ++h) kk.insert(kk.end(), keys[h][p].begin(), keys[h][p].end());
      kv.append(static_cast<std::int64_t>(p), kk.data(), vv.data());
    };
    // The reference: per head, the held positions; the prefill keeps the last w and the k − w smallest norms of
    // the rest; a step appends, and evicts the largest norm outside the last w.
    std::vector<Positions> held(H);
    for (std::size_t h = 0; h < H; ++h) {
      Positions rest;
      for (std::int64_t p = 0; p < static_cast<std::int64_t>(P - w); ++p) rest.push_back(p);
      std::stable_sort(rest.begin(), rest.end(), [&](std::int64_t a, std::int64_t b) { return norm(h, a) < norm(h, b); });
      held[h].assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(k - w));
      for (std::size_t p = P - w; p < P; ++p) held[h].push_back(static_cast<std::int64_t>(p));
      std::sort(held[h].begin(), held[h].end());
    }
    for (std::size_t p = 0; p < P; ++p) append(p);
    cache.prefill(nullptr, P);
    auto compare = [&](const char* when) {
      for (std::size_t h = 0; h < H; ++h) {
        ASSERT_EQ(cache.retained_positions(h), held[h]) << "seed " << seed << ", " << when << ", head " << h;
        for (std::size_t s = 0; s < cache.length(h); ++s) {
          const double want = 1.0 / (1.0 + norm(h, cache.positions(h)[s]));
          ASSERT_NEAR(cache.scores(h)[s], want, 4e-7 * want) << "seed " << seed << ", " << when << ", head " << h;
        }
      }
    };
    compare("prefill");
    for (std::size_t t = 0; t < T; ++t) {
      append(P + t);
      cache.decode_step(nullptr, kv.length(0));
      for (std::size_t h = 0; h < H; ++h) {
        held[h].push_back(static_cast<std::int64_t>(P + t));
        std::size_t victim = 0;
        for (std::size_t i = 1; i + w < held[h].size(); ++i)
          if (norm(h, held[h][i]) > norm(h, held[h][victim])) victim = i;
        held[h].erase(held[h].begin() + static_cast<std::ptrdiff_t>(victim));
      }
      compare("step");
    }
  }
}

}  // namespace
