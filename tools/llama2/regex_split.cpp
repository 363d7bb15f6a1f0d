// kvevict tools — llama2/regex_split.cpp: PCRE2 wrapper for the byte-level BPE pre-tokenizer.
// SPDX-License-Identifier: Apache-2.0
#define PCRE2_CODE_UNIT_WIDTH 8
#include "llama2/regex_split.hpp"

#include <pcre2.h>

#include <memory>
#include <new>
#include <stdexcept>

namespace llama2 {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// GPT-2's pre-tokenizer regex (Hugging Face ByteLevel(use_regex = true), OpenAI's encoder.py).
const char* const kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

}  // namespace

struct RegexSplit::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
  if (!impl_->code)
    throw std::invalid_argument("llama2::RegexSplit: pattern '" + pattern + "' does not compile at offset " +
                                std::to_string(offset) + ": " + pcre2_message(err));
  // JIT is an optimization only: where it is unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

std::vector<std::string_view> RegexSplit::split(const std::vector<std::string_view>& pieces) const {
  // Match data per call, not per pattern: split is const and may run on several threads at once.
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  std::vector<std::string_view> out;
  for (const std::string_view piece : pieces) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
    std::size_t start = 0, gap = 0;  // next search start; start of the not yet emitted text
    while (start < piece.size()) {
      const int rc = pcre2_match(impl_->code, subject, piece.size(), start, 0, match.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw std::runtime_error("llama2::RegexSplit: matching failed: " + pcre2_message(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
      const std::size_t b = ov[0], e = ov[1];
      if (e == b) {  // an empty match (none of the supported patterns has one): step one byte
        start = b + 1;
        continue;
      }
      if (b > gap) out.push_back(piece.substr(gap, b - gap));
      out.push_back(piece.substr(b, e - b));
      gap = start = e;
    }
    if (gap < piece.size()) out.push_back(piece.substr(gap));
  }
  return out;
}

std::vector<std::string> pre_tokenizer_patterns(const std::string& pre) {
  if (pre.empty() || pre == "default" || pre == "gpt2") return {kGpt2};
  if (pre == "smollm") return {"\\p{N}", kGpt2};
  throw std::invalid_argument("llama2::Tokenizer::from_gguf: tokenizer.ggml.pre '" + pre +
                              "' is not supported (supported: 'default', 'gpt2', 'smollm')");
}

}  // namespace llama2
