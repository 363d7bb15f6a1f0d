// Chunked and bounded prefill: equivalence with the one-shot prefill for
// every policy and chunking, the small cases with exact values, a randomized
// comparison of bounded prefill with a simple double-precision reference, and errors
// that leave the state unchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

#include "test_util.hpp"

namespace {

using kvtest::append_token;
using kvtest::rows_aligned;
using Positions = std::vector<std::int64_t>;

const kvevict::Policy kPolicies[] = {kvevict::Policy::keyformer, kvevict::Policy::h2o,
                                     kvevict::Policy::streaming_llm, kvevict::Policy::window, kvevict::Policy::tova};

kvevict::CacheConfig make_config(kvevict::Policy p, std::size_t n_q, kvevict::Budget budget, bool shared) {
  kvevict::CacheConfig c;
  c.n_q_heads = n_q;
  c.budget = budget;
  const bool windowless = p == kvevict::Policy::tova || p == kvevict::Policy::streaming_llm ||
                          p == kvevict::Policy::window;
  c.recent = windowless ? kvevict::RecentWindow::tokens(0) : kvevict::RecentWindow::ratio(0.25);
  c.shared_heads = shared;
  c.seed = 7;
  return c;
}

kvevict::PolicyParams params() {
  kvevict::PolicyParams p;
  p.tau_init = 1.5f;  // prefill runs at tau_init: make it visible
  p.horizon = 4;
  p.sinks = 2;
  return p;
}

// Row-major [q_head][P][P] with the upper triangle NaN (never read).
std::vector<float> random_prompt(std::size_t n_q, std::size_t P, std::uint32_t seed, float spread) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  return kvtest::causal_logits(n_q, P, [&](auto, auto, auto) { return normal(gen); });
}

// Rows [held, held + C) of a [q_head][P][P] prompt as a chunk [q_head][C][held + C]
// (entries a row may not read are NaN).
std::vector<float> chunk_of(const std::vector<float>& full, std::size_t n_q, std::size_t P, std::size_t held,
                            std::size_t C) {
  const std::size_t n = held + C;
  std::vector<float> out(n_q * C * n, std::nanf(""));
  for (std::size_t h = 0; h < n_q; ++h)
    for (std::size_t i = 0; i < C; ++i)
      std::copy_n(full.data() + (h * P + held + i) * P, held + i + 1, out.data() + (h * C + i) * n);
  return out;
}

struct Layer {
  Layer(kvevict::Policy p, const kvevict::CacheConfig& c, std::size_t n_kv, std::size_t capacity)
      : buf(n_kv, capacity, 4), kv(buf.view()), cache(kvevict::make_cache(p, c, kv, params())) {}
  kvevict::KVBuffer<float> buf;
  kvevict::KVView<float> kv;
  std::unique_ptr<kvevict::CacheInterface> cache;
};

// Feeds the prompt in chunks of `sizes` (cycled), then finish_prefill.
void feed_chunks(Layer& l, const std::vector<float>& x, const std::vector<float>* zeta, std::size_t n_q,
                 std::size_t P, const std::vector<std::size_t>& sizes) {
  std::size_t held = 0;
  for (std::size_t c = 0; held < P; ++c) {
    const std::size_t C = std::min(sizes[c % sizes.size()], P - held);
    for (std::size_t t = held; t < held + C; ++t) append_token(l.kv, static_cast<std::int64_t>(t));
    const auto xc = chunk_of(x, n_q, P, held, C);
    const auto zc = zeta != nullptr ? chunk_of(*zeta, n_q, P, held, C) : std::vector<float>();
    l.cache->prefill_chunk(xc.data(), C, held + C, zeta != nullptr ? zc.data() : nullptr);
    held += C;
  }
  l.cache->finish_prefill();
}

