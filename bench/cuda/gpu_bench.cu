// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// bench/cuda/gpu_bench.cu — the time of one decode-step eviction launch (kvevict::cuda::
// decode_step, contiguous fp16 KV) per layer, measured with CUDA events over CUDA-graph
// replays, on the issue's shapes: batch 1 and 32, 8 and 32 query heads, 8 KV heads,
// head_dim 128, n = 4K / 32K / 128K live slots, every step evicting (steady state at n).
// Each replay is [engine append (one tiny kernel), eviction step]; the append alone is
// timed the same way and subtracted. Prints one `RESULT ...` line per shape (read by
// scripts/gpu-check.sh) and fails loudly on any CUDA error or a non-zero status word.
//
// Usage: gpu_bench [--quick] [--policy keyformer|h2o]
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kvevict/cuda/kernels.cuh"

namespace {

namespace kc = kvevict::cuda;
using T = __half;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_bench: CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

__device__ std::uint32_t mix(std::uint64_t z) {
  z = kvevict::detail::splitmix64(z);
  return static_cast<std::uint32_t>(z >> 40);
}
/// Logits in [-4, 4) from a hash of the index.
__global__ void fill_logits(float* x, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<float>(mix(seed ^ i)) * (8.0f / 16777216.0f) - 4.0f;
}
/// A state as after a prefill: n − 1 live slots per (b, head), positions = slots, small
/// scores, the last w slots recent, step 0.
__global__ void init_state(kc::ContiguousKV<T> kv, kc::EvictionState st, std::uint32_t n, std::uint32_t w) {
  const std::uint32_t b = blockIdx.y, h = blockIdx.x, row = b * kv.n_kv_heads + h, live = n - 1;
  for (std::uint32_t s = threadIdx.x; s < kv.capacity; s += blockDim.x) {
    kv.positions[kv.slot(b, h, s)] = s;
    st.scores[kv.slot(b, h, s)] = static_cast<float>(mix((static_cast<std::uint64_t>(row) << 32) + s)) * 1e-9f;
    st.recent[kv.slot(b, h, s)] = (s + w >= live && s < live) ? 1 : 0;
  }
  for (std::uint32_t i = threadIdx.x; i < w; i += blockDim.x)
    st.ring[row * st.ring_stride + i] = static_cast<std::int32_t>(live - w + i);
  if (threadIdx.x == 0) {
    kv.lengths[row] = static_cast<std::int32_t>(live);
    kc::RowCounters c;
    c.entered = w;
    c.step = 0;
    c.last_position = live - 1;
    c.tracked = static_cast<std::int32_t>(live);
    c.prefilled = 1;
    st.rows_state[row] = c;
  }
}
/// The engine's append of one token per (b, head): a new position after the last one.
__global__ void append_token(kc::ContiguousKV<T> kv, kc::EvictionState st) {
  const std::uint32_t row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= kv.batch * kv.n_kv_heads) return;
  const std::uint32_t b = row / kv.n_kv_heads, h = row % kv.n_kv_heads;
  const std::int32_t s = kv.lengths[row];
  // The append-only graph (timed alone) runs without the step, so lengths keep growing: never
  // write past the capacity.
  if (static_cast<std::uint32_t>(s) < kv.capacity)
    kv.positions[kv.slot(b, h, static_cast<std::uint32_t>(s))] = st.rows_state[row].last_position + 1;
  kv.lengths[row] = s + 1;
}

struct Shape {
  std::uint32_t batch, n_q, n;
};

