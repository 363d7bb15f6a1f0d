// kvevict tools — llama2/model.cpp: reading and validating a llama2.c checkpoint.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/model.hpp"

#include "llama2/gguf.hpp"

#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace llama2 {
namespace {

constexpr std::size_t kHeaderInts = 7;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t);
static_assert(kHeaderBytes % sizeof(float) == 0, "the weights must start float-aligned after the header");

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("llama2::Model::load: '" + path + "': " + what);
}

// Adds a*b to total, failing on overflow (a hostile header must not wrap the size check).
void add_product(std::uint64_t& total, std::uint64_t a, std::uint64_t b, const std::string& path) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(total, product, &total))
    fail(path, "header dimensions are too large (size overflows 64 bits)");
}

std::string describe(const Config& c) {
  std::ostringstream os;
  os << "dim=" << c.dim << " hidden_dim=" << c.hidden_dim << " n_layers=" << c.n_layers << " n_heads=" << c.n_heads
     << " n_kv_heads=" << c.n_kv_heads << " vocab_size=" << (c.shared_classifier ? "" : "-") << c.vocab_size
     << " seq_len=" << c.seq_len;
  return os.str();
}

Config parse_header(const std::int32_t (&h)[kHeaderInts], const std::string& path) {
  if (std::memcmp(h, "ak42", 4) == 0)
    fail(path, "this is a newer llama2.c export (magic \"ak42\"); only the legacy format (llama2.c "
               "export.py --version 0, as in karpathy/tinyllamas) is supported");
  const char* names[kHeaderInts] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (std::size_t i = 0; i < kHeaderInts; ++i) {
    const bool ok = (i == 5) ? h[i] != 0 : h[i] > 0;
    if (!ok) fail(path, std::string("invalid header: ") + names[i] + " = " + std::to_string(h[i]));
  }
  Config c;
  c.dim = static_cast<std::size_t>(h[0]);
  c.hidden_dim = static_cast<std::size_t>(h[1]);
  c.n_layers = static_cast<std::size_t>(h[2]);
  c.n_heads = static_cast<std::size_t>(h[3]);
  c.n_kv_heads = static_cast<std::size_t>(h[4]);
  c.shared_classifier = h[5] > 0;
  c.vocab_size = static_cast<std::size_t>(h[5] > 0 ? std::int64_t{h[5]} : -std::int64_t{h[5]});
  c.seq_len = static_cast<std::size_t>(h[6]);
  if (c.dim % c.n_heads != 0) fail(path, "inconsistent header: n_heads does not divide dim (" + describe(c) + ")");
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
    fail(path, "inconsistent header: n_kv_heads must divide n_heads (" + describe(c) + ")");
  if (c.head_dim() % 2 != 0)
    fail(path, "inconsistent header: head_dim = dim / n_heads must be even for RoPE (" + describe(c) + ")");
  return c;
}

// Number of floats after the header that the config implies.
std::uint64_t expected_floats(const Config& c, const std::string& path) {
  const std::uint64_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), hid = c.hidden_dim;
  std::uint64_t n = 0;
  add_product(n, c.vocab_size, d, path);                    // token_embedding
  add_product(n, L, d, path);                               // rms_att
  add_product(n, L * d, d, path);                           // wq
  add_product(n, L * kv, d, path);                          // wk
  add_product(n, L * kv, d, path);                          // wv
  add_product(n, L * d, d, path);                           // wo
  add_product(n, L, d, path);                               // rms_ffn
  add_product(n, L * hid, d, path);                         // w1
  add_product(n, L * d, hid, path);                         // w2
  add_product(n, L * hid, d, path);                         // w3
  add_product(n, 1, d, path);                               // rms_final
  add_product(n, c.seq_len, c.head_dim(), path);            // legacy freq_cis real + imag
  if (!c.shared_classifier) add_product(n, c.vocab_size, d, path);  // classifier
  return n;
}

}  // namespace

