// kvevict tools — llama2/spm_tokenizer.cpp: SentencePiece BPE encoder/decoder over GGUF "llama" metadata.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/spm_tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <queue>
#include <stdexcept>

namespace llama2 {
namespace {

constexpr const char* kWho = "llama2::Tokenizer::from_gguf";
const std::string kSpace = "\xE2\x96\x81";        // U+2581, SentencePiece's escaped space
const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
const std::string kUnkSurface = " \xE2\x81\x87 ";  // " ⁇ ", SentencePiece's default unk_surface

std::string byte_piece(unsigned b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "<0x%02X>", b);
  return buf;
}

}  // namespace

SpmTokenizer::SpmTokenizer(const GgufVocab& vocab, const SpmNormalization& normalization)
    : pieces_(vocab.tokens), scores_(vocab.scores), norm_(normalization) {
  if (vocab.model != "llama")
    throw std::invalid_argument(std::string(kWho) + ": SpmTokenizer needs tokenizer.ggml.model 'llama', not '" +
                                vocab.model + "'");
  types_ = check_gguf_vocab(vocab, kWho);
  if (scores_.empty())
    throw std::invalid_argument(std::string(kWho) + ": a 'llama' (SentencePiece) vocabulary needs "
                                "tokenizer.ggml.scores; the file has none");
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const int id = static_cast<int>(i);
    switch (types_[i]) {
      case GgufTokenType::control:
      case GgufTokenType::unknown:
      case GgufTokenType::byte:
        reserved_.emplace(pieces_[i], id);
        break;
      case GgufTokenType::user_defined:
        if (!pieces_[i].empty()) user_defined_.add(pieces_[i], id);
        normal_.emplace(pieces_[i], id);
        break;
      default:
        normal_.emplace(pieces_[i], id);
    }
    if (types_[i] == GgufTokenType::unknown && unk_id_ < 0) unk_id_ = id;
    if (types_[i] == GgufTokenType::byte) byte_fallback_ = true;
  }
  if (vocab.unk_id >= 0) unk_id_ = static_cast<int>(vocab.unk_id);
  for (unsigned b = 0; b < 256; ++b) byte_ids_[b] = lookup(byte_piece(b));
}

int SpmTokenizer::lookup(const std::string& piece) const {
  if (const auto it = reserved_.find(piece); it != reserved_.end()) return it->second;
  if (const auto it = normal_.find(piece); it != normal_.end()) return it->second;
  return -1;
}

std::string SpmTokenizer::normalize(const std::string& text) const {
  // One normalized character at a time: a well-formed UTF-8 character as it is, an ill-formed byte as U+FFFD.
  std::size_t i = 0;
  const auto next = [&](std::string& ch) {
    const std::size_t len = utf8_char_length(text.data() + i, text.size() - i);
    ch = len ? text.substr(i, len) : kReplacement;
    i += len ? len : 1;
  };
  std::string ch;
  if (norm_.remove_extra_whitespaces)
    while (i < text.size() && text[i] == ' ') ++i;
  if (i == text.size()) return "";
  std::string out;
  out.reserve(text.size() + 3 * 8);
  if (norm_.add_dummy_prefix) out += kSpace;
  bool prev_space = norm_.remove_extra_whitespaces;
  while (i < text.size()) {
    next(ch);
    if (ch == " ") {
      if (norm_.remove_extra_whitespaces && prev_space) continue;
      out += kSpace;
      prev_space = true;
    } else {
      out += ch;
      prev_space = false;
    }
  }
  if (norm_.remove_extra_whitespaces)
    while (out.size() >= kSpace.size() && out.compare(out.size() - kSpace.size(), kSpace.size(), kSpace) == 0)
      out.resize(out.size() - kSpace.size());
  return out;
}

