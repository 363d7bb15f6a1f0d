// tests/cli/cli_quality_test.cpp — kvevict-quality's runs on stories260K and TinyStories (skipped without
// ../shared unless KVEVICT_REQUIRE_MODELS=1): every output written whole, retrieval, row specs, per-layer
// budgets, --step-threads, the paged layout against --shared-heads, and chunked prefill against one-shot.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_workspace.hpp"

namespace fs = std::filesystem;

namespace {

using cli_test::binary;
using cli_test::expand;
using cli_test::kSmall;
using cli_test::shared;
using cli_test::slurp;
using cli_test::Tool;
using cli_test::ToolRun;
using cli_test::Workspace;

// a quality run writes every output whole, through temporary files that it renames.
TEST(CliQuality, TinyRunWritesEveryOutputAndNoTemporaryFile) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qrun");
  fs::create_directories(out);
  const ToolRun run = Workspace::get().run(binary(Tool::quality),
                                       expand(kSmall) +
                                           "--data " + shared() + "/data/tinystories-val/tinystories_val.txt --windows 1 --ratios 0.5 --seeds 1 "
                                           "--window 64 --prompt 32 --threads 1 "
                                           "--out " + out + "/q");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"q.csv", "q.gp", "q_plot.dat", "q_summary.csv"}));
  const std::string csv = slurp(out + "/q.csv");
  EXPECT_EQ(csv.rfind("policy,ratio,k,w,seed,window,nll,kl,top1\nfull,1,32,0,0,0,", 0), 0u) << csv;
  // k = floor(0.5 * 32) = 16; w = floor(0.3 * 16) = 4; streaming keeps 4 sinks + the last 12; window the last 16.
  EXPECT_NE(csv.find("\nh2o,0.5,16,4,0,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nstreaming,0.5,16,12,0,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nwindow,0.5,16,16,0,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\ntova,0.5,16,0,0,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nsnapkv,0.5,16,4,0,0,"), std::string::npos) << csv;  // L = min(32, 16)
}

// Retrieval batches the one-shot rows with the full cache and answers a chunked-prefill row (here a
// bounded one) alone: both kinds answer every prompt.
TEST(CliQuality, RetrievalAnswersWithBatchedAndChunkedRows) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string docs = Workspace::get().file("qdocs"), out = Workspace::get().file("qret");
  fs::create_directories(docs);
  fs::create_directories(out);
  const std::string text = slurp(shared() + "/data/tinystories-val/tinystories_val.txt");
  for (int d = 0; d < 2; ++d) {
    std::ofstream f(docs + "/doc" + std::to_string(d) + ".txt");
    f << text.substr(static_cast<std::size_t>(d) * 20000, 20000);
  }
  const ToolRun run = Workspace::get().run(
      binary(Tool::quality), expand(kSmall) + "--data " + docs + " --retrieval 1 --prompt 256 --window 258 " +
                                 "--ratios 0.5 --policies h2o,h2o+bounded16 --seeds 1 --threads 1 --out " + out + "/q");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string csv = slurp(out + "/q_retrieval.csv");
  std::size_t h2o = 0, bounded = 0, pos = 0;
  while ((pos = csv.find("\nh2o,0.5,", pos)) != std::string::npos) ++h2o, ++pos;
  pos = 0;
  while ((pos = csv.find("\nh2o+bounded16,0.5,", pos)) != std::string::npos) ++bounded, ++pos;
  EXPECT_EQ(h2o, 3u) << csv;  // one prompt per depth
  EXPECT_EQ(bounded, 3u) << csv;
}

// Row specs: every variant is its own row, in the order asked, with its own k, w and seeds;
// the ablations change the numbers; the oracle runs beside the policies against the same reference.
// kvevict-quality on one 64-token window of TinyStories at ratio 0.5 (k = 16 of a 32-token prompt) with `flags`,
// its files under Workspace's `folder`/q*.
ToolRun run_rows(const std::string& folder, const std::string& flags) {
  const std::string out = Workspace::get().file(folder);
  fs::create_directories(out);
  return Workspace::get().run(
      binary(Tool::quality),
      expand(kSmall) + "--data " + shared() + "/data/tinystories-val/tinystories_val.txt --windows 1 --ratios 0.5 "
                       "--window 64 --prompt 32 --threads 1 " + flags + " --out " + out + "/q");
}

