// kvevict fuzzing — llama2_load: the llama2.c checkpoint loader and the tokenizer loader, followed
// by a prefill and two forward steps whenever loading succeeds.
// SPDX-License-Identifier: Apache-2.0
//
// Input (FuzzedDataProvider): integers from the end choose the mode and the settings; bytes from the
// front are file contents.
//  - checkpoint: either the raw bytes (any header: 2^31 layers, negative sizes, "ak42", ...) or a
//    structured file — seven header ints drawn from small and extreme values, then a weight body
//    of exactly the implied size, or a few bytes short or long (truncated file, trailing bytes),
//    with small, NaN or inf weights;
//  - tokenizer: none, fuzzed bytes as a SentencePiece .model, or the real tok512.model /
//    tok105.model from the shared folder ($KVEVICT_SHARED_DIR; skipped when absent);
//  - a policy for every block (full, keyformer, h2o, streaming, window, tova) with a small budget.
// Loading must succeed or throw std::invalid_argument (a bad file or a tokenizer whose vocabulary
// does not match the model). After a successful load: prefill of a prompt (fuzzed ids, or the
// tokenizer's encoding of fuzzed text), two greedy steps, and decoding of the ids; these must
// succeed or throw std::invalid_argument / std::length_error (context full).
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "llama2/tokenizer.hpp"

namespace {

std::string temp_path(const char* what) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/kvevict-fuzz-llama2-" + std::to_string(::getpid()) + "-" + what;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) kvfuzz::fail("cannot write " + path);
}

std::string shared_file(const char* rel) {
  const char* env = std::getenv("KVEVICT_SHARED_DIR");
  const std::string dir = (env != nullptr && *env != '\0') ? env : KVEVICT_SHARED_DIR_DEFAULT;
  const std::string path = dir + "/" + rel;
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path : "";
}

std::int32_t pick_header_int(FuzzedDataProvider& in, std::int32_t lo, std::int32_t hi) {
  static const std::int32_t odd[] = {0, -1, std::numeric_limits<std::int32_t>::max(),
                                     std::numeric_limits<std::int32_t>::min(), 1 << 30, 1 << 16, 3, 65537};
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.PickValueInArray(odd);
  return in.ConsumeIntegralInRange<std::int32_t>(lo, hi);
}

/// Floats after the header implied by h (the loader's formula), or 0 if it is not small and valid.
std::uint64_t body_floats(const std::int32_t (&h)[7]) {
  for (int i = 0; i < 7; ++i)
    if (i != 5 && h[i] <= 0) return 0;
  if (h[5] == 0 || h[5] == std::numeric_limits<std::int32_t>::min() || h[0] % h[3] != 0) return 0;
  const std::uint64_t d = static_cast<std::uint64_t>(h[0]), hid = static_cast<std::uint64_t>(h[1]),
                      L = static_cast<std::uint64_t>(h[2]), hd = d / static_cast<std::uint64_t>(h[3]),
                      kv = hd * static_cast<std::uint64_t>(h[4]),
                      V = static_cast<std::uint64_t>(h[5] < 0 ? -std::int64_t{h[5]} : h[5]),
                      S = static_cast<std::uint64_t>(h[6]);
  if (d > 64 || hid > 64 || L > 8 || V > 4096 || S > 4096 || kv > 64) return 0;
  return V * d + L * d * 2 + L * d * d * 2 + L * kv * d * 2 + L * hid * d * 3 + d + S * hd + (h[5] < 0 ? V * d : 0);
}

