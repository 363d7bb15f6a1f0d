// prefill_chunk_qk: scoring a prefill chunk straight from Q and K gives the same
// cache state as passing the materialised logits. Q and K hold multiples of 1/4 in [-2, 2]
// and the scale is 1/4, so every logit is exact in float whatever the summation order:
// the comparison is bit for bit (scores and positions), noise drawn from the same seed.
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace {

constexpr std::size_t kKv = 2, kGroup = 2, kQ = kKv * kGroup, kDim = 16;

float quarter(std::mt19937& gen) { return 0.25f * static_cast<float>(std::uniform_int_distribution<int>(-8, 8)(gen)); }

// ALiBi-like bias, exact in float: -0.5 · (query position − key position) · (h + 1).
struct Alibi {
  const std::int64_t* positions;  // KV head 0's positions (every head keeps the same tokens here: shared_heads)
  std::size_t held;
  void operator()(std::size_t h, std::size_t i, float* row, std::size_t len) const {
    const std::int64_t qpos = positions[held + i];
    for (std::size_t s = 0; s < len; ++s) row[s] += -0.5f * static_cast<float>(qpos - positions[s]) * float(h + 1);
  }
};

template <class T>
struct Layer {
  Layer(kvevict::Policy p, bool bounded, std::size_t capacity)
      : buf(kKv, capacity, kDim), kv(buf.view()) {
    kvevict::CacheConfig c;
    c.n_q_heads = kQ;
    c.budget = kvevict::Budget::tokens(12);
    c.recent = kvevict::RecentWindow::tokens(p == kvevict::Policy::h2o || p == kvevict::Policy::keyformer ? 3 : 0);
    c.shared_heads = true;  // one selection: every KV head holds the same positions (for the bias)
    c.seed = 99;
    c.max_prefill_chunk = 7;
    c.bounded_prefill = bounded;
    kvevict::PolicyParams params;
    params.horizon = 4;
    params.sinks = 2;
    cache = kvevict::make_cache(p, c, kv, params);
  }
  kvevict::KVBuffer<T> buf;
  kvevict::KVView<T> kv;
  std::unique_ptr<kvevict::CacheInterface> cache;
};

// Feeds P tokens in chunks of 7 to two caches: one via prefill_chunk_qk, one via
// materialised logits computed with a plain loop. Returns after finish_prefill.
template <class T>
void compare(kvevict::Policy p, bool bounded, bool bias, std::size_t P, std::size_t row_tile, std::size_t col_tile) {
  const std::size_t C = 7, capacity = bounded ? 12 + C : P + 1;
  Layer<T> qk(p, bounded, capacity);
  Layer<float> ref(p, bounded, capacity);
  kvevict::QKChunkScratch scratch(capacity, kDim, row_tile, col_tile);
  std::mt19937 gen(static_cast<std::uint32_t>(P * 31 + row_tile));
  const float scale = 0.25f;
  const std::string where = std::string(kvevict::policy_name(p)) + (bounded ? " bounded" : "") +
                            (bias ? " bias" : "") + " tiles " + std::to_string(row_tile) + "x" +
                            std::to_string(col_tile);
  for (std::size_t held = 0; held < P; held += C) {
    const std::size_t len = std::min(C, P - held);
    std::vector<float> q(len * kQ * kDim);  // [C][q_head][head_dim]
    for (float& x : q) x = quarter(gen);
    for (std::size_t t = held; t < held + len; ++t) {
      std::vector<float> k(kKv * kDim), v(kKv * kDim, 1.0f);
      for (float& x : k) x = quarter(gen);
      std::vector<T> kt(k.begin(), k.end()), vt(v.begin(), v.end());
      qk.kv.append(static_cast<std::int64_t>(t), kt.data(), vt.data());
      ref.kv.append(static_cast<std::int64_t>(t), k.data(), v.data());
    }
    const std::size_t n = ref.kv.length(0), slots_before = n - len;
    std::vector<float> x(kQ * len * n, 0.0f);
    for (std::size_t h = 0; h < kQ; ++h)
      for (std::size_t i = 0; i < len; ++i)
        for (std::size_t s = 0; s <= slots_before + i; ++s) {
          float dot = 0.0f;
          for (std::size_t e = 0; e < kDim; ++e)
            dot += q[(i * kQ + h) * kDim + e] * ref.kv.k_row(h / kGroup, s)[e];
          x[(h * len + i) * n + s] = scale * dot;
        }
    const Alibi alibi{ref.kv.head_positions(0), slots_before};
    if (bias)
      for (std::size_t h = 0; h < kQ; ++h)
        for (std::size_t i = 0; i < len; ++i) alibi(h, i, x.data() + (h * len + i) * n, slots_before + i + 1);
    ref.cache->prefill_chunk(x.data(), len, n);
    if (bias)
      kvevict::prefill_chunk_qk(*qk.cache, qk.kv, q.data(), len, kQ, scale, scratch,
                                Alibi{qk.kv.head_positions(0), slots_before});
    else
      kvevict::prefill_chunk_qk(*qk.cache, qk.kv, q.data(), len, kQ, scale, scratch);
  }
  qk.cache->finish_prefill();
  ref.cache->finish_prefill();
  for (std::size_t j = 0; j < kKv; ++j) {
    ASSERT_EQ(qk.cache->length(j), ref.cache->length(j)) << where;
    for (std::size_t s = 0; s < ref.cache->length(j); ++s) {
      EXPECT_EQ(qk.cache->positions(j)[s], ref.cache->positions(j)[s]) << where << " slot " << s;
      EXPECT_EQ(qk.cache->scores(j)[s], ref.cache->scores(j)[s]) << where << " slot " << s;
    }
  }
}

TEST(PrefillChunkQK, EqualsMaterialisedLogitsForEveryPolicy) {
  for (auto p : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                 kvevict::Policy::window, kvevict::Policy::tova})
    for (bool bounded : {false, true}) {
      compare<float>(p, bounded, false, 40, 3, 5);
      compare<float>(p, bounded, true, 40, 16, 128);
    }
}

