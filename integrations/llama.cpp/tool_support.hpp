// kvevict-llama's shared pieces: CPU time, llama.cpp's log, reading and tokenizing the text, the kept-set lines
// (kvevict-replay's JSON Lines) and the invariants checked after every batch; used by the single-sequence loop
// (kvevict_llama_main.cpp) and the many-sequence one (parallel_run.cpp).
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kvevict_llama.hpp"

namespace kvevict_llama_tool {

/// --verbose: llama.cpp's log goes to stderr.
extern bool g_verbose;

/// CPU seconds this process has used (all threads): on a shared machine, less disturbed by other jobs than wall time.
double cpu_seconds();
/// llama_log_set's callback: llama.cpp's log on stderr with --verbose, else dropped.
void log_callback(ggml_log_level level, const char* text, void* user);
/// The bytes of `path`; `kvcli::UsageError` naming `flag` if it is missing, not a regular file or unreadable.
std::string read_file(const std::string& path, const std::string& flag);
/// llama.cpp's tokens of `text`, with BOS. Throws `std::runtime_error` if llama_tokenize fails.
std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text);
/// One kept-set line (kvevict-replay's JSON Lines: t, τ, kept positions ascending, their scores), with
/// `"seq":seq` first when `seq >= 0` (--parallel).
void write_kept_line(std::ostream& out, std::size_t t, const kvevict::CacheInterface& cache, int seq = -1);
/// The invariants of issue 33, after a batch of `batch` tokens from position `first` (step `t`) of `ev`'s sequence:
/// at most k cells + the batch in llama.cpp's mask, kept positions only from `before` plus the batch, evicted
/// positions never back, llama.cpp's memory holding exactly the kept range's ends. Throws `std::runtime_error`.
void check_step(const kvevict_llama::Evictor& ev, llama_memory_t mem, std::size_t k, std::size_t batch,
                const std::vector<std::int64_t>& before, std::size_t first, std::size_t t);

}  // namespace kvevict_llama_tool
