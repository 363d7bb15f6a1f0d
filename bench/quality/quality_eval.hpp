// kvevict — bench/quality/quality_eval.hpp: the measurement of kvevict-quality (corpus, full-cache
// reference, one policy's NLL / KL / top-1 on a window, statistics).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/tokenizer.hpp"
#include "oracle.hpp"

namespace kvquality {

/// Per-window result of one run (means over the window's predictions).
struct WindowResult {
  double nll = 0.0, kl = 0.0, top1 = 0.0;
};

/// Full-cache reference for one window: log-probabilities of each prediction.
struct Reference {
  std::vector<std::vector<float>> logp;  ///< [prediction][vocab]
  std::vector<int> argmax;               ///< [prediction]
  double nll = 0.0;                      ///< mean NLL of the targets (nats/token)
};

/// Mean and standard error of the mean.
struct Stat {
  double mean = 0.0, se = 0.0;
};

/// The whole file at `path`; throws `std::runtime_error` naming it.
std::string read_file(const std::string& path);

/// Paragraphs separated by blank lines, each encoded with BOS, concatenated (the tokenization of
/// ../shared/reference/README.md).
std::vector<int> tokenize_corpus(const llama2::Tokenizer& tok, const std::string& text);

/// Window `w` of `len` tokens: ids[w·len, (w+1)·len).
std::vector<int> window_tokens(const std::vector<int>& ids, std::size_t w, std::size_t len);

/// Runs the window with `engine` (a full cache): prefill `prompt` tokens, then teacher-forced steps.
/// With `future` (optional) also records the decode steps' attention of every block into it (via
/// `Engine::set_decode_attention_hook`) and finishes it, for the oracle rows.
Reference full_reference(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                         FutureAttention* future = nullptr);

/// NLL, KL(full || policy) and top-1 agreement of `engine` on the window, against `ref`.
WindowResult evaluate(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                      const Reference& ref);

/// Mean and standard error over `x` (se = 0 for fewer than 2 values).
Stat mean_se(const std::vector<double>& x);

/// `v` with `prec` decimals; `fmt_signed` with an explicit sign.
std::string fmt(double v, int prec);
std::string fmt_signed(double v, int prec);

}  // namespace kvquality
