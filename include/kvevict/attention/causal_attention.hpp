// attention/causal_attention.hpp — the prompt's causal attention in one fused pass that also gives H2O's
// prompt score (each key's attention probabilities summed over the queries), so that an engine scores the
// prompt from the attention it computes anyway instead of a second Q Kᵀ; over a causal sequence's last queries
// only (a chunk after a cached prefix), also each key's largest probability (KVzip's reconstruction score).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/core/dispatch.hpp"
#include "kvevict/core/executor.hpp"
#include "kvevict/detail/attention_tiles.hpp"
#include "kvevict/detail/check.hpp"

namespace kvevict {

/// The operands of `causal_attention`, all float32. A head's row `i` of X sits at
/// `X + head · X_head_stride + i · X_row_stride` with its `head_dim` elements contiguous, so the usual
/// layouts are strides: `[head][P][d]` (head stride P·d, row stride d) and `[P][head][d]`
/// (head stride d, row stride n_heads·d), views of larger buffers included.
struct CausalAttentionArgs {
  /// The queries, n_q_heads heads of P − query_offset rows: row i is position query_offset + i.
  const float* q = nullptr;
  std::size_t q_head_stride = 0, q_row_stride = 0;
  const float* k = nullptr;  ///< keys, n_kv_heads heads of P rows
  std::size_t k_head_stride = 0, k_row_stride = 0;
  const float* v = nullptr;  ///< values, n_kv_heads heads of P rows; may be null when `out` is
  std::size_t v_head_stride = 0, v_row_stride = 0;
  /// The attention's output, n_q_heads heads of P − query_offset rows like q (written). May be null when a
  /// score (`sums`, `noisy_sums` or `maxes`) is asked for: then no P V is computed.
  float* out = nullptr;
  std::size_t out_head_stride = 0, out_row_stride = 0;
  /// Optional `[n_q_heads][P]` (row stride P): written with `sums[h][c] = Σ_{i ≥ max(c, query_offset)} p_h(i, c)`,
  /// the probability the query at position i of head h gives key c, summed over the queries — H2O's prompt score
  /// (Zhang et al. 2023, §4; `Cache::prefill_from_attention` takes it). Null: not computed.
  float* sums = nullptr;
  /// Optional `[n_q_heads][P]`: written with Keyformer's prompt score (Adnan et al. 2024, Eq. 7 at the prompt),
  /// `noisy_sums[h][c] = Σ_i softmax((x_h(i) + s·ζ_h(i)) / τ)[c]` over the real queries i ≥ c, ζ_h(i)[c] the
  /// Gumbel noise of query head h, prompt row `i − first`, slot `c − first` drawn as a kvevict cache with seed
  /// `noise_seed` draws it (`gumbel_row_key`, `fill_gumbel_row`), so that `Cache::prefill_from_attention` of a
  /// Keyformer cache with that seed and τ₀ = `tau` cuts as its `prefill` would. Null: not computed.
  float* noisy_sums = nullptr;
  /// Optional `[n_q_heads][P]`: written with `maxes[h][c] = max_{i ≥ max(c, query_offset)} p_h(i, c)`, the largest
  /// probability any
  /// query gives key c (0 for a key no query sees) — KVzip's score (Kim et al. 2025, §3.2: the queries are the
  /// context's repeat, `query_offset` the context's length; the caller takes the max over a KV head's group).
  float* maxes = nullptr;
  std::uint64_t noise_seed = 0;  ///< the noise seed of `noisy_sums`
  float tau = 1.0f;              ///< τ of `noisy_sums`, finite and >= FLT_MIN
  float noise_scale = 1.0f;      ///< s of `noisy_sums`, in (0, 1]
  bool noise = true;             ///< false: ζ = 0 (Keyformer's noise-free ablation)
  std::size_t n_q_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::size_t prompt_len = 0;  ///< P: the keys and values; the queries' positions end at P − 1
  /// The first query's position: q and out hold positions query_offset .. P − 1 (a chunk whose keys follow a
  /// prefix of query_offset keys every query sees); the scores cover all P keys. 0: the whole prompt.
  std::size_t query_offset = 0;
  /// The first real token: tokens before it are left padding, which no query attends; their own output
  /// rows are 0 and their queries add nothing to the scores. 0 for an unpadded prompt.
  std::size_t first = 0;
  float scale = 0.0f;  ///< the logits are scale · q·k (usually 1/√head_dim)
};

/// Queries per block of `causal_attention` (a task's unit of work, with its KV head's group).
inline constexpr std::size_t kCausalQueryBlock = 32;
/// Stripes of query blocks per KV head in `causal_attention` (its tasks: KV head × stripe, stripe s taking every
/// 16th block from the s-th): fixed, so that the result does not depend on the executor's worker count.
inline constexpr std::size_t kCausalStripes = 16;

#if defined(KVEVICT_VEC16)
namespace detail {
inline void causal_block_dispatch(const tiles::BlockArgs& a);
}  // namespace detail

/// `out = softmax(scale · Q Kᵀ + causal mask) V` per query head (GQA: query head h reads KV head
/// h / (n_q_heads / n_kv_heads)) for the queries at positions query_offset .. P − 1 (all of them by default),
/// and optionally the scores `sums`, `noisy_sums`, `maxes` (see `CausalAttentionArgs`; with a score, `out` may
/// be null: no P V), without materialising the P × P logits: a block of 32 queries of a KV head's group at a
/// time, its keys in tiles of 256 with an online softmax (FlashAttention's, Dao et al. 2022, Alg. 1) whose exps
/// stay in a `[g·32][P]` scratch until the block's row sums are known, then the column sums / maxes.
///
/// Work: `n_q_heads · P² · head_dim` multiply-adds (twice half the square: Q Kᵀ and P V over the causal
/// triangle; with `query_offset` o, `(P − o) · (P + o)` instead of `P²`; half without `out`); memory:
/// `n_kv_heads · P · head_dim` floats for K in panels, `16 · n_q_heads · P` floats of partial
/// sums per score asked for, and, per running task, `g · 32 · (P + 3·head_dim)` floats of scratch (twice P with
/// `noisy_sums`), allocated by the task. `noisy_sums` adds a noise draw and an exp per logit (Keyformer's cost).
/// Parallel over `executor`: tasks are KV head × 16 stripes of query blocks (stripe s takes every 16th block
/// from the s-th, so that the causal triangle's cost is shared evenly); the stripes' sums are added afterwards
/// in stripe order (the maxes in any: a max is exact), so the result does not depend on the executor or its
/// worker count. Paths (core/dispatch.hpp) agree to float rounding (FMA on AVX2 / AVX-512), not bit for bit.
/// Keys before `first` are never read from V (a NaN there changes nothing) and get probability 0.
///
/// Throws `std::invalid_argument` naming the argument and its value — a null `q` or `k`, a null `out` with no
/// score asked for, a null `v` with `out`, `n_kv_heads == 0`, `n_q_heads` not a multiple of it, `head_dim` not a
/// positive multiple of 16, `prompt_len == 0`, `first >= prompt_len`, `query_offset >= prompt_len`, a row stride
/// (of an operand given) below `head_dim`, a non-finite or non-positive `scale`, a size whose
/// scratch overflows `std::size_t` — before anything is written; with `noisy_sums`, also a `tau` not finite and
/// >= FLT_MIN or a `noise_scale` outside (0, 1]. `std::bad_alloc` when the scratch cannot be allocated (from a
/// task: `out` and the sums are then partly written).
template <class Executor = SerialExecutor>
void causal_attention(const CausalAttentionArgs& a, Executor&& executor = Executor{}) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("causal_attention: " + what); };
  const bool any_score = a.sums != nullptr || a.noisy_sums != nullptr || a.maxes != nullptr;
  if (a.q == nullptr || a.k == nullptr) bad(std::string(a.q == nullptr ? "q" : "k") + " is null");
  if (a.out == nullptr && !any_score) bad("out is null and no score (sums, noisy_sums, maxes) is asked for");
  if (a.out != nullptr && a.v == nullptr) bad("v is null (out needs it)");
  if (a.n_kv_heads == 0 || a.n_q_heads == 0 || a.n_q_heads % a.n_kv_heads != 0)
    bad("n_q_heads (" + std::to_string(a.n_q_heads) + ") must be a positive multiple of n_kv_heads (" +
        std::to_string(a.n_kv_heads) + ")");
  if (a.head_dim == 0 || a.head_dim % 16 != 0)
    bad("head_dim must be a positive multiple of 16 (got " + std::to_string(a.head_dim) + ")");
  if (a.prompt_len == 0) bad("prompt_len must be at least 1 (got 0)");
  if (a.first >= a.prompt_len)
    bad("first (" + std::to_string(a.first) + ") must be below prompt_len (" + std::to_string(a.prompt_len) +
        "): a prompt needs a real token");
  if (a.query_offset >= a.prompt_len)
    bad("query_offset (" + std::to_string(a.query_offset) + ") must be below prompt_len (" +
        std::to_string(a.prompt_len) + "): the queries' positions end at prompt_len - 1");
  const std::size_t strides[] = {a.q_row_stride, a.k_row_stride, a.v_row_stride, a.out_row_stride};
  const char* names[] = {"q_row_stride", "k_row_stride", "v_row_stride", "out_row_stride"};
  const bool given[] = {true, true, a.out != nullptr, a.out != nullptr};
  for (int i = 0; i < 4; ++i)
    if (given[i] && strides[i] < a.head_dim)
      bad(std::string(names[i]) + " (" + std::to_string(strides[i]) + ") is below head_dim (" +
          std::to_string(a.head_dim) + ")");
  if (!(a.scale > 0.0f) || !std::isfinite(a.scale)) bad("scale must be positive and finite (got " + std::to_string(a.scale) + ")");
  if (a.noisy_sums != nullptr) {
    if (!(a.tau >= std::numeric_limits<float>::min()) || !std::isfinite(a.tau))
      bad("tau must be finite and >= FLT_MIN (got " + std::to_string(a.tau) + ")");
    if (!(a.noise_scale > 0.0f && a.noise_scale <= 1.0f))
      bad("noise_scale must be in (0, 1] (got " + std::to_string(a.noise_scale) + ")");
  }

  using detail::tiles::kPanel;
  const char* who = "causal_attention";
  const std::size_t P = a.prompt_len, d = a.head_dim, h = a.n_kv_heads, g = a.n_q_heads / h;
  const std::size_t C = kCausalQueryBlock, R = g * C;
  const std::size_t P_pad = detail::checked_mul(who, "prompt_len rounded up to 32", (P + kPanel - 1) / kPanel, kPanel);
  const std::size_t s_row = P_pad + kPanel;
  const std::size_t n_tiles = (P_pad + detail::tiles::kKeyTile - 1) / detail::tiles::kKeyTile + 1;
  const std::size_t q0 = a.query_offset, start = std::max(a.first, q0);  // the first real query's position
  const std::size_t n_blocks = (P - start + C - 1) / C;
  // A fixed number of stripes per KV head, whatever the executor: the sums are added in the same order on any
  // number of workers (the same bits), and the scratch is a task's own, allocated while it runs.
  const std::size_t n_stripes = std::min(kCausalStripes, n_blocks), tasks = h * n_stripes;
  const bool noisy = a.noisy_sums != nullptr;
  const std::size_t track = detail::checked_mul(who, "the scratch", R, s_row + 2 + n_tiles);
  const std::size_t per_task = 3 * R * d + track + (noisy ? track : 0);
  std::unique_ptr<float[]> kp(new float[detail::checked_mul(who, "K in panels", h, P_pad, d)]);  // filled below
  std::vector<float> partial(a.sums != nullptr ? detail::checked_mul(who, "the partial sums", tasks, g, P) : 0, 0.0f);
  std::vector<float> partial2(noisy ? detail::checked_mul(who, "the partial sums", tasks, g, P) : 0, 0.0f);
  std::vector<float> partial3(a.maxes != nullptr ? detail::checked_mul(who, "the partial maxes", tasks, g, P) : 0, 0.0f);

  // K in panels, [head][P_pad / kPanel][d][kPanel] (the padding is 0).
  executor.parallel_for(h, [&](std::size_t j) {
    const float* kh = a.k + j * a.k_head_stride;
    float* dst = kp.get() + j * P_pad * d;
    std::memset(dst + P / kPanel * d * kPanel, 0, (P_pad - P / kPanel * kPanel) * d * sizeof(float));
    for (std::size_t c = 0; c < P; ++c) {
      const float* row = kh + c * a.k_row_stride;
      float* panel = dst + (c / kPanel) * d * kPanel + c % kPanel;
      for (std::size_t x = 0; x < d; ++x) panel[x * kPanel] = row[x];
    }
  });
  // Padding rows: zero output.
  if (a.out != nullptr)
    for (std::size_t hq = 0; hq < a.n_q_heads; ++hq)
      for (std::size_t i = q0; i < a.first; ++i)
        std::memset(a.out + hq * a.out_head_stride + (i - q0) * a.out_row_stride, 0, d * sizeof(float));

  std::atomic<bool> out_of_memory{false};
  executor.parallel_for(tasks, [&](std::size_t task) {
    const std::size_t j = task / n_stripes, w = task % n_stripes;
    std::unique_ptr<float[]> scratch(new (std::nothrow) float[per_task]);  // not zeroed: written before read
    if (!scratch) {
      out_of_memory = true;
      return;
    }
    float* base = scratch.get();
    detail::tiles::BlockArgs b{};
    float* qs = base;
    b.qs = qs;
    b.kp = kp.get() + j * P_pad * d;
    b.v = a.v != nullptr ? a.v + j * a.v_head_stride : nullptr;
    b.v_row = a.v_row_stride;
    b.d = d;
    b.g = g;
    b.first = a.first;
    b.s = base + R * d;
    b.s_row = s_row;
    b.o = b.s + R * s_row;
    b.with_out = a.out != nullptr;
    b.m = b.o + R * d;
    b.l = b.m + R;
    b.mt = b.l + R;
    b.sums = a.sums != nullptr ? partial.data() + task * g * P : nullptr;
    b.sums_row = P;
    b.noisy = noisy ? partial2.data() + task * g * P : nullptr;
    b.maxes = a.maxes != nullptr ? partial3.data() + task * g * P : nullptr;
    b.s2 = noisy ? b.mt + R * n_tiles : nullptr;  // Keyformer's track after the plain one's, when asked for
    b.m2 = noisy ? b.s2 + R * s_row : nullptr;
    b.l2 = noisy ? b.m2 + R : nullptr;
    b.mt2 = noisy ? b.l2 + R : nullptr;
    b.seed = a.noise_seed;
    b.head0 = j * g;
    b.inv_tau = 1.0f / a.tau;
    b.noise_scale = a.noise_scale;
    b.noise = a.noise;
    for (std::size_t blk = w; blk < n_blocks; blk += n_stripes) {
      b.c0 = start + blk * C;
      b.C = std::min(C, P - b.c0);
      for (std::size_t t = 0; t < g; ++t) {
        const float* qh = a.q + (j * g + t) * a.q_head_stride;
        for (std::size_t q = 0; q < b.C; ++q) {
          const float* src = qh + (b.c0 + q - q0) * a.q_row_stride;
          float* dst = qs + (t * b.C + q) * d;
          for (std::size_t x = 0; x < d; ++x) dst[x] = src[x] * a.scale;
        }
      }
      detail::causal_block_dispatch(b);
      if (a.out == nullptr) continue;
      for (std::size_t t = 0; t < g; ++t) {
        float* oh = a.out + (j * g + t) * a.out_head_stride;
        for (std::size_t q = 0; q < b.C; ++q) {
          const std::size_t r = t * b.C + q;
          const float inv = b.l[r] > 0.0f ? 1.0f / b.l[r] : 0.0f;
          float* dst = oh + (b.c0 + q - q0) * a.out_row_stride;
          for (std::size_t x = 0; x < d; ++x) dst[x] = b.o[r * d + x] * inv;
        }
      }
    }
  });
  if (out_of_memory) throw std::bad_alloc();
  // The stripes' partial sums, added in stripe order.
  auto reduce = [&](const std::vector<float>& parts, float* out) {
    for (std::size_t j = 0; j < h; ++j)
      for (std::size_t t = 0; t < g; ++t) {
        float* dst = out + (j * g + t) * P;
        std::memcpy(dst, parts.data() + (j * n_stripes) * g * P + t * P, P * sizeof(float));
        for (std::size_t w = 1; w < n_stripes; ++w) {
          const float* src = parts.data() + (j * n_stripes + w) * g * P + t * P;
          for (std::size_t c = 0; c < P; ++c) dst[c] += src[c];
        }
      }
  };
  if (a.sums != nullptr) reduce(partial, a.sums);
  if (noisy) reduce(partial2, a.noisy_sums);
  if (a.maxes != nullptr)  // the stripes' maxes: exact in any order
    for (std::size_t j = 0; j < h; ++j)
      for (std::size_t t = 0; t < g; ++t) {
        float* dst = a.maxes + (j * g + t) * P;
        std::memcpy(dst, partial3.data() + (j * n_stripes) * g * P + t * P, P * sizeof(float));
        for (std::size_t w = 1; w < n_stripes; ++w) {
          const float* src = partial3.data() + (j * n_stripes + w) * g * P + t * P;
          for (std::size_t c = 0; c < P; ++c) dst[c] = std::max(dst[c], src[c]);
        }
      }
}

