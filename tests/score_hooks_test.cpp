// The optional Score hooks of kvevict/concepts.hpp: a score from the keys alone on `Cache` and
// `PagedCache` with no logits at all; a custom (non-SnapKV) score with `first_scored_row`,
// `selection_scores`, `validate_budget`, `kWholePrompt` and `kName`; the detection of every hook and of
// a mistyped one. Hand-computed expected values (the static_assert messages are checked by the
// compile-only contract_violation_* tests).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace {

using Positions = std::vector<std::int64_t>;
using Scored = std::vector<std::pair<std::int64_t, float>>;  // (position, score), by position
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// A key score: the sum of the key's elements (the tests' keys make it finite and >= 0).
struct KeySumScore {
  static constexpr bool kUsesLogits = false, kAccumulates = false, kUsesTemperature = false, kPrefillLastRow = false;
  bool noisy() const { return false; }
  float key_score(const float* key, std::size_t head_dim) const noexcept {
    float s = 0.0f;
    for (std::size_t i = 0; i < head_dim; ++i) s += key[i];
    return s;
  }
};
template <class Selection = kvevict::RecentTopKSelection>
using KeySumCache = kvevict::Cache<KeySumScore, kvevict::ConstantTemperature, Selection>;

/// The key sums of the hand example by (KV head, position), positions 0..7; the key of (h, p) is
/// `(sum − 1, 1)`, so both elements count.
constexpr float kSum[2][8] = {{5, 1, 4, 2, 6, 3, 7, 1}, {1, 6, 2, 5, 3, 7, 0, 9}};

template <class T>
void append_key(kvevict::KVView<T> kv, std::int64_t p) {
  std::vector<T> k, v(4, T(0.0f));
  for (std::size_t h = 0; h < 2; ++h) k.insert(k.end(), {T(kSum[h][p] - 1.0f), T(1.0f)});
  kv.append(p, k.data(), v.data());
}

kvevict::CacheConfig config(std::size_t k, std::size_t w, bool shared) {
  kvevict::CacheConfig c;
  c.n_q_heads = 2;  // g = 1
  c.budget = kvevict::Budget::tokens(k);
  c.recent = kvevict::RecentWindow::tokens(w);
  c.shared_heads = shared;
  return c;
}

/// The (position, score) pairs of KV head `h`, sorted by position.
Scored scored(const kvevict::CacheInterface& c, std::size_t h) {
  Scored out;
  for (std::size_t s = 0; s < c.length(h); ++s) out.emplace_back(c.positions(h)[s], c.scores(h)[s]);
  std::sort(out.begin(), out.end());
  return out;
}

// Per KV head, k = 3, w = 1, no logits anywhere. Prefill (P = 6): head 0 sums [5, 1, 4, 2, 6, 3] keep
// 5 (recent) + 4, 0; head 1 sums [1, 6, 2, 5, 3, 7] keep 5 + 1, 3. Step 6 (sums 7 | 0): head 0 evicts
// 5 (3), head 1 evicts 3 (5). Step 7 (sums 1 | 9): head 0 evicts 0 (5), head 1 evicts 6 (0).
template <class T>
void key_score_per_head() {
  kvevict::KVBuffer<T> buf(2, 10, 2);
  auto kv = buf.view();
  KeySumCache<> cache(config(3, 1, false), kv);
  for (std::int64_t p = 0; p < 6; ++p) append_key(kv, p);
  cache.prefill(nullptr, 6);
  EXPECT_EQ(scored(cache, 0), (Scored{{0, 5.0f}, {4, 6.0f}, {5, 3.0f}}));
  EXPECT_EQ(scored(cache, 1), (Scored{{1, 6.0f}, {3, 5.0f}, {5, 7.0f}}));
  append_key(kv, 6);
  cache.decode_step(nullptr, 4);
  EXPECT_EQ(scored(cache, 0), (Scored{{0, 5.0f}, {4, 6.0f}, {6, 7.0f}}));
  EXPECT_EQ(scored(cache, 1), (Scored{{1, 6.0f}, {5, 7.0f}, {6, 0.0f}}));
  append_key(kv, 7);
  cache.decode_step(nullptr, 4);
  EXPECT_EQ(scored(cache, 0), (Scored{{4, 6.0f}, {6, 7.0f}, {7, 1.0f}}));
  EXPECT_EQ(scored(cache, 1), (Scored{{1, 6.0f}, {5, 7.0f}, {7, 9.0f}}));
}

