// What a measurement is: the device that took it, its statistics, the
// conditions it was taken under and how the candidate ended. These types
// live on the lowest floor with the space, so that the store, the session
// and the devices share them without depending on one another.
//
// The conditions are the API's message (ktune.v1.Conditions): the worker
// fills them, the store keeps them as protobuf's JSON form and the daemon
// sends them as they are, so a field added to the message travels
// everywhere without another edit.
#ifndef KTUNE_TUNER_SPACE_MEASUREMENT_H_
#define KTUNE_TUNER_SPACE_MEASUREMENT_H_

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ktune/v1/job.pb.h"
#include "ktune/v1/results.pb.h"
#include "tuner/space/config.h"

namespace ktune {

using v1::LoadProfile;
using Millis = std::chrono::duration<double, std::milli>;

// A problem: its dimensions by name ("M" -> 4096).
using Problem = std::map<std::string, std::int64_t>;

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

// The q-quantile (0 <= q <= 1) of `sorted` (ascending, not empty), by linear
// interpolation between the neighbouring samples.
double Quantile(std::span<const double> sorted, double q);

// Statistics of `samples` (any order). Quartiles by linear interpolation;
// standard deviation with n - 1. Empty input gives all zeros.
TimeStats ComputeStats(std::vector<double> samples_ms);

// The standard error of the mean over the mean; infinite for fewer than two
// samples or a mean that is not positive.
double RelativeStandardError(std::span<const double> samples);

// How a measurement was taken: the API's message, used as it is.
using Conditions = v1::Conditions;

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

// The API's status for ours and back (UNSPECIFIED, or a value this build
// does not know, reads as launch_error: the candidate did not run).
v1::CandidateStatus CandidateStatusToProto(CandidateStatus status);
CandidateStatus CandidateStatusFromProto(v1::CandidateStatus status);

// measurement.rotate_inputs: read-only inputs get copies until together
// they span twice the L2 (at most 64 copies), never more than this many
// bytes beyond one copy plus the inputs' own size; inputs of at least this
// size are not copied (they already exceed twice any L2 up to 128 MiB).
inline constexpr std::int64_t kMaxRotationBytes = std::int64_t{256} << 20;
inline constexpr int kMaxRotationCopies = 64;

}  // namespace ktune

#endif  // KTUNE_TUNER_SPACE_MEASUREMENT_H_
