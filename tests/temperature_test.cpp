// Tests of the temperature schedules (Keyformer §3.4).
#include <cmath>
#include <limits>
#include <stdexcept>

#include <gtest/gtest.h>

#include <kvevict/temperature/temperature_schedules.hpp>

namespace {

TEST(LinearTemperature, PaperScheduleRisesFromOneToTwoAndHolds) {
  const kvevict::LinearTemperature tau(1.0f, 2.0f, 4);
  EXPECT_FLOAT_EQ(tau(0), 1.0f);  // prefill
  EXPECT_FLOAT_EQ(tau(1), 1.25f);
  EXPECT_FLOAT_EQ(tau(2), 1.5f);
  EXPECT_FLOAT_EQ(tau(3), 1.75f);
  EXPECT_FLOAT_EQ(tau(4), 2.0f);
  EXPECT_FLOAT_EQ(tau(5), 2.0f);   // held at tau_end after T
  EXPECT_FLOAT_EQ(tau(1000), 2.0f);
}

TEST(LinearTemperature, MayDecrease) {
  const kvevict::LinearTemperature tau(2.0f, 1.0f, 2);
  EXPECT_FLOAT_EQ(tau(1), 1.5f);
  EXPECT_FLOAT_EQ(tau(9), 1.0f);
}

TEST(ConstantAndIncrementTemperature, Values) {
  EXPECT_FLOAT_EQ(kvevict::ConstantTemperature(1.5f)(0), 1.5f);
  EXPECT_FLOAT_EQ(kvevict::ConstantTemperature(1.5f)(77), 1.5f);
  const kvevict::IncrementTemperature inc(1.0f, 0.125f);
  EXPECT_FLOAT_EQ(inc(0), 1.0f);
  EXPECT_FLOAT_EQ(inc(8), 2.0f);
  EXPECT_FLOAT_EQ(inc(16), 3.0f);  // no cap: that is the linear schedule's job
}

TEST(Temperature, InvalidValuesThrowNamingTheArgument) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THROW(kvevict::ConstantTemperature(0.0f), std::invalid_argument);
  EXPECT_THROW(kvevict::ConstantTemperature(-1.0f), std::invalid_argument);
  EXPECT_THROW(kvevict::ConstantTemperature(std::nanf("")), std::invalid_argument);
  EXPECT_THROW(kvevict::LinearTemperature(1.0f, inf, 8), std::invalid_argument);
  EXPECT_THROW(kvevict::LinearTemperature(1.0f, 2.0f, 0), std::invalid_argument);
  EXPECT_THROW(kvevict::IncrementTemperature(1.0f, std::nanf("")), std::invalid_argument);
  try {
    kvevict::LinearTemperature(0.0f, 2.0f, 8);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kvevict::LinearTemperature: tau_init must be finite and >= 1.17549435e-38 (FLT_MIN, so that 1/tau_init is "
                 "finite) (got 0)");
  }
}

}  // namespace