TEST(KeyScore, KeepsTheHighestKeyScoresPerHeadWithoutLogits) { key_score_per_head<float>(); }
TEST(KeyScore, ReadsSixteenBitKeysAsFloats) {  // the sums are exact in half and bfloat16
  key_score_per_head<Eigen::half>();
  key_score_per_head<Eigen::bfloat16>();
}

// shared_heads: the selection ranks the sums over both heads, [6, 7, 6, 7, 9, 10] at prefill: keep 5 +
// 4 (9) + 1 (7, the older of the two 7s); step 6 (7) evicts 1 (7 < 9 < 10); step 7 (10) evicts 6 (7).
TEST(KeyScore, SharedHeadsRankTheSummedKeyScores) {
  kvevict::KVBuffer<float> buf(2, 10, 2);
  auto kv = buf.view();
  KeySumCache<> cache(config(3, 1, true), kv);
  for (std::int64_t p = 0; p < 6; ++p) append_key(kv, p);
  cache.prefill(nullptr, 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{1, 4, 5}));
  EXPECT_EQ(scored(cache, 1), (Scored{{1, 6.0f}, {4, 3.0f}, {5, 7.0f}}));
  append_key(kv, 6);
  cache.decode_step(nullptr, 4);
  EXPECT_EQ(cache.retained_positions(1), (Positions{4, 5, 6}));
  append_key(kv, 7);
  cache.decode_step(nullptr, 4);
  EXPECT_EQ(scored(cache, 0), (Scored{{4, 6.0f}, {5, 3.0f}, {7, 1.0f}}));
  EXPECT_EQ(scored(cache, 1), (Scored{{4, 3.0f}, {5, 7.0f}, {7, 9.0f}}));
}

// Chunked prefill scores each chunk's keys: two chunks (4 + 2) give the one-shot result, and so does a
// bounded prefill of 2-token chunks (cuts at 4 and 5 tokens, see the comment above key_score_per_head).
TEST(KeyScore, ChunkedAndBoundedPrefillScoreEveryChunksKeys) {
  for (bool bounded : {false, true}) {
    kvevict::KVBuffer<float> buf(2, 10, 2);
    auto kv = buf.view();
    kvevict::CacheConfig c = config(3, 1, false);
    c.bounded_prefill = bounded;
    c.max_prefill_chunk = bounded ? 2 : 0;
    KeySumCache<> cache(c, kv);
    for (std::int64_t p = 0; p < 6;) {
      const std::size_t C = bounded || p == 4 ? 2 : 4, held = kv.length(0);  // held: after any cut
      for (std::size_t i = 0; i < C; ++i) append_key(kv, p++);
      cache.prefill_chunk(nullptr, C, held + C);
    }
    cache.finish_prefill();
    EXPECT_EQ(scored(cache, 0), (Scored{{0, 5.0f}, {4, 6.0f}, {5, 3.0f}})) << bounded;
    EXPECT_EQ(scored(cache, 1), (Scored{{1, 6.0f}, {3, 5.0f}, {5, 7.0f}})) << bounded;
  }
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

// A key score that is negative or NaN is rejected, naming the head, slot and value, with the state
// unchanged: the same call succeeds once the key is fixed.
TEST(KeyScore, ABadKeyScoreThrowsAndChangesNothing) {
  kvevict::KVBuffer<float> buf(2, 10, 2);
  auto kv = buf.view();
  KeySumCache<> cache(config(3, 1, false), kv);
  for (std::int64_t p = 0; p < 6; ++p) append_key(kv, p);
  kv.k_row(1, 2)[0] = -4.0f;  // head 1, slot 2: sum -3
  EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 6); }),
            "kvevict::Cache::prefill: key_score of KV head 1, slot 2 is -3 (must be finite and >= 0)");
  EXPECT_EQ(cache.budget(), 0u);
  EXPECT_EQ(kv.length(1), 6u);
  kv.k_row(1, 2)[0] = 1.0f;
  cache.prefill(nullptr, 6);
  append_key(kv, 6);
  kv.k_row(0, 3)[1] = std::nanf("");
  const Scored before = scored(cache, 0);
  EXPECT_EQ(message_of([&] { cache.decode_step(nullptr, 4); }),
            "kvevict::Cache::decode_step: key_score of KV head 0, slot 3 is nan (must be finite and >= 0)");
  EXPECT_EQ(cache.step(), 0u);
  EXPECT_EQ(scored(cache, 0), before);
  kv.k_row(0, 3)[1] = 1.0f;
  cache.decode_step(nullptr, 4);
  EXPECT_EQ(scored(cache, 0), (Scored{{0, 5.0f}, {4, 6.0f}, {6, 7.0f}}));
}

