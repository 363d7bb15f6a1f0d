// tests/cli/cli_generate_test.cpp — kvevict-generate's runs end to end on the synthetic context-128 checkpoint:
// the token predicted at the last position, the paged KV layout (the ids of --shared-heads), --threads and
// --prefill-chunk (the same ids), and the paged and chunked-prefill flags checked and named.
#include <gtest/gtest.h>

#include <string>

#include "cli_workspace.hpp"

namespace {

using cli_test::ToolRun;
using cli_test::Workspace;

// on an unseen checkpoint with context 128, a lone BOS and --steps 128 give 128 ids;
// the 128th is predicted from position 127 and needs no position 128 (llama2.c prints 128 too).
TEST(CliGenerate, GeneratesUpToTheTokenPredictedAtTheLastPosition) {
  const ToolRun run = Workspace::get().run(KVEVICT_GENERATE_BIN,
                                       "--model tiny.bin --policy full --temperature 0 --prompt-ids 1 --print-ids --steps 128");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out_lines(), 128u);
  EXPECT_NE(run.err.find("generated 128 tok"), std::string::npos) << run.err;
  // Positions 0..127 hold the BOS and the first 127 generated tokens; the 128th is never fed.
  EXPECT_NE(run.err.find("retained per layer: 128 128 of 128 |"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("stopped: the model's context of 128 positions is reached"), std::string::npos) << run.err;
  // The first 127 ids are the same as those of a run asked for 127 (which stops at --steps).
  const ToolRun shorter = Workspace::get().run(KVEVICT_GENERATE_BIN,
                                           "--model tiny.bin --policy full --temperature 0 --prompt-ids 1 --print-ids --steps 127");
  ASSERT_EQ(shorter.exit_code, 0) << shorter.err;
  EXPECT_EQ(run.out.substr(0, shorter.out.size()), shorter.out);
  EXPECT_NE(shorter.err.find("stopped: --steps 127 tokens generated"), std::string::npos) << shorter.err;
}

// ---- paged KV layout ----

TEST(CliGenerate, PagedTokenUnitPrintsTheIdsOfSharedHeadsForEveryPolicy) {
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova"}) {
    const std::string common = std::string("--model tiny.bin --policy ") + policy +
                               " --budget 16 --temperature 0 --prompt-ids 1,5,9 --print-ids --steps 60";
    const ToolRun shared = Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --shared-heads");
    const ToolRun paged =
        Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --kv-layout paged --page-size 16 --evict-unit token");
    ASSERT_EQ(shared.exit_code, 0) << shared.err;
    ASSERT_EQ(paged.exit_code, 0) << paged.err;
    EXPECT_EQ(paged.out, shared.out) << policy;
    EXPECT_EQ(paged.out_lines(), 60u) << policy;
    EXPECT_NE(paged.err.find("| pages in use "), std::string::npos) << paged.err;
    const ToolRun page_unit =
        Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --kv-layout paged --page-size 4 --evict-unit page");
    ASSERT_EQ(page_unit.exit_code, 0) << page_unit.err;
    EXPECT_NE(page_unit.err.find("(page size 4, page unit)"), std::string::npos) << page_unit.err;
    EXPECT_EQ(page_unit.err.find("freed 0 "), std::string::npos) << page_unit.err;  // pages were freed
  }
}

// --threads N runs the engine's step (attention heads, the caches' scoring) on N workers
// with the same ids for every N and every policy (Keyformer with its drawn noise; sampling on).
TEST(CliGenerate, ThreadsGiveTheSameIdsForEveryCount) {
  for (const char* policy : {"keyformer", "h2o", "streaming", "window", "tova"}) {
    for (const char* layout : {"", " --kv-layout paged --page-size 16"}) {
      const std::string common = std::string("--model tiny.bin --policy ") + policy +
                                 " --budget 12 --seed 3 --prompt-ids 1,5,9,3,7,11,2,4,6,8,10,12,14,16 --print-ids "
                                 "--steps 30" + layout;
      const ToolRun one = Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --threads 1");
      ASSERT_EQ(one.exit_code, 0) << one.err;
      EXPECT_GE(one.out_lines(), 1u) << policy;  // sampling may stop at the end-of-text token
      for (const char* threads : {"2", "3", "7"}) {
        const ToolRun par = Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --threads " + threads);
        ASSERT_EQ(par.exit_code, 0) << par.err;
        EXPECT_EQ(par.out, one.out) << policy << layout << " --threads " << threads;
      }
    }
  }
}

