// tests/llama2/llama2_tokenizer_test.cpp — tokenizer loading errors are std::invalid_argument (bad
// input, exit 2 in the CLIs), and a tokenizer whose vocabulary does not match the model's is
// rejected by check_vocab (fuzz seed llama2_load/tokenizer-vocab-mismatch).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"
#include "test_support.hpp"

namespace {

std::string tok512_path() {
  const auto path = llama2_test::shared_dir() / "models" / "stories260K" / "tok512.model";
  return std::filesystem::is_regular_file(path) ? path.string() : "";
}

#define REQUIRE_TOK512(path)                                                      \
  const std::string path = tok512_path();                                         \
  if (path.empty()) {                                                             \
    if (llama2_test::models_required()) FAIL() << "tok512.model not found";       \
    GTEST_SKIP() << "tok512.model not found (set KVEVICT_SHARED_DIR)";            \
  }

TEST(Llama2Tokenizer, CheckVocabAcceptsTheModelsVocabularyAndNamesBothSizesOtherwise) {
  REQUIRE_TOK512(path);
  const llama2::Tokenizer tok(path);
  llama2::Config c;
  c.vocab_size = 512;
  EXPECT_NO_THROW(llama2::check_vocab(tok, c, path));
  for (std::size_t vocab : {511u, 513u, 1u}) {
    c.vocab_size = vocab;
    try {
      llama2::check_vocab(tok, c, path);
      FAIL() << "accepted vocab_size " << vocab;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "llama2::check_vocab: tokenizer '" + path +
                                           "' has 512 pieces but the model's vocab_size is " + std::to_string(vocab));
    }
  }
}

TEST(Llama2Tokenizer, DecodingAnIdOutsideTheVocabularyIsInvalidArgument) {
  REQUIRE_TOK512(path);
  const llama2::Tokenizer tok(path);
  try {
    tok.decode({1, 512});
    FAIL() << "decoded id 512";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::Tokenizer::decode: id 512 is outside the vocabulary [0, 512)");
  }
}

TEST(Llama2Tokenizer, AFileThatIsNotASentencePieceModelIsInvalidArgumentNamingIt) {
  llama2_test::TempFile f("kvevict_not_a_tokenizer");
  {
    std::ofstream out(f.path, std::ios::binary);
    out << "\x93NUMPY this is not a protobuf";
  }
  try {
    llama2::Tokenizer tok(f.path);
    FAIL() << "loaded a non-model file";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("llama2::Tokenizer: cannot load SentencePiece model '" + f.path + "': ", 0),
              0u)
        << e.what();
  }
  EXPECT_THROW(llama2::Tokenizer("/nonexistent/kvevict/tok.model"), std::invalid_argument);
}

}  // namespace
