#include "server/runner/job_run.h"

#include <utility>

#include "absl/status/status.h"
#include "strategies/registry.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {

absl::StatusOr<JobRun> JobRun::Plan(const v1::JobSpec& spec, const std::string& base_dir,
                                    const Device* device, const PlanNames& names) {
  absl::StatusOr<Job> job = device != nullptr
                                ? ResolveJobOn(spec, base_dir, *device)
                                : (spec.has_kernel()
                                       ? ResolveJob(spec, base_dir)
                                       : absl::StatusOr<Job>(absl::InvalidArgumentError(
                                             "kernel: a GPU tunes a kernel given by the job "
                                             "spec")));
  if (!job.ok()) {
    if (names.spec.empty()) return job.status();
    return absl::Status(job.status().code(), StrCat(names.spec, ": ", job.status().message()));
  }
  JobRun run;
  run.job_ = std::make_unique<Job>(*std::move(job));
  // The strategy's name and settings are checked now; it is built again,
  // around a warm start, when the job runs.
  absl::StatusOr<BuiltStrategy> built = BuildStrategy(*run.job_, nullptr, "");
  if (!built.ok()) {
    const std::string field = !names.strategy.empty()
                                  ? names.strategy
                                  : StrategyErrorField(run.job_->spec.strategy().name());
    return absl::InvalidArgumentError(StrCat(field, ": ", built.status().message()));
  }
  run.planned_strategy_ = built->resolved;
  run.strategy_ = std::make_unique<BuiltStrategy>(*std::move(built));
  return run;
}

absl::Status JobRun::EnsureSession(Device& device) {
  if (session_ != nullptr && bound_ == &device) return absl::OkStatus();
  session_ = std::make_unique<Session>(*job_, device, *strategy_->strategy, strategy_->resolved);
  if (!kept_id_.empty()) session_->set_job_id(kept_id_);
  bound_ = &device;
  return session_->Prepare();
}

absl::Status JobRun::Bind(Device& device) { return EnsureSession(device); }

absl::StatusOr<JobRunResult> JobRun::Run(
    Device& device, Store& store, const SessionOptions& options,
    const std::function<void(const JobRunResult&)>& on_start) {
  KTUNE_RETURN_IF_ERROR(EnsureSession(device));
  JobRunResult result;
  result.strategy = strategy_->resolved;
  // A warm start from other jobs of this kernel, if the store has any: the
  // strategy is rebuilt around it.
  if (job_->warm_start) {
    KTUNE_ASSIGN_OR_RETURN(BuiltStrategy warm, BuildStrategy(*job_, &store, session_->job_id()));
    if (warm.warm_configurations > 0) {
      strategy_ = std::make_unique<BuiltStrategy>(std::move(warm));
      session_->set_strategy(*strategy_->strategy, strategy_->resolved);
      result.strategy = strategy_->resolved;
      result.warm_jobs = strategy_->warm_jobs;
      result.warm_configurations = strategy_->warm_configurations;
    }
  }
  if (on_start) on_start(result);
  KTUNE_ASSIGN_OR_RETURN(result.session, session_->Run(store, options));
  return result;
}

}  // namespace ktune
