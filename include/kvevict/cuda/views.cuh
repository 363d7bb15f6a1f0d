// cuda/views.cuh — plain-data views of the engine's device memory (contiguous and paged
// KV, FlashInfer-style page tables), the device eviction state of one layer for a
// batch of sequences, the policy parameters of a launch, and the host-side checks and
// workspace sizes. Plain C++17 (`KVEVICT_HD` is empty without nvcc), so the CPU tests
// include it with g++.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kvevict/detail/check.hpp"
#include "kvevict/detail/hd.hpp"
#include "kvevict/paged/paged_kv_view.hpp"  // PageLayout, paged_row_offset, kNoPage

namespace kvevict {
namespace cuda {

/// Elements of a row chunk of the online softmax, and lanes of its fixed-order sums:
/// the CPU kernel's `detail::kChunk` and `detail::kLanes` (softmax_accumulate.hpp; the
/// CPU tests check that they agree). The device reproduces the CPU's order of every
/// floating-point sum, so scores match the CPU caches bit for bit.
constexpr std::uint32_t kChunk = 512;
constexpr std::uint32_t kLanes = 16;
/// Slots a block moves per tile when it compacts in place (the prefill cut).
constexpr std::uint32_t kStageSlots = 256;

/// Chunks of `kChunk` slots in a row of `n` slots: `ceil(n / kChunk)`, also for `n` within `kChunk` of 2^32
/// (where `n + kChunk − 1` would wrap). O(1).
KVEVICT_HD constexpr std::uint32_t chunk_count(std::uint32_t n) { return n / kChunk + (n % kChunk != 0 ? 1u : 0u); }

/// What a token's score is (the CPU score policies, score/score_policies.hpp).
enum class ScoreKind : std::int32_t {
  keyformer = 0,  ///< `GumbelLogitScore`: accumulated `softmax((x + ζ) / τ_t)`
  h2o = 1,        ///< `AccumulatedAttentionScore`: accumulated `softmax(x)`
  tova = 2,       ///< `CurrentAttentionScore`: the step's `softmax(x)` replaces the score
  none = 3        ///< `NoScore` (window, StreamingLLM): scores stay 0, the selection is by position
};

/// The temperature schedules (temperature/temperature_schedules.hpp); τ only matters for Keyformer.
enum class TemperatureKind : std::int32_t {
  constant = 0,  ///< `ConstantTemperature(tau_init)`
  linear = 1,    ///< `LinearTemperature(tau_init, tau_end, horizon)`
  increment = 2  ///< `IncrementTemperature(tau_init, delta)`
};

/// A temperature schedule as plain data. `tau_at(t)` is τ at step `t` (0 = prefill), with
/// the CPU schedules' double-precision arithmetic, so the same float.
struct TemperatureParams {
  TemperatureKind kind = TemperatureKind::constant;
  float tau_init = 1.0f;
  float tau_end = 1.0f;       ///< linear only
  std::uint64_t horizon = 1;  ///< linear only, >= 1
  float delta = 0.0f;         ///< increment only
  /// τ at step `t`, computed exactly as the CPU schedule computes it. O(1).
  KVEVICT_HD float tau_at(std::uint64_t t) const {
    if (kind == TemperatureKind::linear) {
      const double s = static_cast<double>(t < horizon ? t : horizon);
      return static_cast<float>(tau_init +
                                s * (static_cast<double>(tau_end) - tau_init) / static_cast<double>(horizon));
    }
    if (kind == TemperatureKind::increment)
      return static_cast<float>(tau_init + static_cast<double>(t) * static_cast<double>(delta));
    return tau_init;
  }
};

/// Whether τ is in the CPU caches' valid range: finite and >= FLT_MIN. O(1).
KVEVICT_HD inline bool tau_valid(float tau) {
  return tau == tau && tau <= 3.40282347e+38f && tau >= 1.17549435e-38f;  // FLT_MAX, FLT_MIN
}

/// Contiguous KV of a batch, one layer: sequence `b`, KV head `h`, slot `s` (elements of `T`):
///
///     K row (b, h, s)   = k + ((b * n_kv_heads + h) * capacity + s) * head_dim   (head_dim elements)
///     V row (b, h, s)   = v + (same offset)
///     position (b, h, s) = positions[(b * n_kv_heads + h) * capacity + s]        (int64)
///     live slots of (b, h) = lengths[b * n_kv_heads + h]                           (int32)
///
/// i.e. each sequence is the CPU `KVView::contiguous` layout `[kv_head][slot][head_dim]`,
/// sequences back to back. Every pointer is device memory. Plain data; copying aliases.
template <class T>
struct ContiguousKV {
  T* k = nullptr;
  T* v = nullptr;
  std::int64_t* positions = nullptr;
  std::int32_t* lengths = nullptr;
  std::uint32_t batch = 0, n_kv_heads = 0, capacity = 0, head_dim = 0;