::testing::AssertionResult same_state(const kvevict::CacheInterface& a, const kvevict::CacheInterface& b,
                                      std::size_t n_kv) {
  for (std::size_t j = 0; j < n_kv; ++j) {
    if (a.length(j) != b.length(j))
      return ::testing::AssertionFailure() << "head " << j << " length " << a.length(j) << " vs " << b.length(j);
    for (std::size_t s = 0; s < a.length(j); ++s) {
      if (a.positions(j)[s] != b.positions(j)[s])
        return ::testing::AssertionFailure() << "head " << j << " slot " << s << " position " << a.positions(j)[s]
                                             << " vs " << b.positions(j)[s];
      // Bit for bit, as the docs promise (a chunked prefill that adds in another order differs in
      // the last bits, e.g. 9.4826889038085938 vs 9.4826908111572266, and must fail here).
      std::uint32_t x = 0, y = 0;
      std::memcpy(&x, a.scores(j) + s, sizeof x);
      std::memcpy(&y, b.scores(j) + s, sizeof y);
      if (x != y)
        return ::testing::AssertionFailure() << "head " << j << " slot " << s << " score "
                                             << std::setprecision(17) << a.scores(j)[s] << " vs " << b.scores(j)[s]
                                             << " (bits " << std::hex << x << " vs " << y << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// Unbounded chunked prefill == one-shot prefill.

void expect_chunked_equals_one_shot(kvevict::Policy p, bool shared, std::size_t P, kvevict::Budget budget,
                                    const std::vector<std::size_t>& sizes, std::uint32_t seed, bool inject) {
  const std::size_t n_kv = 2, n_q = 4;
  const auto c = make_config(p, n_q, budget, shared);
  const auto x = random_prompt(n_q, P, seed, 2.0f);
  std::mt19937 gen(seed + 1);
  std::vector<float> zeta(x.size());
  for (float& z : zeta) z = -std::log(-std::log(std::uniform_real_distribution<float>(0.01f, 0.99f)(gen)));
  const std::vector<float>* z = inject ? &zeta : nullptr;
  const std::size_t capacity = std::max(P, budget.resolve(P)) + 1;
  Layer one(p, c, n_kv, capacity), chunked(p, c, n_kv, capacity);
  for (std::size_t t = 0; t < P; ++t) append_token(one.kv, static_cast<std::int64_t>(t));
  one.cache->prefill(x.data(), P, inject ? zeta.data() : nullptr);
  feed_chunks(chunked, x, z, n_q, P, sizes);
  const std::string where = std::string(kvevict::policy_name(p)) + (shared ? " shared" : "") + " P=" +
                            std::to_string(P) + " C=" + std::to_string(sizes[0]);
  ASSERT_TRUE(same_state(*one.cache, *chunked.cache, n_kv)) << where;
  EXPECT_TRUE(rows_aligned(chunked.kv)) << where;
  EXPECT_EQ(one.cache->budget(), chunked.cache->budget()) << where;
  EXPECT_EQ(one.cache->recent_window(), chunked.cache->recent_window()) << where;
  EXPECT_EQ(one.cache->temperature(), chunked.cache->temperature()) << where;
  // Decode steps afterwards stay identical (same recent window, same generator use).
  for (std::size_t t = P; t < P + 3; ++t) {
    append_token(one.kv, static_cast<std::int64_t>(t));
    append_token(chunked.kv, static_cast<std::int64_t>(t));
    const std::size_t n = one.kv.length(0);
    ASSERT_EQ(n, chunked.kv.length(0)) << where;
    std::vector<float> row(n_q * n);
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = std::sin(0.7f * static_cast<float>(i + t));
    one.cache->decode_step(row.data(), n, inject ? zeta.data() : nullptr);
    chunked.cache->decode_step(row.data(), n, inject ? zeta.data() : nullptr);
    ASSERT_TRUE(same_state(*one.cache, *chunked.cache, n_kv)) << where << " step " << t - P;
  }
}

TEST(ChunkedPrefill, EqualsOneShotForEveryPolicyAndChunkSize) {
  const std::size_t P = 100;
  for (kvevict::Policy p : kPolicies)
    for (bool shared : {false, true})
      for (std::size_t C : {std::size_t{1}, std::size_t{7}, std::size_t{64}, P}) {
        expect_chunked_equals_one_shot(p, shared, P, kvevict::Budget::tokens(24), {C}, 11, true);
        expect_chunked_equals_one_shot(p, shared, P, kvevict::Budget::ratio(0.3), {C}, 12, false);
      }
}

TEST(ChunkedPrefill, RandomChunkingsEqualOneShot) {
  std::mt19937 gen(2024);
  for (int trial = 0; trial < 40; ++trial) {
    const kvevict::Policy p = kPolicies[trial % 5];
    const std::size_t P = std::uniform_int_distribution<std::size_t>(1, 90)(gen);
    std::vector<std::size_t> sizes(5);
    for (auto& s : sizes) s = std::uniform_int_distribution<std::size_t>(1, 20)(gen);
    const std::size_t k = std::uniform_int_distribution<std::size_t>(2, 40)(gen);
    expect_chunked_equals_one_shot(p, trial % 2 == 0, P, kvevict::Budget::tokens(k), sizes, 100u + trial,
                                   trial % 3 == 0);
  }
}

// Drawn noise is a pure function of (seed, q_head, prompt row, slot): every chunking of
// the prompt draws exactly as the one-shot prefill, so a noisy Keyformer is bit-identical.
TEST(ChunkedPrefill, AnyChunkingWithDrawnNoiseEqualsOneShotPerSeed) {
  const std::size_t P = 700, n_q = 4;  // rows longer than one 512-slot chunk
  for (bool shared : {false, true}) {
    const auto c = make_config(kvevict::Policy::keyformer, n_q, kvevict::Budget::tokens(40), shared);
    const auto x = random_prompt(n_q, P, 5, 1.0f);
    Layer one(kvevict::Policy::keyformer, c, 2, P + 1);
    for (std::size_t t = 0; t < P; ++t) append_token(one.kv, static_cast<std::int64_t>(t));
    one.cache->prefill(x.data(), P);
    for (const std::vector<std::size_t>& sizes :
         {std::vector<std::size_t>{P}, std::vector<std::size_t>{1}, std::vector<std::size_t>{7, 300, 64}}) {
      Layer chunked(kvevict::Policy::keyformer, c, 2, P + 1);
      feed_chunks(chunked, x, nullptr, n_q, P, sizes);
      EXPECT_TRUE(same_state(*one.cache, *chunked.cache, 2)) << "shared " << shared << " first chunk " << sizes[0];
    }
  }
}

// Scores during an unbounded chunked prefill are the rows seen so far (H2O, all-zero logits).
TEST(ChunkedPrefill, ScoresGrowChunkByChunkWithExactValues) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, 1, kvevict::Budget::tokens(2), false);
  c.recent = kvevict::RecentWindow::tokens(1);
  kvevict::H2O cache(c, kv);
  append_token(kv, 0);
  append_token(kv, 1);
  const float x1[] = {0.0f, NAN, 0.0f, 0.0f};  // [1][2][2]: rows [1], [1/2, 1/2]
  cache.prefill_chunk(x1, 2, 2);
  EXPECT_EQ(cache.length(0), 2u);
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.5f);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 0.5f);
  append_token(kv, 2);
  const float x2[] = {0.0f, 0.0f, 0.0f};  // [1][1][3]: row [1/3, 1/3, 1/3]
  cache.prefill_chunk(x2, 1, 3);
  EXPECT_EQ(cache.length(0), 3u);  // unbounded: nothing evicted before finish_prefill
  EXPECT_EQ(cache.budget(), 0u);
  cache.finish_prefill();
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 2}));
  EXPECT_FLOAT_EQ(cache.scores(0)[0], 1.5f + 1.0f / 3);
  EXPECT_FLOAT_EQ(cache.scores(0)[1], 1.0f / 3);
  EXPECT_EQ(cache.budget(), 2u);
  EXPECT_TRUE(rows_aligned(kv));
}

