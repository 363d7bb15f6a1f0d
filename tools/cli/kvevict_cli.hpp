// kvevict tools — cli/kvevict_cli.hpp: the command-line layer shared by kvevict-generate,
// kvevict-replay and kvevict-quality.
// SPDX-License-Identifier: Apache-2.0
//
// One place declares the flags the tools share (--policy, --budget, --recent, --sinks, --tau-init,
// --tau-end, --seed, --threads, --snap-window/-kernel/-pooling/-decode, --layer-budgets), parses their values into one validated struct, resolves the budget
// k, the recent window w and the sinks for a prompt of P tokens, names the environment variables
// and maps every error to the same exit codes:
//
//   0  success
//   2  usage or input error: a bad flag value, file, trace or model (one line on stderr naming the
//      flag or file, the value, and the fix)
//   1  a failure at run time (out of memory, a write error, ...)
//
// Syntax shared by all tools and the Python module (cli/amount.hpp): `--budget 64` (tokens per KV head),
// `--budget 0.5` or `--budget 50%` (of the prompt length P); `--recent 8` (tokens), `--recent 0.3` or
// `--recent 30%` (of the budget k).
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/amount.hpp"
#include "cli/file_roles.hpp"
#include "kvevict/head_budgets.hpp"
#include "kvevict/layer_budgets.hpp"
#include "kvevict/presets.hpp"

namespace kvcli {

/// Exit codes of every kvevict command-line tool.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  ///< run-time failure
inline constexpr int kExitUsage = 2;    ///< usage or input error
/// The largest --page-size (tokens per page): 2^12, far above the pages engines use (16 to 256).
inline constexpr std::size_t kMaxPageSize = std::size_t{1} << 12;

/// A bad flag value, file, trace or model. `what()` is `"<flag>: <problem>"`, the line the tool
/// prints after its name; `flag` is what the user typed (e.g. "--budget") or a file role. An empty
/// `problem` makes `flag` the whole message (for a "field: problem" line built elsewhere).
class UsageError : public std::runtime_error {
 public:
  UsageError(const std::string& flag, const std::string& problem);
  const std::string& flag() const { return flag_; }

 private:
  std::string flag_;
};

/// Parses a budget or recent window for `flag` in the one grammar of cli/amount.hpp ("64", "0.5", "50%").
/// Throws `UsageError(flag)` naming the value and the accepted forms (signs, empty, trailing characters, a
/// count above 2^53, a budget of 0, a window fraction above 1).
Amount parse_amount(const std::string& text, const std::string& flag, AmountKind kind);

/// Parses a decimal integer in [min, max] for `flag` (digits only: "-1" is rejected, not wrapped).
/// Throws `UsageError(flag)` naming the value and the range.
std::uint64_t parse_count(const std::string& text, const std::string& flag, std::uint64_t min = 0,
                          std::uint64_t max = UINT64_MAX);

/// Parses a finite float for `flag`; throws `UsageError(flag)` otherwise.
float parse_float(const std::string& text, const std::string& flag);

/// The eviction settings every tool reads, as typed (filled by CLI11) and after `validate()`.
struct EvictionFlags {
  // ---- as typed (strings, so that every message is ours, not CLI11's) ----
  std::string policy_text;         ///< --policy
  std::string budget_text;         ///< --budget (empty: the tool's default)
  std::string budget_ratio_text;   ///< --budget-ratio R (alias of --budget R*100%)
  std::string recent_text;         ///< --recent (empty: the default for the policy)
  std::string recent_ratio_text;   ///< --recent-ratio Q (alias of --recent Q*100%)
  std::string sinks_text;          ///< --sinks
  std::string tau_init_text;       ///< --tau-init
  std::string tau_end_text;        ///< --tau-end
  std::string seed_text;           ///< --seed
  bool shared_heads = false;       ///< --shared-heads (one selection for all KV heads of a layer)
  std::string head_budgets_text;   ///< --head-budgets uniform|adaptive|adaptive:ALPHA (empty: uniform)
  std::string kv_layout_text;      ///< --kv-layout contiguous|paged (empty: contiguous)
  std::string page_size_text;      ///< --page-size N (paged layout; empty: 16)
  std::string evict_unit_text;     ///< --evict-unit token|page (paged layout; empty: token)
  std::string snap_window_text;    ///< --snap-window L (snapkv)
  std::string snap_kernel_text;    ///< --snap-kernel K (snapkv)
  std::string snap_pooling_text;   ///< --snap-pooling max|avg (snapkv)
  std::string snap_decode_text;    ///< --snap-decode h2o|window|keyformer (snapkv)
  std::string layer_budgets_text;  ///< --layer-budgets uniform|pyramid|pyramid:BETA|W0,W1,...
  std::string prefill_chunk_text;  ///< --prefill-chunk C (empty: one-shot prefill)
  bool bounded_prefill = false;    ///< --bounded-prefill (needs --prefill-chunk)
  bool mean_attention = false;     ///< --mean-attention (h2o, keyformer: PolicyParams::mean_attention)

