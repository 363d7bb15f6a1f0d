// score/expected_attention.hpp — Expected Attention's score: the attention future queries are expected to pay each
// held token, from the mean and covariance of past pre-RoPE queries, handed to a TOVA cache as logits rows.
// SPDX-License-Identifier: Apache-2.0
//
// Devoto, Jeblick, Jégou, "Expected Attention: KV cache compression by estimating attention from future queries
// distribution" (arXiv 2510.00636, 2025, §3), as kvpress's ExpectedAttentionPress computes it (kvpress 0.5.5,
// presses/expected_attention_press.py). Where attention is fused (FlashAttention, SDPA) no logits exist; what an
// engine does have is its queries. Model the next queries of query head h as Gaussian, q ~ N(μ_h, Σ_h), from the
// pre-RoPE queries seen so far; a future query at position t is R_t q (RoPE's rotation at t), and over the next F
// positions [t0, t0 + F) its average rotation is R̄ = (1/F) Σ_t R_t. Then (the Gaussian's moment-generating
// function, paper Eq. 5–6) the expected unnormalised attention of a cached key k (post-RoPE, as cached) is
//
//     E[exp(qᵀk / √d)] = exp(x),   x = μ'ᵀk / √d + ½ kᵀΣ'k / d,   μ' = R̄μ,  Σ' = R̄ΣR̄ᵀ   (d = head_dim).
//
// kvpress's score of slot s on KV head j, for the tokens past the n_sink attention sinks:
//
//     score[j][s] = (mean over the GQA group's query heads h of softmax_s(x[h][·])[s] + ε) · ||v[j][s]||
//
// (softmax over the non-sink slots; `use_vnorm = false` drops the factor, `use_covariance = false` the Σ term);
// each sink's score is the layer's largest non-sink score + 1, so sinks are always kept.
//
// How kvevict runs it: the score is a pure function of the held keys, values and the query statistics, and it
// replaces (does not add to) the previous one, which is exactly what TOVA's cache does with the logits it is given
// (`CurrentAttentionScore`: softmax of one row per query head, summed over the group, replaces the scores). So
// `expected_attention_logits` writes, for every query head of KV head j, the row `log(score[j][s])`: the cache's
// softmax then gives `score[j][s] / Σ_s score[j][s]` on each of the group's g heads, and its group sum ranks the slots
// exactly as kvpress's score (up to float rounding of exp(log(·))). Use it with `kvevict::TOVA` (no recent window,
// top-k of the latest scores; `CacheConfig::recent` none):
//
//     QueryStatistics stats(n_q_heads, head_dim);                          // one per layer
//     stats.add(q_prerope + n_sink * n_q_heads * head_dim, P - n_sink);     // the prompt's queries past the sinks
//     expected_attention_logits(stats, kv, rope, /*next_position=*/P, opts, rows, /*row_stride=*/P, ws);
//     SingleRowLogits last(rows, n_q_heads, P, /*last=*/P - 1);            // rows: [q_head][P]
//     cache.prefill_chunk(last, P, P); cache.finish_prefill();             // the cut to k by expected attention
//     each decode step, after appending the token at position t (n live slots per KV head):
//       stats.add(its pre-RoPE query, 1); expected_attention_logits(stats, kv, rope, t + 1, opts, rows, n, ws);
//       cache.decode_step(rows, n);
//
// Costs: `QueryStatistics::add` O(rows · n_q_heads · d²); `expected_attention_logits` O(n_q_heads · (n · d² + d³))
// for n held slots (one n×d by d×d product per query head), plus O(d · F) for R̄. Nothing here is a kvpress port
// by text: the formula is the paper's, the protocol (sinks, ε, the max + 1 of sinks) kvpress's defaults.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "kvevict/attention/rope.hpp"
#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/score/chunk_rows.hpp"