// ---------------------------------------------------------------------------
// Bounded prefill: the small cases, exact.

TEST(BoundedPrefill, StreamingLLMTwelveTokensInThreeChunksOfFourKeepsTheOneShotPositions) {
  const auto x = kvtest::causal_logits(1, 12, [](auto, auto, auto) { return 0.0f; });
  kvevict::CacheConfig c = make_config(kvevict::Policy::streaming_llm, 1, kvevict::Budget::tokens(5), false);
  kvevict::KVBuffer<float> one_buf(1, 13, 4);
  auto one_kv = one_buf.view();
  kvevict::StreamingLLM one(c, one_kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{1});
  for (int t = 0; t < 12; ++t) append_token(one_kv, t);
  one.prefill(x.data(), 12);
  EXPECT_EQ(one.retained_positions(0), (Positions{0, 8, 9, 10, 11}));

  c.bounded_prefill = true;
  c.max_prefill_chunk = 4;
  kvevict::KVBuffer<float> buf(1, 9, 4);  // k + C = 9 slots: the whole bounded footprint
  auto kv = buf.view();
  kvevict::StreamingLLM cache(c, kv, {}, kvevict::ConstantTemperature(), kvevict::SinkRecentSelection{1});
  const std::vector<Positions> after = {{0, 1, 2, 3}, {0, 4, 5, 6, 7}, {0, 8, 9, 10, 11}};
  for (int chunk = 0; chunk < 3; ++chunk) {
    for (int t = 4 * chunk; t < 4 * chunk + 4; ++t) append_token(kv, t);
    cache.prefill_chunk(nullptr, 4, kv.length(0));
    EXPECT_EQ(cache.retained_positions(0), after[static_cast<std::size_t>(chunk)]) << "chunk " << chunk;
    EXPECT_TRUE(rows_aligned(kv));
  }
  cache.finish_prefill();
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 8, 9, 10, 11}));
}

