// kvevict-llama --parallel N: several sequences of one llama_context decoded together, each in its own budget.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "kvevict_llama.hpp"

namespace kvevict_llama_tool {

/// What `run_parallel` needs, every flag already checked by kvevict-llama's main (exit 2 there).
struct ParallelRun {
  const llama_model* model = nullptr;
  const llama_vocab* vocab = nullptr;
  std::vector<llama_token> tokens;  // the text after --skip-tokens
  std::size_t n_seq = 2;            // --parallel
  std::size_t stride = 0;           // --seq-stride: sequence i's window starts at token i · stride
  std::size_t P = 0, T = 0;         // prompt tokens and decode steps of each sequence
  bool teacher = false;             // --teacher-force T (else greedy generation of T tokens)
  bool ignore_eos = false;
  std::size_t n_ctx = 0;            // cells of the context (checked: room for every sequence)
  std::size_t C = 64;               // prompt tokens per llama_decode
  int threads = 1;
  bool flash = false;
  bool swa_full = false;             // --swa-full: a full-size cache for the sliding-window layers
  bool unified = true;              // --kv-unified: one pool of cells (off: a stream of n_ctx / N cells per sequence)
  bool bounded = false;             // --bounded-prefill: each prompt cut to k after every chunk of C tokens
  bool no_kvevict = false, full = false;
  kvevict::Policy policy = kvevict::Policy::h2o;
  std::string policy_name;
  kvevict::CacheConfig config;
  kvevict::PolicyParams params;
  std::size_t k = 0;
  kvevict_llama::ScoreRows rows = kvevict_llama::ScoreRows::per_head;
  std::ostream* kept = nullptr;  // --kept-out: kept-set lines with "seq"
};

/// The cells a run needs at least. llama.cpp alone or a full cache: every sequence's P + T positions. Evicting,
/// one pool: k + 1 cells for each sequence already cut, and the one being prefilled holds its whole prompt P (with
/// `bounded`: at most k + C), plus the batch. A stream per sequence (`unified` false): N streams of max(P, k + 1) + 1
/// cells (`bounded`: k + C + 1).
std::size_t parallel_min_cells(bool evicting, bool unified, bool bounded, std::size_t n_seq, std::size_t P,
                               std::size_t T, std::size_t k, std::size_t C);

/// Runs the sequences: prompts one after another (each cut to its budget and the context compacted after it),
/// then T decode steps of one token per live sequence in one llama_batch; a generated end-of-generation token ends
/// its sequence and frees its cells (unless --ignore-eos). stdout: one line per sequence ("ids[i]: ..." or a JSON
/// line with "seq" and its mean NLL); stderr: the summary line (total tokens per second, per CPU second, KV
/// cells and bytes, compactions). Returns the exit code; throws `kvcli::UsageError` (exit 2) for a model whose
/// memory cannot drop positions, `std::runtime_error` (exit 1) for a failed step.
int run_parallel(const ParallelRun& run);

}  // namespace kvevict_llama_tool