/// One sequence's paged storage (2 KV heads, head_dim 2, pages of 2 tokens, NHD) and its pool.
struct PagedKeys {
  static constexpr std::size_t ps = 2, pages = 5;
  std::vector<float> kpool = std::vector<float>(pages * ps * 2 * 2, 0.0f), vpool = kpool;
  std::vector<std::int32_t> table = std::vector<std::int32_t>(pages, kvevict::kNoPage);
  std::vector<std::int64_t> pos = std::vector<std::int64_t>(pages * ps, 0);
  std::size_t length = 0;
  kvevict::PagedKVView<float> view;
  kvevict::PagePool pool{pages};
  PagedKeys() {
    view.k = kpool.data();
    view.v = vpool.data();
    view.num_pages = pages;
    view.page_size = ps;
    view.n_kv_heads = 2;
    view.head_dim = 2;
    view.page_table = table.data();
    view.max_pages = pages;
    view.length = &length;
    view.positions = pos.data();
  }
  void append(std::int64_t p) {  // the keys of append_key
    std::vector<float> k, v(4, 0.0f);
    for (std::size_t h = 0; h < 2; ++h) k.insert(k.end(), {kSum[h][p] - 1.0f, 1.0f});
    pool.append(view, p, k.data(), v.data());
  }
};
using PagedKeySum = kvevict::PagedCache<KeySumScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;

// Token unit, no logits: the kept tokens and scores of the contiguous shared_heads cache above; the
// prefill cut returns the third page.
/// A key score whose noise switch is on: there are no logits to add noise to, so the caches refuse it.
struct NoisyKeySumScore : KeySumScore {
  bool noisy() const { return true; }
};

TEST(KeyScore, ANoisyScoreWithoutLogitsIsRefusedAtConstruction) {
  kvevict::KVBuffer<float> buf(2, 10, 2);
  using Noisy = kvevict::Cache<NoisyKeySumScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
  EXPECT_EQ(message_of([&] { Noisy cache(config(3, 1, false), buf.view()); }),
            "kvevict::Cache: a score that reads no logits (kUsesLogits = false) cannot add Gumbel noise; its "
            "noisy() must return false");
}

TEST(KeyScore, PagedCacheScoresKeysWithoutLogits) {
  PagedKeys s;
  PagedKeySum cache(config(3, 1, true), kvevict::PagedEvictionConfig{}, s.view, s.pool);
  for (std::int64_t p = 0; p < 6; ++p) s.append(p);
  cache.prefill(nullptr, 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{1, 4, 5}));
  EXPECT_EQ(cache.pages_in_use(), 2u);
  for (std::int64_t p = 6; p < 8; ++p) {
    s.append(p);
    cache.decode_step(nullptr, 4);
  }
  EXPECT_EQ(scored(cache, 0), (Scored{{4, 6.0f}, {5, 3.0f}, {7, 1.0f}}));
  EXPECT_EQ(scored(cache, 1), (Scored{{4, 3.0f}, {5, 7.0f}, {7, 9.0f}}));
  EXPECT_EQ(cache.pages_in_use(), 2u);
}

