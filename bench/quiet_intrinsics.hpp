// kvevict bench — quiet_intrinsics.hpp: included first into every benchmark source by the build (GCC only,
// `-include`), so that GCC 12's false `-Wmaybe-uninitialized` inside its own AVX-512 intrinsics (GCC PR
// 105593: `'__Y' may be used uninitialized` in avx512fintrin.h, ~140 per source under -march=native or
// x86-64-v4) stops burying real warnings.
//
// GCC decides a diagnostic's fate by the pragma state at the line it reports, here a line of the
// intrinsics header: ignoring the two warnings around the header's one inclusion (its include guard
// keeps Eigen's later #include from reopening it) silences exactly those lines. A maybe-uninitialized
// variable in kvevict's or the benchmarks' own code is reported at its own line, outside the push/pop,
// and still warns.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
