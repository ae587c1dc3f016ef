// The measurement worker's GPU side: one open GPU, one job's arguments at a
// time, and the benchmark protocol for each candidate (see
// measure_worker.h for the protocol; the parts live beside this file:
// buffers, verification, canary and load, pipeline, clock sampling, the
// sampling policy).
//
// Not thread-safe; not movable (its parts hold references to each other).
#ifndef KTUNE_TUNER_MEASURE_WORKER_H_
#define KTUNE_TUNER_MEASURE_WORKER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/cuda/nvml.h"
#include "tuner/measure/buffers.h"
#include "tuner/measure/canary.h"
#include "tuner/measure/clock_sampler.h"
#include "tuner/measure/helper_kernels.h"
#include "tuner/measure/load.h"
#include "tuner/measure/pipeline.h"
#include "tuner/measure/verification.h"
#include "tuner/measure/worker_gpu.h"

namespace ktune {

class Worker {
 public:
  explicit Worker(const cuda::Api& api)
      : gpu_(api),
        buffers_(gpu_, helpers_),
        verifier_(gpu_, helpers_, buffers_),
        canary_(gpu_, helpers_),
        pipeline_(gpu_) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Opens the GPU: context, helper kernels, streams, events, clock sampler.
  absl::Status Init(int ordinal, std::string* device_name);
  // A job's arguments and settings (replacing the previous job's).
  absl::Status Setup(const v1::WorkerSetup& setup);
  int ordinal() const { return gpu_.ordinal; }
  // Runs the protocol for one candidate. Never fails: how the candidate
  // ended is in the measurement (context_lost: the process must end).
  v1::WorkerMeasurement Measure(const v1::WorkerCandidate& candidate);

 private:
  // A candidate's kernel, ready to launch: its arguments in place.
  // Neither copyable nor movable (params point into the vectors).
  struct Launch {
    Launch() = default;
    Launch(const Launch&) = delete;
    Launch& operator=(const Launch&) = delete;
    CUfunction function = nullptr;
    unsigned shared_bytes = 0;
    std::vector<CUdeviceptr> pointers;
    std::vector<std::string> scalars;
    std::vector<void*> params;
  };

  // The busy warm-up (see NextWarmUpSliceMs); how long it spun, in ms.
  absl::StatusOr<double> WarmUp();
  // Loads the candidate's image and checks its launch against the kernel's
  // limits; fills *launch (function, shared memory). A measurement when the
  // candidate ends here.
  std::optional<v1::WorkerMeasurement> Load(const v1::WorkerCandidate& c, cuda::Module* module,
                                            Launch* launch, CandidateEnding& end);
  // The kernel's arguments (buffers and the candidate's scalars).
  absl::Status Bind(const v1::WorkerCandidate& c, Launch* launch);
  // The untimed first launch, which is also the verification run (or, for
  // the reference, the run kept). A measurement when the candidate ends
  // here; otherwise *first_ms.
  std::optional<v1::WorkerMeasurement> FirstLaunch(const v1::WorkerCandidate& c,
                                                   const Launch& launch, CandidateEnding& end,
                                                   float* first_ms);
  // Warm-up, batching, the load, and the timed samples.
  v1::WorkerMeasurement Sample(const v1::WorkerCandidate& c, Launch& launch, float first_ms,
                               CandidateEnding& end);
  CUresult LaunchOnce(const v1::WorkerCandidate& c, const Launch& launch, CUstream s) const;
  // The candidate's energy per launch and power (measurement.energy), into
  // `cond`, from the timed `samples` (per launch) and a window of it
  // running back to back.
  absl::Status MeasureEnergyOf(const v1::WorkerCandidate& c, const Launch& launch,
                               std::vector<double> samples, v1::Conditions& cond);
  // CONCURRENT: the candidate's instances over its streams, forked from and
  // joined back to `s`.
  CUresult LaunchConcurrent(const v1::WorkerCandidate& c, const Launch& launch, CUstream s) const;

  WorkerGpu gpu_;
  HelperKernels helpers_;
  Nvml nvml_;  // unavailable without NVML
  ClockSampler clocks_;
  int max_clock_mhz_ = 0;  // the SM clock's highest, from NVML; 0: unknown
  ArgumentBuffers buffers_;
  Verifier verifier_;
  Canary canary_;
  PipelineRunner pipeline_;
  std::unique_ptr<LoadRunner> load_;  // under_load jobs
  v1::WorkerSetup setup_;             // without its buffers (they hold their own)
  cuda::DeviceMemory flush_;          // twice the L2, written between samples
  std::uint32_t flush_counter_ = 0;
  // When a candidate's samples last kept the GPU busy.
  WorkerClock::time_point last_activity_{};
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_WORKER_H_
