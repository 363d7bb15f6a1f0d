// Compile-only cases for tests/CMakeLists.txt (contract_violation_N): each case instantiates
// Cache with a policy that breaks one rule of kvevict/concepts.hpp, and the test checks
// that the compiler's error is kvevict's static_assert message. Case 8 does the same with
// PagedCache, which checks the very same contracts; case 10 appends to a read-only KVView; cases 11-15
// declare an optional Score hook with the wrong signature or in a forbidden combination (15 on
// PagedCache). Case 0 is well-formed.
#include <kvevict/kvevict.hpp>

namespace {

struct NoUsesLogits {  // case 1: a score policy without kUsesLogits
  static constexpr bool kAccumulates = true, kUsesTemperature = false, kPrefillLastRow = false;
  bool noisy() const { return false; }
};
struct NoisyReturnsInt : kvevict::NoScore {  // case 2: noisy() mistyped
  int noisy() const { return 0; }
};
struct NoCallOperator {};  // case 3: a temperature schedule that is not callable
struct NoValidate {        // case 4
  std::size_t prefill_keep(const float*, std::size_t, std::size_t, std::size_t, std::size_t*) const noexcept { return 0; }
  std::size_t victim(const float*, const std::uint8_t*, const std::int64_t*, std::size_t) const noexcept { return 0; }
};
struct NoPrefillKeep {  // case 5
  void validate(std::size_t, std::size_t) const {}
  std::size_t victim(const float*, const std::uint8_t*, const std::int64_t*, std::size_t) const noexcept { return 0; }
};
struct ThrowingVictim {  // case 6: victim not noexcept
  void validate(std::size_t, std::size_t) const {}
  std::size_t prefill_keep(const float*, std::size_t, std::size_t, std::size_t, std::size_t*) const noexcept { return 0; }
  std::size_t victim(const float*, const std::uint8_t*, const std::int64_t*, std::size_t) const { return 0; }
};
struct OldVictimSignature {  // case 7: the window as a position threshold (the old, removed signature)
  void validate(std::size_t, std::size_t) const {}
  std::size_t prefill_keep(const float*, std::size_t, std::size_t, std::size_t, std::size_t*) const noexcept { return 0; }
  std::size_t victim(const float*, const std::int64_t*, std::size_t, std::int64_t) const noexcept { return 0; }
};
struct DoubleKeyScore : kvevict::NoScore {  // case 11: key_score returns double
  double key_score(const float*, std::size_t) const noexcept { return 1.0; }
};
struct ThrowingSelectionScores : kvevict::AccumulatedAttentionScore {  // case 12: selection_scores not noexcept
  void selection_scores(const float*, std::size_t, float*) const {}
};
struct KeyScoreWithLogits : kvevict::AccumulatedAttentionScore {  // case 13: a key score that reads logits
  float key_score(const float*, std::size_t) const noexcept { return 1.0f; }
};
struct KeyScoreWithTemperature : kvevict::NoScore {  // case 16: a key score divided by τ
  static constexpr bool kUsesTemperature = true;
  float key_score(const float*, std::size_t) const noexcept { return 1.0f; }
};
struct KeyScoreOnLastRow : kvevict::NoScore {  // case 17: a key score scoring the last prompt row only
  static constexpr bool kPrefillLastRow = true;
  float key_score(const float*, std::size_t) const noexcept { return 1.0f; }
};
struct FirstRowWithoutWholePrompt : kvevict::AccumulatedAttentionScore {  // case 14
  std::size_t first_scored_row(std::size_t) const { return 0; }
};
struct NonConstFirstRow : kvevict::AccumulatedAttentionScore {  // case 15: first_scored_row not const
  static constexpr const char* kWholePrompt = "scores the last row";
  std::size_t first_scored_row(std::size_t prompt_len) { return prompt_len - 1; }
};

#if KVEVICT_CONTRACT_CASE == 1
using C = kvevict::Cache<NoUsesLogits, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 2
using C = kvevict::Cache<NoisyReturnsInt, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 3
using C = kvevict::Cache<kvevict::NoScore, NoCallOperator, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 4
using C = kvevict::Cache<kvevict::NoScore, kvevict::ConstantTemperature, NoValidate>;
#elif KVEVICT_CONTRACT_CASE == 5
using C = kvevict::Cache<kvevict::NoScore, kvevict::ConstantTemperature, NoPrefillKeep>;
#elif KVEVICT_CONTRACT_CASE == 6
using C = kvevict::Cache<kvevict::NoScore, kvevict::ConstantTemperature, ThrowingVictim>;
#elif KVEVICT_CONTRACT_CASE == 7
using C = kvevict::Cache<kvevict::NoScore, kvevict::ConstantTemperature, OldVictimSignature>;
#elif KVEVICT_CONTRACT_CASE == 11
using C = kvevict::Cache<DoubleKeyScore, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 12
using C = kvevict::Cache<ThrowingSelectionScores, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 13
using C = kvevict::Cache<KeyScoreWithLogits, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 14
using C = kvevict::Cache<FirstRowWithoutWholePrompt, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 16
using C = kvevict::Cache<KeyScoreWithTemperature, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#elif KVEVICT_CONTRACT_CASE == 17
using C = kvevict::Cache<KeyScoreOnLastRow, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#else
using C = kvevict::H2O;
#endif
#if KVEVICT_CONTRACT_CASE == 8
using P = kvevict::PagedCache<kvevict::NoScore, kvevict::ConstantTemperature, ThrowingVictim>;
#elif KVEVICT_CONTRACT_CASE == 15
using P = kvevict::PagedCache<NonConstFirstRow, kvevict::ConstantTemperature, kvevict::RecentTopKSelection>;
#else
using P = kvevict::PagedH2O;
#endif

}  // namespace

std::size_t instantiate(kvevict::KVView<float> kv) {
  C cache(kvevict::CacheConfig{}, kv);
  return cache.budget();
}

std::size_t instantiate_paged(const kvevict::PagedKVView<float>& kv, kvevict::PagePool& pool) {
  P cache(kvevict::CacheConfig{}, kvevict::PagedEvictionConfig{}, kv, pool);
  return cache.budget();
}

// The page pool's release callback must be noexcept: a lambda that may throw does not compile.
kvevict::PagePool make_pool() {
#if KVEVICT_CONTRACT_CASE == 9
  return kvevict::PagePool(4, [] { return kvevict::kNoPage; }, [](std::int32_t) {});
#else
  return kvevict::PagePool(4, [] { return kvevict::kNoPage; }, [](std::int32_t) noexcept {});
#endif
}

// A read-only view cannot be appended to: `KVView<const T>::append` fails with kvevict's static_assert.
void append_to(kvevict::KVView<float> kv, const float* k_row, const float* v_row) {
#if KVEVICT_CONTRACT_CASE == 10
  kv.read_only().append(0, k_row, v_row);
#else
  kv.append(0, k_row, v_row);
#endif
}
