// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/gpu_backend.cu — see gpu_backend.hpp.
#include "gpu_backend.hpp"

#include <cuda_runtime.h>

#include <sstream>
#include <stdexcept>
#include <vector>

#include "kvevict/cuda/kernels.cuh"

namespace kvtest_cuda {
namespace {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

/// A device copy of one host vector (allocated once per size, reused).
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  ~DeviceBuffer() { cudaFree(ptr); }
  template <class V>
  void up(const std::vector<V>& v, cudaStream_t s) {
    reserve(v.size() * sizeof(V));
    if (!v.empty())
      cuda_check(cudaMemcpyAsync(ptr, v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice, s), "upload");
  }
  template <class V>
  void down(std::vector<V>& v, cudaStream_t s) const {
    if (!v.empty())
      cuda_check(cudaMemcpyAsync(v.data(), ptr, v.size() * sizeof(V), cudaMemcpyDeviceToHost, s), "download");
  }
  void reserve(std::size_t b) {
    if (b <= bytes && ptr != nullptr) return;
    cudaFree(ptr);
    ptr = nullptr;
    cuda_check(cudaMalloc(&ptr, b > 0 ? b : 16), "cudaMalloc");
    bytes = b;
  }
  template <class V>
  V* as() const {
    return static_cast<V*>(ptr);
  }
};

class GpuBackend final : public Backend {
 public:
  GpuBackend() { cuda_check(cudaStreamCreate(&stream_), "cudaStreamCreate"); }
  ~GpuBackend() override { cudaStreamDestroy(stream_); }

  void prefill(BatchHost& h, const kvevict::cuda::PolicyParams& p, const HostLogits& lg) override {
    upload(h, lg);
    kvevict::cuda::core::PrefillWork pw;
    pw.step_ws = step_ws_.as<float>();
    pw.acc = acc_.as<float>();
    pw.keep = keep_.as<std::int32_t>();
    pw.stage = stage_.as<unsigned char>();
    pw.max_prompt = h.max_prompt;
    if (h.paged)
      kvevict::cuda::prefill(paged(h), state(h), p, logits(lg), pw, free_list(h), h.max_pages * h.page_size, stream_);
    else
      kvevict::cuda::prefill(contiguous(h), state(h), p, logits(lg), pw, stream_);
    download(h);
  }
  void step(BatchHost& h, const kvevict::cuda::PolicyParams& p, const HostLogits& lg) override {
    upload(h, lg);
    if (h.paged)
      kvevict::cuda::decode_step(paged(h), state(h), p, logits(lg), free_list(h), step_ws_.as<float>(), h.ws_slots(),
                                 h.max_pages * h.page_size, stream_);
    else
      kvevict::cuda::decode_step(contiguous(h), state(h), p, logits(lg), step_ws_.as<float>(), h.ws_slots(), stream_);
    download(h);
  }
  const char* name() const override { return "CUDA device 0"; }

