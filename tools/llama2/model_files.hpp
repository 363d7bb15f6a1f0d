// kvevict tools — llama2/model_files.hpp: the model and tokenizer a kvevict tool's --model and
// --tokenizer name, located, recognised and loaded once for every tool.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <string>

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

}  // namespace llama2
