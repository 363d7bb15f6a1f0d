// Helpers shared by the cache tests: a layer whose K/V rows encode their token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <cstring>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace kvtest {

/// K[i] of (kv_head h, position p) = p * 100 + h * 10 + i; V = -K.
inline float k_value(std::int64_t p, std::size_t h, std::size_t i) {
  return static_cast<float>(p * 100 + static_cast<std::int64_t>(h) * 10 + static_cast<std::int64_t>(i));
}

template <class T>
void append_token(kvevict::KVView<T> kv, std::int64_t p) {
  std::vector<T> k(kv.n_kv_heads * kv.head_dim), v(k.size());
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    for (std::size_t i = 0; i < kv.head_dim; ++i) {
      k[h * kv.head_dim + i] = T(k_value(p, h, i));
      v[h * kv.head_dim + i] = T(-k_value(p, h, i));
    }
  kv.append(p, k.data(), v.data());
}

/// Every live slot's K and V rows still belong to the slot's position ID
/// (compared after the same rounding to `T`, so 16-bit types work too).
template <class T>
::testing::AssertionResult rows_aligned(const kvevict::KVView<T>& kv) {
  for (std::size_t h = 0; h < kv.n_kv_heads; ++h)
    for (std::size_t s = 0; s < kv.length(h); ++s) {
      const std::int64_t p = kv.head_positions(h)[s];
      for (std::size_t i = 0; i < kv.head_dim; ++i) {
        const float kx = static_cast<float>(kv.k_row(h, s)[i]), vx = static_cast<float>(kv.v_row(h, s)[i]);
        const float want = static_cast<float>(T(k_value(p, h, i)));
        if (kx != want || vx != -want)
          return ::testing::AssertionFailure() << "head " << h << " slot " << s << " position " << p << " elem "
                                               << i << ": K " << kx << " V " << vx;
      }
    }
  return ::testing::AssertionSuccess();
}

/// The message of the `std::invalid_argument` that `f` throws, or "no throw" (another exception type escapes).
template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no throw";
}

/// Causal logits [q_head][P][P] filled from a function f(h, r, c) for c <= r
/// (upper triangle set to NaN to prove it is never read).
template <class F>
std::vector<float> causal_logits(std::size_t n_q, std::size_t P, F f) {
  std::vector<float> x(n_q * P * P, std::nanf(""));
  for (std::size_t h = 0; h < n_q; ++h)
    for (std::size_t r = 0; r < P; ++r)
      for (std::size_t c = 0; c <= r; ++c) x[(h * P + r) * P + c] = f(h, r, c);
  return x;
}

/// What a cache holds, bit for bit: each KV head's position IDs and score bits by slot, the step count and
/// τ's bits (tests comparing two ways of reaching the same state).
struct CacheSnapshot {
  std::vector<std::vector<std::int64_t>> positions;
  std::vector<std::vector<std::uint32_t>> score_bits;
  std::size_t step = 0;
  std::uint32_t tau_bits = 0;
  bool operator==(const CacheSnapshot& o) const {
    return positions == o.positions && score_bits == o.score_bits && step == o.step && tau_bits == o.tau_bits;
  }
};
inline CacheSnapshot snapshot(const kvevict::CacheInterface& c, std::size_t n_kv) {
  CacheSnapshot s;
  for (std::size_t j = 0; j < n_kv; ++j) {
    const std::size_t n = c.length(j);
    s.positions.emplace_back(c.positions(j), c.positions(j) + n);
    std::vector<std::uint32_t> bits(n);
    if (n != 0) std::memcpy(bits.data(), c.scores(j), n * sizeof(float));
    s.score_bits.push_back(std::move(bits));
  }
  s.step = c.step();
  const float tau = c.temperature();
  std::memcpy(&s.tau_bits, &tau, sizeof tau);
  return s;
}

/// A cache configuration with a budget of `k` tokens, a recent window of `w` tokens and `n_q` query heads.
inline kvevict::CacheConfig token_config(std::size_t k, std::size_t w, std::size_t n_q = 1) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  return c;
}

/// One paged sequence over its own pool: 8 pages of 2 slots, 1 KV head, head_dim 2 (float, NHD).
/// `append(p)` writes K = (k_value(p, 0, 0), k_value(p, 0, 1)), `append(p, k0)` writes K = (k0, 0); V = -K.
/// KV head j's scores in position order (the slots are not kept sorted after an eviction). O(n log n).
inline std::vector<float> scores_by_position(const kvevict::CacheInterface& c, std::size_t j = 0) {
  std::vector<std::size_t> slot(c.length(j));
  for (std::size_t s = 0; s < slot.size(); ++s) slot[s] = s;
  std::sort(slot.begin(), slot.end(), [&](std::size_t a, std::size_t b) { return c.positions(j)[a] < c.positions(j)[b]; });
  std::vector<float> out;
  for (std::size_t s : slot) out.push_back(c.scores(j)[s]);
  return out;
}

