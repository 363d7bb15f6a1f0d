// causal_attention's last queries (query_offset: a chunk after a prefix every query sees) and its maxes (each
// key's largest probability, KVzip's reconstruction score), against a reference written here (each row's softmax
// in double over its visible keys), on every compiled path, serially and on a pool; with and without the output;
// padding before and after the offset; exact values by hand; the refusals of the new combinations.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "thread_pool.hpp"

namespace {

/// q as [head][n][d] for the n = P − q0 query positions q0 .. P − 1; k and v as [head][P][d], contiguous.
struct Tail {
  std::size_t nq, nkv, d, P, q0, first;
  float scale;
  std::vector<float> q, k, v;
  Tail(std::size_t nq_, std::size_t nkv_, std::size_t d_, std::size_t P_, std::size_t q0_, std::size_t first_,
       float spread, unsigned seed)
      : nq(nq_), nkv(nkv_), d(d_), P(P_), q0(q0_), first(first_), scale(1.0f / std::sqrt(static_cast<float>(d_))) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    q.resize(nq * (P - q0) * d);
    k.resize(nkv * P * d);
    v.resize(nkv * P * d);
    for (auto& x : q) x = n01(rng) * spread;
    for (auto& x : k) x = n01(rng);
    for (auto& x : v) x = n01(rng);
  }
  std::size_t n() const { return P - q0; }
  kvevict::CausalAttentionArgs args(float* out, float* sums, float* maxes) const {
    kvevict::CausalAttentionArgs a;
    a.q = q.data();
    a.q_head_stride = n() * d;
    a.q_row_stride = d;
    a.k = k.data();
    a.k_head_stride = P * d;
    a.k_row_stride = d;
    a.v = out != nullptr ? v.data() : nullptr;
    a.v_head_stride = P * d;
    a.v_row_stride = d;
    a.out = out;
    a.out_head_stride = n() * d;
    a.out_row_stride = d;
    a.sums = sums;
    a.maxes = maxes;
    a.n_q_heads = nq;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.prompt_len = P;
    a.query_offset = q0;
    a.first = first;
    a.scale = scale;
    return a;
  }
};

/// out [head][n][d], sums and maxes [head][P], in double: query row i (position q0 + i, if >= first) over keys
/// [first, q0 + i].
void reference(const Tail& p, std::vector<double>& out, std::vector<double>& sums, std::vector<double>& maxes) {
  out.assign(p.nq * p.n() * p.d, 0.0);
  sums.assign(p.nq * p.P, 0.0);
  maxes.assign(p.nq * p.P, 0.0);
  const std::size_t g = p.nq / p.nkv;
  std::vector<double> e(p.P);
  for (std::size_t h = 0; h < p.nq; ++h)
    for (std::size_t i = 0; i < p.n(); ++i) {
      const std::size_t pos = p.q0 + i, j = h / g;
      if (pos < p.first) continue;
      double mx = -INFINITY, l = 0.0;
      for (std::size_t c = p.first; c <= pos; ++c) {
        double s = 0.0;
        for (std::size_t x = 0; x < p.d; ++x)
          s += static_cast<double>(p.q[(h * p.n() + i) * p.d + x]) * p.k[(j * p.P + c) * p.d + x];
        e[c] = s * p.scale;
        mx = std::max(mx, e[c]);
      }
      for (std::size_t c = p.first; c <= pos; ++c) l += (e[c] = std::exp(e[c] - mx));
      for (std::size_t c = p.first; c <= pos; ++c) {
        const double w = e[c] / l;
        sums[h * p.P + c] += w;
        maxes[h * p.P + c] = std::max(maxes[h * p.P + c], w);
        for (std::size_t x = 0; x < p.d; ++x) out[(h * p.n() + i) * p.d + x] += w * p.v[(j * p.P + c) * p.d + x];
      }
    }
}

double max_error(const std::vector<float>& got, const std::vector<double>& want, bool relative) {
  double e = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i)
    e = std::max(e, std::fabs(got[i] - want[i]) / (relative ? std::max(1.0, want[i]) : 1.0));
  return e;
}

