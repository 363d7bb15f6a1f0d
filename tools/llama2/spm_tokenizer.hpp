// kvevict tools — llama2/spm_tokenizer.hpp: SentencePiece BPE (by piece score) from a GGUF "llama" vocabulary.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "llama2/gguf_vocab.hpp"
#include "llama2/tokenizer_backend.hpp"

namespace llama2 {

/// SentencePiece's normalizer flags (NormalizerSpec) that change ids. A GGUF file does not store
/// them; llama.cpp behaves as the defaults here. SentencePiece's own defaults (used by models trained
/// without setting them, e.g. llama2.c's tok512.model) are add_dummy_prefix = true and
/// remove_extra_whitespaces = true; Llama 2's tokenizer.model sets remove_extra_whitespaces = false.
struct SpmNormalization {
  /// Prepend one space ("▁") to non-empty text.
  bool add_dummy_prefix = true;
  /// Drop leading and trailing spaces and fold runs of spaces (U+0020 only) into one.
  bool remove_extra_whitespaces = false;
};

/// The encoder of SentencePiece's BPE model (bpe_model.cc), rebuilt from GGUF metadata, so that a
/// "llama" GGUF gives the ids the SentencePiece library gives for the same pieces and scores:
///  1. normalize: ill-formed UTF-8 bytes become U+FFFD one byte at a time, spaces become "▁",
///     the SpmNormalization flags apply (identity normalization otherwise);
///  2. split into characters, except that user-defined pieces (type 4) are matched first, longest first,
///     and never merged;
///  3. repeatedly merge the adjacent pair whose concatenation is a normal, user-defined or unused piece
///     with the highest score (ties: the leftmost pair);
///  4. an unused piece (type 5) is split back into the two pieces it was merged from; a piece that is not
///     in the vocabulary becomes byte tokens `<0xNN>` when the vocabulary has byte tokens (type 6), else
///     the unknown id (consecutive unknowns fold into one).
/// Encoding costs O(n log n) in the text's length n. Decoding: "▁" becomes a space, byte tokens their
/// byte (ill-formed UTF-8 kept as it is, where the SentencePiece library writes U+FFFD), unknown tokens
/// " ⁇ ", control tokens nothing; at the start, a piece loses its leading "▁" when either flag is set
/// (SentencePiece's rule: only the first such piece, or every one until text appears when
/// remove_extra_whitespaces).
class SpmTokenizer final : public TokenizerBackend {
 public:
  /// Builds the encoder. Throws `std::invalid_argument` naming the problem: any of `check_gguf_vocab`'s,
  /// a model other than "llama", or no `tokenizer.ggml.scores`.
  SpmTokenizer(const GgufVocab& vocab, const SpmNormalization& normalization);

  /// Ids of `text` (no BOS). Throws `std::invalid_argument` if the text needs the unknown token and the
  /// vocabulary has none (no `unknown_token_id`, no type-2 token, no byte tokens).
  std::vector<int> encode(const std::string& text) const override;
  /// Text of `ids` (see the class comment).
  std::string decode(const std::vector<int>& ids) const override;

  /// The normalized text step 1 produces (exposed for tests).
  std::string normalize(const std::string& text) const;

 private:
  int lookup(const std::string& piece) const;  // reserved pieces first, then normal ones; -1 if absent

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<GgufTokenType> types_;
  SpmNormalization norm_;
  std::unordered_map<std::string, int> normal_;    // normal, user-defined, unused, undefined: mergeable
  std::unordered_map<std::string, int> reserved_;  // control, unknown, byte
  PieceTrie user_defined_;                         // user-defined pieces (value: unused)
  int unk_id_ = -1;
  int byte_ids_[256];
  bool byte_fallback_ = false;
};

}  // namespace llama2
