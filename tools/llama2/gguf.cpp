// kvevict tools — llama2/gguf.cpp: parsing and checking GGUF metadata and the tensor table.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/gguf.hpp"

#include "file_input.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

namespace llama2::gguf {
namespace {

constexpr std::uint64_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw std::invalid_argument("llama2::gguf: '" + origin + "': " + what);
}

// A bounds-checked little-endian cursor over the file's bytes.
class Cursor {
 public:
  Cursor(const std::uint8_t* data, std::size_t size, const std::string& origin)
      : data_(data), size_(size), origin_(origin) {}

  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return size_ - pos_; }

  void need(std::uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(origin_, "truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                        ", " + std::to_string(remaining()) + " remain");
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the file is little-endian, as every host this builds for
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const auto len = read<std::uint64_t>(what + " (length)");
    need(len, what + " (" + std::to_string(len) + " bytes)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return s;
  }
  void skip(std::uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += static_cast<std::size_t>(n);
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
  const std::string& origin_;
};

std::size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;  // at least its length field
    case ValueType::ARRAY: return 12;  // at least its type and count
  }
  return 0;
}

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(ValueType::FLOAT64); }

// Reads one scalar of type t into v (integers into i / u, floats into f, bools into i, strings into s).
void read_scalar(Cursor& c, ValueType t, Value& v, const std::string& what, const std::string& origin) {
  switch (t) {
    case ValueType::UINT8: v.i = c.read<std::uint8_t>(what); break;
    case ValueType::INT8: v.i = c.read<std::int8_t>(what); break;
    case ValueType::UINT16: v.i = c.read<std::uint16_t>(what); break;
    case ValueType::INT16: v.i = c.read<std::int16_t>(what); break;
    case ValueType::UINT32: v.i = c.read<std::uint32_t>(what); break;
    case ValueType::INT32: v.i = c.read<std::int32_t>(what); break;
    case ValueType::UINT64: v.u = c.read<std::uint64_t>(what); v.i = static_cast<std::int64_t>(v.u); break;
    case ValueType::INT64: v.i = c.read<std::int64_t>(what); break;
    case ValueType::FLOAT32: v.f = c.read<float>(what); break;
    case ValueType::FLOAT64: v.f = c.read<double>(what); break;
    case ValueType::BOOL: {
      const auto b = c.read<std::uint8_t>(what);
      if (b > 1) fail(origin, what + ": a bool must be 0 or 1 (got " + std::to_string(b) + ")");
      v.i = b;
      break;
    }
    case ValueType::STRING: v.s = c.string(what); break;
    case ValueType::ARRAY: break;  // handled by read_value
  }
  if (t != ValueType::UINT64) v.u = static_cast<std::uint64_t>(v.i);
}

void read_value(Cursor& c, ValueType t, Value& v, const std::string& what, const std::string& origin, int depth) {
  v.type = t;
  if (t != ValueType::ARRAY) {
    read_scalar(c, t, v, what, origin);
    return;
  }
  if (depth >= kMaxArrayDepth) fail(origin, what + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  const auto et = c.read<std::uint32_t>(what + " (array type)");
  if (!known_value_type(et)) fail(origin, what + ": unknown array element type " + std::to_string(et));
  v.array_type = static_cast<ValueType>(et);
  v.count = c.read<std::uint64_t>(what + " (array count)");
  // Each element takes at least scalar_size bytes: a count the file cannot hold fails before any allocation.
  const std::size_t min_bytes = scalar_size(v.array_type);
  if (v.count > c.remaining() / min_bytes)
    fail(origin, what + ": array of " + std::to_string(v.count) + " " + value_type_name(et) +
                     " elements does not fit in the " + std::to_string(c.remaining()) + " bytes that remain");
  const auto n = static_cast<std::size_t>(v.count);
  if (v.array_type == ValueType::STRING) {
    v.strings.reserve(n);
    for (std::size_t e = 0; e < n; ++e) v.strings.push_back(c.string(what + "[" + std::to_string(e) + "]"));
  } else if (v.array_type == ValueType::ARRAY) {
    Value inner;
    for (std::size_t e = 0; e < n; ++e) read_value(c, ValueType::ARRAY, inner, what + "[" + std::to_string(e) + "]",
                                                  origin, depth + 1);
  } else if (v.array_type == ValueType::FLOAT32 || v.array_type == ValueType::FLOAT64) {
    v.floats.resize(n);
    Value e;
    for (std::size_t k = 0; k < n; ++k) {
      read_scalar(c, v.array_type, e, what, origin);
      v.floats[k] = e.f;
    }
  } else {
    v.ints.resize(n);
    Value e;
    for (std::size_t k = 0; k < n; ++k) {
      read_scalar(c, v.array_type, e, what, origin);
      v.ints[k] = e.i;
    }
  }
}

bool mul_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
bool add_ok(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }

}  // namespace

