// tests/llama2/llama2_gguf_model_test.cpp — GGUF models: the same logits as their llama2.c twin, a quantized
// re-encoding equal to its dequantized twin, every bad model named (issue 37's hostile files among them), and
// stories260K.gguf's llama2.c greedy ids. The reader and the dequantizers: llama2_gguf_test.cpp.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "llama2/dequantize.hpp"
#include "llama2/engine.hpp"
#include "llama2/gguf.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "test_support.hpp"

namespace {

using gguf_test::Builder;
using gguf_test::Bytes;
using llama2::gguf::TensorType;
using llama2::gguf::ValueType;

// ---- models ------------------------------------------------------------------------------------

// The llama2.c checkpoint (test_support.hpp layout) `w` of `h` as a GGUF: 2-D tensors whose rows are
// a multiple of 32 in `quant` (F32: none), the rest F32. With `twin`, the quantized tensors are
// written back as the F32 values they dequantize to.
Builder to_gguf(const llama2_test::Header& h, const std::vector<float>& w, TensorType quant, bool twin,
                float theta = 10000.0f, std::uint32_t kv_heads_key = 0, bool float_keys = true) {
  const std::uint64_t d = static_cast<std::uint64_t>(h.dim), hid = static_cast<std::uint64_t>(h.hidden_dim),
                      L = static_cast<std::uint64_t>(h.n_layers),
                      V = static_cast<std::uint64_t>(h.vocab_size < 0 ? -h.vocab_size : h.vocab_size),
                      hd = d / static_cast<std::uint64_t>(h.n_heads), kv = hd * static_cast<std::uint64_t>(h.n_kv_heads);
  Builder g;
  g.str("general.architecture", "llama").u32("llama.block_count", static_cast<std::uint32_t>(L));
  g.u32("llama.embedding_length", static_cast<std::uint32_t>(d)).u32("llama.feed_forward_length", static_cast<std::uint32_t>(hid));
  g.u32("llama.attention.head_count", static_cast<std::uint32_t>(h.n_heads));
  g.u32("llama.attention.head_count_kv", kv_heads_key ? kv_heads_key : static_cast<std::uint32_t>(h.n_kv_heads));
  g.u32("llama.context_length", static_cast<std::uint32_t>(h.seq_len));
  if (float_keys) g.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f).f32("llama.rope.freq_base", theta);
  const float* p = w.data();
  auto emit = [&](const std::string& name, std::vector<std::uint64_t> ne) {
    const std::size_t n = static_cast<std::size_t>(ne.size() == 1 ? ne[0] : ne[0] * ne[1]);
    const bool q = quant != TensorType::F32 && ne.size() == 2 && ne[0] % 32 == 0;
    if (!q) {
      g.tensor(name, ne, TensorType::F32, gguf_test::f32_bytes(p, n));
    } else {
      Bytes blocks = gguf_test::quantize(quant, p, n);
      if (twin) {
        std::vector<float> y(n);
        llama2::gguf::dequantize(quant, blocks.data(), y.data(), n);
        g.tensor(name, ne, TensorType::F32, gguf_test::f32_bytes(y.data(), n));
      } else {
        g.tensor(name, ne, quant, std::move(blocks));
      }
    }
  };
  // The .bin's order: embedding, then each kind for all layers.
  const float* base = p;
  std::vector<const float*> rms_att(L), wq(L), wk(L), wv(L), wo(L), rms_ffn(L), w1(L), w2(L), w3(L);
  const float* q = base + V * d;
  for (auto& x : rms_att) x = q, q += d;
  for (auto& x : wq) x = q, q += d * d;
  for (auto& x : wk) x = q, q += kv * d;
  for (auto& x : wv) x = q, q += kv * d;
  for (auto& x : wo) x = q, q += d * d;
  for (auto& x : rms_ffn) x = q, q += d;
  for (auto& x : w1) x = q, q += hid * d;
  for (auto& x : w2) x = q, q += d * hid;
  for (auto& x : w3) x = q, q += hid * d;
  const float* rms_final = q;
  q += d + static_cast<std::uint64_t>(h.seq_len) * hd;
  const float* classifier = h.vocab_size < 0 ? q : nullptr;
  p = base;
  emit("token_embd.weight", {d, V});
  for (std::uint64_t l = 0; l < L; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    p = rms_att[l], emit(b + "attn_norm.weight", {d});
    p = wq[l], emit(b + "attn_q.weight", {d, d});
    p = wk[l], emit(b + "attn_k.weight", {d, kv});
    p = wv[l], emit(b + "attn_v.weight", {d, kv});
    p = wo[l], emit(b + "attn_output.weight", {d, d});
    p = rms_ffn[l], emit(b + "ffn_norm.weight", {d});
    p = w1[l], emit(b + "ffn_gate.weight", {d, hid});
    p = w3[l], emit(b + "ffn_up.weight", {d, hid});
    p = w2[l], emit(b + "ffn_down.weight", {hid, d});
  }
  p = rms_final, emit("output_norm.weight", {d});
  if (classifier) p = classifier, emit("output.weight", {d, V});
  return g;
}

