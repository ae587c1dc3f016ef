// The Device interface: where candidates are evaluated.
//
// Implementations: SimulatedDevice (replays recorded measurements, here) and
// the CUDA device (compiles and times kernels on a GPU).
#ifndef KTUNE_TUNER_DEVICE_DEVICE_H_
#define KTUNE_TUNER_DEVICE_DEVICE_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

using v1::LoadProfile;
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

// How a measurement was taken.
struct Conditions {
  int sm_clock_mhz_before = 0;
  int sm_clock_mhz_after = 0;
  int throttled_samples_discarded = 0;
  int launches_per_sample = 0;  // > 1 for short kernels
  int input_copies = 0;         // > 1: read-only inputs rotated over copies
  bool raced = false;           // stopped early: clearly slower than the best
  bool final_round = false;     // re-measured among the final contenders
  int registers = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;
  Millis gpu_busy{0};  // timed GPU work (sum of the samples)
  // Load profiles (see ktune.v1.Conditions for the meaning of each).
  LoadProfile::Kind load = LoadProfile::ISOLATED;
  double canary_slowdown = 0;       // 0: not measured
  double link_canary_slowdown = 0;  // 0: not measured (no host copies in the load)
  double load_throughput = 0;
  std::map<std::string, double> load_rates;
  double throughput = 0;  // concurrent: instances/s; pipeline: bytes/s
  int instances = 0;
  int streams = 0;
  double h2d_ms = 0, kernel_ms = 0, d2h_ms = 0;  // pipeline stages, serial
  double overlap = 0;
  std::string device;  // the GPU that measured it, in a job over several
  // The toolchain (CUDA GPUs): the CUDA version of the driver's API and
  // NVRTC's version, e.g. "13.0".
  std::string driver;
  std::string nvrtc;
};

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
  Conditions conditions;
  // The timed samples (per launch), in the order taken; empty for
  // replayed recordings.
  std::vector<double> samples_ms;

  bool ok() const { return status == CandidateStatus::kOk; }
};

// measurement.rotate_inputs: read-only inputs get copies until together
// they span twice the L2 (at most 64 copies), never more than this many
// bytes beyond one copy plus the inputs' own size; inputs of at least this
// size are not copied (they already exceed twice any L2 up to 128 MiB).
inline constexpr std::int64_t kMaxRotationBytes = std::int64_t{256} << 20;
inline constexpr int kMaxRotationCopies = 64;

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
