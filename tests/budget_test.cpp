// Tests of the budget k and recent window w resolution.
#include <cstdint>
#include <stdexcept>

#include <gtest/gtest.h>

#include <kvevict/budget.hpp>

namespace {

TEST(Budget, TokensAndRatioResolve) {
  EXPECT_EQ(kvevict::Budget::tokens(7).resolve(100), 7u);
  EXPECT_EQ(kvevict::Budget::tokens(7).resolve(3), 7u);  // min(k, P) is the cache's business
  EXPECT_EQ(kvevict::Budget::ratio(0.5).resolve(256), 128u);
  EXPECT_EQ(kvevict::Budget::ratio(0.6).resolve(10), 6u);
  EXPECT_EQ(kvevict::Budget::ratio(0.1).resolve(256), 25u);  // floor(25.6)
  EXPECT_EQ(kvevict::Budget::ratio(0.3).resolve(7), 2u);     // floor(2.1)
}

TEST(Budget, ResolvedZeroAndBadValuesThrow) {
  EXPECT_THROW(kvevict::Budget::tokens(0), std::invalid_argument);
  EXPECT_THROW(kvevict::Budget::ratio(0.0), std::invalid_argument);
  EXPECT_THROW(kvevict::Budget::ratio(-0.5), std::invalid_argument);
  EXPECT_THROW(kvevict::Budget::ratio(std::nan("")), std::invalid_argument);
  try {
    (void)kvevict::Budget::ratio(1e300).resolve(2);  // would overflow size_t
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::Budget: ratio 1e+300 of prompt length 2 resolves to k = 2e+300, above 2^53");
  }
  // A ratio never resolves to 0 tokens: k = max(1, floor(r * P)).
  EXPECT_EQ(kvevict::Budget::ratio(0.1).resolve(9), 1u);
  EXPECT_EQ(kvevict::Budget::ratio(0.6).resolve(1), 1u);
  EXPECT_EQ(kvevict::Budget::ratio(0.6).resolve(2), 1u);
  EXPECT_EQ(kvevict::Budget::ratio(0.6).resolve(5), 3u);
  // Token budgets are bounded like ratio budgets (2^53), so no resolved count overflows a conversion.
  EXPECT_EQ(kvevict::Budget::tokens(std::size_t{1} << 53).resolve(1), std::size_t{1} << 53);
  try {
    (void)kvevict::Budget::tokens(SIZE_MAX);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::Budget::tokens: k = 18446744073709551615 exceeds 2^53");
  }
}

TEST(RecentWindow, TokensAndRatioOfBudget) {
  EXPECT_EQ(kvevict::RecentWindow::tokens(3).resolve(10), 3u);
  EXPECT_EQ(kvevict::RecentWindow::ratio(0.3).resolve(128), 38u);  // floor(38.4)
  EXPECT_EQ(kvevict::RecentWindow::ratio(0.3).resolve(3), 0u);
  EXPECT_EQ(kvevict::RecentWindow::ratio(1.0).resolve(12), 12u);
  EXPECT_THROW(kvevict::RecentWindow::ratio(1.5), std::invalid_argument);
  EXPECT_THROW(kvevict::RecentWindow::ratio(-0.1), std::invalid_argument);
}

}  // namespace