  // ---- validated by validate() ----
  std::string policy = "full";     ///< full, keyformer, h2o, streaming, window, tova, snapkv, knorm, keydiff
  Amount budget;                   ///< --budget; default 50% of the prompt
  bool budget_given = false;       ///< the user typed --budget / --budget-ratio
  std::string budget_flag = "--budget";  ///< the flag the user typed for the budget
  std::optional<Amount> recent;    ///< --recent as typed; nullopt = the policy's default
  std::string recent_flag = "--recent";  ///< the flag the user typed for the recent window
  std::size_t sinks = 4;           ///< --sinks (StreamingLLM)
  bool sinks_given = false;
  float tau_init = 1.0f;           ///< --tau-init (Keyformer, > 0, finite)
  float tau_end = 2.0f;            ///< --tau-end (Keyformer, > 0, finite)
  std::uint64_t seed = 0;          ///< --seed
  bool paged = false;              ///< --kv-layout paged
  std::size_t page_size = 16;      ///< --page-size (paged), in [1, kMaxPageSize]
  bool evict_pages = false;        ///< --evict-unit page (paged)
  std::size_t snap_window = 32;    ///< --snap-window (SnapKV observation window L, >= 1)
  bool snap_window_given = false;  ///< false: L = min(32, k) for each budget k
  std::size_t snap_kernel = 7;     ///< --snap-kernel (odd, >= 1)
  kvevict::Pooling snap_pooling = kvevict::Pooling::max;          ///< --snap-pooling
  kvevict::SnapDecode snap_decode = kvevict::SnapDecode::h2o;     ///< --snap-decode
  kvevict::LayerBudgets layer_budgets;  ///< --layer-budgets (default uniform)
  kvevict::HeadBudgets head_budgets;    ///< --head-budgets (default uniform; adaptive: AdaKV, alpha 0.2)
  std::string layer_budgets_label = "uniform";  ///< "uniform", "pyramid", "pyramid:40", "weights"
  std::size_t prefill_chunk = 0;   ///< --prefill-chunk C in [1, 2^20]; 0 = one-shot prefill

  // ---- set by add_eviction_options ----
  bool allow_full = true;          ///< "--policy full" is accepted
  bool sweep = false;              ///< the tool runs every policy (no --policy): all policy flags apply
  bool seed_keyformer_only = true; ///< --seed seeds only Keyformer's noise (no sampler): an error elsewhere

