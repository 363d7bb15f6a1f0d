// kvevict fuzzing — paged_ops: several sequences sharing one PagePool, each with a PagedCache.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes choose one layer's page pool (1–24 pages of 1–6 slots or 64, 1–3 KV heads, head_dim 1–4,
// NHD or HND, float or Eigen::half) — its own free list, or an engine's allocate / release
// callbacks whose allocate may return no page while it has some, an id out of range, an id in
// use, or throw, and whose (noexcept) release records every page — and up to three sequences on it,
// each with a page table of 1–10 entries and a PagedCache (every policy through make_paged_cache or
// the aliases; token or page unit; start_pages 0–2; sum or mean page score; budgets and windows as
// counts including 0, > capacity and huge, or ratios; GQA group 1–3; SnapKV with its three decode rules;
// an executor claiming 1, 2, 3, 7 or SIZE_MAX workers). A construction that throws invalid_argument leaves
// the sequence without a cache (its storage is still appended to and released). Then up to 128
// calls: PagePool::append (valid and invalid positions; an empty pool or a full table must throw
// length_error), prefill and decode_step with random / NaN / ±inf logits, wrong lengths and a
// corrupted page table (a duplicated entry, kNoPage, an id out of range, a free page: must be
// rejected), restore_position_order, reset / release_sequence, and pages the harness takes with
// PagePool::allocate and gives back with release_list (duplicates named, sometimes a bad id).
// Size arguments also reach 2^64 − 1 (issue 51; kvfuzz::kHugeSizes, all >= 2^62): a view field
// (num_pages, page_size, n_kv_heads, head_dim, max_pages, page_stride_elements) of a cache built over a copy
// of the view, start_pages, prefill's P and a step's n; each must be refused with nothing changed.
//
// Throwing std::invalid_argument or std::length_error is allowed (and the engine's own exception
// from a failing allocate). After every call:
//  - engine callbacks: the engine's free pages are exactly the pool's free pages; no page reaches
//    release twice;
//  - pool: used_pages() == Σ_sequences ceil(length / page_size) + the harness's own pages; no page
//    id appears twice in one table, in two tables, or in a table and the harness's list; every
//    live table entry is in range and in use; every entry past pages_used() is kNoPage;
//    pages_released() only grows; cache.pages_in_use() == ceil(length / page_size);
//  - sequence: every live slot's K/V rows (every KV head) are the bytes appended with its position
//    for this sequence; the slots the cache manages hold distinct positions accepted by its prefill
//    or decode steps since the last reset, with finite scores >= 0;
//  - budget: token unit: after prefill min(k, P) slots, after a decode step min(n, k); page unit:
//    between min(P or n, k) and k + page_size − 1 slots, positions in accepted order (no K/V moved),
//    the first start_pages pages untouched;
//  - policy: RecentTopK keeps the w most recently accepted positions (page unit: max(w, 1));
//    StreamingLLM (token unit) keeps exactly the first min(sinks, m) and the last m − min(sinks, m);
//  - after a throw: the pool (used count, every in-use flag, pages_released), every table, length,
//    position and K/V byte of every sequence, and every cache's budget, window, step, temperature,
//    scores and pages_freed are exactly as before the call.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <kvevict/kvevict.hpp>

#include "fuzz_util.hpp"

namespace {

using namespace kvevict;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Deterministic bytes of the K (value = false) or V row of KV head `head` of the token at `pos` of
// sequence `seq`: an append of the same token always writes the same row, and no two sequences' rows agree.
void row_bytes(std::size_t seq, std::int64_t pos, std::size_t head, bool value, unsigned char* out, std::size_t n) {
  std::uint64_t s = mix(static_cast<std::uint64_t>(pos) * 64 + seq * 16 + head * 2 + (value ? 1 : 0));
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) s = mix(s);
    out[i] = static_cast<unsigned char>(s >> (8 * (i % 8)));
  }
}
std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

/// What the engine's allocate callback throws when it fails.
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The engine behind a callback pool: its own free list, and faults drawn from the input.
struct Engine {
  bool on = false;
  std::vector<std::int32_t> free;     // pages the engine may hand out (reserved: release never allocates)
  FuzzedDataProvider* in = nullptr;   // draws the faults of allocate
  int fault = 0;                      // the last allocate's fault: 0 none, else what it did wrong
};

/// An executor that claims `w` workers (up to SIZE_MAX) and runs the tasks serially.
struct ClaimExecutor {
  std::size_t w = 1;
  std::size_t workers() const { return w; }
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) const {
    for (std::size_t t = 0; t < n_tasks; ++t) f(t);
  }
};

