// kvevict fuzzing — cache_ops_harness.hpp: fuzz_cache_ops' harness: what it knows of the subject, each call run on
// the subject (and its twin on real threads) with a throw leaving the state unchanged, and the invariants checked
// after every call (the chunk bookkeeping and the one-shot twin of a chunked prompt among them).
// SPDX-License-Identifier: Apache-2.0
//
// Included by cache_ops.cpp only. The calls decoded from the input (Harness::run): cache_ops_calls.hpp.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <kvevict/kvevict.hpp>

#include "cache_ops_layer.hpp"
#include "cache_ops_subject.hpp"
#include "fuzz_util.hpp"

namespace {

using namespace kvevict;

template <class T>
struct Harness {
  Side<T>& main;
  Side<T>* twin;  // the same cache on real threads (or null): every call must agree bit for bit
  std::function<void(FuzzedDataProvider&)> to_config;  // positions a fresh provider where the config starts
  const std::uint8_t* data;                           // the input, to build one-shot twins from
  std::size_t size;
  std::vector<std::int64_t> accepted;  // positions accepted by prefill / decode since the last reset, ascending
  std::size_t managed = 0;             // slots [0, managed) are the cache's (the rest: appended since)
  bool prefilled = false;
  bool chunking = false;               // some chunk was scored, finish_prefill not yet called
  bool replayable = true;              // every chunk so far is materialised with the same noise mode
  std::vector<Chunk> chunks;
  std::string error;                   // the last call's exception message
  bool reseeded = false;               // reset(seed) since construction: the noise seed is `seed`
  std::uint64_t seed = 0;

  Layer<T>& layer() { return main.layer; }
  const Layer<T>& layer() const { return main.layer; }
  Subject& s() { return main.s; }
  const Subject& s() const { return main.s; }
  std::string where() const { return main.s.name; }

  void check_common() const {
    const KVView<T>& kv = layer().view;
    for (std::size_t h = 0; h < layer().nkv; ++h) {
      KVFUZZ_CHECK(kv.lengths[h] <= layer().cap, where(), ": head ", h, " length ", kv.lengths[h], " > capacity");
      KVFUZZ_CHECK(kv.lengths[h] == kv.lengths[0], where(), ": head ", h, " length ", kv.lengths[h], ", head 0 ",
                   kv.lengths[0]);
      KVFUZZ_CHECK(s().cache->length(h) == kv.lengths[h], where(), ": length(h) disagrees with the view");
    }
    KVFUZZ_CHECK(managed <= kv.lengths[0], where(), ": managed ", managed, " > length ", kv.lengths[0]);
    if (!prefilled) return;
    const std::set<std::int64_t> acc(accepted.begin(), accepted.end());
    std::vector<std::int64_t> expect;  // StreamingLLM's exact kept set
    if (s().kind == Kind::sink_recent) {
      const std::size_t first = std::min(s().sinks, managed);
      expect.assign(accepted.begin(), accepted.begin() + static_cast<std::ptrdiff_t>(first));
      expect.insert(expect.end(), accepted.end() - static_cast<std::ptrdiff_t>(managed - first), accepted.end());
    }
    const std::size_t w = std::min(s().cache->recent_window(), managed);
    for (std::size_t h = 0; h < layer().nkv; ++h) {
      const std::int64_t* pos = kv.head_positions(h);
      std::vector<std::int64_t> kept(pos, pos + managed);
      std::sort(kept.begin(), kept.end());
      KVFUZZ_CHECK(std::adjacent_find(kept.begin(), kept.end()) == kept.end(), where(), ": head ", h,
                   " holds a position twice");
      for (std::size_t i = 0; i < managed; ++i) {
        KVFUZZ_CHECK(acc.count(pos[i]) == 1, where(), ": head ", h, " slot ", i, " position ", pos[i],
                     " was never accepted");
        KVFUZZ_CHECK(layer().row_matches(h, i), where(), ": head ", h, " slot ", i, " K/V bytes are not position ",
                     pos[i], "'s");
        const float sc = s().cache->scores(h)[i];
        KVFUZZ_CHECK(std::isfinite(sc) && sc >= 0.0f && !std::signbit(sc), where(), ": head ", h, " slot ", i,
                     " score ", sc);
      }
      if (s().kind == Kind::other) continue;
      if (s().kind == Kind::sink_recent) {
        KVFUZZ_CHECK(kept == expect, where(), ": head ", h, " StreamingLLM kept set differs from sinks + recent");
      } else {
        for (std::size_t i = accepted.size() - w; i < accepted.size(); ++i)
          KVFUZZ_CHECK(std::binary_search(kept.begin(), kept.end(), accepted[i]), where(), ": head ", h,
                       " evicted position ", accepted[i], " inside the recent window w = ", w);
      }
    }
  }

