// attention/rope.hpp — re-rotating cached keys by a position delta (standard RoPE).
// SPDX-License-Identifier: Apache-2.0
//
// Rotary position embeddings (Su et al., RoFormer, 2021, Eq. 34) rotate each pair
// (a, b) of a head's query or key by the angle `pos · θ^(−2i/d)` (pair i of
// d/2). A key cached at position p therefore becomes the key at position p + Δ
// when rotated once more by `Δ · θ^(−2i/d)`: rotations of one plane add. That is
// how an engine renumbers the positions of retained keys after an eviction
// (StreamingLLM §3.2's "positions within the cache"; OpenVINO GenAI's cache
// rotation; Keyformer §4.4.1 / Table 3's "positions re-indexed" ablation).
// kvevict never does this by default: a `Cache` keeps each token's original
// position ID (kv/kv_view.hpp); these helpers are for an engine that wants to.
//
// Two pairings are in use:
//  - `RopeStyle::interleaved`: pairs (2i, 2i+1) — Meta's reference Llama code,
//    llama2.c, llama.cpp's default;
//  - `RopeStyle::half_split`:  pairs (i, i + d/2) — Hugging Face transformers'
//    `rotate_half` (GPT-NeoX style).
// The angle is computed in double (Δ · θ^(−2i/d), cos and sin in double) and the
// result rounded once to the element type, so rotating by Δ and then by −Δ
// returns a float key within ~1e-6 of itself (float rounding only).
#pragma once

#include <cmath>
#include <cstddef>
#include <type_traits>

#include "kvevict/detail/check.hpp"
#include "kvevict/kv/kv_view.hpp"