/// One sequence of the pool: its page table, length, positions, cache and what the harness knows.
template <class T>
struct Sequence {
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  std::vector<std::int64_t> positions;
  PagedKVView<T> view;
  std::unique_ptr<ClaimExecutor> executor;  // outlives `cache`, which refers to it
  std::unique_ptr<PagedCacheInterface> cache;
  std::string name = "no cache";
  bool streaming = false;  // SinkRecentSelection (StreamingLLM, window)
  bool any_kept = false;   // SnapKV with the window decode rule: no kept-set rule
  std::size_t sinks = 0;
  std::size_t start_pages = 0;
  std::size_t n_q = 1;
  bool page_unit = false;
  std::vector<std::int64_t> accepted;  // positions accepted by prefill / decode since the last reset, in order
  std::size_t managed = 0;             // slots [0, managed) are the cache's
  bool prefilled = false;
  std::vector<std::int64_t> start_positions;  // page unit: the first start_pages pages' positions after prefill
  std::size_t freed_seen = 0;
};

/// The whole state a throwing call must leave as it was.
struct Snapshot {
  std::vector<unsigned char> k, v, in_use;
  std::size_t used = 0, released = 0;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<std::size_t> lengths;
  std::vector<std::vector<std::int64_t>> positions;
  std::vector<std::uint32_t> cache_bits;
  std::vector<std::size_t> cache_counts;
  bool operator==(const Snapshot& o) const {
    return k == o.k && v == o.v && in_use == o.in_use && used == o.used && released == o.released &&
           tables == o.tables && lengths == o.lengths && positions == o.positions && cache_bits == o.cache_bits &&
           cache_counts == o.cache_counts;
  }
};

template <class T>
struct Harness {
  std::size_t num_pages, page_size, nkv, hd;
  PageLayout layout;
  std::vector<T> k, v;
  Engine engine;  // before `pool`, whose callbacks use it
  PagePool pool;
  std::vector<Sequence<T>> seqs;
  std::vector<std::int32_t> strays;  // pages the harness took with allocate()
  std::size_t released_seen = 0;

  Harness(std::size_t pages, std::size_t ps, std::size_t nkv_, std::size_t hd_, PageLayout layout_,
          FuzzedDataProvider* engine_in)
      : num_pages(pages), page_size(ps), nkv(nkv_), hd(hd_), layout(layout_), k(pages * ps * nkv_ * hd_),
        v(k.size()), engine(make_engine(pages, engine_in)),
        pool(engine.on ? PagePool(pages, [this] { return engine_allocate(); },
                                  [this](std::int32_t p) noexcept { engine_release(p); })
                       : PagePool(pages)) {}
  Harness(const Harness&) = delete;

  static Engine make_engine(std::size_t pages, FuzzedDataProvider* in) {
    Engine e;
    e.on = in != nullptr;
    e.in = in;
    e.free.reserve(pages);
    if (e.on)  // handed out in a scrambled order: the pool's ids are the engine's, not 0, 1, 2, ...
      for (std::size_t i = 0; i < pages; ++i) e.free.push_back(static_cast<std::int32_t>((i * 7 + 3) % pages));
    if (e.on && pages % 7 == 0)
      for (std::size_t i = 0; i < pages; ++i) e.free[i] = static_cast<std::int32_t>(i);
    return e;
  }
  std::int32_t engine_allocate() {
    engine.fault = 0;
    if (engine.in->remaining_bytes() > 0) switch (engine.in->ConsumeIntegralInRange<int>(0, 9)) {
        case 0:  // claims to have no page although it has
          engine.fault = 1;
          return kNoPage;
        case 1:  // an id out of range
          engine.fault = 2;
          return engine.in->ConsumeBool() ? static_cast<std::int32_t>(num_pages) : -2;
        case 2:  // an id in use (the pool must refuse it)
          for (std::size_t p = 0; p < num_pages; ++p)
            if (pool.in_use(static_cast<std::int32_t>(p))) {
              engine.fault = 3;
              return static_cast<std::int32_t>(p);
            }
          break;
        case 3:
          engine.fault = 4;
          throw EngineError("engine: allocate failed");
        default:
          break;
      }
    if (engine.free.empty()) return kNoPage;
    const std::int32_t p = engine.free.back();
    engine.free.pop_back();
    return p;
  }
  void engine_release(std::int32_t p) noexcept {
    KVFUZZ_CHECK(std::find(engine.free.begin(), engine.free.end(), p) == engine.free.end(), "engine: page ", p,
                 " released twice");
    KVFUZZ_CHECK(!pool.in_use(p), "engine: page ", p, " released while the pool still marks it in use");
    engine.free.push_back(p);  // reserved: never allocates
  }