TEST(PrefillChunkQK, HalfKeysAreConvertedByTile) {
  compare<Eigen::half>(kvevict::Policy::h2o, false, true, 33, 4, 6);
  compare<Eigen::bfloat16>(kvevict::Policy::keyformer, true, false, 33, 2, 3);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

TEST(PrefillChunkQK, RejectsBadArguments) {
  Layer<float> run(kvevict::Policy::h2o, false, 16);
  const std::vector<float> k(kKv * kDim, 0.25f), q(4 * kQ * kDim, 0.5f);
  for (int t = 0; t < 4; ++t) run.kv.append(t, k.data(), k.data());
  kvevict::QKChunkScratch small(3, kDim), wrong_dim(16, 8), ok(16, kDim);
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 4, kQ, 1.0f, small); }),
            "kvevict::prefill_chunk_qk: scratch (capacity 3, head_dim 16) does not fit n = 4 slots of head_dim 16");
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 4, kQ, 1.0f, wrong_dim); }),
            "kvevict::prefill_chunk_qk: scratch (capacity 16, head_dim 8) does not fit n = 4 slots of head_dim 16");
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 5, kQ, 1.0f, ok); }),
            "kvevict::prefill_chunk_qk: chunk_len = 5 must be in [1, n = 4]");
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, nullptr, 4, kQ, 1.0f, ok); }),
            "kvevict::prefill_chunk_qk: q must be non-null");
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 4, 3, 1.0f, ok); }),
            "kvevict::prefill_chunk_qk: n_q_heads (3) must be a positive multiple of n_kv_heads (2)");
  // A multiple of n_kv_heads that is not the cache's query-head count, smaller (rows past q would be
  // read) or larger (q read with the wrong stride, rows mapped to the wrong KV head): both rejected.
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 4, kKv, 1.0f, ok); }),
            "kvevict::Cache::prefill_chunk: the rows hold n_q_heads = 2 but the cache has n_q_heads = 4 "
            "(pass the cache's query-head count)");
  const std::vector<float> q_wide(4 * 2 * kQ * kDim, 0.5f);
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q_wide.data(), 4, 2 * kQ, 1.0f, ok); }),
            "kvevict::Cache::prefill_chunk: the rows hold n_q_heads = 8 but the cache has n_q_heads = 4 "
            "(pass the cache's query-head count)");
  EXPECT_EQ(message_of([] { kvevict::QKChunkScratch bad(4, kDim, 0); }),
            "kvevict::QKChunkScratch: capacity, head_dim, row_tile and col_tile must be >= 1 (got 4, 16, 0, 128)");
  EXPECT_EQ(run.cache->length(0), 4u);
  EXPECT_EQ(message_of([&] { kvevict::prefill_chunk_qk(*run.cache, run.kv, q.data(), 4, kQ, 1.0f, ok); }),
            "no exception");
}

}  // namespace
