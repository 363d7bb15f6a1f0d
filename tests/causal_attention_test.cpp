// causal_attention (attention/causal_attention.hpp): the prompt's fused causal attention and H2O's column sums
// against a reference written here (each row's softmax in double over its visible keys), on every compiled path,
// serially and on 2 and 3 workers, for sizes where the 32-query blocks, 32-key panels and 256-key tiles end
// mid-way, GQA groups, head_dim 16 to 128, strided views and left padding; exact values on a case computed by
// hand; every refusal with its message and the output untouched.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "thread_pool.hpp"

namespace {

/// A problem and its operands: q as [P][n_q][d] (row stride n_q·d + pad), k and v as [head][P][d] with
/// `pad` floats after every row (strided views of bigger buffers).
struct Problem {
  std::size_t nq, nkv, d, P, first, pad;
  float scale;
  std::vector<float> q, k, v;
  Problem(std::size_t nq_, std::size_t nkv_, std::size_t d_, std::size_t P_, std::size_t first_, float spread,
          unsigned seed, std::size_t pad_ = 3)
      : nq(nq_), nkv(nkv_), d(d_), P(P_), first(first_), pad(pad_), scale(1.0f / std::sqrt(static_cast<float>(d_))) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    q.resize(P * (nq * d + pad));
    k.resize(nkv * P * (d + pad));
    v.resize(nkv * P * (d + pad));
    for (auto& x : q) x = n01(rng) * spread;
    for (auto& x : k) x = n01(rng);
    for (auto& x : v) x = n01(rng);
  }
  float qv(std::size_t h, std::size_t i, std::size_t x) const { return q[i * (nq * d + pad) + h * d + x]; }
  float kv(std::size_t j, std::size_t c, std::size_t x) const { return k[(j * P + c) * (d + pad) + x]; }
  float vv(std::size_t j, std::size_t c, std::size_t x) const { return v[(j * P + c) * (d + pad) + x]; }
  kvevict::CausalAttentionArgs args(float* out, float* sums) const {
    kvevict::CausalAttentionArgs a;
    a.q = q.data();
    a.q_head_stride = d;
    a.q_row_stride = nq * d + pad;
    a.k = k.data();
    a.k_head_stride = P * (d + pad);
    a.k_row_stride = d + pad;
    a.v = v.data();
    a.v_head_stride = P * (d + pad);
    a.v_row_stride = d + pad;
    a.out = out;
    a.out_head_stride = P * d;  // [head][P][d]
    a.out_row_stride = d;
    a.sums = sums;
    a.n_q_heads = nq;
    a.n_kv_heads = nkv;
    a.head_dim = d;
    a.prompt_len = P;
    a.first = first;
    a.scale = scale;
    return a;
  }
};

/// The reference: out [head][P][d] and sums [head][P] in double, each real row's softmax over keys [first, i].
void reference(const Problem& p, std::vector<double>& out, std::vector<double>& sums) {
  out.assign(p.nq * p.P * p.d, 0.0);
  sums.assign(p.nq * p.P, 0.0);
  const std::size_t g = p.nq / p.nkv;
  std::vector<double> e(p.P);
  for (std::size_t h = 0; h < p.nq; ++h)
    for (std::size_t i = p.first; i < p.P; ++i) {
      const std::size_t j = h / g;
      double mx = -INFINITY, l = 0.0;
      for (std::size_t c = p.first; c <= i; ++c) {
        double s = 0.0;
        for (std::size_t x = 0; x < p.d; ++x) s += static_cast<double>(p.qv(h, i, x)) * p.kv(j, c, x);
        e[c] = s * p.scale;
        mx = std::max(mx, e[c]);
      }
      for (std::size_t c = p.first; c <= i; ++c) l += (e[c] = std::exp(e[c] - mx));
      for (std::size_t c = p.first; c <= i; ++c) {
        const double w = e[c] / l;
        sums[h * p.P + c] += w;
        for (std::size_t x = 0; x < p.d; ++x) out[(h * p.P + i) * p.d + x] += w * p.vv(j, c, x);
      }
    }
}