namespace detail {
#if defined(KVEVICT_X86_DISPATCH)
inline void causal_block_baseline(const tiles::BlockArgs& a) { tiles::attention_block_body<4>(a); }
KVEVICT_TARGET_AVX2 KVEVICT_CONTRACT_FN inline void causal_block_avx2(const tiles::BlockArgs& a) { tiles::attention_block_body<8>(a); }
KVEVICT_TARGET_AVX512 KVEVICT_CONTRACT_FN inline void causal_block_avx512(const tiles::BlockArgs& a) {
  tiles::attention_block_body<16>(a);
}
/// One query block on the path `active_isa()` chose.
inline void causal_block_dispatch(const tiles::BlockArgs& a) {
  switch (active_isa()) {
    case Isa::kAvx512: return causal_block_avx512(a);
    case Isa::kAvx2: return causal_block_avx2(a);
    default: return causal_block_baseline(a);
  }
}
#else
inline void causal_block_dispatch(const tiles::BlockArgs& a) { tiles::attention_block_body<4>(a); }
#endif
}  // namespace detail

#else  // no vector extensions (nvcc, MSVC): the kernel's tiles are written on them

namespace detail {
template <class>
inline constexpr bool kNoVectorExtensions = false;
}  // namespace detail
/// Not available in this translation unit: a call fails to compile, naming why.
template <class Executor = SerialExecutor>
void causal_attention(const CausalAttentionArgs&, Executor&& = Executor{}) {
  static_assert(detail::kNoVectorExtensions<Executor>,
                "kvevict::causal_attention needs g++ or clang++ host code (GCC vector extensions): call it from a "
                "C++ translation unit, not one compiled by nvcc or MSVC");
}
#endif  // KVEVICT_VEC16

}  // namespace kvevict
