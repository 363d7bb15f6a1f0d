// kvevict fuzzing — cache_ops: the public Cache API under random configurations and call sequences.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes choose a configuration (every policy through the aliases, a few more template
// combinations and make_cache, SnapKV with its three decode rules and hostile L / K; 1–4 KV heads; GQA
// group 1–3; head_dim 1–8; float / half / bf16; head-major and slot-major strided layouts with
// padding; budgets and windows as counts and ratios including 0, > k and huge; sinks; τ values
// including 0, negative, tiny, NaN and inf; shared heads) and then a sequence of operations (append
// with valid and invalid positions, prefill and decode_step with random / NaN / ±inf / huge logits,
// wrong lengths, null pointers, injected noise, restore_position_order, reset, out-of-range queries;
// the per-head decode step: begin_decode_step, score_decode_head in any order with bad, repeated and
// out-of-range heads, end_decode_step, and every other call while a step is open).
// The cache runs on an executor that claims 1, 2, 3, 7 or 16 workers and runs the tasks serially in
// either order. Size arguments also reach 2^64 − 1 (issue 51; kvfuzz::kHugeSizes, all >= 2^62): a view
// field (n_kv_heads, capacity, head_dim, a stride) at construction, prefill's P, a step's or a chunk's n and
// C, prefill_chunk_qk's n_q_heads and its scratch's capacity; each must be refused (invalid_argument or
// length_error) with the state and storage unchanged, while the harness's own buffers stay small.
//
// Throwing std::invalid_argument or std::length_error is allowed. After every call the
// invariants below are checked; a violation aborts (a libFuzzer finding):
//  - lengths are equal across KV heads and <= capacity;
//  - after a successful prefill every head holds min(k, P) slots, after a successful decode step
//    min(n, k) (so <= k);
//  - the slots the cache manages hold distinct positions, each one accepted by a prefill or decode
//    step since the last reset, and each slot's K/V bytes are the ones appended with its position;
//  - the kept set obeys the policy: RecentTopK keeps the w most recently accepted positions;
//    StreamingLLM keeps exactly the first min(sinks, m) and the last m - min(sinks, m) accepted
//    (SnapKV with the window decode rule: no kept-set rule, only the other invariants);
//  - every live score is finite and >= 0 (scores are sums of probabilities);
//  - after a throw: lengths, positions, scores, every K/V byte of the storage, budget, window,
//    step and temperature are exactly as before the call.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <kvevict/kvevict.hpp>

#include "fuzz_util.hpp"
#include "thread_pool.hpp"

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

float pick_tau(FuzzedDataProvider& in) {
  static const float taus[] = {1.0f, 2.0f, 0.5f, 0.0f, -1.0f, kNaN, kInf, -kInf, 1e-40f, 1e-38f,
                               std::numeric_limits<float>::min(), 1e-30f, 1e30f,
                               std::numeric_limits<float>::max(), 1e-45f, 1e-20f};
  return in.PickValueInArray(taus);
}

std::size_t pick_count(FuzzedDataProvider& in, std::size_t cap) {
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0: return std::numeric_limits<std::size_t>::max();
    case 1: return std::size_t{1} << 53;
    case 2: return (std::size_t{1} << 53) + 1;
    case 3: return std::size_t{1} << 63;
    case 4: return std::numeric_limits<std::size_t>::max() - 1;
    case 5: return in.ConsumeIntegralInRange<std::size_t>(0, 255);
    default: return in.ConsumeIntegralInRange<std::size_t>(0, cap + 3);
  }
}

double pick_ratio(FuzzedDataProvider& in, bool window) {
  switch (in.ConsumeIntegralInRange<int>(0, 11)) {
    case 0: return 0.0;
    case 1: return -0.5;
    case 2: return std::numeric_limits<double>::quiet_NaN();
    case 3: return std::numeric_limits<double>::infinity();
    case 4: return window ? 1.0 : 1e300;
    case 5: return 1e-300;
    case 6: return window ? 1.0000001 : 1e15;
    case 7: return 1.0;
    default: return in.ConsumeIntegralInRange<int>(0, 160) / 64.0;
  }
}

