// attention/qk_chunk_logits.hpp — prefill scoring straight from Q and K, for engines
// whose fused attention kernel (FlashAttention, SDPA) returns no weights: the logits
// of a prefill chunk are computed block by block with Eigen GEMM and fed to the cache,
// never materialised as a whole.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"
#include "kvevict/score/chunk_rows.hpp"

namespace kvevict {

/// Work space of `prefill_chunk_qk`, allocated once (so that the calls allocate
/// nothing): a block of `row_tile` logits rows over up to `capacity` slots, and
/// `col_tile` K rows converted to float (used for non-float KV only).
/// Memory: `4 · (row_tile · capacity + col_tile · head_dim)` bytes — with a
/// bounded prefill `capacity = k + C`, independent of the prompt length.
class QKChunkScratch {
 public:
  /// Throws `std::invalid_argument` if any size is 0 or `row_tile · capacity` or `col_tile · head_dim`
  /// overflows `std::size_t` (nothing allocated); `std::length_error` (from `std::vector`) above its `max_size()`.
  QKChunkScratch(std::size_t capacity, std::size_t head_dim, std::size_t row_tile = 16, std::size_t col_tile = 128)
      : capacity_(capacity), head_dim_(head_dim), row_tile_(row_tile), col_tile_(col_tile) {
    const char* who = "kvevict::QKChunkScratch";
    detail::require(capacity >= 1 && head_dim >= 1 && row_tile >= 1 && col_tile >= 1, who,
                    ": capacity, head_dim, row_tile and col_tile must be >= 1 (got ", capacity, ", ", head_dim, ", ",
                    row_tile, ", ", col_tile, ")");
    const std::size_t block = detail::checked_mul(who, "row_tile * capacity", row_tile, capacity);
    const std::size_t k_tile = detail::checked_mul(who, "col_tile * head_dim", col_tile, head_dim);
    block_.assign(block, 0.0f);
    k_tile_.assign(k_tile, 0.0f);
  }
  std::size_t capacity() const { return capacity_; }
  std::size_t head_dim() const { return head_dim_; }
  std::size_t row_tile() const { return row_tile_; }
  std::size_t col_tile() const { return col_tile_; }

 private:
  template <class T, class Bias>
  friend class QKChunkRows;
  std::size_t capacity_, head_dim_, row_tile_, col_tile_;
  std::vector<float> block_;   // [row_tile][capacity]
  std::vector<float> k_tile_;  // [col_tile][head_dim]
};

/// No additive bias (the default of `prefill_chunk_qk`).
struct NoBias {
  void operator()(std::size_t /*q_head*/, std::size_t /*i*/, float* /*row*/, std::size_t /*len*/) const {}
};

/// The `ChunkRows` of `prefill_chunk_qk`: row `i` of query head `h` is
/// `scale · q[i][h] · K[h / g][s]` for slots `s <= held + i`, then `bias(h, i,
/// row, held + i + 1)`; rows are computed `row_tile` at a time, column tile by
/// column tile (`Q_block · K_tileᵀ`, Eigen GEMM whose packing stays on the
/// stack). Use through `prefill_chunk_qk`.
template <class T, class Bias>
class QKChunkRows final : public ChunkRows {
 public:
  QKChunkRows(const KVView<const T>& kv, const float* q, std::size_t chunk_len, std::size_t n_q_heads, float scale,
              QKChunkScratch& scratch, Bias& bias)
      : kv_(kv), q_(q), C_(chunk_len), nq_(n_q_heads), g_(n_q_heads / kv.n_kv_heads), held_(kv.length(0) - chunk_len),
        scale_(scale), s_(scratch), bias_(bias) {}

