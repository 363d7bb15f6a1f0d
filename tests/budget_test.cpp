// Tests of the budget k and recent window w resolution.
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

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

// Found by fuzz_paged_ops (seed fuzz/corpus/paged_ops/finding-recent-tokens-size-max): a count went
// through a double, so tokens(SIZE_MAX) resolved as (size_t)2^64 (UBSan float-cast-overflow) instead
// of SIZE_MAX, and a cache built with it could not reliably reject w > k.
TEST(RecentWindow, HugeCountsAndBudgetsResolveExactlyWithoutADoubleRoundTrip) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(kvevict::RecentWindow::tokens(kMax).resolve(4), kMax);
  EXPECT_EQ(kvevict::RecentWindow::tokens(kMax - 1).resolve(kMax), kMax - 1);
  EXPECT_EQ(kvevict::RecentWindow::tokens((std::size_t{1} << 53) + 1).resolve(1), (std::size_t{1} << 53) + 1);
  EXPECT_EQ(kvevict::RecentWindow::ratio(1.0).resolve(kMax), kMax);
  EXPECT_EQ(kvevict::RecentWindow::ratio(1.0).resolve(kMax - 1), kMax - 1);
  EXPECT_EQ(kvevict::RecentWindow::ratio(0.5).resolve(std::size_t{1} << 60), std::size_t{1} << 59);
  // A cache with w = SIZE_MAX is a configuration error, w > k, named at construction.
  kvevict::KVBuffer<float> buf(1, 8, 2);
  kvevict::CacheConfig c;
  c.n_q_heads = 1;
  c.budget = kvevict::Budget::tokens(4);
  c.recent = kvevict::RecentWindow::tokens(kMax);
  EXPECT_THROW(kvevict::H2O(c, buf.view()), std::invalid_argument);
}

TEST(RecentWindow, NoneIsExplicitAndEqualToZeroTokensOrRatioZero) {
  EXPECT_EQ(kvevict::RecentWindow::none().resolve(100), 0u);
  EXPECT_TRUE(kvevict::RecentWindow::none().is_none());
  EXPECT_TRUE(kvevict::RecentWindow::tokens(0).is_none());
  EXPECT_TRUE(kvevict::RecentWindow::ratio(0.0).is_none());
  EXPECT_FALSE(kvevict::RecentWindow::tokens(1).is_none());
  EXPECT_FALSE(kvevict::RecentWindow::ratio(0.01).is_none());  // resolves to 0 only for k < 100
  EXPECT_FALSE(kvevict::RecentWindow::none().is_ratio());
  EXPECT_EQ(kvevict::RecentWindow::none().ratio_value(), 0.0);
  EXPECT_EQ(kvevict::RecentWindow::tokens(3).ratio_value(), 0.0);  // no marker values: 0 when not a ratio
  EXPECT_EQ(kvevict::RecentWindow::ratio(0.25).ratio_value(), 0.25);
}

TEST(TokenAmount, KindsValuesAndResolution) {
  using A = kvevict::TokenAmount;
  EXPECT_TRUE(A().is_none());
  EXPECT_EQ(A::none().kind(), A::Kind::none);
  EXPECT_EQ(A::count(7).kind(), A::Kind::count);
  EXPECT_EQ(A::count(7).count_value(), 7u);
  EXPECT_EQ(A::count(7).fraction_value(), 0.0);
  EXPECT_EQ(A::fraction(0.25).kind(), A::Kind::fraction);
  EXPECT_EQ(A::fraction(0.25).fraction_value(), 0.25);
  EXPECT_EQ(A::fraction(0.25).count_value(), 0u);
  EXPECT_EQ(A::fraction(0.3).of(7), 2.0);  // floor(2.1)
  EXPECT_EQ(A::count(5).of(1000), 5.0);
  EXPECT_EQ(A::none().of(1000), 0.0);
  // Budget and RecentWindow are built on it.
  EXPECT_EQ(kvevict::Budget::from(A::count(7)).resolve(100), 7u);
  EXPECT_EQ(kvevict::Budget::from(A::fraction(0.5)).resolve(10), 5u);
  EXPECT_EQ(kvevict::Budget::ratio(0.5).amount().kind(), A::Kind::fraction);
  EXPECT_THROW(kvevict::Budget::from(A::none()), std::invalid_argument);
  EXPECT_THROW(kvevict::Budget::from(A::count(0)), std::invalid_argument);
  EXPECT_THROW(kvevict::Budget::from(A::fraction(-1.0)), std::invalid_argument);
  EXPECT_TRUE(kvevict::RecentWindow::from(A::none()).is_none());
  EXPECT_EQ(kvevict::RecentWindow::from(A::count(3)).resolve(10), 3u);
  EXPECT_EQ(kvevict::RecentWindow::from(A::fraction(0.3)).resolve(128), 38u);
  EXPECT_THROW(kvevict::RecentWindow::from(A::fraction(1.5)), std::invalid_argument);
}

TEST(TokenAmount, ParsesCountsPercentagesAndNone) {
  using A = kvevict::TokenAmount;
  EXPECT_EQ(A::parse("64", "--budget").count_value(), 64u);
  EXPECT_TRUE(A::parse("64", "--budget").is_count());
  EXPECT_EQ(A::parse("50%", "--budget").fraction_value(), 0.5);
  EXPECT_EQ(A::parse("12.5%", "--budget").fraction_value(), 0.125);
  EXPECT_TRUE(A::parse("none", "--recent").is_none());
  for (const char* bad : {"", "abc", "5%x", "-3", "1e3", "%", "99999999999999999999999"}) {
    try {
      (void)A::parse(bad, "--budget");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string("--budget: expected a token count such as 64 or a percentage such "
                                                   "as 50%, got '") + bad + "'");
    }
  }
}

}  // namespace
