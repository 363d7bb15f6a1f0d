// decode_step performs no heap allocation after construction: counted by
// replacing the global operator new for this test executable (tests/support).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

#include "support/allocation_counter.hpp"
#include "thread_pool.hpp"

#include <kvevict/kvevict.hpp>


namespace {

long count_decode_allocations(kvevict::Policy policy, bool shared_heads, bool per_head = false) {
  const std::size_t n_kv = 4, g = 2, d = 32, k = 64, prompt = 96, steps = 1000;
  kvevict::KVBuffer<float> buf(n_kv, k + 1 > prompt ? k + 1 : prompt, d);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv * g;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(policy) ? 16 : 0);
  cfg.shared_heads = shared_heads;
  kvevict::PolicyParams params;
  params.horizon = steps;
  auto cache = kvevict::make_cache(policy, cfg, kv, params);
  std::vector<float> rows(n_kv * d, 0.5f);
  for (std::size_t p = 0; p < prompt; ++p) kv.append(static_cast<std::int64_t>(p), rows.data(), rows.data());
  std::vector<float> logits(cfg.n_q_heads * prompt * prompt, 0.0f), q(cfg.n_q_heads * d, 0.1f);
  cache->prefill(logits.data(), prompt);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 7) * 0.1f;
  const long before = kvtest::allocation_count();
  for (std::size_t t = 0; t < steps; ++t) {
    kv.append(static_cast<std::int64_t>(prompt + t), rows.data(), rows.data());
    const std::size_t n = kv.length(0);
    if (per_head) {  // the per-head decode step: each KV head's rows, then its scoring
      cache->begin_decode_step(n);
      for (std::size_t j = 0; j < n_kv; ++j) {
        for (std::size_t t2 = 0; t2 < g; ++t2)
          kvevict::attention_logits_row(kv.read_only(), j, q.data() + (j * g + t2) * d, logits.data() + (j * g + t2) * n,
                                        0.125f);
        cache->score_decode_head(j, logits.data() + j * g * n);
      }
      cache->end_decode_step();
    } else {
      kvevict::attention_logits(kv, q.data(), cfg.n_q_heads, logits.data(), 0.125f);
      cache->decode_step(logits.data(), n);
    }
  }
  return kvtest::allocation_count() - before;
}

TEST(NoAllocation, DecodeStepsAllocateNothing) {
  for (auto policy : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                      kvevict::Policy::window, kvevict::Policy::tova, kvevict::Policy::snapkv})
    for (bool shared : {false, true})
      for (bool per_head_step : {false, true})
        EXPECT_EQ(count_decode_allocations(policy, shared, per_head_step), 0)
            << kvevict::policy_name(policy) << (shared ? " shared" : " per-head")
            << (per_head_step ? ", per-head decode step" : "");
}

// SnapKV's prefill (observation-window scoring, pooling into the scorer's scratch, selection) and both
// of its decode rules allocate nothing once the cache is built.
TEST(NoAllocation, SnapKVPrefillAndDecodeAllocateNothing) {
  for (auto decode : {kvevict::SnapDecode::h2o, kvevict::SnapDecode::window})
    for (bool shared : {false, true}) {
      const std::size_t n_kv = 2, g = 2, d = 8, k = 40, prompt = 96, steps = 50;
      kvevict::KVBuffer<float> buf(n_kv, prompt + 1, d);
      auto kv = buf.view();
      kvevict::CacheConfig cfg;
      cfg.n_q_heads = n_kv * g;
      cfg.budget = kvevict::Budget::tokens(k);
      cfg.recent = kvevict::RecentWindow::tokens(4);
      cfg.shared_heads = shared;
      kvevict::PolicyParams params;
      params.snap_decode = decode;
      params.snap_pooling = shared ? kvevict::Pooling::avg : kvevict::Pooling::max;
      auto cache = kvevict::make_cache(kvevict::Policy::snapkv, cfg, kv, params);
      std::vector<float> rows(n_kv * d, 0.5f);
      for (std::size_t p = 0; p < prompt; ++p) kv.append(static_cast<std::int64_t>(p), rows.data(), rows.data());
      std::vector<float> logits(cfg.n_q_heads * prompt * prompt);
      for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 11) * 0.1f;
      const long before = kvtest::allocation_count();
      cache->prefill(logits.data(), prompt);
      for (std::size_t t = 0; t < steps; ++t) {
        kv.append(static_cast<std::int64_t>(prompt + t), rows.data(), rows.data());
        cache->decode_step(logits.data(), kv.length(0));
      }
      EXPECT_EQ(kvtest::allocation_count() - before, 0) << kvevict::snap_decode_name(decode) << " " << shared;
      EXPECT_EQ(kv.length(0), k);
    }
}