CacheConfig pick_config(FuzzedDataProvider& in, std::size_t nkv, std::size_t cap) {
  CacheConfig c;
  const std::size_t g = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  c.n_q_heads = nkv * g;
  static const std::size_t huge_q[] = {(std::size_t{1} << 40) + 1, (std::size_t{1} << 62) + 1, SIZE_MAX};
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0)  // wrong, and (validated before any allocation) huge
    c.n_q_heads = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 13) : in.PickValueInArray(huge_q);
  c.budget = in.ConsumeBool() ? Budget::tokens(pick_count(in, cap)) : Budget::ratio(pick_ratio(in, false));
  c.recent = in.ConsumeBool() ? RecentWindow::tokens(pick_count(in, cap)) : RecentWindow::ratio(pick_ratio(in, true));
  c.shared_heads = in.ConsumeBool();
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  c.bounded_prefill = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  c.max_prefill_chunk = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(0, cap + 2);
  return c;
}

/// A key score: the key's first element (one in (-1e30, 0) as -0.0), so the K bytes give negative, NaN,
/// ±inf, denormal and many -0.0 scores (issue 37: a -0.0 passed the check and its bits outranked every
/// positive score).
struct FirstElementKeyScore {
  static constexpr bool kUsesLogits = false, kAccumulates = false, kUsesTemperature = false, kPrefillLastRow = false;
  bool noisy() const { return false; }
  float key_score(const float* key, std::size_t) const noexcept {  // a frequent -0.0
    return key[0] < 0.0f && key[0] > -1e30f ? -0.0f : key[0];
  }
};
/// H2O's score with a selection hook that turns scores above 1.5 into NaN and below 0.01 into -0.0
/// (issue 37: an unchecked NaN made prefill keep k + 1 tokens).
struct HostileSelectionScore : AccumulatedAttentionScore {
  static constexpr const char* kName = "HostileSelection";
  void selection_scores(const float* s, std::size_t n, float* out) const noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = s[i] > 1.5f ? kNaN : s[i] < 0.01f ? -0.0f : s[i];
  }
};

