#include "tuner/space/value.h"

#include <gtest/gtest.h>

#include <limits>

namespace ktune {
namespace {

TEST(ValueTest, FloatsFormatLikePythonRepr) {
  const struct {
    double v;
    const char* want;
  } cases[] = {
      {1.0, "1.0"},
      {0.1, "0.1"},
      {-2.0, "-2.0"},
      {1.5, "1.5"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {0.00005, "5e-05"},
      {123.456, "123.456"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {1.5e16, "1.5e+16"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {1e100, "1e+100"},
      {2.5e-300, "2.5e-300"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& c : cases) EXPECT_EQ(PythonFloatRepr(c.v), c.want) << c.want;
}

TEST(ValueTest, KeysFormatLikeKernelTuner) {
  EXPECT_EQ(FormatValue(Value(std::int64_t{128})), "128");
  EXPECT_EQ(FormatValue(Value(std::int64_t{-3})), "-3");
  EXPECT_EQ(FormatValue(Value(2.0)), "2.0");
  EXPECT_EQ(FormatValue(Value(true)), "True");
  EXPECT_EQ(FormatValue(Value(false)), "False");
  EXPECT_EQ(FormatValue(Value(std::string("fast"))), "fast");
  EXPECT_EQ(TypeOf(Value(1.0)), ValueType::kFloat);
  EXPECT_EQ(ValueToJson(Value(std::int64_t{7})).Dump(), "7");
}

}  // namespace
}  // namespace ktune
