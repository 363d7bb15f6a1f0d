// kvevict — bench/quality/quality_eval.cpp: the measurement of kvevict-quality (quality_eval.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "quality_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "file_input.hpp"

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
  try {
    return kvtools::read_regular_file(path);  // a FIFO or /dev/zero was read until memory ran out
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
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

std::vector<std::string> list_documents(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw std::runtime_error("cannot list the folder '" + dir + "': " + ec.message());
  for (const fs::directory_entry& e : it) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".rst" || ext == ".txt")) paths.push_back(e.path().string());
  }
  if (paths.empty()) throw std::runtime_error("the folder '" + dir + "' holds no *.rst or *.txt document");
  std::sort(paths.begin(), paths.end(), [](const std::string& a, const std::string& b) {
    return fs::path(a).filename().string() < fs::path(b).filename().string();
  });
  return paths;
}

std::vector<DocWindow> document_windows(const std::vector<std::size_t>& doc_lengths, std::size_t len,
                                        std::size_t max_windows) {
  if (len == 0) throw std::invalid_argument("kvquality::document_windows: len must be >= 1 (got 0)");
  std::vector<DocWindow> out;
  std::size_t most = 0;
  for (std::size_t n : doc_lengths) most = std::max(most, n / len);
  for (std::size_t i = 0; i < most; ++i)
    for (std::size_t d = 0; d < doc_lengths.size(); ++d) {
      if (i >= doc_lengths[d] / len) continue;
      if (max_windows != 0 && out.size() == max_windows) return out;
      out.push_back({d, i * len});
    }
  return out;
}

std::vector<Recurrence> recurrence_classes(const std::vector<int>& tokens, std::size_t prompt,
                                           std::size_t far_from) {
  if (prompt + 2 > tokens.size())
    throw std::invalid_argument("kvquality::recurrence_classes: prompt + 2 must be <= the window's " +
                                std::to_string(tokens.size()) + " tokens (prompt " + std::to_string(prompt) + ")");
  std::unordered_map<int, std::size_t> last;  // token -> its latest position so far
  for (std::size_t j = 0; j <= prompt; ++j) last[tokens[j]] = j;
  std::vector<Recurrence> out;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t) {
    const auto it = last.find(tokens[t + 1]);
    if (it == last.end()) {
      out.push_back(Recurrence::none);
    } else {
      const std::size_t d = t + 1 - it->second;
      out.push_back(d < 64 ? Recurrence::near : d <= far_from ? Recurrence::mid : Recurrence::far);
    }
    last[tokens[t + 1]] = t + 1;
  }
  return out;
}

namespace {

// The oracle's view of the full cache: every decode step's attention of every block, into `future`.
class AttentionRecorder final : public llama2::EngineHooks {
 public:
  AttentionRecorder(FutureAttention& future, std::size_t prompt) : future_(future), prompt_(prompt) {}
  void decode_attention(const llama2::Engine& engine, std::size_t layer, const float* logits,
                        std::size_t n) override {
    future_.add_step(layer, engine.position() - prompt_, logits, n, engine.view(layer).head_positions(0));
  }

 private:
  FutureAttention& future_;
  std::size_t prompt_;
};

}  // namespace

Reference full_reference(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                         FutureAttention* future) {
  Reference ref;
  engine.reset();
  if (future != nullptr) {
    const llama2::Config& c = engine.config();
    future->reset(c.n_layers, c.n_kv_heads, c.n_heads / c.n_kv_heads, tokens.size() - prompt - 1, tokens.size());
    engine.set_hooks(std::make_unique<AttentionRecorder>(*future, prompt));
  }
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lp;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t) {
    log_softmax(engine.step(tokens[t]), vocab, lp);
    ref.nll -= lp[static_cast<std::size_t>(tokens[t + 1])];
    ref.token_nll.push_back(-static_cast<double>(lp[static_cast<std::size_t>(tokens[t + 1])]));
    ref.argmax.push_back(argmax(lp));
    ref.logp.push_back(lp);
  }
  ref.nll /= static_cast<double>(ref.logp.size());
  if (future != nullptr) {
    engine.set_hooks(nullptr);
    future->finish();
  }
  return ref;
}