template <class Executor>
void expect_matches(const Problem& p, Executor&& ex, const std::string& what) {
  std::vector<double> ro, rs;
  reference(p, ro, rs);
  std::vector<float> out(p.nq * p.P * p.d, 7.0f), sums(p.nq * p.P, 7.0f);
  kvevict::causal_attention(p.args(out.data(), sums.data()), ex);
  double eo = 0.0, es = 0.0;
  for (std::size_t i = 0; i < out.size(); ++i) eo = std::max(eo, std::fabs(out[i] - ro[i]));
  for (std::size_t i = 0; i < sums.size(); ++i) es = std::max(es, std::fabs(sums[i] - rs[i]) / std::max(1.0, rs[i]));
  EXPECT_LT(eo, 2e-5) << what;
  EXPECT_LT(es, 2e-5) << what;
  for (std::size_t h = 0; h < p.nq; ++h)
    for (std::size_t i = 0; i < p.first; ++i) {
      EXPECT_EQ(sums[h * p.P + i], 0.0f) << what << " padded key " << i;
      for (std::size_t x = 0; x < p.d; ++x) ASSERT_EQ(out[(h * p.P + i) * p.d + x], 0.0f) << what << " padded row " << i;
    }
  // Without sums: the same output, sums untouched.
  std::vector<float> out2(out.size(), 7.0f);
  kvevict::causal_attention(p.args(out2.data(), nullptr), ex);
  EXPECT_EQ(out2, out) << what << " without sums";
}

std::vector<kvevict::Isa> paths() {
  std::vector<kvevict::Isa> v;
  for (auto isa : {kvevict::Isa::kBaseline, kvevict::Isa::kAvx2, kvevict::Isa::kAvx512})
    if (kvevict::isa_supported(isa)) v.push_back(isa);
  return v;
}

struct IsaGuard {
  kvevict::Isa saved = kvevict::active_isa();
  ~IsaGuard() { kvevict::set_isa(saved); }
};

TEST(CausalAttention, TheSameBitsOnAnyNumberOfWorkers) {
  // 16 fixed stripes per KV head, added in one order: serial, 2, 3 and 7 workers give the same bits, with both sums.
  const Problem p(6, 2, 32, 700, 3, 2.0f, 21);
  kvtools::ThreadPool two(2), three(3), seven(7);
  auto run = [&](auto&& ex) {
    std::vector<float> out(6 * 700 * 32), sums(6 * 700), noisy(6 * 700);
    auto a = p.args(out.data(), sums.data());
    a.noisy_sums = noisy.data();
    a.noise_seed = 5;
    a.tau = 1.7f;
    kvevict::causal_attention(a, ex);
    out.insert(out.end(), sums.begin(), sums.end());
    out.insert(out.end(), noisy.begin(), noisy.end());
    return out;
  };
  const auto serial = run(kvevict::SerialExecutor{});
  EXPECT_EQ(run(two), serial);
  EXPECT_EQ(run(three), serial);
  EXPECT_EQ(run(seven), serial);
}

TEST(CausalAttention, PaddingKeysAreNeverReadFromV) {
  // NaN in the K and V rows of the left padding changes nothing: no query attends them, their V rows are not read.
  Problem p(4, 2, 16, 300, 45, 2.0f, 23);
  std::vector<double> ro, rs;
  reference(p, ro, rs);
  for (std::size_t j = 0; j < 2; ++j)
    for (std::size_t c = 0; c < 45; ++c)
      for (std::size_t x = 0; x < 16; ++x) {
        p.k[(j * p.P + c) * (p.d + p.pad) + x] = NAN;
        p.v[(j * p.P + c) * (p.d + p.pad) + x] = NAN;
      }
  std::vector<float> out(4 * 300 * 16), sums(4 * 300);
  kvevict::causal_attention(p.args(out.data(), sums.data()));
  for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ro[i], 2e-5) << i;
  for (std::size_t i = 0; i < sums.size(); ++i) ASSERT_NEAR(sums[i], rs[i], 2e-5 * std::max(1.0, rs[i])) << i;
}