// The line of `csv` that starts with `prefix` (empty if none).
std::string csv_row(const std::string& csv, const std::string& prefix) {
  const std::size_t at = csv.find("\n" + prefix);
  return at == std::string::npos ? std::string() : csv.substr(at + 1, csv.find('\n', at + 1) - at - 1);
}

TEST(CliQuality, RowSpecsRunEveryVariantAgainstOneReference) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qrows");
  const ToolRun run = run_rows("qrows", "--policies h2o,h2o+shared,h2o+reindexed,h2o+bounded8,"
                                        "keyformer@recent=0.5@seeds=2,h2o+pyramid,oracle");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string csv = slurp(out + "/q.csv");
  auto row = [&](const std::string& prefix) { return csv_row(csv, prefix); };
  // k = 16; w = floor(0.3 * 16) = 4, with @recent=0.5 floor(0.5 * 16) = 8; the oracle's w is h2o's.
  for (const char* r : {"h2o,0.5,16,4,0,0,", "h2o+shared,0.5,16,4,0,0,", "h2o+reindexed,0.5,16,4,0,0,",
                        "h2o+bounded8,0.5,16,4,0,0,", "keyformer@recent=0.5@seeds=2,0.5,16,8,1,0,",
                        "keyformer@recent=0.5@seeds=2,0.5,16,8,2,0,", "h2o+pyramid,0.5,16,4,0,0,", "oracle,0.5,16,4,0,0,"})
    EXPECT_FALSE(row(r).empty()) << r << "\n" << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 10);  // header + full + 8 runs
  // Rows in the order asked.
  EXPECT_LT(csv.find("\nh2o+shared,"), csv.find("\nh2o+reindexed,"));
  EXPECT_LT(csv.find("\nh2o+pyramid,"), csv.find("\noracle,"));
  // Shared selection and re-indexed positions change h2o's numbers (columns after the window index).
  auto numbers = [&](const std::string& prefix) { const std::string r = row(prefix); return r.substr(r.find(",0,0,") + 5); };
  EXPECT_NE(numbers("h2o,"), numbers("h2o+shared,"));
  EXPECT_NE(numbers("h2o,"), numbers("h2o+reindexed,"));
  const std::string summary = slurp(out + "/q_summary.csv");
  // The summary's last columns: w and the runs averaged (2 seeds).
  EXPECT_NE(summary.find("\nkeyformer@recent=0.5@seeds=2,0.5,16,"), std::string::npos) << summary;
  EXPECT_NE(summary.find(",8,2\n"), std::string::npos) << summary;
  EXPECT_NE(run.out.find("| oracle |"), std::string::npos) << run.out;
}

// The tool-wide --recent is the window of the policies that keep one by default; TOVA and the expected-attention rows
// (ranked by TOVA) keep none unless their own @recent gives one.
TEST(CliQuality, ToolRecentLeavesTovaWithoutAWindowUnlessItsRowGivesOne) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qtova");
  const ToolRun run = run_rows("qtova", "--recent 0.5 --policies h2o,tova,tova@recent=0.25,expected-attention");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string csv = slurp(out + "/q.csv");
  // k = 16: h2o takes --recent 0.5 (w = 8); tova none; tova@recent=0.25 w = 4; expected-attention none.
  for (const char* r : {"\nh2o,0.5,16,8,0,0,", "\ntova,0.5,16,0,0,0,", "\ntova@recent=0.25,0.5,16,4,0,0,",
                        "\nexpected-attention,0.5,16,0,0,0,"})
    EXPECT_NE(csv.find(r), std::string::npos) << r << "\n" << csv;
  // The window changes TOVA's numbers (columns after the window index).
  auto numbers = [&](const std::string& prefix) {
    const std::string r = csv_row(csv, prefix);
    return r.substr(r.find(",0,0,") + 5);
  };
  EXPECT_NE(numbers("tova,"), numbers("tova@recent=0.25,"));
}