  /// Checks every value and every combination that does not depend on the prompt length, and fills
  /// the validated fields. Throws `UsageError` naming the flag. Rules:
  ///  - a non-zero --recent with streaming/window (they keep the last k - sinks / k tokens: no separate
  ///    window) is an error (tova takes one: its default is none); so is a non-default --sinks with a policy other than streaming,
  ///    a non-default --tau-init/--tau-end with a policy other than keyformer, and a non-default --seed
  ///    with a policy other than keyformer in a tool without a sampler (an option is never
  ///    silently ignored; a value that changes nothing, 0 or the default, is accepted so that scripts can
  ///    pass every flag to every policy);
  ///  - a token --recent larger than a token --budget is an error naming both;
  ///  - --sinks larger than a token --budget (streaming) is an error naming both;
  ///  - --kv-layout is contiguous or paged; --page-size (an integer >= 1) and --evict-unit (token or
  ///    page) need --kv-layout paged (the paged layout always shares one selection per layer, so
  ///    --shared-heads is implied there and accepted);
  ///  - --snap-window (an integer >= 1), --snap-kernel (odd, >= 1), --snap-pooling (max or avg) and
  ///    --snap-decode (h2o or window) with a value other than the default need --policy snapkv; a token
  ///    --snap-window larger than a token --budget is an error naming both;
  ///  - --mean-attention needs --policy h2o or keyformer;
  ///  - --layer-budgets is uniform, pyramid, pyramid:BETA (BETA >= 1) or one weight per layer
  ///    (`kvevict::parse_layer_budgets`); anything but uniform needs an evicting policy;
  ///  - --prefill-chunk is an integer in [1, 2^20] and needs the contiguous layout (paged caches
  ///    prefill in one shot); --bounded-prefill needs --prefill-chunk (CLI11) and an evicting
  ///    --policy; --prefill-chunk with --policy snapkv is an error (SnapKV scores the prompt with its
  ///    last L queries, so it prefills in one shot). A sweeping tool checks its policies itself.
  void validate();
};

/// What a tool declares: which shared flags it has and its defaults.
struct ToolSpec {
  bool policy = true;               ///< declares --policy
  bool allow_full = true;           ///< --policy accepts "full" (no eviction)
  std::string default_policy = "full";
  bool budget = true;               ///< declares --budget / --budget-ratio
  bool seed = true;                 ///< declares --seed
  bool seed_sampler = false;        ///< --seed also seeds the tool's sampler (generate): used by every policy
  std::uint64_t default_seed = defaults::kSeed;
  bool tau = true;                  ///< declares --tau-init / --tau-end
  bool kv_layout = false;           ///< declares --shared-heads, --kv-layout, --page-size, --evict-unit
  bool snapkv = true;               ///< declares --snap-window, --snap-kernel, --snap-pooling, --snap-decode
  bool layer_budgets = false;       ///< declares --layer-budgets (tools that run a whole model)
  bool prefill_chunk = false;       ///< declares --prefill-chunk / --bounded-prefill (docs/long-prompts.md)
  std::string prefill_chunk_help;   ///< the tool's help text for --prefill-chunk (what is chunked)
};

/// Adds the shared eviction flags of `spec` to `app`, writing into `flags` (call `flags.validate()`
/// after `app.parse`). Every option is declared here once, so the tools agree on names, syntax,
/// defaults and help text.
void add_eviction_options(CLI::App& app, EvictionFlags& flags, const ToolSpec& spec);

/// Adds --threads (worker threads, >= 1; default: the hardware's) writing its text into `text`.
void add_threads_option(CLI::App& app, std::string& text);

/// k, w and sinks for one run, resolved from `EvictionFlags` and the prompt length.
struct Resolved {
  std::size_t k = 0;      ///< tokens kept per KV head
  std::size_t w = 0;      ///< recent window: always kept (streaming: k - sinks; window: k)
  std::size_t sinks = 0;  ///< StreamingLLM attention sinks (0 for other policies)
  std::size_t snap_window = 0;  ///< SnapKV observation window L (snapkv only: --snap-window, else min(32, k))
  /// "k=64 w=19 sinks=0" (snapkv: "k=64 w=19 sinks=0 L=32"), for summary lines.
  std::string describe() const;
};

/// Resolves `flags` (validated) for a prompt of `prompt_len` >= 1 tokens. Rules (docs/tools.md):
///  - `--budget N%`: k = max(1, floor(N/100 * P)); the default budget 50% of P is raised to
///    sinks + 1 for streaming (so that at least one recent token is kept);
///  - `--recent N%`: w = floor(N/100 * k), at least 1 for keyformer/h2o when N > 0 and k >= 2;
///    default 30% for keyformer/h2o, 0 for tova (no floor of 1 for tova's ratio); streaming: w = k - sinks, window: w = k;
///  - snapkv: w as for h2o; L = --snap-window, or min(32, k) when it is not given;
///  - w > k, sinks > k for streaming, or L > k for snapkv, is an error naming the flags and the
///    resolved values.
/// Throws `UsageError`.
Resolved resolve(const EvictionFlags& flags, std::size_t prompt_len);
/// As above for `policy` instead of `flags.policy` (tools that sweep every policy).
Resolved resolve(const EvictionFlags& flags, std::size_t prompt_len, const std::string& policy);

/// The policy parameters the shared flags set for `policy` resolved as `r`: τ schedule, sinks and the
/// SnapKV parameters (`snap_window = r.snap_window`). The tool sets `horizon` and `gumbel_noise`.
kvevict::PolicyParams policy_params(const EvictionFlags& flags, const Resolved& r);

/// The recent window to give a cache of `policy`: `tokens(r.w)` for keyformer, h2o, snapkv, knorm and keydiff,
/// and for tova when --recent was given (else 0: the paper's TOVA keeps none); 0 for streaming and window (their
/// window is k - sinks); with non-uniform --layer-budgets and a percentage --recent (or the default 30%; tova: a
/// given one), the ratio itself, so that each layer resolves it against its own budget.
kvevict::RecentWindow recent_for(const EvictionFlags& flags, const Resolved& r, const std::string& policy);

/// The --layer-budgets schedule for `policy`: as parsed, except that PyramidKV keeps SnapKV's
/// observation window in every layer (`reserved = r.snap_window` for snapkv), as its code does.
kvevict::LayerBudgets layer_budgets_for(const EvictionFlags& flags, const Resolved& r, const std::string& policy);

/// Parses --threads text; empty = the hardware's thread count (>= 1).
unsigned parse_threads(const std::string& text);

// ---- environment and files -------------------------------------------------------------------

/// The data root: $KVEVICT_SHARED_DIR, else "../shared" (relative to the working directory).
std::string shared_dir();
/// The model folder: $KVEVICT_MODEL_DIR, else shared_dir() + "/models/stories260K".
std::string model_dir();
/// The "Environment" / "Exit codes" footer every tool prints under --help.
std::string help_footer();

/// Resolves `--model` (a checkpoint file, or a folder holding exactly one model: a llama2.c `.bin` that
/// is not a `tok*.bin` tokenizer; or, in a folder without one, a `.gguf`) to a file and checks that it is a
/// model (see
/// `check_llama2_checkpoint`). `flag` names the source in messages ("--model" or
/// "$KVEVICT_MODEL_DIR"). Throws `UsageError`: missing path (with where to download stories260K),
/// no or several checkpoints in the folder (listing them), not a checkpoint.
std::string find_checkpoint(const std::string& path, const std::string& flag);

/// Checks the 28-byte header of a llama2.c legacy checkpoint and that the file size matches it; a file
/// with the GGUF magic passes (`llama2::Model::load` reads and checks it whole).
/// Throws `UsageError(flag)` saying "not a llama2.c checkpoint (…)" and what the file looks like:
/// a SentencePiece model, text, a newer llama2.c export, or truncated; and "'<path>' is not a regular
/// file (it is a FIFO)" (or a device, …) before opening anything that is not a regular file.
void check_llama2_checkpoint(const std::string& path, const std::string& flag);

/// The SentencePiece `.model` beside `checkpoint` (the only one in its folder), or "" if none.
std::string find_tokenizer_beside(const std::string& checkpoint);

/// Checks that the folder of output prefix (or file) `prefix` exists and is writable (by creating and
/// removing a probe file). Throws `UsageError(flag)` naming the folder and the reason.
void check_output_prefix(const std::string& prefix, const std::string& flag);

/// `check_output_prefix` for an output file, and that `path` is not a directory. Throws `UsageError(flag)`.
void check_output_file(const std::string& path, const std::string& flag);

/// Writes `contents` to `path` whole or not at all (`kvtools::AtomicOutput`: a temporary file beside it,
/// then rename). Throws `std::runtime_error` naming the file on failure (the temporary file is removed,
/// what was at `path` is unchanged).
void write_file_atomically(const std::string& path, const std::string& contents);

/// Removes the origin prefix a library puts in its messages ("llama2::Model::load: ",
/// "kvevict::Budget: "), so that a message reads in the user's terms.
std::string strip_origin(const std::string& message);

/// The message for a flag `typed` (e.g. "--polcy" or "--polcy=h2o") that `app` does not declare:
/// `hints[name]` when the tool has one for it (e.g. kvevict-quality's "--policy": use --policies), else
/// "did you mean --policy?" naming the declared long flag nearest in edit distance (a prefix of either
/// counts as 1) when it is at most max(2, length / 3) edits away, else only that the flag is unknown.
std::string unknown_flag_message(const CLI::App& app, const std::string& typed,
                                 const std::map<std::string, std::string>& hints = {});

/// Runs a tool: parses `argv` with `app`, then calls `body`. Maps every outcome to the shared exit codes
/// and prints one line "<tool>: <message>" on stderr:
///   --help: the help text, 0; an unknown flag: `unknown_flag_message` (with `hints`), 2; other CLI11
///   parse errors, `UsageError`, `std::invalid_argument`, `std::length_error`, `std::out_of_range`: 2;
///   `std::bad_alloc` and any other exception: 1.
int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body,
             const std::map<std::string, std::string>& hints = {});

}  // namespace kvcli