std::string value_type_name(std::uint32_t type) {
  static const char* const names[] = {"uint8", "int8",  "uint16", "int16",  "uint32", "int32", "float32",
                                      "bool",  "string", "array", "uint64", "int64",  "float64"};
  return known_value_type(type) ? names[type] : "type " + std::to_string(type);
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64: return true;
    default: return false;
  }
}

BlockLayout block_layout(std::uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::F32: return {1, 4};
    case TensorType::F16: return {1, 2};
    case TensorType::BF16: return {1, 2};
    case TensorType::Q4_0: return {32, 18};
    case TensorType::Q4_1: return {32, 20};
    case TensorType::Q5_0: return {32, 22};
    case TensorType::Q5_1: return {32, 24};
    case TensorType::Q8_0: return {32, 34};
    case TensorType::Q8_1: return {32, 36};
    case TensorType::Q2_K: return {256, 84};
    case TensorType::Q3_K: return {256, 110};
    case TensorType::Q4_K: return {256, 144};
    case TensorType::Q5_K: return {256, 176};
    case TensorType::Q6_K: return {256, 210};
    case TensorType::Q8_K: return {256, 292};
    case TensorType::I8: return {1, 1};
    case TensorType::I16: return {1, 2};
    case TensorType::I32: return {1, 4};
    case TensorType::I64: return {1, 8};
    case TensorType::F64: return {1, 8};
  }
  throw std::invalid_argument("llama2::gguf: unknown tensor type " + std::to_string(type));
}

std::string tensor_type_name(std::uint32_t type) {
  switch (static_cast<TensorType>(type)) {
    case TensorType::F32: return "f32";
    case TensorType::F16: return "f16";
    case TensorType::BF16: return "bf16";
    case TensorType::Q4_0: return "q4_0";
    case TensorType::Q4_1: return "q4_1";
    case TensorType::Q5_0: return "q5_0";
    case TensorType::Q5_1: return "q5_1";
    case TensorType::Q8_0: return "q8_0";
    case TensorType::Q8_1: return "q8_1";
    case TensorType::Q2_K: return "q2_K";
    case TensorType::Q3_K: return "q3_K";
    case TensorType::Q4_K: return "q4_K";
    case TensorType::Q5_K: return "q5_K";
    case TensorType::Q6_K: return "q6_K";
    case TensorType::Q8_K: return "q8_K";
    case TensorType::I8: return "i8";
    case TensorType::I16: return "i16";
    case TensorType::I32: return "i32";
    case TensorType::I64: return "i64";
    case TensorType::F64: return "f64";
  }
  return "type " + std::to_string(type);
}

// The file's bytes: an mmap of the file (open) or nothing (parse over the caller's bytes).
struct File::Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  // open() of a FIFO blocks until a writer comes: refuse what is not a regular file before opening it.
  if (const std::string problem = kvtools::file_problem(path); problem.rfind("is not", 0) == 0)
    fail(path, "not a regular file (" + problem.substr(problem.find("(it is") + 1));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  auto mapping = std::make_unique<Mapping>();
  mapping->size = static_cast<std::size_t>(st.st_size);
  if (mapping->size > 0) {
    void* addr = ::mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(path, std::string("cannot map: ") + std::strerror(err));
    }
    mapping->addr = addr;
  }
  ::close(fd);
  static const std::uint8_t empty = 0;
  const auto* bytes = mapping->addr ? static_cast<const std::uint8_t*>(mapping->addr) : &empty;
  File f = parse(bytes, mapping->size, path);
  f.mapping_ = std::move(mapping);
  return f;
}