// --layer-budgets applies to the whole sweep and labels every row; the snapkv row states its parameters.
TEST(CliQuality, LayerBudgetsLabelTheRowsAndSnapKVStatesItsParameters) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qlayers");
  fs::create_directories(out);
  const ToolRun run = Workspace::get().run(
      binary(Tool::quality), expand(kSmall) + "--data " + shared() +
                                 "/data/tinystories-val/tinystories_val.txt --windows 1 --ratios 0.5 --policies "
                                 "h2o,snapkv --snap-window 8 --snap-pooling avg --snap-kernel 5 --layer-budgets pyramid "
                                 "--window 64 --prompt 32 --threads 1 --out " + out + "/q");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string csv = slurp(out + "/q.csv");
  EXPECT_NE(csv.find("\nh2o+pyramid,0.5,16,4,0,0,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nsnapkv+pyramid,0.5,16,4,0,0,"), std::string::npos) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);  // header + full + 2 rows (1 window)
  EXPECT_NE(run.out.find("| h2o+pyramid |"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("Per-layer budgets: pyramid"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("SnapKV: observation window L = 8, pooling avg over K = 5, decode h2o."), std::string::npos)
      << run.out;
}

// --step-threads runs every engine's step on a pool; the CSV is the same bytes.
TEST(CliQuality, StepThreadsGiveTheSameCsv) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  std::string csv[2];
  for (int i = 0; i < 2; ++i) {
    const std::string out = Workspace::get().file(i == 0 ? "qstep1" : "qstep3");
    fs::create_directories(out);
    const ToolRun run = Workspace::get().run(
        binary(Tool::quality), expand(kSmall) + "--data " + shared() +
                                   "/data/tinystories-val/tinystories_val.txt --windows 2 --ratios 0.3 --seeds 2 "
                                   "--window 64 --prompt 32 --threads 1 --step-threads " + (i == 0 ? "1" : "3") +
                                   " --out " + out + "/q");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    csv[i] = slurp(out + "/q.csv");
  }
  EXPECT_EQ(csv[0], csv[1]);
  EXPECT_NE(csv[0].find("\nkeyformer,0.3,"), std::string::npos) << csv[0];
}

// kvevict-quality takes kvevict-generate's paged flags: the paged token unit reports, number for number,
// what --shared-heads reports on the contiguous layout; the page unit runs and says so in its first lines.
TEST(CliQuality, PagedTokenUnitReportsTheNumbersOfSharedHeads) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qpaged");
  fs::create_directories(out);
  auto quality = [&](const std::string& name, const std::string& layout) {
    return Workspace::get().run(binary(Tool::quality),
                                expand(kSmall) + "--data " + shared() +
                                    "/data/tinystories-val/tinystories_val.txt --windows 1 --ratios 0.5 --seeds 1 "
                                    "--window 64 --prompt 32 --threads 1 --out " + out + "/" + name + " " + layout);
  };
  const ToolRun shared_heads = quality("shared", "--shared-heads");
  const ToolRun token = quality("token", "--kv-layout paged --page-size 8 --evict-unit token");
  const ToolRun page = quality("page", "--kv-layout paged --page-size 8 --evict-unit page");
  const ToolRun per_head = quality("perhead", "");
  for (const ToolRun* r : {&shared_heads, &token, &page, &per_head}) ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_NE(shared_heads.out.find("KV layout of the policies: contiguous, --shared-heads"), std::string::npos);
  EXPECT_NE(token.out.find("KV layout of the policies: paged, page size 8, evict unit token"), std::string::npos);
  EXPECT_NE(page.out.find("KV layout of the policies: paged, page size 8, evict unit page"), std::string::npos);
  EXPECT_NE(per_head.out.find("KV layout of the policies: contiguous (one selection per KV head)"), std::string::npos);
  const std::string shared_csv = slurp(out + "/shared.csv"), token_csv = slurp(out + "/token.csv"),
                    page_csv = slurp(out + "/page.csv");
  // k = 16, w = 4: every policy row of the paged token unit equals the shared-heads row, digit for digit.
  EXPECT_NE(shared_csv.find("\nh2o,0.5,16,4,0,0,"), std::string::npos) << shared_csv;
  EXPECT_EQ(token_csv, shared_csv);
  EXPECT_EQ(slurp(out + "/token_summary.csv"), slurp(out + "/shared_summary.csv"));
  // The page unit evicts whole pages of 8 from 32 + 31 tokens at k = 16: other numbers, same rows.
  EXPECT_NE(page_csv, shared_csv);
  EXPECT_NE(page_csv.find("\nh2o,0.5,16,4,0,0,"), std::string::npos) << page_csv;
  EXPECT_EQ(std::count(page_csv.begin(), page_csv.end(), '\n'), std::count(shared_csv.begin(), shared_csv.end(), '\n'));
}

