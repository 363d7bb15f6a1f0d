// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// tests/cuda/batch_host.hpp — the host mirror of every buffer the CUDA eviction kernels
// read and write for one layer of a batch (contiguous or paged KV, eviction state, free
// list, workspace), and the `Backend` that runs a prefill cut or a decode step on it: the
// serial `HostBackend` (the kernels' block code on `core::HostExec`, plain C++) or the GPU
// backend of gpu_check (copies the mirror to the device, launches, copies it back).
// Plain C++17: compiled by g++ (tests) and nvcc (gpu_check) alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvevict/cuda/eviction_core.cuh"
#include "kvevict/cuda/views.cuh"

namespace kvtest_cuda {

namespace kc = kvevict::cuda;

/// Every buffer of one layer of a batch, in host memory, laid out as views.cuh documents.
struct BatchHost {
  bool paged = false;
  std::uint32_t batch = 0, n_kv = 0, n_q = 0, head_dim = 0;
  std::uint32_t capacity = 0;  ///< contiguous: slots per (b, head); paged: slots per sequence
  std::uint32_t page_size = 0, num_pages = 0, max_pages = 0;  ///< paged only (max_pages per sequence)
  kvevict::PageLayout layout = kvevict::PageLayout::NHD;
  std::uint32_t max_prompt = 0;  ///< prefill workspace rows
  // KV
  std::vector<float> k, v;
  std::vector<std::int64_t> positions;
  std::vector<std::int32_t> lengths;
  std::vector<std::int32_t> table_indptr, indices;  // paged
  // eviction state
  std::vector<float> scores;
  std::vector<std::uint8_t> recent;
  std::vector<std::int32_t> ring;
  std::vector<kc::RowCounters> rows;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int32_t> status, pages_freed;
  std::uint32_t ring_stride = 1;
  // free list
  std::vector<std::int32_t> free_pages;
  std::uint32_t free_count = 0;
  // workspace
  std::vector<float> step_ws, acc;
  std::vector<std::int32_t> keep;
  std::vector<unsigned char> stage;

  std::uint32_t selection_rows() const { return paged ? 1 : n_kv; }
  std::uint32_t total_slots() const { return paged ? batch * max_pages * page_size : batch * n_kv * capacity; }

  /// Sizes every buffer (zeroed; page tables kNoPage; the free list holds every page so
  /// that pops hand out 0, 1, 2, ... first, as a fresh `PagePool`).
  void allocate(std::uint32_t w) {
    const std::uint32_t rows_n = batch * selection_rows();
    const std::size_t slots = total_slots();
    const std::size_t kv_elems =
        paged ? static_cast<std::size_t>(num_pages) * page_size * n_kv * head_dim : slots * head_dim;
    k.assign(kv_elems, 0.0f);
    v.assign(kv_elems, 0.0f);
    positions.assign(slots, 0);
    lengths.assign(paged ? batch : batch * n_kv, 0);
    const kc::StateSizes z =
        paged ? kc::paged_state_sizes(batch, n_kv, slots, w) : kc::contiguous_state_sizes(batch, n_kv, capacity, w);
    scores.assign(z.scores, 0.0f);
    recent.assign(z.recent, 0);
    ring.assign(z.ring, 0);
    rows.assign(z.rows, kc::RowCounters{});
    ring_stride = z.ring_stride;
    seeds.assign(batch, 0);
    status.assign(batch, 0);
    pages_freed.assign(batch, 0);
    if (paged) {
      table_indptr.resize(batch + 1);
      for (std::uint32_t b = 0; b <= batch; ++b) table_indptr[b] = static_cast<std::int32_t>(b * max_pages);
      indices.assign(static_cast<std::size_t>(batch) * max_pages, kvevict::kNoPage);
      free_pages.resize(num_pages);
      for (std::uint32_t i = 0; i < num_pages; ++i) free_pages[i] = static_cast<std::int32_t>(num_pages - 1 - i);
      free_count = num_pages;
    }
    const std::uint32_t max_slots = paged ? max_pages * page_size : capacity;
    step_ws.assign(kc::step_workspace_floats(batch, n_q, max_slots > max_prompt ? max_slots : max_prompt), 0.0f);
    acc.assign(static_cast<std::size_t>(batch) * n_q * max_prompt, 0.0f);
    keep.assign(static_cast<std::size_t>(rows_n) * (max_prompt + 1), 0);
    const std::uint32_t heads_moved = paged ? n_kv : 1;
    stage.assign(static_cast<std::size_t>(rows_n) * kc::kStageSlots *
                     kc::stage_bytes(heads_moved, head_dim * static_cast<std::uint32_t>(sizeof(float))),
                 0);
  }
  /// Slots of the step workspace's rows (the largest n a step may see).
  std::uint32_t ws_slots() const {
    const std::uint32_t max_slots = paged ? max_pages * page_size : capacity;
    return max_slots > max_prompt ? max_slots : max_prompt;
  }

