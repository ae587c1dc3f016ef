// GetBest's tune_on_miss: an answer that is only a fallback starts the
// tuning that makes the next answer exact. One job per kernel, device and
// problem, whichever client asks first; each client may have a few such
// jobs queued or running (--max-miss-jobs-per-client).
#include <utility>

#include "absl/status/status.h"
#include "server/daemon/scheduler.h"
#include "server/daemon/scheduler_entry.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"

namespace ktune {

absl::StatusOr<v1::JobSpec> Scheduler::MissSpec(const v1::GetBestRequest& request,
                                                const v1::GetBestResponse& answer) {
  v1::JobSpec spec;
  if (request.has_spec()) {
    spec = request.spec();
    if (spec.kernel().name() != request.kernel()) {
      return absl::InvalidArgumentError(StrCat("spec.kernel.name: '", spec.kernel().name(),
                                               "' is not the kernel asked about ('",
                                               request.kernel(), "')"));
    }
  } else {
    if (answer.job_id().empty()) {
      return absl::NotFoundError(
          StrCat("nothing of ", request.kernel(),
                 " is stored to tune from; send the job file to tune with (GetBestRequest.spec)"));
    }
    JobRecord from;
    {
      std::lock_guard<std::mutex> rl(read_mu_);
      KTUNE_ASSIGN_OR_RETURN(from, reader_->GetJob(answer.job_id()));
    }
    if (!spec.ParseFromString(from.spec)) {
      return absl::DataLossError(StrCat("job ", from.id, ": its stored spec is damaged"));
    }
    // A job over a recording replays the recording's problem, whatever is
    // asked: it cannot tune another.
    if (!spec.has_kernel()) {
      return absl::FailedPreconditionError(
          StrCat("job ", from.id,
                 " replays a recording, which holds one problem only; send a "
                 "job file to tune with (GetBestRequest.spec)"));
    }
  }
  for (const auto& [name, v] : request.problem()) (*spec.mutable_problem())[name] = v;
  if (!request.device().empty()) {
    spec.mutable_device()->clear_devices();
    spec.mutable_device()->add_devices(request.device());
  }
  return spec;
}

void Scheduler::TuneOnMiss(const v1::GetBestRequest& request, const std::string& client,
                           v1::GetBestResponse* out) {
  const int limit = options_.limits.max_miss_jobs_per_client;
  if (limit <= 0) {
    out->set_tuning_note("this daemon does not tune on a miss (--max-miss-jobs-per-client 0)");
    return;
  }
  Problem problem;
  for (const auto& [name, v] : request.problem()) problem[name] = v;
  const std::string key =
      StrCat(request.kernel(), "\n", request.device(), "\n", ProblemToJson(problem));
  {
    std::lock_guard<std::mutex> lock(miss_mu_);
    if (auto it = miss_jobs_.find(key); it != miss_jobs_.end()) {
      out->set_tuning_job_id(it->second);
      return;
    }
    int mine = 0;
    {
      std::lock_guard<std::mutex> active(mu_);
      for (const auto& [id, who] : miss_client_) mine += who == client && active_.count(id) > 0;
    }
    if (mine >= limit) {
      out->set_tuning_note(StrCat("client '", client, "' has ", mine,
                                  " jobs queued or running from misses, this daemon's limit "
                                  "(--max-miss-jobs-per-client)"));
      return;
    }
  }
  absl::StatusOr<v1::JobSpec> spec = MissSpec(request, *out);
  if (!spec.ok()) {
    out->set_tuning_note(std::string(spec.status().message()));
    return;
  }
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = *std::move(spec);
  submit.set_priority(-1);  // behind the jobs clients submit
  submit.set_client(client);
  absl::StatusOr<v1::SubmitJobResponse> queued = Submit(submit);
  if (!queued.ok()) {
    out->set_tuning_note(StrCat("could not queue a job: ", queued.status().message()));
    return;
  }
  std::lock_guard<std::mutex> lock(miss_mu_);
  // Two misses at once may both have submitted: one job (its id is its
  // spec's), kept once.
  miss_jobs_.emplace(key, queued->job_id());
  miss_client_.emplace(queued->job_id(), client);
  out->set_tuning_job_id(miss_jobs_.at(key));
}

}  // namespace ktune
