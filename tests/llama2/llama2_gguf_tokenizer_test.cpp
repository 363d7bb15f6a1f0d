// tests/llama2/llama2_gguf_tokenizer_test.cpp — Tokenizer::from_gguf: the "llama" (SentencePiece BPE) kind
// gives the SentencePiece library's ids on tok512.model for many strings, both normalizations, and on the
// vocabulary read from stories260K.gguf; the "gpt2" (byte-level BPE) kind on hand-built vocabularies with
// exact ids, a randomized comparison against a naive merge loop, the pre-tokenizer's pieces, and the errors.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "llama2/bpe_tokenizer.hpp"
#include "llama2/gguf.hpp"
#include "llama2/spm_tokenizer.hpp"
#include "llama2/tokenizer.hpp"
#include "test_support.hpp"

namespace {

using llama2::GgufVocab;
using llama2::Tokenizer;

const std::string kSp = "\xE2\x96\x81";  // "▁"

std::string tok512_path() { return (llama2_test::shared_dir() / "models" / "stories260K" / "tok512.model").string(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The vocabulary of a SentencePiece model as a GGUF "llama" vocabulary, read through the library itself.
GgufVocab vocab_of(const sentencepiece::SentencePieceProcessor& sp) {
  GgufVocab v;
  v.model = "llama";
  for (int i = 0; i < sp.GetPieceSize(); ++i) {
    v.tokens.push_back(sp.IdToPiece(i));
    v.scores.push_back(sp.GetScore(i));
    v.token_types.push_back(sp.IsUnknown(i) ? 2 : sp.IsControl(i) ? 3 : sp.IsUnused(i) ? 5 : sp.IsByte(i) ? 6 : 1);
  }
  v.bos_id = sp.bos_id();
  v.eos_id = sp.eos_id();
  v.unk_id = sp.unk_id();
  return v;
}

// Strings for the SentencePiece comparison: fixed edge cases, every line of a python-howto file, and
// random strings over an alphabet with space runs, tabs, newlines, accents, CJK, emoji and ill-formed UTF-8.
std::vector<std::string> spm_strings() {
  std::vector<std::string> s = {"",
                                " ",
                                "   ",
                                "a",
                                "Hello world",
                                "  two  leading, two  inner, two trailing  ",
                                "Once upon a time, there was a little girl named Lily.",
                                "tabs\tand\nnewlines\r\n",
                                "naïve café, Straße, 日本語, 🙂🚀",
                                "digits 1234567890 and 3.14",
                                "\xff\xfe ill-formed \xc3 bytes \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 end\xe2\x82",
                                kSp + "already escaped" + kSp + kSp,
                                "<s> </s> <unk> <0x41> written as text"};
  const auto howto = llama2_test::shared_dir() / "data" / "python-howto" / "howto-unicode.rst";
  std::ifstream in(howto);
  for (std::string line; std::getline(in, line);) s.push_back(line);
  const std::vector<std::string> alphabet = {"a", "e", "t", "h", "o", " ", " ", " ", "  ", "\t", "\n", "The", "ing",
                                             ".", ",", "'", "1", "42", "é", "ß", "日", "語", "🙂", "\xe2\x96\x81",
                                             "\xff", "\xc3", "\x80", "\xe2\x82", "\xf0\x9f"};
  std::mt19937 rng(20);
  for (int i = 0; i < 2000; ++i) {
    std::string t;
    const int n = std::uniform_int_distribution<int>(0, 24)(rng);
    for (int k = 0; k < n; ++k) t += alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
    s.push_back(t);
  }
  return s;
}

void expect_same_as_sentencepiece(const sentencepiece::SentencePieceProcessor& sp, const Tokenizer& tok) {
  int compared = 0;
  for (const auto& text : spm_strings()) {
    std::vector<int> want;
    ASSERT_TRUE(sp.Encode(text, &want).ok());
    ASSERT_EQ(tok.encode(text, false), want) << "text '" << text << "'";
    std::vector<int> with_bos = want;
    with_bos.insert(with_bos.begin(), sp.bos_id());
    ASSERT_EQ(tok.encode(text, true), with_bos) << "text '" << text << "'";
    std::string decoded;
    ASSERT_TRUE(sp.Decode(with_bos, &decoded).ok());
    ASSERT_EQ(tok.decode(with_bos), decoded) << "text '" << text << "'";
    ++compared;
  }
  EXPECT_GT(compared, 2000);
}

TEST(Llama2GgufTokenizer, LlamaVocabularyGivesSentencePiecesIdsOnTok512) {
  const std::string path = tok512_path();
  KVEVICT_REQUIRE_SHARED_FILE(path);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(path).ok());
  // tok512.model was trained with SentencePiece's default normalizer flags (remove_extra_whitespaces on).
  const Tokenizer tok = Tokenizer::from_gguf(vocab_of(sp), {true, true});
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  expect_same_as_sentencepiece(sp, tok);
}

TEST(Llama2GgufTokenizer, DefaultNormalizationIsSentencePieceWithoutRemovingExtraWhitespace) {
  const std::string path = tok512_path();
  KVEVICT_REQUIRE_SHARED_FILE(path);
  // The same model with NormalizerSpec.remove_extra_whitespaces = false: a serialized ModelProto followed by
  // field 3 (normalizer_spec) holding field 4 = 0 merges into the existing spec (protobuf's merge rule).
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.LoadFromSerializedProto(read_file(path) + std::string("\x1a\x02\x20\x00", 4)).ok());
  std::vector<int> probe;
  ASSERT_TRUE(sp.Encode("a  b", &probe).ok());
  ASSERT_EQ(probe.size(), 3u) << "the spec edit did not take effect";  // ▁a ▁ ▁b: the run of spaces is kept
  const Tokenizer tok = Tokenizer::from_gguf(vocab_of(sp));
  expect_same_as_sentencepiece(sp, tok);
}

TEST(Llama2GgufTokenizer, LlamaVocabularyReadFromStories260KGgufMatchesTok512) {
  const std::string path = tok512_path();
  KVEVICT_REQUIRE_SHARED_FILE(path);
  const std::string gguf_path = (llama2_test::shared_dir() / "models" / "stories260K" / "stories260K.gguf").string();
  KVEVICT_REQUIRE_SHARED_FILE(gguf_path);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(path).ok());
  const GgufVocab from_file = llama2::read_gguf_vocab(gguf_path), from_sp = vocab_of(sp);
  EXPECT_EQ(from_file.model, "llama");
  EXPECT_EQ(from_file.tokens, from_sp.tokens);
  EXPECT_EQ(from_file.scores, from_sp.scores);
  EXPECT_EQ(from_file.token_types, from_sp.token_types);
  EXPECT_EQ(from_file.bos_id, 1);
  EXPECT_EQ(from_file.eos_id, 2);
  expect_same_as_sentencepiece(sp, Tokenizer::from_gguf(from_file, {true, true}));
}