namespace kvevict {

/// Running mean and covariance of the pre-RoPE queries of one layer, per query head (the statistics of Expected
/// Attention, arXiv 2510.00636 §3.1). `add` takes rows `[row][q_head][head_dim]`; `mean(h)` is `(1/N) Σ q` and
/// `covariance(h)` is `(1/N) Σ (q − μ)(q − μ)ᵀ` (the population covariance, kvpress's `/ h.shape[1]`), both over the
/// `N = count()` rows added, accumulated in double. kvpress leaves out the first `n_sink = 4` prompt rows (their
/// hidden states carry the sinks' outliers): add the rows from position `n_sink` on. Memory
/// `8 · n_q_heads · (head_dim² + head_dim)` bytes.
class QueryStatistics {
 public:
  /// Throws `std::invalid_argument` if `n_q_heads` or `head_dim` is 0, or if `n_q_heads · head_dim · head_dim`
  /// (the covariances' element count) overflows `std::size_t` ("kvevict::QueryStatistics: n_q_heads * head_dim *
  /// head_dim = … overflows std::size_t", `detail::checked_mul`), before anything is allocated; `std::length_error`
  /// (from `std::vector`) for a count above `max_size()`. O(n_q_heads · head_dim²).
  QueryStatistics(std::size_t n_q_heads, std::size_t head_dim) : nq_(n_q_heads), d_(head_dim) {
    const char* who = "kvevict::QueryStatistics";
    detail::require(n_q_heads >= 1 && head_dim >= 1, who, ": n_q_heads (", n_q_heads, ") and head_dim (", head_dim,
                    ") must be >= 1");
    const std::size_t outer = detail::checked_mul(who, "n_q_heads * head_dim * head_dim", nq_, d_, d_);
    sum_.assign(nq_ * d_, 0.0);  // <= outer
    outer_.assign(outer, 0.0);
  }
  std::size_t n_q_heads() const { return nq_; }
  std::size_t head_dim() const { return d_; }
  /// Rows added so far.
  std::size_t count() const { return count_; }

  /// Adds `n_rows` query rows, `q[row][q_head][head_dim]` row-major, before RoPE. Throws `std::invalid_argument`
  /// (nothing added) if `q` is null with `n_rows > 0`, `n_rows · n_q_heads · head_dim` (the elements of `q`)
  /// overflows `std::size_t`, or an element is not finite. O(n_rows · n_q_heads · d²).
  void add(const float* q, std::size_t n_rows) {
    if (n_rows == 0) return;
    detail::require(q != nullptr, "kvevict::QueryStatistics::add: q must be non-null (n_rows = ", n_rows, ")");
    const std::size_t elements =
        detail::checked_mul("kvevict::QueryStatistics::add", "n_rows * n_q_heads * head_dim", n_rows, nq_, d_);
    for (std::size_t i = 0; i < elements; ++i)
      detail::require(std::isfinite(q[i]), "kvevict::QueryStatistics::add: q[", i / (nq_ * d_), "][",
                      (i / d_) % nq_, "][", i % d_, "] is ", q[i], " (must be finite)");
    for (std::size_t r = 0; r < n_rows; ++r)
      for (std::size_t h = 0; h < nq_; ++h) {
        const float* row = q + (r * nq_ + h) * d_;
        double* s = sum_.data() + h * d_;
        double* o = outer_.data() + h * d_ * d_;
        for (std::size_t a = 0; a < d_; ++a) {
          const double qa = row[a];
          s[a] += qa;
          for (std::size_t b = 0; b < d_; ++b) o[a * d_ + b] += qa * static_cast<double>(row[b]);
        }
      }
    count_ += n_rows;
  }
  /// Forgets every row. O(n_q_heads · d²).
  void clear() {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    std::fill(outer_.begin(), outer_.end(), 0.0);
    count_ = 0;
  }
  /// μ of query head `h` into `out[0, head_dim)`. Throws `std::invalid_argument` if `h >= n_q_heads()` or
  /// `count() == 0`. O(d).
  void mean(std::size_t h, double* out) const {
    check(h, "mean");
    for (std::size_t a = 0; a < d_; ++a) out[a] = sum_[h * d_ + a] / static_cast<double>(count_);
  }
  /// Σ of query head `h` into `out[head_dim][head_dim]` row-major: `E[q qᵀ] − μ μᵀ`. Throws as `mean`. O(d²).
  void covariance(std::size_t h, double* out) const {
    check(h, "covariance");
    const double n = static_cast<double>(count_);
    const double* s = sum_.data() + h * d_;
    for (std::size_t a = 0; a < d_; ++a)
      for (std::size_t b = 0; b < d_; ++b)
        out[a * d_ + b] = outer_[(h * d_ + a) * d_ + b] / n - (s[a] / n) * (s[b] / n);
  }

