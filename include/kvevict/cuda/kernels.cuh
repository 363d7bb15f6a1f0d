// cuda/kernels.cuh — the CUDA kernels and their launchers: one launch per layer per decode
// step for a batch of B sequences (contiguous or paged KV), the prefill cut (two launches),
// and the export of FlashInfer's compact page table. Header-only CUDA C++17 (CUDA >= 12),
// compiled by nvcc. Every launcher runs on the caller's stream over the caller's device
// memory: no host synchronisation, no allocation, no cudaMemcpy (one cudaMemsetAsync of the
// status words), so a step can be captured in a CUDA graph.
// SPDX-License-Identifier: Apache-2.0
//
// Build the kernels with `-fmad=false` (no FMA contraction; the CPU library builds with
// `-ffp-contract=off`) and without `--use_fast_math` (IEEE division): then every score is
// the CPU cache's bit for bit. With contraction the scores differ by a few ulp and a near
// tie may pick another victim.
#pragma once

#if !defined(__CUDACC__)
#error "kvevict/cuda/kernels.cuh is CUDA C++ (nvcc); the host-testable code is kvevict/cuda/eviction_core.cuh"
#endif

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kvevict/cuda/eviction_core.cuh"
#include "kvevict/cuda/views.cuh"

namespace kvevict {
namespace cuda {

/// Threads per block of every kernel (a power of two: the reductions halve it). With 512 the step
/// kernels use 32 registers a thread (`ptxas -v`, sm_90), so four blocks fit an SM; a block of
/// 4 query heads x 128K slots gives each thread 1K elements per pass.
constexpr unsigned kThreads = 512;

/// The block executor of the kernels (the `Exec` contract of eviction_core.cuh): the block's
/// threads split each range, `__syncthreads` ends every collective, reductions and scans go
/// through `shared` (`kThreads · 16` bytes of the block's shared memory). Host calls of its
/// members are never made (they are `__host__ __device__` only so that the shared block code
/// compiles for both sides).
struct DeviceExec {
  unsigned char* shared;

  template <class F>
  __host__ __device__ void for_range(std::uint32_t n, F&& f) const {
#if defined(__CUDA_ARCH__)
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) f(i);
    __syncthreads();
#else
    (void)n;
    (void)f;
#endif
  }
  template <class F>
  __host__ __device__ void single(F&& f) const {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x == 0) f();
    __syncthreads();
#else
    (void)f;
#endif
  }
  template <class V, class F, class Op>
  __host__ __device__ V reduce(std::uint32_t n, V init, F&& f, Op&& op) const {
    static_assert(sizeof(V) <= 16, "reduce: the shared buffer holds 16 bytes per thread");
#if defined(__CUDA_ARCH__)
    V a = init;
    for (std::uint32_t i = threadIdx.x; i < n; i += blockDim.x) a = op(a, f(i));
    V* buf = reinterpret_cast<V*>(shared);
    buf[threadIdx.x] = a;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
      __syncthreads();
    }
    const V r = buf[0];
    __syncthreads();
    return r;
#else
    (void)n;
    (void)f;
    (void)op;
    return init;
#endif
  }
  template <class Flag, class Emit>
  __host__ __device__ std::uint32_t scan(std::uint32_t n, Flag&& flag, Emit&& emit) const {
#if defined(__CUDA_ARCH__)
    std::uint32_t* buf = reinterpret_cast<std::uint32_t*>(shared);
    std::uint32_t carry = 0;
    for (std::uint32_t t0 = 0; t0 < n; t0 += blockDim.x) {
      const std::uint32_t i = t0 + threadIdx.x;
      const bool fl = i < n && flag(i);
      buf[threadIdx.x] = fl ? 1u : 0u;
      __syncthreads();
      for (unsigned off = 1; off < blockDim.x; off <<= 1) {  // Hillis-Steele inclusive scan
        const std::uint32_t v = threadIdx.x >= off ? buf[threadIdx.x - off] : 0u;
        __syncthreads();
        buf[threadIdx.x] += v;
        __syncthreads();
      }
      const std::uint32_t incl = buf[threadIdx.x], total = buf[blockDim.x - 1];
      if (fl) emit(i, carry + incl - 1);
      carry += total;
      __syncthreads();
    }
    __syncthreads();  // the contract's closing barrier, also for n = 0
    return carry;
#else
    (void)n;
    (void)flag;
    (void)emit;
    return 0;
#endif
  }
  __host__ __device__ void set_status(std::int32_t* s, std::int32_t code) const {
#if defined(__CUDA_ARCH__)
    atomicCAS(s, kStatusOk, code);
#else
    (void)s;
    (void)code;
#endif
  }
  __host__ __device__ void push_free(const PageFreeList& list, std::int32_t page) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t i = atomicAdd(list.count, 1u);
    if (i < list.capacity) list.pages[i] = page;
