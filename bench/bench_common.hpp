// kvevict benchmark suite — shared pieces: shapes, the engine's own attention
// (decode and prefill) with Eigen, the naive eviction step, random data.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>
#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include <kvevict/kvevict.hpp>

namespace kvbench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

constexpr std::size_t kKVHeads = 8;  // every benchmarked shape has 8 KV heads

/// One benchmark shape: `n` retained tokens per KV head (the budget k), head
/// dimension `d`, GQA group `g` (query heads = 8 g).
struct Shape {
  std::size_t n = 0, d = 0, g = 1;
  std::size_t n_q() const { return kKVHeads * g; }
};

template <class T> const char* type_name();
template <> inline const char* type_name<float>() { return "float"; }
template <> inline const char* type_name<Eigen::half>() { return "half"; }

/// Bytes of K and V of one layer at `n` tokens: what one attention step must read.
template <class T>
double kv_bytes(const Shape& s) {
  return 2.0 * kKVHeads * static_cast<double>(s.n) * static_cast<double>(s.d) * sizeof(T);
}

/// Fills `out` with N(0, 1) draws converted to T (deterministic).
template <class T>
void fill_normal(T* out, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < count; ++i) out[i] = T(nd(gen));
}

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using StridedRows = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

/// dst (rows × d, row-major, float) = src rows converted to float. Eigen's
/// half cast is scalar; with F16C (-march=native) rows go 8 at a time through
/// vcvtph2ps, as an engine's fp16 attention would do.
template <class T>
void rows_to_float(const StridedRows<T>& src, Eigen::Index r0, Eigen::Index rows, RowMat<float>& dst) {
#if defined(__F16C__) && defined(__AVX__)
  if constexpr (std::is_same<T, Eigen::half>::value) {
    const Eigen::Index d = src.cols();
    if (d % 8 == 0) {
      for (Eigen::Index r = 0; r < rows; ++r) {
        const Eigen::half* in = src.data() + (r0 + r) * src.outerStride();
        float* out = &dst(r, 0);
        for (Eigen::Index c = 0; c < d; c += 8)
          _mm256_storeu_ps(out + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + c))));
      }
      return;
    }
  }
#endif
  dst.topRows(rows) = src.middleRows(r0, rows).template cast<float>();
}

/// The engine's own decode-step attention over the live slots of a view, per
/// KV head j and its g query heads: S = K_j · (Q_j / √d)ᵀ (n × g, written to
/// `logits` as [q_head][n], exactly what `Cache::decode_step` reads), P =
/// softmax over the slots, O_j = V_jᵀ · P. float K/V are used in place
/// (matrix-vector for g = 1, matrix-matrix for g > 1); 16-bit K/V are converted
/// to float in blocks of 256 rows (L2-resident) and multiplied the same way.
/// Single-threaded, no allocation after construction.
template <class T>
class DecodeAttention {
 public:
  DecodeAttention(const Shape& s, std::size_t capacity)
      : shape_(s), qs_(s.g, s.d), p_(capacity, s.g), out_(s.d, s.g), block_(kBlock, s.d), sums_(s.g) {}

