// kvevict — bench/quality/retrieval.hpp: the needle-retrieval task of kvevict-quality (--retrieval).
// SPDX-License-Identifier: Apache-2.0
//
// A prompt of exactly P tokens: an excerpt of a document (the haystack) with one line
//   "The access code for the build server is NNNNN."
// inserted at a depth of 10 / 50 / 90 % of the excerpt, and a question about it at the end; the
// model's greedy answer is scored by its digits (exact match of the first run of digits). The
// generator is a pure function of the documents' token ids, the encoder, P and a seed, so the same
// seed gives the same prompts on every machine (splitmix64; no std:: distribution, whose results are
// implementation-defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvquality {

/// How the prompt is framed.
enum class RetrievalFormat {
  plain,  ///< excerpt, then "\n\nQuestion: ...?\nAnswer: The access code for the build server is"
  chat,   ///< ChatML (SmolLM2's tokenizer.chat_template): a user turn holding excerpt + question, then
          ///< the assistant turn's header; the special ids are given (<|im_start|>, <|im_end|>)
};

/// Parses "plain" or "chat"; throws `std::invalid_argument` naming the bad value.
RetrievalFormat parse_retrieval_format(const std::string& text);

/// What the generator needs besides the documents.
struct RetrievalSpec {
  std::size_t prompt = 2048;                 ///< P: tokens of every prompt, exactly
  std::vector<unsigned> depths{10, 50, 90};  ///< needle depths, percent of the excerpt, each in [0, 100]
  std::size_t per_depth = 1;                 ///< prompts per depth
  std::uint64_t seed = 1;                    ///< the generator's seed
  RetrievalFormat format = RetrievalFormat::plain;
  std::size_t needle_repeats = 1;            ///< copies of the needle line (the 2nd, 3rd, ... spread evenly after
                                             ///< the first), >= 1
  int im_start = 1, im_end = 2;              ///< ChatML ids (chat only; the tool reads them from the model)
  std::vector<std::string> doc_names;        ///< the documents' names for messages (empty: "document i")
};

/// One prompt of the task.
struct RetrievalItem {
  std::size_t doc = 0;         ///< document index the excerpt comes from
  std::size_t offset = 0;      ///< first token of the excerpt in that document
  unsigned depth = 0;          ///< needle depth, percent
  std::size_t needle_at = 0;   ///< token index in `prompt` where the (first) needle line starts
  std::string code;            ///< the five digits to retrieve
  std::vector<int> prompt;     ///< exactly `RetrievalSpec::prompt` ids
};

/// Builds `depths.size() · per_depth` prompts, depth-major (every prompt of depth 0, then depth 1, ...).
/// Prompt i (0-based overall) draws from the splitmix64 stream of `seed`: its code (10000 + x mod 90000),
/// then the excerpt's offset (uniform over the document's valid offsets, by x mod count); its document is
/// `i mod docs.size()`. `encode(text)` must return the ids of `text` without BOS. The needle line is
/// encoded as "\n" + line + "\n"; the excerpt fills the rest of P; the needle goes after
/// `floor(depth · E / 100)` excerpt tokens (E: the excerpt's length). Throws `std::invalid_argument`
/// (naming the argument) for no documents, a depth > 100, per_depth or needle_repeats 0, or a
/// document too short for the excerpt ("make_retrieval_items: document 'a.txt' has 0 tokens, fewer than
/// the excerpt's 1900", by its `doc_names` entry, else "document 1"). O(P) per prompt plus the encoder.
std::vector<RetrievalItem> make_retrieval_items(const std::vector<std::vector<int>>& docs,
                                                const std::function<std::vector<int>(const std::string&)>& encode,
                                                const RetrievalSpec& spec);

/// The first maximal run of ASCII digits in `answer` ("" if none).
std::string first_digits(const std::string& answer);

/// splitmix64: advances `state` and returns the next 64-bit output (Steele, Lea, Flood 2014).
std::uint64_t splitmix64(std::uint64_t& state);

}  // namespace kvquality
