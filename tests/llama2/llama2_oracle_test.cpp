// tests/llama2/llama2_oracle_test.cpp — exactness oracles: the engine with a full cache reproduces
// the original llama2.c implementation on the real checkpoints in ../shared (see
// ../shared/reference/README.md): greedy ids from a lone BOS, teacher-forced NLL per token on the
// TinyStories validation text, and the babyllama-char105 greedy text its README quotes.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "llama2/tokenizer.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using llama2_test::shared_dir;

constexpr std::size_t kWindow = 512;  // tokens per NLL window (the reference's)
constexpr int kBos = 1;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Greedy decoding from `prompt` with a full cache, until BOS is predicted or `max_new` tokens.
std::vector<int> greedy(const llama2::Model& model, const std::vector<int>& prompt, std::size_t max_new) {
  llama2::Engine engine(model);
  const llama2::RowMatrix& pre = engine.prefill(prompt);
  const float* logits = pre.row(pre.rows() - 1).data();
  std::vector<int> out;
  while (out.size() < max_new) {
    const int next = llama2::argmax(logits, model.config().vocab_size);
    if (next == kBos) break;
    out.push_back(next);
    if (engine.position() == model.config().seq_len) break;
    logits = engine.step(next);
  }
  return out;
}

// -log softmax(logits)[target], in double.
double nll(const float* logits, std::size_t vocab, int target) {
  const double max_logit = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return max_logit + std::log(sum) - static_cast<double>(logits[target]);
}

// One window of stories260K_tinystories_val_nll_full_cache.tsv.
struct NllWindow {
  std::vector<int> inputs, targets;  // position t: inputs[t] -> targets[t], t = 0..510
  std::vector<double> nll;
  double mean_nll = 0.0;  // from the "# window N mean_nll X" line
};

std::vector<NllWindow> read_nll_reference(const fs::path& path) {
  std::ifstream in(path);
  std::vector<NllWindow> windows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      const auto at = line.find("mean_nll");
      if (at == std::string::npos)
        windows.emplace_back();
      else if (!windows.empty())
        windows.back().mean_nll = std::stod(line.substr(at + 8));
      continue;
    }
    if (windows.empty()) continue;
    std::istringstream row(line);
    std::size_t pos = 0;
    int input = 0, target = 0;
    double value = 0.0;
    row >> pos >> input >> target >> value;
    windows.back().inputs.push_back(input);
    windows.back().targets.push_back(target);
    windows.back().nll.push_back(value);
  }
  return windows;
}

// The reference tokenization: paragraphs split on blank lines, each encoded with BOS prefixed,
// ids concatenated; stops once `needed` ids are there.
std::vector<int> tokenize_paragraphs(const llama2::Tokenizer& tok, const std::string& text, std::size_t needed) {
  std::vector<int> ids;
  std::size_t start = 0;
  while (start < text.size() && ids.size() < needed) {
    std::size_t end = text.find("\n\n", start);
    if (end == std::string::npos) end = text.size();
    std::string paragraph = text.substr(start, end - start);
    while (!paragraph.empty() && paragraph.back() == '\n') paragraph.pop_back();
    if (!paragraph.empty()) {
      const auto p = tok.encode(paragraph, true);
      ids.insert(ids.end(), p.begin(), p.end());
    }
    start = end + 2;
  }
  return ids;
}

class Stories260K : public ::testing::Test {
 protected:
  fs::path model_dir() const { return shared_dir() / "models" / "stories260K"; }
  fs::path reference_dir() const { return shared_dir() / "reference"; }
};

TEST_F(Stories260K, GreedyFromBosReproducesLlama2cIdsAndText) {
  const fs::path ids_path = reference_dir() / "stories260K_greedy_from_bos.ids";
  KVEVICT_REQUIRE_SHARED_FILE(model_dir() / "stories260K.bin");
  KVEVICT_REQUIRE_SHARED_FILE(model_dir() / "tok512.model");
  KVEVICT_REQUIRE_SHARED_FILE(ids_path);
  std::vector<int> expected;
  {
    std::ifstream in(ids_path);
    for (int id; in >> id;) expected.push_back(id);
  }
  ASSERT_EQ(expected.size(), 345u);

  const llama2::Model model = llama2::Model::load((model_dir() / "stories260K.bin").string());
  const std::vector<int> got = greedy(model, {kBos}, model.config().seq_len);
  EXPECT_EQ(got, expected);

  // The tokenizer turns them into llama2.c's printed text.
  const llama2::Tokenizer tok((model_dir() / "tok512.model").string());
  std::string text = read_text(reference_dir() / "stories260K_greedy_from_bos.txt");
  while (!text.empty() && text.back() == '\n') text.pop_back();
  EXPECT_EQ(tok.decode(got), text);
}

class Stories260KNll : public Stories260K {
 protected:
  void SetUp() override {
    const fs::path tsv = reference_dir() / "stories260K_tinystories_val_nll_full_cache.tsv";
    const fs::path val = shared_dir() / "data" / "tinystories-val" / "tinystories_val.txt";
    KVEVICT_REQUIRE_SHARED_FILE(model_dir() / "stories260K.bin");
    KVEVICT_REQUIRE_SHARED_FILE(model_dir() / "tok512.model");
    KVEVICT_REQUIRE_SHARED_FILE(tsv);
    KVEVICT_REQUIRE_SHARED_FILE(val);
    windows_ = read_nll_reference(tsv);
    ASSERT_EQ(windows_.size(), 3u);
    for (const auto& w : windows_) ASSERT_EQ(w.nll.size(), kWindow - 1);

    const llama2::Tokenizer tok((model_dir() / "tok512.model").string());
    ids_ = tokenize_paragraphs(tok, read_text(val), windows_.size() * kWindow);
    ASSERT_GE(ids_.size(), windows_.size() * kWindow);
    ids_.resize(windows_.size() * kWindow);
    model_ = std::make_unique<llama2::Model>(llama2::Model::load((model_dir() / "stories260K.bin").string()));
  }