  /// q: [n_q][d]; logits: [n_q][n] (n = kv.length(0)); out: [n_q][d]. `on_logits(j)` runs right after
  /// KV head j's logits are written (before their softmax and the V product: they are still in L1/L2),
  /// for a cache's per-head decode step (`Cache::score_decode_head`); it must not change slot
  /// `[0, n)` of heads > j.
  template <class OnLogits = void (*)(std::size_t)>
  void run(const kvevict::KVView<T>& kv, const float* q, float* logits, float* out,
           OnLogits on_logits = [](std::size_t) {}) {
    const auto n = static_cast<Eigen::Index>(kv.length(0));
    const auto d = static_cast<Eigen::Index>(shape_.d), g = static_cast<Eigen::Index>(shape_.g);
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape_.d));
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      qs_ = Eigen::Map<const RowMat<float>>(q + j * shape_.g * shape_.d, g, d) * scale;
      StridedRows<T> K(kv.k_row(j, 0), n, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv.slot_stride)));
      StridedRows<T> V(kv.v_row(j, 0), n, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv.slot_stride)));
      Eigen::Map<Eigen::MatrixXf> S(logits + j * shape_.g * static_cast<std::size_t>(n), n, g);
      auto P = p_.topRows(n);
      if constexpr (std::is_same<T, float>::value) {
        if (g == 1)
          S.col(0).noalias() = K * qs_.row(0).transpose();
        else
          S.noalias() = K * qs_.transpose();
      } else {
        for (Eigen::Index r = 0; r < n; r += kBlock) {
          const Eigen::Index b = std::min<Eigen::Index>(kBlock, n - r);
          rows_to_float(K, r, b, block_);
          if (g == 1)
            S.col(0).segment(r, b).noalias() = block_.topRows(b) * qs_.row(0).transpose();
          else
            S.middleRows(r, b).noalias() = block_.topRows(b) * qs_.transpose();
        }
      }
      on_logits(j);
      for (Eigen::Index c = 0; c < g; ++c) {
        const float m = S.col(c).maxCoeff();
        P.col(c) = (S.col(c).array() - m).exp();
        sums_(c) = P.col(c).sum();
      }
      if constexpr (std::is_same<T, float>::value) {
        if (g == 1)
          out_.col(0).noalias() = V.transpose() * P.col(0);
        else
          out_.noalias() = V.transpose() * P;
      } else {
        out_.setZero();
        for (Eigen::Index r = 0; r < n; r += kBlock) {
          const Eigen::Index b = std::min<Eigen::Index>(kBlock, n - r);
          rows_to_float(V, r, b, block_);
          if (g == 1)
            out_.col(0).noalias() += block_.topRows(b).transpose() * P.col(0).segment(r, b);
          else
            out_.noalias() += block_.topRows(b).transpose() * P.middleRows(r, b);
        }
      }
      for (Eigen::Index c = 0; c < g; ++c)
        Eigen::Map<Eigen::VectorXf>(out + (j * shape_.g + static_cast<std::size_t>(c)) * shape_.d, d) =
            out_.col(c) / sums_(c);
    }
  }

 private:
  static constexpr Eigen::Index kBlock = 256;
  Shape shape_;
  RowMat<float> qs_;
  Eigen::MatrixXf p_, out_;
  RowMat<float> block_;
  Eigen::VectorXf sums_;
};

/// The engine's own causal prefill attention, per query head h (KV head h / g):
/// for query rows in blocks of 128, S = Q_h · K_jᵀ / √d over the keys the block
/// can see (causality halves the work), written into `logits` ([q_head][P][P],
/// row-major, what `Cache::prefill` reads), row softmax over c <= r into a
/// scratch, O = P · V. 16-bit K/V are converted to float once per KV head.
/// Single-threaded.
template <class T>
class PrefillAttention {
 public:
  PrefillAttention(const Shape& s, std::size_t P)
      : shape_(s), P_(P), kf_(P, s.d), vf_(P, s.d), probs_(kRows, P), out_(P, s.d) {}

  /// q: [n_q][P][d]; logits: [n_q][P][P].
  void run(const kvevict::KVView<T>& kv, const float* q, float* logits) {
    const auto P = static_cast<Eigen::Index>(P_), d = static_cast<Eigen::Index>(shape_.d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape_.d));
    for (std::size_t h = 0; h < shape_.n_q(); ++h) {
      const std::size_t j = h / shape_.g;
      StridedRows<T> K(kv.k_row(j, 0), P, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv.slot_stride)));
      StridedRows<T> V(kv.v_row(j, 0), P, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv.slot_stride)));
      if (h % shape_.g == 0) {  // new KV head: make float copies once (a no-op view for float would do too)
        rows_to_float(K, 0, P, kf_);
        rows_to_float(V, 0, P, vf_);
      }
      Eigen::Map<const RowMat<float>> Q(q + h * P_ * shape_.d, P, d);
      Eigen::Map<RowMat<float>> S(logits + h * P_ * P_, P, P);
      for (Eigen::Index r0 = 0; r0 < P; r0 += kRows) {
        const Eigen::Index b = std::min<Eigen::Index>(kRows, P - r0), visible = r0 + b;
        S.block(r0, 0, b, visible).noalias() = (Q.middleRows(r0, b) * scale) * kf_.topRows(visible).transpose();
        for (Eigen::Index i = 0; i < b; ++i) {
          const Eigen::Index len = r0 + i + 1;
          auto srow = S.row(r0 + i).head(len);
          auto prow = probs_.row(i).head(visible);
          const float m = srow.maxCoeff();
          prow.head(len) = (srow.array() - m).exp();
          prow.head(len) /= prow.head(len).sum();
          if (len < visible) prow.tail(visible - len).setZero();
        }
        out_.middleRows(r0, b).noalias() = probs_.topRows(b).leftCols(visible) * vf_.topRows(visible);
      }
    }
  }

 private:
  static constexpr Eigen::Index kRows = 128;
  Shape shape_;
  std::size_t P_;
  RowMat<float> kf_, vf_, probs_, out_;
};

