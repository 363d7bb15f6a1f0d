// kvevict — tests/quality/documents_test.cpp: kvevict-quality's document windows, the recurrence classes
// of its "where the loss comes from" table, and the retrieval prompts (bench/quality/quality_eval.hpp,
// bench/quality/retrieval.hpp). No model needed: the retrieval generator is driven by a byte encoder. And
// the batched window evaluation (evaluate_with_reference, evaluate_batch) against the runs one at a time, on
// a synthetic checkpoint.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "file_input.hpp"
#include "llama2/eviction.hpp"
#include "oracle.hpp"
#include "quality_eval.hpp"
#include "retrieval.hpp"
#include "test_support.hpp"

namespace {

using kvquality::DocWindow;
using kvquality::Recurrence;

TEST(DocumentWindows, ExactOffsetsRoundRobinOverDocuments) {
  // Lengths 10, 3, 25, 7 with windows of 5: document 0 has 2, document 1 none, document 2 five, document 3 one.
  const std::vector<std::size_t> lengths{10, 3, 25, 7};
  const std::vector<DocWindow> all = kvquality::document_windows(lengths, 5, 0);
  const std::vector<DocWindow> expected{{0, 0}, {2, 0}, {3, 0}, {0, 5}, {2, 5}, {2, 10}, {2, 15}, {2, 20}};
  EXPECT_EQ(all, expected);
  const std::vector<DocWindow> first3 = kvquality::document_windows(lengths, 5, 3);
  EXPECT_EQ(first3, (std::vector<DocWindow>{{0, 0}, {2, 0}, {3, 0}}));
  // More than there are: all of them.
  EXPECT_EQ(kvquality::document_windows(lengths, 5, 100), expected);
  // A window as long as a document fits exactly; one token longer does not.
  EXPECT_EQ(kvquality::document_windows({7}, 7, 0), (std::vector<DocWindow>{{0, 0}}));
  EXPECT_TRUE(kvquality::document_windows({7}, 8, 0).empty());
  EXPECT_THROW(kvquality::document_windows(lengths, 0, 0), std::invalid_argument);
}

TEST(DocumentWindows, NoWindowCrossesADocumentAndEveryRunIsTheSame) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> lengths(1 + rng() % 6);
    for (std::size_t& n : lengths) n = rng() % 60;
    const std::size_t len = 1 + rng() % 12, max = rng() % 10;
    const std::vector<DocWindow> got = kvquality::document_windows(lengths, len, max);
    EXPECT_EQ(got, kvquality::document_windows(lengths, len, max));
    // Reference: every window of every document, (index in document, document) order.
    std::vector<std::pair<std::size_t, std::size_t>> ref;  // (i, d)
    for (std::size_t d = 0; d < lengths.size(); ++d)
      for (std::size_t i = 0; (i + 1) * len <= lengths[d]; ++i) ref.emplace_back(i, d);
    std::sort(ref.begin(), ref.end());
    if (max != 0 && ref.size() > max) ref.resize(max);
    ASSERT_EQ(got.size(), ref.size());
    std::set<std::pair<std::size_t, std::size_t>> seen;
    for (std::size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got[j].doc, ref[j].second);
      EXPECT_EQ(got[j].offset, ref[j].first * len);
      EXPECT_LE(got[j].offset + len, lengths[got[j].doc]);  // inside its document
      EXPECT_TRUE(seen.insert({got[j].doc, got[j].offset}).second);  // no window twice
    }
  }
}

TEST(DocumentWindows, ListDocumentsTakesRstAndTxtFilesByName) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvevict_documents_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "sub.rst");
  for (const char* name : {"b.rst", "a.txt", "README.md", "COPYRIGHT", "SHA256SUMS", "c.rst"})
    std::ofstream(dir / name) << "text\n";
  const std::vector<std::string> got = kvquality::list_documents(dir.string());
  EXPECT_EQ(got, (std::vector<std::string>{(dir / "a.txt").string(), (dir / "b.rst").string(),
                                           (dir / "c.rst").string()}));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "README.md") << "text\n";
  EXPECT_THROW(kvquality::list_documents(dir.string()), std::runtime_error);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(kvquality::list_documents(dir.string()), std::runtime_error);
}

