// The Device interface: where candidates are evaluated.
//
// Implementations: SimulatedDevice (replays recorded measurements, here) and
// the CUDA device (compiles and times kernels on a GPU).
#ifndef KTUNE_TUNER_DEVICE_DEVICE_H_
#define KTUNE_TUNER_DEVICE_DEVICE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "tuner/space/config.h"
#include "tuner/space/measurement.h"
#include "tuner/space/space.h"

namespace ktune {

// What a device needs to know about a job. The pointers must outlive the
// binding.
struct JobBinding {
  const Space* space = nullptr;
  // The job file's spec; null for a job over a recorded space.
  const v1::JobSpec* spec = nullptr;
  std::string source;  // kernel source text
  std::map<std::string, std::int64_t> problem;
  std::string base_dir;  // for relative paths in the spec
};

// A device evaluates configurations of one bound job at a time. Not
// thread-safe: one session drives a device.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // True when measurements replay recorded times rather than measure: the
  // session then charges each measurement's recorded cost to its time
  // budget, so a replay behaves like the GPU it came from.
  virtual bool replays_recorded_time() const = 0;

  // Prepares to evaluate configurations of the job. Errors
  // (INVALID_ARGUMENT) say why the device cannot serve it.
  virtual absl::Status Bind(const JobBinding& job) = 0;

  // Evaluates `config` of the bound job. A failing candidate is a
  // Measurement with its status, not an error; an error status means the
  // device itself failed.
  virtual absl::StatusOr<Measurement> Evaluate(const Config& config) = 0;

  // How many configurations the session should keep asked ahead, so that
  // their preparation (compilation) overlaps measurement.
  virtual int pipeline_depth() const { return 1; }
  // A hint: these configurations will be evaluated soon.
  virtual void Prefetch(const std::vector<Config>& configs) { (void)configs; }
  // A hint: these prefetched configurations will not be evaluated here
  // after all (another device took them); drop what was prepared.
  virtual void Forget(const std::vector<Config>& configs) { (void)configs; }
  // True when Evaluate(config) would return at once: its measurement is
  // already done (a job spread over several GPUs measures ahead).
  virtual bool Ready(const Config& config) {
    (void)config;
    return false;
  }
  // A hint: another device measuring the same job (one job over several
  // GPUs) has seen this best time; racing can use it.
  virtual void NoteBest(Millis time) { (void)time; }

  // How many times the device's worker process was restarted (a
  // candidate crashed or hung it) since it opened; 0 for devices without
  // one.
  virtual std::int64_t worker_restarts() const { return 0; }

  // Re-measures the final contenders interleaved, for a fair last
  // comparison. Devices that replay recorded times cannot.
  virtual bool can_remeasure() const { return false; }
  virtual absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) {
    (void)configs;
    return absl::UnimplementedError("this device cannot re-measure");
  }
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_DEVICE_H_
