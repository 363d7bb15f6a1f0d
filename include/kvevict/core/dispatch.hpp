// core/dispatch.hpp — which instruction set the hot kernels run on, chosen once at run time.
// SPDX-License-Identifier: Apache-2.0
//
// The kernels of detail/vec16.hpp are compiled three times inside the headers (GCC / Clang
// `target` attributes): x86-64 baseline (SSE2), AVX2 + FMA, and AVX-512 (F, BW, DQ,
// VL). The first kernel call picks the best one the CPU (and OS) supports, whatever `-O`
// level or `-march` the consumer's translation unit has; nothing extra to link. Every path
// gives the same bits (element-wise operations in the same order, no contraction into FMA,
// the same 16-lane reduction order), so the choice changes speed only. Tests force each path
// (`set_isa` or the environment variable `KVEVICT_ISA=baseline|avx2|avx512`) and compare.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kvevict {

/// A compiled path of the hot kernels. `kBaseline` is the consumer's own target (SSE2 on
/// plain x86-64; the only path on other architectures or compilers).
enum class Isa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

/// "baseline", "avx2" or "avx512" (the `KVEVICT_ISA` spellings). O(1).
inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    default: return "baseline";
  }
}

namespace detail {

/// Whether the kernels are compiled for more than the baseline (x86-64 with g++ or clang++, not nvcc).
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__)
inline constexpr bool kIsaDispatch = true;
#define KVEVICT_X86_DISPATCH 1
#else
inline constexpr bool kIsaDispatch = false;
#endif

/// The process-wide choice: -1 until the first kernel call, then an `Isa` value. One object
/// in every translation unit (C++17 inline variable).
inline std::atomic<int> g_isa{-1};

}  // namespace detail

/// Whether this CPU and OS can run `isa` (CPUID and the OS's saved register state, as
/// `__builtin_cpu_supports` reports them). `kBaseline` is always supported. O(1).
inline bool isa_supported(Isa isa) {
#if defined(KVEVICT_X86_DISPATCH)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kBaseline: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return isa == Isa::kBaseline;
#endif
}

/// The best path this CPU supports. O(1).
inline Isa best_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kBaseline;
}

/// Makes every later kernel call (all threads) run on `isa`. Throws `std::invalid_argument`
/// naming `isa` if the CPU cannot run it (nothing changes then). Not meant to be called
/// while other threads run kernels (they may finish a call on the previous path; the bits
/// are the same either way). O(1).
inline void set_isa(Isa isa) {
  const int v = static_cast<int>(isa);
  if (v < 0 || v > 2) throw std::invalid_argument("set_isa: isa " + std::to_string(v) + " is not an Isa value");
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("set_isa: isa ") + isa_name(isa) + " is not supported by this CPU");
  detail::g_isa.store(v, std::memory_order_relaxed);
}

namespace detail {
/// `active_isa`'s first call: the choice, stored. Out of line (and `cold` where the compiler has it), so that
/// `active_isa`'s common case, one relaxed load and a compare, inlines into every kernel's dispatch: the victim
/// scans dispatch once per 64-slot block, and a call that set up a frame for this path cost 17 instructions each
/// (5 % of a StreamingLLM step, `bash bench/instructions.sh`). Throws `std::invalid_argument` as `active_isa`
/// documents, the choice then unstored. (A template, so that one definition serves every translation unit without
/// `inline`: g++ 12 warns, -Wattributes, about `noinline` on an inline function.)
template <int = 0>
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
[[gnu::noinline, gnu::cold]]
#endif
Isa choose_isa();
}  // namespace detail

/// The path the kernels run on. On the first call: `KVEVICT_ISA` from the environment if set
/// (`baseline`, `avx2`, `avx512`; throws `std::invalid_argument` naming the variable and its
/// value if it is something else or the CPU cannot run it), else `best_isa()`. O(1).
inline Isa active_isa() {
  const int v = detail::g_isa.load(std::memory_order_relaxed);
  if (v >= 0) return static_cast<Isa>(v);
  return detail::choose_isa();
}

namespace detail {
template <int>
Isa choose_isa() {
  Isa chosen = best_isa();
  if (const char* env = std::getenv("KVEVICT_ISA"); env != nullptr && *env != '\0') {
    if (std::strcmp(env, "baseline") == 0) chosen = Isa::kBaseline;
    else if (std::strcmp(env, "avx2") == 0) chosen = Isa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) chosen = Isa::kAvx512;
    else
      throw std::invalid_argument(std::string("KVEVICT_ISA: '") + env +
                                  "' is not one of baseline, avx2, avx512");
    if (!isa_supported(chosen))
      throw std::invalid_argument(std::string("KVEVICT_ISA: '") + env + "' is not supported by this CPU");
  }
  g_isa.store(static_cast<int>(chosen), std::memory_order_relaxed);
  return chosen;
}
}  // namespace detail

}  // namespace kvevict