File File::parse(const std::uint8_t* data, std::size_t size, const std::string& origin) {
  File f;
  f.origin_ = origin;
  Cursor c(data, size, f.origin_);
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) fail(origin, "not a GGUF file (the first 4 bytes are not \"GGUF\")");
  c.skip(4, "magic");
  f.version_ = c.read<std::uint32_t>("the version");
  if (f.version_ == 0x02000000u || f.version_ == 0x03000000u)
    fail(origin, "a big-endian GGUF file; only little-endian files are supported");
  if (f.version_ == 1) fail(origin, "GGUF version 1 (32-bit counts) is not supported; convert it to version 3");
  if (f.version_ != 2 && f.version_ != 3)
    fail(origin, "unsupported GGUF version " + std::to_string(f.version_) + " (expected 2 or 3)");
  const auto n_tensors = c.read<std::uint64_t>("the tensor count");
  const auto n_kv = c.read<std::uint64_t>("the metadata count");
  // A key/value takes >= 13 bytes (key length, type, 1-byte value); a tensor info >= 24.
  if (n_kv > c.remaining() / 13)
    fail(origin, "metadata count " + std::to_string(n_kv) + " does not fit in the " + std::to_string(c.remaining()) +
                     " bytes that remain");
  for (std::uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("metadata key #" + std::to_string(k));
    if (f.metadata_.count(key)) fail(origin, "duplicate metadata key '" + key + "'");
    const auto t = c.read<std::uint32_t>("the type of key '" + key + "'");
    if (!known_value_type(t)) fail(origin, "key '" + key + "' has an unknown value type " + std::to_string(t));
    Value v;
    read_value(c, static_cast<ValueType>(t), v, "key '" + key + "'", origin, 0);
    f.metadata_.emplace(std::move(key), std::move(v));
  }
  if (const Value* a = f.find("general.alignment")) {
    if (a->type != ValueType::UINT32)
      fail(origin, "key 'general.alignment' must be a uint32 (got " + value_type_name(static_cast<std::uint32_t>(a->type)) + ")");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail(origin, "key 'general.alignment' must be a power of two (got " + std::to_string(a->u) + ")");
    f.alignment_ = a->u;
  }
  if (n_tensors > c.remaining() / 24)
    fail(origin, "tensor count " + std::to_string(n_tensors) + " does not fit in the " + std::to_string(c.remaining()) +
                     " bytes that remain");
  f.tensors_.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.string("the name of tensor #" + std::to_string(i));
    const std::string what = "tensor '" + t.name + "'";
    if (f.tensor_index_.count(t.name)) fail(origin, "duplicate " + what);
    const auto n_dims = c.read<std::uint32_t>(what + " (dimension count)");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail(origin, what + " has " + std::to_string(n_dims) + " dimensions (expected 1 to " + std::to_string(kMaxDims) + ")");
    t.elements = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = c.read<std::uint64_t>(what + " (dimension " + std::to_string(d) + ")");
      if (ne == 0) fail(origin, what + " has a zero dimension (ne[" + std::to_string(d) + "] = 0)");
      if (!mul_ok(t.elements, ne, t.elements)) fail(origin, what + ": its element count overflows 64 bits");
      t.ne.push_back(ne);
    }
    const auto type = c.read<std::uint32_t>(what + " (type)");
    BlockLayout block{};
    try {
      block = block_layout(type);
    } catch (const std::invalid_argument&) {
      fail(origin, what + " has an unknown type " + std::to_string(type));
    }
    t.type = static_cast<TensorType>(type);
    if (t.ne[0] % block.elements != 0)
      fail(origin, what + " (" + tensor_type_name(type) + ") has rows of " + std::to_string(t.ne[0]) +
                       " elements, not a multiple of its block of " + std::to_string(block.elements));
    if (!mul_ok(t.elements / block.elements, block.bytes, t.bytes)) fail(origin, what + ": its byte size overflows 64 bits");
    t.offset = c.read<std::uint64_t>(what + " (offset)");
    if (t.offset % f.alignment_ != 0)
      fail(origin, what + " starts at offset " + std::to_string(t.offset) + ", not a multiple of the alignment " +
                       std::to_string(f.alignment_));
    f.tensor_index_.emplace(t.name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  std::uint64_t data_start = c.pos();
  const std::uint64_t pad = (f.alignment_ - data_start % f.alignment_) % f.alignment_;
  if (!f.tensors_.empty()) {
    if (!add_ok(data_start, pad, data_start) || data_start > size)
      fail(origin, "truncated: the data section would start at " + std::to_string(data_start) + ", past the end (" +
                       std::to_string(size) + " bytes)");
  }
  for (TensorInfo& t : f.tensors_) {
    std::uint64_t begin = 0, end = 0;
    if (!add_ok(data_start, t.offset, begin) || !add_ok(begin, t.bytes, end) || end > size)
      fail(origin, "truncated: tensor '" + t.name + "' (" + std::to_string(t.bytes) + " bytes at data offset " +
                       std::to_string(t.offset) + ") ends past the end of the file (" + std::to_string(size) + " bytes)");
    t.data = data + begin;
  }
  // The tensors' bytes must be disjoint (llama.cpp lays them out one after another): else every tensor
  // could point at offset 0 and a small file would dequantize to a model of any size. Disjoint tensors
  // inside the file hold at most its bytes in all, which bounds what a loader makes of them.
  std::vector<std::size_t> order(f.tensors_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return f.tensors_[a].offset != f.tensors_[b].offset ? f.tensors_[a].offset < f.tensors_[b].offset : a < b;
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& prev = f.tensors_[order[i - 1]];
    const TensorInfo& t = f.tensors_[order[i]];
    if (t.offset < prev.offset + prev.bytes)
      fail(origin, "tensor '" + t.name + "' (" + std::to_string(t.bytes) + " bytes at data offset " +
                       std::to_string(t.offset) + ") overlaps tensor '" + prev.name + "' (" +
                       std::to_string(prev.bytes) + " bytes at data offset " + std::to_string(prev.offset) +
                       "); tensors must not share bytes");
  }
  return f;
}