#else
    (void)list;
    (void)page;
#endif
  }
};

namespace kernels {

template <class T>
__global__ void __launch_bounds__(kThreads) decode_contiguous(ContiguousKV<T> kv, EvictionState st, PolicyParams p,
                                                              LogitsView lg, float* ws, std::uint32_t ws_slots) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  core::decode_step_contiguous(DeviceExec{smem}, kv, st, p, lg, ws, ws_slots, blockIdx.y, blockIdx.x);
}
template <class T>
__global__ void __launch_bounds__(kThreads) decode_paged(PagedKV<T> kv, EvictionState st, PolicyParams p, LogitsView lg,
                                                         PageFreeList fl, float* ws, std::uint32_t ws_slots) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  core::decode_step_paged(DeviceExec{smem}, kv, st, p, lg, fl, ws, ws_slots, blockIdx.x);
}
/// Prefill scoring, one block per (query head, sequence); `lengths` / `len_stride`: the
/// prompt length of (b, h) is `lengths[b * len_stride + (h / g) * (len_stride > 1)]`.
__global__ void __launch_bounds__(kThreads)
    prefill_score(const std::int32_t* lengths, std::uint32_t len_stride, std::uint32_t capacity, EvictionState st,
                  PolicyParams p, LogitsView lg, core::PrefillWork pw) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  const std::uint32_t b = blockIdx.y, h = blockIdx.x, g = p.n_q_heads / (len_stride > 1 ? len_stride : 1);
  const std::int32_t len = lengths[b * len_stride + (len_stride > 1 ? h / g : 0)];
  core::prefill_score_head(DeviceExec{smem}, p, st, lg, pw, len, capacity, b, h);
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    prefill_cut_contiguous(ContiguousKV<T> kv, EvictionState st, PolicyParams p, core::PrefillWork pw) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  core::prefill_cut_contiguous(DeviceExec{smem}, kv, st, p, pw, blockIdx.y, blockIdx.x);
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    prefill_cut_paged(PagedKV<T> kv, EvictionState st, PolicyParams p, core::PrefillWork pw, PageFreeList fl) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  core::prefill_cut_paged(DeviceExec{smem}, kv, st, p, pw, fl, blockIdx.x);
}
template <class T>
__global__ void __launch_bounds__(kThreads)
    export_table(PagedKV<T> kv, std::int32_t* indptr, std::int32_t* indices, std::int32_t* last_page_len) {
  __shared__ alignas(16) unsigned char smem[kThreads * 16];
  core::export_flashinfer_table(DeviceExec{smem}, kv, indptr, indices, last_page_len);
}

}  // namespace kernels

