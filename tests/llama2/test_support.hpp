// tests/llama2/test_support.hpp — synthetic llama2.c checkpoints and the location of ../shared.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "llama2/model.hpp"

namespace llama2_test {

/// Header of a synthetic checkpoint, as the seven int32 of the file.
struct Header {
  std::int32_t dim = 16, hidden_dim = 24, n_layers = 2, n_heads = 4, n_kv_heads = 2, vocab_size = 32, seq_len = 48;
};

static_assert(sizeof(Header) == 28, "the header is seven packed int32");

/// Number of floats after the header for `h` (negative vocab = separate classifier).
inline std::size_t weight_floats(const Header& h) {
  const std::size_t d = static_cast<std::size_t>(h.dim), L = static_cast<std::size_t>(h.n_layers),
                    hid = static_cast<std::size_t>(h.hidden_dim),
                    V = static_cast<std::size_t>(h.vocab_size < 0 ? -h.vocab_size : h.vocab_size),
                    hd = d / static_cast<std::size_t>(h.n_heads), kv = hd * static_cast<std::size_t>(h.n_kv_heads);
  return V * d + L * d + L * d * d * 2 + L * kv * d * 2 + L * d + L * hid * d * 3 + d +
         static_cast<std::size_t>(h.seq_len) * hd + (h.vocab_size < 0 ? V * d : 0);
}

/// Random weights for `h` (RMSNorm gains near 1, matrices ~ U(-0.3, 0.3)), in file order.
inline std::vector<float> random_weights(const Header& h, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  std::vector<float> w(weight_floats(h));
  for (float& x : w) x = u(rng);
  return w;
}

/// Writes a llama2.c legacy checkpoint: the header, then `weights` as they are.
inline void write_checkpoint(const std::string& path, const Header& h, const std::vector<float>& weights) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&h), sizeof h);
  out.write(reinterpret_cast<const char*>(weights.data()), static_cast<std::streamsize>(weights.size() * sizeof(float)));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

/// A fresh path in the system temp directory (removed by the caller's TempFile).
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() /
              (name + "." + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "." +
               std::to_string(reinterpret_cast<std::uintptr_t>(this)) + ".bin"))
                 .string()) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

/// The shared data folder: $KVEVICT_SHARED_DIR, else the configure-time default.
inline std::filesystem::path shared_dir() {
  const char* env = std::getenv("KVEVICT_SHARED_DIR");
  return (env != nullptr && *env != '\0') ? env : KVEVICT_SHARED_DIR_DEFAULT;
}

/// True when KVEVICT_REQUIRE_MODELS=1: missing shared data is then a failure, not a skip.
inline bool models_required() {
  const char* env = std::getenv("KVEVICT_REQUIRE_MODELS");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace llama2_test

/// Skips the test (or fails it when KVEVICT_REQUIRE_MODELS=1) if `path` does not exist.
#define KVEVICT_REQUIRE_SHARED_FILE(path)                                                                  \
  do {                                                                                                     \
    if (!std::filesystem::exists(path)) {                                                                  \
      if (llama2_test::models_required())                                                                  \
        FAIL() << "missing shared data " << (path) << " (KVEVICT_REQUIRE_MODELS=1; set KVEVICT_SHARED_DIR)"; \
      GTEST_SKIP() << "missing shared data " << (path) << " (set KVEVICT_SHARED_DIR)";                     \
    }                                                                                                      \
  } while (0)