TEST(BoundedPrefill, H2OStaysWithinBudgetAfterEveryChunkWithExactPositions) {
  kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, 1, kvevict::Budget::tokens(5), false);
  c.recent = kvevict::RecentWindow::tokens(2);
  c.bounded_prefill = true;
  c.max_prefill_chunk = 4;
  kvevict::KVBuffer<float> buf(1, 9, 4);
  auto kv = buf.view();
  kvevict::H2O cache(c, kv);
  // All-zero logits: a row over m live slots gives each 1/m. Hand-computed (see below).
  const std::vector<std::size_t> sizes = {4, 5, 5};
  const std::vector<Positions> kept = {{0, 1, 2, 3}, {0, 1, 2, 6, 7}, {0, 1, 2, 10, 11}};
  for (std::size_t chunk = 0; chunk < 3; ++chunk) {
    const std::size_t held = kv.length(0);
    for (std::size_t t = 4 * chunk; t < 4 * chunk + 4; ++t) append_token(kv, static_cast<std::int64_t>(t));
    const std::vector<float> x(4 * (held + 4), 0.0f);
    cache.prefill_chunk(x.data(), 4, held + 4);
    EXPECT_EQ(cache.length(0), sizes[chunk]) << "chunk " << chunk;
    EXPECT_EQ(cache.retained_positions(0), kept[chunk]) << "chunk " << chunk;
  }
  // Chunk 2 (rows over 5..8 slots) adds 1/5+1/6+1/7+1/8 to tokens 0..4; chunk 3 (6..9 slots)
  // adds 1/6+1/7+1/8+1/9 to the five kept tokens and token 8, then 10 and 11 are recent.
  const double c2 = 1.0 / 5 + 1.0 / 6 + 1.0 / 7 + 1.0 / 8, c3 = 1.0 / 6 + 1.0 / 7 + 1.0 / 8 + 1.0 / 9;
  EXPECT_NEAR(cache.scores(0)[0], 1.0 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4 + c2 + c3, 1e-6);
  EXPECT_NEAR(cache.scores(0)[3], 1.0 / 8 + 1.0 / 9, 1e-6);  // position 10: the last two rows
  EXPECT_NEAR(cache.scores(0)[4], 1.0 / 9, 1e-6);            // position 11
  cache.finish_prefill();
  EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2, 10, 11}));
  EXPECT_TRUE(rows_aligned(kv));
}

