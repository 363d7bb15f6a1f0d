// tests/cache_errors_test.cpp — kvevict::Cache on bad input: every call that throws names the problem and
// leaves lengths, positions, scores, K/V rows, step and the noise generator unchanged.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "cache_test_util.hpp"
#include "test_util.hpp"

namespace {

using cache_test::config;
using cache_test::kInf;
using kvtest::append_token;
using kvtest::causal_logits;

// ---------------------------------------------------------------------------
// Bad input: clear exception, state unchanged.

struct Snapshot {
  std::vector<std::size_t> lengths;
  std::vector<std::int64_t> positions;
  std::vector<float> scores, k;
  std::size_t step;
  template <class C>
  static Snapshot of(const C& cache, const kvevict::KVView<float>& kv) {
    Snapshot s;
    s.step = cache.step();
    for (std::size_t h = 0; h < kv.n_kv_heads; ++h) {
      s.lengths.push_back(kv.length(h));
      for (std::size_t i = 0; i < kv.length(h); ++i) {
        s.positions.push_back(kv.head_positions(h)[i]);
        s.scores.push_back(cache.scores(h)[i]);
        for (std::size_t d = 0; d < kv.head_dim; ++d) s.k.push_back(kv.k_row(h, i)[d]);
      }
    }
    return s;
  }
  bool operator==(const Snapshot& o) const {
    return lengths == o.lengths && positions == o.positions && scores == o.scores && k == o.k && step == o.step;
  }
};

template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (const std::length_error& e) {
    return std::string("length_error: ") + e.what();
  }
  return "no exception";
}

TEST(CacheErrors, PrefillRejectsBadInputAndStaysUsable) {
  kvevict::KVBuffer<float> buf(2, 6, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(4, 3, 1, 5), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  const auto x = causal_logits(4, 4, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + 2 * c); });
  EXPECT_EQ(message_of([&] { cache.decode_step(x.data(), 1); }),
            "kvevict::Cache::decode_step: call prefill() first");
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 0); }),
            "kvevict::Cache::prefill: prompt_len must be >= 1 (got 0)");
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 3); }),
            "kvevict::Cache::prefill: prompt_len = 3 but the view's lengths[0] = 4 (append the prompt's K/V first)");
  EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 4); }), "kvevict::Cache::prefill: logits must be non-null");
  auto bad = x;
  bad[(2 * 4 + 3) * 4 + 1] = std::nanf("");
  EXPECT_EQ(message_of([&] { cache.prefill(bad.data(), 4); }),
            "kvevict::Cache::prefill: logits row 3 of q_head 2 contains NaN or +inf");
  bad[(2 * 4 + 3) * 4 + 1] = kInf;
  EXPECT_NE(message_of([&] { cache.prefill(bad.data(), 4); }), "no exception");
  // Nothing was scored or cut, and the generator did not move: the result equals a fresh cache's.
  EXPECT_EQ(kv.length(0), 4u);
  cache.prefill(x.data(), 4);
  kvevict::KVBuffer<float> buf2(2, 6, 2);
  auto kv2 = buf2.view();
  kvevict::Keyformer fresh(config(4, 3, 1, 5), kv2, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(kv2, p);
  fresh.prefill(x.data(), 4);
  EXPECT_EQ(Snapshot::of(cache, kv), Snapshot::of(fresh, kv2));
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 3); }),
            "kvevict::Cache::prefill: already prefilled; call reset() for a new sequence");
}

TEST(CacheErrors, PrefillRejectsBudgetWindowCapacityAndPositionProblems) {
  const auto x = causal_logits(1, 4, [](auto, auto, auto) { return 0.0f; });
  auto attempt = [&](kvevict::CacheConfig c, std::size_t capacity, const std::vector<std::int64_t>& pos) {
    kvevict::KVBuffer<float> buf(1, capacity, 2);
    auto kv = buf.view();
    kvevict::H2O cache(c, kv);
    for (auto p : pos) append_token(kv, p);
    return message_of([&] { cache.prefill(x.data(), pos.size()); });
  };
  // A token budget is checked at construction (see cache_config_test); a ratio budget at prefill.
  auto ratio = config(1, 2, 3);
  ratio.budget = kvevict::Budget::ratio(0.5);
  EXPECT_EQ(attempt(ratio, 8, {0, 1, 2, 3}),
            "kvevict::RecentTopKSelection: recent window w = 3 exceeds budget k = 2");
  ratio = config(1, 2, 0);
  ratio.budget = kvevict::Budget::ratio(2.0);
  EXPECT_EQ(attempt(ratio, 8, {0, 1, 2, 3}),
            "kvevict::Cache::prefill: budget k = 8 needs a view of capacity >= k + 1 = 9 (a decode step appends "
            "before it evicts), but the capacity is 8");
  EXPECT_EQ(attempt(config(1, 2, 0), 8, {0, 2, 1, 3}),
            "kvevict::Cache::prefill: positions of KV head 0 must be strictly ascending by slot (slot 2 has 1)");
}

