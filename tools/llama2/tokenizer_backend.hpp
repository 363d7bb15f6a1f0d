// kvevict tools — llama2/tokenizer_backend.hpp: what a tokenizer built from GGUF metadata provides,
// and the checks every kind of GGUF vocabulary shares.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "llama2/gguf_vocab.hpp"

namespace llama2 {

/// GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's llama_token_type).
enum class GgufTokenType : std::int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4,
                                          unused = 5, byte = 6 };

/// A tokenizer whose vocabulary came from a GGUF file ("llama": SpmTokenizer, "gpt2": BpeTokenizer).
/// `Tokenizer` owns one and forwards to it; ids passed to `decode` are already range-checked there.
class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  /// Ids of `text`, without BOS. Never throws for valid or invalid UTF-8 text, except where the
  /// implementation says so.
  virtual std::vector<int> encode(const std::string& text) const = 0;
  /// Bytes of `ids` (each in [0, vocab_size)); control tokens produce nothing.
  virtual std::string decode(const std::vector<int>& ids) const = 0;
};

/// Checks what both kinds need and returns the token types, one per token (all `normal` when the file
/// gives none). Throws `std::invalid_argument` naming the problem: no tokens, more than INT32_MAX tokens,
/// scores or token_type of the wrong length, a token type outside [0, 6], a special id outside
/// [-1, tokens), or the same piece at two ids (both named). `who` prefixes the message.
std::vector<GgufTokenType> check_gguf_vocab(const GgufVocab& vocab, const std::string& who);

/// A byte trie of pieces (the special / user-defined tokens a tokenizer cuts out of the text before
/// anything else): `longest` finds the longest piece that starts at a given byte in O(length of the
/// longest piece that matches there), whatever the number of pieces (a scan of every piece at every
/// byte cost O(text × pieces): 1.2 s for a 5 KB prompt with ~49K user-defined pieces).
class PieceTrie {
 public:
  /// Adds `piece` (non-empty) with `value` (>= 0); a piece added twice keeps its first value.
  void add(const std::string& piece, int value);
  /// The longest added piece that is a prefix of `s[0, n)`: (its length, its value), or (0, -1).
  std::pair<std::size_t, int> longest(const char* s, std::size_t n) const;
  bool empty() const { return values_.size() <= 1; }

 private:
  std::vector<int> values_ = {-1};                 // per node: the value of the piece ending there, or -1
  std::unordered_map<std::uint64_t, int> edges_;   // (node << 8 | byte) -> child node
};

/// Length of the well-formed UTF-8 character at the start of `s` (1 to 4), or 0 if `s` is empty or
/// starts with an ill-formed sequence (overlong, surrogate, above U+10FFFF, truncated, stray continuation).
std::size_t utf8_char_length(const char* s, std::size_t n);

/// UTF-8 encoding of the code point `cp` (< 0x110000).
std::string utf8_encode(std::uint32_t cp);

}  // namespace llama2
