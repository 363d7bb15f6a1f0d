// cuda/detail/block_contiguous.cuh — the block code of the contiguous KV layout (`Cache`): one block per
// (sequence, KV head) for the decode step and the prefill cut. Internal: use cuda/kernels.cuh.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/detail/hd.hpp"
#include "kvevict/cuda/detail/block_steps.cuh"
#include "kvevict/cuda/views.cuh"

namespace kvevict {
namespace cuda {
namespace core {

// ------------------------------------------------------------------------------------------------
// Contiguous KV, one block per (sequence b, KV head j): each head selects alone (`Cache`).
// ------------------------------------------------------------------------------------------------

/// One decode step of (b, j): validates (status codes in views.cuh; nothing changes on an
/// error), adds the step's softmax of the group's query rows into the head's scores (the
/// new slot n − 1 from 0; TOVA replaces), enters slot n − 1 into the recent window, and if
/// n > k evicts the victim by moving slot n − 1 into it (K, V, position, score, flag);
/// lengths[b, j] becomes n − 1. `ws` is the step workspace (`step_workspace_floats` for
/// rows of `ws_slots`). O(g · n) work, O(log) depth per pass.
template <class Exec, class T>
KVEVICT_HD void decode_step_contiguous(const Exec& ex, const ContiguousKV<T>& kv, const EvictionState& st,
                                       const PolicyParams& p, const LogitsView& lg, float* ws, std::uint32_t ws_slots,
                                       std::uint32_t b, std::uint32_t j) {
  const std::uint32_t nkv = kv.n_kv_heads, g = p.n_q_heads / nkv, row = b * nkv + j;
  RowCounters* rc = st.rows_state + row;
  const std::int32_t n_raw = kv.lengths[row];
  const RowCounters c = *rc;
  float tau = 1.0f;
  std::int64_t new_pos = 0;
  std::int32_t err = step_length_status(c, n_raw, kv.capacity, ws_slots);
  if (err == kStatusOk) {
    new_pos = kv.positions[kv.slot(b, j, static_cast<std::uint32_t>(n_raw) - 1)];
    err = step_position_status(p, c, new_pos, tau);
  }
  if (err != kStatusOk) {
    ex.single([&] { ex.set_status(st.status + b, err); });
    return;
  }
  const std::uint32_t n = static_cast<std::uint32_t>(n_raw), last = n - 1;
  float* s = st.scores + kv.slot(b, j, 0);
  std::int64_t* pos = kv.positions + kv.slot(b, j, 0);
  std::uint8_t* flags = st.recent + kv.slot(b, j, 0);
  std::int32_t* ring = st.ring + static_cast<std::size_t>(row) * st.ring_stride;
  const std::uint32_t cc = chunk_count(ws_slots);
  if (p.uses_logits()) {
    const float inv_tau = 1.0f / tau;
    const StepRows rows{&p, &lg, ws, cc, st.seeds != nullptr ? st.seeds[b] : 0, b, j * g, n, new_pos};
    if (!step_softmax(ex, rows, g, inv_tau)) {
      ex.single([&] { ex.set_status(st.status + b, kStatusBadLogits); });
      return;
    }
    const bool acc = p.accumulates();
    ex.for_range(n, [&](std::uint32_t i) {
      float v = i == last ? 0.0f : s[i];
      for (std::uint32_t q = 0; q < g; ++q) {
        const float pr = probability(rows.reader(q), rows.work(q), i, inv_tau);
        v = (q == 0 && !acc) ? pr : v + pr;
      }
      s[i] = v;
    });
  } else {
    ex.single([&] { s[last] = 0.0f; });
  }
  std::int64_t entered = c.entered;
  ex.single([&] { window_enter(flags, ring, p.w, entered, last); });
  if (p.w != 0) entered = c.entered + 1;  // every thread's copy (single ran on one)
  std::uint32_t new_len = n;
  if (n > p.k) {
    const std::uint32_t victim = step_victim(
        ex, p, n, [&](std::uint32_t i) { return victim_key(s[i], flags[i]); }, [&](std::uint32_t i) { return pos[i]; });
    if (victim < last) {
      T* kd = kv.k + kv.row(b, j, victim);
      T* vd = kv.v + kv.row(b, j, victim);
      const T* ks = kv.k + kv.row(b, j, last);
      const T* vs = kv.v + kv.row(b, j, last);
      ex.for_range(kv.head_dim, [&](std::uint32_t e) {
        kd[e] = ks[e];
        vd[e] = vs[e];
      });
      ex.single([&] {
        pos[victim] = pos[last];
        s[victim] = s[last];
        flags[victim] = flags[last];
        window_newest_moved(flags, ring, p.w, entered, last, victim);
      });
    }
    new_len = n - 1;
  }
  ex.single([&] {
    kv.lengths[row] = static_cast<std::int32_t>(new_len);
    step_counters(rc, c, new_len, entered, new_pos);
  });
}

/// The prefill cut of (b, KV head j), after `prefill_score_head` of every query head:
/// scores = the group's accumulators summed (q ascending, as `Scorer::fold`), the selection
/// keeps m = min(k, P) slots, compacted in order into `[0, m)` (K, V, position, score); the
/// recent window is the last min(w, m) of them; step 0. Nothing changes if status[b] != 0
/// or the prompt's positions do not rise. O(P · (32 + head_dim)) work.
template <class Exec, class T>
KVEVICT_HD void prefill_cut_contiguous(const Exec& ex, const ContiguousKV<T>& kv, const EvictionState& st,
                                       const PolicyParams& p, const PrefillWork& pw, std::uint32_t b, std::uint32_t j) {
  const std::uint32_t nkv = kv.n_kv_heads, g = p.n_q_heads / nkv, row = b * nkv + j;
  if (status_of(ex, st, b) != kStatusOk) return;  // written by the scoring launch before this one
  const std::int32_t len = kv.lengths[row];
  if (len < 1 || static_cast<std::uint32_t>(len) > kv.capacity || static_cast<std::uint32_t>(len) > pw.max_prompt) {
    ex.single([&] { ex.set_status(st.status + b, kStatusBadLength); });
    return;
  }
  const std::uint32_t P = static_cast<std::uint32_t>(len);
  std::int64_t* pos = kv.positions + kv.slot(b, j, 0);
  const std::uint32_t unordered = ex.reduce(
      P - 1, 0u, [&](std::uint32_t i) { return pos[i + 1] > pos[i] ? 0u : 1u; },
      [](std::uint32_t a, std::uint32_t c) { return a | c; });
  if (unordered != 0) {
    ex.single([&] { ex.set_status(st.status + b, kStatusBadPosition); });
    return;
  }
  const std::int64_t last_prompt_position = pos[P - 1];
  float* s = st.scores + kv.slot(b, j, 0);
  const float* acc0 = pw.acc + (static_cast<std::size_t>(b) * p.n_q_heads + j * g) * pw.max_prompt;
  ex.for_range(P, [&](std::uint32_t i) {
    float v = acc0[i];
    for (std::uint32_t t = 1; t < g; ++t) v += acc0[static_cast<std::size_t>(t) * pw.max_prompt + i];
    s[i] = p.uses_logits() ? v : 0.0f;
  });
  std::int32_t* keep = pw.keep + static_cast<std::size_t>(row) * (pw.max_prompt + 1);
  const std::uint32_t m = prefill_select(
      ex, p, P, [&](std::uint32_t i) { return kvevict::detail::float_bits(s[i]); }, keep, keep + pw.max_prompt);
  const std::size_t sb = stage_bytes(1, kv.head_dim * static_cast<std::uint32_t>(sizeof(T)));
  unsigned char* stage = pw.stage + static_cast<std::size_t>(row) * kStageSlots * sb;
  const std::uint32_t d = kv.head_dim;
  ordered_move(
      ex, m, [&](std::uint32_t t) { return static_cast<std::uint32_t>(keep[t]); },
      [&](std::uint32_t t, std::uint32_t from) {
        unsigned char* e = stage + t * sb;
        *reinterpret_cast<std::int64_t*>(e) = pos[from];
        *reinterpret_cast<float*>(e + 8) = s[from];
        T* rows = reinterpret_cast<T*>(e + stage_header_bytes(1));
        const T* ks = kv.k + kv.row(b, j, from);
        const T* vs = kv.v + kv.row(b, j, from);
        for (std::uint32_t x = 0; x < d; ++x) rows[x] = ks[x];
        for (std::uint32_t x = 0; x < d; ++x) rows[d + x] = vs[x];
      },
      [&](std::uint32_t t, std::uint32_t to) {
        const unsigned char* e = stage + t * sb;
        pos[to] = *reinterpret_cast<const std::int64_t*>(e);
        s[to] = *reinterpret_cast<const float*>(e + 8);
        const T* rows = reinterpret_cast<const T*>(e + stage_header_bytes(1));
        T* kd = kv.k + kv.row(b, j, to);
        T* vd = kv.v + kv.row(b, j, to);
        for (std::uint32_t x = 0; x < d; ++x) kd[x] = rows[x];
        for (std::uint32_t x = 0; x < d; ++x) vd[x] = rows[d + x];
      });
  std::uint8_t* flags = st.recent + kv.slot(b, j, 0);
  std::int32_t* ring = st.ring + static_cast<std::size_t>(row) * st.ring_stride;
  const std::uint32_t rw = min_of(p.w, m);
  ex.for_range(kv.capacity, [&](std::uint32_t i) { flags[i] = (i >= m - rw && i < m) ? 1 : 0; });
  ex.for_range(rw, [&](std::uint32_t i) { ring[i] = static_cast<std::int32_t>(m - rw + i); });
  ex.single([&] {
    kv.lengths[row] = static_cast<std::int32_t>(m);
    prefill_counters(st.rows_state + row, rw, last_prompt_position, m);
  });
}

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
