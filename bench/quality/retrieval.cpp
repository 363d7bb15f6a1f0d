// kvevict — bench/quality/retrieval.cpp: the needle-retrieval task (retrieval.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "retrieval.hpp"

#include <stdexcept>

namespace kvquality {

RetrievalFormat parse_retrieval_format(const std::string& text) {
  if (text == "plain") return RetrievalFormat::plain;
  if (text == "chat") return RetrievalFormat::chat;
  throw std::invalid_argument("retrieval format must be 'plain' or 'chat' (got '" + text + "')");
}

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string first_digits(const std::string& answer) {
  std::string out;
  for (char c : answer) {
    if (c >= '0' && c <= '9') {
      out += c;
    } else if (!out.empty()) {
      break;
    }
  }
  return out;
}

std::vector<RetrievalItem> make_retrieval_items(const std::vector<std::vector<int>>& docs,
                                                const std::function<std::vector<int>(const std::string&)>& encode,
                                                const RetrievalSpec& spec) {
  if (docs.empty()) throw std::invalid_argument("make_retrieval_items: docs is empty");
  if (spec.per_depth == 0) throw std::invalid_argument("make_retrieval_items: per_depth must be >= 1 (got 0)");
  if (spec.needle_repeats == 0)
    throw std::invalid_argument("make_retrieval_items: needle_repeats must be >= 1 (got 0)");
  for (unsigned d : spec.depths)
    if (d > 100) throw std::invalid_argument("make_retrieval_items: depth " + std::to_string(d) + " exceeds 100");
  const std::string subject = "the access code for the build server";
  std::vector<int> head, tail;  // the frame before and after the excerpt
  if (spec.format == RetrievalFormat::plain) {
    tail = encode("\n\nQuestion: What is " + subject + "?\nAnswer: The access code for the build server is");
  } else {
    head.push_back(spec.im_start);
    const std::vector<int> user = encode("user\n");
    head.insert(head.end(), user.begin(), user.end());
    tail = encode("\n\nWhat is " + subject + "? Answer with the number only.");
    tail.push_back(spec.im_end);
    const std::vector<int> nl = encode("\n");
    tail.insert(tail.end(), nl.begin(), nl.end());
    tail.push_back(spec.im_start);
    const std::vector<int> asst = encode("assistant\n");
    tail.insert(tail.end(), asst.begin(), asst.end());
  }
  std::uint64_t state = spec.seed;
  std::vector<RetrievalItem> items;
  for (std::size_t di = 0; di < spec.depths.size(); ++di)
    for (std::size_t j = 0; j < spec.per_depth; ++j) {
      RetrievalItem it;
      it.doc = items.size() % docs.size();
      it.depth = spec.depths[di];
      it.code = std::to_string(10000 + splitmix64(state) % 90000);
      const std::vector<int> needle = encode("\nThe access code for the build server is " + it.code + ".\n");
      const std::size_t frame = head.size() + tail.size() + spec.needle_repeats * needle.size();
      if (frame >= spec.prompt)
        throw std::invalid_argument("make_retrieval_items: prompt " + std::to_string(spec.prompt) +
                                    " leaves no room for an excerpt (frame and needle take " + std::to_string(frame) +
                                    " tokens)");
      const std::size_t excerpt = spec.prompt - frame;
      const std::vector<int>& doc = docs[it.doc];
      if (doc.size() < excerpt)
        throw std::invalid_argument("make_retrieval_items: document " +
                                    (it.doc < spec.doc_names.size() ? "'" + spec.doc_names[it.doc] + "'"
                                                                    : std::to_string(it.doc)) +
                                    " has " +
                                    std::to_string(doc.size()) + " tokens, fewer than the excerpt's " +
                                    std::to_string(excerpt));
      it.offset = static_cast<std::size_t>(splitmix64(state) % (doc.size() - excerpt + 1));
      // Needle copy c goes after cut[c] excerpt tokens: the first at the depth, the others evenly
      // spaced between it and the excerpt's end.
      std::vector<std::size_t> cut;
      const std::size_t first = it.depth * excerpt / 100;
      for (std::size_t c = 0; c < spec.needle_repeats; ++c)
        cut.push_back(first + c * (excerpt - first) / spec.needle_repeats);
      it.prompt = head;
      std::size_t pos = 0;
      for (std::size_t c = 0; c < cut.size(); ++c) {
        it.prompt.insert(it.prompt.end(), doc.begin() + static_cast<std::ptrdiff_t>(it.offset + pos),
                         doc.begin() + static_cast<std::ptrdiff_t>(it.offset + cut[c]));
        pos = cut[c];
        if (c == 0) it.needle_at = it.prompt.size();
        it.prompt.insert(it.prompt.end(), needle.begin(), needle.end());
      }
      it.prompt.insert(it.prompt.end(), doc.begin() + static_cast<std::ptrdiff_t>(it.offset + pos),
                       doc.begin() + static_cast<std::ptrdiff_t>(it.offset + excerpt));
      it.prompt.insert(it.prompt.end(), tail.begin(), tail.end());
      items.push_back(std::move(it));
    }
  return items;
}

}  // namespace kvquality
