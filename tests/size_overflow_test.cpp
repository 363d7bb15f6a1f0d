// Sizes whose product overflows std::size_t (issue 51, "every size product in a public constructor or function is
// checked"): each public entry point that sizes a buffer or addresses an array from caller-controlled dimensions
// refuses a product that wraps, with `detail::checked_mul`'s message naming the function, the product's terms and
// their values, before anything is allocated or written. Each case below was accepted before (a wrapped size, a
// buffer sized from it, then reads or writes past it), or threw something that named nothing. Expected Attention's
// cases (items 5 and 6) are in expected_attention_test.cpp.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/cuda/views.cuh>
#include <kvevict/kvevict.hpp>
#include <kvevict/paged_presets.hpp>

#include "test_util.hpp"

namespace {

using kvtest::invalid_argument_message;

constexpr std::size_t k2p61 = std::size_t{1} << 61, k2p62 = std::size_t{1} << 62, k2p63 = std::size_t{1} << 63;


TEST(CheckedMul, ProductsSumsAndMessages) {
  using kvevict::detail::checked_add;
  using kvevict::detail::checked_mul;
  EXPECT_EQ(checked_mul("f", "a * b", 3, 5), 15u);
  EXPECT_EQ(checked_mul("f", "a * b", k2p62, 3), 3 * k2p62);
  EXPECT_EQ(checked_mul("f", "a * b", SIZE_MAX, 1), SIZE_MAX);
  EXPECT_EQ(checked_mul("f", "a * b", SIZE_MAX, 0), 0u);
  EXPECT_EQ(checked_mul("f", "a * b * c", k2p63, 0, 4), 0u);  // a zero term: the product is 0
  EXPECT_EQ(checked_mul("f", "a * b * c * d", 2, 3, 5, 7), 210u);
  EXPECT_EQ(checked_mul("f", "a * b", std::size_t{1} << 32, (std::size_t{1} << 32) - 1), SIZE_MAX - (SIZE_MAX >> 32));
  EXPECT_EQ(invalid_argument_message(
                [] { (void)checked_mul("kvevict::f", "n * m", std::size_t{1} << 32, std::size_t{1} << 32); }),
            "kvevict::f: n * m = 4294967296 * 4294967296 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { (void)checked_mul("kvevict::f", "a * b * c", k2p62, 2, 2); }),
            "kvevict::f: a * b * c = 4611686018427387904 * 2 * 2 overflows std::size_t");
  EXPECT_EQ(checked_add("f", "a + b", SIZE_MAX - 1, 1), SIZE_MAX);
  EXPECT_EQ(invalid_argument_message([] { (void)checked_add("kvevict::f", "a + b", SIZE_MAX, 1); }),
            "kvevict::f: a + b = 18446744073709551615 + 1 overflows std::size_t");
}

TEST(SizeOverflow, KVViewRefusesFieldsWhoseStorageOverflows) {
  std::vector<float> k(64), v(64);
  std::vector<std::int64_t> pos(16);
  std::vector<std::size_t> len(2, 0);
  // contiguous(): capacity · head_dim was the head stride, wrapped to 0 (the view was then accepted).
  EXPECT_EQ(invalid_argument_message([&] {
              (void)kvevict::KVView<float>::contiguous(k.data(), v.data(), pos.data(), len.data(), 1, k2p62, 4);
            }),
            "kvevict::KVView::contiguous: capacity * head_dim = 4611686018427387904 * 4 overflows std::size_t");
  // Two heads, head-major (head_stride = 2^63 + 2^62 >= capacity · slot_stride = 2^58 · 32): K spans
  // (2^63 + 2^62) + ((2^58 − 1) · 32 + 4) elements.
  kvevict::KVView<float> view;
  view.k = k.data();
  view.v = v.data();
  view.positions = pos.data();
  view.lengths = len.data();
  view.n_kv_heads = 2;
  view.capacity = std::size_t{1} << 58;
  view.head_dim = 4;
  view.slot_stride = 32;
  view.head_stride = k2p63 + k2p62;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::KVView: (n_kv_heads - 1) * head_stride + (capacity - 1) * slot_stride + head_dim (elements of "
            "K) = 13835058055282163712 + 9223372036854775780 overflows std::size_t");
  // A cache built on it refuses it the same way, before allocating n_kv_heads · capacity scores.
  EXPECT_EQ(invalid_argument_message([&] { kvevict::H2O cache(kvtest::token_config(4, 1), view); }),
            "kvevict::KVView: (n_kv_heads - 1) * head_stride + (capacity - 1) * slot_stride + head_dim (elements of "
            "K) = 13835058055282163712 + 9223372036854775780 overflows std::size_t");
  // One head of one slot of 2^62 floats: 2^62 elements fit, their 2^64 bytes do not; 2^61 floats are 2^63 bytes,
  // more than any array (a cache's 2 · row_bytes of stash wrapped to 0 for them).
  view.n_kv_heads = 1;
  view.capacity = 1;
  view.head_dim = k2p62;
  view.slot_stride = k2p62;
  view.head_stride = 0;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::KVView: the elements of K * sizeof(T) = 4611686018427387904 * 4 overflows std::size_t");
  view.head_dim = view.slot_stride = k2p61;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::KVView: K spans 2305843009213693952 elements of 4 bytes = 9223372036854775808 bytes, more than "
            "PTRDIFF_MAX (no array is that large)");
  EXPECT_EQ(invalid_argument_message([&] { kvevict::H2O cache(kvtest::token_config(4, 1), view); }),
            "kvevict::KVView: K spans 2305843009213693952 elements of 4 bytes = 9223372036854775808 bytes, more than "
            "PTRDIFF_MAX (no array is that large)");
  // The position IDs, n_kv_heads · capacity int64.
  view.n_kv_heads = 4;
  view.capacity = k2p61;
  view.head_dim = 1;
  view.head_stride = 1;
  view.slot_stride = 4;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::KVView: n_kv_heads * capacity * sizeof(std::int64_t) (position IDs) = 4 * 2305843009213693952 "
            "* 8 overflows std::size_t");
}