TEST(CausalAttention, MatchesReferenceOnEveryPathAndExecutor) {
  IsaGuard guard;
  kvtools::ThreadPool two(2), three(3);
  struct Shape {
    std::size_t nq, nkv, d, P, first;
    float spread;
  };
  // P: one token, a block and a panel ending mid-way, past a 256-key tile; first: 0, mid-block, the last token.
  const Shape shapes[] = {{1, 1, 16, 1, 0, 1.0f},    {2, 1, 16, 31, 0, 1.0f},  {3, 3, 32, 33, 5, 2.0f},
                          {4, 2, 64, 300, 0, 3.0f},  {9, 3, 64, 290, 37, 1.0f}, {2, 2, 80, 70, 69, 1.0f},
                          {4, 1, 128, 97, 1, 8.0f},  {6, 2, 48, 520, 260, 4.0f}};
  unsigned seed = 1;
  for (auto isa : paths()) {
    kvevict::set_isa(isa);
    for (const Shape& s : shapes) {
      // The long shapes on the best path only (the ASan build's time); every path runs P up to 97.
      if (s.P > 100 && isa != kvevict::best_isa()) continue;
      const Problem p(s.nq, s.nkv, s.d, s.P, s.first, s.spread, seed++);
      const std::string what = std::string(kvevict::isa_name(isa)) + " nq=" + std::to_string(s.nq) +
                               " nkv=" + std::to_string(s.nkv) + " d=" + std::to_string(s.d) +
                               " P=" + std::to_string(s.P) + " first=" + std::to_string(s.first);
      expect_matches(p, kvevict::SerialExecutor{}, what + " serial");
      expect_matches(p, seed % 2 == 0 ? two : three, what + " on a pool");  // any count: TheSameBits... below
    }
  }
}

TEST(CausalAttention, RowMaxRisingAcrossKeyTiles) {
  // Logits rising with the key's index: every 256-key tile has a larger max than the ones before, so the online
  // softmax rescales what it summed; one key far above the rest takes almost all the probability.
  Problem p(2, 1, 16, 700, 0, 0.0f, 3, 0);
  for (std::size_t i = 0; i < p.P; ++i)
    for (std::size_t h = 0; h < 2; ++h) p.q[i * 2 * 16 + h * 16] = 1.0f;
  for (std::size_t c = 0; c < p.P; ++c) p.k[c * 16] = 0.01f * static_cast<float>(c) + (c == 650 ? 400.0f : 0.0f);
  expect_matches(p, kvevict::SerialExecutor{}, "rising logits");
}

TEST(CausalAttention, ExactValuesOfUniformAttention) {
  // q = 0: every real query attends its keys uniformly. P = 3, first = 1: query 1 sees key 1 (p = 1), query 2
  // sees keys 1, 2 (p = 1/2 each): out[1] = v1, out[2] = (v1 + v2) / 2, sums = [0, 1.5, 0.5] per head.
  const std::size_t d = 16, P = 3;
  std::vector<float> q(2 * P * d, 0.0f), k(P * d, 1.0f), v(P * d);
  for (std::size_t c = 0; c < P; ++c)
    for (std::size_t x = 0; x < d; ++x) v[c * d + x] = static_cast<float>(4 * c + x % 4);
  std::vector<float> out(P * 2 * d, -1.0f), sums(2 * P, -1.0f);
  kvevict::CausalAttentionArgs a;
  a.q = q.data();
  a.q_head_stride = P * d;
  a.q_row_stride = d;
  a.k = k.data();
  a.k_head_stride = P * d;
  a.k_row_stride = d;
  a.v = v.data();
  a.v_head_stride = P * d;
  a.v_row_stride = d;
  a.out = out.data();
  a.out_head_stride = d;  // [P][head][d]
  a.out_row_stride = 2 * d;
  a.sums = sums.data();
  a.n_q_heads = 2;
  a.n_kv_heads = 1;
  a.head_dim = d;
  a.prompt_len = P;
  a.first = 1;
  a.scale = 0.25f;
  kvevict::causal_attention(a);
  for (std::size_t h = 0; h < 2; ++h) {
    EXPECT_EQ(sums[h * P + 0], 0.0f);
    EXPECT_EQ(sums[h * P + 1], 1.5f);
    EXPECT_EQ(sums[h * P + 2], 0.5f);
    for (std::size_t x = 0; x < d; ++x) {
      EXPECT_EQ(out[(0 * 2 + h) * d + x], 0.0f);
      EXPECT_EQ(out[(1 * 2 + h) * d + x], static_cast<float>(4 + x % 4));
      EXPECT_EQ(out[(2 * 2 + h) * d + x], static_cast<float>(6 + x % 4));
    }
  }
}