std::string structured_checkpoint(FuzzedDataProvider& in) {
  std::int32_t h[7];
  h[0] = pick_header_int(in, 1, 16);  // dim
  h[1] = pick_header_int(in, 1, 16);  // hidden_dim
  h[2] = pick_header_int(in, 1, 3);   // n_layers
  h[3] = pick_header_int(in, 1, 4);   // n_heads
  h[4] = pick_header_int(in, 1, 4);   // n_kv_heads
  static const std::int32_t real_vocabs[] = {105, 512, -105, -512};  // the shared tokenizers' sizes
  h[5] = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.PickValueInArray(real_vocabs)
                                                   : pick_header_int(in, -40, 40);  // vocab (negative: separate classifier)
  h[6] = pick_header_int(in, 1, 12);  // seq_len
  std::string file(reinterpret_cast<const char*>(h), sizeof h);
  std::uint64_t floats = body_floats(h);
  if (floats == 0) floats = in.ConsumeIntegralInRange<std::uint64_t>(0, 64);
  std::int64_t bytes = static_cast<std::int64_t>(floats * 4);
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: bytes -= 4; break;                                          // truncated by one weight
    case 1: bytes += 4; break;                                          // one trailing weight
    case 2: bytes -= in.ConsumeIntegralInRange<std::int64_t>(1, 3); break;  // not a whole float
    case 3: bytes = in.ConsumeIntegralInRange<std::int64_t>(0, bytes + 8); break;
    default: break;
  }
  bytes = std::max<std::int64_t>(bytes, 0);
  const int weights = in.ConsumeIntegralInRange<int>(0, 7);  // 0: hostile values allowed
  std::vector<float> body(static_cast<std::size_t>(bytes + 3) / 4);
  for (float& w : body) {
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (weights == 0 && b >= 250) {
      static const float odd[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity(), 3e38f, -3e38f, 1e-45f};
      w = odd[b - 250];
    } else {
      w = (static_cast<float>(b) - 128.0f) / 256.0f;
    }
  }
  file.append(reinterpret_cast<const char*>(body.data()), static_cast<std::size_t>(bytes));
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string model_path = temp_path("model.bin"), tok_path = temp_path("tok.model");
  static const std::string tok512 = shared_file("models/stories260K/tok512.model");
  static const std::string tok105 = shared_file("models/babyllama-char105/tok105.model");
  FuzzedDataProvider in(data, size);

  const bool raw = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int tok_mode = in.ConsumeIntegralInRange<int>(0, 3);  // 0 none, 1 fuzzed, 2 tok512, 3 tok105
  static const char* const policies[] = {"full", "keyformer", "h2o", "streaming", "window", "tova"};
  llama2::EvictionSettings settings;
  settings.policy = in.PickValueInArray(policies);
  settings.budget = in.ConsumeBool() ? kvevict::Budget::tokens(in.ConsumeIntegralInRange<std::size_t>(1, 6))
                                     : kvevict::Budget::ratio(in.ConsumeIntegralInRange<int>(1, 96) / 64.0);
  settings.recent = settings.policy == "tova" ? kvevict::RecentWindow::tokens(0)
                    : in.ConsumeBool()       ? kvevict::RecentWindow::tokens(in.ConsumeIntegralInRange<std::size_t>(0, 2))
                                             : kvevict::RecentWindow::ratio(in.ConsumeIntegralInRange<int>(0, 4) / 4.0);
  settings.params.horizon = 2;
  settings.params.sinks = in.ConsumeIntegralInRange<std::size_t>(0, 2);
  settings.seed = in.ConsumeIntegral<std::uint8_t>();
  const std::size_t prompt_len = in.ConsumeIntegralInRange<std::size_t>(1, 14);
  std::vector<int> prompt(prompt_len);
  for (int& t : prompt) t = in.ConsumeIntegralInRange<int>(-1, 44);

  std::string model_bytes;
  std::string tok_bytes;
  std::string text;
  if (raw) {
    model_bytes = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, in.remaining_bytes()));
  } else {
    model_bytes = structured_checkpoint(in);
  }
  if (tok_mode == 1) tok_bytes = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<std::size_t>(0, in.remaining_bytes()));
  text = in.ConsumeRemainingBytesAsString();
  const std::string tok_file = tok_mode == 1 ? tok_path : tok_mode == 2 ? tok512 : tok_mode == 3 ? tok105 : "";
  if (tok_mode >= 2 && tok_file.empty()) return 0;  // shared folder absent

  write_file(model_path, model_bytes);
  if (tok_mode == 1) write_file(tok_path, tok_bytes);

  std::unique_ptr<llama2::Model> model;
  std::unique_ptr<llama2::Tokenizer> tokenizer;
  try {
    model = std::make_unique<llama2::Model>(llama2::Model::load(model_path));
    if (!tok_file.empty()) {
      tokenizer = std::make_unique<llama2::Tokenizer>(tok_file);
      llama2::check_vocab(*tokenizer, model->config(), tok_file);
    }
  } catch (const std::invalid_argument&) {
    return 0;  // a rejected file
  }
  const llama2::Config& c = model->config();
  // The KV buffers hold n_layers * seq_len * kv_dim * 2 floats (not part of the file): bound them so
  // the harness stays inside its memory limit on a valid but long-context checkpoint.
  if (static_cast<double>(c.n_layers) * static_cast<double>(c.seq_len) * static_cast<double>(c.kv_dim()) > 1e7)
    return 0;

  if (tokenizer) {
    if (text.find('\0') != std::string::npos) text.resize(text.find('\0'));
    prompt = tokenizer->encode(text, true);
    if (prompt.empty() || prompt.size() > 14) prompt.resize(std::min<std::size_t>(std::max<std::size_t>(prompt.size(), 1), 14), 1);
  }
  try {
    llama2::Engine engine(*model, llama2::make_cache_factory(settings, c.n_heads));
    std::vector<int> ids = prompt;
    const llama2::RowMatrix& logits = engine.prefill(prompt);
    KVFUZZ_CHECK(static_cast<std::size_t>(logits.rows()) == prompt.size() &&
                     static_cast<std::size_t>(logits.cols()) == c.vocab_size,
                 "prefill logits shape");
    const float* last = logits.row(logits.rows() - 1).data();
    for (int s = 0; s < 2; ++s) {
      const int next = static_cast<int>(std::max_element(last, last + c.vocab_size) - last);
      ids.push_back(next);
      last = engine.step(next);
      KVFUZZ_CHECK(engine.position() == prompt.size() + static_cast<std::size_t>(s) + 1, "position after a step");
    }
    if (tokenizer) tokenizer->decode(ids);
  } catch (const std::invalid_argument&) {
  } catch (const std::length_error&) {
  }
  return 0;
}