TEST(RecurrenceClasses, ExactClassesAtTheBoundaries) {
  // 110 distinct tokens, then some of them again; prompt 100, far_from 80.
  std::vector<int> tokens;
  for (int i = 0; i < 110; ++i) tokens.push_back(1000 + i);
  tokens[101] = tokens[100];  // distance 1: near
  tokens[102] = tokens[39];   // 63: near
  tokens[103] = tokens[39];   // 64 (to 39; the copy at 102 is nearer: 1): near
  tokens[104] = tokens[40];   // 64: mid
  tokens[105] = tokens[25];   // 80: mid
  tokens[106] = tokens[25];   // nearest copy at 105: 1, near
  tokens[107] = tokens[26];   // 81: far
  tokens[108] = tokens[0];    // 108: far
  // tokens[109] is new: none.
  const std::vector<Recurrence> got = kvquality::recurrence_classes(tokens, 100, 80);
  const std::vector<Recurrence> expected{Recurrence::near, Recurrence::near, Recurrence::near,
                                         Recurrence::mid,  Recurrence::mid,  Recurrence::near,
                                         Recurrence::far,  Recurrence::far,  Recurrence::none};
  EXPECT_EQ(got, expected);  // predictions of tokens 101 .. 109
  EXPECT_THROW(kvquality::recurrence_classes(tokens, 109, 80), std::invalid_argument);
  EXPECT_EQ(kvquality::recurrence_classes(tokens, 108, 80), std::vector<Recurrence>{Recurrence::none});
}

TEST(RecurrenceClasses, MatchesABruteForceReference) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> tokens(150 + rng() % 100);
    for (int& t : tokens) t = static_cast<int>(rng() % 40);
    const std::size_t prompt = rng() % (tokens.size() - 2), far_from = 64 + rng() % 50;
    const std::vector<Recurrence> got = kvquality::recurrence_classes(tokens, prompt, far_from);
    ASSERT_EQ(got.size(), tokens.size() - prompt - 1);
    for (std::size_t t = prompt; t + 1 < tokens.size(); ++t) {
      Recurrence want = Recurrence::none;
      for (std::size_t j = t + 1; j-- > 0;)
        if (tokens[j] == tokens[t + 1]) {
          const std::size_t d = t + 1 - j;
          want = d < 64 ? Recurrence::near : d <= far_from ? Recurrence::mid : Recurrence::far;
          break;
        }
      EXPECT_EQ(got[t - prompt], want) << "t = " << t;
    }
  }
}

// One id per byte: the generator's arithmetic is then readable off the strings.
std::vector<int> bytes(const std::string& s) { return std::vector<int>(s.begin(), s.end()); }
std::string text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += static_cast<char>(id);
  return s;
}
std::string cycle(char first, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<char>(first + i % 26);
  return s;
}

TEST(Retrieval, Splitmix64MatchesTheReferenceOutputs) {
  // Vigna's splitmix64.c from seed 1234567.
  std::uint64_t state = 1234567;
  EXPECT_EQ(kvquality::splitmix64(state), 6457827717110365317ULL);
  EXPECT_EQ(kvquality::splitmix64(state), 3203168211198807973ULL);
  EXPECT_EQ(kvquality::splitmix64(state), 9817491932198370423ULL);
}

TEST(Retrieval, PlainPromptsAreExactForAFixedSeed) {
  const std::string doc0 = cycle('a', 300), doc1 = cycle('A', 300);
  kvquality::RetrievalSpec spec;
  spec.prompt = 200;
  spec.seed = 7;
  const auto items = kvquality::make_retrieval_items({bytes(doc0), bytes(doc1)}, bytes, spec);
  ASSERT_EQ(items.size(), 3u);
  const std::string tail =
      "\n\nQuestion: What is the access code for the build server?\nAnswer: The access code for the build server is";
  // (document, offset, depth, code, cut = floor(depth * 47 / 100)); the excerpt is 200 - 105 - 48 = 47 tokens.
  struct Want {
    std::size_t doc, offset;
    unsigned depth;
    const char* code;
    std::size_t cut;
  };
  const Want want[] = {{0, 206, 10, "84487", 4}, {1, 179, 50, "69346", 23}, {0, 215, 90, "63674", 42}};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string& doc = want[i].doc == 0 ? doc0 : doc1;
    const std::string needle = std::string("\nThe access code for the build server is ") + want[i].code + ".\n";
    EXPECT_EQ(items[i].doc, want[i].doc);
    EXPECT_EQ(items[i].offset, want[i].offset);
    EXPECT_EQ(items[i].depth, want[i].depth);
    EXPECT_EQ(items[i].code, want[i].code);
    EXPECT_EQ(items[i].needle_at, want[i].cut);
    EXPECT_EQ(items[i].prompt.size(), 200u);
    EXPECT_EQ(text(items[i].prompt), doc.substr(want[i].offset, want[i].cut) + needle +
                                         doc.substr(want[i].offset + want[i].cut, 47 - want[i].cut) + tail);
  }
  // The same seed gives the same prompts; another seed other codes.
  const auto again = kvquality::make_retrieval_items({bytes(doc0), bytes(doc1)}, bytes, spec);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(again[i].prompt, items[i].prompt);
  spec.seed = 8;
  EXPECT_NE(kvquality::make_retrieval_items({bytes(doc0), bytes(doc1)}, bytes, spec)[0].code, "84487");
}

