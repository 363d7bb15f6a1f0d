// detail/no_contract.hpp — keeps the compiler from fusing `a · b + c` into an FMA in the
// kernels, whatever `-ffp-contract` the consumer's translation unit has.
// SPDX-License-Identifier: Apache-2.0
//
// g++ contracts by default (`-ffp-contract=fast` outside ISO C) as soon as the target has FMA
// (`-march=native`, `-march=x86-64-v3`); clang++ contracts inside one expression by default
// (`-ffp-contract=on`). Either changes the last bit of a result depending on the flags and the
// inlining context, and the bit-identical guarantees (every build, every dispatched path,
// paged vs contiguous) need none. `KVEVICT_NO_CONTRACT_FN` goes before a function (g++:
// `optimize("fp-contract=off")`; always-inline helpers take the setting of the function they
// are inlined into), `KVEVICT_NO_CONTRACT_BODY` first in a function body (clang++:
// `#pragma clang fp contract(off)`, which holds for that body wherever it is inlined). Not
// covered: clang++ with an explicit `-ffp-contract=fast` or `-ffast-math` (they override the
// pragma; `-ffp-contract=fast-honor-pragmas` does not), and CUDA device code (nvcc's own
// `--fmad`).
#pragma once

#if defined(__CUDACC__) || !(defined(__GNUC__) || defined(__clang__))
#define KVEVICT_NO_CONTRACT_FN
#define KVEVICT_NO_CONTRACT_BODY
#elif defined(__clang__)
#define KVEVICT_NO_CONTRACT_FN
#define KVEVICT_NO_CONTRACT_BODY _Pragma("clang fp contract(off)")
#else
#define KVEVICT_NO_CONTRACT_FN __attribute__((optimize("fp-contract=off")))
#define KVEVICT_NO_CONTRACT_BODY
#endif