TEST(SizeOverflow, KVBufferRefusesBeforeAllocating) {
  // Was: K and V sized by the wrapped product (0), the position IDs by n_kv_heads · capacity = 2^63 (length_error).
  EXPECT_EQ(invalid_argument_message([] { kvevict::KVBuffer<float> b(k2p62, 2, 2); }),
            "kvevict::KVBuffer: n_kv_heads * capacity * head_dim = 4611686018427387904 * 2 * 2 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { kvevict::KVBuffer<float> b(2, 2, k2p63); }),
            "kvevict::KVBuffer: n_kv_heads * capacity * head_dim = 2 * 2 * 9223372036854775808 overflows std::size_t");
}

TEST(SizeOverflow, AttentionLogitsRefusesAQueryHeadCountNoArrayHolds) {
  // n_q_heads = 2^62 on one KV head: q's extent n_q_heads · head_dim wrapped; the loop then read q for 2^62 heads.
  kvevict::KVBuffer<float> buf(1, 4, 4);
  auto kv = buf.view();
  const float row[4] = {1, 2, 3, 4};
  kv.append(0, row, row);
  std::vector<float> q(8, 0.5f), out(8, -7.0f);
  EXPECT_EQ(invalid_argument_message([&] { kvevict::attention_logits(kv, q.data(), k2p62, out.data(), 1.0f); }),
            "kvevict::attention_logits: n_q_heads * head_dim * sizeof(float) (the bytes of q) = 4611686018427387904 "
            "* 4 * 4 overflows std::size_t");
  for (float x : out) EXPECT_EQ(x, -7.0f);
}

TEST(SizeOverflow, QKChunkScratchAndPrefillChunkQk) {
  // row_tile · capacity wrapped to 0: the scratch held no block, and prefill_chunk_qk's rows were written past it.
  EXPECT_EQ(invalid_argument_message([] { kvevict::QKChunkScratch s(k2p62, 4); }),
            "kvevict::QKChunkScratch: row_tile * capacity = 16 * 4611686018427387904 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { kvevict::QKChunkScratch s(8, k2p62, 16, 128); }),
            "kvevict::QKChunkScratch: col_tile * head_dim = 128 * 4611686018427387904 overflows std::size_t");
  // q is [C][n_q_heads][head_dim]: an n_q_heads whose q cannot exist is refused before the cache is called.
  kvevict::KVBuffer<float> buf(1, 8, 4);
  auto kv = buf.view();
  kvevict::H2O cache(kvtest::token_config(4, 1), kv);
  const float row[4] = {1, 0, 0, 1};
  kv.append(0, row, row);
  kv.append(1, row, row);
  kvevict::QKChunkScratch scratch(8, 4);
  const std::vector<float> q(8, 0.25f);
  EXPECT_EQ(invalid_argument_message(
                [&] { kvevict::prefill_chunk_qk(cache, kv, q.data(), 2, k2p62, 0.5f, scratch); }),
            "kvevict::prefill_chunk_qk: chunk_len * n_q_heads * head_dim (the elements of q) = 2 * "
            "4611686018427387904 * 4 overflows std::size_t");
}

