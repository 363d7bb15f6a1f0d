// attention/attention_logits.hpp — logits for engines whose fused attention never
// materialises them.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"

namespace kvevict {

namespace detail {
/// One query head's row of `attention_logits`: `out[s] = scale · (q · K[kv_head][s]) (+ bias[s])` over
/// the `kv.length(kv_head)` live slots. No checks. O(n · head_dim).
template <class T>
void head_logits(const KVView<const T>& kv, std::size_t kv_head, const float* q, float* out, float scale,
                 const float* bias) {
  const auto rows = static_cast<Eigen::Index>(kv.length(kv_head)), d = static_cast<Eigen::Index>(kv.head_dim);
  using KMat = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                          Eigen::OuterStride<>>;
  KMat K(kv.k_row(kv_head, 0), rows, d, Eigen::OuterStride<>(static_cast<Eigen::Index>(kv.slot_stride)));
  Eigen::Map<const Eigen::VectorXf> qv(q, d);
  Eigen::Map<Eigen::VectorXf> x(out, rows);
  x.noalias() = K.template cast<float>() * qv;
  x *= scale;
  if (bias != nullptr) x += Eigen::Map<const Eigen::VectorXf>(bias, rows);
}
}  // namespace detail

/// Computes the decode-step logits `x[h][s] = scale · (q[h] · K[h / g][s]) (+ bias[h][s])`
/// for one query per query head against every live slot of the view.
///
///  - `q`: `[n_q_heads][head_dim]` row-major, float (RoPE already applied);
///  - `out`: `[n_q_heads][n]` row-major, `n = kv.length(0)` (every KV head
///    must hold `n` slots), indexed by slot as `Cache::decode_step` expects;
///  - `scale`: usually `1 / sqrt(head_dim)`;
///  - `bias`: optional additive bias `[n_q_heads][n]` (ALiBi, masks with `-inf`), or `nullptr`.
/// `g = n_q_heads / kv.n_kv_heads`. K rows of type `T` are converted to float
/// on the fly (`Eigen::half`, `Eigen::bfloat16`). O(n_q_heads · n · head_dim),
/// Eigen matrix–vector products, no allocation.
/// Reads the view only (`KVView<const T>`; a writable `KVView<T>` converts).
/// `out` must not overlap `q` or `bias` (an in-place bias would be overwritten
/// by the product before it is added): add a bias in place after the call instead.
/// Throws `std::invalid_argument` (nothing written) if the view fails
/// `KVView::validate` (e.g. `n_kv_heads == 0`, a length above its capacity),
/// `n_q_heads` is not a positive multiple of `kv.n_kv_heads`, a pointer is
/// null, heads hold different lengths, or `out` overlaps `q` or `bias`.
template <class T>
void attention_logits(const KVView<const T>& kv, const float* q, std::size_t n_q_heads, float* out, float scale,
                      const float* bias = nullptr) {
  kv.validate();
  detail::require(n_q_heads >= 1 && n_q_heads % kv.n_kv_heads == 0, "kvevict::attention_logits: n_q_heads (",
                  n_q_heads, ") must be a positive multiple of n_kv_heads (", kv.n_kv_heads, ")");
  detail::require(q != nullptr && out != nullptr, "kvevict::attention_logits: q and out must be non-null");
  const std::size_t n = kv.length(0);
  for (std::size_t j = 1; j < kv.n_kv_heads; ++j)
    detail::require(kv.length(j) == n, "kvevict::attention_logits: KV head ", j, " holds ", kv.length(j),
                    " slots, KV head 0 holds ", n);
  detail::require_separate_logits("kvevict::attention_logits", q, n_q_heads, kv.head_dim, bias, out, n);
  const std::size_t g = n_q_heads / kv.n_kv_heads;
  for (std::size_t h = 0; h < n_q_heads; ++h)
    detail::head_logits(kv, h / g, q + h * kv.head_dim, out + h * n, scale, bias != nullptr ? bias + h * n : nullptr);
}

/// One query head's decode-step logits, for an engine that scores each KV head while its logits are
/// hot (`Cache::score_decode_head`): `out[s] = scale · (q · K[kv_head][s])` over the `n =
/// kv.length(kv_head)` live slots of KV head `kv_head`; `q`: `[head_dim]` float (RoPE applied), `out`:
/// `[n]`. The same product as `attention_logits`'s row of a query head of that KV head: the same
/// floats, bit for bit. O(n · head_dim), no allocation. Throws `std::invalid_argument` (nothing written)
/// if the view fails `KVView::validate`, `kv_head >= kv.n_kv_heads`, or a pointer is null.
template <class T>
void attention_logits_row(const KVView<const T>& kv, std::size_t kv_head, const float* q, float* out, float scale) {
  kv.validate();
  detail::require(kv_head < kv.n_kv_heads, "kvevict::attention_logits_row: kv_head ", kv_head,
                  " out of range (n_kv_heads = ", kv.n_kv_heads, ")");
  detail::require(q != nullptr && out != nullptr, "kvevict::attention_logits_row: q and out must be non-null");
  detail::head_logits(kv, kv_head, q, out, scale, nullptr);
}

/// `attention_logits` on a writable view: reads it through `kv.read_only()`.
template <class T, std::enable_if_t<!std::is_const<T>::value, int> = 0>
void attention_logits(const KVView<T>& kv, const float* q, std::size_t n_q_heads, float* out, float scale,
                      const float* bias = nullptr) {
  attention_logits<T>(kv.read_only(), q, n_q_heads, out, scale, bias);
}

}  // namespace kvevict