TEST(Retrieval, ChatPromptWithARepeatedNeedleIsExact) {
  const std::string doc0 = cycle('a', 300);
  kvquality::RetrievalSpec spec;
  spec.prompt = 200;
  spec.seed = 7;
  spec.depths = {50};
  spec.format = kvquality::RetrievalFormat::chat;
  spec.needle_repeats = 2;
  spec.im_start = 1001;
  spec.im_end = 1002;
  const auto items = kvquality::make_retrieval_items({bytes(doc0)}, bytes, spec);
  ASSERT_EQ(items.size(), 1u);
  // Frame: 1 + 5 ("user\n") before, 76 + 1 + 1 + 1 + 10 after; two needles of 48: excerpt 9, from offset 84;
  // needles after 4 and after 4 + (9 - 4) / 2 = 6 excerpt tokens.
  const std::string needle = "\nThe access code for the build server is 84487.\n";
  std::vector<int> want{1001};
  for (const std::string& part : {std::string("user\n"), doc0.substr(84, 4), needle, doc0.substr(88, 2), needle,
                                  doc0.substr(90, 3),
                                  std::string("\n\nWhat is the access code for the build server? Answer with the "
                                              "number only.")}) {
    const std::vector<int> b = bytes(part);
    want.insert(want.end(), b.begin(), b.end());
  }
  want.push_back(1002);
  want.push_back('\n');
  want.push_back(1001);
  for (char c : std::string("assistant\n")) want.push_back(c);
  EXPECT_EQ(items[0].prompt, want);
  EXPECT_EQ(items[0].prompt.size(), 200u);
  EXPECT_EQ(items[0].needle_at, 10u);
  EXPECT_EQ(items[0].offset, 84u);
  EXPECT_EQ(items[0].code, "84487");
}

TEST(Retrieval, BadArgumentsThrow) {
  kvquality::RetrievalSpec spec;
  spec.prompt = 200;
  const std::vector<std::vector<int>> docs{bytes(cycle('a', 300))};
  EXPECT_THROW(kvquality::make_retrieval_items({}, bytes, spec), std::invalid_argument);
  spec.depths = {101};
  EXPECT_THROW(kvquality::make_retrieval_items(docs, bytes, spec), std::invalid_argument);
  spec.depths = {10};
  spec.per_depth = 0;
  EXPECT_THROW(kvquality::make_retrieval_items(docs, bytes, spec), std::invalid_argument);
  spec.per_depth = 1;
  spec.prompt = 150;  // frame and needle take 153
  EXPECT_THROW(kvquality::make_retrieval_items(docs, bytes, spec), std::invalid_argument);
  spec.prompt = 400;  // an excerpt of 400 - 153 = 247 tokens fits the 300-token document, one of 347 does not
  EXPECT_NO_THROW(kvquality::make_retrieval_items(docs, bytes, spec));
  spec.prompt = 500;
  EXPECT_THROW(kvquality::make_retrieval_items(docs, bytes, spec), std::invalid_argument);
  EXPECT_THROW(kvquality::parse_retrieval_format("json"), std::invalid_argument);
  EXPECT_EQ(kvquality::first_digits(" 48193."), "48193");
  EXPECT_EQ(kvquality::first_digits("code 12 and 34"), "12");
  EXPECT_EQ(kvquality::first_digits("none"), "");
}

