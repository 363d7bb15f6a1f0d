// kvevict tools — llama2/bpe_tokenizer.hpp: byte-level BPE (GPT-2 style) from a GGUF "gpt2" vocabulary.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "llama2/gguf_vocab.hpp"
#include "llama2/regex_split.hpp"
#include "llama2/tokenizer_backend.hpp"

namespace llama2 {

/// GPT-2's bytes_to_unicode: byte b -> a printable code point ('!'..'~', '¡'..'¬', '®'..'ÿ' map to
/// themselves, the other 68 bytes to U+0100.. in byte order). Byte-level token pieces are spelled with it.
std::uint32_t byte_to_unicode(unsigned char b);

/// Byte-level BPE as Hugging Face tokenizers (ByteLevel + BPE) and llama.cpp's "gpt2" vocabularies do it:
///  1. control (type 3) and user-defined (type 4) tokens written in the text are cut out as that token
///     (the longest one where several start at the same byte), as Hugging Face does for added tokens;
///  2. the rest is split by `tokenizer.ggml.pre`'s patterns (see pre_tokenizer_patterns);
///  3. each piece's bytes start as the byte tokens and the adjacent pair with the lowest merge rank is
///     merged until none is left (ties: the leftmost pair), O(m log m) for a piece of m bytes. A byte the
///     vocabulary has no token for is left out (SmolLM2 has none for 21 bytes, e.g. 0x04, 0xC0, 0xFF),
///     as Hugging Face's BPE without an unknown token and llama.cpp do.
/// Decoding maps each token's code points back to bytes (ill-formed UTF-8 is kept as those bytes);
/// user-defined tokens decode as their text, control tokens as nothing.
class BpeTokenizer final : public TokenizerBackend {
 public:
  /// Builds the encoder. Throws `std::invalid_argument` naming the problem: any of `check_gguf_vocab`'s,
  /// a model other than "gpt2", no merges (`tokenizer.ggml.merges` missing or empty: "a 'gpt2'
  /// (byte-level BPE) vocabulary needs tokenizer.ggml.merges; the file has none (or an empty array)"),
  /// an unsupported `pre`, or a merge that
  /// is not "left right" (one space), names a piece not in the vocabulary, or whose result is not in it.
  explicit BpeTokenizer(const GgufVocab& vocab);

  /// Ids of `text` (no BOS). Never throws on any bytes.
  std::vector<int> encode(const std::string& text) const override;
  /// Bytes of `ids` (see the class comment).
  std::string decode(const std::vector<int>& ids) const override;

  /// The pre-tokenizer's pieces of `text` (step 2, no special tokens cut out; exposed for tests).
  std::vector<std::string> pre_tokenize(const std::string& text) const;

 private:
  void encode_piece(std::string_view piece, std::vector<int>& out) const;

  struct Merge {
    int rank, result;
  };
  std::vector<std::string> pieces_;
  std::vector<GgufTokenType> types_;
  std::vector<RegexSplit> split_;
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  PieceTrie specials_;  // control/user-defined pieces -> id
  int byte_ids_[256];  // -1: the byte has no token
  std::vector<std::string> decoded_;  // each token's bytes
};

}  // namespace llama2