 private:
  void check(std::size_t h, const char* what) const {
    detail::require(h < nq_, "kvevict::QueryStatistics::", what, ": q_head ", h, " >= n_q_heads ", nq_);
    detail::require(count_ >= 1, "kvevict::QueryStatistics::", what, ": no query rows added yet");
  }
  std::size_t nq_, d_, count_ = 0;
  std::vector<double> sum_;    // [q_head][d]
  std::vector<double> outer_;  // [q_head][d][d]
};

/// The average RoPE rotation over positions `[first_position, first_position + n_positions)`: for each rotation
/// pair i (`spec.style`: (2i, 2i+1) or (i, i + d/2)) of frequency `f_i = θ^(−2i/d)`, `c̄_i = mean_t cos(t f_i)` and
/// `s̄_i = mean_t sin(t f_i)`, so that `R̄` maps a pair (a, b) to `(c̄ a − s̄ b, s̄ a + c̄ b)` (RoPE's rotation of a
/// query at t, rope.hpp, averaged; kvpress's `apply_avg_rope` for the half-split pairing). Writes `cos_out` and
/// `sin_out`, `head_dim / 2` values each, in double. Throws `std::invalid_argument` for an odd or zero `head_dim`,
/// `n_positions == 0`, or a `theta` that is not finite and > 0. O(head_dim · n_positions).
inline void average_rope_rotation(std::size_t head_dim, const RopeSpec& spec, std::int64_t first_position,
                                  std::size_t n_positions, double* cos_out, double* sin_out) {
  const char* who = "kvevict::average_rope_rotation";
  detail::require(n_positions >= 1, who, ": n_positions must be >= 1 (got 0)");
  const double last = static_cast<double>(first_position) + static_cast<double>(n_positions - 1);
  detail::check_rope(head_dim, std::max(std::fabs(static_cast<double>(first_position)), std::fabs(last)), spec, who);
  for (std::size_t i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(spec.theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
    double c = 0.0, s = 0.0;
    for (std::size_t t = 0; t < n_positions; ++t) {
      const double angle = (static_cast<double>(first_position) + static_cast<double>(t)) * freq;
      c += std::cos(angle);
      s += std::sin(angle);
    }
    cos_out[i] = c / static_cast<double>(n_positions);
    sin_out[i] = s / static_cast<double>(n_positions);
  }
}

/// Expected Attention's settings, kvpress's defaults (ExpectedAttentionPress).
struct ExpectedAttentionOptions {
  std::size_t n_future_positions = 512;  ///< F: the future positions R̄ averages over, >= 1
  std::size_t n_sink = 4;                ///< per KV head, the n_sink held tokens with the lowest position IDs are
                                         ///< sinks (kept, never softmaxed); ties: the lower slot
  bool use_covariance = true;            ///< the ½ kᵀΣ'k / d term
  bool use_vnorm = true;                 ///< the factor ||v||
  float epsilon = 0.0f;                  ///< ε added to the attention before the ||v|| factor, finite and >= 0
};

class ExpectedAttentionScratch;
namespace detail {
template <class T>
void expected_attention_run(const QueryStatistics&, const KVView<const T>&, const RopeSpec&, std::int64_t,
                            const ExpectedAttentionOptions&, const float*, std::size_t, ExpectedAttentionScratch&);
}  // namespace detail

/// Work space of `expected_attention_scores` and `expected_attention_logits`, reused across calls (they then
/// allocate only when a layer holds more slots than before). Sized by the view's held slots, never by the
/// caller's `row_stride`.
class ExpectedAttentionScratch {
 public:
  ExpectedAttentionScratch() = default;

 private:
  template <class T>
  friend void detail::expected_attention_run(const QueryStatistics&, const KVView<const T>&, const RopeSpec&,
                                             std::int64_t, const ExpectedAttentionOptions&, const float*, std::size_t,
                                             ExpectedAttentionScratch&);
  template <class T>
  friend void expected_attention_scores(const QueryStatistics&, const KVView<const T>&, const RopeSpec&, std::int64_t,
                                        const ExpectedAttentionOptions&, float*, std::size_t, ExpectedAttentionScratch&);
  template <class T>
  friend void expected_attention_logits(const QueryStatistics&, const KVView<T>&, const RopeSpec&, std::int64_t,
                                        const ExpectedAttentionOptions&, float*, std::size_t,
                                        ExpectedAttentionScratch&);
  std::vector<double> cos_, sin_, mu_, cov_;
  Eigen::MatrixXf u_, us_;                 // [n][d]: the keys rotated by R̄ᵀ, and times Σ
  Eigen::VectorXf mu_f_, x_, att_;         // [d], [n], [n_kv_heads][longest]: every score of the last call
  Eigen::MatrixXf cov_f_;                  // [d][d]
  std::vector<unsigned char> sink_;        // [n_kv_heads][longest]: 1 = a sink
  std::vector<std::size_t> order_;         // [n]: slots, to find a head's n_sink lowest positions
  std::size_t longest_ = 0;                // the row stride of att_ and sink_ (>= 1)
};

namespace detail {

/// The work of `expected_attention_scores` and `expected_attention_logits`: every check (throws as
/// `expected_attention_scores` documents, naming `kvevict::expected_attention_scores`), then every held slot's
/// score into `ws.att_` (`[n_kv_heads][ws.longest_]`, sinks at the layer's largest non-sink score + 1) and the sink
/// flags into `ws.sink_`. Writes nothing else; `out` is only checked for null. The scratch is sized by the view's
/// held slots (`n_kv_heads · longest`, bounded by the view's storage), not by `row_stride`.
template <class T>
void expected_attention_run(const QueryStatistics& stats, const KVView<const T>& kv, const RopeSpec& rope,
                            std::int64_t next_position, const ExpectedAttentionOptions& opts, const float* out,
                            std::size_t row_stride, ExpectedAttentionScratch& ws) {
  const char* who = "kvevict::expected_attention_scores";
  kv.validate();
  const std::size_t d = kv.head_dim, nq = stats.n_q_heads(), nkv = kv.n_kv_heads;
  detail::require(stats.head_dim() == d, who, ": stats.head_dim() = ", stats.head_dim(), " but the view's head_dim is ",
                  d);
  detail::require(nq % nkv == 0, who, ": stats.n_q_heads() = ", nq, " is not a multiple of n_kv_heads = ", nkv);
  detail::require(stats.count() >= 1, who, ": stats holds no query rows (add the prompt's queries first)");
  detail::require(out != nullptr, who, ": out must be non-null");
  std::size_t longest = 0;
  for (std::size_t j = 0; j < nkv; ++j) longest = std::max(longest, kv.length(j));
  detail::require(row_stride >= longest, who, ": row_stride = ", row_stride, " is below the longest KV head's ",
                  longest, " slots");
  // out is [n_kv_heads][row_stride]: a stride no array can hold is refused before anything is sized or written.
  (void)detail::checked_mul(who, "n_kv_heads * row_stride", nkv, row_stride);
  detail::require(opts.n_future_positions >= 1, who, ": n_future_positions must be >= 1 (got 0)");
  detail::require(std::isfinite(opts.epsilon) && opts.epsilon >= 0.0f, who, ": epsilon must be finite and >= 0 (got ",
                  opts.epsilon, ")");
  const std::size_t g = nq / nkv, half = d / 2;
  ws.cos_.resize(half);
  ws.sin_.resize(half);
  average_rope_rotation(d, rope, next_position, opts.n_future_positions, ws.cos_.data(), ws.sin_.data());
  const bool interleaved = rope.style == RopeStyle::interleaved;
  auto pair = [&](std::size_t i, std::size_t& a, std::size_t& b) {
    a = interleaved ? 2 * i : i;
    b = interleaved ? 2 * i + 1 : i + half;
  };
  const auto di = static_cast<Eigen::Index>(d);
  ws.mu_.resize(d);
  ws.cov_.resize(d * d);  // d² <= n_q_heads · d², which QueryStatistics checked (stats.head_dim() == d)
  ws.mu_f_.resize(di);
  ws.cov_f_.resize(di, di);
  // x = μ'ᵀk/√d + ½ kᵀΣ'k/d with μ' = R̄μ, Σ' = R̄ΣR̄ᵀ: written as u = R̄ᵀk, x = μᵀu/√d + ½ uᵀΣu/d.
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d)), half_inv_d = 0.5f / static_cast<float>(d);
  std::vector<float> group_att;  // one [n] row per KV head
  const std::size_t L = std::max<std::size_t>(1, longest);  // the scratch's row stride; nkv · L <= the view's slots
  ws.longest_ = L;
  ws.att_.resize(static_cast<Eigen::Index>(nkv * L));  // before any write
  ws.sink_.assign(nkv * L, 0);
  float max_score = 0.0f;
  // Pass 1: every KV head's non-sink scores (into att_), sinks marked; pass 2: sinks = max + 1.
  for (std::size_t j = 0; j < nkv; ++j) {
    const std::size_t n = kv.length(j);
    const auto* pos = kv.head_positions(j);
    unsigned char* sink = ws.sink_.data() + j * L;
    // The sinks: the min(n_sink, n) held tokens with the lowest position IDs (ties: the lower slot), as kvpress
    // takes the first n_sink entries of its position-ordered cache. A sequence from position 0 whose first n_sink
    // tokens are held has exactly those: positions 0 .. n_sink − 1. O(n).
    const std::size_t n_sinks = std::min(opts.n_sink, n);
    if (n_sinks == n) {
      std::fill_n(sink, n, static_cast<unsigned char>(1));
    } else if (n_sinks > 0) {
      ws.order_.resize(n);
      for (std::size_t s = 0; s < n; ++s) ws.order_[s] = s;
      const auto before = [pos](std::size_t a, std::size_t b) { return pos[a] != pos[b] ? pos[a] < pos[b] : a < b; };
      std::nth_element(ws.order_.begin(), ws.order_.begin() + static_cast<std::ptrdiff_t>(n_sinks - 1),
                       ws.order_.begin() + static_cast<std::ptrdiff_t>(n), before);
      const std::size_t last = ws.order_[n_sinks - 1];  // the n_sink-th lowest (position, slot)
      for (std::size_t s = 0; s < n; ++s) sink[s] = before(last, s) ? 0 : 1;
    }
    ws.u_.resize(static_cast<Eigen::Index>(n), di);
    for (std::size_t s = 0; s < n; ++s) {
      const T* k = kv.k_row(j, s);
      for (std::size_t i = 0; i < half; ++i) {
        std::size_t a, b;
        pair(i, a, b);
        const float ka = static_cast<float>(k[a]), kb = static_cast<float>(k[b]);
        detail::require(std::isfinite(ka) && std::isfinite(kb), who, ": the key of KV head ", j, ", slot ", s,
                        " is not finite");
        // R̄ᵀ maps (ka, kb) to (c̄ ka + s̄ kb, −s̄ ka + c̄ kb)
        const float c = static_cast<float>(ws.cos_[i]), sn = static_cast<float>(ws.sin_[i]);
        ws.u_(static_cast<Eigen::Index>(s), static_cast<Eigen::Index>(a)) = c * ka + sn * kb;
        ws.u_(static_cast<Eigen::Index>(s), static_cast<Eigen::Index>(b)) = -sn * ka + c * kb;
      }
    }
    group_att.assign(n, 0.0f);
    const std::size_t n_live = n - n_sinks;
    for (std::size_t hh = 0; hh < g; ++hh) {
      const std::size_t h = j * g + hh;
      stats.mean(h, ws.mu_.data());
      for (std::size_t a = 0; a < d; ++a) ws.mu_f_(static_cast<Eigen::Index>(a)) = static_cast<float>(ws.mu_[a]);
      ws.x_.noalias() = ws.u_ * ws.mu_f_;
      ws.x_ *= inv_sqrt_d;
      if (opts.use_covariance) {
        stats.covariance(h, ws.cov_.data());
        for (std::size_t a = 0; a < d; ++a)
          for (std::size_t b = 0; b < d; ++b)
            ws.cov_f_(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b)) = static_cast<float>(ws.cov_[a * d + b]);
        ws.us_.noalias() = ws.u_ * ws.cov_f_;
        ws.x_.array() += half_inv_d * (ws.us_.array() * ws.u_.array()).rowwise().sum();
      }
      if (n_live == 0) continue;
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t s = 0; s < n; ++s) {
        const float x = ws.x_(static_cast<Eigen::Index>(s));
        if (sink[s] != 0) continue;
        detail::require(std::isfinite(x), who, ": the expected logit of query head ", h, ", slot ", s, " is ", x,
                        " (a key or query statistic too large)");
        m = std::max(m, x);
      }
      float z = 0.0f;
      for (std::size_t s = 0; s < n; ++s)
        if (sink[s] == 0) z += std::exp(ws.x_(static_cast<Eigen::Index>(s)) - m);
      const float inv_z = 1.0f / z;
      for (std::size_t s = 0; s < n; ++s)
        if (sink[s] == 0) group_att[s] += std::exp(ws.x_(static_cast<Eigen::Index>(s)) - m) * inv_z;
    }
    for (std::size_t s = 0; s < n; ++s) {
      if (sink[s] != 0) continue;
      float v = group_att[s] / static_cast<float>(g);
      if (opts.use_vnorm) {
        const T* vr = kv.v_row(j, s);
        float sq = 0.0f;
        for (std::size_t e = 0; e < d; ++e) sq += static_cast<float>(vr[e]) * static_cast<float>(vr[e]);
        detail::require(std::isfinite(sq), who, ": the value of KV head ", j, ", slot ", s, " is not finite");
        v = (v + opts.epsilon) * std::sqrt(sq);
        detail::require(std::isfinite(v), who, ": the score of KV head ", j, ", slot ", s, " is ", v,
                        " ((attention + epsilon) * ||v|| overflows)");
      }
      group_att[s] = v;
      max_score = std::max(max_score, v);
    }
    for (std::size_t s = 0; s < n; ++s) ws.att_(static_cast<Eigen::Index>(j * L + s)) = group_att[s];
  }
  // Every check passed: sinks at the layer's largest non-sink score + 1 (kvpress's F.pad value).
  for (std::size_t j = 0; j < nkv; ++j)
    for (std::size_t s = 0; s < kv.length(j); ++s)
      if (ws.sink_[j * L + s] != 0) ws.att_(static_cast<Eigen::Index>(j * L + s)) = max_score + 1.0f;
}

}  // namespace detail

