// Randomized comparison of kvevict::Cache against a simple reference
// implementation: tokens kept in position order, scores in double, selection
// by full sort every step, no slot tricks. Covers Keyformer (injected noise,
// linear τ), H2O, TOVA, StreamingLLM, window, SnapKV and the mean-attention rankings (H2OMean,
// KeyformerMean: score / (newest − position + 1)); GQA; shared and per-head selection.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

enum class Kind { keyformer, h2o, tova, streaming, window, snapkv, snapkv_window, h2o_mean, keyformer_mean };

struct Tok {
  std::int64_t pos;
  double score;
};

// Deterministic pseudo-random value for (step, query head, position): the same
// logit whatever slot the token sits in.
float hash_uniform(std::uint64_t a, std::uint64_t b, std::uint64_t c, std::uint64_t salt) {
  kvevict::Xoshiro256pp g(((a * 1000003u + b) * 1000033u + c) * 31u + salt);
  return static_cast<float>(g() >> 40) / 16777216.0f;  // [0, 1)
}
float logit(std::uint64_t step, std::uint64_t h, std::int64_t pos) {
  const float u = hash_uniform(step, h, static_cast<std::uint64_t>(pos), 1);
  if (u < 0.05f) return -std::numeric_limits<float>::infinity();  // some masked entries
  return 6.0f * hash_uniform(step, h, static_cast<std::uint64_t>(pos), 2) - 3.0f;
}
float noise(std::uint64_t step, std::uint64_t h, std::int64_t pos) {
  const double u = (hash_uniform(step, h, static_cast<std::uint64_t>(pos), 3) * 16777216.0 + 0.5) / 16777216.0;
  return static_cast<float>(-std::log(-std::log(u)));
}

struct Reference {
  Kind kind;
  std::size_t n_q, n_kv, k, w, sinks, horizon;
  bool shared;
  std::vector<std::vector<Tok>> heads;  // per KV head, ascending position
  std::size_t L = 1, K = 1;             // SnapKV: observation window, pooling kernel
  bool avg = false;                     // SnapKV: average (else max) pooling
  bool in_prefill = false;