// Prefill logits of `prompt` then `steps` greedy steps: every logit of every position, in order.
std::vector<float> run(const llama2::Model& m, const std::vector<int>& prompt, int steps) {
  llama2::Engine e(m);
  const llama2::RowMatrix& pre = e.prefill(prompt);
  std::vector<float> all(pre.data(), pre.data() + pre.size());
  const float* logits = pre.row(pre.rows() - 1).data();
  const std::size_t V = m.config().vocab_size;
  for (int s = 0; s < steps; ++s) {
    logits = e.step(llama2::argmax(logits, V));
    all.insert(all.end(), logits, logits + V);
  }
  return all;
}

void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST(GgufModel, SameLogitsAsItsLlama2cTwinWithGqaAndASeparateClassifier) {
  llama2_test::Header h;
  h.vocab_size = -32;  // separate classifier
  const std::vector<float> w = llama2_test::random_weights(h, 11);
  llama2_test::TempFile bin("twin"), gg("twin-gguf");
  llama2_test::write_checkpoint(bin.path, h, w);
  to_gguf(h, w, TensorType::F32, false).write(gg.path);
  const llama2::Model a = llama2::Model::load(bin.path), b = llama2::Model::load(gg.path);
  EXPECT_EQ(b.format(), "gguf (f32 x21)");
  EXPECT_FALSE(b.config().shared_classifier);
  EXPECT_EQ(b.config().n_kv_heads, 2u);
  EXPECT_EQ(b.vocab(), nullptr);
  expect_bits_equal(run(a, {1, 5, 9, 3}, 12), run(b, {1, 5, 9, 3}, 12));
}

TEST(GgufModel, RopeBaseComesFromTheFile) {
  llama2_test::Header h;
  const std::vector<float> w = llama2_test::random_weights(h, 12);
  llama2_test::TempFile a("theta-a"), b("theta-b");
  to_gguf(h, w, TensorType::F32, false).write(a.path);
  to_gguf(h, w, TensorType::F32, false, 100000.0f).write(b.path);
  const llama2::Model ma = llama2::Model::load(a.path), mb = llama2::Model::load(b.path);
  EXPECT_EQ(mb.config().rope_theta, 100000.0f);
  const auto la = run(ma, {1, 5, 9, 3}, 0), lb = run(mb, {1, 5, 9, 3}, 0);
  // Position 0 is not rotated: the first row is the same; later rows differ.
  const std::size_t V = ma.config().vocab_size;
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), V * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(la.data() + V, lb.data() + V, 3 * V * sizeof(float)), 0);
}

TEST(GgufModel, QuantizedTensorsReachTheirPlacesAsTheirDequantizedTwin) {
  llama2_test::Header h;
  h.dim = 64, h.hidden_dim = 96, h.n_heads = 4, h.n_kv_heads = 2, h.vocab_size = 40, h.seq_len = 32;
  const std::vector<float> w = llama2_test::random_weights(h, 13);
  for (TensorType t : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1}) {
    SCOPED_TRACE(llama2::gguf::tensor_type_name(static_cast<std::uint32_t>(t)));
    llama2_test::TempFile q("quant"), f("twin");
    to_gguf(h, w, t, false).write(q.path);
    to_gguf(h, w, t, true).write(f.path);
    const llama2::Model mq = llama2::Model::load(q.path), mf = llama2::Model::load(f.path);
    EXPECT_EQ(mq.format(), "gguf (f32 x5, " + llama2::gguf::tensor_type_name(static_cast<std::uint32_t>(t)) + " x15)");
    expect_bits_equal(run(mq, {1, 2, 3, 4, 5}, 10), run(mf, {1, 2, 3, 4, 5}, 10));
  }
}

