// kvevict — bench/quality/quality_eval.cpp: the measurement of kvevict-quality (quality_eval.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "quality_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvquality {
namespace {

void log_softmax(const float* logits, std::size_t n, std::vector<float>& out) {
  out.resize(n);
  const float m = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - m));
  const float lse = m + static_cast<float>(std::log(sum));
  for (std::size_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Paragraphs separated by blank lines, each encoded with BOS, concatenated
// (the tokenization of ../shared/reference/README.md).
std::vector<int> tokenize_corpus(const llama2::Tokenizer& tok, const std::string& text) {
  std::vector<int> ids;
  std::istringstream in(text);
  std::string line, para;
  auto flush = [&] {
    if (para.empty()) return;
    const auto p = tok.encode(para, true);
    ids.insert(ids.end(), p.begin(), p.end());
    para.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) {
      flush();
    } else {
      if (!para.empty()) para += '\n';
      para += line;
    }
  }
  flush();
  return ids;
}

std::vector<int> window_tokens(const std::vector<int>& ids, std::size_t w, std::size_t len) {
  return std::vector<int>(ids.begin() + static_cast<std::ptrdiff_t>(w * len),
                          ids.begin() + static_cast<std::ptrdiff_t>((w + 1) * len));
}

Reference full_reference(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                         FutureAttention* future) {
  Reference ref;
  engine.reset();
  if (future != nullptr) {
    const llama2::Config& c = engine.config();
    future->reset(c.n_layers, c.n_kv_heads, c.n_heads / c.n_kv_heads, tokens.size() - prompt - 1, tokens.size());
    engine.set_decode_attention_hook([future, &engine, prompt](std::size_t layer, const float* logits, std::size_t n) {
      future->add_step(layer, engine.position() - prompt, logits, n, engine.view(layer).head_positions(0));
    });
  }
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lp;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t) {
    log_softmax(engine.step(tokens[t]), vocab, lp);
    ref.nll -= lp[static_cast<std::size_t>(tokens[t + 1])];
    ref.argmax.push_back(argmax(lp));
    ref.logp.push_back(lp);
  }
  ref.nll /= static_cast<double>(ref.logp.size());
  if (future != nullptr) {
    engine.set_decode_attention_hook({});
    future->finish();
  }
  return ref;
}

WindowResult evaluate(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                      const Reference& ref) {
  WindowResult r;
  engine.reset();
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lq;
  std::size_t i = 0;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t, ++i) {
    log_softmax(engine.step(tokens[t]), vocab, lq);
    r.nll -= lq[static_cast<std::size_t>(tokens[t + 1])];
    double kl = 0.0;
    const auto& lp = ref.logp[i];
    for (std::size_t v = 0; v < vocab; ++v) kl += std::exp(static_cast<double>(lp[v])) * (lp[v] - lq[v]);
    r.kl += kl;
    r.top1 += argmax(lq) == ref.argmax[i] ? 1.0 : 0.0;
  }
  r.nll /= static_cast<double>(i);
  r.kl /= static_cast<double>(i);
  r.top1 /= static_cast<double>(i);
  return r;
}

Stat mean_se(const std::vector<double>& x) {
  Stat s;
  if (x.empty()) return s;
  for (double v : x) s.mean += v;
  s.mean /= static_cast<double>(x.size());
  if (x.size() > 1) {
    double var = 0.0;
    for (double v : x) var += (v - s.mean) * (v - s.mean);
    var /= static_cast<double>(x.size() - 1);
    s.se = std::sqrt(var / static_cast<double>(x.size()));
  }
  return s;
}

std::string fmt(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string fmt_signed(double v, int prec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f", prec, v);
  return buf;
}

}  // namespace kvquality
