// kvevict tools — llama2/tokenizer.cpp: thin wrapper over the SentencePiece library or a GGUF vocabulary.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <stdexcept>

#include "file_input.hpp"
#include "llama2/bpe_tokenizer.hpp"
#include "llama2/spm_tokenizer.hpp"
#include "llama2/tokenizer_backend.hpp"

namespace llama2 {

Tokenizer::Tokenizer(const std::string& model_path) : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // SentencePiece reports most bad files through its status, but a malformed model can also throw from
  // inside the library (e.g. Darts' "zero-length key" for an empty piece, found by fuzz_llama2_load):
  // every failure is the same input error naming the file.
  // The library reads the whole file: a FIFO or /dev/zero would be read until memory ran out.
  if (const std::string problem = kvtools::file_problem(model_path); problem.rfind("is not", 0) == 0)
    throw std::invalid_argument("llama2::Tokenizer: cannot load SentencePiece model '" + model_path + "': " + problem);
  sentencepiece::util::Status status;
  try {
    status = sp_->Load(model_path);
  } catch (const std::exception& e) {
    throw std::invalid_argument("llama2::Tokenizer: cannot load SentencePiece model '" + model_path + "': " + e.what());
  } catch (...) {
    throw std::invalid_argument("llama2::Tokenizer: cannot load SentencePiece model '" + model_path +
                                "': the SentencePiece library rejected it");
  }
  if (!status.ok())
    throw std::invalid_argument("llama2::Tokenizer: cannot load SentencePiece model '" + model_path +
                             "': " + status.ToString());
}

Tokenizer::Tokenizer() = default;

Tokenizer Tokenizer::from_gguf(const GgufVocab& vocab, const SpmNormalization& normalization) {
  Tokenizer t;
  if (vocab.model == "llama") {
    t.gguf_ = std::make_unique<SpmTokenizer>(vocab, normalization);
  } else if (vocab.model == "gpt2") {
    t.gguf_ = std::make_unique<BpeTokenizer>(vocab);
  } else {
    throw std::invalid_argument("llama2::Tokenizer::from_gguf: tokenizer.ggml.model '" + vocab.model +
                                "' is not supported (supported: 'llama', 'gpt2')");
  }
  // The constructors above checked that there are 1 to INT32_MAX tokens and the ids are in [-1, size).
  t.gguf_bos_ = static_cast<int>(vocab.bos_id);
  t.gguf_eos_ = static_cast<int>(vocab.eos_id);
  t.gguf_size_ = static_cast<int>(vocab.tokens.size());
  return t;
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int> Tokenizer::encode(const std::string& text, bool bos) const {
  if (gguf_) {
    if (bos && gguf_bos_ < 0)
      throw std::invalid_argument("llama2::Tokenizer::encode: BOS requested but the vocabulary has no BOS token");
    std::vector<int> ids;
    if (bos) ids.push_back(gguf_bos_);
    const std::vector<int> body = gguf_->encode(text);
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }
  std::vector<int> pieces;
  const auto status = sp_->Encode(text, &pieces);
  if (!status.ok()) throw std::runtime_error("llama2::Tokenizer::encode: " + status.ToString());
  if (!bos) return pieces;
  std::vector<int> ids;
  ids.reserve(pieces.size() + 1);
  ids.push_back(bos_id());
  ids.insert(ids.end(), pieces.begin(), pieces.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  for (int id : ids)
    if (id < 0 || id >= vocab_size())
      throw std::invalid_argument("llama2::Tokenizer::decode: id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
  if (gguf_) return gguf_->decode(ids);
  std::string text;
  const auto status = sp_->Decode(ids, &text);
  if (!status.ok()) throw std::runtime_error("llama2::Tokenizer::decode: " + status.ToString());
  return text;
}

int Tokenizer::bos_id() const { return gguf_ ? gguf_bos_ : sp_->bos_id(); }
int Tokenizer::eos_id() const { return gguf_ ? gguf_eos_ : sp_->eos_id(); }
int Tokenizer::vocab_size() const { return gguf_ ? gguf_size_ : sp_->GetPieceSize(); }

void check_vocab(const Tokenizer& tokenizer, const Config& model, const std::string& tokenizer_path) {
  const int pieces = tokenizer.vocab_size();
  if (pieces < 0 || static_cast<std::size_t>(pieces) != model.vocab_size)
    throw std::invalid_argument("llama2::check_vocab: tokenizer '" + tokenizer_path + "' has " +
                                std::to_string(pieces) + " pieces but the model's vocab_size is " +
                                std::to_string(model.vocab_size));
}

}  // namespace llama2
