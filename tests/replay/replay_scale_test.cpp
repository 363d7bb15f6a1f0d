// kvevict-replay at model scale: a 2048-token, 32-head trace (512 MiB of float32 logits) replays
// in seconds. The time is printed, not asserted (machines differ); the run must succeed and
// print one line per position from P - 1 to N - 1.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "replay_test_support.hpp"

namespace {

TEST(ReplayScale, Replays2048TokensOf32Heads) {
  constexpr std::size_t H = 32, N = 2048, P = 1024;
  rtest::TempDir dir;
  {
    std::vector<float> logits(H * N * N, 0.0f);
    std::uint64_t s = 42;
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t t = 0; t < N; ++t)
        for (std::size_t j = 0; j <= t; ++j) {
          s = s * 6364136223846793005ULL + 1442695040888963407ULL;
          logits[(h * N + t) * N + j] = static_cast<float>(s >> 40) * (8.0f / 16777216.0f) - 4.0f;
        }
    replay::write_npy_f32(dir.file("x.npy"), {H, N, N}, logits.data());
  }
  for (const std::string policy : {"keyformer --noise gumbel --recent-ratio 0.3", "tova"}) {
    const auto start = std::chrono::steady_clock::now();
    const auto run = rtest::run_replay(dir, "--logits " + dir.file("x.npy") + " --prompt-len " + std::to_string(P) +
                                                " --budget-ratio 0.25 --policy " + policy);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(run.exit_code, 0) << run.err;
    std::size_t lines = 0;
    for (char c : run.out) lines += c == '\n';
    EXPECT_EQ(lines, N - P + 1);
    std::cout << "kvevict-replay " << policy << ": N = " << N << ", H_q = " << H << ", P = " << P
              << ", k = 256: " << seconds << " s (" << run.out.size() / (1 << 20) << " MiB of JSON Lines)" << std::endl;
  }
}

}  // namespace