  const float* row(std::size_t q_head, std::size_t i) override {
    detail::require(q_head < nq_ && i < C_, "kvevict::prefill_chunk_qk: the cache asks for row ", i, " of q_head ",
                    q_head, " but q holds ", C_, " rows of n_q_heads = ", nq_,
                    " (pass the cache's query-head count)");
    if (q_head != head_ || i < first_ || i >= first_ + rows_) compute(q_head, i);
    return s_.block_.data() + (i - first_) * s_.capacity_;
  }
  /// The `n_q_heads` given to `prefill_chunk_qk` (the layout of `q`); the cache checks it is its own.
  std::size_t n_q_heads() const override { return nq_; }

 private:
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  // Rows [first, first + R) of q_head: columns [0, held + first + R) (the last row's causal span).
  void compute(std::size_t q_head, std::size_t first) {
    const std::size_t d = kv_.head_dim, R = std::min(s_.row_tile_, C_ - first), cols = held_ + first + R;
    const auto ri = static_cast<Eigen::Index>(R), di = static_cast<Eigen::Index>(d);
    const Strided Q(q_ + first * nq_ * d + q_head * d, ri, di,
                    Eigen::OuterStride<>(static_cast<Eigen::Index>(nq_ * d)));
    Eigen::Map<RowMat, 0, Eigen::OuterStride<>> X(s_.block_.data(), ri, static_cast<Eigen::Index>(cols),
                                                 Eigen::OuterStride<>(static_cast<Eigen::Index>(s_.capacity_)));
    const std::size_t j = q_head / g_;
    for (std::size_t c0 = 0; c0 < cols; c0 += s_.col_tile_) {
      const std::size_t len = std::min(s_.col_tile_, cols - c0);
      const auto li = static_cast<Eigen::Index>(len), c0i = static_cast<Eigen::Index>(c0);
      if constexpr (std::is_same<std::remove_const_t<T>, float>::value) {
        const Strided K(kv_.k_row(j, c0), li, di, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv_.slot_stride)));
        X.block(0, c0i, ri, li).noalias() = Q * K.transpose();
      } else {
        for (std::size_t s = 0; s < len; ++s)
          for (std::size_t e = 0; e < d; ++e) s_.k_tile_[s * d + e] = static_cast<float>(kv_.k_row(j, c0 + s)[e]);
        const Eigen::Map<const RowMat> K(s_.k_tile_.data(), li, di);
        X.block(0, c0i, ri, li).noalias() = Q * K.transpose();
      }
    }
    X *= scale_;
    for (std::size_t r = 0; r < R; ++r)
      bias_(q_head, first + r, s_.block_.data() + r * s_.capacity_, held_ + first + r + 1);
    head_ = q_head;
    first_ = first;
    rows_ = R;
  }

  KVView<const T> kv_;
  const float* q_;
  std::size_t C_, nq_, g_, held_;
  float scale_;
  QKChunkScratch& s_;
  Bias& bias_;
  std::size_t head_ = static_cast<std::size_t>(-1), first_ = 0, rows_ = 0;
};

