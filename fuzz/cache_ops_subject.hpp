// kvevict fuzzing — cache_ops_subject.hpp: fuzz_cache_ops' draws of a configuration (τ, counts, ratios, the
// CacheConfig), the hostile scores of issue 37, the fuzzed cache of every policy (make_subject), logits buffers,
// and the pieces of the harness's state (a side: a cache over its own storage; a scored chunk).
// SPDX-License-Identifier: Apache-2.0
//
// Included by cache_ops.cpp only, through cache_ops_harness.hpp.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <kvevict/kvevict.hpp>

#include "cache_ops_layer.hpp"

namespace {

using namespace kvevict;

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

}  // namespace
