// kvevict tools — llama2/gguf_vocab.hpp: the tokenizer a GGUF file carries, as plain data.
// SPDX-License-Identifier: Apache-2.0
//
// The GGUF reader (llama2/gguf.hpp) fills this from the `tokenizer.ggml.*` metadata keys; the
// tokenizer (llama2/tokenizer.hpp, Tokenizer::from_gguf) turns it into ids. Keeping it plain data
// lets each side be tested without the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace llama2 {

/// The `tokenizer.ggml.*` metadata of a GGUF file (llama.cpp's names, gguf-py's constants).
struct GgufVocab {
  /// `tokenizer.ggml.model`: "llama" (SentencePiece scores) or "gpt2" (byte-level BPE with merges).
  std::string model;
  /// `tokenizer.ggml.pre`: the pre-tokenizer's name for "gpt2" ("smollm", "default", ...); empty if absent.
  std::string pre;
  /// `tokenizer.ggml.tokens`: the pieces, id = index. For "gpt2" they are byte-to-unicode encoded.
  std::vector<std::string> tokens;
  /// `tokenizer.ggml.scores`: one per token ("llama": SentencePiece log-probabilities); empty if absent.
  std::vector<float> scores;
  /// `tokenizer.ggml.token_type`: one per token (1 normal, 2 unknown, 3 control, 4 user-defined,
  /// 5 unused, 6 byte); empty if absent.
  std::vector<std::int32_t> token_types;
  /// `tokenizer.ggml.merges`: "gpt2" only, in rank order, each "left right" (one space between).
  std::vector<std::string> merges;
  /// Special ids (`tokenizer.ggml.bos_token_id`, `eos_token_id`, `unknown_token_id`,
  /// `padding_token_id`); -1 when the file does not give one.
  std::int64_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  /// `tokenizer.ggml.add_bos_token` / `add_eos_token`; -1 when absent, else 0 or 1.
  int add_bos = -1, add_eos = -1;
  /// `tokenizer.chat_template` (Jinja text); empty if absent.
  std::string chat_template;
};

}  // namespace llama2
