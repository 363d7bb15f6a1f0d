// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// cuda/eviction_core.cuh — the work of one CUDA block of the eviction kernels, written
// once as `__host__ __device__` code over an executor `Exec` that supplies the block's
// parallel primitives. `kernels.cuh` runs it with `DeviceExec` (threads of a block,
// `__syncthreads`, shared-memory reductions); `HostExec` below runs the same code serially,
// which is how the CPU tests (tests/cuda/) check the device arithmetic against the CPU
// caches without a GPU.
//
// The `Exec` contract (every call is a block-wide collective: all threads of the block
// make it, with the same arguments; each ends with a barrier):
//   for_range(n, f)             f(i) for every i in [0, n), in any order / concurrently
//   single(f)                   f() once
//   reduce(n, init, f, op)      op-fold of init and f(i), i in [0, n); op associative and
//                               commutative *exactly* (integer sums, min of a total order)
//   scan(n, flag, emit)         emit(i, r) for each i with flag(i), r = the number of such
//                               j < i; returns the count
//   set_status(p, code)         *p = code if *p == 0 (atomic on the device)
//   push_free(list, page)       pushes a page id onto a PageFreeList (atomic on the device)
//
// Floating point: every sum is done in the CPU kernel's order (softmax_accumulate.hpp:
// 16-lane chunk sums, the fixed-order chunk combine, q heads ascending), with the CPU's
// `log_positive` / `exp_nonpositive` and ζ formula (score/gumbel.hpp), so that, compiled
// without FMA contraction (nvcc `-fmad=false`, as the CPU library's `-ffp-contract=off`) and
// with IEEE division (no `--use_fast_math`), the device scores are meant to be the CPU's bit
// for bit: on the host executor they are (tests/cuda/cuda_core_test); tests/cuda/gpu_check is
// the check on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/core/bits.hpp"
#include "kvevict/core/fast_math.hpp"
#include "kvevict/core/hd.hpp"
#include "kvevict/cuda/views.cuh"
#include "kvevict/score/gumbel.hpp"