/// Expected Attention's score of every held slot (the formula at the top of this header), `out[j * row_stride + s]`
/// for KV head j and slot s < kv.length(j), in the view's slot order; the rest of each row is left as it is.
///  - `stats`: the layer's pre-RoPE query statistics, `stats.n_q_heads()` a positive multiple of `kv.n_kv_heads`,
///    `stats.head_dim() == kv.head_dim`, `stats.count() >= 1`;
///  - `kv`: the layer's held keys (post-RoPE, at their position IDs) and values; K and V of type `T` (float,
///    `Eigen::half`, `Eigen::bfloat16`), converted to float; KV heads may hold different lengths;
///  - `rope`: the model's RoPE (pairing, θ), `next_position` the first future position (the prompt's length at
///    prefill, the new token's position + 1 after a decode step's append).
/// The sinks of KV head j are its `min(opts.n_sink, kv.length(j))` held tokens with the lowest position IDs (ties:
/// the lower slot), whatever position the sequence starts at; each scores the layer's largest non-sink score + 1.
/// Computed in float (μ', Σ' in double, then rounded) with Eigen products; softmax in float with the row maximum
/// subtracted. Scores are finite and >= 0. Throws `std::invalid_argument` (nothing written) for mismatched sizes,
/// `row_stride` below the longest head, `n_kv_heads · row_stride` overflowing `std::size_t`, a null `out`, options
/// out of range (F = 0, ε negative or not finite), a non-finite key or value element, or an expected logit that is
/// not finite. The scratch grows with the held slots only. O(n_q_heads · (n · d² + d³) + d · F).
template <class T>
void expected_attention_scores(const QueryStatistics& stats, const KVView<const T>& kv, const RopeSpec& rope,
                               std::int64_t next_position, const ExpectedAttentionOptions& opts, float* out,
                               std::size_t row_stride, ExpectedAttentionScratch& ws) {
  detail::expected_attention_run(stats, kv, rope, next_position, opts, out, row_stride, ws);
  // ---- nothing below can throw ----
  for (std::size_t j = 0; j < kv.n_kv_heads; ++j)
    for (std::size_t s = 0; s < kv.length(j); ++s)
      out[j * row_stride + s] = ws.att_(static_cast<Eigen::Index>(j * ws.longest_ + s));
}

