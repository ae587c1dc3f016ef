// One tuning job through the pipeline that `ktune tune --local` and
// ktuned's scheduler share, from its spec to its stored result:
//
//   Plan  the job resolved (on a simulated device, a spec without a kernel
//         replays the recording) and its strategy's name and settings
//         checked; nothing is stored;
//   Bind  the job bound to its device (a GPU: the worker takes the
//         arguments and makes the reference); still nothing stored;
//   Run   the strategy rebuilt around a warm start from the store (when
//         the job asks and the store knows the kernel), then the session:
//         every measurement committed as it completes.
//
// Not thread-safe: one thread runs a job. Move-only.
#ifndef KTUNE_SERVER_RUNNER_JOB_RUN_H_
#define KTUNE_SERVER_RUNNER_JOB_RUN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "server/runner/runner.h"
#include "tuner/device/device.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {

// How a plan's errors name what was wrong.
struct PlanNames {
  std::string spec;      // prefixes the spec's errors ("sgemm.json: "); empty: none
  std::string strategy;  // names the strategy in its errors; empty: its field
                         // (strategy.name or strategy.options)
};

// How a run went.
struct JobRunResult {
  SessionResult session;
  std::string strategy;              // what "auto" became (after any warm start)
  std::int64_t warm_jobs = 0;        // earlier jobs the warm start read
  std::size_t warm_configurations = 0;
};

class JobRun {
 public:
  // Resolves `spec` (relative paths from `base_dir`). `device`, when known
  // (a GPU job's may be opened only when it runs), is what a spec without
  // a kernel replays. INVALID_ARGUMENT names the field: the spec's, or
  // the strategy's, as `names` says.
  static absl::StatusOr<JobRun> Plan(const v1::JobSpec& spec, const std::string& base_dir,
                                     const Device* device, const PlanNames& names = {});

  JobRun(JobRun&&) noexcept = default;
  JobRun& operator=(JobRun&&) noexcept = default;

  const Job& job() const { return *job_; }
  // The strategy as planned: "auto" resolved without a warm start.
  const std::string& strategy() const { return planned_strategy_; }
  // The job's id on a device like `device`.
  std::string IdOn(const DeviceInfo& device) const { return ComputeJobId(*job_, device); }

  // Runs the job under `id` whatever the device (a fleet's job taken over
  // on another GPU of its model keeps its id).
  void KeepJobId(std::string id) { kept_id_ = std::move(id); }

  // Binds the job to `device`, which Run must then be given. Errors say why
  // the device cannot run the job (INVALID_ARGUMENT for the spec's part).
  absl::Status Bind(Device& device);

  // Runs the job on `device` (bound here if Bind was not called), storing
  // into `store`. `on_start` (optional) hears the strategy and any warm
  // start just before the first candidate. Infrastructure failures are
  // errors; the job is then marked failed when the store still works.
  absl::StatusOr<JobRunResult> Run(
      Device& device, Store& store, const SessionOptions& options,
      const std::function<void(const JobRunResult&)>& on_start = nullptr);

 private:
  JobRun() = default;
  absl::Status EnsureSession(Device& device);

  // Held by pointer: the session keeps references to the job and strategy.
  std::unique_ptr<Job> job_;
  std::string planned_strategy_;
  std::unique_ptr<BuiltStrategy> strategy_;
  std::unique_ptr<Session> session_;
  Device* bound_ = nullptr;
  std::string kept_id_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_RUNNER_JOB_RUN_H_