  /// Element offset of the row of (b, h, s). O(1), no bounds check.
  KVEVICT_HD std::size_t row(std::uint32_t b, std::uint32_t h, std::uint32_t s) const {
    return ((static_cast<std::size_t>(b) * n_kv_heads + h) * capacity + s) * head_dim;
  }
  /// Index of (b, h, s) in `positions` (and in the state's scores and flags). O(1).
  KVEVICT_HD std::size_t slot(std::uint32_t b, std::uint32_t h, std::uint32_t s) const {
    return (static_cast<std::size_t>(b) * n_kv_heads + h) * capacity + s;
  }
};

/// Paged KV of a batch, one layer, FlashInfer style (`include/flashinfer/page.cuh`): the
/// page pools `k`, `v` of `num_pages` pages, each page NHD `[page_size][n_kv_heads][head_dim]`
/// or HND `[n_kv_heads][page_size][head_dim]`; the row of KV head `h`, slot `o` of page `p`
/// starts at element `paged_row_offset(layout, page_size, n_kv_heads, head_dim, p, h, o)`:
///
///     NHD: ((p * page_size + o) * n_kv_heads + h) * head_dim
///     HND: ((p * n_kv_heads + h) * page_size + o) * head_dim
///
/// Sequence `b` owns the page-table entries `indices[table_indptr[b], table_indptr[b + 1])`
/// (its capacity in pages: eviction changes how many are used, so each sequence keeps a
/// fixed region; `export_flashinfer_table` writes the compact `indptr` / `indices` /
/// `last_page_len` that FlashInfer's attention reads). Logical slot `s` of sequence `b`
/// (0 = oldest retained token) is slot `s % page_size` of page `indices[table_indptr[b] +
/// s / page_size]`; its position ID is `positions[table_indptr[b] * page_size + s]`. Live
/// slots are `[0, lengths[b])`; used entries hold page ids in `[0, num_pages)`, entries
/// past them `kNoPage`. All KV heads of a sequence share one selection (a page slot holds
/// the token of every head), as the CPU `PagedCache`.
template <class T>
struct PagedKV {
  T* k = nullptr;
  T* v = nullptr;
  PageLayout layout = PageLayout::NHD;
  std::uint32_t num_pages = 0, page_size = 0, n_kv_heads = 0, head_dim = 0, batch = 0;
  const std::int32_t* table_indptr = nullptr;  ///< `[batch + 1]`, ascending, table_indptr[0] = 0
  std::int32_t* indices = nullptr;             ///< `[table_indptr[batch]]` page ids
  std::int32_t* lengths = nullptr;             ///< `[batch]` live tokens
  std::int64_t* positions = nullptr;           ///< `[table_indptr[batch] * page_size]`

