// The Device interface: where candidates are evaluated.
//
// Implementations: SimulatedDevice (replays recorded measurements, here) and
// the CUDA device (compiles and times kernels on a GPU).
#ifndef KTUNE_TUNER_DEVICE_DEVICE_H_
#define KTUNE_TUNER_DEVICE_DEVICE_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

using Millis = std::chrono::duration<double, std::milli>;

// What a device is. Value type.
struct DeviceInfo {
  std::string id;            // how it was selected: "cuda:0", "sim:FILE"
  std::string name;          // as the driver reports it (recorded for sim)
  std::string architecture;  // "sm_90"; empty when unknown
  // Stable identity: the GPU UUID, or for a simulated device a hash of the
  // recorded file's contents.
  std::string uuid;
  std::int64_t memory_bytes = 0;
  std::string driver;
  int multiprocessors = 0;
  bool simulated = false;
};

// Kernel-time statistics over the timed samples.
struct TimeStats {
  Millis median{0}, mean{0}, min{0}, max{0}, q1{0}, q3{0}, stddev{0};
  int samples = 0;
};

// Statistics of `samples` (any order). Quartiles by linear interpolation;
// standard deviation with n - 1. Empty input gives all zeros.
TimeStats ComputeStats(std::vector<double> samples_ms);

// The full record of one evaluated candidate.
struct Measurement {
  CandidateStatus status = CandidateStatus::kOk;
  // The time ranked: the median of the samples, or for a replayed recording
  // the recorded time. NaN unless status is kOk.
  Millis time{std::numeric_limits<double>::quiet_NaN()};
  TimeStats stats;
  Millis compile_time{0};
  // Everything this candidate cost (compile, verification, benchmark).
  Millis cost{0};
  // Compiler log or error text.
  std::string message;

  bool ok() const { return status == CandidateStatus::kOk; }
};

// A device evaluates configurations of one bound space at a time. Not
// thread-safe: one session drives a device.
class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // True when measurements replay recorded times rather than measure: the
  // session then charges each measurement's recorded cost to its time
  // budget, so a replay behaves like the GPU it came from.
  virtual bool replays_recorded_time() const = 0;

  // Prepares to evaluate configurations of `space`. Errors
  // (INVALID_ARGUMENT) say why the device cannot serve this space.
  // `space` must outlive the binding.
  virtual absl::Status Bind(const Space& space) = 0;

  // Evaluates `config` of the bound space. A failing candidate is a
  // Measurement with its status, not an error; an error status means the
  // device itself failed.
  virtual absl::StatusOr<Measurement> Evaluate(const Config& config) = 0;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_DEVICE_H_