/// `expected_attention_scores` on a writable view (read through `kv.read_only()`).
template <class T, std::enable_if_t<!std::is_const<T>::value, int> = 0>
void expected_attention_scores(const QueryStatistics& stats, const KVView<T>& kv, const RopeSpec& rope,
                               std::int64_t next_position, const ExpectedAttentionOptions& opts, float* out,
                               std::size_t row_stride, ExpectedAttentionScratch& ws) {
  expected_attention_scores<T>(stats, kv.read_only(), rope, next_position, opts, out, row_stride, ws);
}

/// The logits rows that make a TOVA cache (`CurrentAttentionScore`) rank by Expected Attention:
/// `out[h * row_stride + s] = log(max(score[h / g][s], FLT_MIN))` for every query head h (`g` = group size) and
/// slot s < kv.length(h / g), `score` from `expected_attention_scores` (same arguments). Pass `out` as a decode
/// step's logits (`decode_step(out, n)`, so `row_stride` = n, the live slots), or its rows as a prefill's last row
/// (`SingleRowLogits`). Scores
/// below FLT_MIN tie at FLT_MIN: 0 from a zero value vector (any ε), or from an attention that underflows to 0 in
/// float (an expected logit about 104 or more below its row's maximum, ε = 0). Throws as
/// `expected_attention_scores` (nothing written), and first `std::invalid_argument` if `n_q_heads · row_stride`
/// (the extent of `out`) overflows `std::size_t`. No allocation beyond the scratch's. O(that + n_q_heads · n).
template <class T>
void expected_attention_logits(const QueryStatistics& stats, const KVView<T>& kv, const RopeSpec& rope,
                               std::int64_t next_position, const ExpectedAttentionOptions& opts, float* out,
                               std::size_t row_stride, ExpectedAttentionScratch& ws) {
  const char* who = "kvevict::expected_attention_logits";
  detail::require(out != nullptr, who, ": out must be non-null");
  const std::size_t nkv = kv.n_kv_heads, nq = stats.n_q_heads();
  detail::require(nkv >= 1 && nq % nkv == 0, who, ": stats.n_q_heads() = ", nq, " is not a multiple of n_kv_heads = ",
                  nkv);
  // out is [n_q_heads][row_stride]: refused before the scratch is sized or anything is written.
  (void)detail::checked_mul(who, "n_q_heads * row_stride", nq, row_stride);
  detail::expected_attention_run(stats, kv.read_only(), rope, next_position, opts, out, row_stride, ws);
  // ---- nothing below can throw ----
  const std::size_t g = nq / nkv;
  for (std::size_t h = 0; h < nq; ++h) {
    const std::size_t j = h / g;
    for (std::size_t s = 0; s < kv.length(j); ++s)
      out[h * row_stride + s] = std::log(std::max(ws.att_(static_cast<Eigen::Index>(j * ws.longest_ + s)), FLT_MIN));
  }
}