// Chunked prefill (unbounded and bounded) allocates nothing per chunk once the cache is
// built with its maximum chunk size; nor does finish_prefill.
long count_chunk_allocations(kvevict::Policy policy, bool bounded, bool shared_heads) {
  const std::size_t n_kv = 2, g = 2, d = 16, k = 24, C = 16, prompt = 200;
  kvevict::KVBuffer<float> buf(n_kv, bounded ? k + C : prompt + 1, d);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv * g;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(policy == kvevict::Policy::tova || policy == kvevict::Policy::window ||
                                                     policy == kvevict::Policy::streaming_llm
                                                 ? 0
                                                 : 4);
  cfg.shared_heads = shared_heads;
  cfg.max_prefill_chunk = C;
  cfg.bounded_prefill = bounded;
  kvevict::PolicyParams params;
  params.horizon = 8;
  auto cache = kvevict::make_cache(policy, cfg, kv, params);
  std::vector<float> rows(n_kv * d, 0.5f), logits(cfg.n_q_heads * C * (prompt + 1), 0.0f);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 13) * 0.1f;
  const long before = kvtest::allocation_count();
  for (std::size_t held = 0; held < prompt; held += C) {
    const std::size_t len = std::min(C, prompt - held);
    for (std::size_t t = held; t < held + len; ++t) kv.append(static_cast<std::int64_t>(t), rows.data(), rows.data());
    cache->prefill_chunk(logits.data(), len, kv.length(0));
  }
  cache->finish_prefill();
  return kvtest::allocation_count() - before;
}

TEST(NoAllocation, PrefillChunksAllocateNothing) {
  for (auto policy : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                      kvevict::Policy::window, kvevict::Policy::tova})
    for (bool bounded : {false, true})
      for (bool shared : {false, true})
        EXPECT_EQ(count_chunk_allocations(policy, bounded, shared), 0)
            << kvevict::policy_name(policy) << (bounded ? " bounded" : " unbounded") << (shared ? " shared" : "");
}

// With an executor of W > 1 workers (the thread pool of tools/; its threads exist before the
// count starts), prefill chunks and decode steps allocate nothing either: the per-task
// scratch is sized by set_executor. n_kv = 1 < W splits each row across 512-slot chunks;
// n_kv = 4 >= W splits across KV heads.
long count_parallel_allocations(kvevict::Policy policy, std::size_t n_kv, bool shared, kvtools::ThreadPool& pool) {
  const std::size_t g = 2, d = 8, k = 1100, C = 300, prompt = 1200, steps = 20;
  kvevict::KVBuffer<float> buf(n_kv, prompt + 1, d);
  auto kv = buf.view();
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv * g;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(policy) ? 16 : 0);
  cfg.shared_heads = shared;
  kvevict::PolicyParams params;
  params.horizon = steps;
  auto cache = kvevict::make_cache(policy, cfg, kv, params);
  cache->set_executor(pool);
  std::vector<float> rows(n_kv * d, 0.5f), logits(cfg.n_q_heads * C * (prompt + 1), 0.0f);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 13) * 0.1f;
  const long before = kvtest::allocation_count();
  for (std::size_t held = 0; held < prompt; held += C) {
    for (std::size_t t = held; t < held + C; ++t) kv.append(static_cast<std::int64_t>(t), rows.data(), rows.data());
    cache->prefill_chunk(logits.data(), C, kv.length(0));
  }
  cache->finish_prefill();
  for (std::size_t t = 0; t < steps; ++t) {
    kv.append(static_cast<std::int64_t>(prompt + t), rows.data(), rows.data());
    cache->decode_step(logits.data() + t, kv.length(0));
  }
  return kvtest::allocation_count() - before;
}

TEST(NoAllocation, ParallelPrefillAndDecodeStepsAllocateNothing) {
  kvtools::ThreadPool pool(3);
  for (auto policy : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::tova})
    for (std::size_t n_kv : {std::size_t{1}, std::size_t{4}})
      for (bool shared : {false, true})
        EXPECT_EQ(count_parallel_allocations(policy, n_kv, shared, pool), 0)
            << kvevict::policy_name(policy) << " n_kv " << n_kv << (shared ? " shared" : " per-head");
}

