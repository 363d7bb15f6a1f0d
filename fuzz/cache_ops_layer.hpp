// kvevict fuzzing — cache_ops_layer.hpp: the storage fuzz_cache_ops runs a cache over (one layer in a chosen
// layout, K/V bytes deterministic per position and head), the snapshot a throwing call must leave unchanged,
// the executor that claims any worker count, and the fuzzed cache (Subject).
// SPDX-License-Identifier: Apache-2.0
//
// Included by cache_ops.cpp only (with cache_ops_subject.hpp and cache_ops_harness.hpp): one translation unit,
// so its helpers keep the internal linkage they had in one file.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <kvevict/kvevict.hpp>

namespace {

using namespace kvevict;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::size_t kMaxCapacity = 40;

// ---- deterministic K/V bytes per (position, head): any append of the same position writes the same row
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
void row_bytes(std::int64_t pos, std::size_t head, bool value, unsigned char* out, std::size_t n) {
  std::uint64_t s = mix(static_cast<std::uint64_t>(pos) * 8 + head * 2 + (value ? 1 : 0));
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) s = mix(s);
    out[i] = static_cast<unsigned char>(s >> (8 * (i % 8)));
  }
}

/// One layer's storage with a chosen layout and the view over it.
template <class T>
struct Layer {
  std::size_t nkv, cap, hd, row_stride;
  std::vector<T> k, v;
  std::vector<std::int64_t> pos;
  std::vector<std::size_t> len;
  KVView<T> view;

  Layer(std::size_t nkv_, std::size_t cap_, std::size_t hd_, bool slot_major, std::size_t pad)
      : nkv(nkv_), cap(cap_), hd(hd_), row_stride(hd_ + pad), k(nkv_ * cap_ * (hd_ + pad)), v(k.size()),
        pos(nkv_ * cap_, 0), len(nkv_, 0) {
    view.k = k.data();
    view.v = v.data();
    view.positions = pos.data();
    view.lengths = len.data();
    view.n_kv_heads = nkv;
    view.capacity = cap;
    view.head_dim = hd;
    view.head_stride = slot_major ? row_stride : cap * row_stride;
    view.slot_stride = slot_major ? nkv * row_stride : row_stride;
    view.validate();
  }
  void append(std::int64_t p) {
    std::vector<T> kn(nkv * hd), vn(nkv * hd);
    for (std::size_t h = 0; h < nkv; ++h) {
      row_bytes(p, h, false, reinterpret_cast<unsigned char*>(kn.data() + h * hd), hd * sizeof(T));
      row_bytes(p, h, true, reinterpret_cast<unsigned char*>(vn.data() + h * hd), hd * sizeof(T));
    }
    view.append(p, kn.data(), vn.data());
  }
  bool row_matches(std::size_t h, std::size_t s) const {
    std::vector<unsigned char> want(hd * sizeof(T));
    row_bytes(view.head_positions(h)[s], h, false, want.data(), want.size());
    if (std::memcmp(view.k_row(h, s), want.data(), want.size()) != 0) return false;
    row_bytes(view.head_positions(h)[s], h, true, want.data(), want.size());
    return std::memcmp(view.v_row(h, s), want.data(), want.size()) == 0;
  }
};

/// Everything a failed call must leave unchanged.
struct Snapshot {
  std::vector<unsigned char> k, v;
  std::vector<std::int64_t> pos;
  std::vector<std::size_t> len;
  std::vector<std::uint32_t> score_bits;
  std::size_t budget = 0, window = 0, step = 0;
  std::uint32_t tau_bits = 0;
  bool operator==(const Snapshot& o) const {
    return k == o.k && v == o.v && pos == o.pos && len == o.len && score_bits == o.score_bits &&
           budget == o.budget && window == o.window && step == o.step && tau_bits == o.tau_bits;
  }
};

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

template <class T>
Snapshot snapshot(const Layer<T>& layer, const CacheInterface& cache) {
  Snapshot s;
  const auto* kb = reinterpret_cast<const unsigned char*>(layer.k.data());
  const auto* vb = reinterpret_cast<const unsigned char*>(layer.v.data());
  s.k.assign(kb, kb + layer.k.size() * sizeof(T));
  s.v.assign(vb, vb + layer.v.size() * sizeof(T));
  s.pos = layer.pos;
  s.len = layer.len;
  for (std::size_t h = 0; h < layer.nkv; ++h) {
    const float* sc = cache.scores(h);
    for (std::size_t i = 0; i < layer.len[h]; ++i) s.score_bits.push_back(bits(sc[i]));
  }
  s.budget = cache.budget();
  s.window = cache.recent_window();
  s.step = cache.step();
  s.tau_bits = bits(cache.temperature());
  return s;
}

enum class Kind { recent_topk, sink_recent, other };  // other: only the policy-independent invariants

/// An executor that claims `w` workers and runs the tasks serially, forwards or backwards: it
/// drives the cache's task splitting (prefill per query head; a step's row checks, rows and
/// evictions per KV head) under the invariants below and the sanitizers. Rows split into 512-slot
/// ranges when a view (rarely) has more than 512 slots and the executor claims more workers than
/// there are KV heads (up to SIZE_MAX).
struct OrderExecutor {
  std::size_t w = 1;
  bool backwards = false;
  std::size_t workers() const { return w; }
  template <class F>
  void parallel_for(std::size_t n_tasks, F&& f) const {
    for (std::size_t i = 0; i < n_tasks; ++i) f(backwards ? n_tasks - 1 - i : i);
  }
};

/// The fuzzed cache and what the harness knows about it.
struct Subject {
  std::unique_ptr<OrderExecutor> executor;  // outlives `cache`, which refers to it
  std::unique_ptr<CacheInterface> cache;
  Kind kind = Kind::recent_topk;
  std::size_t sinks = 0;
  std::size_t n_q = 1;
  std::string name;
};

}  // namespace