// Issue 37: a document too short for the excerpt (here: empty) was named "document 1", not by its file.
TEST(Retrieval, ATooShortDocumentIsNamedByItsFile) {
  kvquality::RetrievalSpec spec;
  spec.prompt = 200;  // an excerpt of 200 - 153 = 47 tokens
  spec.depths = {10, 50};
  const std::vector<std::vector<int>> docs{bytes(cycle('a', 300)), {}};
  auto message = [&] {
    try {
      kvquality::make_retrieval_items(docs, bytes, spec);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message(), "make_retrieval_items: document 1 has 0 tokens, fewer than the excerpt's 47");
  spec.doc_names = {"story.txt", "empty.txt"};
  EXPECT_EQ(message(), "make_retrieval_items: document 'empty.txt' has 0 tokens, fewer than the excerpt's 47");
}

// Issue 37: --data /dev/zero (or a FIFO) was read until memory ran out. Only regular files are read
// (a FIFO is refused without being opened, which would block), at most the cap's bytes.
TEST(ReadFile, RefusesWhatIsNotARegularFileAndCapsTheSize) {
  auto message = [](const std::string& path) {
    try {
      kvquality::read_file(path);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message("/dev/zero"), "'/dev/zero' is not a regular file (it is a character device)");
  EXPECT_EQ(message("/nonexistent/x.txt"), "'/nonexistent/x.txt': cannot read (No such file or directory)");
  llama2_test::TempFile fifo("kvevict_fifo"), dir("kvevict_dir"), small("kvevict_small");
  ASSERT_EQ(::mkfifo(fifo.path.c_str(), 0600), 0);
  EXPECT_EQ(message(fifo.path), "'" + fifo.path + "' is not a regular file (it is a FIFO)");
  std::filesystem::create_directory(dir.path);
  EXPECT_EQ(message(dir.path), "'" + dir.path + "' is not a regular file (it is a directory)");
  std::filesystem::remove(dir.path);
  {
    std::ofstream out(small.path, std::ios::binary);
    out << "0123456789";
  }
  EXPECT_EQ(kvquality::read_file(small.path), "0123456789");
  EXPECT_EQ(kvtools::read_regular_file(small.path, 10), "0123456789");
  try {
    kvtools::read_regular_file(small.path, 4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "'" + small.path + "' has 10 bytes, more than the 4 this tool reads");
  }
}

// The batched evaluation gives every number of the runs one at a time, bit for bit: the reference, each
// policy's per-token NLL, KL and top-1, and the oracle rows evaluated after the reference.
TEST(BatchEvaluation, EqualsTheRunsOneAtATimeBitForBit) {
  llama2_test::Header h;
  h.dim = 64;
  h.hidden_dim = 96;
  h.vocab_size = 80;
  h.seq_len = 64;
  llama2_test::TempFile f("kvevict_batch_eval");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(h, 17));
  const llama2::Model m = llama2::Model::load(f.path);
  std::vector<int> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 80);
  const std::size_t prompt = 24, horizon = tokens.size() - prompt - 1;

  kvquality::FutureAttention future;  // shaped before the oracle caches are built, as kvevict-quality does
  future.reset(m.config().n_layers, m.config().n_kv_heads, m.config().n_heads / m.config().n_kv_heads, horizon,
               tokens.size());
  auto engines_for = [&] {
    std::vector<std::unique_ptr<llama2::Engine>> out;
    for (const char* p : {"keyformer", "h2o", "tova"}) {
      llama2::EvictionSettings s;
      s.policy = p;
      s.budget = kvevict::Budget::tokens(10);
      s.recent = std::string(p) == "tova" ? kvevict::RecentWindow::tokens(0) : kvevict::RecentWindow::ratio(0.3);
      s.params.horizon = horizon;
      s.seed = 3;
      s.context = tokens.size();
      out.push_back(llama2::make_engine(m, s));
    }
    kvevict::CacheConfig oc;
    oc.n_q_heads = m.config().n_heads;
    oc.budget = kvevict::Budget::tokens(10);
    oc.recent = kvevict::RecentWindow::tokens(3);
    out.push_back(std::make_unique<llama2::Engine>(
        m,
        [oc, &future](std::size_t layer, const kvevict::KVView<float>& view) -> std::unique_ptr<kvevict::CacheInterface> {
          return std::make_unique<kvquality::OracleCache>(oc, view, future, layer);
        },
        0, tokens.size()));
    return out;
  };
  auto same = [](const kvquality::WindowResult& a, const kvquality::WindowResult& b) {
    return a.nll == b.nll && a.kl == b.kl && a.top1 == b.top1 && a.token_nll == b.token_nll;
  };

  // One at a time: the reference (recording the future attention), then each run.
  llama2::Engine full(m);
  std::vector<std::unique_ptr<llama2::Engine>> alone = engines_for();
  const kvquality::Reference want_ref = kvquality::full_reference(full, tokens, prompt, &future);
  std::vector<kvquality::WindowResult> want;
  for (auto& e : alone) want.push_back(kvquality::evaluate(*e, tokens, prompt, want_ref));
  EXPECT_GT(want[0].kl, 0.0);  // eviction changed something

  // Batched: the three policies with the reference, then the oracle against it.
  llama2::Engine lead(m, {}, 0, tokens.size());
  std::vector<std::unique_ptr<llama2::Engine>> batch = engines_for();
  std::vector<kvquality::WindowResult> got, got_oracle;
  const kvquality::Reference ref = kvquality::evaluate_with_reference(
      lead, {batch[0].get(), batch[1].get(), batch[2].get()}, tokens, prompt, got, &future);
  kvquality::evaluate_batch(lead, {batch[3].get()}, tokens, prompt, ref, got_oracle);
  EXPECT_EQ(ref.nll, want_ref.nll);
  EXPECT_EQ(ref.token_nll, want_ref.token_nll);
  EXPECT_EQ(ref.argmax, want_ref.argmax);
  EXPECT_EQ(ref.logp, want_ref.logp);
  ASSERT_EQ(got.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(same(got[i], want[i])) << "run " << i;
  ASSERT_EQ(got_oracle.size(), 1u);
  EXPECT_TRUE(same(got_oracle[0], want[3]));
  EXPECT_EQ(lead.hooks(), nullptr);  // the recorder is gone
}

}  // namespace