  void add_sequence(std::size_t max_pages) {
    seqs.emplace_back();
    Sequence<T>& s = seqs.back();
    s.table.assign(max_pages, kNoPage);
    s.positions.assign(max_pages * page_size, 0);
  }
  // Views point into the vectors: set once every sequence is in place.
  void bind_views() {
    for (Sequence<T>& s : seqs) {
      PagedKVView<T>& w = s.view;
      w.k = k.data();
      w.v = v.data();
      w.num_pages = num_pages;
      w.page_size = page_size;
      w.n_kv_heads = nkv;
      w.head_dim = hd;
      w.layout = layout;
      w.page_table = s.table.data();
      w.max_pages = s.table.size();
      w.length = &s.length;
      w.positions = s.positions.data();
      w.validate();
    }
  }

  std::string where(std::size_t i) const { return "sequence " + std::to_string(i) + " (" + seqs[i].name + ")"; }

  Snapshot snapshot() const {
    Snapshot s;
    const auto* kb = reinterpret_cast<const unsigned char*>(k.data());
    const auto* vb = reinterpret_cast<const unsigned char*>(v.data());
    s.k.assign(kb, kb + k.size() * sizeof(T));
    s.v.assign(vb, vb + v.size() * sizeof(T));
    for (std::size_t p = 0; p < num_pages; ++p) s.in_use.push_back(pool.in_use(static_cast<std::int32_t>(p)) ? 1 : 0);
    s.used = pool.used_pages();
    s.released = pool.pages_released();
    for (const Sequence<T>& q : seqs) {
      s.tables.push_back(q.table);
      s.lengths.push_back(q.length);
      s.positions.push_back(q.positions);
      if (!q.cache) continue;
      for (std::size_t h = 0; h < nkv; ++h)
        for (std::size_t i = 0; i < q.length; ++i) s.cache_bits.push_back(bits(q.cache->scores(h)[i]));
      s.cache_bits.push_back(bits(q.cache->temperature()));
      s.cache_counts.insert(s.cache_counts.end(), {q.cache->budget(), q.cache->recent_window(), q.cache->step(),
                                                   q.cache->pages_freed(), q.cache->pages_in_use()});
    }
    return s;
  }

  bool row_matches(std::size_t i, std::size_t slot) const {
    const Sequence<T>& s = seqs[i];
    std::vector<unsigned char> want(hd * sizeof(T));
    for (std::size_t h = 0; h < nkv; ++h) {
      row_bytes(i, s.positions[slot], h, false, want.data(), want.size());
      if (std::memcmp(s.view.k_row(h, slot), want.data(), want.size()) != 0) return false;
      row_bytes(i, s.positions[slot], h, true, want.data(), want.size());
      if (std::memcmp(s.view.v_row(h, slot), want.data(), want.size()) != 0) return false;
    }
    return true;
  }

  void check() {
    // ---- pool bookkeeping ----
    std::vector<int> owner(num_pages, -1);
    std::size_t expected_used = strays.size();
    auto own = [&](std::int32_t p, int who, const std::string& what) {
      KVFUZZ_CHECK(p >= 0 && static_cast<std::size_t>(p) < num_pages, what, ": page id ", p, " out of range");
      KVFUZZ_CHECK(pool.in_use(p), what, ": page ", p, " is held but not in use in the pool");
      KVFUZZ_CHECK(owner[static_cast<std::size_t>(p)] == -1, what, ": page ", p, " is owned twice (also by ",
                   owner[static_cast<std::size_t>(p)], ")");
      owner[static_cast<std::size_t>(p)] = who;
    };
    for (std::int32_t p : strays) own(p, 99, "harness page");
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const Sequence<T>& s = seqs[i];
      KVFUZZ_CHECK(s.length <= s.view.capacity(), where(i), ": length ", s.length, " > capacity");
      const std::size_t used = s.view.pages_used();
      expected_used += used;
      for (std::size_t e = 0; e < s.table.size(); ++e) {
        if (e < used)
          own(s.table[e], static_cast<int>(i), where(i) + " table[" + std::to_string(e) + "]");
        else
          KVFUZZ_CHECK(s.table[e] == kNoPage, where(i), ": table[", e, "] = ", s.table[e], " past pages_used ", used,
                       " is not kNoPage");
      }
      if (s.cache) {
        KVFUZZ_CHECK(s.cache->pages_in_use() == used, where(i), ": pages_in_use ", s.cache->pages_in_use(), " != ",
                     used);
        KVFUZZ_CHECK(s.cache->pages_freed() >= s.freed_seen, where(i), ": pages_freed went down");
        for (std::size_t h = 0; h < nkv; ++h)
          KVFUZZ_CHECK(s.cache->length(h) == s.length, where(i), ": length(", h, ") disagrees with the view");
      }
    }
    KVFUZZ_CHECK(pool.used_pages() == expected_used, "pool: used_pages ", pool.used_pages(),
                 " != Σ ceil(length / page_size) + harness pages = ", expected_used);
    for (std::size_t p = 0; p < num_pages; ++p)
      KVFUZZ_CHECK(pool.in_use(static_cast<std::int32_t>(p)) == (owner[p] != -1), "pool: page ", p,
                   " in use but owned by nobody (a leak)");
    KVFUZZ_CHECK(pool.pages_released() >= released_seen, "pool: pages_released went down");
    if (engine.on) {
      KVFUZZ_CHECK(engine.free.size() == pool.free_pages(), "engine: ", engine.free.size(), " free pages, pool ",
                   pool.free_pages());
      for (const std::int32_t p : engine.free) KVFUZZ_CHECK(!pool.in_use(p), "engine: free page ", p, " is in use");
    }
    released_seen = pool.pages_released();

