// kvevict-replay inputs: the .npy reader, JSON and .npy giving the same replay, stdin.
#include <gtest/gtest.h>

#include <cmath>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "replay_test_support.hpp"

namespace {

TEST(Npy, RoundTripsShapeAndValuesExactly) {
  rtest::TempDir dir;
  const std::vector<float> data{0.1f, -2.5f, 3e-38f, 1e30f, -rtest::kInf, 7.0f};
  replay::write_npy_f32(dir.file("a.npy"), {2, 3}, data.data());
  const replay::NpyArray a = replay::read_npy_f32(dir.file("a.npy"), "test");
  EXPECT_EQ(a.shape, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(a.data, data);
  // numpy aligns the data to 64 bytes.
  EXPECT_EQ((std::filesystem::file_size(dir.file("a.npy")) - 6 * 4) % 64, 0u);
}

TEST(Npy, HeaderAsNumpyWritesItInAnyKeyOrderAndQuoting) {
  EXPECT_EQ(replay::parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 3), }   \n", "f"),
            (std::vector<std::size_t>{2, 3, 3}));
  EXPECT_EQ(replay::parse_npy_header("{\"shape\": (5,), \"fortran_order\": False, \"descr\": \"<f4\"}\n", "f"),
            (std::vector<std::size_t>{5}));
  EXPECT_EQ(replay::parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", "f"),
            (std::vector<std::size_t>{}));
}

TEST(Npy, RejectsEveryOtherHeader) {
  const std::vector<std::pair<std::string, std::string>> bad{
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }\n", "dtype '<f8'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }\n", "dtype '|u1'"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }\n", "Fortran order"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }\n", "fortran_order must be True or False"},
      {"{'descr': '<f4', 'shape': (3,), }\n", "missing 'fortran_order'"},
      {"{'descr': '<f4', 'fortran_order': False, }\n", "missing 'shape'"},
      {"{'fortran_order': False, 'shape': (3,), }\n", "missing 'descr'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}\n", "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}\n", "unexpected key 'x'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}\n", "non-negative integers"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3.5,)}\n", "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}\n", "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "must end with"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x\n", "must end with"},
      {"['descr']\n", "expected '{'"},
      {"{'descr: '<f4'}\n", "expected ':'"},
  };
  for (const auto& [header, expected] : bad) {
    try {
      replay::parse_npy_header(header, "f");
      ADD_FAILURE() << "accepted: " << header;
    } catch (const replay::InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what() << " / expected " << expected;
      EXPECT_EQ(std::string(e.what()).rfind("f: ", 0), 0u) << e.what();
    }
  }
}