TEST(CacheErrors, DecodeStepRejectsBadInputAndLeavesEverythingUnchanged) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  kvevict::Keyformer cache(config(2, 3, 1, 5), kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  const auto x = causal_logits(2, 4, [](auto, std::size_t r, std::size_t c) { return 0.1f * (r + 2 * c); });
  cache.prefill(x.data(), 4);

  kvevict::KVBuffer<float> twin_buf(2, 8, 2);
  auto twin_kv = twin_buf.view();
  kvevict::Keyformer twin(config(2, 3, 1, 5), twin_kv, {}, kvevict::LinearTemperature(1.0f, 2.0f, 4));
  for (int p = 0; p < 4; ++p) append_token(twin_kv, p);
  twin.prefill(x.data(), 4);

  std::vector<float> row{0.5f, 0.25f, 0.0f, 1.0f, 0.0f, 0.5f, 0.25f, 2.0f};
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 4); }),
            "kvevict::Cache::decode_step: the view's lengths[0] = 3, expected n = 4 (append the new token's K/V to "
            "every head first)");
  append_token(kv, 4);
  const Snapshot before = Snapshot::of(cache, kv);
  auto nan_row = row;
  nan_row[6] = std::nanf("");
  EXPECT_EQ(message_of([&] { cache.decode_step(nan_row.data(), 4); }),
            "kvevict::Cache::decode_step: logits of q_head 1 contain NaN or +inf");
  EXPECT_EQ(message_of([&] { cache.decode_step(row.data(), 3); }),
            "kvevict::Cache::decode_step: n = 3 but the cache holds 3 tokens per KV head (append exactly one token, "
            "then pass n = 4)");
  EXPECT_EQ(message_of([&] { cache.decode_step(nullptr, 4); }),
            "kvevict::Cache::decode_step: logits must be non-null");
  EXPECT_EQ(Snapshot::of(cache, kv), before);
  // The failed calls did not consume noise: the next step matches the twin exactly.
  append_token(twin_kv, 4);
  cache.decode_step(row.data(), 4);
  twin.decode_step(row.data(), 4);
  EXPECT_EQ(Snapshot::of(cache, kv), Snapshot::of(twin, twin_kv));
}

TEST(CacheErrors, DecodeStepRejectsStalePositionsMismatchedHeadsAndBadTemperature) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  kvevict::Cache<kvevict::GumbelLogitScore, kvevict::IncrementTemperature, kvevict::RecentTopKSelection> cache(
      config(2, 3, 1), kv, {}, kvevict::IncrementTemperature(1.0f, -0.75f));
  for (int p = 0; p < 3; ++p) append_token(kv, p);
  const auto x = causal_logits(2, 3, [](auto, auto, auto) { return 0.0f; });
  cache.prefill(x.data(), 3);
  const float row[] = {0, 0, 0, 0, 0, 0, 0, 0};
  append_token(kv, 2);  // not newer than the last position
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: new token's position 2 must be larger than the last one, 2");
  kv.head_positions(0)[3] = 3;  // head 0 says 3, head 1 says 2
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: KV head 1 has new position 2, KV head 0 has 3");
  kv.head_positions(1)[3] = 3;
  cache.decode_step(row, 4);  // tau = 0.25: fine
  append_token(kv, 4);
  EXPECT_EQ(message_of([&] { cache.decode_step(row, 4); }),
            "kvevict::Cache::decode_step: temperature at step 2 must be finite and >= 1.17549435e-38 (FLT_MIN) (got -0.5)");
  EXPECT_EQ(cache.step(), 1u);
}

TEST(CacheErrors, ConstructorAndAccessorsValidate) {
  kvevict::KVBuffer<float> buf(2, 8, 2);
  auto kv = buf.view();
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(3, 2, 0), kv); }),
            "kvevict::Cache: n_q_heads (3) must be a positive multiple of the view's n_kv_heads (2)");
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(0, 2, 0), kv); }),
            "kvevict::Cache: n_q_heads (0) must be a positive multiple of the view's n_kv_heads (2)");
  kvevict::H2O cache(config(2, 2, 0), kv);
  EXPECT_EQ(message_of([&] { (void)cache.length(2); }),
            "kvevict::Cache::length: KV head 2 out of range (n_kv_heads = 2)");
  append_token(kv, 0);
  EXPECT_EQ(message_of([&] { kvevict::H2O c(config(2, 2, 0), kv); }),
            "kvevict::Cache: the view must be empty at construction (lengths[0] = 1)");
}

}  // namespace