template <class T>
Subject make_subject(FuzzedDataProvider& in, const CacheConfig& config, const KVView<T>& kv) {
  Subject s;
  s.n_q = config.n_q_heads;
  const int which = in.ConsumeIntegralInRange<int>(0, 7);
  // The same byte as ConsumeBool (its low bit); H2O and TOVA ignore the noise bit, so its byte's top
  // values pick the issue-37 scores there instead, without moving any other seed's bytes.
  const std::uint8_t noise_byte = in.ConsumeIntegral<std::uint8_t>();
  const bool noise = (noise_byte & 1) != 0, hostile_score = noise_byte >= 0xFE;
  if (which == 3 && hostile_score) {
    s.cache = std::make_unique<Cache<FirstElementKeyScore, ConstantTemperature, RecentTopKSelection>>(config, kv);
    s.name = "FirstElementKeyScore";
    return s;
  }
  if (which == 4 && hostile_score) {
    s.cache = std::make_unique<Cache<HostileSelectionScore, ConstantTemperature, RecentTopKSelection>>(config, kv);
    s.name = "HostileSelectionScore";
    return s;
  }
  switch (which) {
    case 0: {
      const float a = pick_tau(in), b = pick_tau(in);
      const std::size_t horizon = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 5) : pick_count(in, 4);
      s.cache = std::make_unique<Keyformer>(config, kv, GumbelLogitScore{noise}, LinearTemperature(a, b, horizon));
      s.name = "Keyformer";
      break;
    }
    case 1: {
      static const float deltas[] = {0.0f, 0.5f, -0.3f, -1.0f, 1e-40f, -1e-40f, kNaN, kInf, 3e38f, -3e38f, -0.999f};
      const float a = pick_tau(in), d = in.PickValueInArray(deltas);
      s.cache = std::make_unique<Cache<GumbelLogitScore, IncrementTemperature, RecentTopKSelection>>(
          config, kv, GumbelLogitScore{noise}, IncrementTemperature(a, d));
      s.name = "Keyformer/IncrementTemperature";
      break;
    }
    case 2:
      s.cache = std::make_unique<Cache<GumbelLogitScore, ConstantTemperature, RecentTopKSelection>>(
          config, kv, GumbelLogitScore{noise}, ConstantTemperature(pick_tau(in)));
      s.name = "Keyformer/ConstantTemperature";
      break;
    case 3:
      s.cache = std::make_unique<H2O>(config, kv);
      s.name = "H2O";
      break;
    case 4:
      s.cache = std::make_unique<TOVA>(config, kv);
      s.name = "TOVA";
      break;
    case 5:
      s.sinks = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 6) : pick_count(in, 8);
      s.cache = std::make_unique<StreamingLLM>(config, kv, NoScore{}, ConstantTemperature(), SinkRecentSelection{s.sinks});
      s.kind = Kind::sink_recent;
      s.name = "StreamingLLM";
      break;
    default: {
      static const Policy policies[] = {Policy::keyformer, Policy::h2o, Policy::streaming_llm, Policy::window,
                                        Policy::tova, Policy::snapkv, Policy::knorm, Policy::keydiff};
      const Policy p = in.PickValueInArray(policies);
      PolicyParams params;
      params.tau_init = pick_tau(in);
      params.tau_end = pick_tau(in);
      params.horizon = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 5) : pick_count(in, 4);
      params.gumbel_noise = noise;
      // Keyformer's noise scale: (0, 1] taken, 0, > 1, NaN and any other policy's != 1 rejected.
      params.noise_scale = in.PickValueInArray({1.0f, 1.0f, 0.5f, 0.1f, 0.0f, 1.5f, -1.0f,
                                                std::numeric_limits<float>::quiet_NaN()});
      params.sinks = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 6) : pick_count(in, 8);
      if (p == Policy::snapkv) {  // L and K include 0, even K and L > k (all rejected); the three decode rules
        params.snap_window = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 8) : pick_count(in, 8);
        params.snap_kernel = in.ConsumeIntegralInRange<std::size_t>(0, 9);
        params.snap_pooling = in.ConsumeBool() ? Pooling::max : Pooling::avg;
        params.snap_decode = in.PickValueInArray({SnapDecode::h2o, SnapDecode::window, SnapDecode::keyformer});
      }
      // Mean attention (H2OMean, KeyformerMean): any other policy rejects it.
      params.mean_attention = in.ConsumeIntegralInRange<int>(0, 3) == 0;
      s.cache = make_cache(p, config, kv, params);
      if (p == Policy::snapkv && params.snap_decode == SnapDecode::window) s.kind = Kind::other;
      if (p == Policy::streaming_llm || p == Policy::window) {
        s.kind = Kind::sink_recent;
        s.sinks = p == Policy::window ? 0 : params.sinks;
      }
      s.name = std::string("make_cache(") + policy_name(p) + (params.mean_attention ? ", mean" : "") + ")";
      break;
    }
  }
  return s;
}

/// A logits (or noise) buffer of `count` floats; the mode decides how hostile it is.
std::vector<float> pick_floats(FuzzedDataProvider& in, std::size_t count) {
  std::vector<float> x(count);
  const int mode = in.ConsumeIntegralInRange<int>(0, 3);  // 0, 1: clean; 2: hostile; 3: all zero
  for (float& f : x) {
    if (mode == 3) {
      f = 0.0f;
      continue;
    }
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (mode < 2 || b < 200) {
      f = b == 255 ? -kInf : (static_cast<float>(b) - 100.0f) / 8.0f;
      continue;
    }
    static const float hostile[] = {kNaN, kInf, -kInf, 3.4e38f, -3.4e38f, 1e-45f, 1e30f, -1e30f, 0.0f};
    f = hostile[b % 9];
  }
  return x;
}