// Page unit (k = 4, w = 1), summed key scores by position [6, 7, 6, 7, 9, 10, 7, 10]: prefill (6 >= k +
// page_size) evicts the lower of the middle pages {0, 1} and {2, 3} (13 each: the older); step 6 holds
// 5 < 6 tokens; step 7 evicts {2, 3} (13 < 19; {6, 7} holds the newest token).
TEST(KeyScore, PagedPageUnitRanksPagesByKeyScores) {
  PagedKeys s;
  kvevict::PagedEvictionConfig page;
  page.unit = kvevict::EvictUnit::page;
  PagedKeySum cache(config(4, 1, true), page, s.view, s.pool);
  for (std::int64_t p = 0; p < 6; ++p) s.append(p);
  cache.prefill(nullptr, 6);
  EXPECT_EQ(cache.retained_positions(0), (Positions{2, 3, 4, 5}));
  s.append(6);
  cache.decode_step(nullptr, 5);
  EXPECT_EQ(cache.retained_positions(0), (Positions{2, 3, 4, 5, 6}));
  s.append(7);
  cache.decode_step(nullptr, 6);
  EXPECT_EQ(cache.retained_positions(1), (Positions{4, 5, 6, 7}));
  EXPECT_EQ(scored(cache, 0), (Scored{{4, 6.0f}, {5, 3.0f}, {6, 7.0f}, {7, 1.0f}}));
  EXPECT_EQ(cache.pages_freed(), 2u);
}

/// A custom logits score on every hook but `key_score`: H2O's accumulation, but prefill scores only the
/// second half of the prompt's rows, the selection keeps the first token (a sink: `FLT_MAX`), and the
/// budget must be even.
struct SecondHalfScore : kvevict::AccumulatedAttentionScore {
  static constexpr const char* kName = "SecondHalf";
  static constexpr const char* kWholePrompt = "scores the second half of the prompt";
  std::size_t first_scored_row(std::size_t prompt_len) const { return prompt_len / 2; }
  void selection_scores(const float* s, std::size_t n, float* out) const noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = i == 0 ? FLT_MAX : s[i];
  }
  void validate_budget(std::size_t k, std::size_t /*w*/) const {
    if (k % 2 != 0) throw std::invalid_argument("SecondHalf needs an even budget k (got " + std::to_string(k) + ")");
  }
};

/// P = 6, one query head: row r attends slot r only (rows 0..2, not scored), except row 3 (slot 1),
/// row 4 (slots 1 and 4, 0.5 each) and row 5 (slot 2). Scores of the scored rows: [0, 1.5, 1, 0, 0.5, 0].
std::vector<float> second_half_logits() {
  std::vector<float> x(36, kNegInf);
  for (std::size_t r = 0; r < 3; ++r) x[r * 6 + r] = 0.0f;
  x[3 * 6 + 1] = x[4 * 6 + 1] = x[4 * 6 + 4] = x[5 * 6 + 2] = 0.0f;
  return x;
}

// k = 4, w = 1: keeps 5 (recent), 0 (the sink), 1 and 2 (1.5, 1; not 4 at 0.5), and stores the raw
// scores of rows 3..5 (rows 0..2 would have added 1 to slots 0, 1, 2); the paged cache alike.
TEST(ScoreHooks, FirstScoredRowAndSelectionScoresOfACustomScore) {
  kvevict::CacheConfig c = config(4, 1, true);
  c.n_q_heads = 1;
  kvevict::KVBuffer<float> buf(1, 8, 1);
  auto kv = buf.view();
  kvevict::Cache<SecondHalfScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> cache(c, kv);
  const float zero = 0.0f;
  for (std::int64_t p = 0; p < 6; ++p) kv.append(p, &zero, &zero);
  const auto x = second_half_logits();
  cache.prefill(x.data(), 6);
  EXPECT_EQ(scored(cache, 0), (Scored{{0, 0.0f}, {1, 1.5f}, {2, 1.0f}, {5, 0.0f}}));

  std::vector<float> kp(8, 0.0f), vp(8, 0.0f);
  std::vector<std::int32_t> table(4, kvevict::kNoPage);
  std::vector<std::int64_t> pos(8, 0);
  std::size_t length = 0;
  kvevict::PagedKVView<float> view;
  view.k = kp.data();
  view.v = vp.data();
  view.num_pages = 4;
  view.page_size = 2;
  view.n_kv_heads = 1;
  view.head_dim = 1;
  view.page_table = table.data();
  view.max_pages = 4;
  view.length = &length;
  view.positions = pos.data();
  kvevict::PagePool pool(4);
  kvevict::PagedCache<SecondHalfScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> paged(
      c, kvevict::PagedEvictionConfig{}, view, pool);
  for (std::int64_t p = 0; p < 6; ++p) pool.append(view, p, &zero, &zero);
  paged.prefill(x.data(), 6);
  EXPECT_EQ(scored(paged, 0), (Scored{{0, 0.0f}, {1, 1.5f}, {2, 1.0f}, {5, 0.0f}}));
}

