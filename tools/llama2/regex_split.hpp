// kvevict tools — llama2/regex_split.hpp: the pre-tokenizer split of byte-level BPE, with PCRE2.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llama2 {

/// One compiled PCRE2 pattern (UTF + UCP: \p{L}, \p{N}, \s are Unicode classes) that splits text the
/// way Hugging Face's `Split(pattern, behavior = Isolated)` and llama.cpp's unicode_regex_split do:
/// every match is a piece and so is every non-empty stretch between matches. Ill-formed UTF-8 is allowed
/// in the subject (PCRE2_MATCH_INVALID_UTF): an ill-formed byte never matches, so it lands in a gap piece.
class RegexSplit {
 public:
  /// Compiles `pattern`. Throws `std::invalid_argument` with PCRE2's message and offset if it is invalid.
  explicit RegexSplit(const std::string& pattern);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;

  /// Splits each piece of `pieces` (views into caller-owned text) and returns the finer pieces in order;
  /// their concatenation is the input's. O(total length) matching work per pattern; safe to call from
  /// several threads at once. Throws
  /// `std::runtime_error` with PCRE2's message if matching fails (e.g. its match limit is hit).
  std::vector<std::string_view> split(const std::vector<std::string_view>& pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The pattern sequence of a `tokenizer.ggml.pre` name, applied in order. Supported: "default" and ""
/// (GPT-2's regex), "gpt2" (the same), "smollm" (each digit alone, then GPT-2's regex: SmolLM2's
/// tokenizer.json has Digits(individual_digits) then ByteLevel(use_regex)). Throws `std::invalid_argument`
/// naming an unsupported name and the supported ones.
std::vector<std::string> pre_tokenizer_patterns(const std::string& pre);

}  // namespace llama2