template <class T>
struct Side {  // one cache over its own storage
  Layer<T> layer;
  Subject s;
};

/// A chunk that was scored, kept to rebuild the one-shot prompt: `C` rows over `n` slots, logits
/// `[q_head][C][n]` and, if injected, noise in the same layout.
struct Chunk {
  std::size_t C = 0, n = 0;
  std::vector<float> x, z;
};

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

  void run(FuzzedDataProvider& in) {
    using CI = CacheInterface;
    for (int op = 0; op < 96 && in.remaining_bytes() > 0; ++op) {
      const KVView<T>& kv = layer().view;
      const std::size_t n = kv.lengths[0];
      switch (in.ConsumeIntegralInRange<int>(0, 16)) {
        case 0: case 1: case 2: case 3: {  // append; rarely a run of tokens (long prompts within 96 ops)
          if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
            const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(1, layer().cap);
            for (std::size_t t = 0; t < count; ++t) {
              const std::size_t len = kv.lengths[0];
              const std::int64_t last = len > 0 ? kv.head_positions(0)[len - 1] : -1;
              if (last == std::numeric_limits<std::int64_t>::max()) break;
              call("append", [&](Layer<T>& L, CI&) { L.append(last + 1); });
            }
            break;
          }
          const std::int64_t p = pick_position(in);
          call("append", [&](Layer<T>& L, CI&) { L.append(p); });
          break;
        }
        case 4: case 5: {  // prefill
          std::size_t P = n;
          const int p_draw = in.ConsumeIntegralInRange<int>(0, 15);
          if (p_draw == 0) P = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          const bool huge = p_draw == 8;  // issue 51: P >= 2^62 over a 16-float logits buffer, refused
          if (huge) P = in.PickValueInArray(kvfuzz::kHugeSizes);
          const std::size_t count = huge ? 16 : s().n_q * P * P;
          const std::vector<float> x = pick_floats(in, count);
          const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
          const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
          const std::vector<std::int64_t> prompt(kv.head_positions(0), kv.head_positions(0) + n);
          const bool ok = call("prefill", [&](Layer<T>&, CI& c) {
            c.prefill(ptrs == 0 ? nullptr : x.data(), P, z.empty() ? nullptr : z.data());
          });
          KVFUZZ_CHECK(!ok || !huge, where(), ": prefill accepted prompt_len = ", P);
          if (ok) {
            KVFUZZ_CHECK(!prefilled && !chunking, where(), ": a prefill succeeded after another prefill or a chunk");
            const std::size_t k = s().cache->budget();
            KVFUZZ_CHECK(k >= 1 && s().cache->recent_window() <= k, where(), ": resolved k = ", k, ", w = ",
                         s().cache->recent_window());
            KVFUZZ_CHECK(kv.lengths[0] == std::min(k, P), where(), ": prefill kept ", kv.lengths[0],
                         " slots, expected min(k = ", k, ", P = ", P, ")");
            KVFUZZ_CHECK(std::is_sorted(prompt.begin(), prompt.end()), where(), ": unordered prompt accepted");
            accepted = prompt;
            managed = kv.lengths[0];
            prefilled = true;
          }
          break;
        }
        case 6: case 7: case 8: {  // decode step
          std::size_t m = n;
          const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
          if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          const bool huge = m_draw == 8;  // issue 51: n >= 2^62 over a 16-float logits buffer, refused
          if (huge) m = in.PickValueInArray(kvfuzz::kHugeSizes);
          const std::size_t count = huge ? 16 : s().n_q * m;
          const std::vector<float> x = pick_floats(in, count);
          const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
          const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
          const std::int64_t new_pos = m >= 1 && m <= n ? kv.head_positions(0)[m - 1] : 0;
          const std::size_t before = managed;
          const bool ok = call("decode_step", [&](Layer<T>&, CI& c) {
            c.decode_step(ptrs == 0 ? nullptr : x.data(), m, z.empty() ? nullptr : z.data());
          });
          KVFUZZ_CHECK(!ok || !huge, where(), ": decode_step accepted n = ", m);
          if (ok) {
            KVFUZZ_CHECK(prefilled && m == before + 1 && m == n, where(), ": decode_step(n = ", m,
                         ") accepted with ", before, " managed slots, view length ", n);
            KVFUZZ_CHECK(accepted.empty() || new_pos > accepted.back(), where(), ": decode accepted position ",
                         new_pos, " after ", accepted.back());
            const std::size_t k = s().cache->budget();
            KVFUZZ_CHECK(kv.lengths[0] == std::min(m, k), where(), ": decode step left ", kv.lengths[0],
                         " slots, expected min(n = ", m, ", k = ", k, ")");
            accepted.push_back(new_pos);
            managed = kv.lengths[0];
          }
          break;
        }
        case 9: {  // sorts the managed slots (before any prompt: all); slots appended since stay
          const std::vector<std::int64_t> before = layer().pos;
          const std::size_t sorted = prefilled || chunking ? managed : n;
          if (call("restore_position_order", [&](Layer<T>&, CI& c) { c.restore_position_order(); }))
            for (std::size_t h = 0; h < layer().nkv; ++h) {
              const std::int64_t* p = kv.head_positions(h);
              const std::int64_t* q = before.data() + h * layer().cap;
              KVFUZZ_CHECK(std::is_sorted(p, p + sorted), where(), ": restore_position_order left head ", h,
                           " unsorted");
              KVFUZZ_CHECK(std::equal(p + sorted, p + n, q + sorted), where(),
                           ": restore_position_order moved a slot appended since the last step");
            }
          break;
        }
        case 10: {
          const std::uint64_t new_seed = in.ConsumeIntegral<std::uint64_t>();
          if (call("reset", [&](Layer<T>&, CI& c) { c.reset(new_seed); })) reseeded = true, seed = new_seed;
          KVFUZZ_CHECK(kv.lengths[0] == 0 && s().cache->step() == 0 && s().cache->budget() == 0, where(),
                       ": reset left state behind");
          forget();
          break;
        }
        case 11: case 12: {  // a chunk of the prompt, materialised: usually every slot appended since
          std::size_t C = n >= managed ? n - managed : 0, m = n;
          const int c_draw = in.ConsumeIntegralInRange<int>(0, 11);
          if (c_draw == 0) C = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          if (c_draw == 6) C = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
          const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
          if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);
          const bool huge = c_draw == 6 || m_draw == 8;
          const std::size_t count = huge ? 16 : s().n_q * C * m;
          const std::vector<float> x = pick_floats(in, count);
          const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
          const std::vector<float> z = ptrs == 1 ? pick_floats(in, count) : std::vector<float>();
          const std::vector<std::int64_t> fresh(kv.head_positions(0) + std::min(managed, n), kv.head_positions(0) + n);
          const bool ok = call("prefill_chunk", [&](Layer<T>&, CI& c) {
            c.prefill_chunk(ptrs == 0 ? nullptr : x.data(), C, m, z.empty() ? nullptr : z.data());
          });
          KVFUZZ_CHECK(!ok || !huge, where(), ": prefill_chunk accepted C = ", C, ", n = ", m);
          if (ok) {
            took_chunk(C, m, fresh);
            if (!chunks.empty() && chunks.front().z.empty() != z.empty()) replayable = false;
            chunks.push_back(Chunk{C, m, x, z});
          }
          break;
        }
        case 13: {  // a chunk scored from Q and K, with the cache's query-head count or another one
          std::size_t C = n >= managed ? n - managed : 0, nq = s().n_q;
          const int c_draw = in.ConsumeIntegralInRange<int>(0, 11);
          if (c_draw == 0) C = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
          if (c_draw == 6) C = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
          bool huge = c_draw == 6;
          switch (in.ConsumeIntegralInRange<int>(0, 15)) {
            case 0: nq = 2 * s().n_q; break;
            case 1: nq = std::max<std::size_t>(1, s().n_q / 2); break;
            case 2: nq = in.ConsumeIntegralInRange<std::size_t>(0, 9); break;
            case 8: nq = in.PickValueInArray(kvfuzz::kHugeSizes), huge = true; break;  // issue 51: refused
            default: break;
          }
          std::vector<float> q(huge ? 16 : C * nq * layer().hd);
          for (float& f : q) f = static_cast<float>(in.ConsumeIntegralInRange<int>(-16, 16)) / 8.0f;
          const int scratch_draw = in.ConsumeIntegralInRange<int>(0, 15);
          const std::size_t scratch_cap = scratch_draw == 0   ? std::max<std::size_t>(1, n / 2)
                                          : scratch_draw == 8 ? in.PickValueInArray(kvfuzz::kHugeSizes)
                                                              : layer().cap;
          huge = huge || scratch_draw == 8;
          const float scale = in.ConsumeBool() ? 0.5f : 1.0f;
          const std::vector<std::int64_t> fresh(kv.head_positions(0) + std::min(managed, n), kv.head_positions(0) + n);
          const bool ok = call("prefill_chunk_qk", [&](Layer<T>& L, CI& c) {
            QKChunkScratch scratch(scratch_cap, L.hd);
            prefill_chunk_qk(c, L.view, q.empty() ? nullptr : q.data(), C, nq, scale, scratch);
          });
          KVFUZZ_CHECK(!ok || !huge, where(), ": prefill_chunk_qk accepted C = ", C, ", n_q_heads = ", nq,
                       ", scratch capacity ", scratch_cap);
          if (ok) {
            KVFUZZ_CHECK(nq == s().n_q, where(), ": prefill_chunk_qk accepted n_q_heads = ", nq, " for a cache of ",
                         s().n_q);
            took_chunk(C, n, fresh);
            replayable = false;  // its logits are computed inside (GEMM): no one-shot replay
          }
          break;
        }
        case 14: {  // finish_prefill
          if (call("finish_prefill", [&](Layer<T>&, CI& c) { c.finish_prefill(); })) {
            KVFUZZ_CHECK(chunking && !prefilled, where(), ": finish_prefill succeeded without a chunked prompt");
            const std::size_t k = s().cache->budget();
            KVFUZZ_CHECK(k >= 1 && kv.lengths[0] == std::min(k, managed), where(), ": finish_prefill kept ",
                         kv.lengths[0], " of ", managed, " slots with k = ", k);
            managed = kv.lengths[0];
            prefilled = true;
            chunking = false;
            if (!config().bounded_prefill) compare_with_one_shot();
          }
          break;
        }
        case 15: {  // the per-head decode step: begin, heads in a drawn order (bad, repeated, out of range), end
          const std::size_t nkv = layer().nkv, g = s().n_q / nkv;
          if (!open_step) {
            std::size_t m = n;
            const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
            if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, layer().cap + 1);
            if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
            const std::size_t before = managed;
            if (!call("begin_decode_step", [&](Layer<T>&, CI& c) { c.begin_decode_step(m); })) break;
            KVFUZZ_CHECK(m_draw != 8, where(), ": begin_decode_step accepted n = ", m);
            KVFUZZ_CHECK(prefilled && m == before + 1 && m == n, where(), ": begin_decode_step(n = ", m,
                         ") accepted with ", before, " managed slots, view length ", n);
            open_step = true;
            step_m = m;
            step_pos = kv.head_positions(0)[m - 1];
            KVFUZZ_CHECK(accepted.empty() || step_pos > accepted.back(), where(), ": begin accepted position ",
                         step_pos, " after ", accepted.back());
            done.assign(nkv, 0);
          }
          const std::size_t calls = in.ConsumeIntegralInRange<std::size_t>(0, nkv + 1);
          for (std::size_t i = 0; i < calls; ++i) {
            const std::size_t j = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nkv : in.ConsumeIntegralInRange<std::size_t>(0, nkv - 1);
            const std::vector<float> x = pick_floats(in, g * step_m);
            const int ptrs = in.ConsumeIntegralInRange<int>(0, 7);
            const std::vector<float> z = ptrs == 1 ? pick_floats(in, g * step_m) : std::vector<float>();
            if (call("score_decode_head", [&](Layer<T>&, CI& c) {
                  c.score_decode_head(j, ptrs == 0 ? nullptr : x.data(), z.empty() ? nullptr : z.data());
                })) {
              KVFUZZ_CHECK(j < nkv && done[j] == 0, where(), ": score_decode_head(", j, ") accepted (n_kv_heads = ",
                           nkv, ", already scored: ", j < nkv ? int(done[j]) : -1, ")");
              done[j] = 1;
            }
          }
          if (in.ConsumeIntegralInRange<int>(0, 3) != 0 &&
              call("end_decode_step", [&](Layer<T>&, CI& c) { c.end_decode_step(); })) {
            KVFUZZ_CHECK(std::count(done.begin(), done.end(), 1) == static_cast<long>(nkv) && kv.lengths[0] >= 1,
                         where(), ": end_decode_step accepted with a KV head not scored");
            const std::size_t k = s().cache->budget();
            KVFUZZ_CHECK(kv.lengths[0] == std::min(step_m, k), where(), ": the per-head step left ", kv.lengths[0],
                         " slots, expected min(n = ", step_m, ", k = ", k, ")");
            accepted.push_back(step_pos);
            managed = kv.lengths[0];
            open_step = false;
          }
          break;
        }
        default: {  // queries, including an out-of-range head
          const std::size_t h = in.ConsumeIntegralInRange<std::size_t>(0, layer().nkv);
          call("retained_positions", [&](Layer<T>& L, CI& c) {
            const std::vector<std::int64_t> r = c.retained_positions(h);
            KVFUZZ_CHECK(h < L.nkv && r.size() == L.view.lengths[h] && std::is_sorted(r.begin(), r.end()), where(),
                         ": retained_positions(", h, ")");
          });
          break;
        }
      }
      check_common();
    }
  }

  CacheConfig config_;
  const CacheConfig& config() const { return config_; }
  // The per-head decode step (after config_: the aggregate initialisation above stops at config_).
  bool open_step = false;              // a per-head decode step is open (begin_decode_step succeeded)
  std::size_t step_m = 0;              // its n
  std::int64_t step_pos = 0;           // its new token's position
  std::vector<int> done;               // [kv_head]: scored in the open step
};

