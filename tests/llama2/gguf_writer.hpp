// tests/llama2/gguf_writer.hpp — builds GGUF v3 bytes for the reader's tests (metadata of any type,
// tensors of raw block bytes), and the llama2.c checkpoint of test_support.hpp as an F32 or
// quantized GGUF (reference quantizers after ggml's quantize_row_*_ref).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "llama2/dequantize.hpp"
#include "llama2/gguf.hpp"

namespace gguf_test {

using llama2::gguf::TensorType;
using llama2::gguf::ValueType;
using Bytes = std::vector<std::uint8_t>;

template <typename T>
void put(Bytes& b, T v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
inline void put_string(Bytes& b, const std::string& s) {
  put<std::uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

// Float to IEEE half, truncating the mantissa (normal range only: enough for block scales).
inline std::uint16_t float_to_half(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const int exp = static_cast<int>((bits >> 23) & 0xFF) - 127 + 15;
  if ((bits & 0x7FFFFFFFu) == 0 || exp <= 0) return static_cast<std::uint16_t>(sign);
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7BFFu);
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(exp) << 10) | ((bits >> 13) & 0x3FFu));
}

struct Builder {
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> ne;
    std::uint32_t type;
    Bytes data;
  };
  std::uint32_t version = 3;
  std::uint32_t alignment = 32;  // the data section's; written as general.alignment when not 32
  std::uint64_t kv_count = 0;
  Bytes kv;  // encoded key/values
  std::vector<Tensor> tensors;
  // When not empty (one entry per tensor): the data offsets written, instead of one after another (the
  // data is then written at those offsets, later tensors over earlier ones): hostile tables.
  std::vector<std::uint64_t> forced_offsets;

  Builder& raw(const std::string& key, ValueType type, const Bytes& value) {
    put_string(kv, key);
    put<std::uint32_t>(kv, static_cast<std::uint32_t>(type));
    kv.insert(kv.end(), value.begin(), value.end());
    ++kv_count;
    return *this;
  }
  template <typename T>
  Builder& scalar(const std::string& key, ValueType type, T v) {
    Bytes b;
    put<T>(b, v);
    return raw(key, type, b);
  }
  Builder& u32(const std::string& key, std::uint32_t v) { return scalar(key, ValueType::UINT32, v); }
  Builder& f32(const std::string& key, float v) { return scalar(key, ValueType::FLOAT32, v); }
  Builder& str(const std::string& key, const std::string& v) {
    Bytes b;
    put_string(b, v);
    return raw(key, ValueType::STRING, b);
  }
  Builder& strings(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    put<std::uint32_t>(b, static_cast<std::uint32_t>(ValueType::STRING));
    put<std::uint64_t>(b, v.size());
    for (const auto& s : v) put_string(b, s);
    return raw(key, ValueType::ARRAY, b);
  }
  Builder& floats(const std::string& key, const std::vector<float>& v) {
    Bytes b;
    put<std::uint32_t>(b, static_cast<std::uint32_t>(ValueType::FLOAT32));
    put<std::uint64_t>(b, v.size());
    for (float x : v) put<float>(b, x);
    return raw(key, ValueType::ARRAY, b);
  }
  Builder& ints(const std::string& key, const std::vector<std::int32_t>& v) {
    Bytes b;
    put<std::uint32_t>(b, static_cast<std::uint32_t>(ValueType::INT32));
    put<std::uint64_t>(b, v.size());
    for (std::int32_t x : v) put<std::int32_t>(b, x);
    return raw(key, ValueType::ARRAY, b);
  }
  Builder& tensor(const std::string& name, std::vector<std::uint64_t> ne, TensorType type, Bytes data) {
    tensors.push_back({name, std::move(ne), static_cast<std::uint32_t>(type), std::move(data)});
    return *this;
  }

  Bytes bytes() const {
    Bytes b = {'G', 'G', 'U', 'F'};
    put<std::uint32_t>(b, version);
    put<std::uint64_t>(b, tensors.size());
    Bytes meta = kv;
    std::uint64_t count = kv_count;
    if (alignment != 32) {
      put_string(meta, "general.alignment");
      put<std::uint32_t>(meta, static_cast<std::uint32_t>(ValueType::UINT32));
      put<std::uint32_t>(meta, alignment);
      ++count;
    }
    put<std::uint64_t>(b, count);
    b.insert(b.end(), meta.begin(), meta.end());
    std::uint64_t offset = 0;
    std::vector<std::uint64_t> offsets;
    for (const Tensor& t : tensors) {
      put_string(b, t.name);
      put<std::uint32_t>(b, static_cast<std::uint32_t>(t.ne.size()));
      for (auto n : t.ne) put<std::uint64_t>(b, n);
      put<std::uint32_t>(b, t.type);
      const std::uint64_t at = forced_offsets.empty() ? offset : forced_offsets[offsets.size()];
      put<std::uint64_t>(b, at);
      offsets.push_back(at);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    while (b.size() % alignment != 0) b.push_back(0);
    const std::size_t data_start = b.size();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const std::size_t at = data_start + static_cast<std::size_t>(offsets[i]);
      if (b.size() < at + tensors[i].data.size()) b.resize(at + tensors[i].data.size(), 0);
      std::copy(tensors[i].data.begin(), tensors[i].data.end(), b.begin() + static_cast<std::ptrdiff_t>(at));
    }
    return b;
  }

  void write(const std::string& path) const {
    const Bytes b = bytes();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

inline Bytes f32_bytes(const float* x, std::size_t n) {
  Bytes b(n * sizeof(float));
  std::memcpy(b.data(), x, b.size());
  return b;
}

// ggml's reference quantizers (quantize_row_q8_0_ref, _q4_0_ref, _q4_1_ref); n a multiple of 32.
inline Bytes quantize(TensorType type, const float* x, std::size_t n) {
  Bytes out;
  for (std::size_t b = 0; b < n; b += 32) {
    const float* v = x + b;
    auto half = [&out](float f) { put<std::uint16_t>(out, float_to_half(f)); };
    if (type == TensorType::Q8_0) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      half(d);
      for (int j = 0; j < 32; ++j) out.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lround(v[j] * id))));
    } else if (type == TensorType::Q4_0) {
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j)
        if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), max = v[j];
      const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      half(d);
      for (int j = 0; j < 16; ++j) {
        const int q0 = std::min(15, static_cast<int>(v[j] * id + 8.5f));
        const int q1 = std::min(15, static_cast<int>(v[j + 16] * id + 8.5f));
        out.push_back(static_cast<std::uint8_t>(q0 | (q1 << 4)));
      }
    } else {  // Q4_1
      float lo = v[0], hi = v[0];
      for (int j = 1; j < 32; ++j) lo = std::min(lo, v[j]), hi = std::max(hi, v[j]);
      const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      half(d);
      half(lo);
      for (int j = 0; j < 16; ++j) {
        const int q0 = std::min(15, static_cast<int>((v[j] - lo) * id + 0.5f));
        const int q1 = std::min(15, static_cast<int>((v[j + 16] - lo) * id + 0.5f));
        out.push_back(static_cast<std::uint8_t>(q0 | (q1 << 4)));
      }
    }
  }
  return out;
}

}  // namespace gguf_test
