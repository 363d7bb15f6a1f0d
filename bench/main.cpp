// kvevict_bench: the Google Benchmark suite (see bench/README.md).
//
//   kvevict_bench [--full] [--verify] [--paged] [--parallel] [--steps] [--long-prompt] [Google Benchmark flags...]
//   kvevict_bench --help   (the suite's flags, then Google Benchmark's)
//
// Default: the quick grid (n in {1024, 4096, 32768}, d = 128, g in {1, 4},
// float and half; prefill P in {512, 2048}, float). --full: the whole grid
// (n in {256, ..., 131072} plus 32768, d in {64, 128}, prefill P up to 8192).
// --verify: only checks that the naive comparator keeps what kvevict keeps.
// --paged: only the paged decode steps (n in {1024, 4096, 32768}, d = 128, g = 1, float).
// --parallel: only the parallel decode steps (ParallelDecodeStep, n in {4096, 32768}, g = 1 and 4,
// W = 1, 2, 4, ... up to the hardware threads); they also run in the default and --full grids.
// --steps: only the decode-step family (attention + the five policies) at n in {4096, 32768, 131072},
// d = 128, g = 1, float: what bench/run.sh runs with kvevict_bench and kvevict_bench_o2 to compare
// optimisation levels.
// --long-prompt: only the long-prompt prefill benchmarks (bench/long_prompt.sh runs
// each in its own process, for its peak resident memory).
#include <cstdio>
#include <cstring>
#include <vector>

#include <benchmark/benchmark.h>

#include "decode_bench.hpp"

// Which build this binary is (recorded in the JSON context for bench/report.py).
#ifndef KVEVICT_BENCH_OPT_LEVEL
#define KVEVICT_BENCH_OPT_LEVEL "build type"
#endif
#ifndef KVEVICT_BENCH_MARCH
#define KVEVICT_BENCH_MARCH "portable"
#endif

namespace {

// The suite's own flags, printed above Google Benchmark's under --help.
constexpr const char* kSuiteHelp =
    "kvevict_bench: kvevict's benchmark suite (bench/README.md; bench/run.sh runs it and draws the plots)\n"
    "\n"
    "Suite flags (at most one of the selections; default: the quick grid):\n"
    "  --full          the whole grid: n in {256, ..., 131072}, d in {64, 128}, prefill P up to 8192\n"
    "  --steps         only the decode-step family (attention + the five policies) at n in {4096, 32768, 131072},\n"
    "                  d = 128, g = 1, float (bench/run.sh --opt-levels runs it at -O3 and -O2)\n"
    "  --paged         only the paged decode steps (n in {1024, 4096, 32768}, d = 128, g = 1, float)\n"
    "  --parallel      only the parallel decode steps (ParallelDecodeStep, W = 1, 2, 4, ... hardware threads)\n"
    "  --long-prompt   only the long-prompt prefill benchmarks (bench/long_prompt.sh runs each in its own process)\n"
    "  --verify        only check that the naive comparator keeps what kvevict keeps (exit 1 if not)\n"
    "\n"
    "Every other flag goes to Google Benchmark (e.g. --benchmark_filter=Keyformer):\n";

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kSuiteHelp, stdout);
      std::fflush(stdout);
    }
  bool full = false, verify = false, paged = false, parallel = false, long_prompt = false, steps = false;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0)
      full = true;
    else if (std::strcmp(argv[i], "--verify") == 0)
      verify = true;
    else if (std::strcmp(argv[i], "--long-prompt") == 0)
      long_prompt = true;
    else if (std::strcmp(argv[i], "--paged") == 0)
      paged = true;
    else if (std::strcmp(argv[i], "--parallel") == 0)
      parallel = true;
    else if (std::strcmp(argv[i], "--steps") == 0)
      steps = true;
    else
      rest.push_back(argv[i]);
  }
  if (verify) return kvbench::verify_naive_matches_kvevict() == 0 ? 0 : 1;

  kvbench::Grid grid;
  if (full) {
    grid.sizes = {256, 1024, 4096, 16384, 32768, 65536, 131072};
    grid.head_dims = {64, 128};
    grid.groups = {1, 4};
    grid.types = {"float", "half"};
    grid.naive_sizes = {1024, 4096, 32768, 131072};
    grid.prompt_lens = {512, 2048, 8192};
    grid.prefill_groups = {1, 4};
    grid.prefill_types = {"float", "half"};
  } else {
    grid.sizes = {1024, 4096, 32768};
    grid.head_dims = {128};
    grid.groups = {1, 4};
    grid.types = {"float", "half"};
    grid.naive_sizes = {4096, 32768};
    grid.prompt_lens = {512, 2048};
    grid.prefill_groups = {1, 4};
    grid.prefill_types = {"float"};
    grid.min_time = 0.1;
    grid.evict_min_time = 0.03;
    grid.wall_per_benchmark = 1.0;
  }
  // Prefill first: its P = 8192 logits (up to 8.6 GB) are allocated before any
  // decode layer is kept alive.
  if (long_prompt) {
    kvbench::register_long_prompt_benchmarks();
  } else if (steps) {
    grid.sizes = {4096, 32768, 131072};
    grid.head_dims = {128};
    grid.groups = {1};
    grid.types = {"float"};
    grid.naive_sizes = {};
    kvbench::register_decode_benchmarks(grid);
  } else if (paged) {
    grid.sizes = {1024, 4096, 32768};
    grid.head_dims = {128};
    grid.types = {"float"};
    kvbench::register_paged_benchmarks(grid);
  } else if (parallel) {
    kvbench::register_parallel_benchmarks(grid);
  } else {
    kvbench::register_bandwidth_benchmarks(grid);
    kvbench::register_prefill_benchmarks(grid);
    kvbench::register_decode_benchmarks(grid);
    kvbench::register_parallel_benchmarks(grid);
  }

  int rc = static_cast<int>(rest.size());
  benchmark::Initialize(&rc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rc, rest.data())) return 1;
  benchmark::AddCustomContext("kvevict_grid", long_prompt ? "long-prompt"
                                              : paged     ? "paged"
                                              : parallel  ? "parallel"
                                              : steps     ? "steps"
                                              : full      ? "full"
                                                          : "quick");
  benchmark::AddCustomContext("kvevict_opt", KVEVICT_BENCH_OPT_LEVEL);
  benchmark::AddCustomContext("kvevict_march", KVEVICT_BENCH_MARCH);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
