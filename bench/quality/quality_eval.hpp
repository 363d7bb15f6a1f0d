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
  std::vector<double> token_nll;  ///< [prediction] -log q(target), nats
};

/// Full-cache reference for one window: log-probabilities of each prediction.
struct Reference {
  std::vector<std::vector<float>> logp;  ///< [prediction][vocab]
  std::vector<int> argmax;               ///< [prediction]
  double nll = 0.0;                      ///< mean NLL of the targets (nats/token)
  std::vector<double> token_nll;         ///< [prediction] -log p(target), nats
};

/// Mean and standard error of the mean.
struct Stat {
  double mean = 0.0, se = 0.0;
};

/// The whole file at `path` (`kvtools::read_regular_file`: a regular file of at most 1 GiB); throws
/// `std::runtime_error` naming it otherwise ("'/dev/zero' is not a regular file (it is a character
/// device)", "'x': cannot read (No such file or directory)").
std::string read_file(const std::string& path);

/// Paragraphs separated by blank lines, each encoded with BOS, concatenated (the tokenization of
/// ../shared/reference/README.md).
std::vector<int> tokenize_corpus(const llama2::Tokenizer& tok, const std::string& text);

/// Window `w` of `len` tokens: ids[w·len, (w+1)·len).
std::vector<int> window_tokens(const std::vector<int>& ids, std::size_t w, std::size_t len);

/// The documents of a folder: its regular files named `*.rst` or `*.txt` (README, licence and checksum
/// files are not documents), sorted by file name so that every run sees the same order. Throws
/// `std::runtime_error` naming `dir` if it cannot be listed or holds no such file.
std::vector<std::string> list_documents(const std::string& dir);

/// One window of the document mode: `len` tokens of document `doc` from token `offset`.
struct DocWindow {
  std::size_t doc = 0, offset = 0;
  bool operator==(const DocWindow& o) const { return doc == o.doc && offset == o.offset; }
};

/// The windows of `len` tokens over documents of `doc_lengths[d]` tokens: document `d` is cut into its
/// `floor(doc_lengths[d] / len)` consecutive windows at offsets `0, len, 2 len, ...` (none crosses the
/// end of its document, so none crosses into the next one; a document shorter than `len` gives none),
/// and the windows are taken round-robin over the documents in order — every document's window 0, then
/// every document's window 1, ... — so that the first `max_windows` (0: all) spread over as many
/// documents as possible. Deterministic; O(number of windows). Throws `std::invalid_argument` if
/// `len == 0`.
std::vector<DocWindow> document_windows(const std::vector<std::size_t>& doc_lengths, std::size_t len,
                                        std::size_t max_windows);

/// Distance classes of the report's "where the loss comes from" table.
enum class Recurrence : int { none = 0, near = 1, mid = 2, far = 3 };
/// Number of `Recurrence` classes.
inline constexpr std::size_t kRecurrenceClasses = 4;

/// For each prediction of a window (token `t + 1` predicted from tokens `0..t`, `t = prompt .. size-2`):
/// the distance `d = t + 1 - j` to the target's previous occurrence `j <= t` in the window (the nearest
/// one), classed as `none` (no previous occurrence), `near` (`d < 64`), `mid` (`64 <= d <= far_from`),
/// `far` (`d > far_from`; the report uses `far_from = prompt / 2`). Size `tokens.size() - prompt - 1`.
/// O(window) with a hash map. Throws `std::invalid_argument` unless `prompt + 2 <= tokens.size()`.
std::vector<Recurrence> recurrence_classes(const std::vector<int>& tokens, std::size_t prompt,
                                           std::size_t far_from);

/// Runs the window with `engine` (a full cache): prefill `prompt` tokens, then teacher-forced steps.
/// With `future` (optional) also records the decode steps' attention of every block into it (through
/// the engine's hooks, `Engine::set_hooks`, which it clears after) and finishes it, for the oracle rows.
Reference full_reference(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                         FutureAttention* future = nullptr);

/// NLL, KL(full || policy) and top-1 agreement of `engine` on the window, against `ref`.
WindowResult evaluate(llama2::Engine& engine, const std::vector<int>& tokens, std::size_t prompt,
                      const Reference& ref);

/// `full_reference(full, tokens, prompt, future)` and then `evaluate(*engines[i], tokens, prompt, ref)` for
/// every `i` (into `results[i]`), the same numbers bit for bit, in one pass: the prompt runs once
/// (`llama2::Engine::prefill_batch`, `full` leading) and every teacher-forced token is one
/// `llama2::Engine::step_batch` of `full` and all `engines`, so the model's weights are read once per token
/// for all runs instead of once per run. `full` must be a full-cache engine with a one-shot prefill;
/// every engine must prefill in one shot (what `prefill_batch` requires) and hold the window
/// (`context() >= tokens.size() - 1`). Throws `std::invalid_argument` if `full` has a cache in any block,
/// and what `prefill_batch` and `step_batch` throw.
Reference evaluate_with_reference(llama2::Engine& full, const std::vector<llama2::Engine*>& engines,
                                  const std::vector<int>& tokens, std::size_t prompt,
                                  std::vector<WindowResult>& results, FutureAttention* future = nullptr);
/// `evaluate(*engines[i], tokens, prompt, ref)` for every `i`, in one pass as above, against a reference
/// computed before (the oracle rows, which read the full cache's future attention); `lead` (any
/// one-shot engine, e.g. the full cache) runs the shared prompt and is not stepped.
void evaluate_batch(llama2::Engine& lead, const std::vector<llama2::Engine*>& engines,
                    const std::vector<int>& tokens, std::size_t prompt, const Reference& ref,
                    std::vector<WindowResult>& results);

/// Mean and standard error over `x` (se = 0 for fewer than 2 values).
Stat mean_se(const std::vector<double>& x);

/// `v` with `prec` decimals; `fmt_signed` with an explicit sign.
std::string fmt(double v, int prec);
std::string fmt_signed(double v, int prec);

}  // namespace kvquality