struct UnnamedWholePrompt : kvevict::AccumulatedAttentionScore {
  static constexpr const char* kWholePrompt = "needs every row";
};
struct TooLateScore : SecondHalfScore {
  static constexpr const char* kName = "TooLate";
  std::size_t first_scored_row(std::size_t prompt_len) const { return prompt_len; }
};

// validate_budget's message gets the cache's prefix (at construction, and at prefill for a ratio
// budget); kWholePrompt rejects chunks and bounded prefill in the score's words; first_scored_row(P)
// >= P is rejected before any state changes.
TEST(ScoreHooks, ErrorsNameTheScore) {
  kvevict::CacheConfig c = config(3, 1, false);
  c.n_q_heads = 1;
  kvevict::KVBuffer<float> buf(1, 8, 1);
  using Half = kvevict::Cache<SecondHalfScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
  EXPECT_EQ(message_of([&] { Half cache(c, buf.view()); }),
            "kvevict::Cache: SecondHalf needs an even budget k (got 3)");
  c.budget = kvevict::Budget::ratio(0.5);  // k = 3 for P = 6
  Half cache(c, buf.view());
  auto kv = buf.view();
  const float zero = 0.0f;
  for (std::int64_t p = 0; p < 6; ++p) kv.append(p, &zero, &zero);
  const auto x = second_half_logits();
  EXPECT_EQ(message_of([&] { cache.prefill(x.data(), 6); }),
            "kvevict::Cache::prefill: SecondHalf needs an even budget k (got 3)");
  EXPECT_EQ(message_of([&] { cache.prefill_chunk(x.data(), 6, 6); }),
            "kvevict::Cache::prefill_chunk: SecondHalf scores the second half of the prompt, unknown until the "
            "prompt ends; use prefill() with the whole prompt");
  EXPECT_EQ(cache.budget(), 0u);

  c.budget = kvevict::Budget::tokens(4);
  kvevict::KVBuffer<float> buf2(1, 8, 1);
  kvevict::Cache<UnnamedWholePrompt, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> unnamed(c,
                                                                                                         buf2.view());
  EXPECT_EQ(message_of([&] { unnamed.prefill_chunk(x.data(), 1, 1); }),
            "kvevict::Cache::prefill_chunk: this score policy needs every row, unknown until the prompt ends; use "
            "prefill() with the whole prompt");
  c.bounded_prefill = true;
  c.max_prefill_chunk = 2;
  EXPECT_EQ(message_of([&] { Half bounded(c, buf2.view()); }),
            "kvevict::Cache: bounded_prefill is not supported by SecondHalf (it scores the second half of the prompt)");

  c.bounded_prefill = false;
  kvevict::KVBuffer<float> buf3(1, 8, 1);
  kvevict::Cache<TooLateScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> late(c, buf3.view());
  auto kv3 = buf3.view();
  for (std::int64_t p = 0; p < 6; ++p) kv3.append(p, &zero, &zero);
  EXPECT_EQ(message_of([&] { late.prefill(x.data(), 6); }),
            "kvevict::Cache::prefill: TooLate's first_scored_row(6) = 6 must be < prompt_len = 6");
  EXPECT_EQ(late.budget(), 0u);
  EXPECT_EQ(late.scores(0)[1], 0.0f);
}

// ---- detection: each hook, and a mistyped or ill-combined one ----
struct NonConstFirstRow : SecondHalfScore {
  std::size_t first_scored_row(std::size_t prompt_len) { return prompt_len / 2; }
};
struct ThrowingSelectionScores : kvevict::AccumulatedAttentionScore {
  void selection_scores(const float*, std::size_t, float*) const {}
};
struct DoubleKeyScore : kvevict::NoScore {
  double key_score(const float*, std::size_t) const noexcept { return 1.0; }
};
struct KeyScoreWithLogits : KeySumScore {
  static constexpr bool kUsesLogits = true;
};
struct FirstRowWithoutWholePrompt : kvevict::AccumulatedAttentionScore {
  std::size_t first_scored_row(std::size_t) const { return 0; }
};
struct KeyScoreOnLastRow : KeySumScore {
  static constexpr bool kPrefillLastRow = true;
};
struct KeyScoreWithTemperature : KeySumScore {
  static constexpr bool kUsesTemperature = true;
};
struct FirstRowOnLastRow : SecondHalfScore {
  static constexpr bool kPrefillLastRow = true;
};
struct BoolValidateBudget : kvevict::NoScore {
  bool validate_budget(std::size_t, std::size_t) const { return true; }
};
struct NameNotAPointer : kvevict::NoScore {
  static constexpr int kName = 1;
};