namespace kvevict {
namespace cuda {
namespace core {

/// +inf and -inf as floats (from their bits: usable in device code without relaxed constexpr).
KVEVICT_HD inline float pos_inf() { return kvevict::detail::bits_float(0x7f800000u); }
KVEVICT_HD inline float neg_inf() { return kvevict::detail::bits_float(0xff800000u); }
KVEVICT_HD inline float quiet_nan() { return kvevict::detail::bits_float(0x7fc00000u); }
template <class T>
KVEVICT_HD inline T min_of(T a, T b) {
  return b < a ? b : a;
}

/// One logits row with its noise: `y(i) = x[i] (+ ζ_i)`, ζ injected (`z[i]`) or drawn
/// (`gumbel_zeta(key, i)`, the CPU's counter-based formula), exactly as the CPU forms it.
struct RowReader {
  const float* x = nullptr;
  const float* z = nullptr;
  std::uint64_t key = 0;
  std::int32_t mode = 0;  ///< 0 no noise, 1 injected, 2 drawn
  KVEVICT_HD float y(std::uint32_t i) const {
    if (mode == 1) return x[i] + z[i];
    if (mode == 2) return kvevict::detail::gumbel_zeta(key, i) + x[i];
    return x[i];
  }
};

/// The softmax workspace of one query head's row: `lanes[16 · chunks]` partials, then
/// `f[chunks]` (chunk sums, then the combine's factors), then `mx[chunks]` (chunk maxes).
struct RowWork {
  float* base = nullptr;
  std::uint32_t chunks_cap = 0;  ///< chunks the workspace was sized for
  KVEVICT_HD float* lanes() const { return base; }
  KVEVICT_HD float* f() const { return base + kLanes * chunks_cap; }
  KVEVICT_HD float* mx() const { return base + (kLanes + 1) * chunks_cap; }
};

/// `exp((y − m) · inv_tau)`, the CPU's numerator (0 for a fully masked chunk, `m = −inf`).
KVEVICT_HD inline float numerator(float y, float m, float inv_tau) {
  return m == neg_inf() ? 0.0f : kvevict::detail::exp_nonpositive((y - m) * inv_tau);
}

/// The max of lane `l` of chunk `c` of a row of `n` (`max_propagate_nan`'s lanes: the
/// elements `c0 + l + 16 i` of the chunk's full 16-groups, plus this lane's element of the
/// tail; a max is exact in any order). NaN if one is NaN. O(kChunk / 16).
KVEVICT_HD inline float lane_max(const RowReader& r, std::uint32_t n, std::uint32_t c, std::uint32_t l) {
  const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0), full = len / kLanes * kLanes;
  float m = neg_inf();
  bool nan = false;
  for (std::uint32_t i = l; i < full; i += kLanes) {
    const float y = r.y(c0 + i);
    m = y > m ? y : m;
    nan = nan || y != y;
  }
  if (full + l < len) {
    const float y = r.y(c0 + full + l);
    m = y > m ? y : m;
    nan = nan || y != y;
  }
  return nan ? quiet_nan() : m;
}
/// Lane `l`'s sum of chunk `c` (`sum_fixed_order`'s lanes: the numerators of the full
/// 16-groups, index order, from 0), given the chunk max `m`. O(kChunk / 16).
KVEVICT_HD inline float lane_sum(const RowReader& r, std::uint32_t n, std::uint32_t c, std::uint32_t l, float m,
                                 float inv_tau) {
  const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0), full = len / kLanes * kLanes;
  float s = 0.0f;
  for (std::uint32_t i = l; i < full; i += kLanes) s += numerator(r.y(c0 + i), m, inv_tau);
  return s;
}
/// Whether a chunk max makes the row invalid (NaN or +inf: the CPU kernel rejects it).
KVEVICT_HD inline bool bad_max(float m) { return m != m || m == pos_inf(); }

/// Phase 1 of the softmax for `rows` rows at once (row `q` read by `reader(q)`, its
/// workspace `work(q)`), each over `n` slots: chunk maxes and fixed-order chunk sums, in
/// four collective passes (lane maxes, chunk maxes, lane sums, chunk sums). Returns false
/// (uniformly) if some row holds NaN / +inf; nothing outside the workspace is written.
template <class Exec, class Reader, class Work>
KVEVICT_HD bool softmax_phase1(const Exec& ex, std::uint32_t rows, std::uint32_t n, float inv_tau, Reader reader,
                               Work work) {
  const std::uint32_t chunks = chunk_count(n);
  ex.for_range(rows * chunks * kLanes, [&](std::uint32_t i) {
    const std::uint32_t q = i / (chunks * kLanes), c = (i / kLanes) % chunks, l = i % kLanes;
    work(q).lanes()[c * kLanes + l] = lane_max(reader(q), n, c, l);
  });
  ex.for_range(rows * chunks, [&](std::uint32_t i) {
    const std::uint32_t q = i / chunks, c = i % chunks;
    const float* lanes = work(q).lanes() + c * kLanes;
    float m = neg_inf();
    bool nan = false;
    for (std::uint32_t l = 0; l < kLanes; ++l) {
      m = lanes[l] > m ? lanes[l] : m;
      nan = nan || lanes[l] != lanes[l];
    }
    work(q).mx()[c] = nan ? quiet_nan() : m;
  });
  const std::uint32_t bad = ex.reduce(
      rows * chunks, 0u, [&](std::uint32_t i) { return bad_max(work(i / chunks).mx()[i % chunks]) ? 1u : 0u; },
      [](std::uint32_t a, std::uint32_t b) { return a | b; });
  if (bad != 0) return false;
  ex.for_range(rows * chunks * kLanes, [&](std::uint32_t i) {
    const std::uint32_t q = i / (chunks * kLanes), c = (i / kLanes) % chunks, l = i % kLanes;
    const float m = work(q).mx()[c];
    work(q).lanes()[c * kLanes + l] = m == neg_inf() ? 0.0f : lane_sum(reader(q), n, c, l, m, inv_tau);
  });
  ex.for_range(rows * chunks, [&](std::uint32_t i) {
    const std::uint32_t q = i / chunks, c = i % chunks;
    const float m = work(q).mx()[c];
    float total = 0.0f;
    if (m != neg_inf()) {
      const float* lanes = work(q).lanes() + c * kLanes;
      for (std::uint32_t l = 0; l < kLanes; ++l) total += lanes[l];
      const std::uint32_t c0 = c * kChunk, len = min_of(kChunk, n - c0);
      const RowReader r = reader(q);
      for (std::uint32_t t = len / kLanes * kLanes; t < len; ++t) total += numerator(r.y(c0 + t), m, inv_tau);
    }
    work(q).f()[c] = total;
  });
  return true;
}

/// Phase 2 (`softmax_combine`, serial, the CPU's order): `f[c]` becomes `exp((m_c − max m) ·
/// inv_tau) / Σ_c' sum[c'] · exp((m_c' − max m) · inv_tau)`, 0 for a fully masked row; the
/// chunk maxes stay. O(chunks).
KVEVICT_HD inline void softmax_combine(float* f, const float* mx, std::uint32_t chunks, float inv_tau) {
  float row_max = neg_inf();
  for (std::uint32_t c = 0; c < chunks; ++c) row_max = row_max < mx[c] ? mx[c] : row_max;
  if (row_max == neg_inf()) {
    for (std::uint32_t c = 0; c < chunks; ++c) f[c] = 0.0f;
    return;
  }
  float total = 0.0f;
  for (std::uint32_t c = 0; c < chunks; ++c)
    total += f[c] * kvevict::detail::exp_nonpositive((mx[c] - row_max) * inv_tau);
  const float inv_total = 1.0f / total;
  for (std::uint32_t c = 0; c < chunks; ++c)
    f[c] = kvevict::detail::exp_nonpositive((mx[c] - row_max) * inv_tau) * inv_total;
}

/// The probability `softmax(y / τ)[i]` of slot `i` as the CPU forms it: numerator times
/// the chunk's factor (after phase 2).
template <class Work>
KVEVICT_HD float probability(const RowReader& r, const Work& w, std::uint32_t i, float inv_tau) {
  const std::uint32_t c = i / kChunk;
  return numerator(r.y(i), w.mx()[c], inv_tau) * w.f()[c];
}

/// The best victim so far: smallest key (a score's bits; all ones for a recent slot),
/// then the newest position (ties keep the older token), then the lower slot — the CPU
/// `RecentTopKSelection::victim` rule as a total order, so any reduction order agrees.
struct Candidate {
  std::uint32_t key;
  std::uint32_t slot;
  std::int64_t pos;
};
constexpr std::uint32_t kExcluded = 0xffffffffu;
KVEVICT_HD inline Candidate better_victim(const Candidate& a, const Candidate& b) {
  if (a.key != b.key) return a.key < b.key ? a : b;
  if (a.pos != b.pos) return a.pos > b.pos ? a : b;
  return a.slot <= b.slot ? a : b;
}
/// For the StreamingLLM / window victim: the smallest position above a floor, lower slot on ties.
KVEVICT_HD inline Candidate lower_position(const Candidate& a, const Candidate& b) {
  if (a.key != b.key) return a.key < b.key ? a : b;  // key 1 = not a candidate
  if (a.pos != b.pos) return a.pos < b.pos ? a : b;
  return a.slot <= b.slot ? a : b;
}
/// The key of a slot for the victim search: the score's bits (finite scores >= 0 order
/// like their bits), or `kExcluded` for a recent slot.
KVEVICT_HD inline std::uint32_t victim_key(float score, std::uint8_t recent) {
  return recent != 0 ? kExcluded : kvevict::detail::float_bits(score);
}

/// The victim by scores: `key(i)`, `pos(i)` over slots `[0, n)`; returns n if every slot is
/// recent (never in a step: at most `w <= k < n` are).
template <class Exec, class Key, class Pos>
KVEVICT_HD std::uint32_t score_victim(const Exec& ex, std::uint32_t n, Key key, Pos pos) {
  const Candidate none{kExcluded, 0xffffffffu, 0};
  const Candidate best = ex.reduce(
      n, none,
      [&](std::uint32_t i) {
        return Candidate{key(i), i, pos(i)};
      },
      [](const Candidate& a, const Candidate& b) { return better_victim(a, b); });
  return best.key == kExcluded ? n : best.slot;
}
/// The window / StreamingLLM victim: the slot of the (sinks + 1)-th smallest position
/// (`SinkRecentSelection::victim_by_rounds`: raise a floor sinks + 1 times). O(n · (sinks + 1)).
template <class Exec, class Pos>
KVEVICT_HD std::uint32_t sink_victim(const Exec& ex, std::uint32_t n, std::uint32_t sinks, Pos pos) {
  Candidate floor{0, 0, 0};
  for (std::uint32_t round = 0; round <= sinks && round < n; ++round) {
    const Candidate none{1u, 0xffffffffu, 0};
    floor = ex.reduce(
        n, none,
        [&](std::uint32_t i) {
          const std::int64_t p = pos(i);
          return Candidate{(round == 0 || p > floor.pos) ? 0u : 1u, i, p};
        },
        [](const Candidate& a, const Candidate& b) { return lower_position(a, b); });
  }
  return floor.slot;
}

/// The recent window of one selection row (the CPU `RecentFlags` for one row): `flags`
/// by slot, `ring[w]` the window's slots, `entered` tokens entered since the cut (the
/// ring's next index is `entered % w`, its fill `min(entered, w)`). Serial, O(1).
KVEVICT_HD inline void window_enter(std::uint8_t* flags, std::int32_t* ring, std::uint32_t w, std::int64_t& entered,
                                    std::uint32_t slot) {
  if (w == 0) return;
  const std::uint32_t next = static_cast<std::uint32_t>(entered % w);
  if (entered >= static_cast<std::int64_t>(w)) flags[ring[next]] = 0;
  ring[next] = static_cast<std::int32_t>(slot);
  flags[slot] = 1;
  ++entered;
}
/// The newest token moved from `last` to `victim` (its flag already copied): clears `last`'s
/// flag and re-points the window's newest entry (`RecentFlags::newest_moved`). O(1).
KVEVICT_HD inline void window_newest_moved(std::uint8_t* flags, std::int32_t* ring, std::uint32_t w,
                                           std::int64_t entered, std::uint32_t last, std::uint32_t victim) {
  if (w == 0 || flags[last] == 0) return;
  flags[last] = 0;
  ring[static_cast<std::uint32_t>((entered - 1) % w)] = static_cast<std::int32_t>(victim);
}

/// Copies element rows in tiles of `kStageSlots` destinations so that an in-place move
/// `dst d <- src(d)` with `src(d) >= d`, d ascending, is safe in parallel: a tile reads all
/// its sources (`load(t, src)` into stage entry t), then writes (`store(t, d)`). Later tiles'
/// sources lie at or after their destinations, which no earlier tile writes.
template <class Exec, class Src, class Load, class Store>
KVEVICT_HD void ordered_move(const Exec& ex, std::uint32_t m, Src src, Load load, Store store) {
  for (std::uint32_t t0 = 0; t0 < m; t0 += kStageSlots) {
    const std::uint32_t cnt = min_of(kStageSlots, m - t0);
    ex.for_range(cnt, [&](std::uint32_t t) { load(t, src(t0 + t)); });
    ex.for_range(cnt, [&](std::uint32_t t) { store(t, t0 + t); });
  }
}

/// The prefill selection of `RecentTopKSelection` (`select_keep`) or `SinkRecentSelection`
/// for `n` candidates with selection keys `key(i)` (the bits of scores >= 0): writes the
/// kept indices, ascending, to `keep[0, m)`, `m = min(k, n)`, and returns m. The k − w key
/// tokens: a bitwise search for the threshold key T (the largest with at least `keys`
/// keys >= T; 32 counting passes), every key above T, and the first `keys − #(> T)`
/// candidates equal to T (ties to the older, as `select_keep`). `scratch` is one int32.
template <class Exec, class Key>
KVEVICT_HD std::uint32_t prefill_select(const Exec& ex, const PolicyParams& p, std::uint32_t n, Key key,
                                        std::int32_t* keep, std::int32_t* scratch) {
  const std::uint32_t m = min_of(p.k, n);
  auto plus = [](std::uint32_t a, std::uint32_t b) { return a + b; };
  if (p.score == ScoreKind::none) {
    const std::uint32_t s = min_of(p.sinks, m);
    return ex.scan(
        n, [&](std::uint32_t i) { return i < s || i >= n - (m - s); },
        [&](std::uint32_t i, std::uint32_t r) { keep[r] = static_cast<std::int32_t>(i); });
  }
  const std::uint32_t r = min_of(p.w, n), pool = n - r, keys = m - r;
  std::uint32_t T = 0, cutoff = 0;
  if (keys > 0 && keys < pool) {
    for (std::uint32_t bit = 32; bit-- > 0;) {
      const std::uint32_t cand = T | (1u << bit);
      const std::uint32_t ge = ex.reduce(
          pool, 0u, [&](std::uint32_t i) { return key(i) >= cand ? 1u : 0u; }, plus);
      if (ge >= keys) T = cand;
    }
    const std::uint32_t gt = ex.reduce(
        pool, 0u, [&](std::uint32_t i) { return key(i) > T ? 1u : 0u; }, plus);
    const std::uint32_t need = keys - gt;  // >= 1: #(>= T) >= keys > #(> T)
    (void)ex.scan(
        pool, [&](std::uint32_t i) { return key(i) == T; },
        [&](std::uint32_t i, std::uint32_t rank) {
          if (rank + 1 == need) *scratch = static_cast<std::int32_t>(i);
        });
    cutoff = static_cast<std::uint32_t>(*scratch);
  }
  return ex.scan(
      n,
      [&](std::uint32_t i) {
        if (i >= pool || keys == pool) return true;
        if (keys == 0 || keys > pool) return false;
        const std::uint32_t ki = key(i);
        return ki > T || (ki == T && i <= cutoff);
      },
      [&](std::uint32_t i, std::uint32_t rk) { keep[rk] = static_cast<std::int32_t>(i); });
}

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
  std::int32_t err = kStatusOk;
  float tau = 1.0f;
  std::int64_t new_pos = 0;
  if (c.prefilled == 0) {
    err = kStatusNotPrefilled;
  } else if (n_raw != c.tracked + 1 || n_raw < 1 || static_cast<std::uint32_t>(n_raw) > kv.capacity ||
             static_cast<std::uint32_t>(n_raw) > ws_slots) {
    err = kStatusBadLength;
  } else {
    new_pos = kv.positions[kv.slot(b, j, static_cast<std::uint32_t>(n_raw) - 1)];
    if (new_pos <= c.last_position) err = kStatusBadPosition;
    if (p.score == ScoreKind::keyformer) tau = p.temperature.tau_at(static_cast<std::uint64_t>(c.step) + 1);
    if (err == kStatusOk && !tau_valid(tau)) err = kStatusBadTemperature;
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
    const std::uint64_t seed = st.seeds != nullptr ? st.seeds[b] : 0;
    auto reader = [&](std::uint32_t q) {
      const std::uint32_t h = j * g + q;
      const std::size_t off = lg.row(b, h, p.n_q_heads, n);
      RowReader r;
      r.x = lg.x + off;
      if (p.noisy()) {
        if (lg.gumbel != nullptr) {
          r.z = lg.gumbel + off;
          r.mode = 1;
        } else {
          r.key = kvevict::gumbel_row_key(seed, h, static_cast<std::uint64_t>(new_pos));
          r.mode = 2;
        }
      }
      return r;
    };
    auto work = [&](std::uint32_t q) {
      return RowWork{ws + (static_cast<std::size_t>(b) * p.n_q_heads + j * g + q) * (kLanes + 2) * cc, cc};
    };
    if (!softmax_phase1(ex, g, n, inv_tau, reader, work)) {
      ex.single([&] { ex.set_status(st.status + b, kStatusBadLogits); });
      return;
    }
    const std::uint32_t chunks = chunk_count(n);
    ex.for_range(g, [&](std::uint32_t q) { softmax_combine(work(q).f(), work(q).mx(), chunks, inv_tau); });
    const bool acc = p.accumulates();
    ex.for_range(n, [&](std::uint32_t i) {
      float v = i == last ? 0.0f : s[i];
      for (std::uint32_t q = 0; q < g; ++q) {
        const float pr = probability(reader(q), work(q), i, inv_tau);
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
    const std::uint32_t victim = p.score == ScoreKind::none
                                     ? sink_victim(ex, n, p.sinks, [&](std::uint32_t i) { return pos[i]; })
                                     : score_victim(
                                           ex, n, [&](std::uint32_t i) { return victim_key(s[i], flags[i]); },
                                           [&](std::uint32_t i) { return pos[i]; });
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
    rc->tracked = static_cast<std::int32_t>(new_len);
    rc->entered = entered;
    rc->step = c.step + 1;
    rc->last_position = new_pos;
  });
}

/// The per-(b, query head) accumulators of a prefill: `acc[P]` floats per (b, h) with stride
/// `max_prompt`, and the keep lists / scratch of the cut, `(max_prompt + 1)` int32 per (b, row).
struct PrefillWork {
  float* step_ws = nullptr;        ///< `step_workspace_floats(batch, n_q_heads, max_prompt)`
  float* acc = nullptr;            ///< `[batch][n_q_heads][max_prompt]`
  std::int32_t* keep = nullptr;    ///< `[batch][rows][max_prompt + 1]`
  unsigned char* stage = nullptr;  ///< `[batch][rows][kStageSlots][stage_bytes]`
  std::uint32_t max_prompt = 0;
};

/// `status[b]`, read once and shared by the block (another block of the launch may write it
/// meanwhile; every thread must take the same branch). O(1).
template <class Exec>
KVEVICT_HD std::int32_t status_of(const Exec& ex, const EvictionState& st, std::uint32_t b) {
  return ex.reduce(1, std::int32_t{0}, [&](std::uint32_t) { return st.status[b]; },
                   [](std::int32_t a, std::int32_t c) { return a < c ? c : a; });
}

/// Prefill scoring of query head h of sequence b over its `P = len` prompt rows
/// (`Scorer::score_chunk` of the whole prompt): row r (query position r, ζ key (seed, h, r))
/// adds `softmax((x[h][r][0, r] + ζ) / τ_0)` into `acc[b][h]`, rows ascending (TOVA: the last
/// row only, assigned). Writes only the workspace; a NaN / +inf row sets kStatusBadLogits.
template <class Exec>
KVEVICT_HD void prefill_score_head(const Exec& ex, const PolicyParams& p, const EvictionState& st, const LogitsView& lg,
                                   const PrefillWork& pw, std::int32_t len, std::uint32_t capacity, std::uint32_t b,
                                   std::uint32_t h) {
  if (len < 1 || static_cast<std::uint32_t>(len) > capacity || static_cast<std::uint32_t>(len) > pw.max_prompt) {
    ex.single([&] { ex.set_status(st.status + b, kStatusBadLength); });
    return;
  }
  const std::uint32_t P = static_cast<std::uint32_t>(len);
  float tau = p.score == ScoreKind::keyformer ? p.temperature.tau_at(0) : 1.0f;
  if (!tau_valid(tau)) {
    ex.single([&] { ex.set_status(st.status + b, kStatusBadTemperature); });
    return;
  }
  const float inv_tau = 1.0f / tau;
  float* acc = pw.acc + (static_cast<std::size_t>(b) * p.n_q_heads + h) * pw.max_prompt;
  ex.for_range(P, [&](std::uint32_t i) { acc[i] = 0.0f; });
  if (!p.uses_logits()) return;
  const std::uint32_t cc = chunk_count(pw.max_prompt);
  const RowWork w{pw.step_ws + (static_cast<std::size_t>(b) * p.n_q_heads + h) * (kLanes + 2) * cc, cc};
  const std::uint64_t seed = st.seeds != nullptr ? st.seeds[b] : 0;
  const bool assign = !p.accumulates();
  const std::size_t base = (static_cast<std::size_t>(b) * p.n_q_heads + h) * lg.stride * lg.stride;
  for (std::uint32_t r = p.score == ScoreKind::tova ? P - 1 : 0; r < P; ++r) {
    RowReader rd;
    rd.x = lg.x + base + static_cast<std::size_t>(r) * lg.stride;
    if (p.noisy()) {
      if (lg.gumbel != nullptr) {
        rd.z = lg.gumbel + base + static_cast<std::size_t>(r) * lg.stride;
        rd.mode = 1;
      } else {
        rd.key = kvevict::gumbel_row_key(seed, h, r);
        rd.mode = 2;
      }
    }
    const std::uint32_t n = r + 1;
    if (!softmax_phase1(
            ex, 1, n, inv_tau, [&](std::uint32_t) { return rd; }, [&](std::uint32_t) { return w; })) {
      ex.single([&] { ex.set_status(st.status + b, kStatusBadLogits); });
      return;
    }
    ex.single([&] { softmax_combine(w.f(), w.mx(), chunk_count(n), inv_tau); });
    ex.for_range(n, [&](std::uint32_t i) {
      const float pr = probability(rd, w, i, inv_tau);
      acc[i] = assign ? pr : acc[i] + pr;
    });
  }
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
    RowCounters* rc = st.rows_state + row;
    rc->entered = rw;
    rc->step = 0;
    rc->last_position = last_prompt_position;
    rc->tracked = static_cast<std::int32_t>(m);
    rc->prefilled = 1;
  });
}

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
  std::int32_t err = kStatusOk;
  float tau = 1.0f;
  std::int64_t new_pos = 0;
  if (c.prefilled == 0) {
    err = kStatusNotPrefilled;
  } else if (n_raw != c.tracked + 1 || n_raw < 1 || static_cast<std::uint32_t>(n_raw) > kv.capacity(b) ||
             static_cast<std::uint32_t>(n_raw) > ws_slots) {
    err = kStatusBadLength;
  } else {
    const std::int32_t lp = kv.indices[kv.table_indptr[b] + (n_raw - 1) / static_cast<std::int32_t>(ps)];
    if (lp < 0 || static_cast<std::uint32_t>(lp) >= kv.num_pages) err = kStatusBadPage;
    new_pos = kv.positions[kv.slot(b, static_cast<std::uint32_t>(n_raw) - 1)];
    if (err == kStatusOk && new_pos <= c.last_position) err = kStatusBadPosition;
    if (p.score == ScoreKind::keyformer) tau = p.temperature.tau_at(static_cast<std::uint64_t>(c.step) + 1);
    if (err == kStatusOk && !tau_valid(tau)) err = kStatusBadTemperature;
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
    const std::uint64_t seed = st.seeds != nullptr ? st.seeds[b] : 0;
    auto reader = [&](std::uint32_t h) {
      const std::size_t off = lg.row(b, h, p.n_q_heads, n);
      RowReader r;
      r.x = lg.x + off;
      if (p.noisy()) {
        if (lg.gumbel != nullptr) {
          r.z = lg.gumbel + off;
          r.mode = 1;
        } else {
          r.key = kvevict::gumbel_row_key(seed, h, static_cast<std::uint64_t>(new_pos));
          r.mode = 2;
        }
      }
      return r;
    };
    auto work = [&](std::uint32_t h) {
      return RowWork{ws + (static_cast<std::size_t>(b) * p.n_q_heads + h) * (kLanes + 2) * cc, cc};
    };
    if (!softmax_phase1(ex, p.n_q_heads, n, inv_tau, reader, work)) {
      ex.single([&] { ex.set_status(st.status + b, kStatusBadLogits); });
      return;
    }
    const std::uint32_t chunks = chunk_count(n);
    ex.for_range(p.n_q_heads, [&](std::uint32_t h) { softmax_combine(work(h).f(), work(h).mx(), chunks, inv_tau); });
    const bool acc = p.accumulates();
    ex.for_range(nkv * n, [&](std::uint32_t t) {
      const std::uint32_t j = t / n, i = t % n;
      float v = i == last ? 0.0f : score(j, i);
      for (std::uint32_t q = 0; q < g; ++q) {
        const float pr = probability(reader(j * g + q), work(j * g + q), i, inv_tau);
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
      const std::uint32_t victim =
          p.score == ScoreKind::none
              ? sink_victim(ex, n, p.sinks, [&](std::uint32_t i) { return pos[i]; })
              : score_victim(
                    ex, n, [&](std::uint32_t i) { return victim_key(summed_score(kv, st, b, i), flags[i]); },
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
    rc->tracked = static_cast<std::int32_t>(new_len);
    rc->entered = entered;
    rc->step = c.step + 1;
    rc->last_position = new_pos;
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
    RowCounters* rc = st.rows_state + b;
    rc->entered = rw;
    rc->step = 0;
    rc->last_position = last_prompt_position;
    rc->tracked = static_cast<std::int32_t>(m);
    rc->prefilled = 1;
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

/// The serial executor: runs a block's work on the calling host thread (the CPU tests, and
/// a host reference of the kernels). Not for production use: it is the device code's
/// arithmetic, one element at a time. (`KVEVICT_HD` so that a CUDA translation unit that
/// also instantiates the block code with it compiles cleanly; it is meant for the host.)
struct HostExec {
  template <class F>
  KVEVICT_HD void for_range(std::uint32_t n, F&& f) const {
    for (std::uint32_t i = 0; i < n; ++i) f(i);
  }
  template <class F>
  KVEVICT_HD void single(F&& f) const {
    f();
  }
  template <class V, class F, class Op>
  KVEVICT_HD V reduce(std::uint32_t n, V init, F&& f, Op&& op) const {
    V a = init;
    for (std::uint32_t i = 0; i < n; ++i) a = op(a, f(i));
    return a;
  }
  template <class Flag, class Emit>
  KVEVICT_HD std::uint32_t scan(std::uint32_t n, Flag&& flag, Emit&& emit) const {
    std::uint32_t r = 0;
    for (std::uint32_t i = 0; i < n; ++i)
      if (flag(i)) emit(i, r++);
    return r;
  }
  KVEVICT_HD void set_status(std::int32_t* s, std::int32_t code) const {
    if (*s == kStatusOk) *s = code;
  }
  KVEVICT_HD void push_free(const PageFreeList& list, std::int32_t page) const {
    const std::uint32_t i = (*list.count)++;
    if (i < list.capacity) list.pages[i] = page;
  }
};

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
