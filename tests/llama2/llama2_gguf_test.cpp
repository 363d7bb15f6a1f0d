// tests/llama2/llama2_gguf_test.cpp — the GGUF reader (every value type, every malformed input named),
// the dequantizers against gguf-py's, and GGUF models: the same logits as their llama2.c twin, a
// quantized re-encoding equal to its dequantized twin, and stories260K.gguf's llama2.c greedy ids.
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
using llama2::gguf::File;
using llama2::gguf::TensorType;
using llama2::gguf::ValueType;

File parse(const Bytes& b) { return File::parse(b.data(), b.size(), "mem"); }

// The message of the std::invalid_argument that parsing `b` throws ("" if it parses).
std::string parse_error(const Bytes& b) {
  try {
    parse(b);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

Bytes header(std::uint32_t version, std::uint64_t tensors, std::uint64_t kvs) {
  Bytes b = {'G', 'G', 'U', 'F'};
  gguf_test::put<std::uint32_t>(b, version);
  gguf_test::put<std::uint64_t>(b, tensors);
  gguf_test::put<std::uint64_t>(b, kvs);
  return b;
}

TEST(GgufReader, ReadsEveryValueType) {
  Builder g;
  g.scalar<std::uint8_t>("u8", ValueType::UINT8, 200).scalar<std::int8_t>("i8", ValueType::INT8, -100);
  g.scalar<std::uint16_t>("u16", ValueType::UINT16, 65000).scalar<std::int16_t>("i16", ValueType::INT16, -32000);
  g.u32("u32", 4000000000u).scalar<std::int32_t>("i32", ValueType::INT32, -2000000000);
  g.scalar<std::uint64_t>("u64", ValueType::UINT64, std::numeric_limits<std::uint64_t>::max());
  g.scalar<std::int64_t>("i64", ValueType::INT64, -5000000000LL);
  g.f32("f32", 0.25f).scalar<double>("f64", ValueType::FLOAT64, -1e300);
  g.scalar<std::uint8_t>("bool", ValueType::BOOL, 1).str("str", std::string("a\0b", 3));
  g.strings("strs", {"x", "", "yz"}).floats("floats", {1.5f, -2.0f}).ints("ints", {7, -8, 9});
  Bytes nested;  // [[1, 2], []] of uint8
  gguf_test::put<std::uint32_t>(nested, static_cast<std::uint32_t>(ValueType::ARRAY));
  gguf_test::put<std::uint64_t>(nested, 2);
  for (int n : {2, 0}) {
    gguf_test::put<std::uint32_t>(nested, static_cast<std::uint32_t>(ValueType::UINT8));
    gguf_test::put<std::uint64_t>(nested, static_cast<std::uint64_t>(n));
    for (int k = 0; k < n; ++k) nested.push_back(static_cast<std::uint8_t>(k + 1));
  }
  g.raw("nested", ValueType::ARRAY, nested);
  const File f = parse(g.bytes());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.find("u8")->i, 200);
  EXPECT_EQ(f.find("i8")->i, -100);
  EXPECT_EQ(f.find("u16")->i, 65000);
  EXPECT_EQ(f.find("i16")->i, -32000);
  EXPECT_EQ(f.get_uint("u32", true), 4000000000u);
  EXPECT_EQ(f.find("i32")->i, -2000000000);
  EXPECT_EQ(f.get_uint("u64", true), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(f.find("i64")->i, -5000000000LL);
  EXPECT_EQ(f.get_float("f32", true), 0.25);
  EXPECT_EQ(f.get_float("f64", true), -1e300);
  EXPECT_EQ(f.find("bool")->i, 1);
  EXPECT_EQ(f.get_string("str", true), std::string("a\0b", 3));
  EXPECT_EQ(f.find("strs")->strings, (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(f.find("floats")->floats, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.find("ints")->ints, (std::vector<std::int64_t>{7, -8, 9}));
  EXPECT_EQ(f.find("nested")->array_type, ValueType::ARRAY);
  EXPECT_EQ(f.find("nested")->count, 2u);
  EXPECT_EQ(f.get_uint("absent", false, 9), 9u);
  EXPECT_THROW(f.get_uint("i32", true), std::invalid_argument);  // negative
  EXPECT_THROW(f.get_string("u8", true), std::invalid_argument);
}

TEST(GgufReader, TensorTableAndAlignment) {
  Builder g;
  g.alignment = 64;
  const float w[4] = {1, 2, 3, 4};
  g.tensor("a", {4}, TensorType::F32, gguf_test::f32_bytes(w, 4)).tensor("b", {2, 2}, TensorType::F32,
                                                                           gguf_test::f32_bytes(w, 4));
  const Bytes bytes = g.bytes();
  const File f = parse(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto* b = f.find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->ne, (std::vector<std::uint64_t>{2, 2}));
  EXPECT_EQ(b->offset, 64u);
  EXPECT_EQ(b->bytes, 16u);
  EXPECT_EQ((b->data - bytes.data()) % 64, 0);
  EXPECT_EQ(std::memcmp(b->data, w, 16), 0);
}

TEST(GgufReader, EveryTruncationIsRejectedWithAMessage) {
  Builder g;
  g.str("general.architecture", "llama").strings("t", {"ab", "c"});
  const float w[32] = {};
  g.tensor("x", {32}, TensorType::F32, gguf_test::f32_bytes(w, 32));
  const Bytes full = g.bytes();
  ASSERT_EQ(parse_error(full), "");
  for (std::size_t n = 0; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string e = parse_error(cut);
    EXPECT_NE(e, "") << n;
    EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("not a GGUF file") != std::string::npos ||
                e.find("does not fit") != std::string::npos)
        << n << ": " << e;
  }
}

TEST(GgufReader, MalformedHeadersNameTheProblem) {
  EXPECT_EQ(parse_error({'G', 'G', 'M', 'L', 0, 0, 0, 0}), "llama2::gguf: 'mem': not a GGUF file (the first 4 bytes are not \"GGUF\")");
  EXPECT_EQ(parse_error(header(1, 0, 0)), "llama2::gguf: 'mem': GGUF version 1 (32-bit counts) is not supported; convert it to version 3");
  EXPECT_EQ(parse_error(header(0x03000000u, 0, 0)), "llama2::gguf: 'mem': a big-endian GGUF file; only little-endian files are supported");
  EXPECT_EQ(parse_error(header(7, 0, 0)), "llama2::gguf: 'mem': unsupported GGUF version 7 (expected 2 or 3)");
  EXPECT_EQ(parse_error(header(3, 0, std::uint64_t{1} << 60)),
            "llama2::gguf: 'mem': metadata count 1152921504606846976 does not fit in the 0 bytes that remain");
  EXPECT_EQ(parse_error(header(3, std::uint64_t{1} << 60, 0)),
            "llama2::gguf: 'mem': tensor count 1152921504606846976 does not fit in the 0 bytes that remain");
  EXPECT_EQ(parse_error(header(2, 0, 0)), "");  // version 2 is version 3 without big-endian support
}

TEST(GgufReader, MalformedMetadataNamesTheKey) {
  auto with = [](const std::string& key, std::uint32_t type, const Bytes& value) {
    Bytes b = header(3, 0, 1);
    gguf_test::put_string(b, key);
    gguf_test::put<std::uint32_t>(b, type);
    b.insert(b.end(), value.begin(), value.end());
    return b;
  };
  Bytes huge_string;
  gguf_test::put<std::uint64_t>(huge_string, std::uint64_t{1} << 62);
  EXPECT_EQ(parse_error(with("k", 8, huge_string)),
            "llama2::gguf: 'mem': truncated: key 'k' (4611686018427387904 bytes) needs 4611686018427387904 bytes at offset 45, 0 remain");
  Bytes huge_array;
  gguf_test::put<std::uint32_t>(huge_array, 6);
  gguf_test::put<std::uint64_t>(huge_array, std::uint64_t{1} << 61);
  EXPECT_EQ(parse_error(with("arr", 9, huge_array)),
            "llama2::gguf: 'mem': key 'arr': array of 2305843009213693952 float32 elements does not fit in the 0 bytes that remain");
  EXPECT_EQ(parse_error(with("k", 13, {})), "llama2::gguf: 'mem': key 'k' has an unknown value type 13");
  EXPECT_EQ(parse_error(with("b", 7, {2})), "llama2::gguf: 'mem': key 'b': a bool must be 0 or 1 (got 2)");
  Bytes bad_elem;
  gguf_test::put<std::uint32_t>(bad_elem, 99);
  gguf_test::put<std::uint64_t>(bad_elem, 0);
  EXPECT_EQ(parse_error(with("a", 9, bad_elem)), "llama2::gguf: 'mem': key 'a': unknown array element type 99");
  Builder dup;
  dup.u32("x", 1).u32("x", 2);
  EXPECT_EQ(parse_error(dup.bytes()), "llama2::gguf: 'mem': duplicate metadata key 'x'");
  Builder align;
  align.scalar<std::uint64_t>("general.alignment", ValueType::UINT64, 32);
  EXPECT_EQ(parse_error(align.bytes()), "llama2::gguf: 'mem': key 'general.alignment' must be a uint32 (got uint64)");
  Builder align3;
  align3.u32("general.alignment", 24);
  EXPECT_EQ(parse_error(align3.bytes()), "llama2::gguf: 'mem': key 'general.alignment' must be a power of two (got 24)");
}

TEST(GgufReader, MalformedTensorsNameTheTensor) {
  const float w[64] = {};
  auto one = [&](std::vector<std::uint64_t> ne, TensorType type, std::size_t bytes) {
    Builder g;
    g.tensor("blk.0.attn_q.weight", std::move(ne), type, gguf_test::f32_bytes(w, bytes / 4));
    return g;
  };
  EXPECT_EQ(parse_error(one({0, 4}, TensorType::F32, 16).bytes()),
            "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight' has a zero dimension (ne[0] = 0)");
  EXPECT_EQ(parse_error(one({1, 1, 1, 1, 1}, TensorType::F32, 4).bytes()),
            "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight' has 5 dimensions (expected 1 to 4)");
  EXPECT_EQ(parse_error(one({16}, static_cast<TensorType>(99), 4).bytes()),
            "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight' has an unknown type 99");
  EXPECT_EQ(parse_error(one({16}, TensorType::Q8_0, 36).bytes()),
            "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight' (q8_0) has rows of 16 elements, not a multiple of its block of 32");
  Builder past = one({64}, TensorType::F32, 128);  // 256 bytes declared, 128 present
  EXPECT_NE(parse_error(past.bytes()).find("truncated: tensor 'blk.0.attn_q.weight' (256 bytes at data offset 0) ends past "
                                           "the end of the file"),
            std::string::npos);
  Builder big = one({std::uint64_t{1} << 40, std::uint64_t{1} << 30}, TensorType::F32, 4);
  EXPECT_EQ(parse_error(big.bytes()), "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight': its element count overflows 64 bits");
  Builder bytes = one({std::uint64_t{1} << 40, std::uint64_t{1} << 23}, TensorType::F32, 4);
  EXPECT_EQ(parse_error(bytes.bytes()), "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight': its byte size overflows 64 bits");
  Builder dup;
  dup.tensor("t", {8}, TensorType::F32, gguf_test::f32_bytes(w, 8)).tensor("t", {8}, TensorType::F32,
                                                                           gguf_test::f32_bytes(w, 8));
  EXPECT_EQ(parse_error(dup.bytes()), "llama2::gguf: 'mem': duplicate tensor 't'");
  // A misaligned offset: patch the first tensor's offset field (the last 8 bytes of its info) to 4.
  Builder mis = one({8}, TensorType::F32, 32);
  Bytes b = mis.bytes();
  const std::size_t info_end = 24 + 8 + std::string("blk.0.attn_q.weight").size() + 4 + 8 + 4 + 8;
  b[info_end - 8] = 4;
  EXPECT_EQ(parse_error(b),
            "llama2::gguf: 'mem': tensor 'blk.0.attn_q.weight' starts at offset 4, not a multiple of the alignment 32");
}

TEST(GgufReader, OpenNamesAMissingFile) {
  try {
    File::open("/nonexistent/m.gguf");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::gguf: '/nonexistent/m.gguf': cannot open: No such file or directory");
  }
}

// ---- dequantization ----------------------------------------------------------------------------

// The test's blocks (see tests/llama2/gguf/dequant_reference.py, which must stay in step).
Bytes lcg_blocks(TensorType t, std::size_t n) {
  const llama2::gguf::BlockLayout L = llama2::gguf::block_layout(static_cast<std::uint32_t>(t));
  const std::size_t blocks = n / L.elements;
  Bytes raw(blocks * L.bytes);
  std::uint32_t x = 7;
  for (auto& byte : raw) {
    x = 1103515245u * x + 12345u;
    byte = static_cast<std::uint8_t>((x >> 16) & 0xFF);
  }
  auto set_half = [&raw](std::size_t at, std::uint16_t h) {
    raw[at] = static_cast<std::uint8_t>(h & 0xFF);
    raw[at + 1] = static_cast<std::uint8_t>(h >> 8);
  };
  // np.float16(0.0123), np.float16(-0.5), np.float16(0.0456): round-to-nearest halves.
  const std::uint16_t d = 0x224C, m = 0xB800, dmin = 0x29D6;
  if (t == TensorType::F16 || t == TensorType::BF16) {
    for (std::size_t i = 1; i < raw.size(); i += 2) raw[i] &= 0xBF;
    return raw;
  }
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t o = b * L.bytes;
    if (t == TensorType::Q6_K) {
      set_half(o + 208, d);
      continue;
    }
    set_half(o, d);
    if (t == TensorType::Q4_1) set_half(o + 2, m);
    if (t == TensorType::Q4_K || t == TensorType::Q5_K) set_half(o + 2, dmin);
  }
  return raw;
}

struct DequantCase {
  TensorType type;
  double sum;
  std::vector<float> samples;
};

TEST(GgufDequantize, MatchesGgufPyOnEveryType) {
  const std::vector<std::size_t> at = {0, 1, 15, 16, 17, 31, 32, 63, 64, 100, 127, 128, 200, 255, 256, 300, 383, 384, 450, 511};
  // Printed by tests/llama2/gguf/dequant_reference.py (gguf 0.19.0's quants.dequantize).
  const std::vector<DequantCase> cases = {
      {TensorType::Q8_0, 23.02294921875, {1.42663574f, -1.35284424f, 1.25445557f, -0.614929199f, 0.442749023f, -1.45123291f, 0.233673096f, 0.491943359f, 0.934692383f, 1.32824707f, -1.51272583f, -0.602630615f, 0.541137695f, 0.3074646f, -0.209075928f, -0.701019287f, 0.639526367f, 0.233673096f, 1.11917114f, 0.516540527f}},
      {TensorType::Q4_0, -1.955474853515625, {-0.0491943359f, -0.0737915039f, -0.024597168f, -0.012298584f, 0.012298584f, -0.024597168f, 0.0491943359f, -0.0983886719f, 0.0f, 0.0614929199f, 0.0860900879f, 0.0491943359f, 0.036895752f, -0.0737915039f, -0.036895752f, 0.036895752f, -0.0983886719f, 0.0f, -0.0491943359f, -0.0614929199f}},
      {TensorType::Q4_1, -207.43289184570312, {-0.463104248f, -0.43850708f, -0.450805664f, -0.487701416f, -0.475402832f, -0.475402832f, -0.340118408f, -0.340118408f, -0.327819824f, -0.37701416f, -0.389312744f, -0.5f, -0.352416992f, -0.413909912f, -0.413909912f, -0.389312744f, -0.340118408f, -0.487701416f, -0.352416992f, -0.352416992f}},
      {TensorType::Q4_K, 525.08721923828125, {-0.131011963f, -0.83203125f, 1.03735352f, -1.76672363f, 0.102661133f, -2.23406982f, 1.22570801f, 3.95599365f, 3.58880615f, 1.96240234f, 4.2253418f, 0.0150146484f, -0.908203125f, -0.133178711f, 1.94650269f, 1.93807983f, -0.132232666f, 1.23706055f, -0.683898926f, -1.7043457f}},
      {TensorType::Q5_K, 1504.015625, {3.84143066f, -2.00039673f, -0.364685059f, -1.29937744f, -2.00039673f, -1.06570435f, 0.315612793f, 2.59085083f, 0.661743164f, 11.0141602f, 5.35681152f, 1.39245605f, -2.50701904f, 0.530944824f, -0.146362305f, 7.29129028f, 5.92166138f, 8.80700684f, 0.784729004f, -1.38336182f}},
      {TensorType::Q6_K, -115.27462768554688, {-38.5683594f, -41.3232422f, -2.75488281f, 33.821106f, -35.1739502f, 18.9398193f, -2.04156494f, -8.26464844f, 12.4707642f, -0.270568848f, 15.668396f, -11.0687256f, -12.741333f, 3.09924316f, -6.97329712f, 3.92324829f, 21.3503418f, -0.233673096f, -10.1832275f, -13.1717834f}},
      {TensorType::F16, 11.230308294296265, {0.000391960144f, -0.000787734985f, 0.102844238f, -0.000206232071f, 5.84125519e-05f, 0.611816406f, 0.000680923462f, -4.18424606e-05f, -0.00343894958f, -0.00333213806f, -0.00030207634f, -0.000149250031f, 0.000215530396f, -0.337158203f, 1.32128906f, 0.8671875f, -0.860839844f, 0.118713379f, -0.00997924805f, -0.0031375885f}},
      {TensorType::BF16, 0.32013220424281541, {2.90892459e-30f, -7.69928243e-28f, 6.77573553e-11f, -1.86815205e-32f, 1.24602401e-36f, 0.000109195709f, 2.33502828e-28f, -2.79179908e-37f, -1.14978105e-22f, -8.72675546e-23f, -3.74400781e-31f, -1.37222509e-33f, 2.77333912e-32f, -8.53091478e-07f, 0.0490722656f, 0.00183105469f, -0.00173187256f, 2.78305379e-10f, -5.28548559e-19f, -4.90104513e-23f}},
  };
  for (const DequantCase& c : cases) {
    SCOPED_TRACE(llama2::gguf::tensor_type_name(static_cast<std::uint32_t>(c.type)));
    const Bytes raw = lcg_blocks(c.type, 512);
    std::vector<float> y(512);
    llama2::gguf::dequantize(c.type, raw.data(), y.data(), y.size());
    double sum = 0.0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum, c.sum, 1e-9 * std::max(1.0, std::fabs(c.sum)));  // NumPy sums pairwise: order differs
    for (std::size_t i = 0; i < at.size(); ++i) EXPECT_EQ(y[at[i]], c.samples[i]) << "element " << at[i];
  }
}

TEST(GgufDequantize, HalvesAndErrors) {
  using llama2::gguf::half_to_float;
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  float y[32];
  const std::uint8_t z[64] = {};
  try {
    llama2::gguf::dequantize(TensorType::Q5_0, z, y, 32);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::gguf::dequantize: tensor type q5_0 is not supported (supported: f32, f16, bf16, "
                                     "q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)");
  }
  EXPECT_THROW(llama2::gguf::dequantize(TensorType::Q8_0, z, y, 16), std::invalid_argument);
}

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

// Tensors were checked to lie inside the file, not to be disjoint: every tensor could point at offset 0,
// and 200 layers in a 1.17 MB file dequantized to 1.49 GB. Overlapping bytes are refused (touching is fine).
TEST(GgufReader, OverlappingTensorsAreRefused) {
  const float w[16] = {};
  Builder g;
  g.tensor("a", {16}, TensorType::F32, gguf_test::f32_bytes(w, 16)).tensor("b", {8}, TensorType::F32,
                                                                            gguf_test::f32_bytes(w, 8));
  g.forced_offsets = {0, 0};
  EXPECT_EQ(parse_error(g.bytes()), "llama2::gguf: 'mem': tensor 'b' (32 bytes at data offset 0) overlaps tensor 'a' "
                                    "(64 bytes at data offset 0); tensors must not share bytes");
  g.forced_offsets = {0, 32};
  EXPECT_EQ(parse_error(g.bytes()), "llama2::gguf: 'mem': tensor 'b' (32 bytes at data offset 32) overlaps tensor "
                                    "'a' (64 bytes at data offset 0); tensors must not share bytes");
  g.forced_offsets = {64, 0};  // gaps are fine
  EXPECT_EQ(parse_error(g.bytes()), "");
  g.forced_offsets = {32, 0};
  EXPECT_EQ(parse_error(g.bytes()), "");  // b = [0, 32), a = [32, 96): adjacent, in either table order
  g.forced_offsets = {0, 64};
  EXPECT_EQ(parse_error(g.bytes()), "");
}

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

// A uint64 special-token id of 2^63 was printed as -9223372036854775808.
TEST(GgufReader, AHugeUnsignedSpecialIdIsPrintedUnsigned) {
  Builder g;
  g.str("tokenizer.ggml.model", "llama").strings("tokenizer.ggml.tokens", {"a", "b"});
  g.scalar<std::uint64_t>("tokenizer.ggml.bos_token_id", ValueType::UINT64, std::uint64_t{1} << 63);
  const Bytes b = g.bytes();
  try {
    llama2::gguf::read_vocab(parse(b));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "llama2::gguf: 'mem': key 'tokenizer.ggml.bos_token_id' = 9223372036854775808 is "
                                     "outside the vocabulary [0, 2)");
  }
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
