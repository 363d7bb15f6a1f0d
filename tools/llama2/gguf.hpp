// kvevict tools — llama2/gguf.hpp: a checked reader of GGUF v2/v3 files (llama.cpp's model format).
// SPDX-License-Identifier: Apache-2.0
//
// Layout of a GGUF file (little-endian; ggml's `docs/gguf.md`):
//
//   "GGUF" | version u32 | tensor_count u64 | kv_count u64
//   kv_count × (key: string | value_type u32 | value)
//   tensor_count × (name: string | n_dims u32 | ne[n_dims] u64 | ggml_type u32 | offset u64)
//   padding to `general.alignment` (default 32)
//   tensor data: tensor i at data_start + offset_i, offset_i a multiple of the alignment
//
// where string = length u64 | bytes (no terminator), and an array value = element type u32 | count u64 |
// elements. `ne[0]` is the innermost (contiguous) dimension: a weight matrix `[out][in]` row-major has
// `ne = {in, out}`.
//
// Every count, length and offset is checked against the bytes that remain before it is used (no
// allocation larger than the file can back, no read past its end, 64-bit overflow checked); any
// malformed or unsupported input throws `std::invalid_argument` naming the key or tensor at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llama2/gguf_vocab.hpp"

namespace llama2::gguf {

/// GGUF metadata value types (`gguf_type` in ggml).
enum class ValueType : std::uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

/// Name of a value type ("uint32", "array", ...); "type N" for an unknown one.
std::string value_type_name(std::uint32_t type);

/// One metadata value. Scalars: integers in `i` (unsigned ones that exceed INT64_MAX keep their bits
/// in `u`), floats in `f`, bools in `i` (0 or 1), strings in `s`. Arrays: `array_type` is the
/// element type and `count` the element count; the elements are kept for strings (`strings`),
/// integers and bools (`ints`) and floats (`floats`); nested arrays keep only their count.
struct Value {
  ValueType type = ValueType::UINT8;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0.0;
  std::string s;
  ValueType array_type = ValueType::UINT8;
  std::uint64_t count = 0;
  std::vector<std::string> strings;
  std::vector<std::int64_t> ints;
  std::vector<double> floats;

  /// True for the eight integer types.
  bool is_integer() const;
};

/// ggml tensor types with a known block layout. The reader sizes and bounds-checks every tensor of
/// these types; `dequantize` (llama2/dequantize.hpp) converts F32, F16, BF16, Q8_0, Q4_0, Q4_1,
/// Q4_K, Q5_K and Q6_K to float32.
enum class TensorType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10, Q3_K = 11,
  Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

/// Elements per block and bytes per block of `type` (F32: 1 and 4; Q4_1: 32 and 20; Q6_K: 256 and 210).
/// Throws `std::invalid_argument` for a type number this reader does not know.
struct BlockLayout {
  std::size_t elements;
  std::size_t bytes;
};
BlockLayout block_layout(std::uint32_t type);

/// ggml's name of a tensor type ("q4_K", "f32", ...); "type N" for an unknown one.
std::string tensor_type_name(std::uint32_t type);

/// One entry of the tensor table. `data` points into the file's bytes (valid while the `File`
/// lives); `bytes` = `elements / block.elements * block.bytes`, all of it inside the file.
struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;  ///< dimensions, innermost first (ne[0] = row length)
  TensorType type = TensorType::F32;
  std::uint64_t offset = 0;       ///< from the start of the data section
  std::uint64_t elements = 0;     ///< product of ne
  std::uint64_t bytes = 0;
  const std::uint8_t* data = nullptr;
};

/// A parsed GGUF file: metadata and tensor table over bytes that it owns or maps.
/// Movable, not copyable. Parsing is O(file metadata); tensor data is not touched until read.
class File {
 public:
  /// Maps `path` read-only and parses it. Throws `std::invalid_argument` ("gguf: 'path': ...") if the
  /// file cannot be opened, is not a regular file ("not a regular file (it is a FIFO)", checked before
  /// opening it: opening a FIFO blocks) or is malformed (see `parse`).
  static File open(const std::string& path);
  /// Parses `size` bytes at `data`, which must outlive the result (no copy). `origin` names the input
  /// in error messages. Throws `std::invalid_argument` for: a magic other than "GGUF"; a version
  /// other than 2 or 3 (a byte-swapped version is reported as a big-endian file); counts or lengths
  /// that the remaining bytes cannot hold; an unknown value or tensor type; nested arrays deeper than
  /// 8; a duplicate key or tensor name; `general.alignment` not a power of two of type uint32; a
  /// tensor with 0 or more than 4 dimensions, a zero dimension, a row length not a multiple of its
  /// type's block, a misaligned offset, data past the end of the file, or two tensors whose bytes
  /// overlap ("tensor 'b' (N bytes at data offset X) overlaps tensor 'a' (M bytes at data offset Y);
  /// tensors must not share bytes", 'a' the one that starts first). So the tensors hold at most the
  /// file's bytes in all.
  static File parse(const std::uint8_t* data, std::size_t size, const std::string& origin);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  const std::string& origin() const { return origin_; }
  const std::map<std::string, Value>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  /// The value of `key`, or null.
  const Value* find(const std::string& key) const;
  /// The tensor named `name`, or null.
  const TensorInfo* find_tensor(const std::string& name) const;

  /// An integer key as an unsigned count. Throws `std::invalid_argument` naming the key if it is
  /// missing (when `required`), not an integer, or negative; returns `fallback` when absent and not
  /// required.
  std::uint64_t get_uint(const std::string& key, bool required, std::uint64_t fallback = 0) const;
  /// A float or integer key as a double; same errors as `get_uint`.
  double get_float(const std::string& key, bool required, double fallback = 0.0) const;
  /// A string key; throws naming the key if missing (when `required`) or not a string.
  std::string get_string(const std::string& key, bool required) const;

 private:
  File() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::string origin_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
};

/// The `tokenizer.ggml.*` metadata of `file` as a `GgufVocab`. Throws `std::invalid_argument`
/// naming the key if `tokenizer.ggml.model` or `tokenizer.ggml.tokens` is missing, an array has the
/// wrong element type, `scores` / `token_type` do not have one entry per token, or a special id is
/// outside the vocabulary (ids of 2^32 − 1 or −1, llama.cpp's "none", read as absent; a uint64 id is
/// printed unsigned: "key 'tokenizer.ggml.bos_token_id' = 9223372036854775808 is outside the vocabulary
/// [0, 2)").
GgufVocab read_vocab(const File& file);

}  // namespace llama2::gguf

namespace llama2 {
/// Reads the tokenizer of the GGUF file at `path` (`gguf::File::open` + `gguf::read_vocab`).
GgufVocab read_gguf_vocab(const std::string& path);
/// True if the file at `path` starts with the GGUF magic (false if it cannot be read or is not a
/// regular file).
bool is_gguf_file(const std::string& path);
}  // namespace llama2
