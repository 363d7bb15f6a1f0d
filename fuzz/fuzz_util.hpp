// kvevict fuzzing — fuzz_util.hpp: helpers shared by the libFuzzer targets.
// SPDX-License-Identifier: Apache-2.0
#pragma once

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

}  // namespace kvfuzz

/// `KVFUZZ_CHECK(cond, parts...)`: aborts with the condition and the streamed `parts` when false.
#define KVFUZZ_CHECK(cond, ...)                                                                  \
  do {                                                                                           \
    if (!(cond)) ::kvfuzz::fail(::kvevict::detail::concat(#cond " -- ", __VA_ARGS__));           \
  } while (0)
