// detail/simd.hpp — the loop-vectorisation request of the kernels' element-wise loops.
// SPDX-License-Identifier: Apache-2.0
//
// `KVEVICT_SIMD` goes right before a `for` loop whose iterations are
// independent (no loop-carried dependency, no reduction): it asks the compiler
// to vectorise the loop whatever the optimisation level, so a consumer built
// with `-O2` (CMake's RelWithDebInfo, distributions' packaging default) gets
// vector code as `-O3` does. With the CMake target `kvevict::kvevict`
// (`-fopenmp-simd -DKVEVICT_OMP_SIMD`, no OpenMP runtime, no threads) it is
// `#pragma omp simd` (g++); otherwise `#pragma GCC ivdep` (g++ without the
// target, which still vectorises at `-O3`); empty for clang++ (see below) and
// for other compilers. Never on a loop with a loop-carried dependency: the pragma
// asserts there is none.
#pragma once

#if defined(__clang__)
// clang++ vectorises these loops at -O2 as at -O3 by itself; an explicit request
// (`omp simd` or `loop vectorize(enable)`) makes a loop that it prefers to unroll
// (a small constant trip count after inlining) a -Wpass-failed warning, an error
// under -Werror in the consumer's code. So no request for clang.
#define KVEVICT_SIMD
#elif defined(KVEVICT_OMP_SIMD)
#define KVEVICT_SIMD _Pragma("omp simd")
#elif defined(__GNUC__)
#define KVEVICT_SIMD _Pragma("GCC ivdep")
#else
#define KVEVICT_SIMD
#endif


// `KVEVICT_LANES` goes right before the inner loop over the 16 lanes of a
// fixed-order reduction (`for (l = 0; l < 16; ++l) lane[l] = op(lane[l], v[i + l])`,
// see `detail::sum_fixed_order`): it asks g++ and clang++ to unroll it
// completely, at any optimisation level, so that the lanes live in vector
// registers (the SLP vectoriser of `-O2` packs them) instead of going through the
// stack every block. Each lane still combines its elements in index order, so
// the result is the same bits on every target; only the registers differ.
#if defined(__GNUC__) || defined(__clang__)
#define KVEVICT_LANES _Pragma("GCC unroll 16")
#else
#define KVEVICT_LANES
#endif
