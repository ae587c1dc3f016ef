// The parent's side of one GPU's measurement worker process: starts it
// (it opens the GPU ahead of any job), sets a job up on it, makes the job's
// reference, runs candidates under a watchdog, and replaces it when it
// dies, hangs, loses its CUDA context or answers out of step. A candidate
// whose worker failed ends as `timeout` or `runtime_fault` with the
// reason; the next one gets a fresh worker.
//
// Not thread-safe (one device drives it).
#ifndef KTUNE_TUNER_DEVICE_WORKER_CLIENT_H_
#define KTUNE_TUNER_DEVICE_WORKER_CLIENT_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/ipc/worker_protocol.h"
#include "tuner/space/measurement.h"

namespace ktune {

// Where the worker program is: a binary that runs RunCompileWorker for
// "__worker compile" and RunMeasureWorker for "__worker measure"
// (ktune-worker, or ktune and ktuned themselves: WorkerExecutable).
struct WorkerProgram {
  std::string path;
  std::vector<std::string> Argv(const std::string& kind) const {
    return {path, "__worker", kind, kWorkerProtocolFlag, WorkerProtocol()};
  }
};

class WorkerClient {
 public:
  // The candidate that makes the job's reference, once it can be made (its
  // image compiled): nullopt when the job has none. Called after every
  // start of a worker; errors fail the job.
  using ReferenceSource = std::function<absl::StatusOr<std::optional<v1::WorkerCandidate>>()>;

  WorkerClient(WorkerProgram program, int ordinal)
      : program_(std::move(program)), ordinal_(ordinal) {}

  // Starts a worker now (it opens the GPU, the slow part), without waiting.
  // With `running`, a measurement worker already started (one that listed
  // the GPUs, so the driver is loaded and initialised in it) is asked to
  // open the GPU instead of a new process: that saves a process start and
  // the driver's initialisation. Later restarts start new processes.
  absl::Status Start(std::optional<Subprocess> running = std::nullopt);
  // Waits until the worker has opened the GPU (and set up a bound job).
  absl::Status WaitUntilOpen();

  // A job: `setup` goes to the worker now (while the first candidates
  // compile), and to every worker started for this job after it.
  absl::Status Bind(const v1::WorkerSetup& setup, ReferenceSource reference);

  // Runs `candidate` and waits at most `budget` for its answer (`per_launch`
  // only names the limit in the message). The measurement, or nullopt when
  // the worker hung, died or answered out of step: it is then killed, and
  // *failure says how the candidate ended. Errors: the worker could not be
  // started or set up, or reported a failure of its own.
  absl::StatusOr<std::optional<v1::WorkerMeasurement>> Run(const v1::WorkerCandidate& candidate,
                                                           Millis budget, Millis per_launch,
                                                           Measurement* failure);

  // Workers started again for a job after one failed, over all jobs.
  // Readable from any thread.
  std::int64_t restarts() const { return restarts_.load(std::memory_order_relaxed); }
  // Time spent waiting for workers' set-up and references.
  Millis setup_wait() const { return setup_wait_; }

 private:
  absl::Status SendSetup();
  // A worker that is set up with the reference made: waits for a set-up
  // under way, or starts a fresh worker after a death.
  absl::Status EnsureReady();
  // Waits for the answers the worker owes (opening the GPU, the set-up).
  absl::Status AwaitOutstanding(const char* during);
  // Kills the worker; the next candidate gets a new one.
  std::string Drop();

  WorkerProgram program_;
  int ordinal_;
  std::optional<Subprocess> worker_;
  bool ready_ = false;   // set up, reference made
  int outstanding_ = 0;  // answers the worker still owes
  bool bound_ = false;
  int starts_ = 0;  // workers started for the bound job
  std::atomic<std::int64_t> restarts_{0};
  Millis setup_wait_{0};
  v1::WorkerSetup setup_;
  ReferenceSource reference_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_WORKER_CLIENT_H_
