// Tests of the selection rule kvevict::select_keep (Keyformer §3.3, Algorithm 1).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/selection/select_keep.hpp>

namespace {

using Ids = std::vector<std::size_t>;

// Reference: full stable sort of the non-recent pool by (score desc, index asc).
Ids reference_keep(const std::vector<float>& s, std::size_t k, std::size_t w) {
  const std::size_t n = s.size(), m = std::min(k, n), r = std::min(w, n), pool = n - r;
  Ids order(pool);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return s[a] > s[b]; });
  Ids keep(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m - r));
  for (std::size_t i = pool; i < n; ++i) keep.push_back(i);
  std::sort(keep.begin(), keep.end());
  return keep;
}

TEST(SelectKeep, IssueExampleKeepsRecentPlusTopKeysNotGlobalTopK) {
  EXPECT_EQ(kvevict::select_keep({0.40f, 0.20f, 0.10f, 0.05f, 0.25f}, 3, 1), (Ids{0, 1, 4}));
}

TEST(SelectKeep, NoRecentWindowIsPlainTopK) {
  EXPECT_EQ(kvevict::select_keep({0.40f, 0.20f, 0.10f, 0.05f, 0.25f}, 3, 0), (Ids{0, 1, 4}));
  EXPECT_EQ(kvevict::select_keep({0.1f, 0.5f, 0.3f, 0.9f}, 2, 0), (Ids{1, 3}));
}

TEST(SelectKeep, WindowEqualToBudgetIsSlidingWindow) {
  EXPECT_EQ(kvevict::select_keep({9.f, 8.f, 7.f, 0.f, 0.f, 0.f}, 3, 3), (Ids{3, 4, 5}));
}

TEST(SelectKeep, NothingEvictedWhenNAtMostK) {
  EXPECT_EQ(kvevict::select_keep({0.3f, 0.1f, 0.2f}, 3, 1), (Ids{0, 1, 2}));
  EXPECT_EQ(kvevict::select_keep({0.3f, 0.1f}, 5, 4), (Ids{0, 1}));
  EXPECT_EQ(kvevict::select_keep({}, 5, 2), Ids{});
}

TEST(SelectKeep, RecentTokenIsNeverCountedTwice) {
  // The highest score is the recent token itself: the key slots go to the next best.
  EXPECT_EQ(kvevict::select_keep({0.1f, 0.3f, 0.2f, 5.0f}, 3, 1), (Ids{1, 2, 3}));
}

TEST(SelectKeep, TiesGoToTheOlderCandidate) {
  EXPECT_EQ(kvevict::select_keep({0.5f, 0.5f, 0.5f, 0.5f, 0.0f}, 3, 1), (Ids{0, 1, 4}));
  EXPECT_EQ(kvevict::select_keep({0.2f, 0.7f, 0.2f, 0.7f, 0.2f}, 3, 0), (Ids{0, 1, 3}));
}

TEST(SelectKeep, InfinitiesAreOrdinaryValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kvevict::select_keep({-inf, inf, 0.0f, -inf}, 2, 0), (Ids{1, 2}));
}

TEST(SelectKeep, RejectsBadArgumentsWithNamedMessage) {
  try {
    kvevict::select_keep({0.1f}, 0, 0);
    FAIL() << "k = 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::select_keep: k must be >= 1 (got 0)");
  }
  try {
    kvevict::select_keep({0.1f, 0.2f}, 2, 3);
    FAIL() << "w > k accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::select_keep: w must be <= k (got w = 3, k = 2)");
  }
  try {
    kvevict::select_keep({0.1f, std::nanf(""), 0.2f}, 2, 0);
    FAIL() << "NaN accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::select_keep: scores[1] is NaN");
  }
}

TEST(SelectKeep, NonAllocatingOverloadWritesIntoCallerStorage) {
  const float scores[] = {0.40f, 0.20f, 0.10f, 0.05f, 0.25f};
  std::size_t out[5] = {99, 99, 99, 99, 99};
  ASSERT_EQ(kvevict::select_keep(scores, 5, 3, 1, out), 3u);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 1u);
  EXPECT_EQ(out[2], 4u);
  // NaN: nothing written.
  const float bad[] = {0.1f, std::nanf("")};
  std::size_t untouched[2] = {7, 7};
  EXPECT_THROW(kvevict::select_keep(bad, 2, 1, 0, untouched), std::invalid_argument);
  EXPECT_EQ(untouched[0], 7u);
  EXPECT_EQ(untouched[1], 7u);
}

TEST(SelectKeep, RandomizedAgainstFullSortReference) {
  std::mt19937_64 gen(12345);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = gen() % 64;
    const std::size_t k = 1 + gen() % 70;
    const std::size_t w = gen() % (k + 1);
    std::vector<float> s(n);
    // Few distinct values so that ties are frequent.
    for (auto& x : s) x = static_cast<float>(gen() % 7) * 0.25f;
    const Ids got = kvevict::select_keep(s, k, w);
    ASSERT_EQ(got, reference_keep(s, k, w)) << "n=" << n << " k=" << k << " w=" << w;
    // Properties: count, ascending without duplicates, recent window kept.
    ASSERT_EQ(got.size(), std::min(k, n));
    ASSERT_TRUE(std::adjacent_find(got.begin(), got.end(), std::greater_equal<std::size_t>()) == got.end());
    for (std::size_t i = n - std::min(w, n); i < n; ++i)
      ASSERT_TRUE(std::binary_search(got.begin(), got.end(), i));
  }
}

}  // namespace
