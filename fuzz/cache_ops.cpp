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
//
// The parts, included here only: cache_ops_layer.hpp (the storage, snapshot and executor), cache_ops_subject.hpp
// (the configuration and cache draws), cache_ops_harness.hpp (each call run and checked) and cache_ops_calls.hpp
// (the calls decoded from the input); here the geometry, the hostile views and the entry point.
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

#include "cache_ops_calls.hpp"
#include "cache_ops_harness.hpp"
#include "cache_ops_layer.hpp"
#include "cache_ops_subject.hpp"
#include "fuzz_util.hpp"
#include "thread_pool.hpp"

namespace {

using namespace kvevict;

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
