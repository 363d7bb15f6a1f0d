// kvevict tools — llama2/tokenizer.hpp: the engine's tokenizer: a SentencePiece model file (llama2.c)
// or the vocabulary a GGUF file carries (SentencePiece-style "llama" or byte-level BPE "gpt2").
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "llama2/gguf_vocab.hpp"
#include "llama2/model.hpp"
#include "llama2/spm_tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llama2 {

class TokenizerBackend;

/// Either a SentencePiece model (`tok512.model`, `tok105.model`, ...) loaded with the
/// SentencePiece library (encoding matches llama2.c's encoder on these vocabularies: a leading
/// space is added, SentencePiece's dummy prefix; bytes outside the vocabulary fall back to
/// `<0xNN>` tokens), or a GGUF file's vocabulary (`from_gguf`).
class Tokenizer {
 public:
  /// The tokenizer of a GGUF file's `tokenizer.ggml.*` metadata:
  ///  - model "llama": SentencePiece BPE by piece score (SpmTokenizer; the same ids as the SentencePiece
  ///    library for the same pieces, scores, types and `normalization`, which GGUF does not record: the
  ///    default is llama.cpp's, pass remove_extra_whitespaces = true for llama2.c's tok512/tok105);
  ///  - model "gpt2": byte-level BPE with the merges and the `tokenizer.ggml.pre` split (BpeTokenizer;
  ///    control/user-defined tokens written in the text become their id).
  /// BOS/EOS are `vocab.bos_id` / `vocab.eos_id`. Throws `std::invalid_argument` naming the problem for
  /// an unknown model, malformed vocabulary (see SpmTokenizer, BpeTokenizer, check_gguf_vocab).
  static Tokenizer from_gguf(const GgufVocab& vocab, const SpmNormalization& normalization = {});

  /// Loads a SentencePiece `.model` file. Throws `std::invalid_argument` naming
  /// the file if it is missing, not a regular file ("… 'p': is not a regular file (it is a FIFO)":
  /// the library would read a FIFO or /dev/zero without end) or not a SentencePiece model.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Token ids of `text`, preceded by BOS when `bos` is true. Throws
  /// `std::runtime_error` if SentencePiece reports an error, `std::invalid_argument` if `bos`
  /// is true and the vocabulary has no BOS token (or as SpmTokenizer::encode says).
  std::vector<int> encode(const std::string& text, bool bos) const;
  /// Text of `ids` (BOS/EOS/control ids produce nothing; byte tokens are
  /// reassembled; the dummy-prefix space of the first piece is dropped; a GGUF
  /// vocabulary keeps ill-formed UTF-8 as its bytes).
  /// Throws `std::invalid_argument` if an id is outside the vocabulary.
  std::string decode(const std::vector<int>& ids) const;

  /// Begin-of-sequence id (1 for llama2.c vocabularies; -1 if undefined).
  int bos_id() const;
  /// End-of-sequence id (2 for llama2.c vocabularies; -1 if undefined).
  int eos_id() const;
  /// Number of pieces; must equal the model's vocab_size.
  int vocab_size() const;

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;  // a SentencePiece model file, or
  std::unique_ptr<TokenizerBackend> gguf_;                      // a GGUF vocabulary
  int gguf_bos_ = -1, gguf_eos_ = -1, gguf_size_ = 0;
};

/// Checks that `tokenizer` (loaded from `tokenizer_path`) has exactly the model's `vocab_size`
/// pieces: with fewer, sampled ids cannot be decoded; with more, encoded ids are outside the
/// model's embedding. Throws `std::invalid_argument` naming the file and both sizes otherwise.
void check_vocab(const Tokenizer& tokenizer, const Config& model, const std::string& tokenizer_path);

}  // namespace llama2