TEST(BoundedPrefill, EqualsOneShotWhenThePromptFitsTheBudget) {
  for (kvevict::Policy p : kPolicies) {
    const std::size_t P = 20, n_q = 4;
    kvevict::CacheConfig c = make_config(p, n_q, kvevict::Budget::tokens(24), false);
    const auto x = random_prompt(n_q, P, 3, 1.0f);
    Layer one(p, c, 2, 32);
    for (std::size_t t = 0; t < P; ++t) append_token(one.kv, static_cast<std::int64_t>(t));
    one.cache->prefill(x.data(), P, x.data());  // any finite ζ: use the logits
    c.bounded_prefill = true;
    c.max_prefill_chunk = 6;
    Layer bounded(p, c, 2, 30);
    std::vector<float> zeta = x;
    feed_chunks(bounded, x, &zeta, n_q, P, {6});
    EXPECT_TRUE(same_state(*one.cache, *bounded.cache, 2)) << kvevict::policy_name(p);
  }
}

// ---------------------------------------------------------------------------
// Bounded prefill vs a simple reference: per KV head, a list of (position, score) in
// double; each query row's softmax runs over the live tokens (logits are a function of
// (q_head, query position, key position)), the cut keeps the recent window plus the
// top scores (ties: older), or the sinks plus the most recent.

float logit_fn(std::size_t h, std::int64_t q, std::int64_t k) {
  return 2.0f * std::sin(0.37f * static_cast<float>(q) + 1.3f * static_cast<float>(k) + static_cast<float>(h));
}

struct RefToken {
  std::int64_t pos;
  double score;
};

void ref_cut(std::vector<RefToken>& live, std::size_t k, std::size_t w, std::size_t sinks, bool by_position) {
  if (live.size() <= k) return;
  std::vector<RefToken> kept;
  if (by_position) {  // StreamingLLM / window
    for (std::size_t i = 0; i < sinks; ++i) kept.push_back(live[i]);
    for (std::size_t i = live.size() - (k - sinks); i < live.size(); ++i) kept.push_back(live[i]);
  } else {
    const std::size_t pool = live.size() - w;
    std::vector<std::size_t> order(pool);
    for (std::size_t i = 0; i < pool; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return live[a].score > live[b].score; });
    order.resize(k - w);
    std::sort(order.begin(), order.end());
    for (std::size_t i : order) kept.push_back(live[i]);
    for (std::size_t i = pool; i < live.size(); ++i) kept.push_back(live[i]);
  }
  live = kept;
}