std::string load_error(const Builder& g) {
  llama2_test::TempFile f("bad");
  g.write(f.path);
  try {
    llama2::Model::load(f.path);
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    return msg.substr(msg.find("': ") + 3);
  }
  return "";
}

TEST(GgufModel, BadModelsNameTheKeyOrTensor) {
  llama2_test::Header h;
  const std::vector<float> w = llama2_test::random_weights(h, 14);
  EXPECT_EQ(load_error(Builder()), "missing key 'general.architecture'");
  Builder g = to_gguf(h, w, TensorType::F32, false);
  g.tensors.back().name = "final_norm.weight";  // output_norm under another name
  EXPECT_EQ(load_error(g), "missing tensor 'output_norm.weight'");
  g = to_gguf(h, w, TensorType::F32, false);
  g.tensors[2].ne = {16, 8};
  EXPECT_EQ(load_error(g), "tensor 'blk.0.attn_q.weight' has shape [16, 8]; expected [16, 16] (innermost first)");
  g = to_gguf(h, w, TensorType::F32, false);
  g.tensors[3].type = static_cast<std::uint32_t>(TensorType::I8);
  g.tensors[3].data.resize(16 * 8);
  EXPECT_EQ(load_error(g), "tensor 'blk.0.attn_k.weight' has type i8, which this loader does not read (supported: f32, "
                           "f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)");
  g = to_gguf(h, w, TensorType::F32, false);
  g.tensors.resize(10);
  EXPECT_EQ(load_error(g), "key 'llama.block_count' = 2 but the file has only 10 tensors (9 per block + 2)");
  Builder arch;
  arch.str("general.architecture", "gemma");
  EXPECT_EQ(load_error(arch), "key 'general.architecture' is 'gemma'; only 'llama' models are supported");
  Builder no_layers;
  no_layers.str("general.architecture", "llama");
  EXPECT_EQ(load_error(no_layers), "missing key 'llama.block_count'");
  g = to_gguf(h, w, TensorType::F32, false);
  g.u32("llama.rope.dimension_count", 2);
  EXPECT_EQ(load_error(g), "key 'llama.rope.dimension_count' = 2: partial rotary embeddings (rotated dims != head_dim "
                           "= 4) are not supported");
  g = to_gguf(h, w, TensorType::F32, false);
  g.str("llama.rope.scaling.type", "linear");
  EXPECT_EQ(load_error(g), "key 'llama.rope.scaling.type' = 'linear': RoPE scaling is not supported");
  g = to_gguf(h, w, TensorType::F32, false, 10000.0f, 3);
  EXPECT_EQ(load_error(g), "key 'llama.attention.head_count_kv' = 3 must divide 'llama.attention.head_count' = 4");
  g = to_gguf(h, w, TensorType::F32, false);
  g.strings("tokenizer.ggml.tokens", {"a", "b"}).str("tokenizer.ggml.model", "llama");
  EXPECT_EQ(load_error(g), "key 'tokenizer.ggml.tokens' has 2 tokens but 'token_embd.weight' has 32 rows");
  llama2_test::Header huge_context = h;  // the engine would size its KV buffers and RoPE tables by it
  huge_context.seq_len = 1 << 21;
  const std::vector<float> huge_w = llama2_test::random_weights(huge_context, 14);
  EXPECT_EQ(load_error(to_gguf(huge_context, huge_w, TensorType::F32, false)),
            "key 'llama.context_length' = 2097152 is out of range [1, 2^20]");
}

// ---- issue 37: the attack's hostile files --------------------------------------------------------

