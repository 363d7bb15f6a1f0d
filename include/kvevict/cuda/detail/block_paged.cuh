// cuda/detail/block_paged.cuh — the block code of the paged KV layout (`PagedCache`): one block per
// sequence for the decode step and the prefill cut (token or page unit), and the FlashInfer page-table
// export. Internal: use cuda/kernels.cuh.
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
// Paged KV, one block per sequence b: one selection for all KV heads (`PagedCache`).
// ------------------------------------------------------------------------------------------------

/// Score of slot `i` summed over KV heads, head 0 first from 0 (`Scorer::sum_over_heads`).
template <class T>
KVEVICT_HD float summed_score(const PagedKV<T>& kv, const EvictionState& st, std::uint32_t b, std::uint32_t i) {
  float v = 0.0f;
  for (std::uint32_t h = 0; h < kv.n_kv_heads; ++h)
    v += st.scores[static_cast<std::size_t>(h) * st.total_slots + kv.slot(b, i)];
  return v;
}

/// The page unit's choice: among the middle pages `[start_pages, hi)` not yet marked, the
/// lowest page score (the sum of its slots' summed scores in slot order; `page_mean`: over
/// page_size), ties to the older page — `PageEvictor::lowest_page`.
template <class Exec, class T>
KVEVICT_HD std::uint32_t lowest_page(const Exec& ex, const PagedKV<T>& kv, const EvictionState& st,
                                     const PolicyParams& p, std::uint32_t b, std::uint32_t hi,
                                     const std::int32_t* marks) {
  const std::uint32_t ps = kv.page_size;
  const Candidate none{1u, 0xffffffffu, 0};
  const std::uint32_t cnt = hi > p.start_pages ? hi - p.start_pages : 0;
  const Candidate best = ex.reduce(
      cnt, none,
      [&](std::uint32_t t) {
        const std::uint32_t i = p.start_pages + t;
        float sum = 0.0f;
        for (std::uint32_t o = 0; o < ps; ++o) sum += summed_score(kv, st, b, i * ps + o);
        const float score = p.page_mean ? sum / static_cast<float>(ps) : sum;
        // Page scores are >= 0: their bits order like them (key 1 marks a page already chosen).
        const std::uint32_t taken = marks != nullptr && marks[i] != 0 ? 1u : 0u;
        return Candidate{taken, i, static_cast<std::int64_t>(kvevict::detail::float_bits(score))};
      },
      [](const Candidate& a, const Candidate& c) { return lower_position(a, c); });
  return best.slot;
}

