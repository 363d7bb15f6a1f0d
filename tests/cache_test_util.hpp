// tests/cache_test_util.hpp — what the kvevict::Cache tests (cache_test, cache_noise_test, cache_errors_test)
// share: position lists, +inf, and a CacheConfig of n_q query heads with k and w as token counts.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include <kvevict/kvevict.hpp>

namespace cache_test {

using Positions = std::vector<std::int64_t>;

constexpr float kInf = std::numeric_limits<float>::infinity();

inline kvevict::CacheConfig config(std::size_t n_q, std::size_t k, std::size_t w, std::uint64_t seed = 0) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.seed = seed;
  return c;
}

}  // namespace cache_test
