// kvevict fuzzing — fuzz_util.hpp: helpers shared by the libFuzzer targets.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <kvevict/detail/check.hpp>

namespace kvfuzz {

/// Reports a violated invariant on stderr and aborts, which libFuzzer records as a finding
/// (the input is written to the artifact prefix).
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "kvevict fuzz: invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Size arguments no array can have (issue 51: products of sizes that wrapped): each is >= 2^62, so a product
/// with any other size >= 4 overflows std::size_t, an element count of >= 2 bytes each is above PTRDIFF_MAX bytes
/// (std::vector's max_size() for float and double), and a count of int64 position IDs overflows. A harness passes
/// one where the library must refuse the call (std::invalid_argument, or std::length_error from a vector) before
/// it sizes or addresses anything; the buffers the harness itself passes stay small.
inline constexpr std::size_t kHugeSizes[] = {std::size_t{1} << 62,       (std::size_t{1} << 62) + 1,
                                             std::size_t{1} << 63,       (std::size_t{1} << 63) + 1,
                                             SIZE_MAX / 3,               SIZE_MAX / 2,
                                             SIZE_MAX - 1,               SIZE_MAX};
/// The members of `kHugeSizes` above SIZE_MAX / 2: twice any of them overflows std::size_t (a row stride of an
/// array of two or more rows).
inline constexpr std::size_t kHugeStrides[] = {std::size_t{1} << 63, (std::size_t{1} << 63) + 1,
                                               (std::size_t{1} << 63) + (std::size_t{1} << 62), SIZE_MAX - 1, SIZE_MAX};

}  // namespace kvfuzz

/// `KVFUZZ_CHECK(cond, parts...)`: aborts with the condition and the streamed `parts` when false.
#define KVFUZZ_CHECK(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond)) ::kvfuzz::fail(::kvevict::detail::concat(#cond " -- ", __VA_ARGS__));           \
  } while (0)
