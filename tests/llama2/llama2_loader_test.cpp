// tests/llama2/llama2_loader_test.cpp — Model::load accepts well-formed llama2.c checkpoints and
// rejects truncated or inconsistent ones with a message that says what is wrong.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama2/model.hpp"
#include "test_support.hpp"

namespace {

using llama2::Model;
using llama2_test::Header;
using llama2_test::TempFile;

// Loads `path` and returns the exception message ("" if it loaded).
std::string load_error(const std::string& path) {
  try {
    Model::load(path);
  } catch (const std::invalid_argument& e) {  // bad input: the CLIs exit with code 2
    return e.what();
  }
  return "";
}

std::string load_error_for(const Header& h) {
  TempFile f("kvevict_bad_header");
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(Header{}, 1));
  return load_error(f.path);
}

TEST(Llama2Loader, LoadsTiedCheckpointAndMapsTheWeightsInFileOrder) {
  const Header h;
  auto w = llama2_test::random_weights(h, 7);
  TempFile f("kvevict_tied");
  llama2_test::write_checkpoint(f.path, h, w);
  const Model m = Model::load(f.path);
  const auto& c = m.config();
  EXPECT_EQ(c.dim, 16u);
  EXPECT_EQ(c.hidden_dim, 24u);
  EXPECT_EQ(c.n_layers, 2u);
  EXPECT_EQ(c.n_heads, 4u);
  EXPECT_EQ(c.n_kv_heads, 2u);
  EXPECT_EQ(c.vocab_size, 32u);
  EXPECT_EQ(c.seq_len, 48u);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 4u);
  EXPECT_EQ(c.kv_dim(), 8u);
  EXPECT_EQ(m.token_embedding()[0], w[0]);
  EXPECT_EQ(m.classifier(), m.token_embedding());
  // rms_att of layer 0 follows the embedding; wq of layer 1 follows wq of layer 0.
  EXPECT_EQ(m.layer(0).rms_att[0], w[32 * 16]);
  EXPECT_EQ(m.layer(1).wq - m.layer(0).wq, 16 * 16);
  // rms_final sits just before the legacy RoPE tables at the end of the file.
  EXPECT_EQ(m.rms_final()[0], w[w.size() - 48 * 4 - 16]);
}

TEST(Llama2Loader, LoadsUntiedCheckpointWithClassifierAtTheEnd) {
  Header h;
  h.vocab_size = -32;
  auto w = llama2_test::random_weights(h, 8);
  TempFile f("kvevict_untied");
  llama2_test::write_checkpoint(f.path, h, w);
  const Model m = Model::load(f.path);
  EXPECT_FALSE(m.config().shared_classifier);
  EXPECT_EQ(m.config().vocab_size, 32u);
  EXPECT_NE(m.classifier(), m.token_embedding());
  EXPECT_EQ(m.classifier()[0], w[w.size() - 32 * 16]);
}

