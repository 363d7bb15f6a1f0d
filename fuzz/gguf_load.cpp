// kvevict fuzzing — gguf_load: the GGUF reader (metadata, tensor table, vocabulary), the
// dequantizers, and llama2::Model::load on GGUF bytes, followed by a prefill and two steps.
// SPDX-License-Identifier: Apache-2.0
//
// The input is one GGUF file. gguf::File::parse must succeed or throw std::invalid_argument; after a
// successful parse every tensor lies inside the input, read_vocab succeeds or throws
// std::invalid_argument, and every tensor of a dequantizable type (up to 2^16 elements) dequantizes.
// Model::load on the same bytes (as a file) must succeed or throw std::invalid_argument; a model
// small enough to run here (context <= 64, dim <= 256, vocab <= 4096) then prefills two tokens and
// takes two greedy steps, which must run without a sanitizer finding (fuzzed weights may be
// non-finite, so the logits' values are not checked; tests/llama2 pins them on real files).
#include <unistd.h>

#include <algorithm>
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
    if (c.seq_len > 64 || c.dim > 256 || c.hidden_dim > 1024 || c.vocab_size > 4096 || c.n_layers > 4) return 0;
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
