// kvevict example — llama2/tokenizer.hpp: SentencePiece tokenizer of a llama2.c model.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "llama2/model.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace llama2 {

/// A SentencePiece model (`tok512.model`, `tok105.model`, ...) loaded with the
/// SentencePiece library. Encoding matches llama2.c's encoder on these
/// vocabularies: a leading space is added (SentencePiece's dummy prefix),
/// bytes outside the vocabulary fall back to `<0xNN>` tokens.
class Tokenizer {
 public:
  /// Loads a SentencePiece `.model` file. Throws `std::invalid_argument` naming
  /// the file if it is missing or not a SentencePiece model.
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Token ids of `text`, preceded by BOS when `bos` is true. Throws
  /// `std::runtime_error` if SentencePiece reports an error.
  std::vector<int> encode(const std::string& text, bool bos) const;
  /// Text of `ids` (BOS/EOS/control ids produce nothing; byte tokens are
  /// reassembled; the dummy-prefix space of the first piece is dropped).
  /// Throws `std::invalid_argument` if an id is outside the vocabulary.
  std::string decode(const std::vector<int>& ids) const;

  /// Begin-of-sequence id (1 for llama2.c vocabularies; -1 if undefined).
  int bos_id() const;
  /// End-of-sequence id (2 for llama2.c vocabularies; -1 if undefined).
  int eos_id() const;
  /// Number of pieces; must equal the model's vocab_size.
  int vocab_size() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

/// Checks that `tokenizer` (loaded from `tokenizer_path`) has exactly the model's `vocab_size`
/// pieces: with fewer, sampled ids cannot be decoded; with more, encoded ids are outside the
/// model's embedding. Throws `std::invalid_argument` naming the file and both sizes otherwise.
void check_vocab(const Tokenizer& tokenizer, const Config& model, const std::string& tokenizer_path);

}  // namespace llama2