// --prefill-chunk reproduces the one-shot greedy ids for every policy (Keyformer with its
// drawn noise, the same for every chunking), and --bounded-prefill runs; the flags are validated and named.
TEST(CliGenerate, PrefillChunkReproducesTheOneShotIds) {
  const std::string prompt = "--prompt-ids 1,5,9,3,7,11,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,1,3,5,7,9,11,13";
  for (const char* policy : {"full", "keyformer", "h2o", "streaming", "window", "tova"}) {
    const bool full = std::string(policy) == "full";  // the full cache takes no --budget
    const std::string common = std::string("--model tiny.bin --policy ") + policy + (full ? "" : " --budget 8") +
                               " --temperature 0 " + prompt + " --print-ids --steps 40";
    const ToolRun one = Workspace::get().run(KVEVICT_GENERATE_BIN, common);
    ASSERT_EQ(one.exit_code, 0) << one.err;
    EXPECT_EQ(one.out_lines(), 40u) << policy;
    for (const char* chunk : {"1", "5", "64"}) {
      const ToolRun chunked = Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --prefill-chunk " + chunk);
      ASSERT_EQ(chunked.exit_code, 0) << chunked.err;
      EXPECT_EQ(chunked.out, one.out) << policy << " --prefill-chunk " << chunk;
    }
    if (full) continue;
    const ToolRun bounded =
        Workspace::get().run(KVEVICT_GENERATE_BIN, common + " --prefill-chunk 4 --bounded-prefill");
    ASSERT_EQ(bounded.exit_code, 0) << bounded.err;
    EXPECT_EQ(bounded.out_lines(), 40u) << policy;
    EXPECT_NE(bounded.err.find("retained per layer: 8 8 of"), std::string::npos) << bounded.err;
  }
}

TEST(CliGenerate, PrefillChunkFlagsAreValidatedAndNamed) {
  const std::string base = "--model tiny.bin --policy h2o --prompt-ids 1,2,3 --print-ids --steps 2 ";
  const ToolRun zero = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--prefill-chunk 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--prefill-chunk"), std::string::npos) << zero.err;
  const ToolRun alone = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--bounded-prefill");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--bounded-prefill"), std::string::npos) << alone.err;
  const ToolRun full = Workspace::get().run(
      KVEVICT_GENERATE_BIN, "--model tiny.bin --policy full --prompt-ids 1,2 --print-ids --steps 2 --prefill-chunk 2 "
                            "--bounded-prefill");
  EXPECT_EQ(full.exit_code, 2);
  EXPECT_NE(full.err.find("--bounded-prefill: needs an evicting --policy (got full)"), std::string::npos) << full.err;
  const ToolRun paged = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--kv-layout paged --prefill-chunk 2");
  EXPECT_EQ(paged.exit_code, 2);
  EXPECT_NE(paged.err.find("--prefill-chunk: needs the contiguous KV layout"), std::string::npos) << paged.err;
  const ToolRun big = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--budget 120 --prefill-chunk 64 --bounded-prefill");
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_NE(big.err.find("--bounded-prefill: budget k = 120 plus --prefill-chunk 64 exceeds"), std::string::npos)
      << big.err;
}

TEST(CliGenerate, PagedFlagsAreValidatedAndNamed) {
  const std::string base = "--model tiny.bin --policy h2o --prompt-ids 1 --print-ids --steps 2 ";
  const ToolRun no_layout = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--page-size 8");
  EXPECT_EQ(no_layout.exit_code, 2);
  EXPECT_NE(no_layout.err.find("--page-size: needs --kv-layout paged"), std::string::npos) << no_layout.err;
  const ToolRun unit = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--evict-unit page");
  EXPECT_EQ(unit.exit_code, 2);
  EXPECT_NE(unit.err.find("--evict-unit: needs --kv-layout paged"), std::string::npos) << unit.err;
  const ToolRun layout = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--kv-layout blocks");
  EXPECT_EQ(layout.exit_code, 2);
  EXPECT_NE(layout.err.find("--kv-layout: unknown layout 'blocks'"), std::string::npos) << layout.err;
  const ToolRun bad_unit = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--kv-layout paged --evict-unit slab");
  EXPECT_EQ(bad_unit.exit_code, 2);
  EXPECT_NE(bad_unit.err.find("--evict-unit: unknown unit 'slab'"), std::string::npos) << bad_unit.err;
  const ToolRun zero = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--kv-layout paged --page-size 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--page-size"), std::string::npos) << zero.err;
  // A page count that wrapped to 0 ("num_pages must be in [1, 2^31 - 1] (got 0)") and a page that
  // exhausted memory (exit 1) are both usage errors naming the flag now.
  for (const char* huge : {"18446744073709551615", "4294967297"}) {
    const ToolRun r = Workspace::get().run(KVEVICT_GENERATE_BIN, base + "--kv-layout paged --page-size " + huge);
    EXPECT_EQ(r.exit_code, 2) << huge;
    EXPECT_NE(r.err.find(std::string("--page-size: expected an integer in [1, 4096], got '") + huge + "'"),
              std::string::npos)
        << r.err;
  }
}

}  // namespace