/// One decode step of paged sequence b (`PagedCache::decode_step`): validates; scores every
/// KV head (all-or-nothing for the sequence); token unit: enters slot n − 1 into the window
/// and, if n > k, moves slot n − 1 into the victim of the summed scores (K and V of every
/// head, position, scores, flag), releasing the last page when it empties; page unit: when
/// n >= k + page_size, the lowest-scoring middle page leaves the table (pushed to `free_list`),
/// later table entries, positions and scores shift down by one page.
template <class Exec, class T>
KVEVICT_HD void decode_step_paged(const Exec& ex, const PagedKV<T>& kv, const EvictionState& st, const PolicyParams& p,
                                  const LogitsView& lg, const PageFreeList& free_list, float* ws,
                                  std::uint32_t ws_slots, std::uint32_t b) {
  const std::uint32_t nkv = kv.n_kv_heads, g = p.n_q_heads / nkv, ps = kv.page_size;
  RowCounters* rc = st.rows_state + b;
  const RowCounters c = *rc;
  const std::int32_t n_raw = kv.lengths[b];
  float tau = 1.0f;
  std::int64_t new_pos = 0;
  std::int32_t err = step_length_status(c, n_raw, kv.capacity(b), ws_slots);
  if (err == kStatusOk) {
    const std::int32_t lp = kv.indices[kv.table_indptr[b] + (n_raw - 1) / static_cast<std::int32_t>(ps)];
    if (lp < 0 || static_cast<std::uint32_t>(lp) >= kv.num_pages) err = kStatusBadPage;
    new_pos = kv.positions[kv.slot(b, static_cast<std::uint32_t>(n_raw) - 1)];
    if (err == kStatusOk) err = step_position_status(p, c, new_pos, tau);
  }
  if (err != kStatusOk) {
    ex.single([&] { ex.set_status(st.status + b, err); });
    return;
  }
  const std::uint32_t n = static_cast<std::uint32_t>(n_raw), last = n - 1;
  auto score = [&](std::uint32_t h, std::uint32_t i) -> float& {
    return st.scores[static_cast<std::size_t>(h) * st.total_slots + kv.slot(b, i)];
  };
  std::int64_t* pos = kv.positions + kv.slot(b, 0);
  const std::uint32_t cc = chunk_count(ws_slots);
  if (p.uses_logits()) {
    const float inv_tau = 1.0f / tau;
    const StepRows rows{&p, &lg, ws, cc, st.seeds != nullptr ? st.seeds[b] : 0, b, 0, n, new_pos};
    if (!step_softmax(ex, rows, p.n_q_heads, inv_tau)) {
      ex.single([&] { ex.set_status(st.status + b, kStatusBadLogits); });
      return;
    }
    const bool acc = p.accumulates();
    ex.for_range(nkv * n, [&](std::uint32_t t) {
      const std::uint32_t j = t / n, i = t % n;
      float v = i == last ? 0.0f : score(j, i);
      for (std::uint32_t q = 0; q < g; ++q) {
        const float pr = probability(rows.reader(j * g + q), rows.work(j * g + q), i, inv_tau);
        v = (q == 0 && !acc) ? pr : v + pr;
      }
      score(j, i) = v;
    });
  } else {
    ex.for_range(nkv, [&](std::uint32_t j) { score(j, last) = 0.0f; });
  }
  std::uint32_t new_len = n;
  std::int64_t entered = c.entered;
  std::int32_t freed = 0;
  if (!p.page_unit) {
    std::uint8_t* flags = st.recent + kv.slot(b, 0);
    std::int32_t* ring = st.ring + static_cast<std::size_t>(b) * st.ring_stride;
    ex.single([&] { window_enter(flags, ring, p.w, entered, last); });
    if (p.w != 0) entered = c.entered + 1;
    if (n > p.k) {
      const std::uint32_t victim = step_victim(
          ex, p, n, [&](std::uint32_t i) { return victim_key(summed_score(kv, st, b, i), flags[i]); },
          [&](std::uint32_t i) { return pos[i]; });
      if (victim < last) {
        const std::uint32_t d = kv.head_dim;
        ex.for_range(nkv * d, [&](std::uint32_t t) {
          const std::uint32_t h = t / d, e = t % d;
          kv.k[kv.row(b, h, victim) + e] = kv.k[kv.row(b, h, last) + e];
          kv.v[kv.row(b, h, victim) + e] = kv.v[kv.row(b, h, last) + e];
        });
        ex.for_range(nkv, [&](std::uint32_t h) { score(h, victim) = score(h, last); });
        ex.single([&] {
          pos[victim] = pos[last];
          flags[victim] = flags[last];
          window_newest_moved(flags, ring, p.w, entered, last, victim);
        });
      }
      new_len = n - 1;
      if (new_len % ps == 0) {  // the last page emptied: back to the free list
        std::int32_t* entry = kv.indices + kv.table_indptr[b] + new_len / ps;
        ex.single([&] {
          ex.push_free(free_list, *entry);
          *entry = kNoPage;
        });
        freed = 1;
      }
    }
  } else if (n >= p.k + ps) {
    const std::uint32_t hi = (n - (p.w > 0 ? p.w : 1)) / ps;
    const std::uint32_t vp = lowest_page(ex, kv, st, p, b, hi, nullptr);
    const std::uint32_t used = (n + ps - 1) / ps;
    std::int32_t* table = kv.indices + kv.table_indptr[b];
    const std::int32_t gone = table[vp];
    // Slots after the page shift down by one page (positions and every head's score), one
    // page-sized part per pass: a part's sources (one page later) are disjoint from its
    // destinations, and no earlier part writes a later part's sources.
    const std::uint32_t tail = n - (vp + 1) * ps;
    for (std::uint32_t off = 0; off < tail; off += ps) {
      const std::uint32_t part = min_of(ps, tail - off), d0 = vp * ps + off;
      ex.for_range(part * (nkv + 1), [&](std::uint32_t t) {
        const std::uint32_t h = t / part, i = d0 + t % part;
        if (h == nkv)
          pos[i] = pos[i + ps];
        else
          score(h, i) = score(h, i + ps);
      });
    }
    ex.single([&] {
      ex.push_free(free_list, gone);
      for (std::uint32_t i = vp; i + 1 < used; ++i) table[i] = table[i + 1];
      table[used - 1] = kNoPage;
    });
    new_len = n - ps;
    freed = 1;
  }
  ex.single([&] {
    kv.lengths[b] = static_cast<std::int32_t>(new_len);
    step_counters(rc, c, new_len, entered, new_pos);
    if (st.pages_freed != nullptr) st.pages_freed[b] += freed;
  });
}