namespace launch_detail {
/// Throws `std::runtime_error` naming `what` if the last launch failed to start (no sync).
inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void reset_status(const EvictionState& st, std::uint32_t batch, cudaStream_t stream, const char* what) {
  detail::require(st.status != nullptr && st.scores != nullptr && st.recent != nullptr && st.rows_state != nullptr,
                  what, ": the eviction state's status, scores, recent and rows_state must be non-null");
  const cudaError_t e = cudaMemsetAsync(st.status, 0, sizeof(std::int32_t) * batch, stream);
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void check_logits(const PolicyParams& p, const LogitsView& lg, std::uint32_t batch, bool prefill,
                         const char* what) {
  detail::require(!p.uses_logits() || lg.x != nullptr, what, ": logits must be non-null for this score");
  detail::require(!p.uses_logits() || lg.indptr != nullptr || lg.stride >= 1, what,
                  ": dense logits need stride >= 1 (got ", lg.stride, ")");
  if (p.uses_logits()) check_logits_extent(lg, batch, p.n_q_heads, prefill, what);
}
}  // namespace launch_detail

/// One decode step of every sequence of a contiguous batch, one block per (KV head, sequence)
/// (grid `n_kv_heads x batch`), on `stream`. Before it the engine appended each sequence's new
/// token to every KV head (K/V row at slot `lengths[b, h]`, its position, `lengths[b, h] += 1`).
/// `logits` per `LogitsView` over each sequence's `n_b` live slots; `ws` holds
/// `step_workspace_floats(batch, n_q_heads, ws_slots)` floats, `ws_slots` >= every n_b. Per
/// sequence the result is `Cache::decode_step` (shared_heads off) on the same logits; errors
/// go to `st.status[b]` (views.cuh). Throws `std::invalid_argument` (host check of the
/// parameters, `check_policy`) or `std::runtime_error` (the launch failed), before any work.
template <class T>
void decode_step(const ContiguousKV<T>& kv, const EvictionState& st, const PolicyParams& p, const LogitsView& lg,
                 float* ws, std::uint32_t ws_slots, cudaStream_t stream) {
  const char* what = "kvevict::cuda::decode_step";
  check_policy(p, kv.n_kv_heads, kv.capacity, 0, what);
  launch_detail::check_logits(p, lg, kv.batch, false, what);
  check_kv_extent(kv, what);
  detail::require(kv.batch >= 1 && kv.k != nullptr && kv.v != nullptr && kv.positions != nullptr &&
                      kv.lengths != nullptr && kv.head_dim >= 1,
                  what, ": the KV view needs batch >= 1, head_dim >= 1 and non-null k, v, positions, lengths");
  detail::require(ws != nullptr && ws_slots >= 1, what, ": the workspace must be non-null, ws_slots >= 1");
  detail::require(p.w == 0 || st.ring != nullptr, what, ": a recent window needs the state's ring");
  detail::require(st.ring_stride >= (p.w > 0 ? p.w : 1), what, ": ring_stride ", st.ring_stride, " < w = ", p.w);
  launch_detail::reset_status(st, kv.batch, stream, what);
  kernels::decode_contiguous<T><<<dim3(kv.n_kv_heads, kv.batch), kThreads, 0, stream>>>(kv, st, p, lg, ws, ws_slots);
  launch_detail::check_launch(what);
}

/// One decode step of every sequence of a paged batch, one block per sequence (grid `batch`):
/// `PagedCache::decode_step` per sequence (token unit, or the page unit with `p.page_unit`).
/// The engine appended each new token first (a page popped from `free_list` or its own
/// allocator when the last page was full). Released pages are pushed onto `free_list`.
/// `min_capacity` is the smallest sequence capacity in slots (for the budget check). Errors
/// as the contiguous `decode_step`.
template <class T>
void decode_step(const PagedKV<T>& kv, const EvictionState& st, const PolicyParams& p, const LogitsView& lg,
                 const PageFreeList& free_list, float* ws, std::uint32_t ws_slots, std::uint32_t min_capacity,
                 cudaStream_t stream) {
  const char* what = "kvevict::cuda::decode_step (paged)";
  check_policy(p, kv.n_kv_heads, min_capacity, kv.page_size, what);
  launch_detail::check_logits(p, lg, kv.batch, false, what);
  check_kv_extent(kv, what);
  detail::require(kv.batch >= 1 && kv.k != nullptr && kv.v != nullptr && kv.positions != nullptr &&
                      kv.lengths != nullptr && kv.indices != nullptr && kv.table_indptr != nullptr &&
                      kv.page_size >= 1 && kv.head_dim >= 1 && kv.num_pages >= 1,
                  what, ": the paged view needs batch, page_size, head_dim, num_pages >= 1 and non-null pointers");
  detail::require(kv.layout == PageLayout::NHD || kv.layout == PageLayout::HND, what, ": layout must be NHD or HND");
  detail::require(free_list.pages != nullptr && free_list.count != nullptr && free_list.capacity >= kv.num_pages, what,
                  ": the free list needs pages, count and capacity >= num_pages (", kv.num_pages, ")");
  detail::require(ws != nullptr && ws_slots >= 1, what, ": the workspace must be non-null, ws_slots >= 1");
  detail::require(st.total_slots >= 1, what, ": the state's total_slots must be table_indptr[batch] * page_size");
  detail::require(st.ring_stride >= (p.w > 0 ? p.w : 1), what, ": ring_stride ", st.ring_stride, " < w = ", p.w);
  launch_detail::reset_status(st, kv.batch, stream, what);
  kernels::decode_paged<T><<<kv.batch, kThreads, 0, stream>>>(kv, st, p, lg, free_list, ws, ws_slots);
  launch_detail::check_launch(what);
}

/// The prefill cut of a contiguous batch (two launches on `stream`: scoring per (q head,
/// sequence), then the cut per (KV head, sequence)): per sequence `Cache::prefill` of the
/// `P_b = lengths[b, h]` prompt tokens already in the KV (positions rising), logits
/// `[B][q_head][P_max][P_max]` (`lg.stride = P_max`, causal part read, optional injected ζ
/// in `lg.gumbel`). `pw` sized per views.cuh for `pw.max_prompt >= P_max`. O(P²) per query
/// head, rows one after another inside its block. Errors as `decode_step`.
template <class T>
void prefill(const ContiguousKV<T>& kv, const EvictionState& st, const PolicyParams& p, const LogitsView& lg,
             const core::PrefillWork& pw, cudaStream_t stream) {
  const char* what = "kvevict::cuda::prefill";
  check_policy(p, kv.n_kv_heads, kv.capacity, 0, what);
  launch_detail::check_logits(p, lg, kv.batch, true, what);
  check_kv_extent(kv, what);
  detail::require(lg.indptr == nullptr, what, ": prefill logits are dense [B][q_head][P_max][P_max]");
  detail::require(
      pw.step_ws != nullptr && pw.acc != nullptr && pw.keep != nullptr && pw.stage != nullptr && pw.max_prompt >= 1,
      what, ": the prefill workspace needs every section and max_prompt >= 1");
  launch_detail::reset_status(st, kv.batch, stream, what);
  kernels::prefill_score<<<dim3(p.n_q_heads, kv.batch), kThreads, 0, stream>>>(kv.lengths, kv.n_kv_heads, kv.capacity,
                                                                               st, p, lg, pw);
  launch_detail::check_launch(what);
  kernels::prefill_cut_contiguous<T><<<dim3(kv.n_kv_heads, kv.batch), kThreads, 0, stream>>>(kv, st, p, pw);
  launch_detail::check_launch(what);
}

/// The prefill cut of a paged batch: `PagedCache::prefill` per sequence (token or page
/// unit); pages released go to `free_list`. Otherwise as the contiguous `prefill`.
template <class T>
void prefill(const PagedKV<T>& kv, const EvictionState& st, const PolicyParams& p, const LogitsView& lg,
             const core::PrefillWork& pw, const PageFreeList& free_list, std::uint32_t min_capacity,
             cudaStream_t stream) {
  const char* what = "kvevict::cuda::prefill (paged)";
  check_policy(p, kv.n_kv_heads, min_capacity, kv.page_size, what);
  launch_detail::check_logits(p, lg, kv.batch, true, what);
  check_kv_extent(kv, what);
  detail::require(lg.indptr == nullptr, what, ": prefill logits are dense [B][q_head][P_max][P_max]");
  detail::require(
      pw.step_ws != nullptr && pw.acc != nullptr && pw.keep != nullptr && pw.stage != nullptr && pw.max_prompt >= 1,
      what, ": the prefill workspace needs every section and max_prompt >= 1");
  detail::require(free_list.pages != nullptr && free_list.count != nullptr && free_list.capacity >= kv.num_pages, what,
                  ": the free list needs pages, count and capacity >= num_pages (", kv.num_pages, ")");
  launch_detail::reset_status(st, kv.batch, stream, what);
  kernels::prefill_score<<<dim3(p.n_q_heads, kv.batch), kThreads, 0, stream>>>(kv.lengths, 1, st.total_slots, st, p, lg,
                                                                               pw);
  launch_detail::check_launch(what);
  kernels::prefill_cut_paged<T><<<kv.batch, kThreads, 0, stream>>>(kv, st, p, pw, free_list);
  launch_detail::check_launch(what);
}

/// Writes FlashInfer's compact page table of the batch (`indptr[batch + 1]`, `indices`,
/// `last_page_len[batch]`; see `core::export_flashinfer_table`), one block, on `stream`.
template <class T>
void export_flashinfer_table(const PagedKV<T>& kv, std::int32_t* indptr, std::int32_t* indices,
                             std::int32_t* last_page_len, cudaStream_t stream) {
  const char* what = "kvevict::cuda::export_flashinfer_table";
  detail::require(indptr != nullptr && indices != nullptr && last_page_len != nullptr, what,
                  ": indptr, indices and last_page_len must be non-null");
  kernels::export_table<T><<<1, kThreads, 0, stream>>>(kv, indptr, indices, last_page_len);
  launch_detail::check_launch(what);
}

}  // namespace cuda
}  // namespace kvevict