TEST(CausalAttention, RefusesBadArgumentsAndWritesNothing) {
  const Problem p(4, 2, 16, 40, 0, 1.0f, 9);
  std::vector<float> out(4 * 40 * 16, 3.0f), sums(4 * 40, 3.0f);
  const auto good = p.args(out.data(), sums.data());
  struct Bad {
    const char* message;
    void (*edit)(kvevict::CausalAttentionArgs&);
  };
  const Bad cases[] = {
      {"q is null", [](kvevict::CausalAttentionArgs& a) { a.q = nullptr; }},
      {"k is null", [](kvevict::CausalAttentionArgs& a) { a.k = nullptr; }},
      {"v is null (out needs it)", [](kvevict::CausalAttentionArgs& a) { a.v = nullptr; }},
      {"out is null and no score (sums, noisy_sums, maxes) is asked for", [](kvevict::CausalAttentionArgs& a) {
         a.out = nullptr;
         a.sums = nullptr;
       }},
      {"n_q_heads (4) must be a positive multiple of n_kv_heads (3)",
       [](kvevict::CausalAttentionArgs& a) { a.n_kv_heads = 3; }},
      {"n_q_heads (4) must be a positive multiple of n_kv_heads (0)",
       [](kvevict::CausalAttentionArgs& a) { a.n_kv_heads = 0; }},
      {"head_dim must be a positive multiple of 16 (got 8)", [](kvevict::CausalAttentionArgs& a) { a.head_dim = 8; }},
      {"head_dim must be a positive multiple of 16 (got 0)", [](kvevict::CausalAttentionArgs& a) { a.head_dim = 0; }},
      {"prompt_len must be at least 1 (got 0)", [](kvevict::CausalAttentionArgs& a) { a.prompt_len = 0; }},
      {"first (40) must be below prompt_len (40): a prompt needs a real token", [](kvevict::CausalAttentionArgs& a) { a.first = 40; }},
      {"k_row_stride (15) is below head_dim (16)", [](kvevict::CausalAttentionArgs& a) { a.k_row_stride = 15; }},
      {"out_row_stride (2) is below head_dim (16)", [](kvevict::CausalAttentionArgs& a) { a.out_row_stride = 2; }},
      {"scale must be positive and finite (got 0.000000)", [](kvevict::CausalAttentionArgs& a) { a.scale = 0.0f; }},
      {"scale must be positive and finite (got inf)",
       [](kvevict::CausalAttentionArgs& a) { a.scale = INFINITY; }},
      {"scale must be positive and finite (got nan)",
       [](kvevict::CausalAttentionArgs& a) { a.scale = std::numeric_limits<float>::quiet_NaN(); }},
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
    EXPECT_TRUE(std::all_of(sums.begin(), sums.end(), [](float x) { return x == 3.0f; })) << b.message;
  }
}

}  // namespace

