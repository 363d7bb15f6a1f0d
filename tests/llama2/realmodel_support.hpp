// tests/llama2/realmodel_support.hpp — where the `realmodel` tests find SmolLM2 and its reference files.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_support.hpp"

namespace llama2_test {

/// The SmolLM2-135M-Instruct Q4_1 GGUF: $KVEVICT_SMOLLM2_GGUF if set, else the line
/// `bash scripts/get-models.sh` prints (it downloads the file into its cache the first time, about
/// 98 MB). Empty if neither gives an existing file; `why` then says what went wrong.
inline std::string smollm2_gguf(std::string& why) {
  if (const char* env = std::getenv("KVEVICT_SMOLLM2_GGUF"); env != nullptr && *env != '\0') {
    if (std::filesystem::is_regular_file(env)) return env;
    why = std::string("KVEVICT_SMOLLM2_GGUF='") + env + "' is not a file";
    return "";
  }
  const std::string cmd = "bash '" KVEVICT_SOURCE_DIR "/scripts/get-models.sh'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    why = "cannot run " + cmd;
    return "";
  }
  std::string out;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr) out += buf.data();
  const int rc = pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (rc != 0 || out.empty() || !std::filesystem::is_regular_file(out)) {
    why = cmd + " failed (exit status " + std::to_string(rc) + "; its stderr is above)";
    return "";
  }
  return out;
}

/// The folder of the oracle's reference files (scripts/oracle/smollm2_reference.py writes them).
inline std::filesystem::path smollm2_reference_dir() {
  return std::filesystem::path(KVEVICT_SOURCE_DIR) / "tests" / "llama2" / "reference" / "smollm2";
}

}  // namespace llama2_test

/// Declares `std::string var`, the SmolLM2 GGUF path; skips the test without it (fails it when
/// KVEVICT_REQUIRE_MODELS=1).
#define KVEVICT_REQUIRE_SMOLLM2(var)                                                           \
  std::string var;                                                                             \
  do {                                                                                         \
    std::string why_;                                                                          \
    var = llama2_test::smollm2_gguf(why_);                                                     \
    if (var.empty()) {                                                                         \
      if (llama2_test::models_required()) FAIL() << "SmolLM2 GGUF not available: " << why_;    \
      GTEST_SKIP() << "SmolLM2 GGUF not available: " << why_;                                  \
    }                                                                                          \
  } while (0)