TEST(BoundedPrefill, MatchesASimpleReferenceOnRandomPrompts) {
  std::mt19937 gen(77);
  for (int trial = 0; trial < 30; ++trial) {
    const kvevict::Policy p = kPolicies[1 + trial % 4];  // h2o, streaming, window, tova (no noise)
    const std::size_t n_kv = 2, g = 2, n_q = n_kv * g;
    const std::size_t P = std::uniform_int_distribution<std::size_t>(1, 60)(gen);
    const std::size_t k = std::uniform_int_distribution<std::size_t>(3, 12)(gen);
    const std::size_t C = std::uniform_int_distribution<std::size_t>(1, 9)(gen);
    kvevict::CacheConfig c = make_config(p, n_q, kvevict::Budget::tokens(k), false);
    c.recent = kvevict::RecentWindow::tokens(p == kvevict::Policy::h2o ? 2 : 0);
    c.bounded_prefill = true;
    c.max_prefill_chunk = C;
    Layer layer(p, c, n_kv, k + C);
    const bool by_position = p == kvevict::Policy::streaming_llm || p == kvevict::Policy::window;
    const std::size_t sinks = p == kvevict::Policy::streaming_llm ? 2 : 0, w = c.recent.resolve(k);
    const bool tova = p == kvevict::Policy::tova;
    std::vector<std::vector<RefToken>> ref(n_kv);
    for (std::size_t held = 0; held < P;) {
      const std::size_t len = std::min(C, P - held), n = layer.kv.length(0) + len;
      for (std::size_t t = held; t < held + len; ++t) append_token(layer.kv, static_cast<std::int64_t>(t));
      std::vector<float> x(n_q * len * n, std::nanf(""));
      for (std::size_t h = 0; h < n_q; ++h)  // by slot of KV head h / g: heads keep different tokens
        for (std::size_t i = 0; i < len; ++i)
          for (std::size_t s = 0; s <= n - len + i; ++s) {
            const std::int64_t* pos = layer.kv.head_positions(h / g);
            x[(h * len + i) * n + s] = logit_fn(h, pos[n - len + i], pos[s]);
          }
      layer.cache->prefill_chunk(x.data(), len, n);
      for (std::size_t j = 0; j < n_kv; ++j) {
        auto& live = ref[j];
        for (std::size_t t = held; t < held + len; ++t) live.push_back({static_cast<std::int64_t>(t), 0.0});
        if (tova)
          for (auto& tok : live) tok.score = 0.0;
        for (std::size_t i = tova ? len - 1 : 0; i < len; ++i) {
          const std::size_t m = live.size() - len + i + 1;
          const std::int64_t q = static_cast<std::int64_t>(held + i);
          for (std::size_t h = j * g; h < (j + 1) * g; ++h) {
            double mx = -1e300, sum = 0.0;
            for (std::size_t s = 0; s < m; ++s) mx = std::max(mx, double(logit_fn(h, q, live[s].pos)));
            for (std::size_t s = 0; s < m; ++s) sum += std::exp(double(logit_fn(h, q, live[s].pos)) - mx);
            if (by_position) continue;
            for (std::size_t s = 0; s < m; ++s) live[s].score += std::exp(double(logit_fn(h, q, live[s].pos)) - mx) / sum;
          }
        }
        ref_cut(live, k, w, sinks, by_position);
        ASSERT_EQ(layer.cache->length(j), live.size()) << "trial " << trial << " head " << j;
        ASSERT_LE(layer.cache->length(j), k);
        for (std::size_t s = 0; s < live.size(); ++s) {
          ASSERT_EQ(layer.cache->positions(j)[s], live[s].pos) << "trial " << trial << " head " << j;
          ASSERT_NEAR(layer.cache->scores(j)[s], live[s].score, 1e-5 * (1.0 + live[s].score))
              << "trial " << trial << " " << kvevict::policy_name(p) << " P " << P << " k " << k << " C " << C
              << " held " << held << " head " << j << " slot " << s;
        }
      }
      held += len;
    }
    layer.cache->finish_prefill();
    for (std::size_t j = 0; j < n_kv; ++j) EXPECT_EQ(layer.cache->length(j), std::min(k, P));
    EXPECT_TRUE(rows_aligned(layer.kv));
  }
}

// ---------------------------------------------------------------------------
// Errors: named, and the state is unchanged.

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}

