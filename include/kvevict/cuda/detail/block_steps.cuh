// cuda/detail/block_steps.cuh — the block code shared by the contiguous and the paged caches: the
// victim and prefill selections as total orders, the recent window's ring, ordered moves, the checks
// and rows of a decode step, and the prefill's scoring of one query head. Internal: use cuda/kernels.cuh.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/detail/hd.hpp"
#include "kvevict/cuda/detail/block_softmax.cuh"
#include "kvevict/cuda/views.cuh"
#include "kvevict/score/gumbel.hpp"

namespace kvevict {
namespace cuda {
namespace core {

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
// The parts of a decode step shared by the contiguous and the paged block code.
// ------------------------------------------------------------------------------------------------

/// A decode step's checks before its new token's position is read: kStatusNotPrefilled
/// before the prefill cut; kStatusBadLength unless `n_raw` = tracked + 1, within
/// [1, capacity] and within the workspace's `ws_slots`; kStatusOk otherwise. O(1).
KVEVICT_HD inline std::int32_t step_length_status(const RowCounters& c, std::int32_t n_raw, std::uint32_t capacity,
                                                  std::uint32_t ws_slots) {
  if (c.prefilled == 0) return kStatusNotPrefilled;
  if (n_raw != c.tracked + 1 || n_raw < 1 || static_cast<std::uint32_t>(n_raw) > capacity ||
      static_cast<std::uint32_t>(n_raw) > ws_slots)
    return kStatusBadLength;
  return kStatusOk;
}

/// A decode step's checks on its new token's position and its τ (written to `tau`:
/// `tau_at(step + 1)` for Keyformer, left as given otherwise): kStatusBadPosition unless
/// `new_pos` is after the last position seen, then kStatusBadTemperature unless τ is finite
/// and >= FLT_MIN; kStatusOk otherwise. O(1).
KVEVICT_HD inline std::int32_t step_position_status(const PolicyParams& p, const RowCounters& c, std::int64_t new_pos,
                                                    float& tau) {
  if (p.score == ScoreKind::keyformer) tau = p.temperature.tau_at(static_cast<std::uint64_t>(c.step) + 1);
  if (new_pos <= c.last_position) return kStatusBadPosition;
  return tau_valid(tau) ? kStatusOk : kStatusBadTemperature;
}

/// The query rows of one decode step of sequence `b`: query heads `[h0, h0 + count)` of the
/// step's logits over `n` slots, each with its ζ (injected by the engine, or drawn from the
/// key (seed, h, new_pos)) and its softmax workspace in `ws`, `(kLanes + 2) · chunks_cap`
/// floats per (b, query head).
struct StepRows {
  const PolicyParams* p = nullptr;
  const LogitsView* lg = nullptr;
  float* ws = nullptr;
  std::uint32_t chunks_cap = 0;  ///< chunk_count(ws_slots)
  std::uint64_t seed = 0;
  std::uint32_t b = 0, h0 = 0, n = 0;
  std::int64_t new_pos = 0;

  /// The logits (and ζ) of row `q` (query head h0 + q).
  KVEVICT_HD RowReader reader(std::uint32_t q) const {
    const std::uint32_t h = h0 + q;
    const std::size_t off = lg->row(b, h, p->n_q_heads, n);
    RowReader r;
    r.x = lg->x + off;
    if (p->noisy()) {
      if (lg->gumbel != nullptr) {
        r.z = lg->gumbel + off;
        r.mode = 1;
      } else {
        r.key = kvevict::gumbel_row_key(seed, h, static_cast<std::uint64_t>(new_pos));
        r.mode = 2;
      }
    }
    return r;
  }
  /// The softmax workspace of row `q`.
  KVEVICT_HD RowWork work(std::uint32_t q) const {
    return RowWork{ws + (static_cast<std::size_t>(b) * p->n_q_heads + h0 + q) * (kLanes + 2) * chunks_cap, chunks_cap};
  }
};

/// The softmax of `count` step rows up to the per-slot probabilities (`softmax_phase1`, then
/// `softmax_combine` of each row); false, with nothing combined, if a row is NaN / +inf.
/// O(count · n) work.
template <class Exec>
KVEVICT_HD bool step_softmax(const Exec& ex, const StepRows& rows, std::uint32_t count, float inv_tau) {
  auto reader = [&](std::uint32_t q) { return rows.reader(q); };
  auto work = [&](std::uint32_t q) { return rows.work(q); };
  if (!softmax_phase1(ex, count, rows.n, inv_tau, reader, work)) return false;
  const std::uint32_t chunks = chunk_count(rows.n);
  ex.for_range(count, [&](std::uint32_t q) { softmax_combine(work(q).f(), work(q).mx(), chunks, inv_tau); });
  return true;
}

/// The slot a decode step evicts: StreamingLLM (no score) the oldest non-sink slot, every
/// other policy the lowest `key` (recent slots excluded); ties to the older position.
template <class Exec, class Key, class Pos>
KVEVICT_HD std::uint32_t step_victim(const Exec& ex, const PolicyParams& p, std::uint32_t n, Key key, Pos pos) {
  return p.score == ScoreKind::none ? sink_victim(ex, n, p.sinks, pos) : score_victim(ex, n, key, pos);
}

/// The counters after a decode step that left `new_len` slots (one thread). O(1).
KVEVICT_HD inline void step_counters(RowCounters* rc, const RowCounters& c, std::uint32_t new_len, std::int64_t entered,
                                     std::int64_t new_pos) {
  rc->tracked = static_cast<std::int32_t>(new_len);
  rc->entered = entered;
  rc->step = c.step + 1;
  rc->last_position = new_pos;
}


/// The counters after the prefill cut left `m` slots, `entered` of them in the recent window
/// (one thread). O(1).
KVEVICT_HD inline void prefill_counters(RowCounters* rc, std::int64_t entered, std::int64_t last_position,
                                        std::uint32_t m) {
  rc->entered = entered;
  rc->step = 0;
  rc->last_position = last_position;
  rc->tracked = static_cast<std::int32_t>(m);
  rc->prefilled = 1;
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

}  // namespace core
}  // namespace cuda
}  // namespace kvevict