// The anchor hooks (KeyDiffScore's): the three together, typed as documented, and only without logits.
struct AnchorAddOnly : kvevict::NoScore {
  void anchor_add(const float*, std::size_t, float*) const noexcept {}
};
struct AnchorScoreReturnsDouble : kvevict::NoScore {
  void anchor_add(const float*, std::size_t, float*) const noexcept {}
  void anchor_finish(float*, std::size_t, std::size_t) const noexcept {}
  double anchor_score(const float*, std::size_t, const float*) const noexcept { return 1.0; }
};
struct AnchorFinishThrows : kvevict::KeyDiffScore {
  void anchor_finish(float*, std::size_t, std::size_t) const {}
};
struct AnchorWithLogits : kvevict::KeyDiffScore {
  static constexpr bool kUsesLogits = true;
};
struct AnchorAndKeyScore : kvevict::KeyDiffScore {
  float key_score(const float*, std::size_t) const noexcept { return 1.0f; }
};
struct AnchorWithSelectionScores : kvevict::KeyDiffScore {
  void selection_scores(const float*, std::size_t, float*) const noexcept {}
};

TEST(ScoreHooks, AnchorHooksAreDetectedAndCombined) {
  namespace d = kvevict::detail;
  static_assert(d::has_anchor_score<kvevict::KeyDiffScore> && d::reads_keys<kvevict::KeyDiffScore> &&
                !d::declares_key_score<kvevict::KeyDiffScore>);
  static_assert(!d::declares_anchor_score<kvevict::KeyNormScore> && d::reads_keys<kvevict::KeyNormScore> &&
                !d::reads_keys<kvevict::AccumulatedAttentionScore>);
  EXPECT_TRUE(kvevict::is_score_policy<kvevict::KeyDiffScore>::value);
  static_assert(d::declares_anchor_score<AnchorAddOnly> && !d::has_anchor_score<AnchorAddOnly>);
  static_assert(d::declares_anchor_score<AnchorScoreReturnsDouble> && !d::has_anchor_score<AnchorScoreReturnsDouble>);
  static_assert(d::declares_anchor_score<AnchorFinishThrows> && !d::has_anchor_score<AnchorFinishThrows>);
  for (bool ok : {kvevict::is_score_policy<AnchorAddOnly>::value,
                  kvevict::is_score_policy<AnchorScoreReturnsDouble>::value,
                  kvevict::is_score_policy<AnchorFinishThrows>::value, kvevict::is_score_policy<AnchorWithLogits>::value,
                  kvevict::is_score_policy<AnchorAndKeyScore>::value,
                  kvevict::is_score_policy<AnchorWithSelectionScores>::value})
    EXPECT_FALSE(ok);
}

