// KeyDiff (KeyDiffScore, score/score_policies.hpp) against a reference written from its documentation alone
// (issue 51, item 14): plain double loops, no call into the library. A token's score on a KV head is
// 1 − cos(k, â), â the normalised mean of the unit keys the head holds (`F.normalize` epsilon 1e-12, the cosine's
// 1e-8), clamped at 0; recomputed over every held key whenever a token enters. The selection: the prefill keeps the
// last w tokens and the k − w highest scores of the rest (ties: the older), a decode step evicts the lowest score
// outside the window (ties: the newer); `shared_heads` ranks the scores summed over the KV heads. The scores a head
// holds are those of the last time tokens entered (against the anchor of every key held then, the cut or the
// eviction after it does not rescore). Random keys over
// head dims with and without a partial 16-lane block, 1 to 3 KV heads, GQA, per head and shared, the prefill one-shot
// or in chunks, then decode steps: every head's kept positions exactly and its scores within float rounding.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using Positions = std::vector<std::int64_t>;
using Keys = std::vector<std::vector<std::vector<float>>>;  // [kv head][position][d]

/// The documented score of each held key of one head, in double.
std::vector<double> keydiff_scores(const std::vector<std::vector<float>>& head_keys, const Positions& held) {
  const std::size_t d = head_keys[0].size();
  auto norm = [d](const double* x) {
    double sq = 0.0;
    for (std::size_t i = 0; i < d; ++i) sq += x[i] * x[i];
    return std::sqrt(sq);
  };
  std::vector<double> anchor(d, 0.0), key(d);
  for (std::int64_t p : held) {
    for (std::size_t i = 0; i < d; ++i) key[i] = head_keys[static_cast<std::size_t>(p)][i];
    const double nk = std::max(norm(key.data()), 1e-12);
    for (std::size_t i = 0; i < d; ++i) anchor[i] += key[i] / nk;
  }
  for (double& a : anchor) a /= static_cast<double>(held.size());
  const double na = std::max(norm(anchor.data()), 1e-8);
  for (double& a : anchor) a /= na;
  std::vector<double> out;
  for (std::int64_t p : held) {
    for (std::size_t i = 0; i < d; ++i) key[i] = head_keys[static_cast<std::size_t>(p)][i];
    double dot = 0.0;
    for (std::size_t i = 0; i < d; ++i) dot += key[i] * anchor[i];
    out.push_back(std::max(0.0, 1.0 - dot / std::max(norm(key.data()), 1e-8)));
  }
  return out;
}

struct Reference {
  std::size_t H, k, w;
  bool shared;
  const Keys& keys;
  std::vector<Positions> held;
  std::vector<std::vector<double>> stored;  // [head][i]: the score of held[head][i], from the last time tokens entered
  bool ambiguous = false;  // two ranked values too close for float to be sure to order them as double does