// A tiny SentencePiece vocabulary; the expected ids are what the SentencePiece library (0.2) gives for the
// same pieces in a ModelProto without byte fallback.
GgufVocab tiny_spm() {
  GgufVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", kSp, "a", "b", "c", "ab", "bc", kSp + "a", "<x>", "x>"};
  v.scores = {0, 0, 0, 0, 0, 0, 0, -1, -0.5f, -2, 0, -0.1f};
  v.token_types = {2, 3, 3, 1, 1, 1, 1, 1, 5, 1, 4, 1};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

TEST(Llama2GgufTokenizer, SpmMergesByScoreResegmentsUnusedPiecesAndFoldsUnknowns) {
  const Tokenizer tok = Tokenizer::from_gguf(tiny_spm(), {true, true});
  EXPECT_EQ(tok.encode("abc", false), (std::vector<int>{9, 5, 6}));  // "bc" (-0.5) first, unused: b c
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int>{3, 7}));      // "ab" (-1) beats "▁a" (-2)
  EXPECT_EQ(tok.encode("axxb", false), (std::vector<int>{9, 0, 5}));  // x x: one unknown
  EXPECT_EQ(tok.encode("a\xc3\xa9\xc3\xa9"
                       "b c",
                       false),
            (std::vector<int>{9, 0, 5, 3, 6}));
  EXPECT_EQ(tok.encode("a<x>b", false), (std::vector<int>{9, 10, 5}));  // user-defined: matched, never merged
  EXPECT_EQ(tok.encode("<x>", false), (std::vector<int>{3, 10}));
  EXPECT_EQ(tok.encode("x>", false), (std::vector<int>{3, 11}));
  EXPECT_EQ(tok.encode("", false), std::vector<int>{});
  EXPECT_EQ(tok.encode("   ", true), std::vector<int>{1});
  EXPECT_EQ(tok.decode({0, 4, 1, 9, 0}), " \xE2\x81\x87 a a \xE2\x81\x87 ");
  EXPECT_EQ(tok.decode({1, 9, 3, 7}), "a ab");
}