/// The prefill cut of paged sequence b after `prefill_score_head` of every query head
/// (`PagedCache::prefill`): per-head scores = the folds; token unit: keep the selection of
/// the summed scores, compact (K, V of every head, positions, scores) into `[0, m)`, release
/// the emptied tail pages, recent window = the last min(w, m); page unit: while P >= k +
/// page_size, `(P − k) / page_size` middle pages leave the table (lowest first, ties to the
/// older), positions and scores shift down. Nothing changes if status[b] != 0.
template <class Exec, class T>
KVEVICT_HD void prefill_cut_paged(const Exec& ex, const PagedKV<T>& kv, const EvictionState& st, const PolicyParams& p,
                                  const PrefillWork& pw, const PageFreeList& free_list, std::uint32_t b) {
  const std::uint32_t nkv = kv.n_kv_heads, g = p.n_q_heads / nkv, ps = kv.page_size;
  if (status_of(ex, st, b) != kStatusOk) return;
  const std::int32_t len = kv.lengths[b];
  if (len < 1 || static_cast<std::uint32_t>(len) > kv.capacity(b) || static_cast<std::uint32_t>(len) > pw.max_prompt) {
    ex.single([&] { ex.set_status(st.status + b, kStatusBadLength); });
    return;
  }
  const std::uint32_t P = static_cast<std::uint32_t>(len), used = (P + ps - 1) / ps;
  std::int64_t* pos = kv.positions + kv.slot(b, 0);
  std::int32_t* table = kv.indices + kv.table_indptr[b];
  const std::uint32_t bad = ex.reduce(
      P, 0u,
      [&](std::uint32_t i) {
        if (i % ps == 0 && (table[i / ps] < 0 || static_cast<std::uint32_t>(table[i / ps]) >= kv.num_pages)) return 2u;
        return (i + 1 < P && !(pos[i + 1] > pos[i])) ? 1u : 0u;
      },
      [](std::uint32_t a, std::uint32_t c) { return a | c; });
  if (bad != 0) {
    ex.single([&] { ex.set_status(st.status + b, (bad & 2u) != 0 ? kStatusBadPage : kStatusBadPosition); });
    return;
  }
  const std::int64_t last_prompt_position = pos[P - 1];
  auto score = [&](std::uint32_t h, std::uint32_t i) -> float& {
    return st.scores[static_cast<std::size_t>(h) * st.total_slots + kv.slot(b, i)];
  };
  ex.for_range(nkv * P, [&](std::uint32_t t) {
    const std::uint32_t j = t / P, i = t % P;
    const float* acc0 = pw.acc + (static_cast<std::size_t>(b) * p.n_q_heads + j * g) * pw.max_prompt;
    float v = acc0[i];
    for (std::uint32_t q = 1; q < g; ++q) v += acc0[static_cast<std::size_t>(q) * pw.max_prompt + i];
    score(j, i) = p.uses_logits() ? v : 0.0f;
  });
  std::int32_t* keep = pw.keep + static_cast<std::size_t>(b) * (pw.max_prompt + 1);
  std::uint32_t m = P;
  std::int32_t freed = 0;
  std::uint32_t rw = 0;
  if (!p.page_unit) {
    m = prefill_select(
        ex, p, P, [&](std::uint32_t i) { return kvevict::detail::float_bits(summed_score(kv, st, b, i)); }, keep,
        keep + pw.max_prompt);
    const std::uint32_t rb = kv.head_dim * static_cast<std::uint32_t>(sizeof(T));
    const std::size_t sb = stage_bytes(nkv, rb);
    unsigned char* stage = pw.stage + static_cast<std::size_t>(b) * kStageSlots * sb;
    const std::uint32_t d = kv.head_dim;
    ordered_move(
        ex, m, [&](std::uint32_t t) { return static_cast<std::uint32_t>(keep[t]); },
        [&](std::uint32_t t, std::uint32_t from) {
          unsigned char* e = stage + t * sb;
          *reinterpret_cast<std::int64_t*>(e) = pos[from];
          float* sc = reinterpret_cast<float*>(e + 8);
          for (std::uint32_t h = 0; h < nkv; ++h) sc[h] = score(h, from);
          T* rows = reinterpret_cast<T*>(e + stage_header_bytes(nkv));
          for (std::uint32_t h = 0; h < nkv; ++h)
            for (std::uint32_t x = 0; x < d; ++x) {
              rows[(2 * h) * d + x] = kv.k[kv.row(b, h, from) + x];
              rows[(2 * h + 1) * d + x] = kv.v[kv.row(b, h, from) + x];
            }
        },
        [&](std::uint32_t t, std::uint32_t to) {
          const unsigned char* e = stage + t * sb;
          pos[to] = *reinterpret_cast<const std::int64_t*>(e);
          const float* sc = reinterpret_cast<const float*>(e + 8);
          for (std::uint32_t h = 0; h < nkv; ++h) score(h, to) = sc[h];
          const T* rows = reinterpret_cast<const T*>(e + stage_header_bytes(nkv));
          for (std::uint32_t h = 0; h < nkv; ++h)
            for (std::uint32_t x = 0; x < d; ++x) {
              kv.k[kv.row(b, h, to) + x] = rows[(2 * h) * d + x];
              kv.v[kv.row(b, h, to) + x] = rows[(2 * h + 1) * d + x];
            }
        });
    const std::uint32_t keep_pages = (m + ps - 1) / ps;
    ex.single([&] {
      for (std::uint32_t i = keep_pages; i < used; ++i) {
        ex.push_free(free_list, table[i]);
        table[i] = kNoPage;
      }
    });
    freed = static_cast<std::int32_t>(used - keep_pages);
    rw = min_of(p.w, m);
    std::uint8_t* flags = st.recent + kv.slot(b, 0);
    std::int32_t* ring = st.ring + static_cast<std::size_t>(b) * st.ring_stride;
    ex.for_range(kv.capacity(b), [&](std::uint32_t i) { flags[i] = (i >= m - rw && i < m) ? 1 : 0; });
    ex.for_range(rw, [&](std::uint32_t i) { ring[i] = static_cast<std::int32_t>(m - rw + i); });
  } else if (P >= p.k + ps) {
    const std::uint32_t count = (P - p.k) / ps, hi = (P - (p.w > 0 ? p.w : 1)) / ps;
    ex.for_range(used, [&](std::uint32_t i) { keep[i] = 0; });
    for (std::uint32_t e = 0; e < count; ++e) {
      const std::uint32_t vp = lowest_page(ex, kv, st, p, b, hi, keep);
      ex.single([&] { keep[vp] = 1; });
    }
    // Positions and scores of the kept pages move down by whole pages, page by page in
    // order (a page's source and destination are disjoint; sources lie after destinations);
    // K/V stay in their pages. A marked page is never the last, partial one: it is recent.
    std::uint32_t out = 0;
    for (std::uint32_t i = 0; i < used; ++i) {
      if (keep[i] != 0) continue;
      if (out != i) {
        const std::uint32_t lenp = min_of(ps, P - i * ps);
        ex.for_range(lenp * (nkv + 1), [&](std::uint32_t t) {
          const std::uint32_t h = t / lenp, o = t % lenp;
          if (h == nkv)
            pos[out * ps + o] = pos[i * ps + o];
          else
            score(h, out * ps + o) = score(h, i * ps + o);
        });
      }
      ++out;
    }
    ex.single([&] {
      std::uint32_t o2 = 0;
      for (std::uint32_t i = 0; i < used; ++i) {
        if (keep[i] != 0) {
          ex.push_free(free_list, table[i]);
          continue;
        }
        table[o2++] = table[i];
      }
      for (std::uint32_t i = o2; i < used; ++i) table[i] = kNoPage;
    });
    m = P - count * ps;
    freed = static_cast<std::int32_t>(count);
  }
  ex.single([&] {
    kv.lengths[b] = static_cast<std::int32_t>(m);
    prefill_counters(st.rows_state + b, rw, last_prompt_position, m);
    if (st.pages_freed != nullptr) st.pages_freed[b] += freed;
  });
}