namespace {

TEST(CausalAttention, NoisySumsCutAsKeyformersPrefillOfTheLogits) {
  // Keyformer's prompt score from the fused pass (noisy_sums with the cache's PromptSums) cuts the prompt as the
  // cache's own prefill of the materialised logits of its real tokens (the same q, k; rounding apart): with noise,
  // τ₀ 1.5, without noise, left padding (the cache holds only the real tokens, numbered from 0), past several
  // 256-key tiles; on every path, serially and on 2 workers; H2O's sums likewise.
  IsaGuard guard;
  kvtools::ThreadPool two(2);
  struct Variant {
    kvevict::Policy policy;
    bool noise;
    float tau;
    std::size_t P, first, k;
  };
  const Variant variants[] = {{kvevict::Policy::keyformer, true, 1.0f, 120, 0, 30},
                              {kvevict::Policy::keyformer, true, 1.5f, 120, 0, 30},
                              {kvevict::Policy::keyformer, false, 1.0f, 130, 13, 30},
                              {kvevict::Policy::h2o, false, 1.0f, 100, 5, 25},
                              {kvevict::Policy::keyformer, true, 1.3f, 620, 40, 90}};
  const std::size_t nq = 4, nkv = 2, d = 32;
  for (auto isa : paths()) {
    kvevict::set_isa(isa);
    unsigned index = 0;
    for (const Variant& var : variants) {
      ++index;
      if (var.P > 200 && isa != kvevict::best_isa()) continue;  // the long case once
      const std::size_t P = var.P, n = P - var.first;
      const Problem p(nq, nkv, d, P, var.first, 3.0f, 40 + index, 0);
      kvevict::KVBuffer<float> sa(nkv, n + 1, d), sb(nkv, n + 1, d);
      kvevict::CacheConfig cfg;
      cfg.n_q_heads = nq;
      cfg.budget = kvevict::Budget::tokens(var.k);
      cfg.recent = kvevict::RecentWindow::tokens(6);
      cfg.seed = 17 + index;
      kvevict::PolicyParams params;
      params.horizon = 8;
      params.tau_init = var.tau;
      params.gumbel_noise = var.noise;
      auto a = kvevict::make_cache(var.policy, cfg, sa.view(), params);
      auto b = kvevict::make_cache(var.policy, cfg, sb.view(), params);
      std::vector<float> krow(nkv * d), vrow(nkv * d);
      for (std::size_t c = var.first; c < P; ++c) {  // the real tokens, positions from 0
        for (std::size_t j = 0; j < nkv; ++j)
          for (std::size_t x = 0; x < d; ++x) {
            krow[j * d + x] = p.kv(j, c, x);
            vrow[j * d + x] = p.vv(j, c, x);
          }
        sa.view().append(static_cast<std::int64_t>(c - var.first), krow.data(), vrow.data());
        sb.view().append(static_cast<std::int64_t>(c - var.first), krow.data(), vrow.data());
      }
      std::vector<float> logits(nq * n * n, -INFINITY);
      for (std::size_t h = 0; h < nq; ++h)
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t c = 0; c <= i; ++c) {
            double s = 0.0;
            for (std::size_t x = 0; x < d; ++x)
              s += static_cast<double>(p.qv(h, var.first + i, x)) * p.kv(h / (nq / nkv), var.first + c, x);
            logits[(h * n + i) * n + c] = static_cast<float>(s * p.scale);
          }
      a->prefill(logits.data(), n);
      const kvevict::PromptSums spec = b->prompt_sums();
      std::vector<float> out(nq * P * d), sums(nq * P);
      auto args = p.args(out.data(), nullptr);
      if (spec.kind == kvevict::PromptSums::Kind::gumbel) {
        EXPECT_EQ(spec.noise, var.noise);
        EXPECT_EQ(spec.tau, var.tau);
        args.noisy_sums = sums.data();
        args.noise_seed = spec.seed;
        args.tau = spec.tau;
        args.noise = spec.noise;
        args.noise_scale = spec.noise_scale;
      } else {
        args.sums = sums.data();
      }
      if (index % 2 == 0)
        kvevict::causal_attention(args, two);
      else
        kvevict::causal_attention(args);
      std::vector<float> real(nq * n);  // each query head's real columns [first, P), as the cache numbers them
      for (std::size_t h = 0; h < nq; ++h) {
        for (std::size_t c = 0; c < var.first; ++c) EXPECT_EQ(sums[h * P + c], 0.0f);
        std::copy_n(sums.data() + h * P + var.first, n, real.data() + h * n);
      }
      b->prefill_from_attention(real.data(), n);
      for (std::size_t j = 0; j < nkv; ++j)
        EXPECT_EQ(a->retained_positions(j), b->retained_positions(j))
            << kvevict::isa_name(isa) << " variant " << index << " KV head " << j;
      EXPECT_EQ(a->temperature(), b->temperature());
    }
  }
}

/// The message `causal_attention(a)` refuses `a` with ("" if it runs).
std::string refusal(const kvevict::CausalAttentionArgs& a) {
  try {
    kvevict::causal_attention(a);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CausalAttention, RefusesBadNoisyOptions) {
  const Problem p(2, 1, 16, 10, 0, 1.0f, 4);
  std::vector<float> out(2 * 10 * 16), noisy(2 * 10, 5.0f);
  auto a = p.args(out.data(), nullptr);
  a.noisy_sums = noisy.data();
  a.tau = 0.0f;
  EXPECT_EQ(refusal(a), "causal_attention: tau must be finite and >= FLT_MIN (got 0.000000)");
  a.tau = 1.0f;
  a.noise_scale = 1.5f;
  EXPECT_EQ(refusal(a), "causal_attention: noise_scale must be in (0, 1] (got 1.500000)");
  EXPECT_TRUE(std::all_of(noisy.begin(), noisy.end(), [](float x) { return x == 5.0f; }));
}

}  // namespace
