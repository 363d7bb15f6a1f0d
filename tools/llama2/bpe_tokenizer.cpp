// kvevict tools — llama2/bpe_tokenizer.cpp: byte-level BPE encoder/decoder over GGUF "gpt2" metadata.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/bpe_tokenizer.hpp"

#include <algorithm>
#include <queue>
#include <stdexcept>

namespace llama2 {
namespace {

constexpr const char* kWho = "llama2::Tokenizer::from_gguf";

bool printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::uint64_t pair_key(int left, int right) {
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32 | static_cast<std::uint32_t>(right);
}

}  // namespace

std::uint32_t byte_to_unicode(unsigned char b) {
  if (printable(b)) return b;
  std::uint32_t n = 0;
  for (unsigned x = 0; x < b; ++x)
    if (!printable(x)) ++n;
  return 256 + n;
}

BpeTokenizer::BpeTokenizer(const GgufVocab& vocab) : pieces_(vocab.tokens) {
  if (vocab.model != "gpt2")
    throw std::invalid_argument(std::string(kWho) + ": BpeTokenizer needs tokenizer.ggml.model 'gpt2', not '" +
                                vocab.model + "'");
  types_ = check_gguf_vocab(vocab, kWho);
  // Without merges every text would silently become its bytes (llama.cpp refuses such a file too).
  if (vocab.merges.empty())
    throw std::invalid_argument(std::string(kWho) + ": a 'gpt2' (byte-level BPE) vocabulary needs "
                                "tokenizer.ggml.merges; the file has none (or an empty array)");
  for (const auto& p : pre_tokenizer_patterns(vocab.pre)) split_.emplace_back(p);

  std::unordered_map<std::string, int> id_of;
  id_of.reserve(pieces_.size());
  for (std::size_t i = 0; i < pieces_.size(); ++i) id_of.emplace(pieces_[i], static_cast<int>(i));

  std::unordered_map<std::uint32_t, unsigned char> unicode_to_byte;
  for (unsigned b = 0; b < 256; ++b) {
    const std::string piece = utf8_encode(byte_to_unicode(static_cast<unsigned char>(b)));
    unicode_to_byte.emplace(byte_to_unicode(static_cast<unsigned char>(b)), static_cast<unsigned char>(b));
    const auto it = id_of.find(piece);
    byte_ids_[b] = it == id_of.end() ? -1 : it->second;
  }

  for (std::size_t r = 0; r < vocab.merges.size(); ++r) {
    const std::string& m = vocab.merges[r];
    const std::size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos)
      throw std::invalid_argument(std::string(kWho) + ": tokenizer.ggml.merges[" + std::to_string(r) + "] is '" + m +
                                  "', not two pieces separated by one space");
    const std::string left = m.substr(0, space), right = m.substr(space + 1);
    const auto l = id_of.find(left), rt = id_of.find(right), res = id_of.find(left + right);
    for (const auto& [it, name] :
         {std::make_pair(l, left), std::make_pair(rt, right), std::make_pair(res, left + right)})
      if (it == id_of.end())
        throw std::invalid_argument(std::string(kWho) + ": tokenizer.ggml.merges[" + std::to_string(r) + "] ('" + m +
                                    "') names '" + name + "', which is not in tokenizer.ggml.tokens");
    merges_.emplace(pair_key(l->second, rt->second), Merge{static_cast<int>(r), res->second});  // first rank wins
  }

  decoded_.resize(pieces_.size());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    if (types_[i] == GgufTokenType::control || types_[i] == GgufTokenType::user_defined) {
      if (!pieces_[i].empty()) specials_.add(pieces_[i], static_cast<int>(i));
      if (types_[i] == GgufTokenType::user_defined) decoded_[i] = pieces_[i];
      continue;
    }
    // Code points outside the byte map (none in a byte-level vocabulary) are kept as their UTF-8.
    const std::string& p = pieces_[i];
    for (std::size_t k = 0; k < p.size();) {
      const std::size_t len = utf8_char_length(p.data() + k, p.size() - k);
      if (!len) {
        decoded_[i] += p[k++];
        continue;
      }
      const unsigned lead_mask = len == 1 ? 0x7F : len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07;
      std::uint32_t cp = static_cast<unsigned char>(p[k]) & lead_mask;
      for (std::size_t j = 1; j < len; ++j) cp = cp << 6 | (static_cast<unsigned char>(p[k + j]) & 0x3F);
      const auto it = unicode_to_byte.find(cp);
      if (it != unicode_to_byte.end()) {
        decoded_[i] += static_cast<char>(it->second);
      } else {
        decoded_[i] += p.substr(k, len);
      }
      k += len;
    }
  }
}

std::vector<std::string> BpeTokenizer::pre_tokenize(const std::string& text) const {
  std::vector<std::string_view> pieces{std::string_view(text)};
  if (text.empty()) pieces.clear();
  for (const auto& s : split_) pieces = s.split(pieces);
  return {pieces.begin(), pieces.end()};
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int>& out) const {
  struct Symbol {
    int id, prev, next;
  };
  // A byte without a token is left out, and its neighbours become adjacent (Hugging Face's BPE without an
  // unknown token skips such characters the same way; llama.cpp drops them too).
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (const char c : piece) {
    const int id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) continue;
    const int index = static_cast<int>(sym.size());
    if (index > 0) sym.back().next = index;
    sym.push_back({id, index - 1, -1});
  }
  struct Candidate {
    int rank, left, left_id, right_id;
  };
  // Lowest rank first; equal ranks (the same merge at several places): the leftmost.
  const auto worse = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> agenda(worse);
  const auto maybe_add = [&](int left) {
    if (left < 0) return;
    const int right = sym[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const int l = sym[static_cast<std::size_t>(left)].id, r = sym[static_cast<std::size_t>(right)].id;
    const auto it = merges_.find(pair_key(l, r));
    if (it != merges_.end()) agenda.push({it->second.rank, left, l, r});
  };
  for (std::size_t i = 0; i + 1 < sym.size(); ++i) maybe_add(static_cast<int>(i));
  while (!agenda.empty()) {
    const Candidate c = agenda.top();
    agenda.pop();
    Symbol& l = sym[static_cast<std::size_t>(c.left)];
    if (l.id != c.left_id || l.next < 0 || sym[static_cast<std::size_t>(l.next)].id != c.right_id) continue;  // stale
    Symbol& r = sym[static_cast<std::size_t>(l.next)];
    l.id = merges_.at(pair_key(c.left_id, c.right_id)).result;
    r.id = -1;  // dead
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = c.left;
    maybe_add(l.prev);
    maybe_add(c.left);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next)
    out.push_back(sym[static_cast<std::size_t>(i)].id);
}

std::vector<int> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  std::size_t plain = 0;  // start of the text not yet encoded
  const auto flush = [&](std::size_t end) {
    if (end > plain)
      for (const auto& p : pre_tokenize(text.substr(plain, end - plain))) encode_piece(p, ids);
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto [len, id] = specials_.longest(text.data() + i, text.size() - i);
    if (len == 0) {
      ++i;
      continue;
    }
    flush(i);
    ids.push_back(id);
    i += len;
    plain = i;
  }
  flush(text.size());
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) out += decoded_[static_cast<std::size_t>(id)];
  return out;
}

}  // namespace llama2
