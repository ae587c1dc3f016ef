// What an under_load measurement sees of its load: a fixed short
// memory-bound kernel (the canary) timed on the idle GPU and again under
// the load shows the contention for memory and SMs; a fixed pinned copy to
// the GPU and back (the link canary) shows contention for the host link.
// The load itself (LoadRunner) runs for the whole measurement, and what it
// achieved is recorded with the candidate.
//
// Not thread-safe (the worker's one thread).
#ifndef KTUNE_TUNER_MEASURE_CANARY_H_
#define KTUNE_TUNER_MEASURE_CANARY_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/results.pb.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/measure/helper_kernels.h"
#include "tuner/measure/load.h"
#include "tuner/measure/worker_gpu.h"

namespace ktune {

class Canary {
 public:
  // `helpers` must be loaded before the canary is used.
  Canary(WorkerGpu& gpu, const HelperKernels& helpers) : gpu_(gpu), helpers_(helpers) {}

  // The canary's buffers (not all zeros) and events.
  absl::Status Init();
  // The canary kernel's median time (ms) on the launch stream, as things
  // stand.
  absl::StatusOr<double> KernelMs();
  // The link canary's median time (ms) on the launch stream.
  absl::StatusOr<double> LinkMs();

 private:
  // The median time (ms) of `work` on the launch stream: one untimed run,
  // then kRuns, each between events. `what` names it in errors.
  absl::StatusOr<double> TimeMedian(const std::function<CUresult(CUstream)>& work,
                                    const char* what);

  WorkerGpu& gpu_;
  const HelperKernels& helpers_;
  cuda::DeviceMemory memory_;
  std::vector<cuda::Event> events_;
  cuda::PinnedMemory link_host_;  // allocated with a load on the host link
};

// A load running for one candidate's measurement: stopped by Finish (which
// records what it achieved) or, on any other way out, by the destructor.
// Move-only.
class RunningLoad {
 public:
  explicit RunningLoad(LoadRunner* load) : load_(load) {}
  RunningLoad(RunningLoad&& o) noexcept : load_(std::exchange(o.load_, nullptr)) {}
  RunningLoad& operator=(RunningLoad&&) = delete;
  RunningLoad(const RunningLoad&) = delete;
  RunningLoad& operator=(const RunningLoad&) = delete;
  ~RunningLoad();

  // Stops the load and records its throughput and rates in `out`.
  absl::Status Finish(v1::Conditions& out);

 private:
  LoadRunner* load_;  // null: no load, or stopped
};

// UNDER_LOAD (`load` not null and not empty): times the canary (and, with
// host copies in the load, the link canary) on the idle GPU, starts the
// load, times them again under it and records the slowdowns in `out`.
// Otherwise a RunningLoad that does nothing.
absl::StatusOr<RunningLoad> StartLoad(LoadRunner* load, const v1::WorkerLoad& spec, Canary& canary,
                                      v1::Conditions& out);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_CANARY_H_