kvtools::ThreadPool& real_threads() {
  static kvtools::ThreadPool pool(3);
  return pool;
}

/// The layer's geometry and the harness options, the first draws of an input after the element type.
struct Geometry {
  std::size_t nkv = 1, cap = 1, hd = 1, pad = 0;
  bool slot_major = false, with_twin = false, not_empty = false;
  int hostile_field = -1;       // >= 0: a cache over a copy of the view with this field huge must be refused
  std::size_t hostile_value = 0;
};
Geometry draw_geometry(FuzzedDataProvider& in) {
  Geometry g;
  g.nkv = in.ConsumeIntegralInRange<std::size_t>(1, 4);
  // Rarely more than 512 slots: a decode step then splits rows into chunk ranges on the executors
  // that claim more workers than there are KV heads (the path where a huge workers() wrapped).
  g.cap = in.ConsumeIntegralInRange<int>(0, 31) == 0 ? in.ConsumeIntegralInRange<std::size_t>(513, 540)
                                                     : in.ConsumeIntegralInRange<std::size_t>(1, kMaxCapacity);
  g.hd = in.ConsumeIntegralInRange<std::size_t>(1, 8);
  g.slot_major = in.ConsumeBool();
  g.pad = in.ConsumeIntegralInRange<std::size_t>(0, 2);
  g.with_twin = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int draw = in.ConsumeIntegralInRange<int>(0, 63);
  g.not_empty = draw == 0;
  if (draw == 63) {  // issue 51: a view field from kvfuzz::kHugeSizes
    g.hostile_field = in.ConsumeIntegralInRange<int>(0, 4);
    g.hostile_value = in.PickValueInArray(kvfuzz::kHugeSizes);
  }
  return g;
}
int draw_type(FuzzedDataProvider& in) { return in.ConsumeIntegralInRange<int>(0, 2); }

