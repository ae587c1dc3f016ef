// The GPU a measurement worker has open, shared by the parts of the worker
// (arguments, verification, canary, pipeline, sampling): the context, the
// launch and copy streams, the events samples are timed with, the side
// streams of concurrent instances and pipelines, and what the protocol
// needs to know about the device. Also how a candidate's measurement ends.
//
// Only the measurement worker process uses these. Not thread-safe.
#ifndef KTUNE_TUNER_MEASURE_WORKER_GPU_H_
#define KTUNE_TUNER_MEASURE_WORKER_GPU_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/measure/sampling_policy.h"

namespace ktune {

using WorkerClock = std::chrono::steady_clock;

// Concurrent instances and pipeline streams: at most this many streams.
inline constexpr int kMaxStreams = 32;

// "GPU-xxxxxxxx-...", as nvidia-smi writes it; empty if the driver cannot
// tell.
std::string DeviceUuid(const cuda::Api& api, CUdevice device);

struct WorkerGpu {
  explicit WorkerGpu(const cuda::Api& driver) : api(driver) {}

  absl::Status Check(CUresult rc, const char* call) const { return cuda::Check(api, rc, call); }

  // Opens GPU `ordinal`: its primary context, the device's attributes, the
  // launch and copy streams and the timing events. *name receives the
  // device's name.
  absl::Status Open(int ordinal, std::string* name);

  // Side streams for concurrent instances and pipelines: at least n.
  absl::Status EnsureStreams(int n);
  // Side streams [from, to) wait for `at`.
  CUresult Fork(CUevent at, int from, int to) const;
  // `into` waits for all work so far of side streams [from, to).
  CUresult Join(CUstream into, int from, int to) const;

  const cuda::Api& api;
  std::optional<cuda::Context> context;
  CUcontext cu_context = nullptr;
  int ordinal = -1;
  int l2_bytes = 0;
  int multiprocessors = 1;
  int max_shared_optin = 48 * 1024;
  std::string architecture;  // "sm_90"
  cuda::Stream stream;       // where candidates launch and are timed
  cuda::Stream copy_stream;  // uploads
  // Sample timing: one pair per sample of a chunk; the first launch's own.
  std::vector<cuda::Event> starts, ends;
  cuda::Event first_start, first_end;
  std::vector<cuda::Stream> side;
  std::vector<cuda::Event> joins;
  cuda::Event fork;
};

// The sampling settings and a candidate's part in them, from the protocol.
SamplingSettings SamplingSettingsOf(const v1::WorkerSettings& settings);
CandidateSampling CandidateSamplingOf(const v1::WorkerCandidate& candidate);

// How one candidate's measurement ends: its wall time stamped, a failed
// call classified (after a sticky error only a new process recovers).
struct CandidateEnding {
  const cuda::Api& api;
  v1::WorkerMeasurement& out;
  WorkerClock::time_point start;

  v1::WorkerMeasurement Finish();
  v1::WorkerMeasurement LaunchError(const std::string& message);
  v1::WorkerMeasurement Failed(CUresult rc, const char* call, bool launch);
  // Our own failure: start over in a fresh process, to be safe.
  v1::WorkerMeasurement Infra(const absl::Status& status);
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_WORKER_GPU_H_