/// The straightforward Keyformer step the reference codes take (H2O's "real
/// drop"): tokens kept in position order in storage it owns; every step it
/// copies the step's logits, adds Gumbel noise, applies τ and the softmax on
/// the copy, accumulates, sorts every score (full sort), and gathers every
/// retained K/V row, position and score into freshly allocated storage. It uses
/// the same vectorised Gumbel sampler and Eigen exp as kvevict, so the gap is the
/// algorithm (copy + sort + gather), not the math library.
template <class T>
class NaiveKeyformer {
 public:
  NaiveKeyformer(const Shape& s, std::size_t k, std::size_t w, float tau, std::uint64_t seed)
      : shape_(s), k_(k), w_(w), inv_tau_(1.0f / tau), rng_(seed) {
    for (auto& h : heads_) h.alloc(k + 1, s.d);
  }

  std::size_t length() const { return heads_[0].n; }
  const std::int64_t* positions(std::size_t j) const { return heads_[j].pos.get(); }
  T* k_row(std::size_t j, std::size_t i) { return heads_[j].k.get() + i * shape_.d; }

  /// Appends one token (rows [kv_head][d]) with score 0.
  void append(std::int64_t position, const T* k_new, const T* v_new) {
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      Head& h = heads_[j];
      std::copy_n(k_new + j * shape_.d, shape_.d, h.k.get() + h.n * shape_.d);
      std::copy_n(v_new + j * shape_.d, shape_.d, h.v.get() + h.n * shape_.d);
      h.pos[h.n] = position;
      h.score[h.n] = 0.0f;
      ++h.n;
    }
  }

  /// One step on logits [n_q][n] (n = length()); `gumbel` [n_q][n] or nullptr
  /// to draw. Evicts to k if n > k. Allocates (that is the point).
  void step(const float* logits, const float* gumbel = nullptr) {
    const std::size_t n = heads_[0].n;
    std::vector<float> a(logits, logits + shape_.n_q() * n);  // the copied attention matrix
    std::vector<float> z(a.size());
    if (gumbel != nullptr)
      std::copy_n(gumbel, z.size(), z.data());
    else
      kvevict::fill_gumbel(rng_, z.data(), z.size());
    for (std::size_t h = 0; h < shape_.n_q(); ++h) {
      Eigen::Map<Eigen::ArrayXf> x(a.data() + h * n, static_cast<Eigen::Index>(n));
      x = (x + Eigen::Map<Eigen::ArrayXf>(z.data() + h * n, static_cast<Eigen::Index>(n))) * inv_tau_;
      x = (x - x.maxCoeff()).exp();
      x /= x.sum();
      float* s = heads_[h / shape_.g].score.get();
      for (std::size_t i = 0; i < n; ++i) s[i] += x[static_cast<Eigen::Index>(i)];
    }
    if (n <= k_) return;
    for (auto& head : heads_) {
      // Full sort of the candidates outside the recent window (the last w by position).
      const std::size_t pool = n - w_;
      std::vector<std::size_t> order(pool);
      std::iota(order.begin(), order.end(), std::size_t{0});
      const float* s = head.score.get();
      std::sort(order.begin(), order.end(),
                [s](std::size_t x, std::size_t y) { return s[x] > s[y] || (s[x] == s[y] && x < y); });
      order.resize(k_ - w_);
      std::sort(order.begin(), order.end());
      for (std::size_t i = pool; i < n; ++i) order.push_back(i);
      // Gather every retained row into fresh storage.
      Head fresh;
      fresh.alloc(k_ + 1, shape_.d);
      for (std::size_t c = 0; c < order.size(); ++c) {
        const std::size_t from = order[c];
        std::copy_n(head.k.get() + from * shape_.d, shape_.d, fresh.k.get() + c * shape_.d);
        std::copy_n(head.v.get() + from * shape_.d, shape_.d, fresh.v.get() + c * shape_.d);
        fresh.pos[c] = head.pos[from];
        fresh.score[c] = head.score[from];
      }
      fresh.n = order.size();
      head = std::move(fresh);
    }
  }

 private:
  struct Head {
    std::unique_ptr<T[]> k, v;  // default-initialised, like torch.empty
    std::unique_ptr<std::int64_t[]> pos;
    std::unique_ptr<float[]> score;
    std::size_t n = 0;
    void alloc(std::size_t cap, std::size_t d) {
      k.reset(new T[cap * d]);
      v.reset(new T[cap * d]);
      pos.reset(new std::int64_t[cap]);
      score.reset(new float[cap]);
    }
  };
  Shape shape_;
  std::size_t k_, w_;
  float inv_tau_;
  kvevict::Xoshiro256pp rng_;
  Head heads_[kKVHeads];
};

}  // namespace kvbench
