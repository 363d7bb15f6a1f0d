// Paged attention logits and page strides: paged_attention_logits gives the contiguous helper's floats on the
// same K rows (every layout, page size, page order and stride), FlashInfer's combined K/V pool described by a
// page stride (the offsets by hand, a paged cache evicting on it as on separate pools), and K/V pools that share
// an element rejected.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvevict::kNoPage;
using kvevict::PageLayout;
using kvevict::PagePool;
using kvevict::PagedKVView;

/// One sequence over caller-owned pools: its page table, length and positions.
template <class T>
struct Seq {
  std::vector<std::int32_t> table;
  std::size_t length = 0;
  std::vector<std::int64_t> positions;
  PagedKVView<T> view;
  Seq(T* k, T* v, std::size_t num_pages, std::size_t page_size, std::size_t n_kv, std::size_t d, PageLayout layout,
      std::size_t max_pages, std::size_t page_stride = 0)
      : table(max_pages, kNoPage), positions(max_pages * page_size, 0) {
    view = PagedKVView<T>{k, v, num_pages, page_size, n_kv, d, layout, table.data(), max_pages, &length,
                          positions.data(), page_stride};
  }
  Seq(const Seq&) = delete;
};

template <class T>
std::vector<T> token_rows(std::int64_t p, std::size_t n_kv, std::size_t d, float sign) {
  std::vector<T> r(n_kv * d);
  for (std::size_t h = 0; h < n_kv; ++h)
    for (std::size_t i = 0; i < d; ++i) r[h * d + i] = T(sign * kvtest::k_value(p, h, i));
  return r;
}

// FlashInfer's combined pool kv[num_pages][2][page_size][n_kv_heads][head_dim]: K of page p at
// p * 2E, V at p * 2E + E. Before the page stride, `v = kv + E` read the next page's K as V.
TEST(PagedStride, CombinedPoolPutsKAndVWhereFlashInferReadsThem) {
  const std::size_t pages = 3, ps = 2, n_kv = 1, d = 1, E = ps * n_kv * d;
  std::vector<float> kv(pages * 2 * E, 0.0f);
  Seq<float> seq(kv.data(), kv.data() + E, pages, ps, n_kv, d, PageLayout::NHD, 2, 2 * E);
  PagePool pool(pages);
  for (std::int64_t p = 0; p < 4; ++p) {
    const float k = 100.0f + float(p), v = -100.0f - float(p);
    pool.append(seq.view, p, &k, &v);
  }
  ASSERT_EQ(seq.length, 4u);
  std::vector<float> gathered_k, gathered_v;
  for (std::size_t s = 0; s < 4; ++s) {
    gathered_k.push_back(*seq.view.k_row(0, s));
    gathered_v.push_back(*seq.view.v_row(0, s));
  }
  EXPECT_EQ(gathered_k, (std::vector<float>{100, 101, 102, 103}));
  EXPECT_EQ(gathered_v, (std::vector<float>{-100, -101, -102, -103}));
  // The raw buffer, [page][K/V][slot]: the sequence's two pages, the third one untouched.
  const std::int32_t a = seq.table[0], b = seq.table[1];
  std::vector<float> want(pages * 2 * E, 0.0f);
  want[std::size_t(a) * 2 * E + 0] = 100, want[std::size_t(a) * 2 * E + 1] = 101;
  want[std::size_t(a) * 2 * E + E + 0] = -100, want[std::size_t(a) * 2 * E + E + 1] = -101;
  want[std::size_t(b) * 2 * E + 0] = 102, want[std::size_t(b) * 2 * E + 1] = 103;
  want[std::size_t(b) * 2 * E + E + 0] = -102, want[std::size_t(b) * 2 * E + E + 1] = -103;
  EXPECT_EQ(kv, want);
  EXPECT_EQ(seq.view.offset(2, 0, 1), 2 * 2 * E + 1);
}

TEST(PagedStride, OffsetFormulaWithAStride) {
  // NHD: p * S + (o * n_kv + h) * d; HND: p * S + (h * page_size + o) * d.
  EXPECT_EQ(kvevict::paged_row_offset(PageLayout::NHD, 4, 3, 8, 1000, 2, 1, 3), 2000u + (3 * 3 + 1) * 8);
  EXPECT_EQ(kvevict::paged_row_offset(PageLayout::HND, 4, 3, 8, 1000, 2, 1, 3), 2000u + (1 * 4 + 3) * 8);
  // Packed pages: the stride is one page, the old formulas.
  EXPECT_EQ(kvevict::paged_row_offset(PageLayout::NHD, 4, 3, 8, 2, 1, 3), ((2u * 4 + 3) * 3 + 1) * 8);
  EXPECT_EQ(kvevict::paged_row_offset(PageLayout::HND, 4, 3, 8, 2, 1, 3), ((2u * 3 + 1) * 4 + 3) * 8);
}

