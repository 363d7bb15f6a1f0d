// kvevict tools — llama2/model_files.hpp: the model and tokenizer a kvevict tool's --model and
// --tokenizer name, located, recognised and loaded once for every tool, and the engine settings its
// shared eviction flags describe.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>

#include "cli/kvevict_cli.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"

namespace llama2 {

/// A loaded model with the tokenizer the tools use for it.
struct LoadedModel {
  std::string model_file;               ///< the checkpoint file --model resolved to
  Model model;                          ///< its weights
  std::optional<Tokenizer> tokenizer;   ///< empty when not needed and not given
  std::string tokenizer_source;         ///< the .model file, or "the GGUF vocabulary of '<file>'"
  /// Prepend BOS to encoded text: always for llama2.c models; for GGUF, `tokenizer.ggml.add_bos_token`
  /// (absent: true for a "llama" vocabulary, false for "gpt2", as llama.cpp does).
  bool add_bos = true;
  /// The id that ends generation: BOS for llama2.c models (their stories end with BOS), the vocabulary's
  /// EOS for GGUF; -1 if none.
  int end_id = 1;
  /// How generation stopped at `end_id`, for the tools' summary lines.
  std::string end_name() const;
};

/// Resolves `--model` (`model_arg`, or $KVEVICT_MODEL_DIR, else $KVEVICT_SHARED_DIR/models/stories260K
/// when empty; a file or a folder holding exactly one model: kvcli::find_checkpoint) and loads it.
/// The tokenizer: `tokenizer_arg` when given (a SentencePiece .model; with `need_tokenizer` false it is
/// loaded only if the file exists); else a GGUF model's own vocabulary; else the .model beside a llama2.c
/// checkpoint (required only when `need_tokenizer`). Throws `kvcli::UsageError` naming `--model` or
/// `--tokenizer` for a missing, unreadable or malformed file, or a tokenizer whose vocabulary size is not
/// the model's; lets `std::bad_alloc` through.
LoadedModel load_model(const std::string& model_arg, const std::string& tokenizer_arg, bool need_tokenizer);

/// Adds to `roles` the files `load_model(model_arg, tokenizer_arg, ...)` would read, resolved the same way
/// but without loading anything: the model file (under "--model") and the tokenizer given, or the
/// SentencePiece .model beside the checkpoint (under "--tokenizer"). Throws what kvcli::find_checkpoint
/// throws (a missing or unrecognised model). O(files in the model's folder).
void add_model_inputs(kvcli::FileRoles& roles, const std::string& model_arg, const std::string& tokenizer_arg);

/// The engine settings the shared flags `flags` describe for `policy` with k, w and sinks resolved as
/// `resolved` (kvcli::resolve): the policy, the token budget `max(k, 1)`, the recent window
/// (kvcli::recent_for), the parameters (kvcli::policy_params), the per-layer budgets
/// (kvcli::layer_budgets_for), `flags.seed`, one selection per layer with --shared-heads or the paged
/// layout, and the KV layout, page size and eviction unit. The tool sets the rest: `params.horizon`,
/// `params.gumbel_noise`, `prompt_len`, the prefill chunk and whatever its own flags change. Throws what
/// kvcli::recent_for and kvcli::layer_budgets_for throw.
EvictionSettings eviction_settings(const kvcli::EvictionFlags& flags, const kvcli::Resolved& resolved,
                                   const std::string& policy);

}  // namespace llama2