    // ---- every sequence's slots and its cache's kept set ----
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      Sequence<T>& s = seqs[i];
      if (s.cache) s.freed_seen = s.cache->pages_freed();
      for (std::size_t slot = 0; slot < s.length; ++slot)
        KVFUZZ_CHECK(row_matches(i, slot), where(i), ": slot ", slot, " K/V bytes are not position ",
                     s.positions[slot], "'s");
      if (!s.prefilled) continue;
      KVFUZZ_CHECK(s.managed <= s.length, where(i), ": managed ", s.managed, " > length ", s.length);
      const std::set<std::int64_t> acc(s.accepted.begin(), s.accepted.end());
      std::vector<std::int64_t> kept(s.positions.begin(), s.positions.begin() + static_cast<std::ptrdiff_t>(s.managed));
      for (std::size_t slot = 0; slot < s.managed; ++slot) {
        KVFUZZ_CHECK(acc.count(kept[slot]) == 1, where(i), ": slot ", slot, " position ", kept[slot],
                     " was never accepted");
        for (std::size_t h = 0; h < nkv; ++h) {
          const float sc = s.cache->scores(h)[slot];
          KVFUZZ_CHECK(std::isfinite(sc) && sc >= 0.0f, where(i), ": head ", h, " slot ", slot, " score ", sc);
        }
      }
      if (s.page_unit) {  // no K/V moved: the kept positions are in accepted order; start pages untouched
        KVFUZZ_CHECK(std::is_sorted(kept.begin(), kept.end()), where(i), ": page unit reordered positions");
        KVFUZZ_CHECK(std::equal(s.start_positions.begin(), s.start_positions.end(), kept.begin()), where(i),
                     ": a start page was evicted");
      }
      std::vector<std::int64_t> sorted = kept;
      std::sort(sorted.begin(), sorted.end());
      KVFUZZ_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), where(i),
                   " holds a position twice");
      const std::size_t m = s.managed;
      if (s.any_kept) continue;
      if (s.streaming && !s.page_unit) {
        const std::size_t first = std::min(s.sinks, m);
        std::vector<std::int64_t> expect(s.accepted.begin(), s.accepted.begin() + static_cast<std::ptrdiff_t>(first));
        expect.insert(expect.end(), s.accepted.end() - static_cast<std::ptrdiff_t>(m - first), s.accepted.end());
        KVFUZZ_CHECK(sorted == expect, where(i), ": StreamingLLM kept set differs from sinks + recent");
      } else {
        std::size_t w = s.cache->recent_window();
        if (s.page_unit) w = std::max<std::size_t>(w, 1);
        w = std::min(w, m);
        for (std::size_t a = s.accepted.size() - w; a < s.accepted.size(); ++a)
          KVFUZZ_CHECK(std::binary_search(sorted.begin(), sorted.end(), s.accepted[a]), where(i),
                       ": evicted position ", s.accepted[a], " inside the recent window w = ", w);
      }
    }
  }

  template <class F>
  bool call(const char* op, std::size_t i, F&& f) {
    const Snapshot before = snapshot();
    static const bool trace = std::getenv("KVFUZZ_TRACE") != nullptr;
    if (trace) std::fprintf(stderr, "%s %s (length %zu, pool used %zu)\n", where(i).c_str(), op, seqs[i].length,
                            pool.used_pages());
    try {
      f();
      return true;
    } catch (const std::invalid_argument& e) {
      if (trace) std::fprintf(stderr, "  -> invalid_argument: %s\n", e.what());
    } catch (const std::length_error& e) {
      if (trace) std::fprintf(stderr, "  -> length_error: %s\n", e.what());
    } catch (const EngineError& e) {
      if (trace) std::fprintf(stderr, "  -> engine: %s\n", e.what());
    }
    KVFUZZ_CHECK(snapshot() == before, where(i), ": ", op, " threw but changed the state");
    return false;
  }

  void append(std::size_t i, std::int64_t pos) {
    std::vector<T> kn(nkv * hd), vn(nkv * hd);
    for (std::size_t h = 0; h < nkv; ++h) {
      row_bytes(i, pos, h, false, reinterpret_cast<unsigned char*>(kn.data() + h * hd), hd * sizeof(T));
      row_bytes(i, pos, h, true, reinterpret_cast<unsigned char*>(vn.data() + h * hd), hd * sizeof(T));
    }
    pool.append(seqs[i].view, pos, kn.data(), vn.data());
  }
};