/// A prefill chunk's rows for a score that reads only the chunk's last row (`kPrefillLastRow`: TOVA, so Expected
/// Attention): row `C − 1` of query head h is `rows[h * row_stride, …)`, the `[q_head][row_stride]` array given
/// (e.g. by `expected_attention_logits`); any other row throws `std::invalid_argument`. Pass it to
/// `cache.prefill_chunk(rows, C, n)` with `row_stride >= n`. Keeps the pointer: `rows` must outlive the call.
class SingleRowLogits final : public ChunkRows {
 public:
  /// `rows`: `[n_q_heads][row_stride]`; `last` = the chunk's `C − 1`.
  SingleRowLogits(const float* rows, std::size_t n_q_heads, std::size_t row_stride, std::size_t last)
      : rows_(rows), nq_(n_q_heads), stride_(row_stride), last_(last) {
    detail::require(rows != nullptr, "kvevict::SingleRowLogits: rows must be non-null");
    detail::require(n_q_heads >= 1, "kvevict::SingleRowLogits: n_q_heads must be >= 1 (got 0)");
  }
  const float* row(std::size_t q_head, std::size_t i) override {
    detail::require(q_head < nq_ && i == last_, "kvevict::SingleRowLogits: the cache asks for row ", i,
                    " of q_head ", q_head, " but only row ", last_, " of ", nq_,
                    " query heads is held (a score that reads every prompt row needs every row)");
    return rows_ + q_head * stride_;
  }
  std::size_t n_q_heads() const override { return nq_; }

 private:
  const float* rows_;
  std::size_t nq_, stride_, last_;
};

}  // namespace kvevict
