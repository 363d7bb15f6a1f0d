// Helpers for the kvevict-replay tests: temporary files, traces, running the binary.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "npy.hpp"
#include "trace.hpp"

#ifndef KVEVICT_REPLAY_BIN
#error "KVEVICT_REPLAY_BIN must name the kvevict-replay executable"
#endif

namespace rtest {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// A fresh directory per test (ctest runs tests in parallel processes), removed at the end.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "kvevict_replay_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    for (char& c : name)
      if (c == '/') c = '_';  // parameterized tests are named "Prefix/Suite.Name/Param"
    path_ = fs::temp_directory_path() / name;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
    return file(name);
  }

 private:
  fs::path path_;
};

/// Outcome of one run of kvevict-replay.
struct Run {
  int exit_code = -1;
  std::string out, err;
  /// stdout parsed as JSON Lines.
  std::vector<json> lines() const {
    std::vector<json> result;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) result.push_back(json::parse(line));
    return result;
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Runs `kvevict-replay <args>` (args are passed to the shell as written) in `dir`.
inline Run run_replay(const TempDir& dir, const std::string& args) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = std::string("'") + KVEVICT_REPLAY_BIN + "' " + args + " > '" + out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  Run run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  run.out = slurp(out);
  run.err = slurp(err);
  return run;
}

/// A trace with `H` heads of `N` tokens, every entry NaN until set (so unset entries are errors
/// in the causal part and harmless above it).
inline replay::Trace make_trace(std::size_t H, std::size_t N, std::size_t P, std::size_t g = 1) {
  replay::Trace t;
  t.n_q_heads = H;
  t.n_tokens = N;
  t.prompt_len = P;
  t.q_heads_per_kv = g;
  t.logits.assign(H * N * N, kNaN);
  return t;
}

/// Sets row `t` of head `h` to `tau * ln(a_j)` for the given (column, weight) pairs: softmax at
/// temperature `tau` over exactly those columns then gives `a_j / sum(a)`.
inline void set_row(replay::Trace& tr, std::size_t h, std::size_t t,
                    std::vector<std::pair<std::size_t, double>> weights, double tau = 1.0) {
  for (const auto& [j, a] : weights) tr.logits[tr.index(h, t, j)] = static_cast<float>(tau * std::log(a));
}
inline void set_entry(replay::Trace& tr, std::size_t h, std::size_t t, std::size_t j, float x) {
  tr.logits[tr.index(h, t, j)] = x;
}

inline std::string save_json(const TempDir& dir, const std::string& name, const replay::Trace& trace) {
  std::ofstream out(dir.file(name));
  replay::write_trace_json(out, trace);
  return dir.file(name);
}

/// Deterministic pseudo-random logits (and gumbel), for traces whose exact values do not matter.
inline replay::Trace random_trace(std::size_t H, std::size_t N, std::size_t P, std::size_t g, bool with_gumbel,
                                  std::uint64_t seed = 1) {
  replay::Trace t = make_trace(H, N, P, g);
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  auto next = [&s]() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ULL << 24));  // [0, 1)
  };
  for (float& x : t.logits) x = 4.0f * next() - 2.0f;
  if (with_gumbel) {
    t.gumbel.resize(t.logits.size());
    for (float& z : t.gumbel) z = -std::log(-std::log(0.001f + 0.998f * next()));
  }
  return t;
}

}  // namespace rtest