Model Model::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(path, "not found or not a regular file");
  if (is_gguf_file(path)) return load_gguf(path);
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot stat: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open: ") + std::strerror(errno));
  if (file_size < kHeaderBytes)
    fail(path, "truncated: " + std::to_string(file_size) + " bytes, shorter than the 28-byte header");
  std::int32_t header[kHeaderInts];
  in.read(reinterpret_cast<char*>(header), kHeaderBytes);
  if (!in) fail(path, "cannot read the header");

  Model m;
  m.config_ = parse_header(header, path);
  const Config& c = m.config_;
  std::uint64_t expected_bytes = 0;
  add_product(expected_bytes, expected_floats(c, path), sizeof(float), path);
  expected_bytes += kHeaderBytes;
  if (file_size != expected_bytes)
    fail(path, std::string(file_size < expected_bytes ? "truncated" : "inconsistent (trailing bytes)") +
                   ": the header (" + describe(c) + ") implies " + std::to_string(expected_bytes) +
                   " bytes, the file has " + std::to_string(file_size));

  m.storage_.resize(static_cast<std::size_t>(expected_bytes / sizeof(float)));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(m.storage_.data()), static_cast<std::streamsize>(expected_bytes));
  if (!in) fail(path, "read error after the header");

  // Carve the weights out of the storage, in file order.
  const float* p = m.storage_.data() + kHeaderBytes / sizeof(float);
  auto take = [&p](std::size_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  const std::size_t L = c.n_layers, d = c.dim, kv = c.kv_dim(), hid = c.hidden_dim;
  m.token_embedding_ = take(c.vocab_size * d);
  m.layers_.resize(L);
  for (auto& l : m.layers_) l.rms_att = take(d);
  for (auto& l : m.layers_) l.wq = take(d * d);
  for (auto& l : m.layers_) l.wk = take(kv * d);
  for (auto& l : m.layers_) l.wv = take(kv * d);
  for (auto& l : m.layers_) l.wo = take(d * d);
  for (auto& l : m.layers_) l.rms_ffn = take(d);
  for (auto& l : m.layers_) l.w1 = take(hid * d);
  for (auto& l : m.layers_) l.w2 = take(d * hid);
  for (auto& l : m.layers_) l.w3 = take(hid * d);
  m.rms_final_ = take(d);
  take(c.seq_len * c.head_dim());  // legacy freq_cis_real / freq_cis_imag: RoPE is recomputed
  m.classifier_ = c.shared_classifier ? m.token_embedding_ : take(c.vocab_size * d);
  // Every weight finite (as for GGUF): a NaN gave silent garbage. The unused RoPE tables are not read.
  auto check = [&](const float* x, std::size_t n, const char* name, const std::string& of = "") {
    for (std::size_t j = 0; j < n; ++j)
      if (!std::isfinite(x[j]))
        fail(path, std::string("weight '") + name + "'" + of + " holds a non-finite value (" +
                       (std::isnan(x[j]) ? "nan" : x[j] > 0 ? "inf" : "-inf") + " at element " + std::to_string(j) + ")");
  };
  check(m.token_embedding_, c.vocab_size * d, "token_embedding");
  for (std::size_t l = 0; l < L; ++l) {
    const LayerWeights& w = m.layers_[l];
    const std::string of = " of layer " + std::to_string(l);
    check(w.rms_att, d, "rms_att", of);
    check(w.wq, d * d, "wq", of);
    check(w.wk, kv * d, "wk", of);
    check(w.wv, kv * d, "wv", of);
    check(w.wo, d * d, "wo", of);
    check(w.rms_ffn, d, "rms_ffn", of);
    check(w.w1, hid * d, "w1", of);
    check(w.w2, d * hid, "w2", of);
    check(w.w3, hid * d, "w3", of);
  }
  check(m.rms_final_, d, "rms_final");
  if (!c.shared_classifier) check(m.classifier_, c.vocab_size * d, "classifier");
  return m;
}

}  // namespace llama2
