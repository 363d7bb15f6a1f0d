// kvevict fuzzing — gguf_load: the GGUF reader (metadata, tensor table, vocabulary), the
// dequantizers, and llama2::Model::load on GGUF bytes, followed by a prefill and two steps.
// SPDX-License-Identifier: Apache-2.0
//
// The input is one GGUF file. gguf::File::parse must succeed or throw std::invalid_argument; after a
// successful parse every tensor lies inside the input and no two tensors share a byte (issue 37),
// read_vocab succeeds or throws std::invalid_argument, and every tensor of a dequantizable type (up to
// 2^16 elements) dequantizes. Model::load on the same bytes (as a file) must succeed or throw
// std::invalid_argument; a loaded model's float32 weights take at most 8 bytes per input byte (its
// tensors are disjoint), and a model small enough to run here (context <= 64, dim <= 256, vocab <=
// 4096) has only finite weights (issue 37), then prefills two tokens and takes two greedy steps, which
// must run without a sanitizer finding (the logits' values are not checked: finite weights can still
// overflow; tests/llama2 pins them on real files).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "llama2/dequantize.hpp"
#include "llama2/engine.hpp"
#include "llama2/gguf.hpp"
#include "llama2/model.hpp"
#include "llama2/sampler.hpp"
#include "llama2/tokenizer.hpp"

namespace {

std::string temp_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/kvevict-fuzz-gguf-" + std::to_string(::getpid()) + ".gguf";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace llama2::gguf;
  try {
    const File f = File::parse(data, size, "fuzz");
    std::vector<const TensorInfo*> by_start;
    for (const TensorInfo& t : f.tensors()) by_start.push_back(&t);
    std::sort(by_start.begin(), by_start.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->data < b->data; });
    for (std::size_t i = 1; i < by_start.size(); ++i)
      KVFUZZ_CHECK(by_start[i]->data >= by_start[i - 1]->data + by_start[i - 1]->bytes, "tensor '", by_start[i]->name,
                   "' overlaps tensor '", by_start[i - 1]->name, "'");
    for (const TensorInfo& t : f.tensors()) {
      KVFUZZ_CHECK(t.data >= data && t.data + t.bytes <= data + size, "tensor '", t.name, "' outside the input");
      if (can_dequantize(t.type) && t.elements <= (1u << 16)) {
        std::vector<float> y(static_cast<std::size_t>(t.elements));
        dequantize(t.type, t.data, y.data(), y.size());
      }
    }
    try {
      const llama2::GgufVocab vocab = read_vocab(f);
      const llama2::Tokenizer tok = llama2::Tokenizer::from_gguf(vocab);
      std::string text = "Hello  world 42\n";
      for (const auto& [key, value] : f.metadata())
        if (value.type == ValueType::STRING && key.rfind("tokenizer.", 0) != 0) text += value.s;
      const std::vector<int> ids = tok.encode(text, false);
      for (int id : ids) KVFUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "id ", id, " outside the vocabulary");
      (void)tok.decode(ids);
    } catch (const std::invalid_argument&) {
    }
  } catch (const std::invalid_argument&) {
    return 0;
  }
  static const std::string path = temp_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) kvfuzz::fail("cannot write " + path);
  }
  try {
    const llama2::Model m = llama2::Model::load(path);
    const llama2::Config& c = m.config();
    const std::uint64_t d = c.dim, kv = c.kv_dim(), hid = c.hidden_dim, V = c.vocab_size, L = c.n_layers;
    const std::uint64_t params = V * d * (c.shared_classifier ? 1 : 2) + d + L * (2 * d + 2 * d * d + 2 * kv * d + 3 * hid * d);
    KVFUZZ_CHECK(params * 4 <= 8 * static_cast<std::uint64_t>(size), "a ", size, "-byte file loaded ", params,
                 " float32 weights");
    if (c.seq_len > 64 || c.dim > 256 || c.hidden_dim > 1024 || c.vocab_size > 4096 || c.n_layers > 4) return 0;
    auto finite = [](const float* x, std::uint64_t n, const char* what) {
      for (std::uint64_t i = 0; i < n; ++i) KVFUZZ_CHECK(std::isfinite(x[i]), what, " element ", i, " is ", x[i]);
    };
    finite(m.token_embedding(), V * d, "token_embd");
    finite(m.classifier(), V * d, "classifier");
    finite(m.rms_final(), d, "output_norm");
    for (std::size_t l = 0; l < c.n_layers; ++l) {
      const llama2::LayerWeights& w = m.layer(l);
      finite(w.rms_att, d, "attn_norm");
      finite(w.wq, d * d, "attn_q");
      finite(w.wk, kv * d, "attn_k");
      finite(w.wv, kv * d, "attn_v");
      finite(w.wo, d * d, "attn_output");
      finite(w.rms_ffn, d, "ffn_norm");
      finite(w.w1, hid * d, "ffn_gate");
      finite(w.w2, hid * d, "ffn_down");
      finite(w.w3, hid * d, "ffn_up");
    }
    llama2::Engine e(m);
    const std::vector<int> prompt = {0, static_cast<int>(c.vocab_size - 1)};
    if (prompt.size() > c.seq_len) return 0;
    const llama2::RowMatrix& pre = e.prefill(prompt);
    const float* logits = pre.row(pre.rows() - 1).data();
    for (int s = 0; s < 2 && e.position() < c.seq_len; ++s) logits = e.step(llama2::argmax(logits, c.vocab_size));
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
