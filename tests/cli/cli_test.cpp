// tests/cli/cli_test.cpp — the three command-line tools (kvevict-generate, kvevict-replay, kvevict-quality)
// driven as a user would: every case a user reported (and the last position of the context)
// asserts the exit code and that stderr names the flag the user typed, in one line; and every tool's --help.
//
// Generate cases run on synthetic llama2.c checkpoints written here (context 128); the cases that need
// the real stories260K model, its tokenizers or TinyStories (tokenizer vs model, the end-of-story
// token, a quality run) look in $KVEVICT_SHARED_DIR and are skipped without it, unless
// KVEVICT_REQUIRE_MODELS=1 (CI), which makes them fail. The workspace and running a tool: cli_workspace.hpp;
// kvevict-generate's runs: cli_generate_test.cpp; kvevict-quality's runs: cli_quality_test.cpp.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "cli_workspace.hpp"

namespace {

using cli_test::binary;
using cli_test::expand;
using cli_test::kSmall;
using cli_test::kTiny;
using cli_test::shared;
using cli_test::Tool;
using cli_test::ToolRun;
using cli_test::Workspace;

/// One bad (or edge) input: tool, arguments ({W} = the workspace, {S} = the shared folder), environment,
/// expected exit code and the substrings stderr must contain.
struct Case {
  const char* name;
  Tool tool;
  std::string args;
  int exit_code;
  std::vector<std::string> err;  // each must appear in stderr
  bool needs_shared = false;
  std::string env;
  Case(const char* n, Tool t, std::string a, int rc, std::vector<std::string> e, bool shared_data = false,
       std::string environment = "")
      : name(n), tool(t), args(std::move(a)), exit_code(rc), err(std::move(e)), needs_shared(shared_data),
        env(std::move(environment)) {}
};

std::vector<Case> cases() {
  const Tool G = Tool::generate, R = Tool::replay, Q = Tool::quality;
  return {
      // ---- kvevict-generate: defaults on a short prompt ----
      {"GenStreamingDefaultBudgetUsesTheSinksFloor", G, kTiny + "--policy streaming --prompt-ids 1,5,6,7,8 --print-ids --steps 4",
       0, {"[streaming k=5 w=1 sinks=4]", "stopped: --steps 4 tokens generated"}},
      {"GenKeyformerShortPromptPrintsK", G, kTiny + "--policy keyformer --prompt-ids 1,5,6,7,8 --print-ids --steps 40",
       0, {"[keyformer k=2 w=1 sinks=0]"}},
      {"GenStreamingSinksAboveBudget", G, kTiny + "--policy streaming --budget 3 --sinks 4 --prompt-ids 1",
       2, {"kvevict-generate: --sinks: S = 4 exceeds the budget k = 3", "--budget"}},
      {"GenStreamingSinksAbovePercentBudget", G, kTiny + "--policy streaming --budget 50% --prompt-ids 1,2,3,4 --print-ids",
       2, {"--sinks: S = 4 exceeds the budget k = 2", "--budget 50%"}},
      // ---- case 4: errors name the flag, not a library class ----
      {"GenRecentAboveBudget", G, kTiny + "--policy h2o --budget 10 --recent 20 --prompt-ids 1",
       2, {"--recent: w = 20 exceeds the budget k = 10", "--budget"}},
      {"GenTovaRecentAboveBudget", G, kTiny + "--policy tova --budget 2 --recent 3 --prompt-ids 1", 2,
       {"--recent: w = 3 exceeds the budget k = 2"}},
      {"GenBudgetZero", G, kTiny + "--policy h2o --budget 0 --prompt-ids 1", 2, {"--budget: must be >= 1 (got 0)"}},
      {"GenTemperatureNegative", G, kTiny + "--temperature -1 --prompt-ids 1", 2, {"--temperature: must be >= 0"}},
      {"GenTauInitZero", G, kTiny + "--policy keyformer --tau-init 0 --prompt-ids 1", 2, {"--tau-init: must be finite and > 0"}},
      {"GenTauEndNotANumber", G, kTiny + "--policy keyformer --tau-end fast --prompt-ids 1", 2, {"--tau-end: expected a number"}},
      {"GenPromptIdOutsideVocab", G, kTiny + "--prompt-ids 1,99999 --print-ids", 2, {"--prompt-ids: token id 99999", "[0, 32)"}},
      {"GenTokenizerNotSentencePiece", G, kTiny + "--tokenizer {W}/junk/garbage.tok --prompt-ids 1", 2,
       {"--tokenizer: '", "is not a SentencePiece model"}},
      {"GenTokenizerTok512Bin", G, kSmall + "--tokenizer {S}/models/stories260K/tok512.bin --prompt-ids 1", 2,
       {"--tokenizer:", "is not a SentencePiece model"}, true},
      // ---- case 5: --recent is never silently ignored ----
      {"GenWindowWithRecent", G, kTiny + "--policy window --recent 3 --prompt-ids 1", 2, {"--recent: streaming and window keep the most recent k - sinks tokens", "--policy window"}},
      {"GenStreamingWithRecent", G, kTiny + "--policy streaming --recent 30% --prompt-ids 1", 2, {"--recent: streaming and window keep", "--policy streaming"}},
      {"GenSinksWithH2O", G, kTiny + "--policy h2o --sinks 2 --prompt-ids 1", 2, {"--sinks: only --policy streaming"}},
      {"GenTauWithH2O", G, kTiny + "--policy h2o --tau-end 3 --prompt-ids 1", 2, {"--tau-end: only --policy keyformer"}},
      {"GenNoNoiseWithTova", G, kTiny + "--policy tova --no-noise --prompt-ids 1", 2, {"--no-noise: only --policy keyformer"}},
      {"GenValuesThatChangeNothingAreAccepted", G, kTiny + "--policy window --budget 4 --recent 0 --sinks 4 --tau-init 1 --tau-end 2 --prompt-ids 1 --print-ids --steps 2",
       0, {"[window k=4 w=4 sinks=0]"}},
      {"GenStreamingRecentZeroAccepted", G, kTiny + "--policy streaming --budget 6 --recent 0% --prompt-ids 1 --print-ids --steps 2",
       0, {"[streaming k=6 w=2 sinks=4]"}},
      {"GenBudgetWithFull", G, kTiny + "--budget 64 --prompt-ids 1", 2, {"--budget: --policy full keeps every token"}},
      // ---- case 7 / why generation stopped ----
      {"GenStopsAtTheEndOfTheContext", G, kTiny + "--policy keyformer --budget 16 --temperature 0 --prompt-ids 1 --print-ids --steps 600",
       0, {"[keyformer k=16 w=4 sinks=0]", "generated 128 tok", "stopped: the model's context of 128 positions is reached"}},
      {"GenStopsAtSteps", G, kTiny + "--prompt-ids 1 --print-ids --steps 7 --temperature 0", 0, {"generated 7 tok", "stopped: --steps 7 tokens generated"}},
      {"GenStopsAtTheEndOfStoryToken", G, kSmall + "--prompt-ids 1 --print-ids --steps 511 --temperature 0", 0,
       {"generated 345 tok", "stopped: end-of-story token (BOS = 1)"}, true},
      {"GenPromptFillsTheContext", G, kTiny + "--prompt-ids " + [] {
         std::string ids = "1";
         for (int i = 1; i < 128; ++i) ids += ",2";
         return ids;
       }() + " --print-ids --temperature 0", 0, {"prompt 128 tok", "generated 1 tok", "context of 128 positions"}},
      {"GenPromptLongerThanTheContext", G, kTiny + "--prompt-ids " + [] {
         std::string ids = "1";
         for (int i = 1; i < 129; ++i) ids += ",2";
         return ids;
       }() + " --print-ids", 2, {"--prompt-ids: the prompt has 129 tokens; the model's context is 128"}},
      // ---- case 8: model files are recognised ----
      {"GenModelGguf", G, "--model {W}/junk/fake.gguf --prompt-ids 1", 2, {"--model: '", "fake.gguf': missing key 'general.architecture'"}},
      {"GenGgufHugeCount", G, "--model {W}/junk/huge-count.gguf --prompt-ids 1", 2,
       {"--model: '", "huge-count.gguf': metadata count 1152921504606846976 does not fit in the 0 bytes that remain"}},
      {"GenGgufUnknownTensorType", G, "--model {W}/junk/unknown-type.gguf --prompt-ids 1", 2,
       {"--model: '", "unknown-type.gguf': tensor 'token_embd.weight' has an unknown type 99"}},
      {"GenGgufTruncatedTensor", G, "--model {W}/junk/short-tensor.gguf --prompt-ids 1", 2,
       {"--model: '", "truncated: tensor 'token_embd.weight' (128 bytes at data offset 0) ends past the end of the file"}},
      {"GenModelRealGguf", G, "--model {S}/models/stories260K/stories260K.gguf --prompt-ids 1 --steps 3 --temperature 0 --print-ids", 0,
       {"[full] prompt 1 tok", "generated 3 tok"}, true},
      {"GenModelIsATokenizer", G, "--model {W}/junk/fake.model --prompt-ids 1", 2, {"--model:", "not a llama2.c checkpoint", "SentencePiece"}},
      {"GenModelIsText", G, "--model {W}/junk/README.md --prompt-ids 1", 2, {"--model:", "not a llama2.c checkpoint (it looks like a text file)"}},
      {"GenModelTruncated", G, "--model {W}/junk/truncated.bin --prompt-ids 1", 2, {"--model:", "not a llama2.c checkpoint", "truncated"}},
      {"GenModelFolderWithTwoCheckpoints", G, "--model {W}/two --prompt-ids 1", 2, {"--model:", "several checkpoints", "a.bin", "b.bin"}},
      {"GenModelFolderWithoutCheckpoint", G, "--model {W}/none --prompt-ids 1", 2, {"--model:", "no model (a llama2.c *.bin or a *.gguf) in the folder"}},
      {"GenModelMissing", G, "--prompt-ids 1", 2, {"--model: no model at '/nonexistent/kvevict'", "karpathy/tinyllamas"}, false,
       "KVEVICT_MODEL_DIR=/nonexistent/kvevict"},
      {"GenModelFromSharedDir", G, "--prompt-ids 1 --print-ids --steps 3", 0, {"generated 3 tok"}, false,
       "-u KVEVICT_MODEL_DIR KVEVICT_SHARED_DIR={W}/root"},
      // ---- case 2 for kvevict-generate: tokenizer vs model ----
      {"GenTokenizerOfAnotherModel", G, kSmall + "--tokenizer {S}/models/babyllama-char105/tok105.model --prompt Hi", 2,
       {"--tokenizer: '", "has 105 pieces but the model", "vocab_size 512"}, true},
      // ---- syntax shared by all tools ----
      {"GenBudgetPercent", G, kTiny + "--policy h2o --budget 50% --prompt-ids 1,2,3,4,5,6,7,8 --print-ids --steps 2", 0, {"[h2o k=4 w=1 sinks=0]"}},
      {"GenRecentPercent", G, kTiny + "--policy keyformer --budget 10 --recent 30% --prompt-ids 1 --print-ids --steps 2", 0, {"[keyformer k=10 w=3 sinks=0]"}},
      {"GenRecentRatioAlias", G, kTiny + "--policy h2o --budget 10 --recent-ratio 0.5 --prompt-ids 1 --print-ids --steps 2", 0, {"[h2o k=10 w=5 sinks=0]"}},
      {"GenBudgetNotANumber", G, kTiny + "--policy h2o --budget lots --prompt-ids 1", 2,
       {"--budget: expected a token count such as 64, a fraction of the prompt such as 0.5 or a percentage such as "
        "50%, got 'lots'"}},
      {"GenBudgetNegativePercent", G, kTiny + "--policy h2o --budget -5% --prompt-ids 1", 2,
       {"--budget: expected a token count such as 64, a fraction of the prompt such as 0.5 or a percentage such as 50% "
        "(no sign), got '-5%'"}},
      {"GenRecentAbove100Percent", G, kTiny + "--policy h2o --recent 150% --prompt-ids 1", 2,
       {"--recent: a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got '150%')"}},
      {"GenRecentFractionAboveOne", G, kTiny + "--policy h2o --recent 1.5 --prompt-ids 1", 2,
       {"--recent: a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got '1.5')"}},
      // One grammar (cli/amount.hpp): a fraction is a budget as its percentage is; above 100% keeps more than the
      // prompt (k = floor(1.5 * 4) = 6).
      {"GenBudgetFraction", G, kTiny + "--policy h2o --budget 0.5 --prompt-ids 1,2,3,4 --print-ids --steps 2", 0,
       {"[h2o k=2 w=1 sinks=0]"}},
      {"GenBudgetAbove100Percent", G,
       kTiny + "--policy h2o --budget 150% --prompt-ids 1,2,3,4 --print-ids --steps 2", 0,
       {"[h2o k=6 w=1 sinks=0]"}},
      {"GenRecentFraction", G, kTiny + "--policy h2o --budget 10 --recent 0.5 --prompt-ids 1 --print-ids --steps 2", 0,
       {"[h2o k=10 w=5 sinks=0]"}},
      {"GenMisspeltFlag", G, kTiny + "--polcy h2o --prompt-ids 1", 2,
       {"kvevict-generate: --polcy: unknown flag; did you mean --policy? (see --help)"}},
      {"GenMisspeltFlagWithValue", G, kTiny + "--budgte=5 --prompt-ids 1", 2,
       {"--budgte: unknown flag; did you mean --budget?"}},
      {"GenUnknownFlagFarFromAny", G, kTiny + "--xyzzy --prompt-ids 1", 2,
       {"kvevict-generate: --xyzzy: unknown flag (see --help)"}},
      {"GenStepsNegative", G, kTiny + "--steps -1 --prompt-ids 1", 2, {"--steps: expected an integer >= 0, got '-1'"}},
      {"GenSeedNotANumber", G, kTiny + "--seed x --prompt-ids 1", 2, {"--seed: expected an integer >= 0, got 'x'"}},
      {"GenUnknownPolicy", G, kTiny + "--policy lru --prompt-ids 1", 2, {"--policy: unknown policy 'lru'"}},
      {"GenPromptIdsNotNumbers", G, kTiny + "--prompt-ids 1,a", 2, {"--prompt-ids: expected comma-separated token ids"}},
      {"GenPromptAndPromptIds", G, kTiny + "--prompt hi --prompt-ids 1", 2, {"--prompt", "excludes"}},
      {"GenDumpWithEviction", G, kTiny + "--policy h2o --dump-logits {W}/d.json --prompt-ids 1", 2, {"--dump-logits: records the full cache's attention"}},
      {"GenDumpLayerOutOfRange", G, kTiny + "--dump-logits {W}/d.json --dump-layer 9 --prompt-ids 1 --print-ids", 2, {"--dump-layer: 9 is out of range: the model has 2 layers"}},
      {"GenDumpFolderMissing", G, kTiny + "--dump-logits /nonexistent/dir/d.json --prompt-ids 1 --print-ids", 2,
       {"--dump-logits: cannot write '/nonexistent/dir/d.json': the folder '/nonexistent/dir' does not exist"}},
      {"GenUnknownFlag", G, kTiny + "--budgett 3", 2, {"--budgett"}},
      // ---- SnapKV and per-layer budgets ----
      {"GenSnapKV", G, kTiny + "--policy snapkv --budget 4 --snap-window 2 --snap-kernel 3 --snap-pooling avg "
       "--prompt-ids 1,2,3,4,5,6,7,8 --print-ids --steps 2", 0, {"[snapkv k=4 w=1 sinks=0 L=2]"}},
      {"GenSnapKVWindowDecode", G, kTiny + "--policy snapkv --budget 4 --snap-decode window --prompt-ids 1,2,3,4,5,6,7,8 "
       "--print-ids --steps 2", 0, {"[snapkv k=4 w=1 sinks=0 L=4]"}},  // default L = min(32, k)
      {"GenSnapKVKeyformerDecode", G, kTiny + "--policy snapkv --budget 4 --snap-decode keyformer --tau-end 3 --seed 7 "
       "--prompt-ids 1,2,3,4,5,6,7,8 --print-ids --steps 2", 0, {"[snapkv k=4 w=1 sinks=0 L=4]"}},
      {"GenSnapKVH2ODecodeTau", G, kTiny + "--policy snapkv --snap-decode h2o --tau-end 3 --prompt-ids 1", 2,
       {"--tau-end: only --policy keyformer (or snapkv with --snap-decode keyformer) has a temperature schedule "
        "(the policy is snapkv); drop --tau-end"}},
      {"GenMeanAttention", G, kTiny + "--policy h2o --mean-attention --budget 4 --prompt-ids 1,2,3,4,5,6,7,8 "
       "--print-ids --steps 2", 0, {"[h2o k=4 w=1 sinks=0]"}},
      {"GenMeanAttentionKeyformer", G, kTiny + "--policy keyformer --mean-attention --budget 4 --prompt-ids "
       "1,2,3,4,5,6,7,8 --print-ids --steps 2", 0, {"[keyformer k=4 w=1 sinks=0]"}},
      {"GenKeyNorm", G, kTiny + "--policy knorm --budget 4 --prompt-ids 1,2,3,4,5,6,7,8 --print-ids --steps 2", 0,
       {"[knorm k=4 w=1 sinks=0]"}},
      {"GenKeyDiff", G, kTiny + "--policy keydiff --budget 4 --prompt-ids 1,2,3,4,5,6,7,8 --print-ids --steps 2", 0,
       {"[keydiff k=4 w=1 sinks=0]"}},
      // An empty value is refused by every tool (kvcli::run_tool), naming the flag: never taken as "not given".
      {"GenEmptyValue", G, kTiny + "--prompt-ids 1 --dump-logits ''", 2,
       {"--dump-logits: needs a value (got an empty one)"}},
      {"GenKeyDiffTau", G, kTiny + "--policy keydiff --tau-init 1.5 --prompt-ids 1", 2,
       {"--tau-init: only --policy keyformer (or snapkv with --snap-decode keyformer) has a temperature schedule (the "
        "policy is keydiff); drop --tau-init"}},
      {"GenKeyNormMeanAttention", G, kTiny + "--policy knorm --mean-attention --prompt-ids 1", 2,
       {"--mean-attention: only --policy h2o or keyformer accumulates a score over every query (the policy is "
        "knorm); drop --mean-attention"}},
      {"GenMeanAttentionTova", G, kTiny + "--policy tova --mean-attention --prompt-ids 1", 2,
       {"--mean-attention: only --policy h2o or keyformer accumulates a score over every query (the policy is "
        "tova); drop --mean-attention"}},
      {"GenSnapKernelEven", G, kTiny + "--policy snapkv --snap-kernel 4 --prompt-ids 1", 2,
       {"--snap-kernel: must be odd (got 4)"}},
      {"GenSnapKernelZero", G, kTiny + "--policy snapkv --snap-kernel 0 --prompt-ids 1", 2,
       {"--snap-kernel: expected an integer in [1, "}},
      {"GenSnapWindowAboveBudget", G, kTiny + "--policy snapkv --budget 4 --snap-window 5 --prompt-ids 1", 2,
       {"--snap-window: L = 5 exceeds the budget k = 4 (--budget 4); lower --snap-window or raise --budget"}},
      {"GenSnapWindowAbovePercentBudget", G, kTiny + "--policy snapkv --budget 50% --snap-window 4 --prompt-ids 1,2,3,4,5,6 --print-ids", 2,
       {"--snap-window: L = 4 exceeds the budget k = 3 (--budget 50% of a 6-token prompt)"}},
      {"GenSnapWindowWithH2O", G, kTiny + "--policy h2o --snap-window 8 --prompt-ids 1", 2,
       {"--snap-window: only --policy snapkv has an observation window (the policy is h2o)"}},
      {"GenSnapPoolingUnknown", G, kTiny + "--policy snapkv --snap-pooling mean --prompt-ids 1", 2,
       {"--snap-pooling: unknown pooling 'mean' (expected max or avg)"}},
      {"GenSnapDecodeUnknown", G, kTiny + "--policy snapkv --snap-decode tova --prompt-ids 1", 2,
       {"--snap-decode: unknown decode rule 'tova' (expected h2o, window or keyformer)"}},
      {"GenSnapKVChunked", G, kTiny + "--policy snapkv --prefill-chunk 4 --prompt-ids 1", 2,
       {"--prefill-chunk: snapkv scores the prompt with its last L queries"}},
      // AdaKV: each layer's 2 KV heads share 2 x 4 tokens (the mean per head is 4; the heads differ).
      {"GenHeadBudgetsAdaptive", G, kTiny + "--policy h2o --budget 4 --head-budgets adaptive --prompt-ids 1,2,3,4,5,6,7,8 "
       "--print-ids --steps 2", 0,
       {"head-budgets=adaptive:0.20]", "retained per layer (mean over KV heads, which differ): 4 4 of 9"}},
      {"GenHeadBudgetsUnknown", G, kTiny + "--policy h2o --head-budgets adapt --prompt-ids 1", 2,
       {"--head-budgets: unknown split 'adapt' (expected uniform, adaptive or adaptive:ALPHA)"}},
      {"GenHeadBudgetsAlpha", G, kTiny + "--policy h2o --head-budgets adaptive:2 --prompt-ids 1", 2,
       {"--head-budgets: ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got '2')"}},
      {"GenHeadBudgetsShared", G, kTiny + "--policy h2o --head-budgets adaptive --shared-heads --prompt-ids 1", 2,
       {"--head-budgets: adaptive shares the budget among KV heads, --shared-heads keeps the same tokens"}},
      {"GenHeadBudgetsKeyNorm", G, kTiny + "--policy knorm --head-budgets adaptive --prompt-ids 1", 2,
       {"--head-budgets: adaptive shares the budget by attention scores"}},
      {"GenHeadBudgetsPaged", G, kTiny + "--policy h2o --head-budgets adaptive --kv-layout paged --prompt-ids 1", 2,
       {"--head-budgets: adaptive needs --kv-layout contiguous"}},
      {"GenHeadBudgetsWithFull", G, kTiny + "--head-budgets adaptive --prompt-ids 1", 2,
       {"--head-budgets: --policy full keeps every token"}},
      // 2 layers, k = 4, P = 8: b_min = 0.2, b_max = 7.8 -> [8, 0] -> no layer at 0: [7, 1].
      {"GenLayerBudgetsPyramid", G, kTiny + "--policy h2o --budget 4 --layer-budgets pyramid --prompt-ids 1,2,3,4,5,6,7,8 "
       "--print-ids --steps 2", 0, {"[h2o k=4 w=1 sinks=0 layer-budgets=pyramid]", "retained per layer: 7 1 of 9"}},
      {"GenLayerBudgetsWeights", G, kTiny + "--policy h2o --budget 4 --layer-budgets 3,1 --prompt-ids 1,2,3,4,5,6,7,8 "
       "--print-ids --steps 2", 0, {"layer-budgets=weights", "retained per layer: 6 2 of 9"}},
      {"GenLayerBudgetsWrongCount", G, kTiny + "--policy h2o --budget 4 --layer-budgets 1,2,3 --prompt-ids 1 --print-ids", 2,
       {"--layer-budgets: 3 weights for 2 layers (give one per layer)"}},
      {"GenLayerBudgetsNotANumber", G, kTiny + "--policy h2o --layer-budgets 1,x --prompt-ids 1", 2,
       {"--layer-budgets: weight 'x' in '1,x' is not a number"}},
      {"GenLayerBudgetsWithFull", G, kTiny + "--layer-budgets pyramid --prompt-ids 1", 2,
       {"--layer-budgets: --policy full keeps every token in every layer"}},
      {"GenThreadsZero", G, kTiny + "--threads 0 --prompt-ids 1", 2, {"--threads: expected an integer in [1, 1024], got '0'"}},
      {"GenThreadsTooMany", G, kTiny + "--threads 2000 --prompt-ids 1", 2, {"--threads: expected an integer in [1, 1024], got '2000'"}},
      // ---- kvevict-replay: the same flags ----
      {"ReplayBudgetPercent", R, "{W}/t.json --policy h2o --budget 67%", 0, {"[h2o k=2 w=1 sinks=0]"}},
      {"ReplayMeanAttention", R, "{W}/t.json --policy h2o --mean-attention --budget 3", 0, {"[h2o k=3 w=1 sinks=0]"}},
      {"ReplayMeanAttentionStreaming", R, "{W}/t.json --policy streaming --mean-attention --budget 3", 2,
       {"--mean-attention: only --policy h2o or keyformer accumulates a score over every query (the policy is "
        "streaming); drop --mean-attention"}},
      {"ReplayHeadBudgetsAdaptive", R, "{W}/t.json --policy h2o --budget 2 --head-budgets adaptive:0.5", 0,
       {"[h2o k=2 w=1 sinks=0"}},
      {"ReplayHeadBudgetsShared", R, "{W}/t.json --policy h2o --head-budgets adaptive --shared-heads", 2,
       {"kvevict-replay: --head-budgets: adaptive shares the budget among KV heads, --shared-heads keeps the same "
        "tokens on every head: drop one"}},
      {"ReplayHeadBudgetsStreaming", R, "{W}/t.json --policy streaming --head-budgets adaptive", 2,
       {"kvevict-replay: --head-budgets: adaptive shares the budget by attention scores: --policy keyformer, h2o, "
        "snapkv or tova (the policy is streaming)"}},
      {"ReplayDefaultRecentIs30Percent", R, "{W}/t.json --policy h2o --budget 3", 0, {"[h2o k=3 w=1 sinks=0]"}},
      {"ReplayStreamingDefaultSinks", R, "{W}/t.json --policy streaming --budget 3 --sinks 1", 0, {"[streaming k=3 w=2 sinks=1]"}},
      {"ReplayRecentAboveBudget", R, "{W}/t.json --policy h2o --budget 2 --recent 3", 2, {"kvevict-replay: --recent: w = 3 exceeds the budget k = 2"}},
      {"ReplayRecentPercentWithStreaming", R, "{W}/t.json --policy streaming --recent 30%", 2, {"--recent: streaming and window keep", "--policy streaming"}},
      {"ReplaySinksWithH2O", R, "{W}/t.json --policy h2o --sinks 1", 2, {"--sinks: only --policy streaming"}},
      {"ReplayPolicyFull", R, "{W}/t.json --policy full", 2, {"--policy: 'full' keeps every token"}},
      {"ReplaySeedNegative", R, "{W}/t.json --seed -1", 2, {"--seed: expected an integer >= 0, got '-1'"}},
      // Keyformer's own flags with another policy are errors, as every unused flag; the default is accepted.
      {"ReplaySeedWithH2O", R, "{W}/t.json --policy h2o --seed 3", 2,
       {"kvevict-replay: --seed: only --policy keyformer (or snapkv with --snap-decode keyformer) draws random noise (the policy is h2o); drop --seed"}},
      {"ReplayDefaultSeedWithH2O", R, "{W}/t.json --policy h2o --budget 3 --seed 42", 0, {"[h2o k=3 w=1 sinks=0]"}},
      {"ReplayNoiseWithH2O", R, "{W}/t.json --policy h2o --noise none", 2,
       {"kvevict-replay: --noise: only --policy keyformer draws noise (the policy is h2o); drop --noise"}},
      {"ReplayGenStepsWithTova", R, "{W}/t.json --policy tova --gen-steps 3", 2,
       {"--gen-steps: only --policy keyformer has a temperature schedule (the policy is tova); drop --gen-steps"}},
      {"ReplayNpyAsTrace", R, "{W}/layer.npy --policy h2o", 2,
       {"kvevict-replay: trace: '{W}/layer.npy' is an .npy file, not a JSON trace: pass it with --logits "
        "{W}/layer.npy (and --prompt-len P)"}},
      {"ReplayMisspeltFlag", R, "{W}/t.json --polciy h2o", 2, {"--polciy: unknown flag; did you mean --policy?"}},
      {"ReplayPromptLenNotANumber", R, "{W}/t.json --prompt-len three", 2, {"--prompt-len: expected an integer"}},
      {"ReplayJsonNumberOverflow", R, "{W}/overflow.json --policy h2o --budget 1", 2, {"kvevict-replay: "}},
      {"ReplaySnapKV", R, "{W}/t.json --policy snapkv --budget 2 --snap-kernel 3", 0, {"[snapkv k=2 w=1 sinks=0 L=2]"}},
      {"ReplaySnapKVKeyformerDecode", R, "{W}/t.json --policy snapkv --budget 2 --snap-decode keyformer --gen-steps 3 "
       "--noise none", 0, {"[snapkv k=2 w=1 sinks=0 L=2]"}},
      {"ReplaySnapWindowAboveBudget", R, "{W}/t.json --policy snapkv --budget 2 --snap-window 3", 2,
       {"--snap-window: L = 3 exceeds the budget k = 2"}},
      {"ReplaySnapKernelEven", R, "{W}/t.json --policy snapkv --snap-kernel 2", 2, {"--snap-kernel: must be odd (got 2)"}},
      {"ReplayBudgetAbove2To53", R, "{W}/t.json --budget 18446744073709551615", 2, {"--budget: k = 18446744073709551615 exceeds 2^53"}},
      // ---- kvevict-quality: cases 1, 2 and 6 ----
      {"QualityOutFolderMissing", Q, "--windows 1 --ratios 0.5 --seeds 1 --out /nonexistent/dir/x", 2,
       {"kvevict-quality: --out: cannot write '/nonexistent/dir/x': the folder '/nonexistent/dir' does not exist"}},
      {"QualityWindowsNotANumber", Q, "--windows abc", 2, {"--windows: expected a positive integer or 'all', got 'abc'"}},
      {"QualityWindowsNegative", Q, "--windows -1", 2, {"--windows: expected a positive integer or 'all', got '-1'"}},
      {"QualitySeedsZero", Q, "--seeds 0", 2, {"--seeds: expected an integer in [1, 1000], got '0'"}},
      {"QualityThreadsZero", Q, "--threads 0", 2, {"--threads: expected an integer in [1, 1024], got '0'"}},
      {"QualityPolicyHint", Q, "--policy h2o", 2,
       {"kvevict-quality: --policy: unknown flag; this tool runs the rows of --policies (e.g. --policies "
        "h2o,keyformer)"}},
      {"QualityBudgetHint", Q, "--budget 50%", 2,
       {"--budget: unknown flag; this tool sweeps the budget with --ratios"}},
      {"QualityRatioPercentAbove100", Q, "--ratios 50%,150%", 2, {"--ratios: each ratio must be in (0, 1] (got 150%)"}},
      {"QualityRatioTokenCount", Q, "--ratios 64", 2,
       {"--ratios: each ratio must be in (0, 1] (got 64): give a fraction such as 0.5 or a percentage such as 50%"}},
      {"QualityStepThreadsZero", Q, "--step-threads 0", 2, {"--step-threads: expected an integer in [1, 1024], got '0'"}},
      {"QualityRatioAboveOne", Q, "--ratios 0.5,2", 2, {"--ratios: each ratio must be in (0, 1] (got 2)"}},
      {"QualityPromptTooLong", Q, "--window 64 --prompt 63", 2, {"--prompt: 63 must be at most --window - 2 = 62"}},
      {"QualitySinksAboveSmallestBudget", Q, "--ratios 0.01 --prompt 256", 2, {"--sinks: S = 4 exceeds the budget k = 2", "--ratios 0.01"}},
      {"QualityTauNotANumber", Q, "--tau-init warm", 2, {"--tau-init: expected a number, got 'warm'"}},
      {"QualityModelGguf", Q, "--model {W}/junk/fake.gguf --out {W}/q", 2, {"--model:", "missing key 'general.architecture'"}},
      {"QualityTokenizerOfAnotherModel", Q, kSmall + "--tokenizer {S}/models/babyllama-char105/tok105.model --windows 1 --out {W}/q", 2,
       {"--tokenizer: '", "has 105 pieces but the model"}, true},
      {"QualityTooManyWindows", Q, kSmall + "--data {S}/data/tinystories-val/tinystories_val.txt --windows 100000 --out {W}/q", 2, {"--windows: 100000 exceeds the", "windows of 512 tokens"}, true},
      {"QualityDataMissing", Q, kSmall + "--data {W}/missing.txt --out {W}/q", 2, {"--data: ", "cannot read"}, true},
      // ---- issue 37: a device or FIFO where a file is expected was read until memory ran out ----
      {"QualityDataIsADevice", Q, kSmall + "--data /dev/zero --out {W}/q", 2,
       {"kvevict-quality: --data: '/dev/zero' is not a regular file (it is a character device)"}, true},
      {"ReplayTraceIsADevice", R, "/dev/zero --policy h2o", 2,
       {"kvevict-replay: trace '/dev/zero': is not a regular file (it is a character device)"}},
      {"ReplayLogitsIsADevice", R, "--logits /dev/zero --prompt-len 2 --policy h2o", 2,
       {"kvevict-replay: --logits '/dev/zero': is not a regular file (it is a character device)"}},
      {"GenerateModelIsADevice", G, "--model /dev/zero --prompt-ids 1", 2,
       {"kvevict-generate: --model: '/dev/zero' is not a regular file"}},
      {"GenerateTokenizerIsADevice", G, kTiny + "--tokenizer /dev/zero --prompt hello", 2,
       {"kvevict-generate: --tokenizer: no file '/dev/zero'"}},
      {"QualityUnknownFlag", Q, "--ratio 0.5", 2, {"--ratio"}},
      // ---- kvevict-quality: the paged flags of kvevict-generate, checked before any file ----
      {"QualityPageSizeWithoutPaged", Q, "--page-size 8", 2, {"--page-size: needs --kv-layout paged"}},
      {"QualityEvictUnitWithoutPaged", Q, "--evict-unit page", 2, {"--evict-unit: needs --kv-layout paged"}},
      {"QualityUnknownKvLayout", Q, "--kv-layout blocks", 2, {"--kv-layout: unknown layout 'blocks'"}},
      {"QualityUnknownEvictUnit", Q, "--kv-layout paged --evict-unit slab", 2, {"--evict-unit: unknown unit 'slab'"}},
      {"QualityPageSizeZero", Q, "--kv-layout paged --page-size 0", 2, {"--page-size"}},
      {"QualityPageSizeWraps", Q, "--kv-layout paged --page-size 18446744073709551615", 2,
       {"--page-size: expected an integer in [1, 4096], got '18446744073709551615'"}},
      // ---- kvevict-quality: rows and chunked prefill, checked before any file ----
      // ---- global flags against a row, refused by the tool before the model is loaded (a broken --model
      // would be reported first otherwise): the flags named, not the library's parameters ----
      {"QualityAdakvRowWithPagedLayout", Q, "--model {W}/junk/fake.gguf --policies h2o+adakv --kv-layout paged", 2,
       {"kvevict-quality: --kv-layout: paged with row 'h2o+adakv': +adakv gives each KV head its own length"}},
      {"QualityAdakvRowWithSharedHeads", Q, "--model {W}/junk/fake.gguf --policies h2o+adakv --shared-heads", 2,
       {"kvevict-quality: --shared-heads: with row 'h2o+adakv': +adakv shares the budget among KV heads"}},
      {"QualityAdakvRowWithBoundedPrefill", Q,
       "--model {W}/junk/fake.gguf --policies h2o+adakv --prefill-chunk 16 --bounded-prefill", 2,
       {"kvevict-quality: --bounded-prefill: with row 'h2o+adakv': +adakv is not supported with a bounded prefill"}},
      {"QualityExpectedAttentionWithPrefillChunk", Q,
       "--model {W}/junk/fake.gguf --policies expected-attention --prefill-chunk 16", 2,
       {"kvevict-quality: --prefill-chunk: with row 'expected-attention': expected-attention needs a one-shot "
        "prefill"}},
      {"QualityExpectedAttentionWithPagedLayout", Q,
       "--model {W}/junk/fake.gguf --policies expected-attention --kv-layout paged", 2,
       {"kvevict-quality: --kv-layout: paged with row 'expected-attention': expected-attention ranks a contiguous"}},
      {"QualityPoliciesUnknownRow", Q, "--policies h2o,snap", 2, {"--policies: row 'snap': unknown base 'snap'"}},
      {"QualityPoliciesRowTwice", Q, "--policies h2o,window,h2o", 2, {"--policies: row 'h2o' is given twice"}},
      {"QualityPrefillChunkZero", Q, "--prefill-chunk 0", 2, {"--prefill-chunk: expected an integer in [1, "}},
      {"QualityPrefillChunkPaged", Q, "--kv-layout paged --prefill-chunk 8", 2,
       {"--prefill-chunk: needs the contiguous KV layout"}},
      {"QualityBoundedWithoutChunk", Q, "--bounded-prefill", 2, {"--bounded-prefill"}},
      // ---- kvevict-quality: SnapKV and per-layer budgets, checked before any file ----
      {"QualitySnapKernelEven", Q, "--snap-kernel 2", 2, {"--snap-kernel: must be odd (got 2)"}},
      {"QualitySnapWindowAboveSmallestBudget", Q, "--snap-window 30 --ratios 0.1,0.5 --prompt 256", 2,
       {"--snap-window: L = 30 exceeds the budget k = 25", "--ratios 0.1"}},
      {"QualitySnapKVChunked", Q, "--policies h2o,snapkv --prefill-chunk 8", 2,
       {"--prefill-chunk: snapkv scores the prompt with its last L queries"}},
      {"QualityLayerBudgetsBadBeta", Q, "--layer-budgets pyramid:0.5", 2,
       {"--layer-budgets: pyramid beta must be >= 1 (got 0.5)"}},
      {"QualityLayerBudgetsWrongCount", Q, kSmall + "--data {S}/data/tinystories-val/tinystories_val.txt --layer-budgets 1,2 --windows 1 --out {W}/q", 2,
       {"--layer-budgets: 2 weights for 5 layers"}, true},
  };
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class Cli : public ::testing::TestWithParam<Case> {};

TEST_P(Cli, ExitCodeAndOneStderrLineNamingTheFlag) {
  const Case& c = GetParam();
  if (*binary(c.tool) == '\0') GTEST_SKIP() << "kvevict-quality is not built (KVEVICT_BUILD_BENCH=OFF)";
  if (c.needs_shared) KVEVICT_REQUIRE_SHARED_FILE(shared() + "/models/stories260K/stories260K.bin");
  const ToolRun run = Workspace::get().run(binary(c.tool), expand(c.args), expand(c.env));
  EXPECT_EQ(run.exit_code, c.exit_code) << run.err;
  for (const auto& needle : c.err) EXPECT_NE(run.err.find(expand(needle)), std::string::npos) << "stderr: " << run.err << "expected: " << needle;
  EXPECT_EQ(run.err.find("kvevict::"), std::string::npos) << "a library class name reached the user: " << run.err;
  EXPECT_EQ(run.err.find("llama2::"), std::string::npos) << "an engine class name reached the user: " << run.err;
  EXPECT_EQ(run.err.find("[json.exception"), std::string::npos) << "a parser message reached the user: " << run.err;
  if (c.exit_code == 2) {
    EXPECT_EQ(run.out, "");
    ASSERT_FALSE(run.err.empty());
    EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "more than one line: " << run.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Tools, Cli, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(CliAll, HelpNamesTheEnvironmentVariablesAndExitCodes) {
  for (Tool t : {Tool::generate, Tool::replay, Tool::quality}) {
    if (*binary(t) == '\0') continue;  // kvevict-quality not built
    const ToolRun run = Workspace::get().run(binary(t), "--help");
    EXPECT_EQ(run.exit_code, 0) << binary(t);
    for (const char* needle : {"KVEVICT_SHARED_DIR", "KVEVICT_MODEL_DIR", "Exit codes: 0 success, 2 usage or input error",
                               "--budget INT|FLOAT|N%", "--recent INT|FLOAT|N%", "--sinks INT", "--tau-init FLOAT",
                               "--threads INT", "--seed INT"})
      if (t != Tool::quality ||
          (std::string(needle).rfind("--budget", 0) != 0 && std::string(needle) != "--seed INT")) {
        if (t == Tool::replay && std::string(needle) == "--threads INT") continue;  // replay runs on one thread
        EXPECT_NE(run.out.find(needle), std::string::npos) << binary(t) << " --help lacks " << needle;
      }
    // Numeric options show their type, never CLI11's TEXT (file names and names are the only TEXT).
    for (const char* numeric : {"--steps TEXT", "--temperature TEXT", "--prompt-len TEXT", "--gen-steps TEXT",
                                "--windows TEXT", "--ratios TEXT", "--seeds TEXT"})
      EXPECT_EQ(run.out.find(numeric), std::string::npos) << binary(t) << " --help shows " << numeric;
    if (t == Tool::quality) {
      EXPECT_NE(run.out.find("--ratios FLOAT|N%"), std::string::npos) << run.out;
    }
    if (t == Tool::replay) {  // no sampler in the replay
      EXPECT_NE(run.out.find("--seed INT                  seed of Keyformer's Gumbel noise (default 42)"),
                std::string::npos) << run.out;
    }
  }
}

}  // namespace