TEST(GgufModel, AModelWhoseBlocksShareOneTensorsBytesIsRefused) {
  llama2_test::Header h;
  const std::vector<float> w = llama2_test::random_weights(h, 21);
  Builder g = to_gguf(h, w, TensorType::F32, false);
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  for (const auto& t : g.tensors) {
    offsets.push_back(t.name.rfind("blk.1.", 0) == 0 ? offsets[offsets.size() - 9] : at);  // block 1 = block 0's bytes
    at += (t.data.size() + 31) / 32 * 32;
  }
  g.forced_offsets = offsets;
  EXPECT_EQ(load_error(g), "tensor 'blk.1.attn_norm.weight' (64 bytes at data offset 2048) overlaps tensor "
                           "'blk.0.attn_norm.weight' (64 bytes at data offset 2048); tensors must not share bytes");
}

// A NaN or inf weight outside the norms gave silent garbage (greedy ids 0 0 0 0 0, exit 0); every
// tensor is checked after dequantization, naming it, the value and the element.
TEST(GgufModel, NonFiniteWeightsAreRefusedNamingTheTensor) {
  llama2_test::Header h;
  const std::vector<float> w = llama2_test::random_weights(h, 22);
  Builder g = to_gguf(h, w, TensorType::F32, false);
  ASSERT_EQ(g.tensors[2].name, "blk.0.attn_q.weight");
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::memcpy(g.tensors[2].data.data() + 5 * sizeof(float), &nan, sizeof nan);
  EXPECT_EQ(load_error(g), "tensor 'blk.0.attn_q.weight' holds a non-finite value (nan at element 5)");
  g = to_gguf(h, w, TensorType::F32, false);
  const float minus_inf = -inf;
  std::memcpy(g.tensors.back().data.data(), &minus_inf, sizeof minus_inf);
  EXPECT_EQ(load_error(g), "tensor 'output_norm.weight' holds a non-finite value (-inf at element 0)");
  // Quantized: a q8_0 block whose scale is the half inf dequantizes to inf / NaN.
  llama2_test::Header q = h;
  q.dim = 32, q.hidden_dim = 64, q.n_heads = 4, q.n_kv_heads = 4;
  const std::vector<float> wq = llama2_test::random_weights(q, 23);
  g = to_gguf(q, wq, TensorType::Q8_0, false);
  ASSERT_EQ(g.tensors[8].name, "blk.0.ffn_up.weight");
  g.tensors[8].data[34] = 0x00, g.tensors[8].data[35] = 0x7C;  // block 1's scale: +inf
  EXPECT_EQ(load_error(g), "tensor 'blk.0.ffn_up.weight' holds a non-finite value (inf at element 32)");
}

// block_count 1 with two blocks stored: blk.1.* was ignored and a truncated model ran.
TEST(GgufModel, TensorsTheMetadataDoesNotAccountForAreRefused) {
  llama2_test::Header h2, h1;
  h1.n_layers = 1;
  const std::vector<float> w2 = llama2_test::random_weights(h2, 24), w1 = llama2_test::random_weights(h1, 24);
  const Builder two = to_gguf(h2, w2, TensorType::F32, false);
  Builder g = to_gguf(h1, w1, TensorType::F32, false);
  for (const auto& t : two.tensors)
    if (t.name.rfind("blk.1.", 0) == 0) g.tensors.push_back(t);
  EXPECT_EQ(load_error(g), "tensor 'blk.1.attn_norm.weight' is not read by a llama model with 'llama.block_count' = "
                           "1 and a tied classifier (a file may hold only the model's tensors)");
  g = to_gguf(h1, w1, TensorType::F32, false);
  g.tensor("rope_freqs.weight", {2}, TensorType::F32, gguf_test::f32_bytes(w1.data(), 2));
  EXPECT_EQ(load_error(g), "tensor 'rope_freqs.weight' is not read by a llama model with 'llama.block_count' = 1 and "
                           "a tied classifier (a file may hold only the model's tensors)");
}