TEST(Npy, ReadsVersion2Headers) {
  rtest::TempDir dir;
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  header.append((64 - (12 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY", 6) + '\x02' + '\x00';
  for (int b = 0; b < 4; ++b) file += static_cast<char>((header.size() >> (8 * b)) & 0xff);
  const float values[2] = {1.5f, -2.0f};
  file += header + std::string(reinterpret_cast<const char*>(values), sizeof values);
  const replay::NpyArray a = replay::read_npy_f32(dir.write("v2.npy", file), "test");
  EXPECT_EQ(a.data, (std::vector<float>{1.5f, -2.0f}));
}

TEST(TraceJson, WrittenTracesReadBackBitForBit) {
  const replay::Trace t = rtest::random_trace(3, 9, 4, 3, true, 5);
  std::stringstream text;
  replay::write_trace_json(text, t);
  const replay::Trace back = replay::read_trace_json(text, "memory");
  ASSERT_EQ(back.n_q_heads, 3u);
  ASSERT_EQ(back.n_tokens, 9u);
  EXPECT_EQ(back.prompt_len, std::optional<std::size_t>(4));
  EXPECT_EQ(back.q_heads_per_kv, std::optional<std::size_t>(3));
  for (std::size_t h = 0; h < 3; ++h)
    for (std::size_t r = 0; r < 9; ++r)
      for (std::size_t c = 0; c <= r; ++c) {
        EXPECT_EQ(back.logit(h, r, c), t.logit(h, r, c));
        EXPECT_EQ(back.gumbel[back.index(h, r, c)], t.gumbel[t.index(h, r, c)]);
      }
}

// Fuzz finding (fuzz_trace_json): a logit of -0 ("-0e39" in the input) came back as +0, because "-0"
// is read as the integer 0. Negative zero is written "-0.0" and keeps its sign bit.
TEST(TraceJson, NegativeZeroKeepsItsSignThroughARoundTrip) {
  std::istringstream in(R"({"logits":[[[0, null], [-0e39, 0]]],"prompt_len":2})");
  const replay::Trace t = replay::read_trace_json(in, "memory");
  ASSERT_TRUE(std::signbit(t.logit(0, 1, 0)));
  std::stringstream text;
  replay::write_trace_json(text, t);
  EXPECT_NE(text.str().find("-0.0"), std::string::npos) << text.str();
  const replay::Trace back = replay::read_trace_json(text, "memory");
  EXPECT_EQ(back.logit(0, 1, 0), 0.0f);
  EXPECT_TRUE(std::signbit(back.logit(0, 1, 0)));
}

TEST(ReplayFormats, JsonAndNpyGiveTheSameOutput) {
  rtest::TempDir dir;
  const replay::Trace t = rtest::random_trace(6, 40, 15, 3, true, 11);
  const std::string json_file = rtest::save_json(dir, "t.json", t);
  replay::save_trace_npy(t, dir.file("x.npy"), dir.file("z.npy"));
  const std::string npy_args = "--logits " + dir.file("x.npy") + " --prompt-len 15 --q-heads-per-kv 3";
  const std::string gumbel_arg = " --gumbel " + dir.file("z.npy");  // Keyformer's only: an error with the others
  const std::vector<std::string> runs{"--policy keyformer --budget 9 --recent 3",
                                      "--policy keyformer --budget-ratio 0.5 --noise none",
                                      "--policy keyformer --budget 9 --noise gumbel --seed 3",
                                      "--policy keyformer --budget 6 --shared-heads",
                                      "--policy h2o --budget 9 --recent-ratio 0.3",
                                      "--policy tova --budget 7",
                                      "--policy streaming --budget 8 --sinks 2",
                                      "--policy window --budget 8"};
  for (const auto& options : runs) {
    const auto from_json = rtest::run_replay(dir, json_file + " " + options);
    const bool keyformer = options.find("keyformer") != std::string::npos;
    const auto from_npy = rtest::run_replay(dir, npy_args + (keyformer ? gumbel_arg : "") + " " + options);
    ASSERT_EQ(from_json.exit_code, 0) << options << ": " << from_json.err;
    ASSERT_EQ(from_npy.exit_code, 0) << options << ": " << from_npy.err;
    EXPECT_EQ(from_json.out, from_npy.out) << options;
    EXPECT_EQ(from_json.lines().size(), 26u) << options;
  }
}

TEST(ReplayFormats, ReadsJsonFromStdin) {
  rtest::TempDir dir;
  const std::string file = rtest::save_json(dir, "t.json", rtest::random_trace(2, 12, 5, 1, false));
  const auto from_file = rtest::run_replay(dir, file + " --policy h2o --budget 4");
  const auto from_stdin = rtest::run_replay(dir, "- --policy h2o --budget 4 < " + file);
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  ASSERT_EQ(from_stdin.exit_code, 0) << from_stdin.err;
  EXPECT_EQ(from_file.out, from_stdin.out);
}

TEST(ReplayFormats, CommandLineOverridesTheJsonFields) {
  rtest::TempDir dir;
  const replay::Trace t = rtest::random_trace(4, 12, 5, 1, false);
  const std::string file = rtest::save_json(dir, "t.json", t);
  const auto run = rtest::run_replay(dir, file + " --policy h2o --budget 4 --prompt-len 8 --q-heads-per-kv 4");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["t"], 7);
  EXPECT_EQ(lines[0]["kept"].size(), 1u);  // 4 query heads, g = 4: one KV head
}

}  // namespace