template <class Executor>
void expect_matches(const Tail& p, Executor&& ex, const std::string& what) {
  std::vector<double> ro, rs, rm;
  reference(p, ro, rs, rm);
  std::vector<float> out(p.nq * p.n() * p.d, 7.0f), sums(p.nq * p.P, 7.0f), maxes(p.nq * p.P, 7.0f);
  kvevict::causal_attention(p.args(out.data(), sums.data(), maxes.data()), ex);
  EXPECT_LT(max_error(out, ro, false), 2e-5) << what;
  EXPECT_LT(max_error(sums, rs, true), 2e-5) << what;
  EXPECT_LT(max_error(maxes, rm, false), 2e-6) << what;
  for (std::size_t h = 0; h < p.nq; ++h)
    for (std::size_t c = 0; c < p.first; ++c) {
      EXPECT_EQ(maxes[h * p.P + c], 0.0f) << what << " padded key " << c;
      EXPECT_EQ(sums[h * p.P + c], 0.0f) << what << " padded key " << c;
    }
  // Without the output (v null too): the same scores, bit for bit.
  std::vector<float> sums2(sums.size(), 7.0f), maxes2(maxes.size(), 7.0f);
  kvevict::causal_attention(p.args(nullptr, sums2.data(), maxes2.data()), ex);
  EXPECT_EQ(sums2, sums) << what << " without out";
  EXPECT_EQ(maxes2, maxes) << what << " without out";
  // Maxes alone.
  std::vector<float> maxes3(maxes.size(), 7.0f);
  kvevict::causal_attention(p.args(nullptr, nullptr, maxes3.data()), ex);
  EXPECT_EQ(maxes3, maxes) << what << " maxes alone";
}

struct IsaGuard {
  kvevict::Isa saved = kvevict::active_isa();
  ~IsaGuard() { kvevict::set_isa(saved); }
};

TEST(AttentionMaxes, MatchesReferenceOnEveryPathAndExecutor) {
  IsaGuard guard;
  kvtools::ThreadPool two(2);
  struct Shape {
    std::size_t nq, nkv, d, P, q0, first;
    float spread;
  };
  // q0: 0 (the whole prompt), mid-block, past a 256-key tile, the last position; first before, at and after q0.
  const Shape shapes[] = {{1, 1, 16, 1, 0, 0, 1.0f},     {2, 1, 16, 40, 39, 0, 1.0f},  {3, 3, 32, 70, 33, 5, 2.0f},
                          {4, 2, 64, 90, 20, 50, 3.0f},  {2, 1, 48, 77, 30, 30, 1.0f}, {9, 3, 64, 600, 290, 3, 4.0f},
                          {4, 1, 16, 530, 0, 7, 2.0f}};
  unsigned seed = 1;
  for (auto isa : {kvevict::Isa::kBaseline, kvevict::Isa::kAvx2, kvevict::Isa::kAvx512}) {
    if (!kvevict::isa_supported(isa)) continue;
    kvevict::set_isa(isa);
    for (const Shape& s : shapes) {
      if (s.P > 100 && isa != kvevict::best_isa()) continue;  // the long shapes on the best path (ASan's time)
      const Tail p(s.nq, s.nkv, s.d, s.P, s.q0, s.first, s.spread, seed++);
      const std::string what = std::string(kvevict::isa_name(isa)) + " nq=" + std::to_string(s.nq) +
                               " nkv=" + std::to_string(s.nkv) + " d=" + std::to_string(s.d) + " P=" +
                               std::to_string(s.P) + " q0=" + std::to_string(s.q0) + " first=" + std::to_string(s.first);
      expect_matches(p, kvevict::SerialExecutor{}, what + " serial");
      expect_matches(p, two, what + " on 2 workers");
    }
  }
}

TEST(AttentionMaxes, TailRowsEqualTheWholePromptsRows) {
  // The last n queries with query_offset give the rows the whole prompt gives them (the same blocks' arithmetic
  // up to where a block starts: to float rounding), and the maxes of the whole prompt are at least the tail's.
  const Tail whole(4, 2, 32, 300, 0, 0, 2.0f, 11);
  Tail tail = whole;
  tail.q0 = 100;
  tail.q.clear();
  for (std::size_t h = 0; h < 4; ++h)
    tail.q.insert(tail.q.end(), whole.q.begin() + (h * 300 + 100) * 32, whole.q.begin() + (h * 300 + 300) * 32);
  std::vector<float> out_w(4 * 300 * 32), max_w(4 * 300), out_t(4 * 200 * 32), max_t(4 * 300);
  kvevict::causal_attention(whole.args(out_w.data(), nullptr, max_w.data()));
  kvevict::causal_attention(tail.args(out_t.data(), nullptr, max_t.data()));
  for (std::size_t h = 0; h < 4; ++h)
    for (std::size_t i = 0; i < 200; ++i)
      for (std::size_t x = 0; x < 32; ++x)
        ASSERT_NEAR(out_t[(h * 200 + i) * 32 + x], out_w[(h * 300 + 100 + i) * 32 + x], 2e-6) << h << " " << i;
  for (std::size_t i = 0; i < max_t.size(); ++i) ASSERT_LE(max_t[i], max_w[i] + 1e-6f) << i;
}

