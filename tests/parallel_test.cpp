// Parallel prefill and decode steps: for every policy and both selections,
// contiguous and paged, with n_kv_heads below and above the worker count, the scores,
// kept positions and errors are bit-identical for W = 1 (the serial default), 2, 3 and 7
// workers of the thread pool of tools/; rows that are not `concurrent()` are only read on
// the calling thread; errors keep the all-or-nothing contract.
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"
#include "thread_pool.hpp"

namespace {

using kvevict::Policy;

constexpr Policy kPolicies[] = {Policy::keyformer, Policy::h2o, Policy::tova, Policy::streaming_llm, Policy::window};

// Deterministic logit of (row id, query head, slot or position), -inf for ~1/16 (masked).
float logit_of(std::uint64_t row, std::uint64_t h, std::uint64_t col) {
  const std::uint32_t x = kvevict::detail::lowbias32(
      kvevict::detail::lowbias32(static_cast<std::uint32_t>(row * 7919u + h * 104729u)) ^ static_cast<std::uint32_t>(col));
  if ((x & 15u) == 0) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(x >> 8) / 16777216.0f * 8.0f - 4.0f;
}

// A prompt's logits computed row by row, safe to ask for different q_heads at once.
class PromptRows final : public kvevict::ChunkRows {
 public:
  PromptRows(std::size_t n_q, std::size_t P, bool concurrent) : P_(P), concurrent_(concurrent), buf_(n_q * P) {}
  const float* row(std::size_t h, std::size_t i) override {
    if (!concurrent_) threads_.push_back(std::this_thread::get_id());
    float* r = buf_.data() + h * P_;
    for (std::size_t s = 0; s <= i; ++s) r[s] = logit_of(i, h, s);
    if (poison_row_ == i && poison_head_ == h) r[i / 2] = std::numeric_limits<float>::quiet_NaN();
    return r;
  }
  bool concurrent() const override { return concurrent_; }
  std::size_t poison_row_ = std::numeric_limits<std::size_t>::max(), poison_head_ = 0;
  std::vector<std::thread::id> threads_;

 private:
  std::size_t P_;
  bool concurrent_;
  std::vector<float> buf_;
};

kvtools::ThreadPool& pool(std::size_t w) {
  static kvtools::ThreadPool p2(2), p3(3), p7(7);
  return w == 2 ? p2 : w == 3 ? p3 : p7;
}

using Snapshot = kvtest::CacheSnapshot;
using kvtest::snapshot;

struct Case {
  Policy policy;
  bool shared;
  std::size_t n_kv, g;
};
std::string name(const Case& c, std::size_t W) {
  return std::string(kvevict::policy_name(c.policy)) + (c.shared ? " shared" : " per-head") + " n_kv " +
         std::to_string(c.n_kv) + " g " + std::to_string(c.g) + " W " + std::to_string(W);
}
kvevict::CacheConfig config_of(const Case& c, std::size_t k, std::size_t steps, kvevict::PolicyParams& params) {
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = c.n_kv * c.g;
  cfg.budget = kvevict::Budget::tokens(k);
  cfg.recent = kvevict::RecentWindow::tokens(kvevict::takes_recent_window(c.policy) ? 8 : 0);
  cfg.shared_heads = c.shared;
  cfg.seed = 77;
  params.horizon = steps;
  params.sinks = 4;
  return cfg;
}

// Prompt of P tokens (rows > 512 slots: the chunked softmax spans chunks), then decode steps
// over n = k + 1 slots (three 512-slot chunks); a snapshot after prefill and after every step.
std::vector<Snapshot> run_contiguous(const Case& c, std::size_t W) {
  const std::size_t P = 1100, k = 1030, steps = 5, nq = c.n_kv * c.g;
  kvevict::KVBuffer<float> buf(c.n_kv, P + 1, 2);
  auto kv = buf.view();
  kvevict::PolicyParams params;
  const auto cfg = config_of(c, k, steps, params);
  auto cache = kvevict::make_cache(c.policy, cfg, kv, params);
  if (W > 1) cache->set_executor(pool(W));
  for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  PromptRows rows(nq, P, true);
  cache->prefill_chunk(rows, P, P);
  cache->finish_prefill();
  std::vector<Snapshot> out{snapshot(*cache, c.n_kv)};
  std::vector<float> x(nq * (k + 1));
  for (std::size_t t = 0; t < steps; ++t) {
    kvtest::append_token(kv, static_cast<std::int64_t>(P + 3 * t));
    const std::size_t n = kv.length(0);
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t s = 0; s < n; ++s)
        x[h * n + s] = logit_of(5000 + t, h, static_cast<std::uint64_t>(kv.head_positions(h / c.g)[s]));
    cache->decode_step(x.data(), n);
    out.push_back(snapshot(*cache, c.n_kv));
  }
  return out;
}