TEST(ChunkedPrefillErrors, RejectBadChunksAndLeaveTheStateUnchanged) {
  const std::size_t n_q = 2, P = 12;
  const auto x = random_prompt(n_q, P, 9, 1.0f);
  kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, n_q, kvevict::Budget::tokens(4), false);
  c.max_prefill_chunk = 6;
  Layer layer(kvevict::Policy::h2o, c, 1, 16), reference(kvevict::Policy::h2o, c, 1, 16);
  kvevict::CacheInterface& cache = *layer.cache;
  for (int t = 0; t < 4; ++t) append_token(layer.kv, t);
  auto x0 = chunk_of(x, n_q, P, 0, 4);
  cache.prefill_chunk(x0.data(), 4, 4);
  const std::vector<float> scores(cache.scores(0), cache.scores(0) + 4);

  for (int t = 4; t < 8; ++t) append_token(layer.kv, t);
  auto x1 = chunk_of(x, n_q, P, 4, 4);
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 4, 7); }),
            "kvevict::Cache::prefill_chunk: n = 7 but the cache holds 4 tokens per KV head and the chunk has 4 (the "
            "logits rows must span n = 8 live slots)");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 3, 8); }),
            "kvevict::Cache::prefill_chunk: n = 8 but the cache holds 4 tokens per KV head and the chunk has 3 (the "
            "logits rows must span n = 7 live slots)");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 0, 4); }),
            "kvevict::Cache::prefill_chunk: chunk_len must be >= 1 (got 0)");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 7, 11); }),
            "kvevict::Cache::prefill_chunk: chunk_len = 7 exceeds config.max_prefill_chunk = 6");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(nullptr, 4, 8); }),
            "kvevict::Cache::prefill_chunk: logits must be non-null");
  auto bad = x1;
  bad[(1 * 4 + 2) * 8 + 5] = std::numeric_limits<float>::infinity();  // q_head 1, chunk row 2, slot 5
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(bad.data(), 4, 8); }),
            "kvevict::Cache::prefill_chunk: logits row 2 of q_head 1 contains NaN or +inf");
  EXPECT_EQ(message_of([&] { cache.decode_step(x1.data(), 8); }),
            "kvevict::Cache::decode_step: the chunked prompt is not finished; call finish_prefill() first");
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 8); }),
            "kvevict::Cache::prefill: a chunked prefill is in progress; call finish_prefill()");
  layer.kv.head_positions(0)[6] = 4;  // positions must keep rising
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 4, 8); }),
            "kvevict::Cache::prefill_chunk: positions must keep rising: KV head 0 slot 6 has 4 after 5");
  layer.kv.head_positions(0)[6] = 6;
  // Nothing changed: same scores, same lengths, and the chunk then gives what a fresh cache gives.
  EXPECT_EQ(std::vector<float>(cache.scores(0), cache.scores(0) + 4), scores);
  EXPECT_EQ(layer.kv.length(0), 8u);
  cache.prefill_chunk(x1.data(), 4, 8);
  cache.finish_prefill();
  for (int t = 0; t < 4; ++t) append_token(reference.kv, t);
  reference.cache->prefill_chunk(x0.data(), 4, 4);
  for (int t = 4; t < 8; ++t) append_token(reference.kv, t);
  reference.cache->prefill_chunk(x1.data(), 4, 8);
  reference.cache->finish_prefill();
  EXPECT_TRUE(same_state(cache, *reference.cache, 1));

  EXPECT_EQ(message_of([&] { cache.finish_prefill(); }),
            "kvevict::Cache::finish_prefill: the prompt is already finished; call reset()");
  append_token(layer.kv, 8);
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x1.data(), 1, 5); }),
            "kvevict::Cache::prefill_chunk: the prompt is finished; call reset() first");
  cache.reset(7);
  EXPECT_EQ(message_of([&] { cache.finish_prefill(); }),
            "kvevict::Cache::finish_prefill: no chunk was passed (call prefill_chunk first)");
}

TEST(ChunkedPrefillErrors, AChunkLengthWhoseSumWithTheHeldTokensWrapsAroundIsRejected) {
  const std::size_t n_q = 2, P = 8;
  const auto x = random_prompt(n_q, P, 3, 1.0f);
  const kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, n_q, kvevict::Budget::tokens(4), false);
  Layer layer(kvevict::Policy::h2o, c, 1, 16);
  for (int t = 0; t < 4; ++t) append_token(layer.kv, t);
  const auto x0 = chunk_of(x, n_q, P, 0, 4);
  layer.cache->prefill_chunk(x0.data(), 4, 4);
  const std::vector<float> scores(layer.cache->scores(0), layer.cache->scores(0) + 4);
  // held + C = 4 + (2^64 − 2) wraps to 2: rejected before the sum is formed.
  EXPECT_EQ(message_of([&] { layer.cache->prefill_chunk(x0.data(), std::numeric_limits<std::size_t>::max() - 1, 2); }),
            "kvevict::Cache::prefill_chunk: chunk_len = 18446744073709551614 exceeds n = 2 live slots");
  EXPECT_EQ(std::vector<float>(layer.cache->scores(0), layer.cache->scores(0) + 4), scores);
}

