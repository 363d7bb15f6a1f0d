// cuda/eviction_core.cuh — the work of one CUDA block of the eviction kernels, and its host executor.
// SPDX-License-Identifier: Apache-2.0
//
// The block's work is written once as `__host__ __device__` code over an executor `Exec` that supplies the block's
// parallel primitives (the code itself is in cuda/detail/: block_softmax.cuh, the rows'
// softmax; block_steps.cuh, the parts both layouts share; block_contiguous.cuh and
// block_paged.cuh, one per KV layout). `kernels.cuh` runs it with `DeviceExec` (threads of a block,
// `__syncthreads`, shared-memory reductions); `HostExec` below runs the same code serially,
// which is how the CPU tests (tests/cuda/) check the device arithmetic against the CPU
// caches without a GPU.
//
// The `Exec` contract (every call is a block-wide collective: all threads of the block
// make it, with the same arguments; each ends with a barrier):
//   for_range(n, f)             f(i) for every i in [0, n), in any order / concurrently
//   single(f)                   f() once
//   reduce(n, init, f, op)      op-fold of init and f(i), i in [0, n); op associative and
//                               commutative *exactly* (integer sums, min of a total order)
//   scan(n, flag, emit)         emit(i, r) for each i with flag(i), r = the number of such
//                               j < i; returns the count
//   set_status(p, code)         *p = code if *p == 0 (atomic on the device)
//   push_free(list, page)       pushes a page id onto a PageFreeList (atomic on the device)
//
// Floating point: every sum is done in the CPU kernel's order (softmax_accumulate.hpp:
// 16-lane chunk sums, the fixed-order chunk combine, q heads ascending), with the CPU's
// `neg_log_positive` / `exp_nonpositive` and ζ formula (score/gumbel.hpp), so that, compiled
// without FMA contraction (nvcc `-fmad=false`, as the CPU library's `-ffp-contract=off`) and
// with IEEE division (no `--use_fast_math`), the device scores are meant to be the CPU's bit
// for bit: on the host executor they are (tests/cuda/cuda_core_test); tests/cuda/gpu_check is
// the check on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/detail/hd.hpp"
#include "kvevict/cuda/detail/block_contiguous.cuh"
#include "kvevict/cuda/detail/block_paged.cuh"
#include "kvevict/cuda/detail/block_softmax.cuh"
#include "kvevict/cuda/detail/block_steps.cuh"
#include "kvevict/cuda/views.cuh"

namespace kvevict {
namespace cuda {
namespace core {

/// The serial executor: runs a block's work on the calling host thread (the CPU tests, and
/// a host reference of the kernels). Not for production use: it is the device code's
/// arithmetic, one element at a time. (`KVEVICT_HD` so that a CUDA translation unit that
/// also instantiates the block code with it compiles cleanly; it is meant for the host.)
struct HostExec {
  template <class F>
  KVEVICT_HD void for_range(std::uint32_t n, F&& f) const {
    for (std::uint32_t i = 0; i < n; ++i) f(i);
  }
  template <class F>
  KVEVICT_HD void single(F&& f) const {
    f();
  }
  template <class V, class F, class Op>
  KVEVICT_HD V reduce(std::uint32_t n, V init, F&& f, Op&& op) const {
    V a = init;
    for (std::uint32_t i = 0; i < n; ++i) a = op(a, f(i));
    return a;
  }
  template <class Flag, class Emit>
  KVEVICT_HD std::uint32_t scan(std::uint32_t n, Flag&& flag, Emit&& emit) const {
    std::uint32_t r = 0;
    for (std::uint32_t i = 0; i < n; ++i)
      if (flag(i)) emit(i, r++);
    return r;
  }
  KVEVICT_HD void set_status(std::int32_t* s, std::int32_t code) const {
    if (*s == kStatusOk) *s = code;
  }
  KVEVICT_HD void push_free(const PageFreeList& list, std::int32_t page) const {
    const std::uint32_t i = (*list.count)++;
    if (i < list.capacity) list.pages[i] = page;
  }
};

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