/// A policy scored from the keys (no logits): `make_cache(policy, cfg)` over layer `b` runs as the preset `Preset` over
/// layer `a` (both `Layer`s with `kv` and `append(position)`), logits given to it are ignored, and two prompt chunks
/// (2 tokens, then `P − 2`) end as the preset's one-shot prefill of `P` (same kept positions and scores), then
/// decode steps for positions `P .. total − 1` keep the same positions. `between(cache)` runs after the first chunk.
template <class Preset, class Layer, class Between>
void expect_factory_and_chunks_equal_preset(kvevict::Policy policy, const kvevict::CacheConfig& cfg, std::int64_t P,
                                            std::int64_t total, Between between) {
  Layer a, b;
  Preset preset(cfg, a.kv);
  auto made = kvevict::make_cache(policy, cfg, b.kv);
  std::vector<float> x(static_cast<std::size_t>(P * P), 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;  // anything: never read
  for (std::int64_t p = 0; p < P; ++p) a.append(p);
  preset.prefill(nullptr, static_cast<std::size_t>(P));
  b.append(0), b.append(1);
  made->prefill_chunk(x.data(), 2, 2);
  between(*made);
  for (std::int64_t p = 2; p < P; ++p) b.append(p);
  made->prefill_chunk(x.data(), static_cast<std::size_t>(P - 2), static_cast<std::size_t>(P));
  made->finish_prefill();
  EXPECT_EQ(made->retained_positions(0), preset.retained_positions(0));
  EXPECT_EQ(scores_by_position(*made), scores_by_position(preset));
  for (std::int64_t p = P; p < total; ++p) {
    a.append(p), b.append(p);
    preset.decode_step(nullptr, a.kv.length(0));
    made->decode_step(x.data(), b.kv.length(0));
    EXPECT_EQ(made->retained_positions(0), preset.retained_positions(0)) << p;
  }
}

/// A ratio recent window resolves as H2O's and the tools': `floor(0.3 k)` with a floor of 1 token when k >= 2, so
/// `Preset` at k = 3 over `P` tokens of a fresh `Layer` has w = 1; returns the kept positions for the caller to pin.
template <class Preset, class Layer>
std::vector<std::int64_t> kept_with_ratio_window_floor(std::int64_t P) {
  Layer l;
  kvevict::CacheConfig cfg = token_config(3, 0);
  cfg.recent = kvevict::RecentWindow::ratio(0.3);
  Preset cache(cfg, l.kv);
  for (std::int64_t p = 0; p < P; ++p) l.append(p);
  cache.prefill(nullptr, static_cast<std::size_t>(P));
  EXPECT_EQ(cache.recent_window(), 1u);
  return cache.retained_positions(0);
}

/// A policy without Keyformer's or H2O's options refuses them at construction: `mean_attention` and a
/// `noise_scale` other than 1 each throw `std::invalid_argument` from `make_cache(policy, cfg, kv, params)`.
template <class T>
void expect_refuses_other_policies_params(kvevict::Policy policy, const kvevict::CacheConfig& cfg,
                                          kvevict::KVView<T> kv) {
  kvevict::PolicyParams p;
  p.mean_attention = true;
  EXPECT_THROW((void)kvevict::make_cache(policy, cfg, kv, p), std::invalid_argument);
  p = kvevict::PolicyParams();
  p.noise_scale = 0.5f;
  EXPECT_THROW((void)kvevict::make_cache(policy, cfg, kv, p), std::invalid_argument);
}

struct PagedLayer {
  static constexpr std::size_t kPages = 8, kPageSize = 2;
  std::vector<float> k = std::vector<float>(kPages * kPageSize * 2), v = std::vector<float>(k.size());
  kvevict::PagePool pool{kPages};
  std::vector<std::int32_t> table = std::vector<std::int32_t>(kPages, kvevict::kNoPage);
  std::vector<std::int64_t> positions = std::vector<std::int64_t>(kPages * kPageSize);
  std::size_t length = 0;
  kvevict::PagedKVView<float> view{k.data(), v.data(), kPages, kPageSize, 1, 2, kvevict::PageLayout::NHD,
                                   table.data(), kPages, &length, positions.data()};
  void append(std::int64_t p, float k0, float k1) {
    const float kk[2] = {k0, k1}, vv[2] = {-k0, -k1};
    pool.append(view, p, kk, vv);
  }
  void append(std::int64_t p) { append(p, k_value(p, 0, 0), k_value(p, 0, 1)); }
};

}  // namespace kvtest
