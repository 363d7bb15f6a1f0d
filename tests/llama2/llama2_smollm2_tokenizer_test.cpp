// tests/llama2/llama2_smollm2_tokenizer_test.cpp — (realmodel) the tokenizer read from SmolLM2's GGUF
// gives, for the oracle's 40 strings, exactly the ids SmolLM2's Hugging Face tokenizer gives
// (tests/llama2/reference/smollm2/tokenizer_strings.json, written by scripts/oracle/smollm2_reference.py).
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llama2/gguf.hpp"
#include "llama2/tokenizer.hpp"
#include "realmodel_support.hpp"

namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return nlohmann::json::parse(in);
}

TEST(SmolLM2Tokenizer, VocabularyFromTheGgufIsSmolLM2s) {
  KVEVICT_REQUIRE_SMOLLM2(path);
  const llama2::GgufVocab v = llama2::read_gguf_vocab(path);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(v.tokens.size(), 49152u);
  EXPECT_EQ(v.merges.size(), 48900u);
  EXPECT_EQ(v.tokens[1], "<|im_start|>");
  EXPECT_EQ(v.tokens[2], "<|im_end|>");
  const llama2::Tokenizer tok = llama2::Tokenizer::from_gguf(v);
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
}

TEST(SmolLM2Tokenizer, IdsOfTheOraclesFortyStrings) {
  KVEVICT_REQUIRE_SMOLLM2(path);
  const llama2::Tokenizer tok = llama2::Tokenizer::from_gguf(llama2::read_gguf_vocab(path));
  const nlohmann::json ref = read_json(llama2_test::smollm2_reference_dir() / "tokenizer_strings.json");
  ASSERT_EQ(ref.at("strings").size(), 40u);
  int differs_from_transformers = 0;
  for (const auto& row : ref.at("strings")) {
    const std::string text = row.at("text").get<std::string>();
    const auto want = row.at("ids").get<std::vector<int>>();
    EXPECT_EQ(tok.encode(text, false), want) << "text '" << text << "'";
    EXPECT_EQ(tok.encode(text, true).front(), 1);
    // Decoding gives the text back, without the control tokens and the one byte (0x04) SmolLM2 has no token for.
    EXPECT_EQ(tok.decode(want), row.at("decoded_without_control").get<std::string>()) << "text '" << text << "'";
    if (row.at("ids_transformers_gguf").get<std::vector<int>>() != want) ++differs_from_transformers;
  }
  // transformers' GGUF tokenizer lacks SmolLM2's digit split; the reference file records where that shows.
  EXPECT_EQ(differs_from_transformers, 2);
}

TEST(SmolLM2Tokenizer, TheOraclesSequencesAreWhatTheTokenizerGives) {
  KVEVICT_REQUIRE_SMOLLM2(path);
  const llama2::Tokenizer tok = llama2::Tokenizer::from_gguf(llama2::read_gguf_vocab(path));
  const nlohmann::json greedy = read_json(llama2_test::smollm2_reference_dir() / "greedy_128.json");
  EXPECT_EQ(tok.encode(greedy.at("prompt").get<std::string>(), false), greedy.at("prompt_ids").get<std::vector<int>>());
  EXPECT_EQ(tok.decode(greedy.at("greedy_ids").get<std::vector<int>>()), greedy.at("text").get<std::string>());
  const nlohmann::json logits = read_json(llama2_test::smollm2_reference_dir() / "logits_512.json");
  const auto ids = logits.at("ids").get<std::vector<int>>();
  ASSERT_EQ(ids.size(), 512u);
  // The 512 ids are a prefix of the encoding of the slice they came from.
  const auto source = llama2_test::shared_dir() / logits.at("source").get<std::string>();
  KVEVICT_REQUIRE_SHARED_FILE(source);
  std::ifstream in(source, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = text.substr(logits.at("byte_offset").get<std::size_t>(), logits.at("text_bytes").get<std::size_t>());
  const auto mine = tok.encode(text, false);
  ASSERT_GE(mine.size(), 512u);
  EXPECT_EQ(std::vector<int>(mine.begin(), mine.begin() + 512), ids);
}

}  // namespace
