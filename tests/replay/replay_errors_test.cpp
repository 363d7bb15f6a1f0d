// kvevict-replay bad input: every case prints one line "kvevict-replay: <field>: <problem>" to
// stderr, nothing to stdout, and exits with code 2.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "replay_test_support.hpp"

namespace {

// A valid trace: H_q = 2, N = 3, P = 2.
const char* const kRow0 = "[0, null, null]";
const char* const kRow1 = "[0.5, 0, null]";
const char* const kRow2 = "[1, 0, -1]";

std::string head(const std::string& r0 = kRow0, const std::string& r1 = kRow1, const std::string& r2 = kRow2) {
  return "[" + r0 + ", " + r1 + ", " + r2 + "]";
}
std::string trace_json(const std::string& fields, const std::string& logits = "[" + head() + ", " + head() + "]") {
  return "{" + fields + (fields.empty() ? "" : ", ") + "\"logits\": " + logits + "}";
}
const std::string kFields = "\"prompt_len\": 2, \"q_heads_per_kv\": 1";

/// A .npy file with the given header dict and `data_bytes` zero bytes of data.
std::string npy_bytes(const std::string& dict, std::size_t data_bytes) {
  std::string header = dict;
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY", 6) + '\x01' + '\x00';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  return file + header + std::string(data_bytes, '\0');
}

/// Writes the valid causal trace as logits.npy [1, 3, 3] with `x` at (t, j).
std::string npy_with(const rtest::TempDir& dir, const std::string& name, std::size_t t, std::size_t j, float x) {
  replay::Trace tr = rtest::make_trace(1, 3, 2);
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t c = 0; c <= r; ++c) rtest::set_entry(tr, 0, r, c, 0.25f * static_cast<float>(r + c));
  tr.logits[tr.index(0, t, j)] = x;
  std::vector<float> raw = tr.logits;  // save_trace_npy zeroes j > t; write the raw cube instead
  replay::write_npy_f32(dir.file(name), {1, 3, 3}, raw.data());
  return dir.file(name);
}

struct Case {
  const char* name;
  std::function<std::string(const rtest::TempDir&)> args;  // writes its files, returns the arguments
  std::string expected;                                    // substring of the stderr line
};

std::function<std::string(const rtest::TempDir&)> json_case(const std::string& text, const std::string& extra = "") {
  return [text, extra](const rtest::TempDir& dir) { return dir.write("t.json", text) + " " + extra; };
}
std::function<std::string(const rtest::TempDir&)> good_json(const std::string& extra) {
  return json_case(trace_json(kFields), extra);
}
std::function<std::string(const rtest::TempDir&)> npy_case(const std::string& bytes, const std::string& extra = "") {
  return [bytes, extra](const rtest::TempDir& dir) {
    return "--logits " + dir.write("x.npy", bytes) + " --prompt-len 2 " + extra;
  };
}