  bool snap() const { return kind == Kind::snapkv || kind == Kind::snapkv_window; }
  bool mean() const { return kind == Kind::h2o_mean || kind == Kind::keyformer_mean; }
  bool keyformer() const { return kind == Kind::keyformer || kind == Kind::keyformer_mean; }
  bool uses_logits() const {
    return keyformer() || kind == Kind::h2o || kind == Kind::tova || snap() || mean();
  }
  // SnapKV's selection scores at prefill, written out plainly: the window's last L tokens rank first
  // (+inf), the others by their score pooled over [i - K/2, i + K/2] clipped to [0, n - L) (max, or
  // sum / K).
  std::vector<double> snap_selection(const std::vector<double>& s) const {
    const std::size_t n = s.size(), before = n - std::min(L, n);
    std::vector<double> out(n, std::numeric_limits<double>::infinity());
    for (std::size_t i = 0; i < before; ++i) {
      double acc = avg ? 0.0 : -std::numeric_limits<double>::infinity();
      for (std::size_t j = (i >= K / 2 ? i - K / 2 : 0); j <= std::min(before - 1, i + K / 2); ++j)
        acc = avg ? acc + s[j] : std::max(acc, s[j]);
      out[i] = avg ? acc / static_cast<double>(K) : acc;
    }
    return out;
  }
  double tau(std::size_t t) const {
    if (!keyformer()) return 1.0;
    return 1.0 + static_cast<double>(std::min(t, horizon)) / static_cast<double>(horizon);
  }
  // Adds softmax((x + zeta) / tau) of query head h (logit ids `row_id`) over the
  // first `visible` tokens of KV head j to acc.
  void score_row(std::size_t row_id, double tau_value, std::size_t h, std::size_t j, std::size_t visible,
                 std::vector<double>& acc) const {
    const auto& toks = heads[j];
    std::vector<double> y(visible);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < visible; ++i) {
      double x = logit(row_id, h, toks[i].pos);
      if (keyformer()) x += noise(row_id, h, toks[i].pos);
      y[i] = x / tau_value;
      m = std::max(m, y[i]);
    }
    if (m == -std::numeric_limits<double>::infinity()) return;
    double sum = 0.0;
    for (double& v : y) sum += (v = std::exp(v - m));
    for (std::size_t i = 0; i < visible; ++i) acc[i] += y[i] / sum;
  }
  // Indices of `toks` to keep (ascending) by full sort; `pos` the candidates' positions (ascending).
  std::vector<std::size_t> keep(std::size_t n, const std::vector<double>& raw, const std::vector<Tok>& pos) const {
    // The mean rankings: each score over the queries at positions [p, newest], newest = the last candidate's.
    std::vector<double> scores = raw;
    if (mean())
      for (std::size_t i = 0; i < n; ++i) scores[i] /= static_cast<double>(pos.back().pos - pos[i].pos + 1);
    const std::size_t m = std::min(k, n);
    std::vector<std::size_t> out;
    if (kind == Kind::snapkv_window && !in_prefill && n > k) {  // decode by sliding window: the oldest goes
      for (std::size_t i = 1; i < n; ++i) out.push_back(i);
      return out;
    }
    const std::vector<double> s = snap() && in_prefill ? snap_selection(scores) : scores;
    if (kind == Kind::streaming || kind == Kind::window) {
      const std::size_t sk = std::min(kind == Kind::window ? 0 : sinks, m);
      for (std::size_t i = 0; i < sk; ++i) out.push_back(i);
      for (std::size_t i = n - (m - sk); i < n; ++i) out.push_back(i);
      return out;
    }
    const std::size_t r = std::min(w, n), pool = n - r;
    std::vector<std::size_t> order(pool);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
    out.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m - r));
    for (std::size_t i = pool; i < n; ++i) out.push_back(i);
    std::sort(out.begin(), out.end());
    return out;
  }
  // Adds (TOVA: sets) the increments, then cuts every head to budget.
  void commit_and_cut(const std::vector<std::vector<double>>& inc) {
    for (std::size_t j = 0; j < n_kv; ++j)
      for (std::size_t i = 0; i < heads[j].size(); ++i)
        heads[j][i].score = (kind == Kind::tova ? 0.0 : heads[j][i].score) + inc[j][i];
    std::vector<std::vector<Tok>> next(n_kv);
    if (shared) {
      std::vector<double> sum(heads[0].size(), 0.0);
      for (const auto& toks : heads)
        for (std::size_t i = 0; i < toks.size(); ++i) sum[i] += toks[i].score;
      const auto kept = keep(heads[0].size(), sum, heads[0]);
      for (std::size_t j = 0; j < n_kv; ++j)
        for (std::size_t i : kept) next[j].push_back(heads[j][i]);
    } else {
      for (std::size_t j = 0; j < n_kv; ++j) {
        std::vector<double> s;
        for (const auto& tk : heads[j]) s.push_back(tk.score);
        for (std::size_t i : keep(heads[j].size(), s, heads[j])) next[j].push_back(heads[j][i]);
      }
    }
    heads = next;
  }
  std::vector<std::vector<double>> zero_increments() const {
    std::vector<std::vector<double>> inc(n_kv);
    for (std::size_t j = 0; j < n_kv; ++j) inc[j].assign(heads[j].size(), 0.0);
    return inc;
  }
  // Prefill: row r of every query head (logit ids r) at tau(0); TOVA: last row only.
  void prefill() {
    auto inc = zero_increments();
    const std::size_t g = n_q / n_kv, P = heads[0].size();
    if (uses_logits())
      for (std::size_t h = 0; h < n_q; ++h)
        for (std::size_t r = (kind == Kind::tova ? P - 1 : snap() ? P - std::min(L, P) : 0); r < P; ++r)
          score_row(r, tau(0), h, h / g, r + 1, inc[h / g]);
    in_prefill = true;
    commit_and_cut(inc);
    in_prefill = false;
  }
  // Decode step t (the newest token already appended), logit ids `row_id`.
  void decode(std::size_t t, std::size_t row_id) {
    auto inc = zero_increments();
    const std::size_t g = n_q / n_kv;
    if (uses_logits())
      for (std::size_t h = 0; h < n_q; ++h) score_row(row_id, tau(t), h, h / g, heads[h / g].size(), inc[h / g]);
    commit_and_cut(inc);
  }
};

