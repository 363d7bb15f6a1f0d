// Faults the libFuzzer target fuzz/cache_ops found in the library, each pinned with the exact
// expected behaviour (the inputs are in fuzz/corpus/cache_ops/finding-*).
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::causal_logits;
using Positions = std::vector<std::int64_t>;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Found by fuzz_cache_ops: with w = 0 the prefill may evict the newest prompt token; the cache then
// took the newest *kept* position as "the last one" and a decode step re-admitted the evicted
// prompt position (a position ID seen twice in one sequence).
TEST(CacheFuzzFindings, DecodeStepRejectsAPromptPositionThatPrefillEvicted) {
  kvevict::KVBuffer<float> buf(1, 4, 2);
  auto kv = buf.view();
  kvevict::CacheConfig c;
  c.n_q_heads = 1;
  c.budget = kvevict::Budget::tokens(1);
  c.recent = kvevict::RecentWindow::tokens(0);
  kvevict::H2O cache(c, kv);
  append_token(kv, 0);
  append_token(kv, 1);
  // Rows {0} and {0, -inf}: scores [2, 0], so k = 1 keeps position 0 and evicts position 1.
  const auto x = causal_logits(1, 2, [](auto, auto r, auto col) { return r == 1 && col == 1 ? -kInf : 0.0f; });
  cache.prefill(x.data(), 2);
  ASSERT_EQ(cache.retained_positions(0), (Positions{0}));

  append_token(kv, 1);  // position 1 again
  const float row[] = {0.0f, 0.0f};
  try {
    cache.decode_step(row, 2);
    FAIL() << "re-admitted position 1";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::Cache::decode_step: new token's position 1 must be larger than the last one, 1");
  }
  EXPECT_EQ(cache.step(), 0u);
  EXPECT_EQ(cache.scores(0)[0], 2.0f);

  // A fresh sequence: position 2 after the same prompt is accepted and evicts itself or 0.
  cache.reset();
  append_token(kv, 0);
  append_token(kv, 1);
  cache.prefill(x.data(), 2);
  append_token(kv, 2);
  cache.decode_step(row, 2);
  EXPECT_EQ(cache.retained_positions(0), (Positions{0}));  // scores [2.5, 0.5]: the new token goes
}

}  // namespace
