#include "tuner/device/recorded.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "tuner/device/simulated_device.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

const std::string kRecorded = std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/";

struct Best {
  std::string key;
  double time_ms = INFINITY;
};

Best BestOf(const RecordedSpace& rs) {
  absl::StatusOr<Space> space = rs.ToSpace();
  Best b;
  for (const RecordedEntry& e : rs.entries()) {
    if (e.measurement.ok() && e.measurement.time.count() < b.time_ms) {
      b.time_ms = e.measurement.time.count();
      b.key = space->Key(e.config);
    }
  }
  return b;
}

std::map<std::string, int> StatusCounts(const RecordedSpace& rs) {
  std::map<std::string, int> out;
  for (const RecordedEntry& e : rs.entries()) ++out[CandidateStatusName(e.measurement.status)];
  return out;
}

TEST(RecordedSpaceTest, ShippedPnpolyReplaysAsRecorded) {
  absl::StatusOr<RecordedSpace> rs =
      RecordedSpace::Load(kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz");
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_EQ(rs->format(), RecordedSpace::Format::kKernelTunerCache);
  EXPECT_EQ(rs->kernel_name(), "cn_pnpoly");
  EXPECT_EQ(rs->device_name(), "NVIDIA GeForce RTX 2080 Ti");
  EXPECT_EQ(rs->problem().at("problem_size_x"), 20000000);
  ASSERT_EQ(rs->params().size(), 4u);
  EXPECT_EQ(rs->params()[1].name, "block_size_x");
  EXPECT_EQ(rs->entries().size(), 4092u);
  EXPECT_EQ(StatusCounts(*rs), (std::map<std::string, int>{{"ok", 3722}, {"runtime_fault", 370}}));
  const Best b = BestOf(*rs);
  EXPECT_EQ(b.key, "0,128,20,2");
  EXPECT_DOUBLE_EQ(b.time_ms, 8.023776);
  EXPECT_FALSE(rs->repaired());
}

TEST(RecordedSpaceTest, KernelTunerAndT4FormsOfOneRecordingAgree) {
  absl::StatusOr<RecordedSpace> kt =
      RecordedSpace::Load(kRecorded + "convolution_milo_A100.json.gz");
  absl::StatusOr<RecordedSpace> t4 =
      RecordedSpace::Load(kRecorded + "convolution_milo_A100_T4.json.gz");
  ASSERT_TRUE(kt.ok()) << kt.status();
  ASSERT_TRUE(t4.ok()) << t4.status();
  EXPECT_EQ(t4->format(), RecordedSpace::Format::kT4);
  EXPECT_EQ(StatusCounts(*kt), (std::map<std::string, int>{
                                   {"ok", 4201}, {"runtime_fault", 155}, {"compile_error", 6}}));
  EXPECT_EQ(StatusCounts(*t4), StatusCounts(*kt));
  const Best b = BestOf(*kt);
  EXPECT_EQ(b.key, "32,4,1,3,1,0,1,1,15,15");
  EXPECT_DOUBLE_EQ(b.time_ms, 0.5536000076681375);  // a float32 value, as recorded
  absl::StatusOr<Space> kt_space = kt->ToSpace();
  absl::StatusOr<Space> t4_space = t4->ToSpace();
  ASSERT_TRUE(kt_space.ok() && t4_space.ok());
  int compared = 0;
  for (const RecordedEntry& e : kt->entries()) {
    const std::string key = kt_space->Key(e.config);
    const RecordedEntry* other = t4->Find(key);
    ASSERT_NE(other, nullptr) << key;
    EXPECT_EQ(other->measurement.status, e.measurement.status) << key;
    if (e.measurement.ok()) {
      EXPECT_EQ(other->measurement.time.count(), e.measurement.time.count()) << key;
    }
    ++compared;
  }
  EXPECT_EQ(compared, 4362);
  // Recorded costs are charged: compile plus benchmark plus framework.
  const RecordedEntry* first = kt->Find("16,1,1,1,0,0,0,1,15,15");
  ASSERT_NE(first, nullptr);
  EXPECT_GT(first->measurement.cost.count(), first->measurement.compile_time.count());
  EXPECT_EQ(first->measurement.stats.samples, 32);
}

constexpr char kSmallCache[] = R"({
"device_name": "Test GPU",
"kernel_name": "k",
"problem_size": [64, 32],
"tune_params_keys": ["bs", "t"],
"tune_params": {"bs": [32, 64], "t": [1, 2]},
"cache": {
"32,1": {"bs": 32, "t": 1, "time": 2.0, "times": [1.9, 2.0, 2.1], "compile_time": 10, "benchmark_time": 5},
"32,2": {"bs": 32, "t": 2, "time": "CompilationFailedConfig", "compile_time": 20},
"64,1": {"bs": 64, "t": 1, "time": 1.5, "times": [1.5, 1.5]},
)";

TEST(RecordedSpaceTest, RepairsAnUnclosedCache) {
  absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("open.json", kSmallCache);
  ASSERT_TRUE(rs.ok()) << rs.status();
  EXPECT_TRUE(rs->repaired());
  EXPECT_EQ(rs->entries().size(), 3u);
  EXPECT_EQ(rs->problem().at("problem_size_y"), 32);
  const RecordedEntry* e = rs->Find("32,1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->measurement.stats.samples, 3);
  EXPECT_DOUBLE_EQ(e->measurement.stats.median.count(), 2.0);
  EXPECT_DOUBLE_EQ(e->measurement.cost.count(), 15.0);
  EXPECT_EQ(rs->Find("32,2")->measurement.status, CandidateStatus::kCompileError);
  EXPECT_THAT(rs->Find("32,2")->measurement.message, HasSubstr("CompilationFailedConfig"));
  // A last line cut in the middle (a run killed while writing) is dropped.
  const std::string cut = std::string(kSmallCache) + "\"64,2\": {\"bs\": 64, \"t\": 2, \"ti";
  absl::StatusOr<RecordedSpace> partial = RecordedSpace::Parse("cut.json", cut);
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(partial->entries().size(), 3u);
}

// A replay ranks by the time the recording gives (Kernel Tuner's "time",
// the mean of its runs), not by the median of the recorded runs, which
// stays in the statistics: the docs say so (docs/measurement.md).
TEST(RecordedSpaceTest, AReplayRanksByTheRecordedTimeWithTheRunsMedianBeside) {
  const std::string cache = R"({"device_name": "Test GPU", "kernel_name": "k",
"tune_params_keys": ["bs"], "tune_params": {"bs": [32]},
"cache": {"32": {"bs": 32, "time": 2.0, "times": [1.0, 1.1, 3.9]}}})";
  absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("mean.json", cache);
  ASSERT_TRUE(rs.ok()) << rs.status();
  const Measurement& m = rs->Find("32")->measurement;
  EXPECT_DOUBLE_EQ(m.time.count(), 2.0);
  EXPECT_DOUBLE_EQ(m.stats.median.count(), 1.1);
  EXPECT_DOUBLE_EQ(m.stats.mean.count(), 2.0);
}

