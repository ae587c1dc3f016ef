// How the store writes what is not a plain column: conditions, samples,
// problems.
#include "tuner/store/codecs.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/reflection.h"

namespace ktune {
namespace {

TEST(CodecsTest, TheReflectionFillerReachesEveryField) {
  v1::MeasurementRecord m;
  testing::FillEveryField(m);
  std::vector<const google::protobuf::FieldDescriptor*> set;
  m.GetReflection()->ListFields(m, &set);
  EXPECT_EQ(static_cast<int>(set.size()), m.GetDescriptor()->field_count());
  std::vector<const google::protobuf::FieldDescriptor*> conditions;
  m.conditions().GetReflection()->ListFields(m.conditions(), &conditions);
  EXPECT_EQ(static_cast<int>(conditions.size()), m.conditions().GetDescriptor()->field_count());
}

TEST(CodecsTest, EveryFieldOfTheConditionsRoundTrips) {
  Conditions c;
  testing::FillEveryField(c);
  absl::StatusOr<Conditions> back = ConditionsFromJson(ConditionsToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, c));
}

TEST(CodecsTest, TheConditionsAreWrittenByTheirFieldNames) {
  // The store's text is protobuf's JSON with the .proto's names: what
  // earlier releases wrote reads back.
  absl::StatusOr<Conditions> old = ConditionsFromJson(
      R"({"sm_clock_mhz_before":1980,"raced":true,"gpu_busy_ms":12.5,"load":"UNDER_LOAD",)"
      R"("load_rates":{"h2d_gbs":26.8},"device":"cuda:1"})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->sm_clock_mhz_before(), 1980);
  EXPECT_TRUE(old->raced());
  EXPECT_DOUBLE_EQ(old->gpu_busy_ms(), 12.5);
  EXPECT_EQ(old->load(), v1::LoadProfile::UNDER_LOAD);
  EXPECT_DOUBLE_EQ(old->load_rates().at("h2d_gbs"), 26.8);
  EXPECT_EQ(old->device(), "cuda:1");
  EXPECT_EQ(ConditionsToJson(*old).find("smClock"), std::string::npos);
  EXPECT_EQ(ConditionsToJson(Conditions()), "{}");  // only what was measured
  // Damaged text is refused, not read as zeros.
  EXPECT_EQ(ConditionsFromJson(R"({"raced": "maybe"})").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ConditionsFromJson("[1, 2]").status().code(), absl::StatusCode::kDataLoss);
}

TEST(CodecsTest, SamplesAndProblems) {
  EXPECT_EQ(*SamplesFromJson(SamplesToJson({1.5, 0.25})), (std::vector<double>{1.5, 0.25}));
  EXPECT_EQ(SamplesFromJson("{}").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ProblemToJson({{"N", 3}, {"M", 2}}), R"({"M":2,"N":3})");
  EXPECT_EQ(ProblemToJson({}), "{}");
  EXPECT_EQ(ProblemFromJson(R"({"N":3})")->at("N"), 3);
  EXPECT_EQ(ProblemFromJson("[[[").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ProblemFromJson(R"({"N":1.5})").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ktune