  /// Scores every held key of every head against its head's anchor (kept as the stored scores), and returns what
  /// the selection ranks: those, or with `shared` their sum over the heads.
  std::vector<std::vector<double>> ranked() {
    std::vector<std::vector<double>> r(H);
    for (std::size_t j = 0; j < H; ++j) r[j] = keydiff_scores(keys[j], held[j]);
    stored = r;
    if (shared) {
      for (std::size_t j = 1; j < H; ++j)
        for (std::size_t i = 0; i < r[0].size(); ++i) r[0][i] += r[j][i];
      for (std::size_t j = 1; j < H; ++j) r[j] = r[0];
    }
    return r;
  }
  /// Flags the run if the value ranked last-kept and the next one are closer than float rounding can order.
  void margin(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i)
      if (v[i] != v[i - 1] && v[i] - v[i - 1] < 1e-5) ambiguous = true;  // equal keys' exact ties are fine
  }
  void prefill(std::size_t P) {
    held.assign(H, Positions(P));
    for (auto& h : held)
      for (std::size_t i = 0; i < P; ++i) h[i] = static_cast<std::int64_t>(i);
    const auto r = ranked();
    if (P <= k) return;
    for (std::size_t j = 0; j < H; ++j) {
      std::vector<std::size_t> order(P - w);
      for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return r[j][a] > r[j][b]; });
      margin(std::vector<double>(r[j].begin(), r[j].begin() + static_cast<std::ptrdiff_t>(P - w)));
      std::vector<std::size_t> keep(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k - w));
      for (std::size_t i = P - w; i < P; ++i) keep.push_back(i);
      std::sort(keep.begin(), keep.end());
      Positions p;
      std::vector<double> s;
      for (std::size_t i : keep) p.push_back(held[j][i]), s.push_back(stored[j][i]);
      held[j] = p, stored[j] = s;
    }
  }
  void step(std::int64_t p) {
    for (auto& h : held) h.push_back(p);
    const auto r = ranked();
    if (held[0].size() <= k) return;
    for (std::size_t j = 0; j < H; ++j) {
      const std::size_t n = held[j].size();
      std::size_t victim = 0;
      for (std::size_t i = 1; i + w < n; ++i)
        if (r[j][i] <= r[j][victim]) victim = i;  // ascending positions: <= keeps the newest of equals
      margin(std::vector<double>(r[j].begin(), r[j].begin() + static_cast<std::ptrdiff_t>(n - w)));
      held[j].erase(held[j].begin() + static_cast<std::ptrdiff_t>(victim));
      stored[j].erase(stored[j].begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
};

TEST(KeyDiffReference, RandomSequencesMatchAnIndependentReference) {
  std::mt19937 rng(1451);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::size_t dims[] = {2, 3, 8, 16, 17, 31, 40, 64};
  int compared = 0, skipped = 0;
  for (int trial = 0; trial < 96; ++trial) {
    const std::size_t H = 1 + rng() % 3, g = 1 + rng() % 2, d = dims[trial % 8];
    const std::size_t k = 3 + rng() % 8, w = rng() % (k + 1), P = 4 + rng() % 20, T = 10;
    const bool shared = H > 1 && rng() % 2 == 0, chunked = rng() % 3 == 0;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": H " << H << " g " << g << " d " << d << " k " << k
                                      << " w " << w << " P " << P << (shared ? " shared" : "")
                                      << (chunked ? " chunked" : ""));
    Keys keys(H, std::vector<std::vector<float>>(P + T, std::vector<float>(d)));
    for (auto& head : keys)
      for (auto& key : head)
        for (float& e : key) e = nd(rng);
    // Some keys repeat an earlier key of the same head scaled (same direction, same score): ties by position.
    for (auto& head : keys)
      for (std::size_t p = 3; p < head.size(); p += 5)
        for (std::size_t i = 0; i < d; ++i) head[p][i] = 2.0f * head[p - 3][i];
    kvevict::KVBuffer<float> buf(H, P + T, d);
    auto kv = buf.view();
    kvevict::CacheConfig cfg = kvtest::token_config(k, w, H * g);
    cfg.shared_heads = shared;
    kvevict::KeyDiff cache(cfg, kv);
    auto append = [&](std::size_t p) {
      std::vector<float> kk, vv(H * d, 0.0f);
      for (std::size_t j = 0; j < H; ++j) kk.insert(kk.end(), keys[j][p].begin(), keys[j][p].end());
      kv.append(static_cast<std::int64_t>(p), kk.data(), vv.data());
    };
    Reference ref{H, k, w, shared, keys, {}, {}};
    if (chunked) {  // unbounded chunks: the cut at finish_prefill, against the whole prompt's anchor
      const std::size_t first = P / 2;
      for (std::size_t p = 0; p < first; ++p) append(p);
      cache.prefill_chunk(nullptr, first, first);
      for (std::size_t p = first; p < P; ++p) append(p);
      cache.prefill_chunk(nullptr, P - first, P);
      cache.finish_prefill();
    } else {
      for (std::size_t p = 0; p < P; ++p) append(p);
      cache.prefill(nullptr, P);
    }
    ref.prefill(P);
    auto compare = [&](const char* when) {
      for (std::size_t j = 0; j < H; ++j) {
        ASSERT_EQ(cache.retained_positions(j), ref.held[j]) << when << ", head " << j;
        const std::vector<float> got = kvtest::scores_by_position(cache, j);
        const std::vector<double>& want = ref.stored[j];  // each head's own scores, also when shared
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6 * std::sqrt(static_cast<double>(d)) + 1e-6)
              << when << ", head " << j << ", position " << ref.held[j][i];
      }
    };
    if (ref.ambiguous) {
      ++skipped;
      continue;
    }
    compare("after the prefill");
    if (::testing::Test::HasFatalFailure()) return;
    for (std::size_t t = 0; t < T; ++t) {
      append(P + t);
      cache.decode_step(nullptr, kv.length(0));
      ref.step(static_cast<std::int64_t>(P + t));
      if (ref.ambiguous) break;
      compare("after a decode step");
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (ref.ambiguous) ++skipped;
    else ++compared;
  }
  EXPECT_GE(compared, 80) << skipped << " runs had near-ties";
}

}  // namespace