TEST(SizeOverflow, PagedViewAndCacheRefuseBeforeAllocating) {
  std::vector<float> k(1024), v(1024);
  std::vector<std::int32_t> table(4, kvevict::kNoPage);
  std::vector<std::int64_t> positions(16);
  std::size_t length = 0;
  // max_pages · page_size wrapped to 0 (capacity 0 held length 0, so the view was accepted).
  kvevict::PagedKVView<float> view{k.data(), v.data(), 4, 4, 1, 2, kvevict::PageLayout::NHD,
                                   table.data(), k2p62, &length, positions.data()};
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::PagedKVView: max_pages * page_size * sizeof(std::int64_t) (position IDs) = 4611686018427387904 "
            "* 4 * 8 overflows std::size_t");
  // page_size · n_kv_heads · head_dim (one page).
  view.max_pages = 4;
  view.page_size = k2p62;
  view.n_kv_heads = 2;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::PagedKVView: max_pages * page_size * sizeof(std::int64_t) (position IDs) = 4 * "
            "4611686018427387904 * 8 overflows std::size_t");
  view.max_pages = 1;
  view.page_size = k2p61 - 1;  // 8 (2^61 − 1) position bytes fit
  view.head_dim = 8;
  EXPECT_EQ(invalid_argument_message([&] { view.validate(); }),
            "kvevict::PagedKVView: page_size * n_kv_heads * head_dim = 2305843009213693951 * 2 * 8 overflows "
            "std::size_t");
  // The cache's scores, n_kv_heads · capacity: 1024 KV heads of one slot per page (a pool of one 1024-float page)
  // and 2^60 pages in the table. The view's own sizes fit; their product sized the scores (wrapped to 0) before.
  kvevict::PagePool pool(1);
  kvevict::PagedKVView<float> wide{k.data(), v.data(), 1, 1, 1024, 1, kvevict::PageLayout::NHD,
                                   table.data(), std::size_t{1} << 60, &length, positions.data()};
  EXPECT_NO_THROW(wide.validate());
  kvevict::CacheConfig cfg = kvtest::token_config(4, 0, 1024);
  cfg.shared_heads = true;
  EXPECT_EQ(invalid_argument_message([&] {
              (void)kvevict::make_paged_cache(kvevict::Policy::window, cfg, kvevict::PagedEvictionConfig{}, wide, pool);
            }),
            "kvevict::PagedCache: n_kv_heads * capacity (max_pages * page_size) score floats = 1024 * "
            "1152921504606846976 overflows std::size_t");
}

TEST(SizeOverflow, PageUnitStartPagesTimesPageSizeDoesNotWrap) {
  // start_pages · page_size = 2^63 · 2 wrapped to 0, so k >= 0 + max(w, 1) held and the page unit evicted from the
  // recent area; now the rule k >= start_pages · page_size + max(w, 1) is checked without the product.
  kvtest::PagedLayer l;
  kvevict::CacheConfig cfg = kvtest::token_config(8, 0, 1);
  cfg.shared_heads = true;
  kvevict::PagedEvictionConfig pc;
  pc.unit = kvevict::EvictUnit::page;
  pc.start_pages = k2p63;
  EXPECT_EQ(invalid_argument_message(
                [&] { (void)kvevict::make_paged_cache(kvevict::Policy::window, cfg, pc, l.view, l.pool); }),
            "kvevict::PagedCache: page unit needs k >= start_pages * page_size + max(w, 1) (k = 8, start_pages = "
            "9223372036854775808, page_size = 2, w = 0)");
  pc.start_pages = 3;  // 3 · 2 + 1 <= 8: accepted, as before
  EXPECT_NO_THROW((void)kvevict::make_paged_cache(kvevict::Policy::window, cfg, pc, l.view, l.pool));
}

TEST(SizeOverflow, SoftmaxScratchSize) {
  EXPECT_EQ(kvevict::softmax_scratch_size(0), 0u);
  EXPECT_EQ(kvevict::softmax_scratch_size(512), 514u);
  EXPECT_EQ(kvevict::softmax_scratch_size(513), 517u);
  static_assert(kvevict::softmax_scratch_size(2) == 4, "still a constant expression");
  // ceil(n / 512) was (n + 511) / 512, which wraps to 0 for the largest n (the scratch then came out as n).
  EXPECT_EQ(invalid_argument_message([] { (void)kvevict::softmax_scratch_size(SIZE_MAX); }),
            "kvevict::softmax_scratch_size: n + 2 * ceil(n / 512) = 18446744073709551615 + 72057594037927936 "
            "overflows std::size_t");
}