TEST(Llama2GgufTokenizer, SpmNormalizationFlags) {
  const GgufVocab v = tiny_spm();
  const llama2::SpmTokenizer keep(v, {}), fold(v, {true, true}), bare(v, {false, false});
  EXPECT_EQ(keep.normalize("  a  b "), kSp + kSp + kSp + "a" + kSp + kSp + "b" + kSp);
  EXPECT_EQ(fold.normalize("  a  b "), kSp + "a" + kSp + "b");
  EXPECT_EQ(bare.normalize("  a  b "), kSp + kSp + "a" + kSp + kSp + "b" + kSp);
  EXPECT_EQ(keep.normalize(""), "");
  EXPECT_EQ(fold.normalize("   "), "");
  EXPECT_EQ(keep.normalize("a\xff\xc3"), kSp + "a\xEF\xBF\xBD\xEF\xBF\xBD");  // ill-formed bytes: U+FFFD each
  EXPECT_EQ(keep.decode({3, 9}), " a");   // the first piece's space is the dummy prefix
  EXPECT_EQ(bare.decode({9, 9}), " a a");  // no dummy prefix: nothing to strip
}

TEST(Llama2GgufTokenizer, SpmWithoutUnknownTokenRejectsTextItCannotEncode) {
  GgufVocab v = tiny_spm();
  v.token_types[0] = 1;
  v.unk_id = -1;
  const Tokenizer tok = Tokenizer::from_gguf(v);
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int>{3, 7}));
  try {
    tok.encode("axb", false);
    FAIL() << "encoded an unknown piece without an unknown token";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::Tokenizer::encode: 'x' is not in the vocabulary, which has no unknown "
                                     "token and no byte tokens");
  }
}

// A byte-level vocabulary: 3 specials, the 256 byte tokens (byte b has id 3 + b), then merges' results.
GgufVocab tiny_bpe() {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = "default";
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<x>"};
  v.token_types = {3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(llama2::utf8_encode(llama2::byte_to_unicode(static_cast<unsigned char>(b))));
    v.token_types.push_back(1);
  }
  v.merges = {"h e", "\xC4\xA0 t", "\xC4\xA0t he", "l l", "e ll", "a a"};  // Ġ = U+0120 = byte 0x20
  for (const char* t : {"he", "\xC4\xA0t", "\xC4\xA0the", "ll", "ell", "aa"}) {
    v.tokens.push_back(t);
    v.token_types.push_back(1);
  }
  v.bos_id = 1;
  v.eos_id = 0;
  return v;
}
constexpr int B(char c) { return 3 + static_cast<unsigned char>(c); }
constexpr int kHe = 259, kGthe = 261, kLl = 262, kAa = 264;  // 260 is "Ġt", a step of kGthe