TEST(ChunkedPrefillErrors, FinishRejectsABudgetThePromptCannotServeAndStaysUsable) {
  kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, 1, kvevict::Budget::ratio(2.0), false);
  Layer layer(kvevict::Policy::h2o, c, 1, 8);  // k = 2 · P = 8 needs capacity 9
  for (int t = 0; t < 4; ++t) append_token(layer.kv, t);
  const std::vector<float> x(16, 0.0f);
  layer.cache->prefill_chunk(x.data(), 4, 4);
  EXPECT_EQ(message_of([&] { layer.cache->finish_prefill(); }),
            "kvevict::Cache::finish_prefill: budget k = 8 needs a view of capacity >= k + 1 = 9 (a decode step "
            "appends before it evicts), but the capacity is 8");
  EXPECT_EQ(layer.cache->length(0), 4u);
}

TEST(ChunkedPrefillErrors, BoundedPrefillConfigurationIsCheckedAtConstruction) {
  kvevict::KVBuffer<float> buf(1, 8, 2);
  auto kv = buf.view();
  kvevict::CacheConfig c = make_config(kvevict::Policy::h2o, 1, kvevict::Budget::ratio(0.5), false);
  c.bounded_prefill = true;
  c.max_prefill_chunk = 2;
  EXPECT_EQ(message_of([&] { kvevict::H2O cache(c, kv); }),
            "kvevict::Cache: bounded_prefill needs a token budget (Budget::tokens): a ratio of the prompt length is "
            "unknown while the prompt streams in");
  c.budget = kvevict::Budget::tokens(4);
  c.max_prefill_chunk = 0;
  EXPECT_EQ(message_of([&] { kvevict::H2O cache(c, kv); }),
            "kvevict::Cache: bounded_prefill needs max_prefill_chunk >= 1 (got 0)");
  c.max_prefill_chunk = 5;
  EXPECT_EQ(message_of([&] { kvevict::H2O cache(c, kv); }),
            "kvevict::Cache: bounded_prefill with budget k = 4 and max_prefill_chunk = 5 needs a view of capacity >= "
            "k + C = 9, but the capacity is 8");
  c.max_prefill_chunk = 4;
  EXPECT_EQ(message_of([&] { kvevict::H2O cache(c, kv); }), "no exception");
}

// SnapKV scores the prompt's last L rows, unknown while chunks stream in: prefill_chunk is rejected
// (through make_cache too), nothing changes, and the one-shot prefill still works afterwards.
TEST(ChunkedPrefill, SnapKVRejectsChunksAndKeepsItsState) {
  kvevict::CacheConfig c;
  c.n_q_heads = 2;
  c.budget = kvevict::Budget::tokens(4);
  c.recent = kvevict::RecentWindow::tokens(1);
  c.max_prefill_chunk = 4;
  kvevict::PolicyParams params;
  params.snap_window = 2;
  params.snap_kernel = 3;
  kvevict::KVBuffer<float> buf(1, 16, 4);
  auto kv = buf.view();
  auto cache = kvevict::make_cache(kvevict::Policy::snapkv, c, kv, params);
  for (int p = 0; p < 4; ++p) append_token(kv, p);
  const auto x = kvtest::causal_logits(2, 4, [](std::size_t h, std::size_t r, std::size_t col) {
    return static_cast<float>(h + r * col % 3);
  });
  EXPECT_THROW(cache->prefill_chunk(x.data(), 4, 4), std::invalid_argument);
  EXPECT_THROW(cache->finish_prefill(), std::invalid_argument);  // no chunk was taken
  EXPECT_EQ(kv.length(0), 4u);
  cache->prefill(x.data(), 4);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{0, 1, 2, 3}));
  c.bounded_prefill = true;
  kvevict::KVBuffer<float> buf2(1, 16, 4);
  EXPECT_THROW(kvevict::make_cache(kvevict::Policy::snapkv, c, buf2.view(), params), std::invalid_argument);
}

}  // namespace