TEST(SizeOverflow, CudaHostSizesAndLaunchChecks) {
  namespace kc = kvevict::cuda;
  constexpr std::uint32_t kMax = 0xffffffffu;
  // chunk_count and prefill_keep_ints wrapped in 32 bits (n + 511; max_prompt + 1).
  EXPECT_EQ(kc::chunk_count(kMax), 8388608u);
  EXPECT_EQ(kc::chunk_count(1025), 3u);
  EXPECT_EQ(kc::prefill_keep_ints(1, 1, kMax), std::size_t{1} << 32);
  EXPECT_EQ(kc::prefill_keep_ints(2, 3, 9), 60u);
  EXPECT_EQ(invalid_argument_message([] { (void)kc::step_workspace_floats(kMax, kMax, kMax); }),
            "kvevict::cuda::step_workspace_floats: batch * n_q_heads * (kLanes + 2) * chunk_count(max_slots) = "
            "4294967295 * 4294967295 * 18 * 8388608 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { (void)kc::contiguous_state_sizes(kMax, kMax, kMax, 0); }),
            "kvevict::cuda::contiguous_state_sizes: batch * n_kv_heads * capacity = 4294967295 * 4294967295 * "
            "4294967295 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { (void)kc::paged_state_sizes(1, 16, k2p61, 0); }),
            "kvevict::cuda::paged_state_sizes: total_slots * n_kv_heads = 2305843009213693952 * 16 overflows "
            "std::size_t");
  EXPECT_EQ(invalid_argument_message([] { (void)kc::prefill_acc_floats(kMax, kMax, kMax); }),
            "kvevict::cuda::prefill_acc_floats: batch * n_q_heads * max_prompt = 4294967295 * 4294967295 * "
            "4294967295 overflows std::size_t");
  EXPECT_EQ(invalid_argument_message([] { (void)kc::prefill_stage_bytes(kMax, kMax, kMax, kMax); }),
            "kvevict::cuda::prefill_stage_bytes: 2 * heads_per_row * row_bytes = 2 * 4294967295 * 4294967295 "
            "overflows std::size_t");
  EXPECT_EQ(kc::prefill_stage_bytes(2, 3, 1, 16), 2u * 3 * kc::kStageSlots * kc::stage_bytes(1, 16));
  // The launches' host checks (kernels.cuh calls them before any launch).
  kc::ContiguousKV<float> kv;
  kv.batch = kMax;
  kv.n_kv_heads = kMax;
  kv.capacity = 2;
  kv.head_dim = 2;
  EXPECT_EQ(invalid_argument_message([&] { kc::check_kv_extent(kv, "kvevict::cuda::decode_step"); }),
            "kvevict::cuda::decode_step: batch * n_kv_heads * capacity * head_dim * sizeof(T) (the bytes of K) = "
            "4294967295 * 4294967295 * 2 * 2 * 4 overflows std::size_t");
  kv.batch = 2;
  EXPECT_NO_THROW(kc::check_kv_extent(kv, "kvevict::cuda::decode_step"));
  kc::PagedKV<float> pkv;
  pkv.num_pages = kMax;
  pkv.page_size = kMax;
  pkv.n_kv_heads = 2;
  pkv.head_dim = 128;
  EXPECT_EQ(invalid_argument_message([&] { kc::check_kv_extent(pkv, "kvevict::cuda::prefill (paged)"); }),
            "kvevict::cuda::prefill (paged): num_pages * page_size * n_kv_heads * head_dim * sizeof(T) (the bytes of "
            "a pool) = 4294967295 * 4294967295 * 2 * 128 * 4 overflows std::size_t");
  kc::LogitsView lg;
  lg.stride = kMax;
  EXPECT_NO_THROW(kc::check_logits_extent(lg, 4, 32, false, "kvevict::cuda::decode_step"));
  EXPECT_EQ(invalid_argument_message([&] { kc::check_logits_extent(lg, 4, 32, true, "kvevict::cuda::prefill"); }),
            "kvevict::cuda::prefill: batch * n_q_heads * stride * stride (the prefill logits) = 4 * 32 * 4294967295 "
            "* 4294967295 overflows std::size_t");
}

}  // namespace