template <class T>
void fuzz_one(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  (void)draw_type(in);
  const Geometry g = draw_geometry(in);
  const auto to_config = [](FuzzedDataProvider& p) {  // the same draws again, on a fresh provider
    (void)draw_type(p);
    (void)draw_geometry(p);
  };
  Side<T> main{Layer<T>(g.nkv, g.cap, g.hd, g.slot_major, g.pad), {}};
  if (g.not_empty) main.layer.append(0);  // not empty at construction: must throw
  if (g.hostile_field >= 0) {  // a cache over the view with one field huge: refused before any allocation
    KVView<T> bad = main.layer.view;
    const std::size_t H = g.hostile_value;
    static const char* const names[] = {"n_kv_heads", "capacity", "head_dim", "head_stride", "slot_stride"};
    switch (g.hostile_field) {
      case 0: bad.n_kv_heads = H; break;
      case 1: bad.capacity = H; break;
      case 2: bad.head_dim = bad.slot_stride = H; break;  // slot_stride >= head_dim: the extent is what is refused
      case 3: bad.head_stride = H; break;
      default: bad.slot_stride = H; break;
    }
    // A stride the layout never steps (one head's head_stride, one slot's slot_stride) leaves the view valid.
    const bool unused = (g.hostile_field == 3 && g.nkv == 1) || (g.hostile_field == 4 && g.cap == 1);
    const std::vector<T> k0 = main.layer.k, v0 = main.layer.v;
    bool built = false;
    try {
      Subject hostile = make_subject(in, pick_config(in, g.nkv, g.cap), bad);
      built = true;
    } catch (const std::invalid_argument&) {
    } catch (const std::length_error&) {
    }
    KVFUZZ_CHECK(!built || unused, "a cache was built over a view with ", names[g.hostile_field], " = ", H);
    KVFUZZ_CHECK(std::memcmp(main.layer.k.data(), k0.data(), k0.size() * sizeof(T)) == 0 &&
                     std::memcmp(main.layer.v.data(), v0.data(), v0.size() * sizeof(T)) == 0,
                 "a refused construction wrote K or V");
    return;
  }

  CacheConfig config;
  try {
    config = pick_config(in, g.nkv, g.cap);
    main.s = make_subject(in, config, main.layer.view);
  } catch (const std::invalid_argument&) {
    return;  // a rejected configuration
  }
  static const std::size_t workers[] = {1, 2, 3, 7, 16, SIZE_MAX};
  main.s.executor = std::make_unique<OrderExecutor>(OrderExecutor{in.PickValueInArray(workers), in.ConsumeBool()});
  main.s.cache->set_executor(*main.s.executor);
  KVFUZZ_CHECK(main.layer.view.lengths[0] == 0, "a cache was built over a non-empty view");
  std::unique_ptr<Side<T>> twin;
  if (g.with_twin) {  // the same subject from the same bytes, on three real threads
    twin.reset(new Side<T>{Layer<T>(g.nkv, g.cap, g.hd, g.slot_major, g.pad), {}});
    FuzzedDataProvider again(data, size);
    to_config(again);
    twin->s = make_subject(again, pick_config(again, g.nkv, g.cap), twin->layer.view);
    twin->s.cache->set_executor(real_threads());
    twin->s.name += " (real threads)";
  }
  Harness<T> harness{main, twin.get(), to_config, data, size, {}, 0, false, false, true, {}, {}, false, 0, config,
                     false, 0, 0, {}};
  harness.run(in);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (draw_type(in)) {
    case 0: fuzz_one<float>(data, size); break;
    case 1: fuzz_one<Eigen::half>(data, size); break;
    default: fuzz_one<Eigen::bfloat16>(data, size); break;
  }
  return 0;
}