 private:
  void upload(const BatchHost& h, const HostLogits& lg) {
    k_.up(h.k, stream_);
    v_.up(h.v, stream_);
    pos_.up(h.positions, stream_);
    len_.up(h.lengths, stream_);
    indptr_.up(h.table_indptr, stream_);
    indices_.up(h.indices, stream_);
    scores_.up(h.scores, stream_);
    recent_.up(h.recent, stream_);
    ring_.up(h.ring, stream_);
    rows_.up(h.rows, stream_);
    seeds_.up(h.seeds, stream_);
    status_.up(h.status, stream_);
    freed_.up(h.pages_freed, stream_);
    free_pages_.up(h.free_pages, stream_);
    free_count_.up(std::vector<std::uint32_t>{h.free_count}, stream_);
    step_ws_.up(h.step_ws, stream_);
    acc_.up(h.acc, stream_);
    keep_.up(h.keep, stream_);
    stage_.up(h.stage, stream_);
    x_.up(lg.x, stream_);
    gumbel_.up(lg.gumbel, stream_);
    lg_indptr_.up(lg.indptr, stream_);
  }
  void download(BatchHost& h) {
    k_.down(h.k, stream_);
    v_.down(h.v, stream_);
    pos_.down(h.positions, stream_);
    len_.down(h.lengths, stream_);
    indices_.down(h.indices, stream_);
    scores_.down(h.scores, stream_);
    recent_.down(h.recent, stream_);
    ring_.down(h.ring, stream_);
    rows_.down(h.rows, stream_);
    status_.down(h.status, stream_);
    freed_.down(h.pages_freed, stream_);
    free_pages_.down(h.free_pages, stream_);
    std::vector<std::uint32_t> count(1);
    free_count_.down(count, stream_);
    cuda_check(cudaStreamSynchronize(stream_), "the launches");
    h.free_count = count[0];
  }
  kvevict::cuda::ContiguousKV<float> contiguous(const BatchHost& h) const {
    kvevict::cuda::ContiguousKV<float> kv;
    kv.k = k_.as<float>();
    kv.v = v_.as<float>();
    kv.positions = pos_.as<std::int64_t>();
    kv.lengths = len_.as<std::int32_t>();
    kv.batch = h.batch;
    kv.n_kv_heads = h.n_kv;
    kv.capacity = h.capacity;
    kv.head_dim = h.head_dim;
    return kv;
  }
  kvevict::cuda::PagedKV<float> paged(const BatchHost& h) const {
    kvevict::cuda::PagedKV<float> kv;
    kv.k = k_.as<float>();
    kv.v = v_.as<float>();
    kv.layout = h.layout;
    kv.num_pages = h.num_pages;
    kv.page_size = h.page_size;
    kv.n_kv_heads = h.n_kv;
    kv.head_dim = h.head_dim;
    kv.batch = h.batch;
    kv.table_indptr = indptr_.as<std::int32_t>();
    kv.indices = indices_.as<std::int32_t>();
    kv.lengths = len_.as<std::int32_t>();
    kv.positions = pos_.as<std::int64_t>();
    return kv;
  }
  kvevict::cuda::EvictionState state(const BatchHost& h) const {
    kvevict::cuda::EvictionState st;
    st.scores = scores_.as<float>();
    st.recent = recent_.as<std::uint8_t>();
    st.ring = ring_.as<std::int32_t>();
    st.rows_state = rows_.as<kvevict::cuda::RowCounters>();
    st.seeds = seeds_.as<std::uint64_t>();
    st.status = status_.as<std::int32_t>();
    st.pages_freed = freed_.as<std::int32_t>();
    st.ring_stride = h.ring_stride;
    st.total_slots = h.paged ? h.total_slots() : 0;
    return st;
  }
  kvevict::cuda::PageFreeList free_list(const BatchHost& h) const {
    kvevict::cuda::PageFreeList fl;
    fl.pages = free_pages_.as<std::int32_t>();
    fl.count = free_count_.as<std::uint32_t>();
    fl.capacity = static_cast<std::uint32_t>(h.free_pages.size());
    return fl;
  }
  kvevict::cuda::LogitsView logits(const HostLogits& lg) const {
    kvevict::cuda::LogitsView lv;
    lv.x = lg.x.empty() ? nullptr : x_.as<float>();
    lv.gumbel = lg.gumbel.empty() ? nullptr : gumbel_.as<float>();
    lv.indptr = lg.indptr.empty() ? nullptr : lg_indptr_.as<std::int64_t>();
    lv.stride = lg.stride;
    return lv;
  }

  cudaStream_t stream_ = nullptr;
  DeviceBuffer k_, v_, pos_, len_, indptr_, indices_, scores_, recent_, ring_, rows_, seeds_, status_, freed_,
      free_pages_, free_count_, step_ws_, acc_, keep_, stage_, x_, gumbel_, lg_indptr_;
};

}  // namespace

std::unique_ptr<Backend> make_gpu_backend() {
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 1) throw std::runtime_error("no CUDA device");
  return std::make_unique<GpuBackend>();
}

std::string gpu_description() {
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cuda_check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  cuda_check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::ostringstream o;
  o << prop.name << ", CUDA driver API " << driver / 1000 << "." << (driver % 1000) / 10 << ", runtime "
    << runtime / 1000 << "." << (runtime % 1000) / 10 << ", sm_" << prop.major << prop.minor << ", "
    << prop.multiProcessorCount << " SMs, " << static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024)
    << " GiB";
  return o.str();
}

}  // namespace kvtest_cuda