std::vector<int> SpmTokenizer::encode(const std::string& text) const {
  const std::string s = normalize(text);
  struct Symbol {
    std::size_t begin, size;
    int prev, next;
    bool freeze;
  };
  std::vector<Symbol> sym;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = user_defined_.longest(s.data() + i, s.size() - i).first;
    const bool freeze = len != 0;
    if (!len) len = std::max<std::size_t>(1, utf8_char_length(s.data() + i, s.size() - i));
    const int index = static_cast<int>(sym.size());
    sym.push_back({i, len, index - 1, i + len < s.size() ? index + 1 : -1, freeze});
    i += len;
  }

  struct Pair {
    float score;
    int left, right;
    std::size_t size;
  };
  // Highest score first; equal scores: the leftmost pair (SentencePiece's SymbolPairComparator).
  const auto worse = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> agenda(worse);
  std::unordered_map<std::string, std::pair<std::string, std::string>> rev_merge;  // unused piece -> halves
  const auto piece_of = [&](const Symbol& x) { return s.substr(x.begin, x.size); };
  const auto maybe_add = [&](int left, int right) {
    if (left == -1 || right == -1 || sym[left].freeze || sym[right].freeze) return;
    const std::string piece = s.substr(sym[left].begin, sym[left].size + sym[right].size);
    const auto it = normal_.find(piece);
    if (it == normal_.end()) return;
    agenda.push({scores_[static_cast<std::size_t>(it->second)], left, right, piece.size()});
    if (types_[static_cast<std::size_t>(it->second)] == GgufTokenType::unused)
      rev_merge.insert_or_assign(piece, std::make_pair(piece_of(sym[left]), piece_of(sym[right])));
  };
  for (std::size_t i = 1; i < sym.size(); ++i) maybe_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!agenda.empty()) {
    const Pair top = agenda.top();
    agenda.pop();
    Symbol& l = sym[static_cast<std::size_t>(top.left)];
    Symbol& r = sym[static_cast<std::size_t>(top.right)];
    if (l.size == 0 || r.size == 0 || l.size + r.size != top.size) continue;  // stale
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = top.left;
    maybe_add(l.prev, top.left);
    maybe_add(top.left, l.next);
  }

  std::vector<int> ids;
  bool prev_unknown = false;
  const std::function<void(const std::string&)> emit = [&](const std::string& piece) {
    const int id = lookup(piece);
    if (id >= 0 && types_[static_cast<std::size_t>(id)] == GgufTokenType::unused) {
      if (const auto it = rev_merge.find(piece); it != rev_merge.end()) {
        emit(it->second.first);
        emit(it->second.second);
        return;
      }
    }
    if (id >= 0 && types_[static_cast<std::size_t>(id)] != GgufTokenType::unknown) {
      ids.push_back(id);
      prev_unknown = false;
      return;
    }
    if (byte_fallback_) {
      for (unsigned char c : piece) {
        const int b = byte_ids_[c];
        if (b >= 0) {
          ids.push_back(b);
          prev_unknown = false;
        } else {
          if (unk_id_ < 0)
            throw std::invalid_argument("llama2::Tokenizer::encode: byte " + byte_piece(c) +
                                        " has no byte token and the vocabulary has no unknown token");
          if (!prev_unknown) ids.push_back(unk_id_);
          prev_unknown = true;
        }
      }
      return;
    }
    if (unk_id_ < 0)
      throw std::invalid_argument("llama2::Tokenizer::encode: '" + piece +
                                  "' is not in the vocabulary, which has no unknown token and no byte tokens");
    if (!prev_unknown) ids.push_back(unk_id_);
    prev_unknown = true;
  };
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next)
    emit(piece_of(sym[static_cast<std::size_t>(i)]));
  return ids;
}

std::string SpmTokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  // SentencePiece's rule for the dummy prefix: at the start (nothing visible written yet) a piece's leading "▁"
  // is dropped; the first piece that loses one ends the start, unless remove_extra_whitespaces, where every
  // leading "▁" piece loses it until visible text appears.
  const bool strip = norm_.add_dummy_prefix || norm_.remove_extra_whitespaces;
  bool at_start = true;
  for (int id : ids) {
    const auto i = static_cast<std::size_t>(id);
    switch (types_[i]) {
      case GgufTokenType::control:
        continue;
      case GgufTokenType::unknown:
        out += kUnkSurface;
        at_start = false;
        break;
      case GgufTokenType::byte: {
        unsigned b = 0;
        at_start = false;
        if (std::sscanf(pieces_[i].c_str(), "<0x%2X>", &b) == 1) {
          out += static_cast<char>(b);
        } else {
          out += pieces_[i];
        }
        break;
      }
      default: {
        std::string piece = pieces_[i];
        bool dropped = false;
        if (strip && at_start && piece.compare(0, kSpace.size(), kSpace) == 0) {
          piece.erase(0, kSpace.size());
          dropped = !norm_.remove_extra_whitespaces;
        }
        if (!piece.empty() || dropped) at_start = false;
        for (std::size_t p = 0; (p = piece.find(kSpace, p)) != std::string::npos;) piece.replace(p, kSpace.size(), " ");
        out += piece;
      }
    }
  }
  return out;
}

}  // namespace llama2
