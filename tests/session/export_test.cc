// Exports in other tools' formats read back by ktune's own readers: every
// status as each format marks it, the times, the parameter order.
#include "tuner/session/export.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tuner/device/recorded.h"

namespace ktune {
namespace {

JobRecord MakeJob() {
  JobRecord j;
  j.id = "j1";
  j.kernel_name = "k";
  j.parameters = {"b", "t"};
  j.device.name = "Test GPU";
  j.problem = {{"N", 1024}};
  return j;
}

std::vector<StoredMeasurement> EveryStatus() {
  std::vector<StoredMeasurement> out;
  int seq = 0;
  for (int s = 0; s < kNumCandidateStatuses; ++s) {
    for (int t : {1, 2}) {
      StoredMeasurement m;
      m.sequence = seq++;
      m.key = std::to_string(32 << s) + "," + std::to_string(t);
      m.config_json = "{\"b\":" + std::to_string(32 << s) + ",\"t\":" + std::to_string(t) + "}";
      m.measurement.status = static_cast<CandidateStatus>(s);
      if (m.measurement.ok()) {
        m.measurement.time = Millis(0.5 * t);
        m.measurement.samples_ms = {0.5 * t, 0.51 * t};
      }
      m.measured_at = "2026-12-01T00:00:00Z";
      out.push_back(m);
    }
  }
  return out;
}

TEST(ExportTest, BothFormatsReadBackWithEveryStatus) {
  const JobRecord job = MakeJob();
  const std::vector<StoredMeasurement> ms = EveryStatus();
  for (ExportFormat format : {ExportFormat::kKernelTuner, ExportFormat::kT4}) {
    absl::StatusOr<std::string> text = ExportMeasurements(job, ms, format);
    ASSERT_TRUE(text.ok()) << text.status();
    absl::StatusOr<RecordedSpace> back = RecordedSpace::Parse("export.json", *text);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << *text;
    ASSERT_EQ(back->params().size(), 2u);
    EXPECT_EQ(back->params()[0].name, "b");
    EXPECT_EQ(back->params()[1].name, "t");
    ASSERT_EQ(back->entries().size(), ms.size());
    for (const StoredMeasurement& m : ms) {
      const RecordedEntry* e = back->Find(m.key);
      ASSERT_NE(e, nullptr) << m.key;
      CandidateStatus want = m.measurement.status;
      // T4 has no launch class: a launch error is one of its runtime ones.
      if (format == ExportFormat::kT4 && want == CandidateStatus::kLaunchError) {
        want = CandidateStatus::kRuntimeFault;
      }
      EXPECT_EQ(e->measurement.status, want) << m.key;
      if (m.measurement.ok()) {
        EXPECT_DOUBLE_EQ(e->measurement.time.count(), m.measurement.time.count());
      }
    }
    if (format == ExportFormat::kKernelTuner) {
      EXPECT_EQ(back->kernel_name(), "k");
      EXPECT_EQ(back->device_name(), "Test GPU");
      EXPECT_NE(text->find("\"time\": \"CompilationFailedConfig\""), std::string::npos);
      EXPECT_NE(text->find("\"time\": \"RuntimeFailedConfig\""), std::string::npos);
      EXPECT_NE(text->find("\"time\": \"InvalidConfig\""), std::string::npos);
    } else {
      EXPECT_NE(text->find("\"invalidity\": \"correctness\""), std::string::npos);
      EXPECT_NE(text->find("\"invalidity\": \"timeout\""), std::string::npos);
    }
  }
}

TEST(ExportTest, FormatsAreNamedAndAnUnreadableConfigurationIsRefused) {
  EXPECT_EQ(ParseExportFormat("kernel-tuner"), ExportFormat::kKernelTuner);
  EXPECT_EQ(ParseExportFormat("t4"), ExportFormat::kT4);
  EXPECT_FALSE(ParseExportFormat("csv").has_value());
  std::vector<StoredMeasurement> ms = EveryStatus();
  ms[3].config_json = "{not json";
  const absl::StatusOr<std::string> text =
      ExportMeasurements(MakeJob(), ms, ExportFormat::kKernelTuner);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ktune