const Value* File::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::uint64_t File::get_uint(const std::string& key, bool required, std::uint64_t fallback) const {
  const Value* v = find(key);
  if (!v) {
    if (required) fail(origin_, "missing key '" + key + "'");
    return fallback;
  }
  if (!v->is_integer())
    fail(origin_, "key '" + key + "' must be an integer (got " + value_type_name(static_cast<std::uint32_t>(v->type)) + ")");
  if (v->type != ValueType::UINT64 && v->i < 0)
    fail(origin_, "key '" + key + "' must be >= 0 (got " + std::to_string(v->i) + ")");
  return v->u;
}

double File::get_float(const std::string& key, bool required, double fallback) const {
  const Value* v = find(key);
  if (!v) {
    if (required) fail(origin_, "missing key '" + key + "'");
    return fallback;
  }
  if (v->type == ValueType::FLOAT32 || v->type == ValueType::FLOAT64) return v->f;
  if (v->is_integer()) return v->type == ValueType::UINT64 ? static_cast<double>(v->u) : static_cast<double>(v->i);
  fail(origin_, "key '" + key + "' must be a number (got " + value_type_name(static_cast<std::uint32_t>(v->type)) + ")");
}

std::string File::get_string(const std::string& key, bool required) const {
  const Value* v = find(key);
  if (!v) {
    if (required) fail(origin_, "missing key '" + key + "'");
    return {};
  }
  if (v->type != ValueType::STRING)
    fail(origin_, "key '" + key + "' must be a string (got " + value_type_name(static_cast<std::uint32_t>(v->type)) + ")");
  return v->s;
}

