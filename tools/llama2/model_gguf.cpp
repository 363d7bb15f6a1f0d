// kvevict tools — llama2/model_gguf.cpp: a llama-architecture GGUF file to the engine's float32 weights.
// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "llama2/dequantize.hpp"
#include "llama2/gguf.hpp"
#include "llama2/model.hpp"

namespace llama2 {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::invalid_argument("llama2::Model::load: '" + path + "': " + what);
}

std::string shape(const std::vector<std::uint64_t>& ne) {
  std::string s = "[";
  for (std::size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// A key that must fit the engine's size_t dimensions and be in [1, 2^log2_max].
std::size_t dimension(const gguf::File& f, const std::string& key, bool required, std::uint64_t fallback = 0,
                      unsigned log2_max = 31) {
  const std::uint64_t v = f.get_uint(key, required, fallback);
  if (v == 0 || v > (std::uint64_t{1} << log2_max))
    fail(f.origin(), "key '" + key + "' = " + std::to_string(v) + " is out of range [1, 2^" +
                         std::to_string(log2_max) + "]");
  return static_cast<std::size_t>(v);
}

// `x` in the shortest form that reads back as the same double (1e+300, not 300 digits).
std::string shortest(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}
std::string shortest(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

// A float key as the float32 the engine uses: the value must lie in the open interval (lo, hi), and so
// must its float32 rounding, a normal float32 when `normal` (`range` says it in words: "(1, 1e12)").
float float_key(const gguf::File& f, const std::string& key, bool required, double fallback, double lo, double hi,
                bool normal, const std::string& range) {
  const double v = f.get_float(key, required, fallback);
  if (!(v > lo && v < hi)) fail(f.origin(), "key '" + key + "' = " + shortest(v) + " is not in " + range);
  const float x = static_cast<float>(v);
  const double xd = static_cast<double>(x);
  if (!(xd > lo && xd < hi) || (normal && !std::isnormal(x)))
    fail(f.origin(), "key '" + key + "' = " + shortest(v) + " becomes " + shortest(x) +
                         " as a float32 (the engine's type), which is not " + (normal ? "a normal float32 in " : "in ") +
                         range);
  return x;
}

}  // namespace

Model Model::load_gguf(const std::string& path) {
  const gguf::File f = gguf::File::open(path);
  const std::string arch = f.get_string("general.architecture", true);
  if (arch != "llama")
    fail(path, "key 'general.architecture' is '" + arch + "'; only 'llama' models are supported");

  Model m;
  Config& c = m.config_;
  c.n_layers = dimension(f, "llama.block_count", true);
  c.dim = dimension(f, "llama.embedding_length", true);
  c.hidden_dim = dimension(f, "llama.feed_forward_length", true);
  c.n_heads = dimension(f, "llama.attention.head_count", true);
  c.n_kv_heads = dimension(f, "llama.attention.head_count_kv", false, c.n_heads);
  // The engine sizes its RoPE tables and KV buffers by the context: 2^20 positions (above any llama-family
  // model's) keeps a corrupt header from asking for hundreds of GiB before anything names the key.
  c.seq_len = dimension(f, "llama.context_length", true, 0, 20);
  // The engine computes in float32: the range is checked on the float32 value it uses (a float64 eps of
  // 1e-300 is 0 as a float32, 1e-40 a denormal; a freq_base of 1 + 1e-12 is 1).
  c.rms_eps = float_key(f, "llama.attention.layer_norm_rms_epsilon", true, 0.0, 0.0, 1.0, true, "(0, 1)");
  c.rope_theta = float_key(f, "llama.rope.freq_base", false, 10000.0, 1.0, 1e12, false, "(1, 1e12)");
  if (c.dim % c.n_heads != 0)
    fail(path, "key 'llama.attention.head_count' = " + std::to_string(c.n_heads) + " does not divide "
               "'llama.embedding_length' = " + std::to_string(c.dim));
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
    fail(path, "key 'llama.attention.head_count_kv' = " + std::to_string(c.n_kv_heads) +
                   " must divide 'llama.attention.head_count' = " + std::to_string(c.n_heads));
  if (c.head_dim() % 2 != 0) fail(path, "head_dim = " + std::to_string(c.head_dim()) + " must be even for RoPE");
  for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"})
    if (f.find(key) && f.get_uint(key, true) != c.head_dim())
      fail(path, std::string("key '") + key + "' = " + std::to_string(f.get_uint(key, true)) +
                     " differs from embedding_length / head_count = " + std::to_string(c.head_dim()) +
                     " (not supported)");
  if (f.find("llama.rope.dimension_count") && f.get_uint("llama.rope.dimension_count", true) != c.head_dim())
    fail(path, "key 'llama.rope.dimension_count' = " + std::to_string(f.get_uint("llama.rope.dimension_count", true)) +
                   ": partial rotary embeddings (rotated dims != head_dim = " + std::to_string(c.head_dim()) +
                   ") are not supported");
  if (f.find("llama.rope.scaling.type")) {
    const std::string type = f.get_string("llama.rope.scaling.type", true);
    if (type != "none") fail(path, "key 'llama.rope.scaling.type' = '" + type + "': RoPE scaling is not supported");
  }

  // 9 tensors a block plus the embedding and the final norm: a block count the tensor table cannot
  // hold fails before anything is sized by it.
  if (c.n_layers > (f.tensors().size() - std::min<std::size_t>(f.tensors().size(), 2)) / 9)
    fail(path, "key 'llama.block_count' = " + std::to_string(c.n_layers) + " but the file has only " +
                   std::to_string(f.tensors().size()) + " tensors (9 per block + 2)");
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) fail(path, "missing tensor 'token_embd.weight'");
  if (embd->ne.size() != 2 || embd->ne[0] != c.dim)
    fail(path, "tensor 'token_embd.weight' has shape " + shape(embd->ne) + "; expected [" + std::to_string(c.dim) +
                   ", vocab]");
  if (embd->ne[1] > (std::uint64_t{1} << 31)) fail(path, "tensor 'token_embd.weight': vocabulary too large");
  c.vocab_size = static_cast<std::size_t>(embd->ne[1]);
  if (const std::uint64_t v = f.get_uint("llama.vocab_size", false, c.vocab_size); v != c.vocab_size)
    fail(path, "key 'llama.vocab_size' = " + std::to_string(v) + " but 'token_embd.weight' has " +
                   std::to_string(c.vocab_size) + " rows");
  const gguf::TensorInfo* output = f.find_tensor("output.weight");
  c.shared_classifier = output == nullptr;

  // Every tensor the engine reads, in storage order, with its expected shape (innermost first).
  struct Want {
    std::string name;
    std::vector<std::uint64_t> ne;
  };
  const std::uint64_t d = c.dim, kv = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size;
  std::vector<Want> wants;
  wants.push_back({"token_embd.weight", {d, V}});
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    wants.push_back({b + "attn_norm.weight", {d}});
    wants.push_back({b + "attn_q.weight", {d, d}});
    wants.push_back({b + "attn_k.weight", {d, kv}});
    wants.push_back({b + "attn_v.weight", {d, kv}});
    wants.push_back({b + "attn_output.weight", {d, d}});
    wants.push_back({b + "ffn_norm.weight", {d}});
    wants.push_back({b + "ffn_gate.weight", {d, hid}});
    wants.push_back({b + "ffn_up.weight", {d, hid}});
    wants.push_back({b + "ffn_down.weight", {hid, d}});
  }
  wants.push_back({"output_norm.weight", {d}});
  if (output) wants.push_back({"output.weight", {d, V}});

  std::uint64_t total = 0;
  std::vector<const gguf::TensorInfo*> infos;
  std::map<std::string, int> type_counts;
  for (const Want& w : wants) {
    const gguf::TensorInfo* t = f.find_tensor(w.name);
    if (!t) fail(path, "missing tensor '" + w.name + "'");
    if (t->ne != w.ne)
      fail(path, "tensor '" + w.name + "' has shape " + shape(t->ne) + "; expected " + shape(w.ne) + " (" +
                     "innermost first)");
    if (!gguf::can_dequantize(t->type))
      fail(path, "tensor '" + w.name + "' has type " + gguf::tensor_type_name(static_cast<std::uint32_t>(t->type)) +
                     ", which this loader does not read (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q5_K, q6_K)");
    if (__builtin_add_overflow(total, t->elements, &total)) fail(path, "the model's parameter count overflows");
    infos.push_back(t);
    ++type_counts[gguf::tensor_type_name(static_cast<std::uint32_t>(t->type))];
  }
  // Every tensor of the file must be one the model reads: with block_count smaller than the blocks
  // stored, blk.4.* was ignored and a truncated model ran.
  std::set<std::string> wanted;
  for (const Want& w : wants) wanted.insert(w.name);
  for (const gguf::TensorInfo& t : f.tensors())
    if (!wanted.count(t.name))
      fail(path, "tensor '" + t.name + "' is not read by a llama model with 'llama.block_count' = " +
                     std::to_string(c.n_layers) + (output ? "" : " and a tied classifier") +
                     " (a file may hold only the model's tensors)");

  m.storage_.resize(static_cast<std::size_t>(total));
  float* p = m.storage_.data();
  std::vector<const float*> at;
  for (const gguf::TensorInfo* t : infos) {
    gguf::dequantize(t->type, t->data, p, static_cast<std::size_t>(t->elements));
    at.push_back(p);
    p += t->elements;
  }
  // Every weight finite (a NaN in attn_q gave greedy ids 0 0 0 ... and exit 0): one pass over the
  // dequantized floats, an OR of "exponent all ones" that vectorizes, the element found only on failure.
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const float* x = at[i];
    const std::size_t n = static_cast<std::size_t>(infos[i]->elements);
    std::uint32_t bad = 0;
    for (std::size_t j = 0; j < n; ++j) {
      std::uint32_t u;
      std::memcpy(&u, x + j, sizeof u);
      bad |= static_cast<std::uint32_t>((u & 0x7F800000u) == 0x7F800000u);
    }
    if (bad == 0) continue;
    std::size_t j = 0;
    while (std::isfinite(x[j])) ++j;
    fail(path, "tensor '" + infos[i]->name + "' holds a non-finite value (" + shortest(x[j]) + " at element " +
                   std::to_string(j) + ")");
  }

  std::size_t i = 0;
  m.token_embedding_ = at[i++];
  m.layers_.resize(c.n_layers);
  for (LayerWeights& l : m.layers_) {
    l.rms_att = at[i++];
    l.wq = at[i++];
    l.wk = at[i++];
    l.wv = at[i++];
    l.wo = at[i++];
    l.rms_ffn = at[i++];
    l.w1 = at[i++];
    l.w3 = at[i++];
    l.w2 = at[i++];
  }
  m.rms_final_ = at[i++];
  m.classifier_ = output ? at[i++] : m.token_embedding_;
  if (f.find("tokenizer.ggml.model") || f.find("tokenizer.ggml.tokens")) {
    m.vocab_ = std::make_shared<const GgufVocab>(gguf::read_vocab(f));
    if (m.vocab_->tokens.size() != c.vocab_size)
      fail(path, "key 'tokenizer.ggml.tokens' has " + std::to_string(m.vocab_->tokens.size()) +
                     " tokens but 'token_embd.weight' has " + std::to_string(c.vocab_size) + " rows");
  }
  m.format_ = "gguf (";
  bool first = true;
  for (const auto& [name, count] : type_counts) {
    m.format_ += (first ? "" : ", ") + name + " x" + std::to_string(count);
    first = false;
  }
  m.format_ += ")";
  return m;
}

}  // namespace llama2
