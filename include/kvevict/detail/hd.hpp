// detail/hd.hpp — `KVEVICT_HD`: marks the few scalar functions that the CPU caches and
// the CUDA kernels (include/kvevict/cuda/) share, so that both run one definition of
// the noise formula and of the fast log / exp.
// SPDX-License-Identifier: Apache-2.0
#pragma once

/// `__host__ __device__` when the translation unit is compiled by nvcc (or clang's CUDA
/// mode), empty otherwise: a plain C++ build sees ordinary inline functions.
#if defined(__CUDACC__)
#define KVEVICT_HD __host__ __device__
#else
#define KVEVICT_HD
#endif
