#include "tuner/store/store.h"

#include "tuner/base/process.h"
#include "tuner/base/strings.h"
#include "tuner/store/pg.h"
#include "tuner/store/pg_store.h"
#include "tuner/store/sqlite_store.h"

namespace ktune {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
    case JobState::kInterrupted: return "interrupted";
  }
  return "?";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(JobState::kInterrupted); ++i) {
    const auto s = static_cast<JobState>(i);
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& locator, bool create) {
  if (pg::IsUri(locator)) {
    absl::StatusOr<std::unique_ptr<PgStore>> store = PgStore::Open(locator, create);
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(*std::move(store));
  }
  absl::StatusOr<std::unique_ptr<SqliteStore>> sqlite = SqliteStore::Open(locator, create);
  if (!sqlite.ok()) return sqlite.status();
  return std::unique_ptr<Store>(*std::move(sqlite));
}

absl::StatusOr<BestMatch> Store::FindBestMatch(const BestQuery& query) {
  absl::StatusOr<std::vector<BestRecord>> all = FindBest(
      query.kernel, std::nullopt, std::nullopt,
      query.objective.empty() ? std::nullopt : std::optional<std::string>(query.objective));
  if (!all.ok()) return all.status();
  BestQuery q = query;
  if (q.architecture.empty() && !q.device.empty() && q.device.rfind("sm_", 0) != 0) {
    absl::StatusOr<std::string> arch = KnownArchitecture(q.device);
    if (!arch.ok()) return arch.status();
    q.architecture = *arch;
  }
  return SelectBestMatch(*std::move(all), q);
}

void MarkInterruptedIfRunnerGone(JobRecord& j) {
  if (j.state != JobState::kRunning || LivenessOf(j.runner) != Liveness::kGone) return;
  j.state = JobState::kInterrupted;
  const std::optional<ProcessName> was = ProcessName::Decode(j.runner);
  j.message = StrCat("its process (", was ? was->Describe() : "?",
                     ") ended without recording the job's end; ",
                     j.origin == "daemon" ? "ktuned resumes it when it starts again"
                                          : "run the same job again to resume it");
}

void MarkInterruptedIfLeaseLapsed(JobRecord& j, const std::string& lapsed_at) {
  if (j.state != JobState::kRunning || LivenessOf(j.runner) == Liveness::kAlive) return;
  j.state = JobState::kInterrupted;
  const std::optional<ProcessName> was = ProcessName::Decode(j.runner);
  j.message = StrCat("its lease lapsed at ", lapsed_at, " (", was ? was->Describe() : j.runner,
                     " stopped renewing it); ",
                     j.origin == "daemon" ? "a daemon of its GPU model takes it over"
                                          : "run the same job again to resume it");
}

absl::Status AddJobCount(std::map<JobState, std::int64_t>& counts, std::string_view state,
                         const std::string& runner, std::int64_t n, bool lapsed) {
  const std::optional<JobState> parsed = ParseJobState(state);
  if (!parsed) return absl::DataLossError(StrCat("a job has the unknown state '", state, "'"));
  JobRecord j;
  j.state = *parsed;
  j.runner = runner;
  MarkInterruptedIfRunnerGone(j);
  if (lapsed) MarkInterruptedIfLeaseLapsed(j, "");
  counts[j.state] += n;
  return absl::OkStatus();
}

absl::Status CheckNotRunElsewhere(const std::string& job_id, const std::string& runner, bool leased,
                                  bool to_start) {
  const std::optional<ProcessName> self = ThisProcess();
  if (runner.empty() || (self && runner == self->Encode())) return absl::OkStatus();
  // A process of this host that ended holds nothing, whatever its lease
  // says.
  const Liveness liveness = LivenessOf(runner);
  if (liveness == Liveness::kGone) return absl::OkStatus();
  if (!leased && liveness != Liveness::kAlive) return absl::OkStatus();
  const std::optional<ProcessName> named = ProcessName::Decode(runner);
  return absl::FailedPreconditionError(
      StrCat("job ", job_id, " is already running (", named ? named->Describe() : runner,
             leased ? ", which holds its lease" : "", ")",
             to_start ? "; wait for it to end, or stop that process and run the job again to "
                        "resume it"
                      : ""));
}

}  // namespace ktune
