// attention/paged_attention_logits.hpp — decode-step logits over a paged sequence (the
// counterpart of attention_logits.hpp for a PagedKVView), for engines without a paged kernel
// of their own and for checking one.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "kvevict/detail/check.hpp"
#include "kvevict/paged/paged_kv_view.hpp"

namespace kvevict {

/// Computes the decode-step logits `x[h][s] = scale · (q[h] · K[h / g][s]) (+ bias[h][s])` for one
/// query per query head against every live logical slot `s` in `[0, *kv.length)` of a paged sequence.
///
///  - `kv`: the sequence's view (any layout and page stride it describes); read only;
///  - `q`: `[n_q_heads][head_dim]` row-major, float (RoPE already applied);
///  - `out`: `[n_q_heads][n]` row-major, `n = *kv.length`, indexed by logical slot, as
///    `PagedCache::decode_step` expects;
///  - `scale`: usually `1 / sqrt(head_dim)`;
///  - `bias`: optional additive bias `[n_q_heads][n]` (ALiBi, masks with `-inf`), or `nullptr`.
/// `g = n_q_heads / kv.n_kv_heads`. K rows of type `T` are converted to float on the fly.
///
/// Each page's rows of a KV head go through the same Eigen matrix–vector product as
/// `attention_logits` on a `KVView`, so on the same K rows the logits are the same floats whenever
/// `head_dim` is a multiple of Eigen's float packet (4 with SSE2, 8 with AVX, 16 with AVX-512, so
/// every `head_dim` that is a multiple of 16, e.g. 64 or 128); for other `head_dim` Eigen may sum the
/// last elements of a row in another order (a few ulp). O(n_q_heads · n · head_dim), no allocation
/// for `float` K.
///
/// `out` must not overlap `q` or `bias` (an in-place bias would be overwritten by the product before
/// it is added): add a bias in place after the call instead.
/// Throws `std::invalid_argument`, before writing `out`, when `kv.validate()` does, when `n_q_heads`
/// is not a positive multiple of `kv.n_kv_heads`, a pointer is null, a live page-table entry is not
/// a page id in `[0, num_pages)`, or `out` overlaps `q` or `bias`.
template <class T>
void paged_attention_logits(const PagedKVView<T>& kv, const float* q, std::size_t n_q_heads, float* out,
                            float scale, const float* bias = nullptr) {
  kv.validate();
  detail::require(n_q_heads >= 1 && n_q_heads % kv.n_kv_heads == 0, "kvevict::paged_attention_logits: n_q_heads (",
                  n_q_heads, ") must be a positive multiple of n_kv_heads (", kv.n_kv_heads, ")");
  detail::require(q != nullptr && out != nullptr, "kvevict::paged_attention_logits: q and out must be non-null");
  const std::size_t n = *kv.length, pages = kv.pages_used();
  for (std::size_t i = 0; i < pages; ++i) {
    const std::int32_t p = kv.page_table[i];
    detail::require(p >= 0 && static_cast<std::size_t>(p) < kv.num_pages, "kvevict::paged_attention_logits: "
                    "page_table[", i, "] = ", p, " is not a page id in [0, ", kv.num_pages, ") (the sequence holds ",
                    n, " slots in ", pages, " pages)");
  }
  detail::require_separate_logits("kvevict::paged_attention_logits", q, n_q_heads, kv.head_dim, bias, out, n);
  const std::size_t g = n_q_heads / kv.n_kv_heads;
  const auto d = static_cast<Eigen::Index>(kv.head_dim);
  // Rows of one KV head inside one page: NHD strides over the page's other heads, HND is contiguous.
  const auto row_stride = static_cast<Eigen::Index>(kv.layout == PageLayout::NHD ? kv.n_kv_heads * kv.head_dim
                                                                                 : kv.head_dim);
  using KMat = Eigen::Map<const Eigen::Matrix<std::remove_const_t<T>, Eigen::Dynamic, Eigen::Dynamic,
                                              Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
  for (std::size_t h = 0; h < n_q_heads; ++h) {
    Eigen::Map<const Eigen::VectorXf> qv(q + h * kv.head_dim, d);
    for (std::size_t i = 0; i < pages; ++i) {
      const std::size_t first = i * kv.page_size, rows = (n - first < kv.page_size) ? n - first : kv.page_size;
      Eigen::Map<Eigen::VectorXf> x(out + h * n + first, static_cast<Eigen::Index>(rows));
      if (rows == 1 && n > 1) {
        // Eigen turns a one-row product into a dot product, which sums in another order than the
        // matrix-vector kernel the contiguous helper runs on its n > 1 rows: the row twice (stride 0)
        // keeps the kernel, and its first result is the row's.
        float pair[2];
        KMat K(kv.k_row(h / g, first), 2, d, Eigen::OuterStride<>(0));
        Eigen::Map<Eigen::Vector2f>(pair).noalias() = K.template cast<float>() * qv;
        x(0) = pair[0];
      } else {
        KMat K(kv.k_row(h / g, first), static_cast<Eigen::Index>(rows), d, Eigen::OuterStride<>(row_stride));
        x.noalias() = K.template cast<float>() * qv;
      }
      x *= scale;
      if (bias != nullptr)
        x += Eigen::Map<const Eigen::VectorXf>(bias + h * n + first, static_cast<Eigen::Index>(rows));
    }
  }
}

}  // namespace kvevict
