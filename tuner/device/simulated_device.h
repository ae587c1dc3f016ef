// A device that replays a recorded tuning space instead of running kernels:
// the recorded time is the measurement, recorded failures keep their status,
// and recorded compile and benchmark times are charged to time budgets.
#ifndef KTUNE_TUNER_DEVICE_SIMULATED_DEVICE_H_
#define KTUNE_TUNER_DEVICE_SIMULATED_DEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/device/device.h"
#include "tuner/device/recorded.h"

namespace ktune {

// Not thread-safe (one session drives it).
class SimulatedDevice final : public Device {
 public:
  // `locator` is how the user named it ("sim:FILE"), kept as the id.
  SimulatedDevice(std::shared_ptr<const RecordedSpace> recording, std::string locator);

  // Loads the recording at `path` and returns a device replaying it.
  static absl::StatusOr<std::unique_ptr<SimulatedDevice>> Open(const std::string& path);

  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override { return true; }
  // Binds a job whose parameters have the recording's names (in any
  // order). INVALID_ARGUMENT lists the names that differ.
  absl::Status Bind(const JobBinding& job) override;
  // Configurations absent from the recording end as launch_error with a
  // message saying so.
  absl::StatusOr<Measurement> Evaluate(const Config& config) override;

  const RecordedSpace& recording() const { return *recording_; }
  // The recording, to share with further devices replaying it.
  const std::shared_ptr<const RecordedSpace>& shared_recording() const { return recording_; }

  // Replays in real time, `speed` times faster than the recording took:
  // each Evaluate sleeps for the recorded cost / speed. 0 (the default)
  // answers at once. REQUIRES: speed >= 0.
  void set_speed(double speed) { speed_ = speed; }

 private:
  std::shared_ptr<const RecordedSpace> recording_;
  DeviceInfo info_;
  const Space* space_ = nullptr;
  // recording parameter i <- space parameter to_space_[i]
  std::vector<std::size_t> to_space_;
  double speed_ = 0;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_SIMULATED_DEVICE_H_