  /// Runs `f(layer, cache)` on one side; returns whether it succeeded (the message in `err`). A throw
  /// must leave that side exactly as it was.
  template <class F>
  static bool run_on(Side<T>& side, const char* op, F& f, std::string& err) {
    const Snapshot before = snapshot(side.layer, *side.s.cache);
    static const bool trace = std::getenv("KVFUZZ_TRACE") != nullptr;  // print every call (reproducing)
    if (trace) {
      std::fprintf(stderr, "%s %s: length %zu, positions", side.s.name.c_str(), op, side.layer.view.lengths[0]);
      for (std::size_t i = 0; i < side.layer.view.lengths[0]; ++i)
        std::fprintf(stderr, " %lld", static_cast<long long>(side.layer.view.head_positions(0)[i]));
      std::fprintf(stderr, "\n");
    }
    try {
      f(side.layer, *side.s.cache);
      err.clear();
      return true;
    } catch (const std::invalid_argument& e) {
      err = e.what();
    } catch (const std::length_error& e) {
      err = e.what();
    }
    if (trace) std::fprintf(stderr, "  -> %s\n", err.c_str());
    KVFUZZ_CHECK(snapshot(side.layer, *side.s.cache) == before, side.s.name, ": ", op,
                 " threw but changed the state");
    return false;
  }

  /// `f(layer, cache)` on the subject and on its twin on real threads: same outcome, same message,
  /// and the same state bit for bit (K/V bytes, positions, lengths, scores, budget, window, step, τ).
  template <class F>
  bool call(const char* op, F&& f) {
    const bool ok = run_on(main, op, f, error);
    if (twin == nullptr) return ok;
    std::string twin_error;
    const bool twin_ok = run_on(*twin, op, f, twin_error);
    KVFUZZ_CHECK(ok == twin_ok && error == twin_error, where(), ": ", op, " on real threads: ",
                 twin_ok ? "ok" : twin_error, ", serial: ", ok ? "ok" : error);
    KVFUZZ_CHECK(snapshot(main.layer, *main.s.cache) == snapshot(twin->layer, *twin->s.cache), where(), ": ", op,
                 " on real threads left another state than the serial executor");
    return ok;
  }

  std::int64_t pick_position(FuzzedDataProvider& in) const {
    const std::size_t n = layer().view.lengths[0];
    const std::int64_t last = n > 0 ? layer().view.head_positions(0)[n - 1] : -1;
    auto plus = [last](std::int64_t d) {  // saturating: the harness itself must not overflow
      std::int64_t r = 0;
      if (__builtin_add_overflow(last, d, &r)) return d > 0 ? std::numeric_limits<std::int64_t>::max()
                                                            : std::numeric_limits<std::int64_t>::min();
      return r;
    };
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: return last;
      case 1: return plus(-1);
      case 2: return std::numeric_limits<std::int64_t>::max();
      case 3: return std::numeric_limits<std::int64_t>::min();
      case 4: return in.ConsumeIntegralInRange<std::int64_t>(-3, 60);
      case 5: return plus(in.ConsumeIntegralInRange<std::int64_t>(2, 1000));
      default: return plus(1);
    }
  }