float time_graph(cudaGraphExec_t g, cudaStream_t s, int reps) {
  cudaEvent_t a, z;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&z), "event");
  for (int i = 0; i < 3; ++i) check(cudaGraphLaunch(g, s), "graph warm-up");
  check(cudaEventRecord(a, s), "record");
  for (int i = 0; i < reps; ++i) check(cudaGraphLaunch(g, s), "graph launch");
  check(cudaEventRecord(z, s), "record");
  check(cudaEventSynchronize(z), "sync");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, z), "elapsed");
  cudaEventDestroy(a);
  cudaEventDestroy(z);
  return ms * 1000.0f / static_cast<float>(reps);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string policy = "keyformer";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--policy") == 0 && i + 1 < argc) {
      policy = argv[++i];
    } else {
      std::fprintf(stderr, "gpu_bench: unknown argument %s (usage: gpu_bench [--quick] [--policy keyformer|h2o])\n",
                   argv[i]);
      return 2;
    }
  }
  if (policy != "keyformer" && policy != "h2o") {
    std::fprintf(stderr, "gpu_bench: --policy must be keyformer or h2o (got %s)\n", policy.c_str());
    return 2;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("gpu_bench: %s, policy %s\n", prop.name, policy.c_str());
  std::vector<Shape> shapes;
  for (std::uint32_t batch : {1u, 32u})
    for (std::uint32_t nq : {8u, 32u})
      for (std::uint32_t n : {4096u, 32768u, 131072u})
        if (!quick || n == 4096u) shapes.push_back({batch, nq, n});
  const std::uint32_t nkv = 8, d = 128, w = 32;
  const int reps = quick ? 5 : 30;
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "stream");
  for (const Shape& sh : shapes) {
    const std::uint32_t cap = sh.n + 1;
    kc::ContiguousKV<T> kv;
    kv.batch = sh.batch;
    kv.n_kv_heads = nkv;
    kv.capacity = cap;
    kv.head_dim = d;
    const std::size_t slots = static_cast<std::size_t>(sh.batch) * nkv * cap;
    check(cudaMalloc(&kv.k, slots * d * sizeof(T)), "cudaMalloc K");
    check(cudaMalloc(&kv.v, slots * d * sizeof(T)), "cudaMalloc V");
    check(cudaMalloc(&kv.positions, slots * sizeof(std::int64_t)), "cudaMalloc positions");
    check(cudaMalloc(&kv.lengths, sh.batch * nkv * sizeof(std::int32_t)), "cudaMalloc lengths");
    kc::EvictionState st;
    std::uint64_t* seeds = nullptr;
    check(cudaMalloc(&st.scores, slots * sizeof(float)), "cudaMalloc scores");
    check(cudaMalloc(&st.recent, slots), "cudaMalloc recent");
    check(cudaMalloc(&st.ring, sh.batch * nkv * w * sizeof(std::int32_t)), "cudaMalloc ring");
    check(cudaMalloc(&st.rows_state, sh.batch * nkv * sizeof(kc::RowCounters)), "cudaMalloc rows");
    check(cudaMalloc(&seeds, sh.batch * sizeof(std::uint64_t)), "cudaMalloc seeds");
    check(cudaMemset(seeds, 0, sh.batch * sizeof(std::uint64_t)), "memset seeds");
    check(cudaMalloc(&st.status, sh.batch * sizeof(std::int32_t)), "cudaMalloc status");
    st.seeds = seeds;
    st.ring_stride = w;
    float* logits = nullptr;
    const std::size_t nlogits = static_cast<std::size_t>(sh.batch) * sh.n_q * sh.n;
    check(cudaMalloc(&logits, nlogits * sizeof(float)), "cudaMalloc logits");
    float* ws = nullptr;
    check(cudaMalloc(&ws, kc::step_workspace_floats(sh.batch, sh.n_q, sh.n) * sizeof(float)), "cudaMalloc ws");
    fill_logits<<<1024, 256, 0, stream>>>(logits, nlogits, 42);
    init_state<<<dim3(nkv, sh.batch), 256, 0, stream>>>(kv, st, sh.n, w);
    check(cudaGetLastError(), "setup kernels");
    check(cudaStreamSynchronize(stream), "setup");

    kc::PolicyParams p;
    p.score = policy == "keyformer" ? kc::ScoreKind::keyformer : kc::ScoreKind::h2o;
    p.gumbel_noise = true;
    p.temperature.kind = kc::TemperatureKind::linear;
    p.temperature.tau_init = 1.0f;
    p.temperature.tau_end = 2.0f;
    p.temperature.horizon = 1000;
    p.k = sh.n - 1;
    p.w = w;
    p.n_q_heads = sh.n_q;
    kc::LogitsView lg;
    lg.x = logits;
    lg.stride = sh.n;

    cudaGraph_t g_step, g_append;
    cudaGraphExec_t e_step, e_append;
    const unsigned append_blocks = (sh.batch * nkv + 255) / 256;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    append_token<<<append_blocks, 256, 0, stream>>>(kv, st);
    kc::decode_step(kv, st, p, lg, ws, sh.n, stream);
    check(cudaStreamEndCapture(stream, &g_step), "end capture");
    check(cudaGraphInstantiate(&e_step, g_step, 0), "instantiate");
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
    append_token<<<append_blocks, 256, 0, stream>>>(kv, st);
    check(cudaStreamEndCapture(stream, &g_append), "end capture");
    check(cudaGraphInstantiate(&e_append, g_append, 0), "instantiate");

    const float both = time_graph(e_step, stream, reps);
    // The append-only graph leaves one more token per head; restore the steady state after.
    std::vector<std::int32_t> status(sh.batch);
    check(cudaMemcpy(status.data(), st.status, sh.batch * sizeof(std::int32_t), cudaMemcpyDeviceToHost), "status");
    for (std::uint32_t b = 0; b < sh.batch; ++b)
      if (status[b] != 0) {
        std::fprintf(stderr, "gpu_bench: sequence %u reported status %d during the timed steps\n", b, status[b]);
        return 1;
      }
    const float append = time_graph(e_append, stream, reps);
    std::printf("RESULT policy=%s batch=%u q_heads=%u kv_heads=%u head_dim=%u n=%u evict_us=%.2f append_us=%.2f\n",
                policy.c_str(), sh.batch, sh.n_q, nkv, d, sh.n, both - append, append);
    std::fflush(stdout);
    cudaGraphExecDestroy(e_step);
    cudaGraphExecDestroy(e_append);
    cudaGraphDestroy(g_step);
    cudaGraphDestroy(g_append);
    cudaFree(kv.k);
    cudaFree(kv.v);
    cudaFree(kv.positions);
    cudaFree(kv.lengths);
    cudaFree(st.scores);
    cudaFree(st.recent);
    cudaFree(st.ring);
    cudaFree(st.rows_state);
    cudaFree(seeds);
    cudaFree(st.status);
    cudaFree(logits);
    cudaFree(ws);
  }
  check(cudaStreamDestroy(stream), "stream");
  return 0;
}