/// Chunked prefill scored from Q and K: computes the chunk's logits
/// `x[h][i][s] = scale · (q[i][h] · K[h / g][s]) (+ bias)` for `s <= held + i`
/// block by block and passes them to `cache.prefill_chunk` (a `Cache` or a
/// `CacheInterface`) as rows on demand —
/// the same rows, in the same order, as a materialised `[q_head][C][n]` array,
/// so the result equals `cache.prefill_chunk(x, C, n)` on those logits.
///
///  - `kv`: the view after the engine appended the chunk (`n = kv.length(h)`
///    slots on every head, the chunk at slots `[n − C, n)`); K rows of type `T`
///    (float, `Eigen::half`, `Eigen::bfloat16`; converted to float by tile);
///  - `q`: the chunk's queries, `[C][n_q_heads][head_dim]` row-major, RoPE applied;
///  - `scale`: usually `1 / sqrt(head_dim)`;
///  - `bias`: optional callable `bias(q_head, i, row, len)` that adds to (or
///    masks with `-inf`) the `len = held + i + 1` logits of chunk row `i` by slot
///    (ALiBi, document masks); positions are in `kv.head_positions(h / g)`;
///  - `scratch`: built with `capacity >= n` and the view's `head_dim`.
/// Memory: `scratch` only, O(row_tile · n + col_tile · head_dim) floats — never
/// O(P²) (the rows of one query head are computed `row_tile` at a time; whole
/// rows, so that the cache's softmax and noise see each row exactly as with
/// materialised logits). Time O(n_q_heads · C · n · head_dim). No heap allocation
/// with the default tiles; Eigen's GEMM may allocate its packing buffers when a tile
/// operand exceeds its 128 KiB stack limit (`row_tile · head_dim` or `col_tile ·
/// head_dim` above 32768 floats).
/// Throws `std::invalid_argument` (nothing changed) if the view fails
/// `KVView::validate` (e.g. a length above its capacity), `n_q_heads` is not a
/// positive multiple of `kv.n_kv_heads`, `q` is null, heads hold different
/// lengths, `C == 0` or `C > n`, `C · n_q_heads · head_dim` (the elements of `q`) overflows `std::size_t`,
/// or the scratch is too small; then whatever
/// `prefill_chunk` throws, including an `n_q_heads` that is not the cache's
/// query-head count (`ChunkRows::n_q_heads`).
template <class CacheT, class T, class Bias = NoBias>
void prefill_chunk_qk(CacheT& cache, const KVView<const T>& kv, const float* q, std::size_t chunk_len,
                      std::size_t n_q_heads, float scale, QKChunkScratch& scratch, Bias bias = Bias()) {
  const char* who = "kvevict::prefill_chunk_qk";
  kv.validate();  // lengths within the capacity: the rows read K up to slot n - 1
  detail::require(kv.n_kv_heads >= 1 && n_q_heads >= 1 && n_q_heads % kv.n_kv_heads == 0, who,
                  ": n_q_heads (", n_q_heads, ") must be a positive multiple of n_kv_heads (", kv.n_kv_heads, ")");
  detail::require(q != nullptr, who, ": q must be non-null");
  const std::size_t n = kv.length(0);
  for (std::size_t j = 1; j < kv.n_kv_heads; ++j)
    detail::require(kv.length(j) == n, who, ": KV head ", j, " holds ", kv.length(j), " slots, KV head 0 holds ", n);
  detail::require(chunk_len >= 1 && chunk_len <= n, who, ": chunk_len = ", chunk_len, " must be in [1, n = ", n, "]");
  // q is [C][n_q_heads][head_dim]: its rows are addressed as (i · n_q_heads + h) · head_dim.
  (void)detail::checked_mul(who, "chunk_len * n_q_heads * head_dim (the elements of q)", chunk_len, n_q_heads,
                            kv.head_dim);
  detail::require(scratch.capacity() >= n && scratch.head_dim() == kv.head_dim, who, ": scratch (capacity ",
                  scratch.capacity(), ", head_dim ", scratch.head_dim(), ") does not fit n = ", n,
                  " slots of head_dim ", kv.head_dim);
  QKChunkRows<T, Bias> rows(kv, q, chunk_len, n_q_heads, scale, scratch, bias);
  cache.prefill_chunk(rows, chunk_len, n);
}

/// `prefill_chunk_qk` on a writable view (read through `kv.read_only()`).
template <class CacheT, class T, class Bias = NoBias, std::enable_if_t<!std::is_const<T>::value, int> = 0>
void prefill_chunk_qk(CacheT& cache, const KVView<T>& kv, const float* q, std::size_t chunk_len,
                      std::size_t n_q_heads, float scale, QKChunkScratch& scratch, Bias bias = Bias()) {
  prefill_chunk_qk<CacheT, T, Bias>(cache, kv.read_only(), q, chunk_len, n_q_heads, scale, scratch,
                                    std::move(bias));
}

}  // namespace kvevict
