// kvevict fuzzing — paged_ops_harness.hpp: fuzz_paged_ops' model of one layer's pool and its sequences: the K/V
// bytes each sequence appends, the engine behind a callback pool (and its faults), the executor that claims any
// worker count, the snapshot a throwing call must leave unchanged, and the invariants checked after every call.
// SPDX-License-Identifier: Apache-2.0
//
// Included by paged_ops.cpp only: one translation unit, so its helpers keep the internal linkage they had in one
// file. The invariants are listed at the top of paged_ops.cpp.
#pragma once

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

}  // namespace
