// kvevict tools — llama2/tokenizer_backend.cpp: checks shared by the GGUF tokenizers, UTF-8 helpers.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/tokenizer_backend.hpp"

#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace llama2 {

std::vector<GgufTokenType> check_gguf_vocab(const GgufVocab& vocab, const std::string& who) {
  const std::size_t n = vocab.tokens.size();
  if (n == 0) throw std::invalid_argument(who + ": tokenizer.ggml.tokens is empty");
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument(who + ": tokenizer.ggml.tokens has " + std::to_string(n) +
                                " tokens, more than ids (int32) can name");
  if (!vocab.scores.empty() && vocab.scores.size() != n)
    throw std::invalid_argument(who + ": tokenizer.ggml.scores has " + std::to_string(vocab.scores.size()) +
                                " entries for " + std::to_string(n) + " tokens");
  if (!vocab.token_types.empty() && vocab.token_types.size() != n)
    throw std::invalid_argument(who + ": tokenizer.ggml.token_type has " + std::to_string(vocab.token_types.size()) +
                                " entries for " + std::to_string(n) + " tokens");
  std::vector<GgufTokenType> types(n, GgufTokenType::normal);
  for (std::size_t i = 0; i < vocab.token_types.size(); ++i) {
    const std::int32_t t = vocab.token_types[i];
    if (t < 0 || t > 6)
      throw std::invalid_argument(who + ": tokenizer.ggml.token_type of token " + std::to_string(i) + " is " +
                                  std::to_string(t) + ", not a GGUF token type (0 to 6)");
    types[i] = static_cast<GgufTokenType>(t);
  }
  const std::pair<const char*, std::int64_t> specials[] = {{"bos_token_id", vocab.bos_id},
                                                           {"eos_token_id", vocab.eos_id},
                                                           {"unknown_token_id", vocab.unk_id},
                                                           {"padding_token_id", vocab.pad_id}};
  for (const auto& [name, id] : specials)
    if (id < -1 || id >= static_cast<std::int64_t>(n))
      throw std::invalid_argument(who + ": tokenizer.ggml." + name + " is " + std::to_string(id) +
                                  ", outside the vocabulary [0, " + std::to_string(n) + ")");
  std::unordered_map<std::string, std::size_t> seen;
  seen.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto [it, fresh] = seen.emplace(vocab.tokens[i], i);
    if (!fresh)
      throw std::invalid_argument(who + ": tokenizer.ggml.tokens has the piece '" + vocab.tokens[i] + "' twice (ids " +
                                  std::to_string(it->second) + " and " + std::to_string(i) + ")");
  }
  return types;
}

void PieceTrie::add(const std::string& piece, int value) {
  int node = 0;
  for (const char c : piece) {
    const std::uint64_t key = static_cast<std::uint64_t>(node) << 8 | static_cast<unsigned char>(c);
    const auto [it, fresh] = edges_.emplace(key, static_cast<int>(values_.size()));
    if (fresh) values_.push_back(-1);
    node = it->second;
  }
  if (node != 0 && values_[static_cast<std::size_t>(node)] < 0) values_[static_cast<std::size_t>(node)] = value;
}

std::pair<std::size_t, int> PieceTrie::longest(const char* s, std::size_t n) const {
  std::pair<std::size_t, int> best{0, -1};
  if (empty()) return best;
  int node = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto it = edges_.find(static_cast<std::uint64_t>(node) << 8 | static_cast<unsigned char>(s[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (values_[static_cast<std::size_t>(node)] >= 0) best = {i + 1, values_[static_cast<std::size_t>(node)]};
  }
  return best;
}

std::size_t utf8_char_length(const char* s, std::size_t n) {
  if (n == 0) return 0;
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (n < len || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < len; ++i)
    if (b(i) < 0x80 || b(i) > 0xBF) return 0;
  return len;
}

std::string utf8_encode(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace llama2