std::unique_ptr<kvevict::CacheInterface> build(Kind kind, const kvevict::CacheConfig& cfg,
                                               const kvevict::KVView<float>& kv, std::size_t sinks,
                                               std::size_t horizon, const Reference& ref) {
  kvevict::PolicyParams p;
  p.horizon = horizon;
  p.sinks = sinks;
  p.snap_window = ref.L;
  p.snap_kernel = ref.K;
  p.snap_pooling = ref.avg ? kvevict::Pooling::avg : kvevict::Pooling::max;
  p.snap_decode = kind == Kind::snapkv_window ? kvevict::SnapDecode::window : kvevict::SnapDecode::h2o;
  p.mean_attention = kind == Kind::h2o_mean || kind == Kind::keyformer_mean;
  switch (kind) {
    case Kind::h2o_mean: return kvevict::make_cache(kvevict::Policy::h2o, cfg, kv, p);
    case Kind::keyformer_mean: return kvevict::make_cache(kvevict::Policy::keyformer, cfg, kv, p);
    case Kind::keyformer: return kvevict::make_cache(kvevict::Policy::keyformer, cfg, kv, p);
    case Kind::h2o: return kvevict::make_cache(kvevict::Policy::h2o, cfg, kv, p);
    case Kind::tova: return kvevict::make_cache(kvevict::Policy::tova, cfg, kv, p);
    case Kind::streaming: return kvevict::make_cache(kvevict::Policy::streaming_llm, cfg, kv, p);
    case Kind::window: return kvevict::make_cache(kvevict::Policy::window, cfg, kv, p);
    case Kind::snapkv:
    case Kind::snapkv_window: return kvevict::make_cache(kvevict::Policy::snapkv, cfg, kv, p);
  }
  return nullptr;
}