// prefill_chunk_qk: Q·K by tiles into the cache, no allocation once the scratch is built.
TEST(NoAllocation, PrefillChunksFromQAndKAllocateNothing) {
  const std::size_t n_kv = 2, g = 4, d = 128, k = 256, C = 64, prompt = 1000;
  for (bool bounded : {false, true}) {
    kvevict::KVBuffer<float> buf(n_kv, bounded ? k + C : prompt + 1, d);
    auto kv = buf.view();
    kvevict::CacheConfig cfg;
    cfg.n_q_heads = n_kv * g;
    cfg.budget = kvevict::Budget::tokens(k);
    cfg.recent = kvevict::RecentWindow::tokens(8);
    cfg.max_prefill_chunk = C;
    cfg.bounded_prefill = bounded;
    kvevict::H2O cache(cfg, kv);
    kvevict::QKChunkScratch scratch(kv.capacity, d);
    std::vector<float> rows(n_kv * d), q(C * cfg.n_q_heads * d);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 5) * 0.01f;
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) * 0.01f;
    const long before = kvtest::allocation_count();
    for (std::size_t held = 0; held < prompt; held += C) {
      const std::size_t len = std::min(C, prompt - held);
      for (std::size_t t = held; t < held + len; ++t) kv.append(static_cast<std::int64_t>(t), rows.data(), rows.data());
      kvevict::prefill_chunk_qk(cache, kv, q.data(), len, cfg.n_q_heads, 0.088f, scratch);
    }
    cache.finish_prefill();
    EXPECT_EQ(kvtest::allocation_count() - before, 0) << (bounded ? "bounded" : "unbounded");
    EXPECT_EQ(cache.length(0), k);
  }
}

// Paged decode steps (token and page unit): the pool's free list is pre-sized, so neither
// PagePool::append (which takes a new page every page_size tokens) nor the eviction (which
// returns pages) allocates.
long count_paged_decode_allocations(kvevict::Policy policy, kvevict::EvictUnit unit) {
  const std::size_t n_kv = 4, g = 2, d = 32, k = 64, prompt = 96, steps = 1000, ps = 16;
  const std::size_t max_pages = (prompt + steps) / ps + 2;
  std::vector<float> kp(max_pages * ps * n_kv * d), vp(kp.size());
  std::vector<std::int32_t> table(max_pages, kvevict::kNoPage);
  std::vector<std::int64_t> positions(max_pages * ps);
  std::size_t length = 0;
  kvevict::PagedKVView<float> view;
  view.k = kp.data();
  view.v = vp.data();
  view.num_pages = max_pages;
  view.page_size = ps;
  view.n_kv_heads = n_kv;
  view.head_dim = d;
  view.layout = kvevict::PageLayout::HND;
  view.page_table = table.data();
  view.max_pages = max_pages;
  view.length = &length;
  view.positions = positions.data();
  kvevict::PagePool pool(max_pages);
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = n_kv * g;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(policy) ? 16 : 0);
  cfg.shared_heads = true;
  kvevict::PagedEvictionConfig pc;
  pc.unit = unit;
  pc.start_pages = unit == kvevict::EvictUnit::page ? 1 : 0;
  kvevict::PolicyParams params;
  params.horizon = steps;
  auto cache = kvevict::make_paged_cache(policy, cfg, pc, view, pool, params);
  std::vector<float> rows(n_kv * d, 0.5f);
  for (std::size_t p = 0; p < prompt; ++p) pool.append(view, static_cast<std::int64_t>(p), rows.data(), rows.data());
  std::vector<float> logits(cfg.n_q_heads * prompt * prompt, 0.0f);
  cache->prefill(logits.data(), prompt);
  const long before = kvtest::allocation_count();
  for (std::size_t t = 0; t < steps; ++t) {
    pool.append(view, static_cast<std::int64_t>(prompt + t), rows.data(), rows.data());
    const std::size_t n = length;
    for (std::size_t i = 0; i < cfg.n_q_heads * n; ++i) logits[i] = static_cast<float>((i * 7 + t) % 13) * 0.1f;
    cache->decode_step(logits.data(), n);
  }
  return kvtest::allocation_count() - before;
}

TEST(NoAllocation, PagedDecodeStepsAllocateNothing) {
  for (auto policy : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::streaming_llm,
                      kvevict::Policy::window, kvevict::Policy::tova, kvevict::Policy::snapkv})
    for (auto unit : {kvevict::EvictUnit::token, kvevict::EvictUnit::page})
      EXPECT_EQ(count_paged_decode_allocations(policy, unit), 0)
          << kvevict::policy_name(policy) << " " << kvevict::evict_unit_name(unit);
}

TEST(NoAllocation, CounterSeesAllocations) {
  const long before = kvtest::allocation_count();
  void* p = ::operator new(64);  // a direct call cannot be elided, unlike a new-expression
  ::operator delete(p);
  EXPECT_EQ(kvtest::allocation_count() - before, 1);
}

}  // namespace
