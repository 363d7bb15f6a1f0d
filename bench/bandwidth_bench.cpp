// Memory-bandwidth probe: a streaming read and a streaming copy of exactly the
// bytes one attention step reads (K and V of 8 KV heads at n tokens), so that
// the decode-step times can be set against what the memory system can deliver.
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include <benchmark/benchmark.h>

#include <Eigen/Core>

#include "bench_common.hpp"
#include "decode_bench.hpp"

namespace kvbench {
namespace {

void bm_read(benchmark::State& state, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);
  std::unique_ptr<float[]> buf(new float[count]);
  fill_normal(buf.get(), count, 7);
  Eigen::Map<const Eigen::ArrayXf> a(buf.get(), static_cast<Eigen::Index>(count));
  for (auto _ : state) {
    float s = a.sum();
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["bytes"] = static_cast<double>(bytes);
}

void bm_copy(benchmark::State& state, std::size_t bytes) {
  std::unique_ptr<char[]> src(new char[bytes]), dst(new char[bytes]);
  std::memset(src.get(), 1, bytes);
  std::memset(dst.get(), 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::ClobberMemory();
  }
  // Bytes copied (each is read once and written once).
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["bytes"] = static_cast<double>(bytes);
}

}  // namespace

void register_bandwidth_benchmarks(const Grid& grid) {
  std::set<std::size_t> sizes;
  for (std::size_t n : grid.sizes)
    for (std::size_t d : grid.head_dims) {
      if (grid.types.count("float")) sizes.insert(static_cast<std::size_t>(kv_bytes<float>(Shape{n, d, 1})));
      if (grid.types.count("half")) sizes.insert(static_cast<std::size_t>(kv_bytes<Eigen::half>(Shape{n, d, 1})));
    }
  for (std::size_t b : sizes) {
    benchmark::RegisterBenchmark(("MemRead/bytes:" + std::to_string(b)).c_str(), bm_read, b)
        ->UseRealTime()
        ->MinTime(grid.min_time)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("MemCopy/bytes:" + std::to_string(b)).c_str(), bm_copy, b)
        ->UseRealTime()
        ->MinTime(grid.min_time)
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace kvbench