namespace {

// One prediction of a run against the reference's prediction `i`: lq = log q, the target's NLL, KL, top-1.
void score_prediction(WindowResult& r, const float* logits, std::size_t vocab, int target, const Reference& ref,
                      std::size_t i, std::vector<float>& lq) {
  log_softmax(logits, vocab, lq);
  r.nll -= lq[static_cast<std::size_t>(target)];
  r.token_nll.push_back(-static_cast<double>(lq[static_cast<std::size_t>(target)]));
  double kl = 0.0;
  const auto& lp = ref.logp[i];
  for (std::size_t v = 0; v < vocab; ++v) kl += std::exp(static_cast<double>(lp[v])) * (lp[v] - lq[v]);
  r.kl += kl;
  r.top1 += argmax(lq) == ref.argmax[i] ? 1.0 : 0.0;
}

void finish_result(WindowResult& r, std::size_t predictions) {
  const auto n = static_cast<double>(predictions);
  r.nll /= n;
  r.kl /= n;
  r.top1 /= n;
}

// Prefill of `lead` shared with `engines`, then the teacher-forced steps of `engines` (and of `lead` too when
// `ref_out` is given: it is the full-cache reference, built step by step), each run scored against the
// reference's prediction of the same step.
void run_window_batch(llama2::Engine& lead, const std::vector<llama2::Engine*>& engines,
                      const std::vector<int>& tokens, std::size_t prompt, Reference* ref_out, const Reference* ref_in,
                      std::vector<WindowResult>& results) {
  lead.reset();
  for (llama2::Engine* e : engines) e->reset();
  llama2::Engine::prefill_batch(
      lead, engines, std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  std::vector<llama2::Engine*> stepped = engines;
  if (ref_out != nullptr) stepped.insert(stepped.begin(), &lead);
  const std::size_t vocab = lead.config().vocab_size;
  results.assign(engines.size(), WindowResult());
  std::vector<float> lq;
  std::size_t i = 0;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t, ++i) {
    llama2::Engine::step_batch(stepped, std::vector<int>(stepped.size(), tokens[t]));
    const int target = tokens[t + 1];
    if (ref_out != nullptr) {
      std::vector<float> lp;
      log_softmax(lead.logits(), vocab, lp);
      ref_out->nll -= lp[static_cast<std::size_t>(target)];
      ref_out->token_nll.push_back(-static_cast<double>(lp[static_cast<std::size_t>(target)]));
      ref_out->argmax.push_back(argmax(lp));
      ref_out->logp.push_back(std::move(lp));
    }
    const Reference& ref = ref_out != nullptr ? *ref_out : *ref_in;
    for (std::size_t e = 0; e < engines.size(); ++e)
      score_prediction(results[e], engines[e]->logits(), vocab, target, ref, i, lq);
  }
  if (ref_out != nullptr) ref_out->nll /= static_cast<double>(i);
  for (WindowResult& r : results) finish_result(r, i);
}

}  // namespace

WindowResult evaluate(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                      const Reference& ref) {
  WindowResult r;
  engine.reset();
  engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(prompt)));
  const std::size_t vocab = engine.config().vocab_size;
  std::vector<float> lq;
  std::size_t i = 0;
  for (std::size_t t = prompt; t + 1 < tokens.size(); ++t, ++i)
    score_prediction(r, engine.step(tokens[t]), vocab, tokens[t + 1], ref, i, lq);
  finish_result(r, i);
  return r;
}

Reference evaluate_with_reference(llama2::Engine& full, const std::vector<llama2::Engine*>& engines,
                                  const std::vector<int>& tokens, std::size_t prompt,
                                  std::vector<WindowResult>& results, FutureAttention* future) {
  Reference ref;
  for (std::size_t l = 0; l < full.config().n_layers; ++l)
    if (full.cache(l) != nullptr)
      throw std::invalid_argument("kvquality::evaluate_with_reference: the reference engine evicts (block " +
                                  std::to_string(l) + " has a cache); it must be a full cache");
  if (future != nullptr) {
    const llama2::Config& c = full.config();
    future->reset(c.n_layers, c.n_kv_heads, c.n_heads / c.n_kv_heads, tokens.size() - prompt - 1, tokens.size());
    full.set_hooks(std::make_unique<AttentionRecorder>(*future, prompt));
  }
  try {
    run_window_batch(full, engines, tokens, prompt, &ref, nullptr, results);
  } catch (...) {
    if (future != nullptr) full.set_hooks(nullptr);
    throw;
  }
  if (future != nullptr) {
    full.set_hooks(nullptr);
    future->finish();
  }
  return ref;
}

void evaluate_batch(llama2::Engine& lead, const std::vector<llama2::Engine*>& engines,
                    const std::vector<int>& tokens, std::size_t prompt, const Reference& ref,
                    std::vector<WindowResult>& results) {
  run_window_batch(lead, engines, tokens, prompt, nullptr, &ref, results);
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