// kvevict-quality --prefill-chunk: unbounded chunked prefill equals the one-shot prefill, so every
// deterministic row reports the same numbers digit for digit; --bounded-prefill runs and says so, and when
// the budget holds the whole prompt (r = 1: nothing is evicted before the prompt ends) it reports the
// one-shot numbers too.
TEST(CliQuality, ChunkedPrefillReportsTheOneShotNumbers) {
  if (*binary(Tool::quality) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  KVEVICT_REQUIRE_SHARED_FILE(shared() + "/data/tinystories-val/tinystories_val.txt");
  const std::string out = Workspace::get().file("qchunk");
  fs::create_directories(out);
  auto quality = [&](const std::string& name, const std::string& extra) {
    return Workspace::get().run(binary(Tool::quality),
                                expand(kSmall) + "--data " + shared() +
                                    "/data/tinystories-val/tinystories_val.txt --windows 1 "
                                    "--policies keyformer-nonoise,h2o,window,tova --window 64 --prompt 32 "
                                    "--threads 1 --out " + out + "/" + name + " " + extra);
  };
  const ToolRun one_shot = quality("oneshot", "--ratios 0.5");
  const ToolRun chunked = quality("chunked", "--ratios 0.5 --prefill-chunk 7");
  const ToolRun bounded = quality("bounded", "--ratios 0.5 --prefill-chunk 8 --bounded-prefill");
  const ToolRun one_shot_all = quality("oneshot_all", "--ratios 1");
  const ToolRun bounded_all = quality("bounded_all", "--ratios 1 --prefill-chunk 8 --bounded-prefill");
  for (const ToolRun* r : {&one_shot, &chunked, &bounded, &one_shot_all, &bounded_all})
    ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(one_shot.out.find("Prefill of the policies"), std::string::npos);
  EXPECT_NE(chunked.out.find("Prefill of the policies: chunks of 7 tokens (unbounded: equals the one-shot prefill)"),
            std::string::npos) << chunked.out;
  EXPECT_NE(bounded.out.find("Prefill of the policies: chunks of 8 tokens, bounded (cut to k after every chunk: at "
                             "most k + 8 tokens held during the prompt)"),
            std::string::npos) << bounded.out;
  const std::string one_csv = slurp(out + "/oneshot.csv");
  // Only the asked rows, in the asked order: full, keyformer-nonoise, h2o, window, tova (k = 16, w = 4).
  EXPECT_NE(one_csv.find("\nkeyformer-nonoise,0.5,16,4,0,0,"), std::string::npos) << one_csv;
  EXPECT_NE(one_csv.find("\ntova,0.5,16,0,0,0,"), std::string::npos) << one_csv;
  EXPECT_EQ(one_csv.find("\nkeyformer,"), std::string::npos) << one_csv;
  EXPECT_EQ(one_csv.find("\nstreaming,"), std::string::npos) << one_csv;
  EXPECT_EQ(std::count(one_csv.begin(), one_csv.end(), '\n'), 6);  // header + full + 4 rows (1 window)
  EXPECT_EQ(slurp(out + "/chunked.csv"), one_csv);
  // Bounded at k = 16 < 32: later prompt tokens see a cut cache, so the rows differ but are all there.
  const std::string bounded_csv = slurp(out + "/bounded.csv");
  EXPECT_EQ(std::count(bounded_csv.begin(), bounded_csv.end(), '\n'), 6);
  EXPECT_NE(bounded_csv.find("\nwindow,0.5,16,"), std::string::npos) << bounded_csv;
  // k = 32 = the prompt: a bounded prefill never cuts before the prompt ends, the numbers are the one-shot ones.
  const std::string one_all_csv = slurp(out + "/oneshot_all.csv");
  EXPECT_NE(one_all_csv.find("\nh2o,1,32,9,0,0,"), std::string::npos) << one_all_csv;
  EXPECT_EQ(slurp(out + "/bounded_all.csv"), one_all_csv);
}

}  // namespace