TEST(Llama2Loader, RejectsATruncatedFileNamingBothSizes) {
  const Header h;
  auto w = llama2_test::random_weights(h, 9);
  w.pop_back();
  TempFile f("kvevict_truncated");
  llama2_test::write_checkpoint(f.path, h, w);
  const std::string msg = load_error(f.path);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(f.path), std::string::npos) << msg;
  const std::size_t expected = 28 + 4 * llama2_test::weight_floats(h);
  EXPECT_NE(msg.find(std::to_string(expected) + " bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(expected - 4)), std::string::npos) << msg;
}

TEST(Llama2Loader, RejectsTrailingBytes) {
  const Header h;
  auto w = llama2_test::random_weights(h, 10);
  w.push_back(0.0f);
  TempFile f("kvevict_trailing");
  llama2_test::write_checkpoint(f.path, h, w);
  EXPECT_NE(load_error(f.path).find("inconsistent"), std::string::npos);
}

TEST(Llama2Loader, RejectsATiedHeaderOnAnUntiedFile) {
  // The same bytes with the classifier's sign flipped no longer add up.
  Header untied;
  untied.vocab_size = -32;
  TempFile f("kvevict_flipped");
  llama2_test::write_checkpoint(f.path, Header{}, llama2_test::random_weights(untied, 11));
  EXPECT_NE(load_error(f.path).find("inconsistent"), std::string::npos);
}

TEST(Llama2Loader, RejectsAFileShorterThanTheHeader) {
  TempFile f("kvevict_short");
  std::ofstream(f.path, std::ios::binary) << "0123456789";
  EXPECT_NE(load_error(f.path).find("shorter than the 28-byte header"), std::string::npos);
}

TEST(Llama2Loader, RejectsAMissingFile) {
  const std::string msg = load_error("/nonexistent/kvevict/model.bin");
  EXPECT_NE(msg.find("/nonexistent/kvevict/model.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
}

TEST(Llama2Loader, RejectsInconsistentHeaders) {
  Header h;
  h.n_heads = 3;  // does not divide dim 16
  EXPECT_NE(load_error_for(h).find("n_heads does not divide dim"), std::string::npos);
  h = Header{};
  h.n_kv_heads = 3;  // does not divide n_heads 4
  EXPECT_NE(load_error_for(h).find("n_kv_heads must divide n_heads"), std::string::npos);
  h = Header{};
  h.n_kv_heads = 8;  // more KV heads than query heads
  EXPECT_NE(load_error_for(h).find("n_kv_heads must divide n_heads"), std::string::npos);
  h = Header{};
  h.dim = 12;
  h.n_heads = 4;  // head_dim 3 is odd: no RoPE pairs
  EXPECT_NE(load_error_for(h).find("must be even"), std::string::npos);
  h = Header{};
  h.n_layers = 0;
  EXPECT_NE(load_error_for(h).find("n_layers = 0"), std::string::npos);
  h = Header{};
  h.vocab_size = 0;
  EXPECT_NE(load_error_for(h).find("vocab_size = 0"), std::string::npos);
  h = Header{};
  h.seq_len = -5;
  EXPECT_NE(load_error_for(h).find("seq_len = -5"), std::string::npos);
}

TEST(Llama2Loader, RejectsHugeDimensionsWithoutOverflow) {
  Header h;
  h.dim = 1 << 30;
  h.n_heads = 1;
  h.n_kv_heads = 1;
  h.hidden_dim = 1 << 30;
  h.n_layers = 1 << 30;
  const std::string msg = load_error_for(h);
  EXPECT_FALSE(msg.empty());
  EXPECT_TRUE(msg.find("overflow") != std::string::npos || msg.find("truncated") != std::string::npos) << msg;
}

TEST(Llama2Loader, RejectsTheNewerExportFormat) {
  TempFile f("kvevict_ak42");
  Header h;
  std::memcpy(&h.dim, "ak42", 4);
  llama2_test::write_checkpoint(f.path, h, llama2_test::random_weights(Header{}, 12));
  EXPECT_NE(load_error(f.path).find("ak42"), std::string::npos);
}

}  // namespace

// Regression (fuzz seed llama2_load/regression-2pow31-layers): a 92-byte file whose header
// claims 2^31 - 1 layers is rejected by the size check, before anything is allocated.
TEST(Llama2Loader, RejectsAHeaderClaiming2Pow31LayersBeforeAllocating) {
  TempFile f("kvevict_2pow31_layers");
  Header h;
  h.dim = 8;
  h.hidden_dim = 8;
  h.n_layers = 2147483647;
  h.n_heads = 2;
  h.n_kv_heads = 2;
  h.vocab_size = 16;
  h.seq_len = 8;
  llama2_test::write_checkpoint(f.path, h, std::vector<float>(16, 0.0f));
  EXPECT_EQ(load_error(f.path),
            "llama2::Model::load: '" + f.path +
                "': truncated: the header (dim=8 hidden_dim=8 n_layers=2147483647 n_heads=2 n_kv_heads=2 "
                "vocab_size=16 seq_len=8) implies 3985729649532 bytes, the file has 92");
}

TEST(Llama2Loader, RejectsAHeaderWhoseSizeOverflows64Bits) {
  Header h;
  h.dim = 1 << 30;
  h.hidden_dim = 2147483647;
  h.n_layers = 2147483647;
  h.n_heads = 1;
  h.n_kv_heads = 1;
  h.vocab_size = 2147483647;
  h.seq_len = 2147483647;
  EXPECT_NE(load_error_for(h).find("': header dimensions are too large (size overflows 64 bits)"), std::string::npos);
}

// Issue 37 (the GGUF loader's check, for llama2.c files too): a NaN or inf weight gave silent garbage.
// Defaults: embedding 32 x 16 = 512 floats, rms_att 2 x 16, so layer 1's wq starts at 512 + 32 + 256.
TEST(Llama2Loader, RejectsANonFiniteWeightNamingItButNotTheUnusedRopeTables) {
  const Header h;
  const std::vector<float> clean = llama2_test::random_weights(h, 10);
  auto error_with = [&](std::size_t at, float value) {
    std::vector<float> w = clean;
    w[at] = value;
    TempFile f("kvevict_nonfinite");
    llama2_test::write_checkpoint(f.path, h, w);
    const std::string msg = load_error(f.path);
    return msg.empty() ? msg : msg.substr(msg.find("': ") + 3);
  };
  EXPECT_EQ(error_with(512 + 32 + 256 + 5, std::nanf("")), "weight 'wq' of layer 1 holds a non-finite value (nan at element 5)");
  const std::size_t rope = 48 * 4, rms_final_last = clean.size() - rope - 1;
  EXPECT_EQ(error_with(rms_final_last, -INFINITY), "weight 'rms_final' holds a non-finite value (-inf at element 15)");
  EXPECT_EQ(error_with(clean.size() - 1, INFINITY), "");  // the legacy RoPE tables are not read
}