TEST(Parallel, ContiguousIsBitIdenticalForAnyWorkerCount) {
  for (Policy p : kPolicies)
    for (bool shared : {false, true})
      for (std::size_t n_kv : {std::size_t{1}, std::size_t{2}, std::size_t{4}}) {
        const Case c{p, shared, n_kv, 2};
        const auto serial = run_contiguous(c, 1);
        for (std::size_t W : {std::size_t{2}, std::size_t{3}, std::size_t{7}}) {
          const auto par = run_contiguous(c, W);
          ASSERT_EQ(par.size(), serial.size());
          for (std::size_t i = 0; i < par.size(); ++i)
            EXPECT_TRUE(par[i] == serial[i]) << name(c, W) << (i == 0 ? " after prefill" : " after step ") << i;
        }
      }
}

// Paged (token unit, shared selection by construction): prefill from materialised logits.
std::vector<Snapshot> run_paged(Policy policy, std::size_t n_kv, std::size_t W) {
  const std::size_t g = 2, nq = n_kv * g, P = 1100, k = 1030, steps = 5, d = 2, ps = 16;
  const Case c{policy, true, n_kv, g};
  kvevict::PolicyParams params;
  const auto cfg = config_of(c, k, steps, params);
  const std::size_t pages = (P + steps) / ps + 2;
  std::vector<float> kstore(pages * ps * n_kv * d), vstore(kstore.size());
  std::vector<std::int32_t> table(pages, kvevict::kNoPage);
  std::vector<std::int64_t> positions(pages * ps);
  std::size_t length = 0;
  kvevict::PagedKVView<float> view;
  view.k = kstore.data();
  view.v = vstore.data();
  view.num_pages = pages;
  view.page_size = ps;
  view.n_kv_heads = n_kv;
  view.head_dim = d;
  view.page_table = table.data();
  view.max_pages = pages;
  view.length = &length;
  view.positions = positions.data();
  kvevict::PagePool pool_pages(pages);
  auto cache = kvevict::make_paged_cache(policy, cfg, kvevict::PagedEvictionConfig{}, view, pool_pages, params);
  if (W > 1) cache->set_executor(pool(W));
  const std::vector<float> row(n_kv * d, 0.5f);
  for (std::size_t t = 0; t < P; ++t) pool_pages.append(view, static_cast<std::int64_t>(t), row.data(), row.data());
  const auto x = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t s) { return logit_of(r, h, s); });
  cache->prefill(x.data(), P);
  std::vector<Snapshot> out{snapshot(*cache, n_kv)};
  std::vector<float> xs(nq * (k + 1));
  for (std::size_t t = 0; t < steps; ++t) {
    pool_pages.append(view, static_cast<std::int64_t>(P + t), row.data(), row.data());
    const std::size_t n = length;
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t s = 0; s < n; ++s) xs[h * n + s] = logit_of(5000 + t, h, static_cast<std::uint64_t>(positions[s]));
    cache->decode_step(xs.data(), n);
    out.push_back(snapshot(*cache, n_kv));
  }
  return out;
}

TEST(Parallel, PagedIsBitIdenticalForAnyWorkerCount) {
  for (Policy p : kPolicies)
    for (std::size_t n_kv : {std::size_t{1}, std::size_t{4}}) {
      const auto serial = run_paged(p, n_kv, 1);
      for (std::size_t W : {std::size_t{2}, std::size_t{3}, std::size_t{7}}) {
        const auto par = run_paged(p, n_kv, W);
        ASSERT_EQ(par.size(), serial.size());
        for (std::size_t i = 0; i < par.size(); ++i)
          EXPECT_TRUE(par[i] == serial[i]) << kvevict::policy_name(p) << " paged n_kv " << n_kv << " W " << W
                                           << (i == 0 ? " after prefill" : " after step ") << i;
      }
    }
}

// The serial default, SerialExecutor and a one-worker pool are the same thing.
TEST(Parallel, SerialExecutorsAgree) {
  const std::size_t P = 600, nq = 4;
  const auto x = kvtest::causal_logits(nq, P, [](std::size_t h, std::size_t r, std::size_t s) { return logit_of(r, h, s); });
  kvevict::SerialExecutor serial;
  kvtools::ThreadPool one(1);
  std::vector<Snapshot> got;
  for (int which = 0; which < 3; ++which) {
    kvevict::KVBuffer<float> buf(2, P + 1, 2);
    auto kv = buf.view();
    kvevict::PolicyParams params;
    const auto cfg = config_of({Policy::keyformer, false, 2, 2}, 100, 10, params);
    auto cache = kvevict::make_cache(Policy::keyformer, cfg, kv, params);
    if (which == 1) cache->set_executor(serial);
    if (which == 2) cache->set_executor(one);
    for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
    cache->prefill(x.data(), P);
    got.push_back(snapshot(*cache, 2));
  }
  EXPECT_TRUE(got[0] == got[1]);
  EXPECT_TRUE(got[0] == got[2]);
  EXPECT_EQ(kvevict::ExecutorRef().workers(), 1u);
  EXPECT_EQ(kvevict::ExecutorRef(pool(7)).workers(), 7u);
}