std::vector<Case> cases() {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 3), }";
  return {
      // ---- JSON structure ----
      {"RaggedRow", json_case(trace_json(kFields, "[" + head() + ", " + head(kRow0, kRow1, "[1, 0]") + "]")),
       "logits[1][2]: expected an array of N = 3 entries, got 2 entries"},
      {"LongRow", json_case(trace_json(kFields, "[" + head(kRow0, "[0.5, 0, null, 7]") + ", " + head() + "]")),
       "logits[0][1]: expected an array of N = 3 entries, got 4 entries"},
      {"MissingRow", json_case(trace_json(kFields, "[[" + std::string(kRow0) + ", " + kRow1 + "], " + head() + "]")),
       "logits[0][0]: expected an array of N = 2 entries, got 3 entries"},
      {"HeadsOfDifferentSizes", json_case(trace_json(kFields, "[" + head() + ", [[0, null], [0, 0]]]")),
       "logits[1]: expected an array of N = 3 rows, got 2 rows"},
      {"LogitsNotAnArray", json_case(trace_json(kFields, "5")), "logits: must be an array [H_q][N][N]"},
      {"LogitsEmpty", json_case(trace_json(kFields, "[]")), "logits: has no query heads"},
      {"LogitsMissing", json_case("{" + kFields + "}"), "logits: missing"},
      {"EntryNotANumber", json_case(trace_json(kFields, "[" + head(kRow0, "[0.5, \"x\", null]") + ", " + head() + "]")),
       "logits[0][1][1]: expected a number, got a string"},
      {"NullInsideTheCausalPart",
       json_case(trace_json(kFields, "[" + head() + ", " + head(kRow0, kRow1, "[1, null, 0]") + "]")),
       "logits[1][2][1]: null inside the causal part"},
      {"PromptLongerThanTrace", json_case(trace_json("\"prompt_len\": 4")),
       "prompt_len: P = 4 exceeds the trace's N = 3"},
      {"PromptLenZero", json_case(trace_json("\"prompt_len\": 0")), "prompt_len: must be >= 1 (got 0)"},
      {"PromptLenNegative", json_case(trace_json("\"prompt_len\": -1")), "prompt_len: must be >= 1 (got -1)"},
      {"PromptLenNotAnInteger", json_case(trace_json("\"prompt_len\": 1.5")), "prompt_len: must be an integer"},
      {"PromptLenMissing", json_case(trace_json("")), "prompt_len: missing"},
      {"HeadsNotDivisibleByGroup", json_case(trace_json("\"prompt_len\": 2, \"q_heads_per_kv\": 3")),
       "q_heads_per_kv: H_q = 2 query heads are not divisible by g = 3"},
      {"GroupZero", json_case(trace_json("\"prompt_len\": 2, \"q_heads_per_kv\": 0")), "q_heads_per_kv: must be >= 1"},
      {"UnknownField", json_case(trace_json(kFields + ", \"gumble\": []")), "gumble: unknown field"},
      {"GumbelWithOtherHeadCount", json_case(trace_json(kFields + ", \"gumbel\": [" + head() + "]")),
       "gumbel: has 1 query heads, logits has 2"},
      {"GumbelRagged", json_case(trace_json(kFields + ", \"gumbel\": [" + head() + ", " + head(kRow0, "[1]") + "]")),
       "gumbel[1][1]: expected an array of N = 3 entries"},
      {"InvalidJson", json_case("{\"prompt_len\": 2, \"logits\": [[[NaN]]]}"), "invalid JSON"},
      {"EmptyFile", json_case(""), "invalid JSON"},
      {"TopLevelNotAnObject", json_case("[1, 2]"), "the top level must be a JSON object"},
      {"UnreadableFile", [](const rtest::TempDir& dir) { return dir.file("missing.json"); },
       "missing.json': cannot open (No such file or directory)"},
      {"DirectoryInsteadOfFile", [](const rtest::TempDir& dir) { return dir.file(""); }, "is a directory"},
      // ---- options ----
      {"UnknownPolicy", good_json("--policy lru"), "--policy: unknown policy 'lru'"},
      {"KeyNormNeedsKeys", good_json("--policy knorm"),
       "--policy: knorm scores each token from its key, which a trace of logits does not hold"},
      {"KeyDiffNeedsKeys", good_json("--policy keydiff"),
       "--policy: keydiff scores each token from its key, which a trace of logits does not hold"},
      {"RecentLargerThanBudget", good_json("--budget 2 --recent 3"), "--recent: w = 3 exceeds the budget k = 2"},
      {"BudgetZero", good_json("--budget 0"), "--budget: must be >= 1 (got 0)"},
      {"BudgetNegative", good_json("--budget -1"),
       "--budget: expected a token count such as 64, a fraction of the prompt such as 0.5 or a percentage such as 50% "
       "(no sign), got '-1'"},
      {"BudgetNotANumber", good_json("--budget ten"), "--budget"},
      {"BudgetTooLarge", good_json("--budget 18446744073709551615 --recent-ratio 1"),
       "--budget: k = 18446744073709551615 exceeds 2^53"},
      {"WindowWithRecent", good_json("--policy window --budget 2 --recent 1"), "--recent: streaming and window keep"},
      {"BudgetRatioNegative", good_json("--budget-ratio=-0.5"), "--budget-ratio: must be above 0 (got -0.5)"},
      {"BudgetAndBudgetRatio", good_json("--budget 1 --budget-ratio 0.5"), "--budget excludes --budget-ratio"},
      {"RecentRatioAboveOne", good_json("--recent-ratio 1.5"),
       "--recent-ratio: a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got 1.5)"},
      {"TovaRecentAboveBudget", good_json("--policy tova --budget 2 --recent 3"), "--recent: w = 3 exceeds the budget k = 2"},
      {"SinksAboveBudget", good_json("--policy streaming --budget 2 --sinks 3"),
       "--sinks: S = 3 exceeds the budget k = 2"},
      {"TauInitZero", good_json("--tau-init 0"), "--tau-init: must be finite and > 0"},
      {"TauEndNaN", good_json("--tau-end nan"), "--tau-end"},
      {"GenStepsZero", good_json("--gen-steps 0"), "--gen-steps: must be >= 1 (got 0)"},
      {"NoiseTraceWithoutGumbel", good_json("--noise trace"), "--noise: 'trace' needs a gumbel array"},
      {"UnknownNoise", good_json("--noise loud"), "--noise: unknown value 'loud'"},
      {"UnknownOption", good_json("--budgett 3"), "--budgett"},
      {"NoTrace", [](const rtest::TempDir&) { return std::string(); }, "trace: give a JSON trace file"},
      {"TraceAndLogits", good_json("--logits x.npy"), "excludes"},
      {"GumbelWithoutLogits", good_json("--gumbel z.npy"), "--gumbel requires --logits"},
      // ---- .npy ----
      {"NaNInsideTheCausalPart",
       [](const rtest::TempDir& dir) {
         return "--logits " + npy_with(dir, "x.npy", 1, 0, rtest::kNaN) + " --prompt-len 2";
       },
       "logits[0][1][0]: is NaN"},
      {"PlusInfInsideTheCausalPart",
       [](const rtest::TempDir& dir) {
         return "--logits " + npy_with(dir, "x.npy", 2, 2, rtest::kInf) + " --prompt-len 2";
       },
       "logits[0][2][2]: is +inf"},
      {"NotNpy", npy_case("{\"prompt_len\": 1}"), "not a .npy file"},
      {"NpyFloat64", npy_case(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 3, 3), }", 72)),
       "dtype '<f8' is not little-endian float32 '<f4'"},
      {"NpyBigEndian", npy_case(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (1, 3, 3), }", 36)),
       "dtype '>f4'"},
      {"NpyFortranOrder", npy_case(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3, 3), }", 36)),
       "Fortran order is not supported"},
      {"NpyTwoDimensional", npy_case(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3), }", 36)),
       "shape (3, 3) is not [H_q, N, N]"},
      {"NpyNotSquare", npy_case(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 4), }", 48)),
       "shape (1, 3, 4) is not [H_q, N, N]"},
      {"NpyTruncated", npy_case(npy_bytes(good_dict, 35)),
       "data part has 35 bytes, the shape needs 36 (truncated file)"},
      {"NpyTrailingBytes", npy_case(npy_bytes(good_dict, 40)), "data part has 40 bytes, the shape needs 36"},
      {"NpyMalformedHeader", npy_case(npy_bytes("{'descr': '<f4', 'shape': (1, 3, 3), }", 36)),
       "missing 'fortran_order'"},
      {"NpyWithoutPromptLen",
       [](const rtest::TempDir& dir) { return "--logits " + npy_with(dir, "x.npy", 0, 0, 0.0f); },
       "--prompt-len: required with --logits"},
      {"NpyPromptLenZero",
       [](const rtest::TempDir& dir) { return "--logits " + npy_with(dir, "x.npy", 0, 0, 0.0f) + " --prompt-len 0"; },
       "prompt_len: must be >= 1 (got 0)"},
      {"NpyMissingFile",
       [](const rtest::TempDir& dir) { return "--logits " + dir.file("nope.npy") + " --prompt-len 1"; }, "--logits '"},
      {"GumbelShapeDiffers",
       [](const rtest::TempDir& dir) {
         const std::vector<float> z(2 * 9, 0.0f);
         replay::write_npy_f32(dir.file("z.npy"), {2, 3, 3}, z.data());
         return "--logits " + npy_with(dir, "x.npy", 0, 0, 0.0f) + " --gumbel " + dir.file("z.npy") + " --prompt-len 2";
       },
       "shape (2, 3, 3) differs from the logits' (1, 3, 3)"},
      {"GumbelNotFinite",
       [](const rtest::TempDir& dir) {
         npy_with(dir, "z.npy", 1, 1, -rtest::kInf);
         return "--logits " + npy_with(dir, "x.npy", 0, 0, 0.0f) + " --gumbel " + dir.file("z.npy") + " --prompt-len 2";
       },
       "gumbel[0][1][1]: must be finite"},
  };
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, PrintsOneLineNamingTheFieldAndExitsWith2) {
  rtest::TempDir dir;
  const Case& c = GetParam();
  const auto run = rtest::run_replay(dir, c.args(dir));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.out, "");
  ASSERT_FALSE(run.err.empty());
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "more than one line: " << run.err;
  EXPECT_EQ(run.err.rfind("kvevict-replay: ", 0), 0u) << run.err;
  EXPECT_NE(run.err.find(c.expected), std::string::npos) << "stderr: " << run.err << "expected: " << c.expected;
}