TEST(PagedStride, KAndVPoolsThatShareAnElementAreRejected) {
  const std::size_t pages = 4, ps = 2, n_kv = 2, d = 3, E = ps * n_kv * d;
  std::vector<float> buf(pages * 2 * E + 2 * pages * E, 0.0f);
  float* base = buf.data();
  auto check = [&](float* k, float* v, std::size_t stride) {
    Seq<float> seq(k, v, pages, ps, n_kv, d, PageLayout::NHD, 2, stride);
    seq.view.validate();
  };
  auto rejected = [&](float* k, float* v, std::size_t stride, const char* what) {
    try {
      check(k, v, stride);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(check(base, base + E, 2 * E));             // the combined pool
  EXPECT_NO_THROW(check(base + E, base, 2 * E));             // V first in each page
  EXPECT_NO_THROW(check(base, base + pages * E, 0));         // two packed pools, back to back
  EXPECT_NO_THROW(check(base + pages * E, base, 0));
  rejected(base, base + E, 0, "K and V pools overlap");      // the combined pool without its stride
  rejected(base, base, 0, "K and V pools overlap");          // one pool for both
  rejected(base, base + E / 2, 2 * E, "K and V pools overlap");  // half a page apart
  rejected(base, base + pages * E - 1, 0, "K and V pools overlap");  // the last element shared
  rejected(base, base + E, E - 1, "page_stride_elements (11) must be 0 or at least page_elements() (12)");
  // A stride wide enough for both, V landing in a K page further on: K page 1 = [3E, 4E) holds v's page 0.
  rejected(base, base + 3 * E, 3 * E, "K and V pools overlap");
  EXPECT_NO_THROW(check(base, base + 2 * E, 3 * E));       // [0, E), [2E, 3E), then [3E, 4E), [5E, 6E), ...
}

/// The same K rows in a contiguous KVBuffer (slot s = logical slot s of the paged sequence) and in pages
/// (a shuffled page table), then both helpers with and without bias: the same floats.
template <class T>
void expect_paged_equals_contiguous(PageLayout layout, std::size_t ps, std::size_t n, std::size_t d,
                                    std::size_t stride_pages, std::uint32_t seed) {
  const std::size_t n_kv = 2, n_q = 6, max_pages = (n + ps - 1) / ps, pages = max_pages + 3;
  const std::size_t E = ps * n_kv * d, stride = stride_pages * E;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<T> k_pool(pages * (stride ? stride : E) + E), v_pool(k_pool.size());
  Seq<T> seq(k_pool.data(), v_pool.data(), pages, ps, n_kv, d, layout, max_pages, stride);
  std::vector<std::int32_t> order(pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  kvevict::KVBuffer<T> buffer(n_kv, n, d);
  auto contiguous = buffer.view();
  for (std::size_t s = 0; s < n; ++s) {
    std::vector<T> k(n_kv * d), v(n_kv * d);
    for (auto& x : k) x = T(u(gen));
    for (auto& x : v) x = T(u(gen));
    contiguous.append(std::int64_t(s), k.data(), v.data());
    if (s % ps == 0) seq.table[s / ps] = order[s / ps];
    for (std::size_t h = 0; h < n_kv; ++h) {
      std::memcpy(static_cast<void*>(seq.view.k_row(h, s)), k.data() + h * d, d * sizeof(T));
      std::memcpy(static_cast<void*>(seq.view.v_row(h, s)), v.data() + h * d, d * sizeof(T));
    }
    seq.positions[s] = std::int64_t(s);
    seq.length = s + 1;
  }
  std::vector<float> q(n_q * d), bias(n_q * n);
  for (auto& x : q) x = u(gen);
  for (auto& x : bias) x = u(gen);
  std::vector<float> want(n_q * n), got(n_q * n, -7.0f);
  for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
    kvevict::attention_logits(contiguous, q.data(), n_q, want.data(), 0.125f, b);
    kvevict::paged_attention_logits(seq.view, q.data(), n_q, got.data(), 0.125f, b);
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_EQ(std::memcmp(&want[i], &got[i], sizeof(float)), 0)
          << kvevict::page_layout_name(layout) << " page_size " << ps << " n " << n << " d " << d << " stride "
          << stride << (b ? " bias" : "") << " at " << i << ": " << want[i] << " vs " << got[i];
  }
}

TEST(PagedAttentionLogits, SameFloatsAsTheContiguousHelperOnTheSameRows) {
  std::uint32_t seed = 1;
  for (PageLayout layout : {PageLayout::NHD, PageLayout::HND})
    for (std::size_t ps : {1u, 3u, 4u, 16u})
      for (std::size_t n : {1u, 5u, 16u, 33u})
        for (std::size_t d : {16u, 64u})
          for (std::size_t stride_pages : {0u, 2u})
            expect_paged_equals_contiguous<float>(layout, ps, n, d, stride_pages, seed++);
}

TEST(PagedAttentionLogits, SameFloatsForHalfAndBfloat16Keys) {
  expect_paged_equals_contiguous<Eigen::half>(PageLayout::NHD, 4, 11, 32, 0, 7);
  expect_paged_equals_contiguous<Eigen::bfloat16>(PageLayout::HND, 3, 10, 16, 2, 8);
}

// A head_dim that is not a multiple of Eigen's packet: the floats may differ in the last bits, never more
// than float rounding from a double-precision reference.
TEST(PagedAttentionLogits, OddHeadDimWithinRoundingOfADoubleReference) {
  for (std::size_t d : {1u, 5u, 7u, 12u}) {
    const std::size_t n_kv = 2, n_q = 4, ps = 3, n = 10, pages = 5;
    std::vector<float> k_pool(pages * ps * n_kv * d), v_pool(k_pool.size());
    Seq<float> seq(k_pool.data(), v_pool.data(), pages, ps, n_kv, d, PageLayout::HND, 4);
    seq.table = {3, 0, 4, 1};
    seq.view.page_table = seq.table.data();
    seq.length = n;
    std::mt19937 gen{static_cast<unsigned>(d)};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& x : k_pool) x = u(gen);
    std::vector<float> q(n_q * d), x(n_q * n);
    for (auto& e : q) e = u(gen);
    kvevict::paged_attention_logits(seq.view, q.data(), n_q, x.data(), 0.25f);
    for (std::size_t h = 0; h < n_q; ++h)
      for (std::size_t s = 0; s < n; ++s) {
        double dot = 0.0, mag = 0.0;
        for (std::size_t i = 0; i < d; ++i) {
          dot += double(q[h * d + i]) * double(seq.view.k_row(h / 2, s)[i]);
          mag += std::abs(double(q[h * d + i]) * double(seq.view.k_row(h / 2, s)[i]));
        }
        EXPECT_NEAR(x[h * n + s], 0.25 * dot, 0.25 * mag * 1e-6) << "d " << d << " head " << h << " slot " << s;
      }
  }
}

// By hand: 1 KV head, 2 query heads (g = 2), d = 2, pages of 2 in the order [1, 0]; K of slot s = (s + 1, 1).
TEST(PagedAttentionLogits, ExactValuesByHand) {
  std::vector<float> k_pool(2 * 2 * 2), v_pool(k_pool.size());
  Seq<float> seq(k_pool.data(), v_pool.data(), 2, 2, 1, 2, PageLayout::NHD, 2);
  seq.table = {1, 0};
  seq.view.page_table = seq.table.data();
  for (std::size_t s = 0; s < 3; ++s) {
    seq.view.k_row(0, s)[0] = float(s + 1);
    seq.view.k_row(0, s)[1] = 1.0f;
  }
  seq.length = 3;
  EXPECT_EQ(k_pool, (std::vector<float>{3, 1, 0, 0, 1, 1, 2, 1}));  // page 1 holds slots 0, 1; page 0 slot 2
  const std::vector<float> q = {1, 0, 2, 10};                       // q_head 0 reads K[0], q_head 1 2·K[0] + 10
  const std::vector<float> bias = {0, 0, -1, 0, 0, 0.5f};
  std::vector<float> x(6);
  kvevict::paged_attention_logits(seq.view, q.data(), 2, x.data(), 0.5f, bias.data());
  EXPECT_EQ(x, (std::vector<float>{0.5f, 1.0f, 0.5f, 6.0f, 7.0f, 8.5f}));
}

TEST(PagedAttentionLogits, BadArgumentsThrowAndLeaveOutUntouched) {
  std::vector<float> k_pool(4 * 2 * 2 * 4), v_pool(k_pool.size());
  Seq<float> seq(k_pool.data(), v_pool.data(), 4, 2, 2, 4, PageLayout::NHD, 3);
  seq.table = {2, kNoPage, kNoPage};
  seq.view.page_table = seq.table.data();
  seq.length = 3;  // two pages live, the second entry is kNoPage
  std::vector<float> q(4 * 4, 1.0f), out(4 * 3, 42.0f);
  auto message = [&](std::size_t n_q, const float* qp) {
    try {
      kvevict::paged_attention_logits(seq.view, qp, n_q, out.data(), 1.0f);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message(4, q.data()), "kvevict::paged_attention_logits: page_table[1] = -1 is not a page id in [0, 4) "
                                  "(the sequence holds 3 slots in 2 pages)");
  seq.table[1] = 0;
  EXPECT_EQ(message(3, q.data()), "kvevict::paged_attention_logits: n_q_heads (3) must be a positive multiple of "
                                  "n_kv_heads (2)");
  EXPECT_EQ(message(4, nullptr), "kvevict::paged_attention_logits: q and out must be non-null");
  EXPECT_EQ(message(4, out.data() + 1), "kvevict::paged_attention_logits: out overlaps q (give out its own array)");
  const auto with_bias = [&](const float* bias) {
    try {
      kvevict::paged_attention_logits(seq.view, q.data(), 4, out.data(), 1.0f, bias);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  // bias == out would be overwritten by the product before it is added (2 · scale · q·k silently).
  EXPECT_EQ(with_bias(out.data()), "kvevict::paged_attention_logits: out overlaps bias (bias == out is not an "
                                   "in-place add: give out its own array, or add the bias after the call)");
  EXPECT_EQ(out, std::vector<float>(4 * 3, 42.0f));
  EXPECT_EQ(message(4, q.data()), "no exception");
}

// A paged H2O cache on FlashInfer's combined pool keeps the same positions, scores and rows as on two
// separate pools: the stride reaches every row move.
TEST(PagedStride, CacheOnTheCombinedPoolEqualsSeparatePools) {
  const std::size_t pages = 6, ps = 2, n_kv = 2, d = 3, n_q = 4, P = 7, E = ps * n_kv * d;
  std::vector<float> combined(pages * 2 * E), k_pool(pages * E), v_pool(pages * E);
  Seq<float> a(combined.data(), combined.data() + E, pages, ps, n_kv, d, PageLayout::NHD, 5, 2 * E);
  Seq<float> b(k_pool.data(), v_pool.data(), pages, ps, n_kv, d, PageLayout::NHD, 5);
  PagePool pool_a(pages), pool_b(pages);
  kvevict::CacheConfig config;
  config.n_q_heads = n_q;
  config.budget = kvevict::Budget::tokens(4);
  config.recent = kvevict::RecentWindow::tokens(1);
  config.shared_heads = true;
  auto cache_a = kvevict::make_paged_cache(kvevict::Policy::h2o, config, {}, a.view, pool_a);
  auto cache_b = kvevict::make_paged_cache(kvevict::Policy::h2o, config, {}, b.view, pool_b);
  for (std::int64_t p = 0; p < std::int64_t(P); ++p) {
    const auto k = token_rows<float>(p, n_kv, d, 1.0f), v = token_rows<float>(p, n_kv, d, -1.0f);
    pool_a.append(a.view, p, k.data(), v.data());
    pool_b.append(b.view, p, k.data(), v.data());
  }
  const auto x = kvtest::causal_logits(n_q, P, [](std::size_t h, std::size_t r, std::size_t c) {
    return float((h + 1) * ((r * 7 + c * 3) % 5)) * 0.25f;
  });
  cache_a->prefill(x.data(), P);
  cache_b->prefill(x.data(), P);
  for (std::int64_t p = std::int64_t(P); p < std::int64_t(P) + 3; ++p) {
    const auto k = token_rows<float>(p, n_kv, d, 1.0f), v = token_rows<float>(p, n_kv, d, -1.0f);
    pool_a.append(a.view, p, k.data(), v.data());
    pool_b.append(b.view, p, k.data(), v.data());
    std::vector<float> logits(n_q * a.length);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = float((i * 5 + std::size_t(p)) % 7) * 0.5f;
    cache_a->decode_step(logits.data(), a.length);
    cache_b->decode_step(logits.data(), b.length);
  }
  ASSERT_EQ(a.length, b.length);
  EXPECT_EQ(a.length, 4u);
  for (std::size_t h = 0; h < n_kv; ++h) {
    EXPECT_EQ(cache_a->retained_positions(h), cache_b->retained_positions(h));
    for (std::size_t s = 0; s < a.length; ++s) {
      ASSERT_EQ(a.positions[s], b.positions[s]);
      for (std::size_t i = 0; i < d; ++i) {
        EXPECT_EQ(a.view.k_row(h, s)[i], kvtest::k_value(a.positions[s], h, i));
        EXPECT_EQ(a.view.v_row(h, s)[i], -kvtest::k_value(a.positions[s], h, i));
      }
    }
  }
}

}  // namespace