  /// After a successful chunk of `C` rows over `n` slots whose new positions were `fresh`.
  void took_chunk(std::size_t C, std::size_t n, const std::vector<std::int64_t>& fresh) {
    const KVView<T>& kv = layer().view;
    KVFUZZ_CHECK(!prefilled, where(), ": a chunk was accepted after the prompt was finished");
    KVFUZZ_CHECK(C >= 1 && n == managed + C && fresh.size() == C, where(), ": prefill_chunk(C = ", C, ", n = ", n,
                 ") accepted with ", managed, " tokens held");
    KVFUZZ_CHECK(std::is_sorted(fresh.begin(), fresh.end()) &&
                     std::adjacent_find(fresh.begin(), fresh.end()) == fresh.end() &&
                     (accepted.empty() || fresh.front() > accepted.back()),
                 where(), ": a chunk with positions that do not rise was accepted");
    const std::size_t k = s().cache->budget();  // 0 until the prompt is finished
    KVFUZZ_CHECK(k == 0, where(), ": budget ", k, " resolved before finish_prefill");
    accepted.insert(accepted.end(), fresh.begin(), fresh.end());
    managed = kv.lengths[0];
    KVFUZZ_CHECK(managed <= n, where(), ": a chunk left ", managed, " slots of ", n);
    chunking = true;
  }

  /// After a finished unbounded chunked prompt of materialised chunks: a fresh cache with the same
  /// configuration, given the whole prompt in one prefill, must hold the same slots bit for bit.
  void compare_with_one_shot() {
    if (!replayable || chunks.empty()) return;
    const std::size_t P = accepted.size(), nq = s().n_q;
    const bool noisy = !chunks.front().z.empty();
    std::vector<float> x(nq * P * P, kNaN), z(noisy ? nq * P * P : 0, kNaN);
    std::size_t held = 0;
    for (const Chunk& c : chunks) {
      for (std::size_t h = 0; h < nq; ++h)
        for (std::size_t i = 0; i < c.C; ++i)
          for (std::size_t col = 0; col <= held + i; ++col) {
            x[(h * P + held + i) * P + col] = c.x[(h * c.C + i) * c.n + col];
            if (noisy) z[(h * P + held + i) * P + col] = c.z[(h * c.C + i) * c.n + col];
          }
      held += c.C;
    }
    const Layer<T>& L = layer();
    Side<T> one{Layer<T>(L.nkv, L.cap, L.hd, L.view.slot_stride != L.row_stride, L.row_stride - L.hd), {}};
    FuzzedDataProvider again(data, size);
    to_config(again);
    one.s = make_subject(again, pick_config(again, L.nkv, L.cap), one.layer.view);
    if (reseeded) one.s.cache->reset(seed);  // the same noise seed as the chunked cache
    for (const std::int64_t p : accepted) one.layer.append(p);
    one.s.cache->prefill(x.data(), P, noisy ? z.data() : nullptr);
    for (std::size_t h = 0; h < L.nkv; ++h) {
      KVFUZZ_CHECK(one.layer.view.lengths[h] == L.view.lengths[h], where(), ": chunked prompt kept ",
                   L.view.lengths[h], " slots, one-shot ", one.layer.view.lengths[h]);
      for (std::size_t i = 0; i < L.view.lengths[h]; ++i) {
        KVFUZZ_CHECK(one.layer.view.head_positions(h)[i] == L.view.head_positions(h)[i], where(), ": head ", h,
                     " slot ", i, ": chunked position ", L.view.head_positions(h)[i], ", one-shot ",
                     one.layer.view.head_positions(h)[i]);
        KVFUZZ_CHECK(bits(one.s.cache->scores(h)[i]) == bits(s().cache->scores(h)[i]), where(), ": head ", h,
                     " slot ", i, ": chunked score ", s().cache->scores(h)[i], ", one-shot ",
                     one.s.cache->scores(h)[i], " (not bit for bit)");
      }
    }
  }

  void forget() {
    open_step = false;  // reset abandons an open per-head step
    accepted.clear();
    managed = 0;
    prefilled = chunking = false;
    replayable = true;
    chunks.clear();
  }

  /// Up to 96 calls decoded from `in`, the invariants checked after each (cache_ops_calls.hpp).
  void run(FuzzedDataProvider& in);

  CacheConfig config_;
  const CacheConfig& config() const { return config_; }
  // The per-head decode step (after config_: the aggregate initialisation above stops at config_).
  bool open_step = false;              // a per-head decode step is open (begin_decode_step succeeded)
  std::size_t step_m = 0;              // its n
  std::int64_t step_pos = 0;           // its new token's position
  std::vector<int> done;               // [kv_head]: scored in the open step
};

}  // namespace