void run_trial(Kind kind, bool shared, std::size_t g, std::uint64_t seed) {
  kvevict::Xoshiro256pp gen(seed);
  const std::size_t n_kv = 2, n_q = n_kv * g, d = 3;
  const std::size_t P = 1 + gen() % 24, k = 1 + gen() % 16, horizon = 1 + gen() % 40, steps = 40;
  const std::size_t w_drawn = gen() % (k + 1);  // TOVA too: w = 0 is the paper's, w = 1 kvpress's
  // StreamingLLM and window have no recent window of their own (theirs is k - sinks).
  const std::size_t w = (kind == Kind::streaming || kind == Kind::window) ? 0 : w_drawn;
  const std::size_t sinks = gen() % (k + 1);
  kvevict::KVBuffer<float> buf(n_kv, std::max(P, k + 1), d);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_q;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(w);
  cfg.shared_heads = shared;
  Reference ref{kind, n_q, n_kv, k, w, sinks, horizon, shared, std::vector<std::vector<Tok>>(n_kv)};
  ref.L = 1 + gen() % k;       // SnapKV: 1 <= L <= k
  ref.K = 1 + 2 * (gen() % 3);  // 1, 3 or 5
  ref.avg = gen() % 2 == 1;
  auto cache = build(kind, cfg, kv, sinks, horizon, ref);
  const std::string where = "kind " + std::to_string(static_cast<int>(kind)) + " shared " + std::to_string(shared) +
                            " g " + std::to_string(g) + " seed " + std::to_string(seed) + " P " + std::to_string(P) +
                            " k " + std::to_string(k) + " w " + std::to_string(w) + " sinks " + std::to_string(sinks) + " L " + std::to_string(ref.L) + " K " +
                            std::to_string(ref.K) + (ref.avg ? " avg" : " max");

  // Prefill with positions 3, 5, 7, ... (gaps on purpose); row r's logits are step id r.
  std::vector<std::int64_t> prompt_pos(P);
  for (std::size_t i = 0; i < P; ++i) prompt_pos[i] = static_cast<std::int64_t>(3 + 2 * i);
  for (auto p : prompt_pos) {
    kvtest::append_token(kv, p);
    for (auto& toks : ref.heads) toks.push_back({p, 0.0});
  }
  std::vector<float> x(n_q * P * P, 0.0f), z(n_q * P * P, 0.0f);
  for (std::size_t h = 0; h < n_q; ++h)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t c = 0; c <= r; ++c) {
        x[(h * P + r) * P + c] = logit(r, h, prompt_pos[c]);
        z[(h * P + r) * P + c] = noise(r, h, prompt_pos[c]);
      }
  cache->prefill(x.data(), P, z.data());
  ref.prefill();

  auto compare = [&](std::size_t t) {
    for (std::size_t j = 0; j < n_kv; ++j) {
      std::vector<std::int64_t> expect;
      for (const auto& tk : ref.heads[j]) expect.push_back(tk.pos);
      ASSERT_EQ(cache->retained_positions(j), expect) << where << " step " << t << " head " << j;
      for (std::size_t s = 0; s < cache->length(j); ++s) {
        const auto it = std::find_if(ref.heads[j].begin(), ref.heads[j].end(),
                                     [&](const Tok& tk) { return tk.pos == cache->positions(j)[s]; });
        ASSERT_NEAR(cache->scores(j)[s], it->score, 2e-4 * (1.0 + std::abs(it->score))) << where << " step " << t;
      }
    }
    ASSERT_TRUE(kvtest::rows_aligned(kv)) << where;
  };
  compare(0);

  std::vector<float> row(n_q * (k + 1)), zrow(row.size());
  for (std::size_t t = 1; t <= steps; ++t) {
    const std::int64_t p = prompt_pos.back() + static_cast<std::int64_t>(t);  // step ids >= P avoid reuse
    kvtest::append_token(kv, p);
    for (auto& toks : ref.heads) toks.push_back({p, 0.0});
    const std::size_t n = kv.length(0), step_id = 1000 + t;
    for (std::size_t h = 0; h < n_q; ++h)
      for (std::size_t s = 0; s < n; ++s) {
        const std::int64_t pos = kv.head_positions(h / g)[s];
        row[h * n + s] = logit(step_id, h, pos);
        zrow[h * n + s] = noise(step_id, h, pos);
      }
    cache->decode_step(row.data(), n, zrow.data());
    ref.decode(t, step_id);
    compare(t);
  }
}

class CacheVsReference : public ::testing::TestWithParam<std::tuple<Kind, bool, std::size_t>> {};

TEST_P(CacheVsReference, SameKeptSetsAndScoresEveryStep) {
  const auto [kind, shared, g] = GetParam();
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    run_trial(kind, shared, g, seed * 7919 + static_cast<std::uint64_t>(kind));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, CacheVsReference,
                         ::testing::Combine(::testing::Values(Kind::keyformer, Kind::h2o, Kind::tova, Kind::streaming,
                                                              Kind::window, Kind::snapkv, Kind::snapkv_window,
                                                              Kind::h2o_mean, Kind::keyformer_mean),
                                            ::testing::Bool(), ::testing::Values(std::size_t{1}, std::size_t{2})));

}  // namespace