INSTANTIATE_TEST_SUITE_P(Replay, BadInput, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(ReplayInput, EntriesAboveTheDiagonalAreIgnored) {
  // NaN, +inf, null or any number above the diagonal (j > t) change nothing.
  rtest::TempDir dir;
  const auto base = rtest::run_replay(dir, dir.write("a.json", trace_json(kFields)) + " --policy h2o --budget 1");
  const auto junk =
      rtest::run_replay(dir, dir.write("b.json", trace_json(kFields, "[[[0, 1e30, -5], [0.5, 0, 3], " +
                                                                         std::string(kRow2) + "], " + head() + "]")) +
                                 " --policy h2o --budget 1");
  const auto npy = rtest::run_replay(
      dir, "--logits " + npy_with(dir, "x.npy", 0, 2, rtest::kNaN) + " --prompt-len 2 --policy h2o --budget 1");
  const auto npy_inf = rtest::run_replay(
      dir, "--logits " + npy_with(dir, "y.npy", 1, 2, rtest::kInf) + " --prompt-len 2 --policy h2o --budget 1");
  EXPECT_EQ(base.exit_code, 0) << base.err;
  EXPECT_EQ(base.out, junk.out);
  EXPECT_EQ(npy.exit_code, 0) << npy.err;
  EXPECT_EQ(npy_inf.exit_code, 0) << npy_inf.err;
  EXPECT_EQ(npy.out, npy_inf.out);
}

TEST(ReplayInput, ARatioBudgetResolvesToAtLeastOneToken) {
  // k = max(1, floor(r * P)); 10% of P = 2 keeps one token (it used to
  // be an error), the same with --budget 10% and --budget-ratio 0.1, and the summary says k = 1.
  rtest::TempDir dir;
  const std::string file = dir.write("t.json", trace_json(kFields));
  const auto pct = rtest::run_replay(dir, file + " --policy h2o --budget 10%");
  const auto ratio = rtest::run_replay(dir, file + " --policy h2o --budget-ratio 0.1");
  ASSERT_EQ(pct.exit_code, 0) << pct.err;
  ASSERT_EQ(ratio.exit_code, 0) << ratio.err;
  EXPECT_EQ(pct.out, ratio.out);
  const auto lines = pct.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["kept"][0].size(), 1u);
  EXPECT_EQ(lines[1]["kept"][0].size(), 1u);
  EXPECT_NE(pct.err.find("[h2o k=1 w=0 sinks=0]"), std::string::npos) << pct.err;
}

TEST(ReplayInput, MinusInfinityMasksAnEntry) {
  // Row 1 = {-inf, 0.5}: position 1 takes the whole row. Row 2 = {0.5, 0.75, 1} adds its softmax
  // (0.25428, 0.32650, 0.41923): scores 1.25428, 1.32650, 0.41923; k = 2 keeps 0 and 1.
  rtest::TempDir dir;
  const auto run = rtest::run_replay(
      dir, "--logits " + npy_with(dir, "x.npy", 1, 0, -rtest::kInf) +
               " --prompt-len 3 --policy h2o --budget 2 --recent 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = run.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["kept"], rtest::json::parse("[[0, 1]]"));
  EXPECT_NEAR(lines[0]["scores"][0][0].get<double>(), 1.25428, 1e-4);
  EXPECT_NEAR(lines[0]["scores"][0][1].get<double>(), 1.32650, 1e-4);
}

}  // namespace