TEST(ScoreHooks, EachHookIsDetected) {
  namespace d = kvevict::detail;
  using kvevict::SnapKVScore;
  static_assert(d::has_name<SnapKVScore> && d::has_whole_prompt<SnapKVScore> &&
                d::has_first_scored_row<SnapKVScore> && d::has_selection_scores<SnapKVScore> &&
                d::has_validate_budget<SnapKVScore> && !d::declares_key_score<SnapKVScore>);
  static_assert(!d::declares_name<kvevict::GumbelLogitScore> && !d::declares_whole_prompt<kvevict::NoScore> &&
                !d::declares_first_scored_row<kvevict::CurrentAttentionScore> &&
                !d::declares_selection_scores<kvevict::AccumulatedAttentionScore> &&
                !d::declares_validate_budget<kvevict::NoScore> && !d::declares_key_score<kvevict::NoScore>);
  static_assert(d::has_key_score<KeySumScore> && !d::declares_first_scored_row<KeySumScore>);
  EXPECT_EQ(std::string(d::score_name<SnapKVScore>()), "SnapKV");
  EXPECT_EQ(std::string(d::score_name<KeySumScore>()), "this score policy");
  for (bool ok : {kvevict::is_score_policy<SnapKVScore>::value, kvevict::is_score_policy<KeySumScore>::value,
                  kvevict::is_score_policy<SecondHalfScore>::value,
                  kvevict::is_score_policy<UnnamedWholePrompt>::value})
    EXPECT_TRUE(ok);
  // Declared but not as documented: detected (declares_*), never silently ignored.
  static_assert(d::declares_first_scored_row<NonConstFirstRow> && !d::has_first_scored_row<NonConstFirstRow>);
  static_assert(d::declares_selection_scores<ThrowingSelectionScores> &&
                !d::has_selection_scores<ThrowingSelectionScores>);
  static_assert(d::declares_key_score<DoubleKeyScore> && !d::has_key_score<DoubleKeyScore>);
  static_assert(d::declares_validate_budget<BoolValidateBudget> && !d::has_validate_budget<BoolValidateBudget>);
  static_assert(d::declares_name<NameNotAPointer> && !d::has_name<NameNotAPointer>);
  for (bool ok : {kvevict::is_score_policy<NonConstFirstRow>::value,
                  kvevict::is_score_policy<ThrowingSelectionScores>::value,
                  kvevict::is_score_policy<DoubleKeyScore>::value, kvevict::is_score_policy<KeyScoreWithLogits>::value,
                  kvevict::is_score_policy<KeyScoreOnLastRow>::value,
                  kvevict::is_score_policy<KeyScoreWithTemperature>::value,
                  kvevict::is_score_policy<FirstRowWithoutWholePrompt>::value,
                  kvevict::is_score_policy<FirstRowOnLastRow>::value,
                  kvevict::is_score_policy<BoolValidateBudget>::value,
                  kvevict::is_score_policy<NameNotAPointer>::value})
    EXPECT_FALSE(ok);
}

}  // namespace

// ---- issue 37: -0.0 scores and unchecked selection scores ----

/// A key score: the key's first element (so a test can hand the cache any float, -0.0 included).
struct KeyFirstScore : KeySumScore {
  float key_score(const float* key, std::size_t) const noexcept { return key[0]; }
};

// k = 3, w = 0; prompt scores 1 2 3, then a token whose key score is -0.0 (or +0.0). The decode step's
// victim search ranks scores by their bits, where -0.0 (0x80000000) sorted above every positive float:
// the zero-scored token survived and position 0 (score 1) was evicted (kept 1 2 3). Both zeros now
// evict the new token, and the cache never stores a -0.0.
TEST(KeyScore, ANegativeZeroKeyScoreIsRankedAsZero) {
  for (float zero : {0.0f, -0.0f}) {
    SCOPED_TRACE(std::signbit(zero) ? "-0.0" : "+0.0");
    kvevict::KVBuffer<float> buf(1, 8, 1);
    auto kv = buf.view();
    kvevict::CacheConfig c = config(3, 0, false);
    c.n_q_heads = 1;
    kvevict::Cache<KeyFirstScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> cache(c, kv);
    const float keys[3] = {1.0f, 2.0f, 3.0f}, v = 0.0f;
    for (std::int64_t p = 0; p < 3; ++p) kv.append(p, &keys[p], &v);
    cache.prefill(nullptr, 3);
    kv.append(3, &zero, &v);
    cache.decode_step(nullptr, 4);
    EXPECT_EQ(cache.retained_positions(0), (Positions{0, 1, 2}));
    // A -0.0 at prefill is stored as +0.0 too.
    cache.reset();
    const float first[3] = {zero, 2.0f, 3.0f};
    for (std::int64_t p = 0; p < 3; ++p) kv.append(p, &first[p], &v);
    cache.prefill(nullptr, 3);
    EXPECT_FALSE(std::signbit(cache.scores(0)[0]));
  }
}