  // Window `w`'s 512 ids from our tokenizer.
  std::vector<int> window_ids(std::size_t w) const {
    return std::vector<int>(ids_.begin() + static_cast<std::ptrdiff_t>(w * kWindow),
                            ids_.begin() + static_cast<std::ptrdiff_t>((w + 1) * kWindow));
  }

  // Compares our per-token NLL (logits of position t in `logits_at(t)`) with window `w`.
  template <class LogitsAt>
  void expect_window_nll(std::size_t w, LogitsAt logits_at) {
    const NllWindow& ref = windows_[w];
    const std::size_t vocab = model_->config().vocab_size;
    double sum = 0.0, max_diff = 0.0;
    for (std::size_t t = 0; t + 1 < kWindow; ++t) {
      const double value = nll(logits_at(t), vocab, ref.targets[t]);
      sum += value;
      max_diff = std::max(max_diff, std::abs(value - ref.nll[t]));
      ASSERT_NEAR(value, ref.nll[t], 1e-3) << "window " << w << " position " << t;
    }
    const double mean = sum / static_cast<double>(kWindow - 1);
    EXPECT_NEAR(mean, ref.mean_nll, 1e-4) << "window " << w;
    RecordProperty("window" + std::to_string(w) + "_max_abs_diff", std::to_string(max_diff));
    std::printf("window %zu: mean NLL %.6f (llama2.c %.6f), max |diff| per token %.2e\n", w, mean, ref.mean_nll,
                max_diff);
  }

  std::vector<NllWindow> windows_;
  std::vector<int> ids_;
  std::unique_ptr<llama2::Model> model_;
};

TEST_F(Stories260KNll, SentencePieceTokenizationMatchesTheReferenceIds) {
  for (std::size_t w = 0; w < windows_.size(); ++w) {
    const std::vector<int> ids = window_ids(w);
    EXPECT_EQ(std::vector<int>(ids.begin(), ids.end() - 1), windows_[w].inputs) << "window " << w;
    EXPECT_EQ(std::vector<int>(ids.begin() + 1, ids.end()), windows_[w].targets) << "window " << w;
  }
}

// Windows 0 and 1 through prefill, window 2 through decode steps: every window is checked once and
// the test stays light enough for sanitizer builds (a Debug ASan prefill of 512 tokens takes ~5 s).
TEST_F(Stories260KNll, PrefillNllMatchesLlama2cOnWindows0And1) {
  for (std::size_t w = 0; w < 2; ++w) {
    llama2::Engine engine(*model_);
    const llama2::RowMatrix& logits = engine.prefill(window_ids(w));
    expect_window_nll(w, [&](std::size_t t) { return logits.row(static_cast<Eigen::Index>(t)).data(); });
  }
}

TEST_F(Stories260KNll, DecodeStepNllMatchesLlama2cOnWindow2) {
  llama2::Engine engine(*model_);
  const std::vector<int> ids = window_ids(2);
  std::vector<float> logits;  // [511][vocab]
  const std::size_t vocab = model_->config().vocab_size;
  for (std::size_t t = 0; t + 1 < kWindow; ++t) {
    const float* l = engine.step(ids[t]);
    logits.insert(logits.end(), l, l + vocab);
  }
  expect_window_nll(2, [&](std::size_t t) { return logits.data() + t * vocab; });
}

TEST(BabyLlamaChar105, GreedyTextBeginsAsItsReadmeSays) {
  const fs::path dir = shared_dir() / "models" / "babyllama-char105";
  KVEVICT_REQUIRE_SHARED_FILE(dir / "model.bin");
  KVEVICT_REQUIRE_SHARED_FILE(dir / "tok105.model");
  KVEVICT_REQUIRE_SHARED_FILE(dir / "README.md");
  // The README's line: Greedy from BOS starts: "<text>"
  const std::string readme = read_text(dir / "README.md");
  const std::string marker = "Greedy from BOS starts: \"";
  const auto begin = readme.find(marker);
  ASSERT_NE(begin, std::string::npos) << "README.md has no '" << marker << "' line";
  const auto end = readme.find('"', begin + marker.size());
  ASSERT_NE(end, std::string::npos);
  const std::string expected = readme.substr(begin + marker.size(), end - begin - marker.size());
  ASSERT_GT(expected.size(), 100u);

  const llama2::Model model = llama2::Model::load((dir / "model.bin").string());
  EXPECT_EQ(model.config().n_heads, 8u);
  EXPECT_EQ(model.config().n_kv_heads, 4u);
  const llama2::Tokenizer tok((dir / "tok105.model").string());
  ASSERT_EQ(static_cast<std::size_t>(tok.vocab_size()), model.config().vocab_size);
  // Character-level vocabulary: one token per character at most, plus slack.
  const std::string text = tok.decode(greedy(model, {kBos}, expected.size() + 16));
  EXPECT_EQ(text.substr(0, expected.size()), expected) << "full greedy text: " << text;
}

}  // namespace