namespace kvevict {

/// Which elements of a head form RoPE's rotation pairs (see the top of this header).
enum class RopeStyle {
  interleaved,  ///< pairs (2i, 2i+1), i < d/2: Meta / llama2.c
  half_split    ///< pairs (i, i + d/2), i < d/2: Hugging Face `rotate_half`
};

/// RoPE parameters of a model: the pairing and the base θ (10000 for Llama 2;
/// 500000 for Llama 3, 1e6 for some long-context models).
struct RopeSpec {
  RopeStyle style = RopeStyle::interleaved;  ///< pairing of a head's elements
  double theta = 10000.0;                    ///< base θ, finite and > 0
};

namespace detail {
/// Checks the arguments shared by the rotation helpers — even `head_dim >= 2`, finite `theta > 0`,
/// finite `delta`, a known style, and every pair's angle `delta · θ^(−2i/d)` finite — and throws
/// `std::invalid_argument` naming `who`, the argument and the value.
inline void check_rope(std::size_t head_dim, double delta, const RopeSpec& spec, const char* who) {
  require(head_dim >= 2 && head_dim % 2 == 0, who, ": head_dim must be even and >= 2 (got ", head_dim, ")");
  require(std::isfinite(spec.theta) && spec.theta > 0.0, who, ": theta must be finite and > 0 (got ", spec.theta,
          ")");
  require(std::isfinite(delta), who, ": delta must be finite (got ", delta, ")");
  // The largest angle, delta · θ^(−2i/d) over the pairs (i = 0 or i = d/2 − 1), must be finite: an
  // infinite angle (θ = 1e-300, delta = 1e300) has cos and sin NaN, which would be written into K.
  const double exponent = -static_cast<double>(head_dim - 2) / static_cast<double>(head_dim);
  const double max_freq = spec.theta >= 1.0 ? 1.0 : std::pow(spec.theta, exponent);
  require(std::isfinite(max_freq) && std::isfinite(std::fabs(delta) * max_freq), who, ": the angle delta * theta^(-",
          head_dim - 2, "/", head_dim, ") = ", std::fabs(delta) * max_freq, " is not finite (delta = ", delta,
          ", theta = ", spec.theta, ")");
  require(spec.style == RopeStyle::interleaved || spec.style == RopeStyle::half_split, who, ": unknown RopeStyle ",
          static_cast<int>(spec.style));
}
/// Rotates the pairs of one row; arguments already checked. O(head_dim).
template <class T>
void rotate_row_unchecked(T* row, std::size_t head_dim, double delta, const RopeSpec& spec) {
  const std::size_t half = head_dim / 2;
  for (std::size_t i = 0; i < half; ++i) {
    const double freq = std::pow(spec.theta, -static_cast<double>(2 * i) / static_cast<double>(head_dim));
    const double angle = delta * freq, c = std::cos(angle), s = std::sin(angle);
    T& x = spec.style == RopeStyle::interleaved ? row[2 * i] : row[i];
    T& y = spec.style == RopeStyle::interleaved ? row[2 * i + 1] : row[i + half];
    if constexpr (std::is_same<T, double>::value) {  // double rows keep double precision
      const double a = x, b = y;
      x = a * c - b * s;
      y = a * s + b * c;
    } else {  // float, or a type convertible through float (Eigen::half, Eigen::bfloat16)
      const double a = static_cast<double>(static_cast<float>(x)), b = static_cast<double>(static_cast<float>(y));
      x = static_cast<T>(static_cast<float>(a * c - b * s));
      y = static_cast<T>(static_cast<float>(a * s + b * c));
    }
  }
}
}  // namespace detail

/// Rotates one head's row `row[0, head_dim)` (a query or key, in place) by the
/// position delta `delta` with RoPE `spec`: pair i, `(x, y)` per `spec.style`,
/// becomes `(x cos φ − y sin φ, x sin φ + y cos φ)` with
/// `φ = delta · θ^(−2i/head_dim)` computed in double. Rotating an unrotated row
/// by `delta = p` applies RoPE at position p; rotating a key cached at position
/// p by `delta = q − p` moves it to position q. `T`: float, double, or a type
/// convertible to and from float (`Eigen::half`, `Eigen::bfloat16`).
/// Throws `std::invalid_argument` (row unchanged) if `row` is null, `head_dim`
/// is odd or 0, `spec.theta` is not finite and > 0, `delta` is not finite, or an
/// angle overflows (`|delta| · θ^(−(d−2)/d)` not finite, for θ < 1).
/// O(head_dim) (one `pow`, `cos` and `sin` per pair); no allocation.
template <class T>
void rope_rotate(T* row, std::size_t head_dim, double delta, const RopeSpec& spec = RopeSpec()) {
  static_assert(!std::is_const<T>::value, "kvevict::rope_rotate: the row is rotated in place");
  detail::require(row != nullptr, "kvevict::rope_rotate: row must be non-null");
  detail::check_rope(head_dim, delta, spec, "kvevict::rope_rotate");
  detail::rotate_row_unchecked(row, head_dim, delta, spec);
}

/// Rotates the key of (KV head `h`, slot `s`) of `view` — layout
/// `[kv_head][slot][head_dim]` or any strides of `KVView` — by `delta`, as
/// `rope_rotate` does. Throws `std::invalid_argument` (view unchanged) for a view
/// that fails `KVView::validate` (e.g. a length above its capacity),
/// `h >= view.n_kv_heads`, `s >= view.length(h)`, and what `rope_rotate` rejects.
/// The view's position IDs are not touched (they stay the tokens' original
/// positions; the engine tracks where it rotated each key). O(head_dim).
template <class T>
void rope_rotate_key(const KVView<T>& view, std::size_t h, std::size_t s, double delta,
                     const RopeSpec& spec = RopeSpec()) {
  static_assert(!KVView<T>::is_read_only, "kvevict::rope_rotate_key: needs a writable KVView");
  view.validate();
  detail::require(h < view.n_kv_heads, "kvevict::rope_rotate_key: KV head ", h, " out of range (n_kv_heads = ",
                  view.n_kv_heads, ")");
  detail::require(s < view.length(h), "kvevict::rope_rotate_key: slot ", s, " is not live (length ", view.length(h),
                  ")");
  detail::check_rope(view.head_dim, delta, spec, "kvevict::rope_rotate_key");
  detail::rotate_row_unchecked(view.k_row(h, s), view.head_dim, delta, spec);
}

/// Rotates every live key of `view` (every KV head `h`, slots `[0, length(h))`)
/// by the same `delta` — e.g. shifting a whole cache left by the number of
/// evicted leading tokens. Throws as `rope_rotate`, and for a view that fails
/// `KVView::validate` (view unchanged).
/// O(n_kv_heads · length · head_dim).
template <class T>
void rope_rotate_keys(const KVView<T>& view, double delta, const RopeSpec& spec = RopeSpec()) {
  static_assert(!KVView<T>::is_read_only, "kvevict::rope_rotate_keys: needs a writable KVView");
  view.validate();
  detail::check_rope(view.head_dim, delta, spec, "kvevict::rope_rotate_keys");
  for (std::size_t h = 0; h < view.n_kv_heads; ++h)
    for (std::size_t s = 0; s < view.length(h); ++s)
      detail::rotate_row_unchecked(view.k_row(h, s), view.head_dim, delta, spec);
}

}  // namespace kvevict
