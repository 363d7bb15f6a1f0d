// kvevict benchmark suite — the grid of shapes and the registration functions.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

namespace kvbench {

struct Grid {
  std::vector<std::size_t> sizes;        // retained tokens n (= budget k)
  std::vector<std::size_t> head_dims;    // d
  std::vector<std::size_t> groups;       // GQA group g
  std::set<std::string> types;           // "float", "half"
  std::set<std::size_t> naive_sizes;     // n for which NaiveDecodeStep runs
  std::vector<std::size_t> prompt_lens;  // P of the prefill benchmarks
  std::vector<std::size_t> parallel_sizes{4096, 32768};  // n of ParallelDecodeStep
  std::vector<std::size_t> prefill_groups;
  std::set<std::string> prefill_types;
  double min_time = 0.2;        // seconds, for plain benchmarks
  double evict_min_time = 0.05; // seconds of prefill scoring time (attention prefill runs beside it)
  double wall_per_benchmark = 1.5;  // seconds per decode benchmark that runs attention every iteration
};

void register_decode_benchmarks(const Grid& grid);
void register_prefill_benchmarks(const Grid& grid);
void register_bandwidth_benchmarks(const Grid& grid);
/// Long-prompt prefill: one-shot vs chunked vs Q·K-tiled, P in {2048, 8192, 32768}.
void register_long_prompt_benchmarks();
/// Parallel decode steps: ParallelDecodeStep/<policy>/float/n:<n>/d:128/g:<g>/workers:<W>,
/// Keyformer, H2O and TOVA, W = 1, 2, 4, ... and the hardware threads; counters ns_per_elem, speedup_vs_1.
void register_parallel_benchmarks(const Grid& grid);
/// Paged decode steps (PagedCache, page size 16, token and page unit), float, g = 1, n <= 32768.
void register_paged_benchmarks(const Grid& grid);

/// Checks that NaiveKeyformer keeps exactly the tokens kvevict's Keyformer keeps
/// (same logits and injected noise by position, many steps, g = 1 and 4).
/// Returns the number of mismatching steps (0 = pass) and prints a line.
int verify_naive_matches_kvevict();

}  // namespace kvbench