GgufVocab read_vocab(const File& file) {
  const std::string& origin = file.origin();
  GgufVocab vocab;
  vocab.model = file.get_string("tokenizer.ggml.model", true);
  vocab.pre = file.get_string("tokenizer.ggml.pre", false);
  const Value* tokens = file.find("tokenizer.ggml.tokens");
  if (!tokens) fail(origin, "missing key 'tokenizer.ggml.tokens'");
  if (tokens->type != ValueType::ARRAY || tokens->array_type != ValueType::STRING)
    fail(origin, "key 'tokenizer.ggml.tokens' must be an array of strings");
  if (tokens->strings.empty()) fail(origin, "key 'tokenizer.ggml.tokens' is empty");
  vocab.tokens = tokens->strings;
  const std::size_t n = vocab.tokens.size();
  if (const Value* s = file.find("tokenizer.ggml.scores")) {
    if (s->type != ValueType::ARRAY || s->array_type != ValueType::FLOAT32)
      fail(origin, "key 'tokenizer.ggml.scores' must be an array of float32");
    if (s->floats.size() != n)
      fail(origin, "key 'tokenizer.ggml.scores' has " + std::to_string(s->floats.size()) + " entries for " +
                       std::to_string(n) + " tokens");
    vocab.scores.assign(s->floats.begin(), s->floats.end());
  }
  if (const Value* t = file.find("tokenizer.ggml.token_type")) {
    if (t->type != ValueType::ARRAY || (t->array_type != ValueType::INT32 && t->array_type != ValueType::UINT32))
      fail(origin, "key 'tokenizer.ggml.token_type' must be an array of int32");
    if (t->ints.size() != n)
      fail(origin, "key 'tokenizer.ggml.token_type' has " + std::to_string(t->ints.size()) + " entries for " +
                       std::to_string(n) + " tokens");
    for (std::int64_t x : t->ints) vocab.token_types.push_back(static_cast<std::int32_t>(x));
  }
  if (const Value* m = file.find("tokenizer.ggml.merges")) {
    if (m->type != ValueType::ARRAY || m->array_type != ValueType::STRING)
      fail(origin, "key 'tokenizer.ggml.merges' must be an array of strings");
    vocab.merges = m->strings;
  }
  auto special = [&](const std::string& key, std::int64_t& out) {
    const Value* v = file.find(key);
    if (!v) return;
    if (!v->is_integer()) fail(origin, "key '" + key + "' must be an integer");
    if (v->u == 0xFFFFFFFFu || v->i == -1 || v->u == std::numeric_limits<std::uint64_t>::max()) return;  // "none"
    if (v->i < 0 || v->u >= n)  // a uint64 is shown as unsigned (2^63 is not -9223372036854775808)
      fail(origin, "key '" + key + "' = " + (v->type == ValueType::UINT64 ? std::to_string(v->u) : std::to_string(v->i)) +
                       " is outside the vocabulary [0, " + std::to_string(n) + ")");
    out = v->i;
  };
  special("tokenizer.ggml.bos_token_id", vocab.bos_id);
  special("tokenizer.ggml.eos_token_id", vocab.eos_id);
  special("tokenizer.ggml.unknown_token_id", vocab.unk_id);
  special("tokenizer.ggml.padding_token_id", vocab.pad_id);
  auto flag = [&](const std::string& key, int& out) {
    const Value* v = file.find(key);
    if (!v) return;
    if (v->type != ValueType::BOOL) fail(origin, "key '" + key + "' must be a bool");
    out = static_cast<int>(v->i);
  };
  flag("tokenizer.ggml.add_bos_token", vocab.add_bos);
  flag("tokenizer.ggml.add_eos_token", vocab.add_eos);
  vocab.chat_template = file.get_string("tokenizer.chat_template", false);
  return vocab;
}

}  // namespace llama2::gguf

namespace llama2 {

GgufVocab read_gguf_vocab(const std::string& path) { return gguf::read_vocab(gguf::File::open(path)); }

bool is_gguf_file(const std::string& path) {
  if (!kvtools::file_problem(path).empty()) return false;  // opening a FIFO would block
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace llama2
