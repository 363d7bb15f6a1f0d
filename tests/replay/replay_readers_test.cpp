// tests/replay/replay_readers_test.cpp — the trace readers reject hostile files as InputError
// naming the field, before allocating anything the file's real content does not justify
// (JSON trace reader; each case is also a seed under fuzz/corpus/).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstddef>
#include <sstream>
#include <string>

#include "trace.hpp"

namespace {

/// The InputError message of read_trace_json + validate on `text` ("" if it is accepted).
std::string json_error(const std::string& text) {
  std::istringstream in(text);
  try {
    replay::validate(replay::read_trace_json(in, "t.json"));
  } catch (const replay::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceJsonReader, NumberBeyondDoubleRangeIsAnInputErrorNamingTheEntry) {
  // nlohmann reports this as out_of_range.406 without a location; the reader names the entry.
  EXPECT_EQ(json_error(R"({"logits":[[[1e400]]],"prompt_len":1})"),
            "logits[0][0][0]: the number 1e400 is out of range (a float holds at most 3.4028235e+38)");
  EXPECT_EQ(json_error(R"({"prompt_len": 2, "logits": [[[0, null], [1, -1e999]]]})"),
            "logits[0][1][1]: the number -1e999 is out of range (a float holds at most 3.4028235e+38)");
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "meta": {"scale": [1, 2e500]}, "logits": [[[0]]]})"),
            "meta.scale[1]: the number 2e500 is out of range (a float holds at most 3.4028235e+38)");
}

TEST(TraceJsonReader, ADuplicateKeyIsAnInputErrorNamingIt) {
  // nlohmann keeps the last value of a duplicate key; the .npy header reader refuses duplicates, so
  // the JSON reader does too, at any depth.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[0]]], "prompt_len": 2})"),
            "prompt_len: duplicate key 'prompt_len' (each key may appear once)");
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "meta": {"a": 1, "b": 2, "a": 3}, "logits": [[[0]]]})"),
            "meta.a: duplicate key 'a' (each key may appear once)");
  // The same key in two different objects is fine.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "meta": {"prompt_len": 1}, "logits": [[[0]]]})"), "");
}

TEST(TraceJsonReader, NumberBeyondFloatRangeIsAnInputErrorNamingTheEntry) {
  // 1e39 is a double but not a float: converting it would be undefined behaviour.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[0, null], [1e39, 0]]]})"),
            "logits[0][1][0]: the number 1e+39 is out of range (a float holds at most 3.4028235e+38)");
  // ... also in an ignored entry j > t and in gumbel.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[0, -4e38], [0, 0]]]})"),
            "logits[0][0][1]: the number -4e+38 is out of range (a float holds at most 3.4028235e+38)");
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[0]]], "gumbel": [[[3.5e38]]]})"),
            "gumbel[0][0][0]: the number 3.5e+38 is out of range (a float holds at most 3.4028235e+38)");
  // The largest float itself is fine.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[3.4028234663852886e38]]]})"), "");
}

TEST(TraceJsonReader, ShapeIsCheckedAgainstTheContentBeforeAllocating) {
  // A 5 KB file whose first head has N = 1000 rows and which has H = 1000 heads: the reader used to
  // allocate H * N * N floats (4 GB) from those two sizes before looking at a single row.
  std::string claim = R"({"prompt_len": 1, "logits": [[)";
  for (int i = 0; i < 1000; ++i) claim += i ? ",[]" : "[]";
  claim += "]";
  for (int i = 1; i < 1000; ++i) claim += ",0";
  claim += "]}";
  ASSERT_LT(claim.size(), 6000u);
  EXPECT_EQ(json_error(claim), "logits[0][0]: expected an array of N = 1000 entries, got 0 entries");
}

TEST(TraceJsonReader, EveryHeadIsCheckedBeforeAnyValue) {
  // Head 1 is ragged and head 0 holds a bad value: the shape error comes first.
  EXPECT_EQ(json_error(R"({"prompt_len": 1, "logits": [[[true, null], [0, 0]], [[0, null]]]})"),
            "logits[1]: expected an array of N = 2 rows, got 1 rows");
}

TEST(TraceValidate, RejectsShapesWhoseProductWrapsInsteadOfReadingOutOfBounds) {
  // H = 2^22, N = 2^21: H * N * N = 2^64 wraps to 0 = logits.size(); validate used to accept it
  // and then read logits[0] of an empty vector.
  replay::Trace t;
  t.n_q_heads = std::size_t{1} << 22;
  t.n_tokens = std::size_t{1} << 21;
  t.prompt_len = 1;
  try {
    replay::validate(t);
    FAIL() << "accepted a wrapping shape";
  } catch (const replay::InputError& e) {
    EXPECT_EQ(std::string(e.what()), "logits: shape 8796093022208 x 2097152 overflows size_t");
  }
}

TEST(TraceJsonReader, SyntaxErrorsStayInputErrors) {
  EXPECT_NE(json_error(R"({"logits": [[[0]]], "prompt_len": 1)").find("trace 't.json': invalid JSON"),
            std::string::npos);
  EXPECT_EQ(json_error(R"({"prompt_len": [[[[1]]]], "logits": [[[0]]]})"),
            "prompt_len: must be an integer, got an array");
}

}  // namespace