  /// Element offset of the row of KV head `h` at logical slot `s` of sequence `b`. O(1), no bounds check.
  KVEVICT_HD std::size_t row(std::uint32_t b, std::uint32_t h, std::uint32_t s) const {
    const std::int32_t page = indices[table_indptr[b] + s / page_size];
    return paged_row_offset(layout, page_size, n_kv_heads, head_dim, static_cast<std::size_t>(page), h, s % page_size);
  }
  /// Index of sequence `b`'s logical slot `s` in `positions` (and in per-slot state). O(1).
  KVEVICT_HD std::size_t slot(std::uint32_t b, std::uint32_t s) const {
    return static_cast<std::size_t>(table_indptr[b]) * page_size + s;
  }
  /// Slots sequence `b` can hold. O(1).
  KVEVICT_HD std::uint32_t capacity(std::uint32_t b) const {
    return static_cast<std::uint32_t>(table_indptr[b + 1] - table_indptr[b]) * page_size;
  }
};

/// A device free list of page ids (a stack): `release` pushes with one `atomicAdd` on
/// `*count`. The engine pops pages for new tokens (on the host or in its own kernels)
/// and sizes `pages` to `capacity >= num_pages`. Pages released in one launch are pushed
/// in no fixed order; the set is fixed.
struct PageFreeList {
  std::int32_t* pages = nullptr;   ///< `[capacity]`
  std::uint32_t* count = nullptr;  ///< entries in use
  std::uint32_t capacity = 0;
};

/// Per (sequence, selection row) counters of the eviction state; rows are the KV heads
/// (contiguous: each head selects alone, as `Cache` without `shared_heads`) or one row
/// (paged: one selection for all heads, as `PagedCache`).
struct RowCounters {
  std::int64_t entered = 0;        ///< tokens entered into the recent window since the prefill cut
  std::int64_t step = 0;           ///< decode steps done (the step's τ is `tau_at(step + 1)`)
  std::int64_t last_position = 0;  ///< newest position seen (a new token's must be larger)
  std::int32_t tracked = 0;        ///< live slots after the last call (a step expects tracked + 1)
  std::int32_t prefilled = 0;      ///< 1 after the prefill cut
};

/// Error codes in `EvictionState::status[b]` (0 = fine). A failing call leaves the failing
/// row's state unchanged (paged: the whole sequence; contiguous: that KV head — the other
/// heads' blocks run independently, so the engine must treat the sequence as failed).
enum StatusCode : std::int32_t {
  kStatusOk = 0,
  kStatusNotPrefilled = 1,    ///< decode step before the prefill cut
  kStatusBadLength = 2,       ///< length != tracked + 1 (step), or out of [1, capacity]
  kStatusBadPosition = 3,     ///< the new token's position is not larger than the last one
  kStatusBadTemperature = 4,  ///< τ_t not finite or below FLT_MIN
  kStatusBadLogits = 5,       ///< a row of x + ζ holds NaN or +inf
  kStatusBadPage = 6          ///< a used page-table entry outside [0, num_pages)
};

/// The device eviction state of one layer for a batch (device memory, allocated by the
/// caller once, zeroed; `contiguous_state_sizes` / `paged_state_sizes` give the element
/// counts). Selection rows per sequence: `rows` = n_kv_heads (contiguous) or 1 (paged).
///
///     score of (b, head h, slot s):  contiguous scores[(b * n_kv_heads + h) * capacity + s]
///                                    paged      scores[h * total_slots + table_indptr[b] * page_size + s]
///     recent flag of (b, row r, s):  recent[<same index as the positions of (b, r, s)>]
///     window ring of (b, row r):     ring[(b * rows + r) * ring_stride + i], i < w
///     counters of (b, row r):        rows_state[b * rows + r]
struct EvictionState {
  float* scores = nullptr;
  std::uint8_t* recent = nullptr;
  std::int32_t* ring = nullptr;
  RowCounters* rows_state = nullptr;
  const std::uint64_t* seeds = nullptr;  ///< `[batch]` noise seed per sequence (Keyformer, drawn ζ)
  std::int32_t* status = nullptr;        ///< `[batch]` StatusCode of the last call
  std::int32_t* pages_freed = nullptr;   ///< `[batch]` paged only: pages released so far
  std::uint32_t ring_stride = 0;         ///< >= w (and >= 1)
  std::uint32_t total_slots = 0;         ///< paged only: table_indptr[batch] * page_size
};

/// Element counts of the `EvictionState` arrays of a batch: `scores`, `recent`, `ring` (with
/// `ring_stride = max(w, 1)`) and `rows_state`; `status`, `seeds` and `pages_freed` have `batch`.
/// The sizing functions below throw `std::invalid_argument` naming the product (`detail::checked_mul`,
/// "… overflows std::size_t") when a count does not fit `std::size_t`, instead of returning a wrapped one.
struct StateSizes {
  std::size_t scores = 0, recent = 0, ring = 0, rows = 0;
  std::uint32_t ring_stride = 1;
};
/// Contiguous KV: every (b, head) of `capacity` slots selects alone. O(1).
inline StateSizes contiguous_state_sizes(std::uint32_t batch, std::uint32_t n_kv_heads, std::uint32_t capacity,
                                         std::uint32_t w) {
  const char* who = "kvevict::cuda::contiguous_state_sizes";
  StateSizes z;
  z.ring_stride = w > 0 ? w : 1;
  z.rows = static_cast<std::size_t>(batch) * n_kv_heads;  // < 2^64
  z.scores = z.recent = detail::checked_mul(who, "batch * n_kv_heads * capacity", batch, n_kv_heads, capacity);
  z.ring = detail::checked_mul(who, "batch * n_kv_heads * max(w, 1)", batch, n_kv_heads, z.ring_stride);
  return z;
}
/// Paged KV with `total_slots = table_indptr[batch] · page_size`: one row per sequence, a score per
/// (head, slot). O(1).
inline StateSizes paged_state_sizes(std::uint32_t batch, std::uint32_t n_kv_heads, std::size_t total_slots,
                                    std::uint32_t w) {
  StateSizes z;
  z.ring_stride = w > 0 ? w : 1;
  z.rows = batch;
  z.scores = detail::checked_mul("kvevict::cuda::paged_state_sizes", "total_slots * n_kv_heads", total_slots,
                                 n_kv_heads);
  z.recent = total_slots;
  z.ring = z.rows * z.ring_stride;  // < 2^64
  return z;
}

/// The policy of one launch (the same for every sequence of the batch).
struct PolicyParams {
  ScoreKind score = ScoreKind::h2o;
  bool gumbel_noise = true;       ///< Keyformer: add ζ (injected when `gumbel` is given, else drawn)
  TemperatureParams temperature;  ///< used by Keyformer only (τ = 1 for the others, as on the CPU)
  std::uint32_t k = 0;            ///< budget (tokens per KV head, or per sequence when paged)
  std::uint32_t w = 0;            ///< recent window (RecentTopK); 0 for TOVA, window and StreamingLLM
  std::uint32_t sinks = 0;        ///< StreamingLLM sinks (ScoreKind::none); 0 = window
  std::uint32_t n_q_heads = 0;    ///< query heads, a multiple of n_kv_heads (group g = n_q_heads / n_kv_heads)
  bool page_unit = false;         ///< paged: evict whole pages (`EvictUnit::page`)
  std::uint32_t start_pages = 0;  ///< paged page unit: leading pages never evicted
  bool page_mean = false;         ///< paged page unit: `PageScore::mean` instead of sum
  /// Whether the score adds noise: Keyformer with `gumbel_noise`.
  KVEVICT_HD bool noisy() const { return score == ScoreKind::keyformer && gumbel_noise; }
  /// Whether scores come from logits.
  KVEVICT_HD bool uses_logits() const { return score != ScoreKind::none; }
  /// Whether the step's softmax adds to (true) or replaces (TOVA) the score.
  KVEVICT_HD bool accumulates() const { return score == ScoreKind::keyformer || score == ScoreKind::h2o; }
};

/// Where a sequence's logits (and injected noise) are: `[B][q_head][stride]` dense
/// (`indptr == nullptr`: row (b, h) at `(b * n_q_heads + h) * stride`, slot `s` at `+ s`),
/// or ragged (`indptr[b]` = the offset of sequence b's `[q_head][n_b]` block, rows of
/// length `n_b`, the live slots of the step). Prefill: `[B][q_head][P_max][P_max]` with
/// `stride = P_max` (row r of (b, h) at `((b * n_q_heads + h) * P_max + r) * P_max`).
struct LogitsView {
  const float* x = nullptr;       ///< logits by slot, as the engine's attention reads the KV
  const float* gumbel = nullptr;  ///< optional injected ζ, same layout (Keyformer with noise)
  const std::int64_t* indptr = nullptr;
  std::uint32_t stride = 0;
  /// Offset of the row of (b, q_head h) for a step over `n` slots. O(1).
  KVEVICT_HD std::size_t row(std::uint32_t b, std::uint32_t h, std::uint32_t n_q_heads, std::uint32_t n) const {
    if (indptr != nullptr) return static_cast<std::size_t>(indptr[b]) + static_cast<std::size_t>(h) * n;
    return (static_cast<std::size_t>(b) * n_q_heads + h) * stride;
  }
};

/// Host check of dense logits' extent (`lg.indptr == nullptr`; ragged offsets are the engine's):
/// `batch · n_q_heads · stride` floats for a step's `[B][q_head][stride]`, `batch · n_q_heads · stride · stride`
/// for a prefill's `[B][q_head][P_max][P_max]`. Throws `std::invalid_argument` "<who>: … overflows
/// std::size_t" (`detail::checked_mul`). O(1).
inline void check_logits_extent(const LogitsView& lg, std::uint32_t batch, std::uint32_t n_q_heads, bool prefill,
                                const char* who) {
  if (lg.indptr != nullptr) return;
  if (prefill)
    (void)detail::checked_mul(who, "batch * n_q_heads * stride * stride (the prefill logits)", batch, n_q_heads,
                              lg.stride, lg.stride);
  else
    (void)detail::checked_mul(who, "batch * n_q_heads * stride (the step's logits)", batch, n_q_heads, lg.stride);
}

/// Host-side check of a launch's parameters against a store of `capacity` slots per
/// selection row and `n_kv_heads` heads (the CPU budget rule, detail/budget_rule.hpp, on resolved
/// `k`, `w`): `n_q_heads` a positive multiple of `n_kv_heads`, `k >= 1`, `w <= k`, TOVA and
/// window/StreamingLLM `w == 0`, `sinks <= k`, capacity >= `k + 1` (token: a step appends
/// before it evicts) or `k + page_size` (page unit), and for the page unit `k >=
/// start_pages · page_size + max(w, 1)`. Throws `std::invalid_argument` naming the value.
inline void check_policy(const PolicyParams& p, std::uint32_t n_kv_heads, std::uint32_t capacity,
                         std::uint32_t page_size, const char* who) {
  using detail::require;
  require(n_kv_heads >= 1, who, ": n_kv_heads must be >= 1 (got ", n_kv_heads, ")");
  require(p.n_q_heads >= 1 && p.n_q_heads % n_kv_heads == 0, who, ": n_q_heads (", p.n_q_heads,
          ") must be a positive multiple of n_kv_heads (", n_kv_heads, ")");
  require(static_cast<std::int32_t>(p.score) >= 0 && static_cast<std::int32_t>(p.score) <= 3, who,
          ": unknown score kind ", static_cast<std::int32_t>(p.score));
  require(p.k >= 1, who, ": budget k must be >= 1 (got ", p.k, ")");
  require(p.w <= p.k, who, ": recent window w = ", p.w, " exceeds budget k = ", p.k);
  require(p.score != ScoreKind::tova || p.w == 0, who, ": the CUDA kernels run TOVA without a recent window (w = ", p.w, "; the CPU caches take one)");
  require(p.score != ScoreKind::none || p.w == 0, who,
          ": window/StreamingLLM keep the sinks + the most recent "
          "k - sinks tokens; set w = 0 (got ",
          p.w, ")");
  require(p.score == ScoreKind::none || p.sinks == 0, who, ": sinks = ", p.sinks,
          " is only meaningful for window/StreamingLLM");
  require(p.sinks <= p.k, who, ": sinks = ", p.sinks, " exceeds budget k = ", p.k);
  const std::uint64_t need = p.page_unit ? std::uint64_t{p.k} + page_size : std::uint64_t{p.k} + 1;
  require(capacity >= need, who, ": capacity ", capacity, " slots is below ", need,
          p.page_unit ? " (k + page_size)" : " (k + 1: a step appends before it evicts)");
  require(!p.page_unit || page_size >= 1, who, ": the page unit needs a paged store");
  if (p.page_unit) {
    const std::uint64_t floor = std::uint64_t{p.start_pages} * page_size + (p.w > 0 ? p.w : 1);
    require(p.k >= floor, who, ": page unit needs k >= start_pages * page_size + max(w, 1) (k = ", p.k,
            ", start_pages = ", p.start_pages, ", page_size = ", page_size, ", w = ", p.w, ")");
  } else {
    require(p.start_pages == 0 && !p.page_mean, who,
            ": start_pages / page_mean are only meaningful with the page unit");
  }
  if (p.score == ScoreKind::keyformer) {
    const TemperatureParams& t = p.temperature;
    require(tau_valid(t.tau_init), who, ": tau_init must be finite and >= FLT_MIN (got ", t.tau_init, ")");
    require(t.kind != TemperatureKind::linear || (tau_valid(t.tau_end) && t.horizon >= 1), who,
            ": linear temperature needs a valid tau_end and horizon >= 1 (got ", t.tau_end, ", ", t.horizon, ")");
  }
}

/// Floats of workspace a decode step needs for `batch` sequences, `n_q_heads` query heads
/// and rows of up to `max_slots` slots: per (b, q_head) `(kLanes + 2) · chunk_count(max_slots)`
/// (lane partials, chunk sums / factors, chunk maxes). O(1).
inline std::size_t step_workspace_floats(std::uint32_t batch, std::uint32_t n_q_heads, std::uint32_t max_slots) {
  return detail::checked_mul("kvevict::cuda::step_workspace_floats", "batch * n_q_heads * (kLanes + 2) * "
                             "chunk_count(max_slots)", batch, n_q_heads, kLanes + 2, chunk_count(max_slots));
}
/// `b` rounded up to a multiple of 16. O(1).
KVEVICT_HD inline std::size_t round16(std::size_t b) { return (b + 15) / 16 * 16; }
/// Bytes of the staging header of one slot (position int64, then `heads_moved` float
/// scores), padded so that the K/V rows after it start 16-byte aligned. O(1).
KVEVICT_HD inline std::size_t stage_header_bytes(std::uint32_t heads_moved) {
  return round16(8 + 4 * static_cast<std::size_t>(heads_moved));
}
/// Bytes of one staging entry: the header, then K and V rows of each moved head
/// (`[head][K, V][row_bytes]`), padded to 16. O(1).
KVEVICT_HD inline std::size_t stage_bytes(std::uint32_t heads_moved, std::uint32_t row_bytes) {
  return round16(stage_header_bytes(heads_moved) + 2 * static_cast<std::size_t>(heads_moved) * row_bytes);
}

/// Workspace of a prefill (`core::PrefillWork`), element counts for `batch` sequences,
/// `n_q_heads` query heads, `rows` selection rows per sequence (contiguous: n_kv_heads; paged:
/// 1) and prompts of up to `max_prompt` tokens:
///  - `step_ws`: `step_workspace_floats(batch, n_q_heads, max_prompt)` floats;
///  - `acc`: `prefill_acc_floats` floats, one accumulator of `max_prompt` per (b, q_head);
///  - `keep`: `prefill_keep_ints` int32, a keep list of `max_prompt` + 1 scratch per (b, row);
///  - `stage`: `prefill_stage_bytes` bytes (16-aligned), `kStageSlots` staged slots per (b, row),
///    each `stage_bytes(heads_per_row, head_dim · sizeof(T))` (heads_per_row: 1 contiguous,
///    n_kv_heads paged). O(1).
inline std::size_t prefill_acc_floats(std::uint32_t batch, std::uint32_t n_q_heads, std::uint32_t max_prompt) {
  return detail::checked_mul("kvevict::cuda::prefill_acc_floats", "batch * n_q_heads * max_prompt", batch, n_q_heads,
                             max_prompt);
}
inline std::size_t prefill_keep_ints(std::uint32_t batch, std::uint32_t rows, std::uint32_t max_prompt) {
  // max_prompt + 1 in 64 bits: in uint32 it wrapped to 0 for max_prompt = 2^32 − 1
  return detail::checked_mul("kvevict::cuda::prefill_keep_ints", "batch * rows * (max_prompt + 1)", batch, rows,
                             std::size_t{max_prompt} + 1);
}
inline std::size_t prefill_stage_bytes(std::uint32_t batch, std::uint32_t rows, std::uint32_t heads_per_row,
                                       std::uint32_t row_bytes) {
  const char* who = "kvevict::cuda::prefill_stage_bytes";
  // stage_bytes' own sum, checked: 2 · heads_per_row · row_bytes + its header, rounded up to 16
  const std::size_t rows_bytes = detail::checked_mul(who, "2 * heads_per_row * row_bytes", 2, heads_per_row, row_bytes);
  (void)detail::checked_add(who, "2 * heads_per_row * row_bytes + the staging header + 15", rows_bytes,
                            stage_header_bytes(heads_per_row) + 15);
  return detail::checked_mul(who, "batch * rows * kStageSlots * stage_bytes(heads_per_row, row_bytes)", batch, rows,
                             kStageSlots, stage_bytes(heads_per_row, row_bytes));
}

/// Host checks of the storage a launch addresses (the kernels index it with the products below in 64
/// bits): contiguous K and V, `batch · n_kv_heads · capacity · head_dim` elements of `T` in bytes, and their
/// `batch · n_kv_heads · capacity` position IDs; each paged pool, `num_pages · page_size · n_kv_heads · head_dim`
/// elements in bytes. Throws `std::invalid_argument` "<who>: … overflows std::size_t" (`detail::checked_mul`).
/// O(1).
template <class T>
void check_kv_extent(const ContiguousKV<T>& kv, const char* who) {
  (void)detail::checked_mul(who, "batch * n_kv_heads * capacity * head_dim * sizeof(T) (the bytes of K)", kv.batch,
                            kv.n_kv_heads, kv.capacity, kv.head_dim, sizeof(T));
  (void)detail::checked_mul(who, "batch * n_kv_heads * capacity * sizeof(std::int64_t) (the position IDs)", kv.batch,
                            kv.n_kv_heads, kv.capacity, sizeof(std::int64_t));
}
template <class T>
void check_kv_extent(const PagedKV<T>& kv, const char* who) {
  (void)detail::checked_mul(who, "num_pages * page_size * n_kv_heads * head_dim * sizeof(T) (the bytes of a pool)",
                            kv.num_pages, kv.page_size, kv.n_kv_heads, kv.head_dim, sizeof(T));
}

}  // namespace cuda
}  // namespace kvevict