TEST(AttentionMaxes, ExactValuesOfUniformAttention) {
  // q = 0: uniform rows. P = 4, q0 = 2: position 2 sees keys 0..2 (1/3 each), position 3 sees 0..3 (1/4):
  // maxes = [1/3, 1/3, 1/3, 1/4], sums = [7/12, 7/12, 7/12, 1/4]. With first = 1: 1/2 and 1/3 over keys 1..:
  // maxes = [0, 1/2, 1/2, 1/3].
  Tail p(2, 1, 16, 4, 2, 0, 0.0f, 1);
  std::vector<float> sums(8), maxes(8);
  kvevict::causal_attention(p.args(nullptr, sums.data(), maxes.data()));
  for (std::size_t h = 0; h < 2; ++h) {
    for (std::size_t c = 0; c < 3; ++c) {
      EXPECT_FLOAT_EQ(maxes[h * 4 + c], 1.0f / 3.0f);
      EXPECT_FLOAT_EQ(sums[h * 4 + c], 7.0f / 12.0f);
    }
    EXPECT_FLOAT_EQ(maxes[h * 4 + 3], 0.25f);
    EXPECT_FLOAT_EQ(sums[h * 4 + 3], 0.25f);
  }
  p.first = 1;
  kvevict::causal_attention(p.args(nullptr, nullptr, maxes.data()));
  for (std::size_t h = 0; h < 2; ++h) {
    EXPECT_EQ(maxes[h * 4 + 0], 0.0f);
    EXPECT_FLOAT_EQ(maxes[h * 4 + 1], 0.5f);
    EXPECT_FLOAT_EQ(maxes[h * 4 + 2], 0.5f);
    EXPECT_FLOAT_EQ(maxes[h * 4 + 3], 1.0f / 3.0f);
  }
}

TEST(AttentionMaxes, PaddedQueriesBeforeFirstGiveZeroRows) {
  // q0 = 2 < first = 5: query rows 0..2 (positions 2..4) are padding: output 0, nothing added to the scores.
  const Tail p(2, 2, 16, 12, 2, 5, 1.0f, 4);
  std::vector<float> out(2 * 10 * 16, 7.0f), maxes(2 * 12, 7.0f);
  kvevict::causal_attention(p.args(out.data(), nullptr, maxes.data()));
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t x = 0; x < 16; ++x) EXPECT_EQ(out[(h * 10 + i) * 16 + x], 0.0f);
  std::vector<double> ro, rs, rm;
  reference(p, ro, rs, rm);
  EXPECT_LT(max_error(out, ro, false), 2e-5);
  EXPECT_LT(max_error(maxes, rm, false), 2e-6);
}

TEST(AttentionMaxes, TheSameBitsOnAnyNumberOfWorkers) {
  const Tail p(6, 2, 32, 700, 200, 3, 2.0f, 21);
  kvtools::ThreadPool three(3), seven(7);
  auto run = [&](auto&& ex) {
    std::vector<float> sums(6 * 700), maxes(6 * 700);
    kvevict::causal_attention(p.args(nullptr, sums.data(), maxes.data()), ex);
    sums.insert(sums.end(), maxes.begin(), maxes.end());
    return sums;
  };
  const auto serial = run(kvevict::SerialExecutor{});
  EXPECT_EQ(run(three), serial);
  EXPECT_EQ(run(seven), serial);
}

TEST(AttentionMaxes, RefusesTheNewCombinationsAndWritesNothing) {
  const Tail p(4, 2, 16, 40, 10, 0, 1.0f, 9);
  std::vector<float> out(4 * 30 * 16, 3.0f), maxes(4 * 40, 3.0f);
  const auto good = p.args(out.data(), nullptr, maxes.data());
  struct Bad {
    const char* message;
    void (*edit)(kvevict::CausalAttentionArgs&);
  };
  const Bad cases[] = {
      {"query_offset (40) must be below prompt_len (40): the queries' positions end at prompt_len - 1",
       [](kvevict::CausalAttentionArgs& a) { a.query_offset = 40; }},
      {"out is null and no score (sums, noisy_sums, maxes) is asked for",
       [](kvevict::CausalAttentionArgs& a) {
         a.out = nullptr;
         a.maxes = nullptr;
       }},
      {"v is null (out needs it)", [](kvevict::CausalAttentionArgs& a) { a.v = nullptr; }},
      {"q is null", [](kvevict::CausalAttentionArgs& a) { a.q = nullptr; }},
      {"k is null", [](kvevict::CausalAttentionArgs& a) { a.k = nullptr; }},
  };
  for (const Bad& b : cases) {
    auto a = good;
    b.edit(a);
    try {
      kvevict::causal_attention(a);
      ADD_FAILURE() << "accepted: " << b.message;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("causal_attention: ") + b.message);
    }
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 3.0f; })) << b.message;
    EXPECT_TRUE(std::all_of(maxes.begin(), maxes.end(), [](float x) { return x == 3.0f; })) << b.message;
  }
  // Without out, v and the strides of v and out are not looked at.
  auto a = good;
  a.out = nullptr;
  a.v = nullptr;
  a.v_row_stride = a.out_row_stride = 0;
  kvevict::causal_attention(a);
  std::vector<double> ro, rs, rm;
  reference(p, ro, rs, rm);
  EXPECT_LT(max_error(maxes, rm, false), 2e-6);
}

}  // namespace