TEST(Llama2GgufTokenizer, ByteToUnicodeIsGpt2sMap) {
  EXPECT_EQ(llama2::byte_to_unicode('!'), 0x21u);
  EXPECT_EQ(llama2::byte_to_unicode(0x00), 0x100u);
  EXPECT_EQ(llama2::byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(llama2::byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(llama2::byte_to_unicode(0x7F), 0x121u);
  EXPECT_EQ(llama2::byte_to_unicode(0xAD), 0x143u);
  EXPECT_EQ(llama2::byte_to_unicode(0xFF), 0xFFu);
  std::vector<std::uint32_t> all;
  for (int b = 0; b < 256; ++b) all.push_back(llama2::byte_to_unicode(static_cast<unsigned char>(b)));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.back(), 0x143u);
}

TEST(Llama2GgufTokenizer, Gpt2MergesByRankLeftmostFirstAndCutsOutSpecialTokens) {
  const Tokenizer tok = Tokenizer::from_gguf(tiny_bpe());
  EXPECT_EQ(tok.vocab_size(), 265);
  EXPECT_EQ(tok.encode("the", false), (std::vector<int>{B('t'), kHe}));
  EXPECT_EQ(tok.encode(" hell", false), (std::vector<int>{B(' '), kHe, kLl}));  // "h e" (0) before "e ll" (4)
  EXPECT_EQ(tok.encode(" the", false), (std::vector<int>{kGthe}));
  EXPECT_EQ(tok.encode("aaa", false), (std::vector<int>{kAa, B('a')}));  // equal ranks: the leftmost pair
  EXPECT_EQ(tok.encode("<|im_start|>the<x> the<|endoftext|>", true),
            (std::vector<int>{1, 1, B('t'), kHe, 2, kGthe, 0}));
  EXPECT_EQ(tok.encode("<|im_start", false),
            (std::vector<int>{B('<'), B('|'), B('i'), B('m'), B('_'), B('s'), B('t'), B('a'), B('r'), B('t')}));
  EXPECT_EQ(tok.encode("", false), std::vector<int>{});
  EXPECT_EQ(tok.decode({1, B('t'), kHe, 2, kGthe, 0}), "the<x> the");
  EXPECT_EQ(tok.decode({B('\xc3')}), "\xc3");  // ill-formed UTF-8 kept as its byte
  EXPECT_EQ(tok.decode(tok.encode("\xff\xfe\x80 ok \xc3\xa9", false)), "\xff\xfe\x80 ok \xc3\xa9");
}

TEST(Llama2GgufTokenizer, Gpt2LeavesOutBytesWithoutATokenAndMergesAcrossThem) {
  GgufVocab v = tiny_bpe();
  v.tokens[static_cast<std::size_t>(B('\x04'))] = "<unused>";
  v.merges.push_back("( (");
  v.tokens.push_back("((");
  v.token_types.push_back(1);
  const Tokenizer tok = Tokenizer::from_gguf(v);
  EXPECT_EQ(tok.encode("(\x04(", false), (std::vector<int>{265}));  // one pre-tokenizer piece: "(" 0x04 "("
  EXPECT_EQ(tok.encode("a\x04" "a", false), (std::vector<int>{B('a'), B('a')}));  // three pieces
  EXPECT_EQ(tok.encode("\x04", false), std::vector<int>{});
}

TEST(Llama2GgufTokenizer, PreTokenizerPiecesForDefaultAndSmollm) {
  GgufVocab v = tiny_bpe();
  const std::string text = "Hello  world 123's\n\nok  \t x2 ½";
  // The pieces Hugging Face tokenizers 0.23 gives (pre_tokenize_str, offsets mapped back to the text):
  // ByteLevel(use_regex) alone, and Sequence[Digits(individual_digits), ByteLevel(use_regex)].
  EXPECT_EQ(llama2::BpeTokenizer(v).pre_tokenize(text),
            (std::vector<std::string>{"Hello", " ", " world", " 123", "'s", "\n", "\n", "ok", "  \t", " x", "2",
                                      " ½"}));
  v.pre = "smollm";
  EXPECT_EQ(llama2::BpeTokenizer(v).pre_tokenize(text),
            (std::vector<std::string>{"Hello", " ", " world", " ", "1", "2", "3", "'s", "\n", "\n", "ok", "  \t",
                                      " x", "2", " ", "½"}));
  EXPECT_EQ(llama2::BpeTokenizer(v).pre_tokenize("a\xff" "b"), (std::vector<std::string>{"a", "\xff", "b"}));
}

// The naive reference: merge the leftmost pair of lowest rank, one merge at a time, until none applies.
std::vector<int> naive_bpe(const std::string& piece, const GgufVocab& v) {
  std::vector<std::string> sym;
  for (char c : piece) sym.push_back(llama2::utf8_encode(llama2::byte_to_unicode(static_cast<unsigned char>(c))));
  for (;;) {
    std::size_t best = std::numeric_limits<std::size_t>::max(), at = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      const auto it = std::find(v.merges.begin(), v.merges.end(), sym[i] + " " + sym[i + 1]);
      const auto rank = static_cast<std::size_t>(it - v.merges.begin());
      if (it != v.merges.end() && rank < best) best = rank, at = i;
    }
    if (best == std::numeric_limits<std::size_t>::max()) break;
    sym[at] += sym[at + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  std::vector<int> ids;
  for (const auto& s : sym)
    ids.push_back(static_cast<int>(std::find(v.tokens.begin(), v.tokens.end(), s) - v.tokens.begin()));
  return ids;
}

TEST(Llama2GgufTokenizer, Gpt2AgreesWithANaiveMergeLoopOnRandomVocabulariesAndTexts) {
  std::mt19937 rng(2020);
  const std::string letters = "abcd ";
  for (int round = 0; round < 20; ++round) {
    GgufVocab v = tiny_bpe();
    v.merges.clear();
    v.tokens.resize(259);
    v.token_types.resize(259);
    std::vector<std::string> pool;
    for (char c : letters) pool.push_back(llama2::utf8_encode(llama2::byte_to_unicode(static_cast<unsigned char>(c))));
    while (v.merges.size() < 40) {
      const auto& l = pool[std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng)];
      const auto& r = pool[std::uniform_int_distribution<std::size_t>(0, pool.size() - 1)(rng)];
      const std::string m = l + " " + r;
      if (std::find(v.merges.begin(), v.merges.end(), m) != v.merges.end()) continue;
      v.merges.push_back(m);
      if (std::find(v.tokens.begin(), v.tokens.end(), l + r) == v.tokens.end()) {
        v.tokens.push_back(l + r);
        v.token_types.push_back(1);
        pool.push_back(l + r);
      }
    }
    const llama2::BpeTokenizer tok(v);
    for (int k = 0; k < 50; ++k) {
      std::string text;
      const int n = std::uniform_int_distribution<int>(0, 30)(rng);
      for (int i = 0; i < n; ++i) text += letters[std::uniform_int_distribution<std::size_t>(0, 4)(rng)];
      std::vector<int> want;
      for (const auto& p : tok.pre_tokenize(text)) {
        const auto ids = naive_bpe(p, v);
        want.insert(want.end(), ids.begin(), ids.end());
      }
      ASSERT_EQ(tok.encode(text), want) << "round " << round << " text '" << text << "'";
      ASSERT_EQ(tok.decode(want), text);
    }
  }
}

TEST(Llama2GgufTokenizer, EncodingFromSeveralThreadsAtOnceGivesTheSameIds) {
  GgufVocab v = tiny_bpe();
  v.pre = "smollm";
  const Tokenizer tok = Tokenizer::from_gguf(v);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the hell 123 aaa <|im_start|> ";
  const std::vector<int> want = tok.encode(text, false);
  // "the" " hell" " " 1 2 3 " aaa" " " <|im_start|>: 2+3+1+3+3+1+1 = 14 ids; after a marker the next
  // "the" is " the" (1 id instead of 2): 13 ids for the 199 other repetitions, then the final " ".
  ASSERT_EQ(want.size(), 14u + 199u * 13u + 1u);
  EXPECT_EQ(std::vector<int>(want.begin(), want.begin() + 15),
            (std::vector<int>{B('t'), kHe, B(' '), kHe, kLl, B(' '), B('1'), B('2'), B('3'), B(' '), kAa, B('a'),
                              B(' '), 1, kGthe}));
  std::vector<std::vector<int>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got)
    threads.emplace_back([&tok, &text, &g] {
      for (int k = 0; k < 20; ++k) g = tok.encode(text, false);
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}

void expect_invalid(const GgufVocab& v, const std::string& message) {
  try {
    Tokenizer::from_gguf(v);
    FAIL() << "accepted a vocabulary that should give: " << message;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::Tokenizer::from_gguf: " + message);
  }
}

TEST(Llama2GgufTokenizer, MalformedVocabulariesAreInvalidArgumentNamingTheProblem) {
  GgufVocab v = tiny_bpe();
  v.merges.push_back("a zz");
  expect_invalid(v, "tokenizer.ggml.merges[6] ('a zz') names 'zz', which is not in tokenizer.ggml.tokens");
  v = tiny_bpe();
  v.merges.push_back("b c");
  expect_invalid(v, "tokenizer.ggml.merges[6] ('b c') names 'bc', which is not in tokenizer.ggml.tokens");
  v = tiny_bpe();
  v.merges.push_back("ab");
  expect_invalid(v, "tokenizer.ggml.merges[6] is 'ab', not two pieces separated by one space");
  v = tiny_bpe();
  v.merges.push_back("a  b");
  expect_invalid(v, "tokenizer.ggml.merges[6] is 'a  b', not two pieces separated by one space");
  v = tiny_bpe();
  v.pre = "llama-bpe";
  expect_invalid(v, "tokenizer.ggml.pre 'llama-bpe' is not supported (supported: 'default', 'gpt2', 'smollm')");
  v = tiny_bpe();
  v.model = "bert";
  expect_invalid(v, "tokenizer.ggml.model 'bert' is not supported (supported: 'llama', 'gpt2')");
  v = tiny_bpe();
  v.tokens[5] = v.tokens[3];
  expect_invalid(v, "tokenizer.ggml.tokens has the piece '" + v.tokens[3] + "' twice (ids 3 and 5)");
  v = tiny_bpe();
  v.token_types[7] = 9;
  expect_invalid(v, "tokenizer.ggml.token_type of token 7 is 9, not a GGUF token type (0 to 6)");
  v = tiny_bpe();
  v.token_types.pop_back();
  expect_invalid(v, "tokenizer.ggml.token_type has 264 entries for 265 tokens");
  v = tiny_bpe();
  v.eos_id = 265;
  expect_invalid(v, "tokenizer.ggml.eos_token_id is 265, outside the vocabulary [0, 265)");
  v = tiny_bpe();
  v.tokens.clear();
  v.token_types.clear();
  expect_invalid(v, "tokenizer.ggml.tokens is empty");
  v = tiny_spm();
  v.scores.clear();
  expect_invalid(v, "a 'llama' (SentencePiece) vocabulary needs tokenizer.ggml.scores; the file has none");
  // Issue 37: without merges every text became its bytes ("The quick brown fox jumps over the lazy dog":
  // 43 tokens instead of 9); llama.cpp refuses such a file too.
  v = tiny_bpe();
  v.merges.clear();
  expect_invalid(v, "a 'gpt2' (byte-level BPE) vocabulary needs tokenizer.ggml.merges; the file has none (or an "
                    "empty array)");
  v = tiny_spm();
  v.scores.push_back(0);
  expect_invalid(v, "tokenizer.ggml.scores has 13 entries for 12 tokens");
}

TEST(Llama2GgufTokenizer, BosIsRequiredOnlyWhenAskedForAndDecodeChecksIds) {
  GgufVocab v = tiny_bpe();
  v.bos_id = -1;
  const Tokenizer tok = Tokenizer::from_gguf(v);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.encode("the", false), (std::vector<int>{B('t'), kHe}));
  try {
    tok.encode("the", true);
    FAIL() << "added a BOS the vocabulary does not have";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::Tokenizer::encode: BOS requested but the vocabulary has no BOS token");
  }
  try {
    tok.decode({3, 265});
    FAIL() << "decoded id 265";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::Tokenizer::decode: id 265 is outside the vocabulary [0, 265)");
  }
  EXPECT_THROW(tok.decode({-1}), std::invalid_argument);
}

// Issue 37: special and user-defined pieces are found with a trie (PieceTrie) instead of a scan of
// every piece at every byte; the longest piece starting at a byte wins, as before. Pieces that are
// prefixes of each other, a piece cut short at the end of the text, and a piece inside another.
TEST(Llama2GgufTokenizer, SpecialPiecesAreMatchedLongestFirstByTheTrie) {
  GgufVocab v = tiny_bpe();
  for (const char* t : {"<a>", "<ab>", "<abc>", "c>"}) {
    v.tokens.push_back(t);
    v.token_types.push_back(4);
  }
  const int a = 265, ab = 266, abc = 267, c = 268;
  const Tokenizer tok = Tokenizer::from_gguf(v);
  EXPECT_EQ(tok.encode("<abc><ab><a><x>", false), (std::vector<int>{abc, ab, a, 2}));
  EXPECT_EQ(tok.encode("<ab<abc>c>", false), (std::vector<int>{B('<'), B('a'), B('b'), abc, c}));
  EXPECT_EQ(tok.encode("<abc", false), (std::vector<int>{B('<'), B('a'), B('b'), B('c')}));
  EXPECT_EQ(tok.decode({abc, c, 2}), "<abc>c><x>");

  llama2::PieceTrie trie;
  EXPECT_TRUE(trie.empty());
  trie.add("ab", 1);
  trie.add("abcd", 2);
  trie.add("ab", 7);  // the first value stays
  EXPECT_EQ(trie.longest("abcx", 4), (std::pair<std::size_t, int>{2, 1}));
  EXPECT_EQ(trie.longest("abcd", 4), (std::pair<std::size_t, int>{4, 2}));
  EXPECT_EQ(trie.longest("abcd", 3), (std::pair<std::size_t, int>{2, 1}));
  EXPECT_EQ(trie.longest("xab", 3), (std::pair<std::size_t, int>{0, -1}));
}

}  // namespace
