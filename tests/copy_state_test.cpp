// Cache::copy_state_from (detail/state_copy.hpp; beam search): for every policy, a cache B that copied cache A after
// a prefill and some decode steps gives A's kept positions, scores and K/V rows at every later step, bit for bit
// (a different seed, capacity and history in B before the copy); mid-prompt (chunked) and mid-step (per-head) copies;
// the refusals with their messages, B unchanged; self-copy; no allocation.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "support/allocation_counter.hpp"

namespace {

constexpr std::size_t kNkv = 2, kNq = 4, kD = 8;

/// K, V rows of (position p, KV head h): smooth but varied, so that key scores and logits differ by token.
float k_of(std::int64_t p, std::size_t h, std::size_t i) {
  return std::sin(0.37f * static_cast<float>(p) * static_cast<float>(i % 5 + 1) + 0.9f * static_cast<float>(h) +
                  0.1f * static_cast<float>(i));
}
/// The logit of query head q at position qp against the token at position kp (a function of the tokens only).
float logit_of(std::size_t q, std::int64_t qp, std::int64_t kp) {
  return 2.0f * std::sin(0.61f * static_cast<float>(kp * (q + 1)) + 0.23f * static_cast<float>(qp)) +
         (kp % 3 == 0 ? 1.5f : 0.0f);
}

/// One layer: its own K/V storage and a cache of `policy` over it (the runtime interface).
struct Layer {
  kvevict::KVBuffer<float> store;
  std::unique_ptr<kvevict::CacheInterface> cache;
  std::int64_t next = 0;  // the next position

  Layer(kvevict::Policy policy, const kvevict::CacheConfig& cfg, const kvevict::PolicyParams& params,
        std::size_t capacity, std::size_t nkv = kNkv, std::size_t d = kD)
      : store(nkv, capacity, d), cache(kvevict::make_cache(policy, cfg, store.view(), params)) {}

