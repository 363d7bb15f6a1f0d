// What a cache says before its budget is resolved: budget() reads 0 until the first prefill and after reset,
// budget_resolved() tells "not resolved yet" from a budget (a resolved k is >= 1); and the calls a cache does
// not support throw std::logic_error (docs/guarantees.md, exception types).
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

TEST(BudgetResolved, RatioAndTokenBudgetsBeforeAndAfterPrefillAndReset) {
  for (const kvevict::Budget budget : {kvevict::Budget::ratio(0.5), kvevict::Budget::tokens(3)}) {
    kvevict::KVBuffer<float> store(1, 8, 2);
    auto kv = store.view();
    kvevict::CacheConfig config;
    config.n_q_heads = 1;
    config.budget = budget;
    config.recent = kvevict::RecentWindow::tokens(1);
    kvevict::H2O cache(config, kv);
    EXPECT_EQ(cache.budget(), 0u);
    EXPECT_FALSE(cache.budget_resolved());
    for (std::int64_t p = 0; p < 6; ++p) kvtest::append_token(kv, p);
    const auto x = kvtest::causal_logits(1, 6, [](std::size_t, std::size_t r, std::size_t c) { return float(r + c); });
    cache.prefill(x.data(), 6);
    EXPECT_EQ(cache.budget(), 3u);  // floor(0.5 * 6) = 3, or the 3 tokens
    EXPECT_TRUE(cache.budget_resolved());
    const kvevict::CacheInterface& as_interface = cache;
    EXPECT_TRUE(as_interface.budget_resolved());
    cache.reset(0);
    EXPECT_EQ(cache.budget(), 0u);
    EXPECT_FALSE(cache.budget_resolved());
  }
}

TEST(BudgetResolved, PagedCacheAndItsUnsupportedChunkedPrefill) {
  const std::size_t pages = 4, ps = 2;
  std::vector<float> k_pool(pages * ps * 1 * 2), v_pool(k_pool.size());
  std::vector<std::int32_t> table(4, kvevict::kNoPage);
  std::vector<std::int64_t> positions(8);
  std::size_t length = 0;
  kvevict::PagedKVView<float> seq{k_pool.data(), v_pool.data(), pages, ps, 1, 2, kvevict::PageLayout::NHD,
                                  table.data(), 4, &length, positions.data()};
  kvevict::PagePool pool(pages);
  kvevict::CacheConfig config;
  config.n_q_heads = 1;
  config.budget = kvevict::Budget::ratio(0.5);
  config.recent = kvevict::RecentWindow::tokens(1);
  config.shared_heads = true;
  auto cache = kvevict::make_paged_cache(kvevict::Policy::h2o, config, {}, seq, pool);
  EXPECT_FALSE(cache->budget_resolved());
  const float k_row[2] = {1.0f, 2.0f}, v_row[2] = {3.0f, 4.0f};
  for (std::int64_t p = 0; p < 4; ++p) pool.append(seq, p, k_row, v_row);
  const std::vector<float> x(4 * 4, 0.0f);
  EXPECT_THROW(cache->prefill_chunk(x.data(), 4, 4), std::logic_error);
  EXPECT_THROW(cache->finish_prefill(), std::logic_error);
  EXPECT_FALSE(cache->budget_resolved());
  cache->prefill(x.data(), 4);
  EXPECT_EQ(cache->budget(), 2u);
  EXPECT_TRUE(cache->budget_resolved());
}

}  // namespace