  kc::ContiguousKV<float> contiguous_view() {
    kc::ContiguousKV<float> kv;
    kv.k = k.data();
    kv.v = v.data();
    kv.positions = positions.data();
    kv.lengths = lengths.data();
    kv.batch = batch;
    kv.n_kv_heads = n_kv;
    kv.capacity = capacity;
    kv.head_dim = head_dim;
    return kv;
  }
  kc::PagedKV<float> paged_view() {
    kc::PagedKV<float> kv;
    kv.k = k.data();
    kv.v = v.data();
    kv.layout = layout;
    kv.num_pages = num_pages;
    kv.page_size = page_size;
    kv.n_kv_heads = n_kv;
    kv.head_dim = head_dim;
    kv.batch = batch;
    kv.table_indptr = table_indptr.data();
    kv.indices = indices.data();
    kv.lengths = lengths.data();
    kv.positions = positions.data();
    return kv;
  }
  kc::EvictionState state() {
    kc::EvictionState st;
    st.scores = scores.data();
    st.recent = recent.data();
    st.ring = ring.data();
    st.rows_state = rows.data();
    st.seeds = seeds.data();
    st.status = status.data();
    st.pages_freed = pages_freed.data();
    st.ring_stride = ring_stride;
    st.total_slots = paged ? total_slots() : 0;
    return st;
  }
  kc::PageFreeList free_list() {
    kc::PageFreeList fl;
    fl.pages = free_pages.data();
    fl.count = &free_count;
    fl.capacity = static_cast<std::uint32_t>(free_pages.size());
    return fl;
  }
  kc::core::PrefillWork prefill_work() {
    kc::core::PrefillWork pw;
    pw.step_ws = step_ws.data();
    pw.acc = acc.data();
    pw.keep = keep.data();
    pw.stage = stage.data();
    pw.max_prompt = max_prompt;
    return pw;
  }
};

/// Logits of a call in host memory: prefill `[B][q][P_max][P_max]` (stride P_max); step dense
/// `[B][q][stride]` or ragged (`indptr` offsets of `[q][n_b]` blocks).
struct HostLogits {
  std::vector<float> x, gumbel;      ///< gumbel empty = no injected noise
  std::vector<std::int64_t> indptr;  ///< empty = dense
  std::uint32_t stride = 0;
};

/// Runs the eviction launches on a `BatchHost`.
class Backend {
 public:
  virtual ~Backend() = default;
  /// The prefill cut of every sequence (lengths = prompt lengths, KV appended).
  virtual void prefill(BatchHost& h, const kc::PolicyParams& p, const HostLogits& lg) = 0;
  /// One decode step of every sequence (each appended one token).
  virtual void step(BatchHost& h, const kc::PolicyParams& p, const HostLogits& lg) = 0;
  /// A name for reports.
  virtual const char* name() const = 0;
};

/// The device code's block functions run serially on the host (`core::HostExec`), block by block.
class HostBackend final : public Backend {
 public:
  void prefill(BatchHost& h, const kc::PolicyParams& p, const HostLogits& lg) override {
    const kc::core::HostExec ex;
    kc::EvictionState st = h.state();
    const kc::LogitsView lv = view(lg);
    const kc::core::PrefillWork pw = h.prefill_work();
    for (auto& s : h.status) s = 0;
    for (std::uint32_t b = 0; b < h.batch; ++b)
      for (std::uint32_t q = 0; q < p.n_q_heads; ++q) {
        const std::int32_t len = h.paged ? h.lengths[b] : h.lengths[b * h.n_kv + q / (p.n_q_heads / h.n_kv)];
        kc::core::prefill_score_head(ex, p, st, lv, pw, len, h.paged ? h.max_pages * h.page_size : h.capacity, b, q);
      }
    if (h.paged) {
      const kc::PagedKV<float> kv = h.paged_view();
      const kc::PageFreeList fl = h.free_list();
      for (std::uint32_t b = 0; b < h.batch; ++b) kc::core::prefill_cut_paged(ex, kv, st, p, pw, fl, b);
    } else {
      const kc::ContiguousKV<float> kv = h.contiguous_view();
      for (std::uint32_t b = 0; b < h.batch; ++b)
        for (std::uint32_t j = 0; j < h.n_kv; ++j) kc::core::prefill_cut_contiguous(ex, kv, st, p, pw, b, j);
    }
  }
  void step(BatchHost& h, const kc::PolicyParams& p, const HostLogits& lg) override {
    const kc::core::HostExec ex;
    kc::EvictionState st = h.state();
    const kc::LogitsView lv = view(lg);
    for (auto& s : h.status) s = 0;
    if (h.paged) {
      const kc::PagedKV<float> kv = h.paged_view();
      const kc::PageFreeList fl = h.free_list();
      for (std::uint32_t b = 0; b < h.batch; ++b)
        kc::core::decode_step_paged(ex, kv, st, p, lv, fl, h.step_ws.data(), h.ws_slots(), b);
    } else {
      const kc::ContiguousKV<float> kv = h.contiguous_view();
      for (std::uint32_t b = 0; b < h.batch; ++b)
        for (std::uint32_t j = 0; j < h.n_kv; ++j)
          kc::core::decode_step_contiguous(ex, kv, st, p, lv, h.step_ws.data(), h.ws_slots(), b, j);
    }
  }
  const char* name() const override { return "host (core::HostExec)"; }

 private:
  static kc::LogitsView view(const HostLogits& lg) {
    kc::LogitsView lv;
    lv.x = lg.x.empty() ? nullptr : lg.x.data();
    lv.gumbel = lg.gumbel.empty() ? nullptr : lg.gumbel.data();
    lv.indptr = lg.indptr.empty() ? nullptr : lg.indptr.data();
    lv.stride = lg.stride;
    return lv;
  }
};

}  // namespace kvtest_cuda