// Rows that are not concurrent() are read on the calling thread only, in (q_head, row) order.
TEST(Parallel, NonConcurrentRowsStayOnTheCallingThread) {
  const std::size_t P = 40, nq = 4;
  kvevict::KVBuffer<float> buf(2, P + 1, 2);
  auto kv = buf.view();
  kvevict::PolicyParams params;
  const auto cfg = config_of({Policy::h2o, false, 2, 2}, 10, 10, params);
  auto cache = kvevict::make_cache(Policy::h2o, cfg, kv, params);
  cache->set_executor(pool(3));
  for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
  PromptRows rows(nq, P, false);
  cache->prefill_chunk(rows, P, P);
  ASSERT_EQ(rows.threads_.size(), nq * P);
  for (const auto& id : rows.threads_) EXPECT_EQ(id, std::this_thread::get_id());
}

// A NaN row: the same error for every W (the first bad q_head), nothing changed, and the
// cache continues bit-identically to the serial one.
TEST(Parallel, ErrorsAreAllOrNothingAndTheSameForEveryWorkerCount) {
  for (std::size_t n_kv : {std::size_t{1}, std::size_t{4}})
    for (std::size_t W : {std::size_t{1}, std::size_t{3}, std::size_t{7}}) {
      const std::size_t g = 2, nq = n_kv * g, P = 1100, k = 1030;
      const Case c{Policy::keyformer, false, n_kv, g};
      kvevict::KVBuffer<float> buf(n_kv, P + 1, 2);
      auto kv = buf.view();
      kvevict::PolicyParams params;
      auto cache = kvevict::make_cache(c.policy, config_of(c, k, 4, params), kv, params);
      if (W > 1) cache->set_executor(pool(W));
      for (std::size_t t = 0; t < P; ++t) kvtest::append_token(kv, static_cast<std::int64_t>(t));
      PromptRows rows(nq, P, true);
      rows.poison_head_ = nq - 1;
      rows.poison_row_ = 700;
      try {
        cache->prefill_chunk(rows, P, P);
        FAIL() << "no throw";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "kvevict::Cache::prefill_chunk: logits row 700 of q_head " +
                                             std::to_string(nq - 1) + " contains NaN or +inf");
      }
      rows.poison_row_ = std::numeric_limits<std::size_t>::max();
      cache->prefill_chunk(rows, P, P);
      cache->finish_prefill();
      kvtest::append_token(kv, static_cast<std::int64_t>(P));
      const Snapshot before = snapshot(*cache, n_kv);
      const std::size_t n = kv.length(0);
      std::vector<float> x(nq * n);
      for (std::size_t h = 0; h < nq; ++h)
        for (std::size_t s = 0; s < n; ++s) x[h * n + s] = logit_of(9, h, static_cast<std::uint64_t>(kv.head_positions(h / g)[s]));
      std::vector<float> bad = x;
      bad[(nq - 1) * n + 900] = std::numeric_limits<float>::infinity();
      bad[(nq - 1) * n + 901] = std::numeric_limits<float>::quiet_NaN();
      try {
        cache->decode_step(bad.data(), n);
        FAIL() << "no throw";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "kvevict::Cache::decode_step: logits of q_head " + std::to_string(nq - 1) +
                                             " contain NaN or +inf");
      }
      EXPECT_TRUE(snapshot(*cache, n_kv) == before) << "n_kv " << n_kv << " W " << W;
      EXPECT_EQ(cache->step(), 0u);
      cache->decode_step(x.data(), n);
      EXPECT_EQ(cache->step(), 1u);
      // The reference: a serial cache fed only the good calls.
      kvevict::KVBuffer<float> rbuf(n_kv, P + 1, 2);
      auto rkv = rbuf.view();
      auto ref = kvevict::make_cache(c.policy, config_of(c, k, 4, params), rkv, params);
      for (std::size_t t = 0; t < P; ++t) kvtest::append_token(rkv, static_cast<std::int64_t>(t));
      PromptRows rrows(nq, P, true);
      ref->prefill_chunk(rrows, P, P);
      ref->finish_prefill();
      kvtest::append_token(rkv, static_cast<std::int64_t>(P));
      ref->decode_step(x.data(), n);
      EXPECT_TRUE(snapshot(*cache, n_kv) == snapshot(*ref, n_kv)) << "n_kv " << n_kv << " W " << W;
    }
}

}  // namespace