std::vector<float> pick_floats(FuzzedDataProvider& in, std::size_t count) {
  std::vector<float> x(count);
  const int mode = in.ConsumeIntegralInRange<int>(0, 7);  // 0..5: clean; 6: hostile; 7: all zero
  for (float& f : x) {
    if (mode == 7) {
      f = 0.0f;
      continue;
    }
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (mode < 6 || b < 200) {
      f = b == 255 ? -kInf : (static_cast<float>(b) - 100.0f) / 8.0f;
      continue;
    }
    static const float hostile[] = {kNaN, kInf, -kInf, 3.4e38f, -3.4e38f, 1e-45f, 0.0f};
    f = hostile[b % 7];
  }
  return x;
}

std::size_t pick_count(FuzzedDataProvider& in, std::size_t cap) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return std::numeric_limits<std::size_t>::max();
    case 1: return std::size_t{1} << 53;
    default: return in.ConsumeIntegralInRange<std::size_t>(0, cap + 2);
  }
}

template <class T>
void make_cache_for(FuzzedDataProvider& in, Sequence<T>& s, std::size_t nkv, PagePool& pool) {
  CacheConfig c;
  c.n_q_heads = nkv * in.ConsumeIntegralInRange<std::size_t>(1, 3);
  int hostile_field = -1;  // issue 51: a cache over a copy of the view with this field huge must be refused
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
    const std::size_t v = in.ConsumeIntegralInRange<std::size_t>(0, 15);
    if (v < 8) c.n_q_heads = v;
    else hostile_field = static_cast<int>(v - 8) % 6;
  }
  const std::size_t hostile_value = hostile_field >= 0 ? in.PickValueInArray(kvfuzz::kHugeSizes) : 0;
  const std::size_t cap = s.view.capacity();
  const bool budget_tokens = in.ConsumeIntegralInRange<int>(0, 3) != 0, recent_tokens = in.ConsumeBool();
  const std::size_t budget_count = pick_count(in, cap), recent_count = pick_count(in, cap);
  const double budget_ratio = in.ConsumeIntegralInRange<int>(0, 80) / 64.0,
               recent_ratio = in.ConsumeIntegralInRange<int>(0, 70) / 64.0;
  c.shared_heads = in.ConsumeIntegralInRange<int>(0, 31) != 0;
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  PagedEvictionConfig paged;
  paged.unit = in.ConsumeBool() ? EvictUnit::page : EvictUnit::token;
  paged.start_pages = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 7) : 0;
  if (paged.start_pages >= 3) paged.start_pages = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
  paged.page_score = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? PageScore::mean : PageScore::sum;
  PolicyParams params;
  static const float taus[] = {1.0f, 2.0f, 0.5f, 0.0f, kNaN, 1e-40f};
  params.tau_init = in.PickValueInArray(taus);
  params.tau_end = in.PickValueInArray(taus);
  params.horizon = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  params.gumbel_noise = in.ConsumeBool();
  params.sinks = in.ConsumeIntegralInRange<std::size_t>(0, 5);
  static const Policy policies[] = {Policy::keyformer, Policy::h2o, Policy::streaming_llm, Policy::window,
                                    Policy::tova, Policy::snapkv, Policy::knorm, Policy::keydiff};
  const Policy p = in.PickValueInArray(policies);
  if (p == Policy::snapkv) {  // L and K including 0, even K and L > k (rejected); the three decode rules
    params.snap_window = in.ConsumeIntegralInRange<std::size_t>(0, 8);
    params.snap_kernel = in.ConsumeIntegralInRange<std::size_t>(0, 7);
    params.snap_pooling = in.ConsumeBool() ? Pooling::max : Pooling::avg;
    params.snap_decode = in.PickValueInArray({SnapDecode::h2o, SnapDecode::window, SnapDecode::keyformer});
  }
  // Mean attention (H2OMean, KeyformerMean): other policies and the page unit reject it.
  params.mean_attention = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  static const std::size_t workers[] = {1, 2, 3, 7, SIZE_MAX};
  s.executor = std::make_unique<ClaimExecutor>(ClaimExecutor{in.PickValueInArray(workers)});
  s.n_q = c.n_q_heads;
  s.page_unit = paged.unit == EvictUnit::page;
  s.start_pages = paged.start_pages;
  try {  // Budget / RecentWindow check their values too (e.g. a ratio of 0)
    c.budget = budget_tokens ? Budget::tokens(budget_count) : Budget::ratio(budget_ratio);
    c.recent = recent_tokens ? RecentWindow::tokens(recent_count) : RecentWindow::ratio(recent_ratio);
    if (hostile_field >= 0) {
      PagedKVView<T> bad = s.view;
      static const char* const names[] = {"num_pages", "page_size", "n_kv_heads", "head_dim", "max_pages",
                                          "page_stride_elements"};
      std::size_t* fields[] = {&bad.num_pages, &bad.page_size, &bad.n_kv_heads, &bad.head_dim, &bad.max_pages,
                               &bad.page_stride_elements};
      *fields[hostile_field] = hostile_value;
      const std::size_t used = pool.used_pages();
      bool built = false;
      try {
        (void)make_paged_cache(p, c, paged, bad, pool, params);
        built = true;
      } catch (const std::invalid_argument&) {
      } catch (const std::length_error&) {
      }
      KVFUZZ_CHECK(!built, "a paged cache was built over a view with ", names[hostile_field], " = ", hostile_value);
      KVFUZZ_CHECK(pool.used_pages() == used, "a refused paged cache changed the pool");
    }
    s.cache = make_paged_cache(p, c, paged, s.view, pool, params);
    s.cache->set_executor(*s.executor);
  } catch (const std::invalid_argument&) {
    s.cache.reset();
    s.name = "no cache";
    return;
  }
  // A huge start_pages is refused at construction with a token budget; a ratio budget is resolved (and the page
  // unit's rule checked) at prefill, which must then refuse it (below).
  KVFUZZ_CHECK(paged.start_pages <= 2 || c.budget.is_ratio(), "a paged cache was built with start_pages = ",
               paged.start_pages);
  s.name = std::string(policy_name(p)) + (params.mean_attention ? "+mean" : "") + (s.page_unit ? "/page" : "/token");
  s.streaming = p == Policy::streaming_llm || p == Policy::window;
  s.any_kept = p == Policy::snapkv && params.snap_decode == SnapDecode::window;
  s.sinks = p == Policy::window ? 0 : params.sinks;
}