/// Writes the compact FlashInfer page table of the batch: `indptr[B + 1]` (prefix sums of
/// the pages in use, `ceil(lengths[b] / page_size)`), `indices` (those pages in order) and
/// `last_page_len[B]` (`(lengths[b] − 1) % page_size + 1`, 0 for an empty sequence).
template <class Exec, class T>
KVEVICT_HD void export_flashinfer_table(const Exec& ex, const PagedKV<T>& kv, std::int32_t* indptr,
                                        std::int32_t* indices, std::int32_t* last_page_len) {
  const std::uint32_t ps = kv.page_size;
  ex.single([&] {
    indptr[0] = 0;
    for (std::uint32_t b = 0; b < kv.batch; ++b) {
      const std::int32_t len = kv.lengths[b];
      indptr[b + 1] = indptr[b] + (len + static_cast<std::int32_t>(ps) - 1) / static_cast<std::int32_t>(ps);
      last_page_len[b] = len == 0 ? 0 : (len - 1) % static_cast<std::int32_t>(ps) + 1;
    }
  });
  for (std::uint32_t b = 0; b < kv.batch; ++b) {
    const std::uint32_t cnt = static_cast<std::uint32_t>(indptr[b + 1] - indptr[b]);
    ex.for_range(cnt, [&](std::uint32_t i) { indices[indptr[b] + i] = kv.indices[kv.table_indptr[b] + i]; });
  }
}

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