  kvevict::KVView<float> kv() { return store.view(); }
  void append(std::int64_t p) {
    auto view = kv();
    std::vector<float> k(view.n_kv_heads * view.head_dim), v(k.size());
    for (std::size_t h = 0; h < view.n_kv_heads; ++h)
      for (std::size_t i = 0; i < view.head_dim; ++i) {
        k[h * view.head_dim + i] = k_of(p, h, i);
        v[h * view.head_dim + i] = -2.0f * k_of(p, h, i) + 0.5f;
      }
    view.append(p, k.data(), v.data());
  }
  /// A prompt of P tokens at positions first .. first + P − 1, then its prefill.
  void prompt(std::size_t P, std::int64_t first = 0) {
    for (std::size_t t = 0; t < P; ++t) append(first + static_cast<std::int64_t>(t));
    std::vector<float> x(kNq * P * P, 0.0f);
    for (std::size_t q = 0; q < kNq; ++q)
      for (std::size_t r = 0; r < P; ++r)
        for (std::size_t c = 0; c <= r; ++c)
          x[(q * P + r) * P + c] =
              logit_of(q, first + static_cast<std::int64_t>(r), first + static_cast<std::int64_t>(c));
    cache->prefill(x.data(), P);
    next = first + static_cast<std::int64_t>(P);
  }
  /// One decode step: the token at `next`, logits over each KV head's slots (rows past a head's length: 0).
  void step() {
    append(next);
    auto view = kv();
    std::size_t n = 0;
    for (std::size_t j = 0; j < view.n_kv_heads; ++j) n = std::max(n, view.length(j));
    std::vector<float> x(kNq * n, 0.0f);
    const std::size_t g = kNq / view.n_kv_heads;
    for (std::size_t q = 0; q < kNq; ++q)
      for (std::size_t s = 0; s < view.length(q / g); ++s)
        x[q * n + s] = logit_of(q, next, view.head_positions(q / g)[s]);
    cache->decode_step(x.data(), n);
    ++next;
  }
};

/// Everything observable, bit for bit: per KV head the positions, score bits and K/V rows by slot; step, τ, k, w.
std::string state(Layer& l) {
  std::string out;
  auto add = [&](const void* p, std::size_t bytes) { out.append(static_cast<const char*>(p), bytes); };
  auto view = l.kv();
  for (std::size_t j = 0; j < view.n_kv_heads; ++j) {
    const std::size_t n = l.cache->length(j);
    add(&n, sizeof n);
    add(l.cache->positions(j), n * sizeof(std::int64_t));
    add(l.cache->scores(j), n * sizeof(float));
    for (std::size_t s = 0; s < n; ++s) {
      add(view.k_row(j, s), view.head_dim * sizeof(float));
      add(view.v_row(j, s), view.head_dim * sizeof(float));
    }
  }
  const std::size_t step = l.cache->step(), k = l.cache->budget(), w = l.cache->recent_window();
  const float tau = l.cache->temperature();
  add(&step, sizeof step), add(&tau, sizeof tau), add(&k, sizeof k), add(&w, sizeof w);
  return out;
}

struct Case {
  const char* name;
  kvevict::Policy policy;
  std::size_t k, w;
  bool adaptive = false, shared = false;
};

kvevict::CacheConfig config_of(const Case& c, std::uint64_t seed) {
  kvevict::CacheConfig cfg;
  cfg.n_q_heads = kNq;
  cfg.budget = kvevict::Budget::tokens(c.k);
  cfg.recent = kvevict::RecentWindow::tokens(c.w);
  cfg.seed = seed;
  cfg.shared_heads = c.shared;
  if (c.adaptive) cfg.head_budgets = kvevict::HeadBudgets::adaptive(0.2f);
  return cfg;
}

kvevict::PolicyParams params_of() {
  kvevict::PolicyParams p;
  p.horizon = 16;  // Keyformer's τ rises over 16 steps
  p.sinks = 2;
  p.snap_window = 3;
  p.snap_kernel = 3;
  return p;
}

class CopyState : public ::testing::TestWithParam<Case> {};

TEST_P(CopyState, TwinFollowsTheSourceBitForBit) {
  const Case c = GetParam();
  const std::size_t P = 12, cap = 24;
  Layer a(c.policy, config_of(c, 7), params_of(), cap);
  // B: another seed, a larger capacity (except adaptive: its cap at the first cut depends on it), its own history.
  Layer b(c.policy, config_of(c, 1234), params_of(), c.adaptive ? cap : cap + 5);
  a.prompt(P);
  for (int t = 0; t < 3; ++t) a.step();
  b.prompt(P - 2, 3);
  for (int t = 0; t < 5; ++t) b.step();
  ASSERT_NE(state(a), state(b));
  b.cache->copy_state_from(*a.cache);
  b.next = a.next;
  ASSERT_EQ(state(a), state(b)) << c.name;
  for (int t = 0; t < 9; ++t) {
    a.step();
    b.step();
    ASSERT_EQ(state(a), state(b)) << c.name << " step " << t;
    for (std::size_t j = 0; j < kNkv; ++j) ASSERT_EQ(a.cache->retained_positions(j), b.cache->retained_positions(j));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, CopyState,
    ::testing::Values(Case{"h2o", kvevict::Policy::h2o, 6, 2}, Case{"keyformer", kvevict::Policy::keyformer, 6, 2},
                      Case{"tova", kvevict::Policy::tova, 6, 0}, Case{"snapkv", kvevict::Policy::snapkv, 6, 2},
                      Case{"streaming", kvevict::Policy::streaming_llm, 6, 0},
                      Case{"knorm", kvevict::Policy::knorm, 6, 2}, Case{"keydiff", kvevict::Policy::keydiff, 6, 2},
                      Case{"h2o_adaptive", kvevict::Policy::h2o, 6, 2, true},
                      Case{"keyformer_shared", kvevict::Policy::keyformer, 6, 2, false, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(CopyStateTest, TypedKeyformerCopyFromAFreshCacheAndBeforeTheFirstCut) {
  // The typed API (Cache::copy_state_from(const Cache&)); copying a fresh cache forgets B's sequence; an adaptive
  // cache whose prompt fits (no cut yet) is copied with its unshared budget, and both cut at the same step.
  kvevict::CacheConfig cfg = config_of(Case{"", kvevict::Policy::h2o, 6, 2, true}, 3);
  Layer a(kvevict::Policy::h2o, cfg, params_of(), 16), b(kvevict::Policy::h2o, cfg, params_of(), 16);
  b.prompt(9);
  b.step();
  Layer fresh(kvevict::Policy::h2o, cfg, params_of(), 16);
  b.cache->copy_state_from(*fresh.cache);
  EXPECT_EQ(state(b), state(fresh));
  a.prompt(5);  // fits k = 6: not cut
  b.cache->copy_state_from(*a.cache);
  b.next = a.next;
  for (int t = 0; t < 4; ++t) {
    a.step(), b.step();
    ASSERT_EQ(state(a), state(b)) << t;
  }

  kvevict::KVBuffer<float> sa(kNkv, 20, kD), sb(kNkv, 20, kD);
  kvevict::CacheConfig kc = config_of(Case{"", kvevict::Policy::keyformer, 6, 2}, 5);
  kvevict::Keyformer ka(kc, sa.view(), kvevict::GumbelLogitScore{}, kvevict::LinearTemperature(1.0f, 2.0f, 8));
  kc.seed = 6;
  kvevict::Keyformer kb(kc, sb.view(), kvevict::GumbelLogitScore{}, kvevict::LinearTemperature(1.0f, 2.0f, 8));
  auto va = sa.view();
  for (std::int64_t p = 0; p < 10; ++p) {
    std::vector<float> row(kNkv * kD, static_cast<float>(p));
    va.append(p, row.data(), row.data());
  }
  std::vector<float> x(kNq * 100, 0.5f);
  ka.prefill(x.data(), 10);
  kb.copy_state_from(ka);
  EXPECT_EQ(kb.config().seed, 5u);
  EXPECT_EQ(kb.retained_positions(0), ka.retained_positions(0));
  EXPECT_EQ(kb.temperature(), ka.temperature());
  kb.copy_state_from(kb);  // self-copy: nothing
  EXPECT_EQ(kb.retained_positions(1), ka.retained_positions(1));
}

TEST(CopyStateTest, MidChunkedPromptAndMidPerHeadStep) {
  kvevict::CacheConfig cfg = config_of(Case{"", kvevict::Policy::h2o, 6, 2}, 0);
  cfg.max_prefill_chunk = 4;
  cfg.bounded_prefill = true;
  Layer a(kvevict::Policy::h2o, cfg, params_of(), 16), b(kvevict::Policy::h2o, cfg, params_of(), 16);
  auto chunk = [](Layer& l, std::size_t C) {
    const std::size_t held = l.cache->length(0);
    for (std::size_t i = 0; i < C; ++i) l.append(l.next + static_cast<std::int64_t>(i));
    const std::size_t n = held + C;
    std::vector<float> x(kNq * C * n, 0.0f);
    for (std::size_t q = 0; q < kNq; ++q)
      for (std::size_t i = 0; i < C; ++i)
        for (std::size_t s = 0; s <= held + i; ++s)
          x[(q * C + i) * n + s] = logit_of(q, l.next + static_cast<std::int64_t>(i), l.kv().head_positions(q / 2)[s]);
    l.cache->prefill_chunk(x.data(), C, n);
    l.next += static_cast<std::int64_t>(C);
  };
  chunk(a, 4), chunk(a, 4);  // 8 > k: cut to 6 after the second chunk
  b.cache->copy_state_from(*a.cache);
  b.next = a.next;
  for (Layer* l : {&a, &b}) {
    chunk(*l, 3);
    l->cache->finish_prefill();
  }
  ASSERT_EQ(state(a), state(b));
  // A per-head step open in A (head 0 scored) is copied with it: B scores head 1 and ends it as A does.
  for (Layer* l : {&a, &b}) l->append(l->next);
  a.cache->begin_decode_step(7);
  std::vector<float> rows(2 * 7, 0.25f);
  a.cache->score_decode_head(0, rows.data());
  b.cache->copy_state_from(*a.cache);
  for (Layer* l : {&a, &b}) {
    l->cache->score_decode_head(1, rows.data());
    l->cache->end_decode_step();
  }
  ASSERT_EQ(state(a), state(b));
}

/// `f()` throws `std::invalid_argument` with exactly `message`.
template <class F>
void expect_message(F f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected: " << message;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(CopyStateTest, RefusalsNameTheValueAndLeaveTheDestinationUnchanged) {
  const Case h2o{"", kvevict::Policy::h2o, 6, 2};
  const std::string who = "kvevict::Cache::copy_state_from: ";
  Layer b(kvevict::Policy::h2o, config_of(h2o, 0), params_of(), 16);
  b.prompt(8);
  b.step();
  const std::string before = state(b);
  auto refuse = [&](Layer& other, const std::string& message) {
    expect_message([&] { b.cache->copy_state_from(*other.cache); }, who + message);
    EXPECT_EQ(state(b), before) << message;
  };
  auto prompted = [&](Layer& l) -> Layer& {
    l.prompt(10);
    return l;
  };
  Layer tova(kvevict::Policy::tova, config_of(Case{"", kvevict::Policy::tova, 6, 0}, 0), params_of(), 16);
  refuse(prompted(tova), "other is a cache of another policy (its Cache<Score, Temperature, Selection> type differs "
                         "from this cache's)");
  Layer k7(kvevict::Policy::h2o, config_of(Case{"", kvevict::Policy::h2o, 7, 2}, 0), params_of(), 16);
  refuse(prompted(k7),
         "other has budget = 7 tokens, this cache has 6 tokens (copy between caches of one configuration)");
  kvevict::CacheConfig ratio = config_of(h2o, 0);
  ratio.budget = kvevict::Budget::ratio(0.5);
  Layer half(kvevict::Policy::h2o, ratio, params_of(), 16);
  refuse(prompted(half), "other has budget = ratio 0.5, this cache has 6 tokens (copy between caches of one "
                         "configuration)");
  kvevict::CacheConfig w3 = config_of(Case{"", kvevict::Policy::h2o, 6, 3}, 0);
  Layer recent3(kvevict::Policy::h2o, w3, params_of(), 16);
  refuse(prompted(recent3), "other has recent = 3 tokens, this cache has 2 tokens (copy between caches of one "
                            "configuration)");
  kvevict::CacheConfig q2 = config_of(h2o, 0);
  q2.n_q_heads = 2;
  Layer heads2(kvevict::Policy::h2o, q2, params_of(), 16);
  refuse(heads2, "other has n_q_heads = 2, this cache has 4 (copy between caches of one configuration)");
  kvevict::CacheConfig shared = config_of(h2o, 0);
  shared.shared_heads = true;
  Layer sh(kvevict::Policy::h2o, shared, params_of(), 16);
  refuse(sh, "other has shared_heads = true, this cache has false (copy between caches of one configuration)");
  Layer ada(kvevict::Policy::h2o, config_of(Case{"", kvevict::Policy::h2o, 6, 2, true}, 0), params_of(), 16);
  refuse(ada, "other has head_budgets = adaptive (floor 0.2), this cache has uniform (floor 0) (copy between caches "
              "of one configuration)");
  kvevict::CacheConfig q4 = config_of(h2o, 0);
  Layer kv4(kvevict::Policy::h2o, q4, params_of(), 16, 4);
  refuse(kv4, "other has n_kv_heads = 4, this cache has 2");
  Layer d4(kvevict::Policy::h2o, config_of(h2o, 0), params_of(), 16, kNkv, 4);
  refuse(d4, "other has head_dim = 4, this cache has 8");
  Layer raw(kvevict::Policy::h2o, config_of(h2o, 0), params_of(), 40);
  for (std::int64_t p = 0; p < 20; ++p) raw.append(p);  // appended, not prefilled: 20 live slots
  refuse(raw, "other's lengths[0] = 20 exceeds this cache's capacity 16");
  kvevict::CacheConfig half_cfg = config_of(h2o, 0);
  half_cfg.budget = kvevict::Budget::ratio(0.5);
  Layer wide(kvevict::Policy::h2o, half_cfg, params_of(), 30), narrow(kvevict::Policy::h2o, half_cfg, params_of(), 12);
  wide.prompt(24);  // k = 12 (half of 24): a capacity of 12 cannot take a decode step's 13th token
  expect_message([&] { narrow.cache->copy_state_from(*wide.cache); },
                 who + "budget k = 12 needs a view of capacity >= k + 1 = 13 (a decode step appends before it "
                       "evicts), but the capacity is 12");
  EXPECT_EQ(narrow.cache->budget(), 0u);
  // Element types: a float cache and a half cache of the same policy (the same C++ type).
  kvevict::KVBuffer<Eigen::half> hs(kNkv, 16, kD);
  auto hcache = kvevict::make_cache(kvevict::Policy::h2o, config_of(h2o, 0), hs.view(), params_of());
  expect_message([&] { b.cache->copy_state_from(*hcache); },
                 who + "other's view holds another element type (2 bytes) than this cache's (4 bytes)");
  EXPECT_EQ(state(b), before);
  // A moved-from source is refused; a moved-from destination throws std::logic_error.
  kvevict::KVBuffer<float> s1(kNkv, 16, kD), s2(kNkv, 16, kD);
  kvevict::H2O c1(config_of(h2o, 0), s1.view()), c2(config_of(h2o, 0), s2.view());
  kvevict::H2O c3(std::move(c1));
  expect_message([&] { c2.copy_state_from(c1); }, who + "other was moved from (copy from the cache it was moved to)");
  EXPECT_THROW(c1.copy_state_from(c3), std::logic_error);
}

TEST(CopyStateTest, RefusesViewsThatPartlyOverlap) {
  // Two caches over one K/V storage, the second one row later: memcpy would read rows it already wrote.
  constexpr std::size_t cap = 12;
  std::vector<float> k((kNkv * cap + 1) * kD, 0.0f), v(k.size(), 0.0f);
  std::vector<std::int64_t> pa(kNkv * cap), pb(kNkv * cap);
  std::vector<std::size_t> la(kNkv, 0), lb(kNkv, 0);
  auto va = kvevict::KVView<float>::contiguous(k.data(), v.data(), pa.data(), la.data(), kNkv, cap, kD);
  auto vb = kvevict::KVView<float>::contiguous(k.data() + kD, v.data() + kD, pb.data(), lb.data(), kNkv, cap, kD);
  const kvevict::CacheConfig cfg = config_of(Case{"", kvevict::Policy::h2o, 6, 2}, 0);
  auto a = kvevict::make_cache(kvevict::Policy::h2o, cfg, va, params_of());
  auto b = kvevict::make_cache(kvevict::Policy::h2o, cfg, vb, params_of());
  try {
    b->copy_state_from(*a);
    FAIL() << "an overlapping copy was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::Cache::copy_state_from: other's view and this cache's view overlap in memory (K, "
                           "V or positions) without being the same storage: give each cache its own");
  }
  EXPECT_EQ(lb[0], 0u);
  b->copy_state_from(*b);  // itself: nothing to do
}

TEST(CopyStateTest, AllocatesNothing) {
  const Case c{"keyformer", kvevict::Policy::keyformer, 6, 2};
  Layer a(c.policy, config_of(c, 7), params_of(), 20), b(c.policy, config_of(c, 8), params_of(), 20);
  a.prompt(10);
  a.step();
  const long before = kvtest::allocation_count();
  b.cache->copy_state_from(*a.cache);
  a.cache->copy_state_from(*b.cache);
  EXPECT_EQ(kvtest::allocation_count(), before);
}

}  // namespace