template <class T>
void run(FuzzedDataProvider& in) {
  const std::size_t pages = in.ConsumeIntegralInRange<std::size_t>(1, 24);
  // Rarely 64-slot pages (up to 640 slots): rows over 512 slots, split into chunk ranges when an
  // executor claims more workers than there are KV heads (the path where SIZE_MAX workers wrapped).
  const std::size_t ps = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 64 : in.ConsumeIntegralInRange<std::size_t>(1, 6);
  const std::size_t nkv = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  const std::size_t hd = in.ConsumeIntegralInRange<std::size_t>(1, 4);
  const PageLayout layout = in.ConsumeBool() ? PageLayout::HND : PageLayout::NHD;
  const bool engine = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  Harness<T> H(pages, ps, nkv, hd, layout, engine ? &in : nullptr);
  const std::size_t n_seqs = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  for (std::size_t i = 0; i < n_seqs; ++i) H.add_sequence(in.ConsumeIntegralInRange<std::size_t>(1, 10));
  H.bind_views();
  for (auto& s : H.seqs) make_cache_for(in, s, nkv, H.pool);
  H.check();

  for (int op = 0; op < 128 && in.remaining_bytes() > 0; ++op) {
    const std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, H.seqs.size() - 1);
    Sequence<T>& s = H.seqs[i];
    const std::size_t n = s.length;
    const std::int64_t last = n > 0 ? s.positions[n - 1] : -1;
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: case 1: case 2: case 3: case 4: {  // append
        std::int64_t p = last + 1;
        switch (in.ConsumeIntegralInRange<int>(0, 9)) {
          case 0: p = last; break;
          case 1: p = in.ConsumeIntegralInRange<std::int64_t>(-3, 40); break;
          case 2: p = last + in.ConsumeIntegralInRange<std::int64_t>(2, 50); break;
          default: break;
        }
        const bool full = n == s.view.capacity() || (n % ps == 0 && H.pool.free_pages() == 0);
        H.engine.fault = 0;
        const bool ok = H.call("append", i, [&] { H.append(i, p); });
        const bool faulted = H.engine.fault != 0 && !full;  // only a new page asks the engine
        KVFUZZ_CHECK(ok != (full || faulted), H.where(i), ": append ",
                     ok ? "succeeded on a full table or pool, or despite a bad page from the engine" : "failed");
        break;
      }
      case 5: case 6: {  // prefill, sometimes with a wrong length or a corrupted page table
        if (!s.cache) break;
        std::size_t P = n;
        const int p_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (p_draw == 0) P = in.ConsumeIntegralInRange<std::size_t>(0, s.view.capacity() + 1);
        if (p_draw == 8) P = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        const std::vector<float> x = pick_floats(in, p_draw == 8 ? 16 : s.n_q * P * P);
        const std::vector<std::int64_t> prompt(s.positions.begin(), s.positions.begin() + static_cast<std::ptrdiff_t>(n));
        const std::size_t used = s.view.pages_used();
        const int corrupt = used >= 1 ? in.ConsumeIntegralInRange<int>(0, 11) : 0;
        if (corrupt >= 1 && corrupt <= 4) {  // a page table the pool must reject
          const std::size_t e = in.ConsumeIntegralInRange<std::size_t>(0, used - 1);
          const std::int32_t saved = s.table[e];
          std::int32_t bad = kNoPage;
          if (corrupt == 2) bad = static_cast<std::int32_t>(pages);
          if (corrupt == 3 && used >= 2) bad = s.table[(e + 1) % used];  // listed twice
          if (corrupt == 4)
            for (std::size_t p = 0; p < pages; ++p)
              if (!H.pool.in_use(static_cast<std::int32_t>(p))) bad = static_cast<std::int32_t>(p);  // a free page
          s.table[e] = bad;
          const bool ok = H.call("prefill(corrupted table)", i, [&] { s.cache->prefill(x.data(), P); });
          s.table[e] = saved;
          KVFUZZ_CHECK(!ok, H.where(i), ": prefill accepted table[", e, "] = ", bad);
          break;
        }
        const bool ok = H.call("prefill", i, [&] { s.cache->prefill(in.ConsumeIntegralInRange<int>(0, 15) != 0 ? x.data() : nullptr, P); });
        KVFUZZ_CHECK(!ok || p_draw != 8, H.where(i), ": prefill accepted prompt_len = ", P);
        KVFUZZ_CHECK(!ok || s.start_pages <= 2, H.where(i), ": prefill accepted start_pages = ", s.start_pages);
        if (!ok) break;
        KVFUZZ_CHECK(!s.prefilled, H.where(i), ": a second prefill succeeded");
        KVFUZZ_CHECK(std::is_sorted(prompt.begin(), prompt.end()), H.where(i), ": unordered prompt accepted");
        const std::size_t k = s.cache->budget();
        KVFUZZ_CHECK(k >= 1 && s.cache->recent_window() <= k, H.where(i), ": k = ", k, ", w = ",
                     s.cache->recent_window());
        if (s.page_unit) {
          KVFUZZ_CHECK(P <= k ? s.length == P : s.length >= k && s.length <= k + ps - 1, H.where(i),
                       ": page unit prefill kept ", s.length, " of ", P, " (k = ", k, ", page size ", ps, ")");
          KVFUZZ_CHECK((P - s.length) % ps == 0, H.where(i), ": page unit evicted a partial page");
        } else {
          KVFUZZ_CHECK(s.length == std::min(k, P), H.where(i), ": prefill kept ", s.length, ", expected min(k, P)");
        }
        s.accepted = prompt;
        s.managed = s.length;
        s.prefilled = true;
        s.start_positions.assign(prompt.begin(),
                                 prompt.begin() + static_cast<std::ptrdiff_t>(std::min(s.start_pages * ps, s.length)));
        break;
      }
      case 7: case 8: case 9: {  // decode step
        if (!s.cache) break;
        std::size_t m = n;
        const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, s.view.capacity() + 1);
        if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        const std::vector<float> x = pick_floats(in, m_draw == 8 ? 16 : s.n_q * m);
        const std::int64_t new_pos = m >= 1 && m <= n ? s.positions[m - 1] : 0;
        const bool ok = H.call("decode_step", i, [&] { s.cache->decode_step(in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : x.data(), m); });
        KVFUZZ_CHECK(!ok || m_draw != 8, H.where(i), ": decode_step accepted n = ", m);
        if (!ok) break;
        KVFUZZ_CHECK(s.prefilled && m == s.managed + 1 && m == n, H.where(i), ": decode_step(n = ", m,
                     ") accepted with managed ", s.managed, ", length ", n);
        KVFUZZ_CHECK(s.accepted.empty() || new_pos > s.accepted.back(), H.where(i), ": position ", new_pos,
                     " accepted after ", s.accepted.back());
        const std::size_t k = s.cache->budget();
        if (s.page_unit)
          KVFUZZ_CHECK(s.length == (m >= k + ps ? m - ps : m), H.where(i), ": page unit decode step left ", s.length,
                       " of ", m, " (k = ", k, ", page size ", ps, ")");
        else
          KVFUZZ_CHECK(s.length == std::min(m, k), H.where(i), ": decode step left ", s.length, ", expected min(n, k)");
        s.accepted.push_back(new_pos);
        s.managed = s.length;
        break;
      }
      case 10: {  // restore_position_order
        if (!s.cache) break;
        H.call("restore_position_order", i, [&] { s.cache->restore_position_order(); });
        if (s.page_unit) break;
        // The managed slots are now in ascending position order (appended ones stay where they are).
        if (s.prefilled)
          KVFUZZ_CHECK(std::is_sorted(s.positions.begin(), s.positions.begin() + static_cast<std::ptrdiff_t>(s.managed)),
                       H.where(i), ": restore_position_order left the slots unsorted");
        break;
      }
      case 11: {  // end the sequence: reset (cache) or release_sequence (no cache)
        const std::size_t pages_before = s.view.pages_used(), released_before = H.pool.pages_released();
        const bool ok = H.call("reset", i, [&] {
          if (s.cache)
            s.cache->reset(in.ConsumeIntegral<std::uint64_t>());
          else
            H.pool.release_sequence(s.view);
        });
        KVFUZZ_CHECK(ok, H.where(i), ": ending a sequence with a valid table threw");
        KVFUZZ_CHECK(s.length == 0 && H.pool.pages_released() == released_before + pages_before, H.where(i),
                     ": reset returned ", H.pool.pages_released() - released_before, " of ", pages_before, " pages");
        s.prefilled = false;
        s.managed = 0;
        s.accepted.clear();
        s.start_positions.clear();
        break;
      }
      case 12: case 13: {  // the harness takes a page
        const bool empty = H.pool.free_pages() == 0;
        std::int32_t got = kNoPage;
        H.engine.fault = 0;
        const bool ok = H.call("allocate", i, [&] { got = H.pool.allocate(); });
        KVFUZZ_CHECK(ok != (empty || H.engine.fault != 0), "pool: allocate ",
                     ok ? "succeeded on an empty pool or took a bad page" : "failed with free pages");
        if (ok) H.strays.push_back(got);
        break;
      }
      default: {  // release_list of the harness's pages, each maybe named twice, sometimes with a bad id
        if (H.strays.empty()) break;
        const std::size_t cnt = in.ConsumeIntegralInRange<std::size_t>(1, H.strays.size());
        std::vector<std::int32_t> list(H.strays.end() - static_cast<std::ptrdiff_t>(cnt), H.strays.end());
        const std::size_t dups = in.ConsumeIntegralInRange<std::size_t>(0, 3);
        for (std::size_t d = 0; d < dups; ++d) list.push_back(list[in.ConsumeIntegralInRange<std::size_t>(0, cnt - 1)]);
        const int bad = in.ConsumeIntegralInRange<int>(0, 5);
        bool invalid = bad == 0 || bad == 1;
        if (bad == 0) list.push_back(static_cast<std::int32_t>(pages));
        if (bad == 1) list.push_back(-1);
        if (bad == 2) {  // a page that is free
          for (std::size_t p = 0; p < pages && !invalid; ++p)
            if (!H.pool.in_use(static_cast<std::int32_t>(p))) {
              list.push_back(static_cast<std::int32_t>(p));
              invalid = true;
            }
        }
        std::reverse(list.begin(), list.end());
        std::size_t freed = 0;
        const bool ok = H.call("release_list", i, [&] { freed = H.pool.release_list(list.data(), list.size()); });
        KVFUZZ_CHECK(ok != invalid, "pool: release_list ", ok ? "accepted a bad id" : "of pages in use threw");
        if (ok) {
          KVFUZZ_CHECK(freed == cnt, "pool: release_list freed ", freed, " of ", cnt, " distinct pages");
          H.strays.resize(H.strays.size() - cnt);
        }
        break;
      }
    }
    H.check();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0)
    run<Eigen::half>(in);
  else
    run<float>(in);
  return 0;
}