/// KeySumScore with a selection hook that writes NaN at slot 2 (`bad`), or -0.0 there (`negzero`).
struct BadSelectionScore : KeySumScore {
  static constexpr const char* kName = "BadSelection";
  bool negzero = false;
  void selection_scores(const float* s, std::size_t n, float* out) const noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = i != 2 ? s[i] : negzero ? -0.0f : std::nanf("");
  }
};
using BadSelectionCache = kvevict::Cache<BadSelectionScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;

// A NaN from selection_scores went unchecked: prefill_keep then kept k + 1 tokens (k = 4 kept 5, and
// every later step kept 5). Now each path that cuts throws before any state changes, naming the score,
// the KV head (or the summed heads) and the slot; the fixed score then gives k tokens.
TEST(ScoreHooks, ANonFiniteSelectionScoreThrowsAndChangesNothing) {
  for (bool shared : {false, true}) {
    kvevict::KVBuffer<float> buf(2, 10, 2);
    auto kv = buf.view();
    BadSelectionCache cache(config(3, 1, shared), kv, BadSelectionScore{});
    for (std::int64_t p = 0; p < 6; ++p) append_key(kv, p);
    EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 6); }),
              shared ? "kvevict::Cache::prefill: BadSelection's selection_scores of the summed KV heads, slot 2 is "
                       "nan (must be finite and >= 0)"
                     : "kvevict::Cache::prefill: BadSelection's selection_scores of KV head 0, slot 2 is nan (must "
                       "be finite and >= 0)");
    EXPECT_EQ(cache.budget(), 0u);
    EXPECT_EQ(kv.length(0), 6u);
    EXPECT_EQ(cache.scores(0)[0], 0.0f);
    // Chunked: finish_prefill cuts; bounded: the chunk that goes over k cuts.
    EXPECT_EQ(message_of([&] {
                cache.prefill_chunk(nullptr, 6, 6);
                cache.finish_prefill();
              }),
              std::string("kvevict::Cache::finish_prefill: BadSelection's selection_scores of ") +
                  (shared ? "the summed KV heads" : "KV head 0") + ", slot 2 is nan (must be finite and >= 0)");
    EXPECT_EQ(cache.budget(), 0u);
  }
  kvevict::KVBuffer<float> buf(2, 10, 2);
  auto kv = buf.view();
  kvevict::CacheConfig c = config(3, 1, false);
  c.bounded_prefill = true;
  c.max_prefill_chunk = 2;
  BadSelectionCache bounded(c, kv, BadSelectionScore{});
  for (std::int64_t p = 0; p < 2; ++p) append_key(kv, p);
  bounded.prefill_chunk(nullptr, 2, 2);
  for (std::int64_t p = 2; p < 4; ++p) append_key(kv, p);
  EXPECT_EQ(message_of([&] { bounded.prefill_chunk(nullptr, 2, 4); }),
            "kvevict::Cache::prefill_chunk: BadSelection's selection_scores of KV head 0, slot 2 is nan (must be "
            "finite and >= 0)");
  EXPECT_EQ(kv.length(0), 4u);
  // -0.0 passes and ranks as 0, not above every score (its bits): head 0 keeps 5 (recent), 4 and 0.
  kvevict::KVBuffer<float> buf2(2, 10, 2);
  auto kv2 = buf2.view();
  BadSelectionScore negzero;
  negzero.negzero = true;
  BadSelectionCache ok(config(3, 1, false), kv2, negzero);
  for (std::int64_t p = 0; p < 6; ++p) append_key(kv2, p);
  ok.prefill(nullptr, 6);
  EXPECT_EQ(ok.retained_positions(0), (Positions{0, 4, 5}));
}

TEST(ScoreHooks, PagedCacheChecksTheSelectionScoresOfItsTokenUnit) {
  PagedKeys s;
  kvevict::CacheConfig c = config(3, 1, true);
  kvevict::PagedCache<BadSelectionScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection> cache(
      c, kvevict::PagedEvictionConfig{}, s.view, s.pool, BadSelectionScore{});
  for (std::int64_t p = 0; p < 6; ++p) s.append(p);
  EXPECT_EQ(message_of([&] { cache.prefill(nullptr, 6); }),
            "kvevict::PagedCache::prefill: BadSelection's selection_scores of the summed KV heads, slot 2 is nan "
            "(must be finite and >= 0)");
  EXPECT_EQ(s.length, 6u);
  EXPECT_EQ(cache.budget(), 0u);
}
