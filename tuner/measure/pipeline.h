// A pipeline job's measurement: the kernel runs over a host array split
// into chunks, each chunk copied in, processed and copied out on one of
// `streams` streams, from pinned or pageable host memory. A sample is one
// whole pass, end to end; the stages are also timed one after another on
// one stream, which is what overlap saves. The first pass runs on a
// poisoned output and is verified against the reference on the host.
//
// Not thread-safe (the worker's one thread).
#ifndef KTUNE_TUNER_MEASURE_PIPELINE_H_
#define KTUNE_TUNER_MEASURE_PIPELINE_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/measure/canary.h"
#include "tuner/measure/clock_sampler.h"
#include "tuner/measure/worker_gpu.h"

namespace ktune {

class PipelineRunner {
 public:
  explicit PipelineRunner(WorkerGpu& gpu) : gpu_(gpu) {}

  // A pipeline job: its host arrays (kept while the size stays) and input.
  absl::Status Setup(const v1::WorkerPipeline& pipeline);
  // Any other job: no reference.
  void Clear() { reference_.clear(); }

  // What a pipeline measurement uses of the worker.
  struct Tools {
    const v1::WorkerSettings& settings;
    const ClockSampler& clocks;
    // Starts the job's load (UNDER_LOAD), recording its canaries.
    std::function<absl::StatusOr<RunningLoad>(v1::Conditions&)> start_load;
  };

  // Measures candidate `c`, kernel `f` with `shared` bytes of dynamic
  // shared memory; `end` says how it ends.
  v1::WorkerMeasurement Measure(const v1::WorkerCandidate& c, CUfunction f, unsigned shared,
                                const Tools& tools, CandidateEnding& end);

 private:
  // One pass; `stage` < 0: all stages over the candidate's streams, else
  // only that stage (0 copy in, 1 kernel, 2 copy out) on one stream. Timed
  // between `begin` and `end` on the first stream.
  CUresult Run(CUfunction f, const v1::WorkerCandidate& c, unsigned shared, int stage,
               CUevent begin, CUevent end) const;
  // The first pass on a poisoned output: kept as the reference, or
  // verified. Sets *first_ms; a measurement when the candidate ends here.
  std::optional<v1::WorkerMeasurement> FirstPass(const v1::WorkerCandidate& c, CUfunction f,
                                                 unsigned shared, const Tools& tools,
                                                 CandidateEnding& end, float* first_ms);

  WorkerGpu& gpu_;
  v1::WorkerPipeline spec_;
  std::size_t bytes_ = 0;  // the host array
  cuda::PinnedMemory pinned_in_, pinned_out_;
  std::unique_ptr<char[]> pageable_in_, pageable_out_;
  cuda::DeviceMemory device_;  // per stream: a chunk in, a chunk out
  std::vector<char> reference_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_PIPELINE_H_
