// kvevict fuzzing — npy_reader: kvevict-replay's .npy reader (read_npy_f32 and load_trace_npy).
// SPDX-License-Identifier: Apache-2.0
//
// The first input byte chooses what is fuzzed: the bytes as one .npy file (read_npy_f32, then
// load_trace_npy as logits), or split in two files (logits and gumbel). Each must succeed or throw
// `replay::InputError`. A successful read must hold exactly prod(shape) values, and an array
// written back with write_npy_f32 must read back bit-identical.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "fuzz_util.hpp"
#include "npy.hpp"
#include "trace.hpp"

namespace {

std::string temp_path(const char* what) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/kvevict-fuzz-npy-" + std::to_string(::getpid()) + "-" + what;
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) kvfuzz::fail("cannot write " + path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static const std::string a = temp_path("a.npy"), b = temp_path("b.npy"), c = temp_path("c.npy");
  const std::uint8_t mode = data[0] % 3;
  ++data;
  --size;
  if (mode == 2) {  // two files: logits and gumbel, split at a fuzzed point
    const std::size_t cut = size == 0 ? 0 : data[0] % (size + 1);
    write_file(a, data, cut);
    write_file(b, data + cut, size - cut);
    try {
      const replay::Trace t = replay::load_trace_npy(a, b);
      KVFUZZ_CHECK(t.gumbel.size() == t.logits.size() &&
                       t.logits.size() == t.n_q_heads * t.n_tokens * t.n_tokens,
                   "load_trace_npy sizes disagree");
    } catch (const replay::InputError&) {
    }
    return 0;
  }
  write_file(a, data, size);
  replay::NpyArray array;
  try {
    array = replay::read_npy_f32(a, "--logits");
  } catch (const replay::InputError&) {
    return 0;
  }
  std::size_t count = 1;
  for (std::size_t d : array.shape) count *= d;
  KVFUZZ_CHECK(array.data.size() == count, "read_npy_f32 returned ", array.data.size(), " values for ", count);
  if (array.shape.size() <= 64) {
    replay::write_npy_f32(c, array.shape, array.data.data());
    const replay::NpyArray back = replay::read_npy_f32(c, "round-trip");
    KVFUZZ_CHECK(back.shape == array.shape && back.data.size() == count &&
                     (count == 0 || std::memcmp(back.data.data(), array.data.data(), count * 4) == 0),
                 "write_npy_f32 -> read_npy_f32 is not the identity");
  }
  if (mode == 1) {
    try {
      const replay::Trace t = replay::load_trace_npy(a);
      KVFUZZ_CHECK(t.logits.size() == t.n_q_heads * t.n_tokens * t.n_tokens, "load_trace_npy size");
    } catch (const replay::InputError&) {
    }
  }
  return 0;
}