// The range checks ran on the double, the engine uses the float32: eps = 1e-300 (float64) became 0.0f,
// 1e-40 a denormal, freq_base = 1 + 1e-12 became 1.0f. Values print in their shortest form (1e+300 was
// printed with 300 digits).
TEST(GgufModel, FloatKeysAreCheckedAsTheFloat32TheEngineUses) {
  llama2_test::Header h;
  const std::vector<float> w = llama2_test::random_weights(h, 25);
  auto with = [&](double eps, double theta) {
    Builder g = to_gguf(h, w, TensorType::F32, false, 10000.0f, 0, false);
    g.scalar<double>("llama.attention.layer_norm_rms_epsilon", ValueType::FLOAT64, eps);
    g.scalar<double>("llama.rope.freq_base", ValueType::FLOAT64, theta);
    return load_error(g);
  };
  EXPECT_EQ(with(1e-300, 1e4), "key 'llama.attention.layer_norm_rms_epsilon' = 1e-300 becomes 0 as a float32 (the "
                               "engine's type), which is not a normal float32 in (0, 1)");
  EXPECT_EQ(with(1e-40, 1e4), "key 'llama.attention.layer_norm_rms_epsilon' = 1e-40 becomes 1e-40 as a float32 (the "
                              "engine's type), which is not a normal float32 in (0, 1)");
  EXPECT_EQ(with(1 - 1e-12, 1e4), "key 'llama.attention.layer_norm_rms_epsilon' = 0.999999999999 becomes 1 as a "
                                  "float32 (the engine's type), which is not a normal float32 in (0, 1)");
  EXPECT_EQ(with(2.0, 1e4), "key 'llama.attention.layer_norm_rms_epsilon' = 2 is not in (0, 1)");
  EXPECT_EQ(with(1e-5, 1 + 1e-12), "key 'llama.rope.freq_base' = 1.000000000001 becomes 1 as a float32 (the engine's "
                                   "type), which is not in (1, 1e12)");
  EXPECT_EQ(with(1e-5, 1e300), "key 'llama.rope.freq_base' = 1e+300 is not in (1, 1e12)");
  EXPECT_EQ(with(1e-5, std::nan("")), "key 'llama.rope.freq_base' = nan is not in (1, 1e12)");
  EXPECT_EQ(with(1e-5, 5e5), "");
}

// stories260K.gguf (an F32 GGUF of stories260K.bin): the same logits bit for bit as the .bin, so
// llama2.c's 345 greedy ids from BOS.
TEST(GgufModel, Stories260KGgufReproducesLlama2cGreedyIds) {
  const auto dir = llama2_test::shared_dir() / "models" / "stories260K";
  const auto ids_path = llama2_test::shared_dir() / "reference" / "stories260K_greedy_from_bos.ids";
  KVEVICT_REQUIRE_SHARED_FILE(dir / "stories260K.gguf");
  KVEVICT_REQUIRE_SHARED_FILE(dir / "stories260K.bin");
  KVEVICT_REQUIRE_SHARED_FILE(ids_path);
  std::vector<int> expected;
  {
    std::ifstream in(ids_path);
    for (int id; in >> id;) expected.push_back(id);
  }
  ASSERT_EQ(expected.size(), 345u);
  const llama2::Model g = llama2::Model::load((dir / "stories260K.gguf").string());
  const llama2::Model b = llama2::Model::load((dir / "stories260K.bin").string());
  EXPECT_EQ(g.format(), "gguf (f32 x48)");
  ASSERT_NE(g.vocab(), nullptr);
  EXPECT_EQ(g.vocab()->model, "llama");
  EXPECT_EQ(g.vocab()->tokens.size(), 512u);
  EXPECT_EQ(g.vocab()->bos_id, 1);
  EXPECT_EQ(g.vocab()->eos_id, 2);
  EXPECT_EQ(g.vocab()->pad_id, -1);  // 2^32 - 1 in the file: none
  llama2::Engine e(g);
  const llama2::RowMatrix& pre = e.prefill({1});
  const float* logits = pre.row(0).data();
  std::vector<int> got;
  while (got.size() < 345) {
    const int next = llama2::argmax(logits, g.config().vocab_size);
    if (next == 1) break;
    got.push_back(next);
    logits = e.step(next);
  }
  EXPECT_EQ(got, expected);
  expect_bits_equal(run(g, {1, 403, 261, 30}, 20), run(b, {1, 403, 261, 30}, 20));
}

}  // namespace
