// The readers of recorded tuning spaces: Kernel Tuner cache files (also
// ones cut short) and T4 results files, then a replay's device bound to
// the recording's own space.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tuner/device/recorded.h"
#include "tuner/device/simulated_device.h"
#include "tuner/session/job.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("fuzz.json", text);
  if (!rs.ok()) return 0;
  auto shared = std::make_shared<const RecordedSpace>(*std::move(rs));
  absl::StatusOr<Job> job = JobForRecording(*shared, v1::JobSpec());
  if (!job.ok()) return 0;
  SimulatedDevice device(shared, "sim:fuzz.json");
  if (!device.Bind(BindingFor(*job)).ok()) return 0;
  Space::Enumerator it = job->space->Enumerate();
  Config c;
  for (int i = 0; i < 16 && it.Next(&c); ++i) (void)device.Evaluate(c);
  return 0;
}
