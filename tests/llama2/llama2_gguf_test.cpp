// tests/llama2/llama2_gguf_test.cpp — the GGUF reader (every value type, every malformed input named, overlapping
// tensors and special-token ids of issue 37) and the dequantizers against gguf-py's. GGUF models:
// llama2_gguf_model_test.cpp.
// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gguf_writer.hpp"
#include "llama2/dequantize.hpp"
#include "llama2/gguf.hpp"

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

}  // namespace
