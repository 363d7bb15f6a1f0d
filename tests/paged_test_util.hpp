// tests/paged_test_util.hpp — what the paged KV cache tests (paged_test, paged_eviction_test, paged_errors_test)
// share: one layer's page storage, a sequence's page table over it, appending rows that encode their token and
// checking them, a deterministic logit, and the configuration of a shared-heads cache.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace paged_test {

using kvevict::kNoPage;
using kvevict::PageLayout;
using kvevict::PagePool;
using kvevict::PagedKVView;

/// The K/V page storage of one layer (both pools), shared by the sequences of a test.
struct Storage {
  std::size_t num_pages, page_size, n_kv, d;
  PageLayout layout;
  std::vector<float> k, v;
  Storage(std::size_t pages, std::size_t ps, std::size_t nkv, std::size_t hd, PageLayout lay)
      : num_pages(pages), page_size(ps), n_kv(nkv), d(hd), layout(lay), k(pages * ps * nkv * hd, 0.0f),
        v(k.size(), 0.0f) {}
};

/// One sequence's page table, length and positions.
struct Seq {
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  std::vector<std::int64_t> positions;
  PagedKVView<float> view;
  Seq(Storage& st, std::size_t max_pages) : table(max_pages, kNoPage), positions(max_pages * st.page_size, 0) {
    view.k = st.k.data();
    view.v = st.v.data();
    view.num_pages = st.num_pages;
    view.page_size = st.page_size;
    view.n_kv_heads = st.n_kv;
    view.head_dim = st.d;
    view.layout = st.layout;
    view.page_table = table.data();
    view.max_pages = max_pages;
    view.length = &length;
    view.positions = positions.data();
  }
  Seq(const Seq&) = delete;
};

inline void append_paged(PagePool& pool, const PagedKVView<float>& view, std::int64_t p) {
  std::vector<float> k(view.n_kv_heads * view.head_dim), v(k.size());
  for (std::size_t h = 0; h < view.n_kv_heads; ++h)
    for (std::size_t i = 0; i < view.head_dim; ++i) {
      k[h * view.head_dim + i] = kvtest::k_value(p, h, i);
      v[h * view.head_dim + i] = -kvtest::k_value(p, h, i);
    }
  pool.append(view, p, k.data(), v.data());
}

/// Every live slot's K and V rows still belong to its position ID.
inline ::testing::AssertionResult paged_rows_aligned(const PagedKVView<float>& view) {
  for (std::size_t s = 0; s < *view.length; ++s)
    for (std::size_t h = 0; h < view.n_kv_heads; ++h)
      for (std::size_t i = 0; i < view.head_dim; ++i) {
        const float want = kvtest::k_value(view.positions[s], h, i);
        if (view.k_row(h, s)[i] != want || view.v_row(h, s)[i] != -want)
          return ::testing::AssertionFailure() << "slot " << s << " head " << h << " elem " << i;
      }
  return ::testing::AssertionSuccess();
}

// Deterministic logit of (step, query head, position), -inf for ~5 % (masked).
inline float logit_of(std::uint64_t step, std::uint64_t h, std::int64_t pos) {
  kvevict::Xoshiro256pp g(((step * 1000003u + h) * 1000033u + static_cast<std::uint64_t>(pos)) * 31u + 7u);
  const float u = static_cast<float>(g() >> 40) / 16777216.0f;
  if (u < 0.05f) return -std::numeric_limits<float>::infinity();
  return 6.0f * static_cast<float>(g() >> 40) / 16777216.0f - 3.0f;
}

inline kvevict::CacheConfig shared_config(std::size_t n_q, std::size_t k, std::size_t w) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.shared_heads = true;
  c.seed = 1234;
  return c;
}

inline kvevict::PolicyParams params_for(std::size_t horizon) {
  kvevict::PolicyParams p;
  p.horizon = horizon;
  p.sinks = 3;
  p.snap_window = 8;  // SnapKV: L <= k in these tests
  p.snap_kernel = 5;
  return p;
}

}  // namespace paged_test
