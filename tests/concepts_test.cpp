// The policy contracts of kvevict/concepts.hpp as traits: every built-in policy satisfies
// its contract, and each kind of breach is detected (the static_assert messages are checked
// by the compile-only contract_violation_* tests).
#include <cstddef>
#include <cstdint>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace {

struct MissingNoisy {
  static constexpr bool kUsesLogits = true, kAccumulates = true, kUsesTemperature = true, kPrefillLastRow = false;
};
struct FlagNotBool : kvevict::NoScore {
  static constexpr int kAccumulates = 1;
};
struct VictimNotNoexcept {
  void validate(std::size_t, std::size_t) const {}
  std::size_t prefill_keep(const float*, std::size_t, std::size_t, std::size_t, std::size_t*) const noexcept { return 0; }
  std::size_t victim(const float*, const std::uint8_t*, const std::int64_t*, std::size_t) const { return 0; }
};
struct PrefillKeepNotConst {
  void validate(std::size_t, std::size_t) const {}
  std::size_t prefill_keep(const float*, std::size_t, std::size_t, std::size_t, std::size_t*) noexcept { return 0; }
  std::size_t victim(const float*, const std::uint8_t*, const std::int64_t*, std::size_t) const noexcept { return 0; }
};
struct DoubleSchedule {
  double operator()(std::size_t t) const { return 1.0 + static_cast<double>(t); }
};

TEST(Concepts, BuiltInPoliciesSatisfyTheirContracts) {
  static_assert(kvevict::is_score_policy<kvevict::GumbelLogitScore>::value);
  static_assert(kvevict::is_score_policy<kvevict::AccumulatedAttentionScore>::value);
  static_assert(kvevict::is_score_policy<kvevict::CurrentAttentionScore>::value);
  static_assert(kvevict::is_score_policy<kvevict::NoScore>::value);
  static_assert(kvevict::is_temperature_schedule<kvevict::LinearTemperature>::value);
  static_assert(kvevict::is_temperature_schedule<kvevict::ConstantTemperature>::value);
  static_assert(kvevict::is_temperature_schedule<kvevict::IncrementTemperature>::value);
  static_assert(kvevict::is_selection_policy<kvevict::RecentTopKSelection>::value);
  static_assert(kvevict::is_selection_policy<kvevict::SinkRecentSelection>::value);
  EXPECT_TRUE(kvevict::is_selection_policy<kvevict::SinkRecentSelection>::value);
}

TEST(Concepts, EachBreachIsDetected) {
  EXPECT_FALSE(kvevict::is_score_policy<MissingNoisy>::value);
  EXPECT_FALSE(kvevict::is_score_policy<FlagNotBool>::value);
  EXPECT_FALSE(kvevict::is_score_policy<int>::value);
  EXPECT_FALSE(kvevict::is_selection_policy<VictimNotNoexcept>::value);
  EXPECT_FALSE(kvevict::is_selection_policy<PrefillKeepNotConst>::value);
  EXPECT_FALSE(kvevict::is_selection_policy<kvevict::NoScore>::value);
  EXPECT_FALSE(kvevict::is_temperature_schedule<kvevict::NoScore>::value);
  // A schedule may return any type convertible to float.
  EXPECT_TRUE(kvevict::is_temperature_schedule<DoubleSchedule>::value);
}

}  // namespace