struct BadFile {
  std::string text;
  const char* message;
};

TEST(RecordedSpaceTest, MalformedFilesNameTheField) {
  const std::string head =
      R"({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]}, "cache": {)";
  const BadFile cases[] = {
      {"this is not json",
       "bad.json: not valid JSON: line 1, column 2: syntax error while parsing value - invalid "
       "literal"},
      {"[1, 2]", "expected a JSON object at the top level"},
      {"{\"x\": 1}", "neither a Kernel Tuner cache"},
      {R"({"tune_params": {}, "cache": {}})", "tune_params_keys: expected a non-empty array"},
      {R"({"tune_params_keys": ["a"], "tune_params": {}, "cache": {}})",
       "tune_params: no values for parameter 'a'"},
      {R"({"tune_params_keys": ["a"], "tune_params": {"a": [1, "x"]}, "cache": {}})",
       "values of mixed types"},
      {head + R"("1": {"a": 1, "time": "Exploded"}}})",
       "cache[\"1\"].time: unknown failure marker"},
      {head + R"("1": {"a": 1, "time": [1]}}})", "cache[\"1\"].time: expected a number"},
      {head + R"("3": {"a": 3, "time": 1.0}}})", "cache[\"3\"].a: missing or not one of"},
      {head + "}}", "no recorded configurations"},
      {R"({"results": [{"configuration": {"a": 1}, "invalidity": "maybe"}]})",
       "results[0].invalidity: unknown value"},
  };
  for (const BadFile& c : cases) {
    absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("bad.json", c.text);
    ASSERT_FALSE(rs.ok()) << c.message;
    EXPECT_EQ(rs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(rs.status().message()), HasSubstr(c.message));
  }
  absl::StatusOr<RecordedSpace> missing = RecordedSpace::Load("/nonexistent/x.json.gz");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(SimulatedDeviceTest, ReplaysAndRefusesForeignSpaces) {
  absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("small.json", kSmallCache);
  ASSERT_TRUE(rs.ok());
  SimulatedDevice device(std::make_shared<const RecordedSpace>(*std::move(rs)), "sim:small.json");
  EXPECT_TRUE(device.info().simulated);
  EXPECT_EQ(device.info().name, "Test GPU");
  EXPECT_EQ(device.info().uuid.rfind("sim-", 0), 0u);
  EXPECT_TRUE(device.replays_recorded_time());

  // The job's parameters in another order are fine.
  Parameter t{"t", ValueType::kInt, {Value(std::int64_t{1}), Value(std::int64_t{2})}};
  Parameter bs{"bs",
               ValueType::kInt,
               {Value(std::int64_t{32}), Value(std::int64_t{64}), Value(std::int64_t{128})}};
  absl::StatusOr<Space> space = Space::Product({t, bs}, {});
  ASSERT_TRUE(space.ok());
  JobBinding binding;
  binding.space = &*space;
  ASSERT_TRUE(device.Bind(binding).ok());
  absl::StatusOr<Measurement> m = device.Evaluate(*space->ParseKey("1,64"));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, CandidateStatus::kOk);
  EXPECT_DOUBLE_EQ(m->time.count(), 1.5);
  absl::StatusOr<Measurement> failed = device.Evaluate(*space->ParseKey("2,32"));
  EXPECT_EQ(failed->status, CandidateStatus::kCompileError);
  absl::StatusOr<Measurement> absent = device.Evaluate(*space->ParseKey("1,128"));
  EXPECT_EQ(absent->status, CandidateStatus::kLaunchError);
  EXPECT_THAT(absent->message, HasSubstr("not in the recording"));

  Parameter other{"u", ValueType::kInt, {Value(std::int64_t{1})}};
  absl::StatusOr<Space> foreign = Space::Product({bs, other}, {});
  binding.space = &*foreign;
  absl::Status s = device.Bind(binding);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("recorded but not in the job: t"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("in the job but not recorded: u"));

  // Recorded times were taken in isolation, without rotated inputs.
  v1::JobSpec spec;
  spec.mutable_measurement()->set_rotate_inputs(true);
  binding.space = &*space;
  binding.spec = &spec;
  s = device.Bind(binding);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("measurement.rotate_inputs"));
  spec.mutable_measurement()->mutable_load()->set_kind(v1::LoadProfile::UNDER_LOAD);
  spec.mutable_measurement()->set_rotate_inputs(false);
  s = device.Bind(binding);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("measuring under load needs a GPU"));
}

TEST(ComputeStatsTest, QuartilesMedianAndDeviation) {
  const TimeStats s = ComputeStats({4, 1, 3, 2, 5});
  EXPECT_EQ(s.samples, 5);
  EXPECT_DOUBLE_EQ(s.median.count(), 3);
  EXPECT_DOUBLE_EQ(s.q1.count(), 2);
  EXPECT_DOUBLE_EQ(s.q3.count(), 4);
  EXPECT_DOUBLE_EQ(s.min.count(), 1);
  EXPECT_DOUBLE_EQ(s.max.count(), 5);
  EXPECT_DOUBLE_EQ(s.mean.count(), 3);
  EXPECT_DOUBLE_EQ(s.stddev.count(), std::sqrt(2.5));
  EXPECT_EQ(ComputeStats({}).samples, 0);
}

}  // namespace
}  // namespace ktune
