// The store: devices, kernels, jobs, every measurement, and the best
// configuration per kernel, device, problem and objective. An interface
// with one contract (tests/store/store_contract.cc) that every backend
// passes: SQLite (an embedded file, the default) and PostgreSQL (a fleet's
// shared store), chosen by the locator (a path, or a postgresql:// URI).
//
// Each measurement is committed in its own transaction as it completes, so
// a crash loses at most the candidate in flight. A store carries a schema
// version and is migrated forward when opened; one written by a newer
// ktune is refused rather than damaged.
#ifndef KTUNE_TUNER_STORE_STORE_H_
#define KTUNE_TUNER_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/measurement.h"
#include "tuner/store/best_match.h"
#include "tuner/store/codecs.h"

namespace ktune {

enum class JobState : std::uint8_t {
  kQueued,
  kRunning,
  kSucceeded,  // budget spent or space exhausted
  kFailed,     // an infrastructure failure; see the message
  kCancelled,
  kInterrupted,  // stopped part-way; resumes when run again
};
const char* JobStateName(JobState state);  // "queued", "running", ...
std::optional<JobState> ParseJobState(std::string_view name);

struct JobRecord {
  std::string id;
  std::string kernel_name;
  std::string source_hash;
  std::vector<std::string> parameters;  // names, in order
  DeviceInfo device;
  Problem problem;
  std::string spec;       // serialized ktune.v1.JobSpec
  std::string spec_json;  // the same, as JSON for people
  std::string strategy;
  std::uint64_t seed = 0;
  std::string objective = "time";  // what `loss` ranks
  JobState state = JobState::kQueued;
  std::string message;
  std::int64_t evaluations = 0;
  std::string created_at;  // ISO 8601, UTC
  std::string updated_at;
  std::string origin = "local";  // "local" (ktune tune --local) or "daemon"
  int priority = 0;              // higher runs first among queued jobs
  // Who submitted a daemon's job (what its per-client limit counts); empty
  // for a local job. Kept from the first submission.
  std::string client;
  // The process running the job (ProcessName::Encode), while it runs. A
  // job read back as running whose process of this host has ended reads
  // as interrupted, with a message that says so.
  std::string runner;
};

struct StoredMeasurement {
  std::int64_t sequence = 0;  // 0-based evaluation order within the job
  std::string key;
  std::string config_json;  // {"name": value, ...}
  Measurement measurement;
  std::optional<double> objective;  // the objective's value, when ok
  std::optional<double> loss;       // what is minimised, when ok
  std::string measured_at;
};

// One measurement of another job, offered to a new job as a warm start.
struct PriorMeasurement {
  std::string job_id;
  std::string key;  // the configuration key, values in parameter order
  CandidateStatus status = CandidateStatus::kOk;
  std::optional<double> loss;  // when ok
};

class MergeSource;  // store/merge.h
class FleetQueue;   // store/fleet.h

// What a merge added.
struct MergeStats {
  std::int64_t devices = 0;
  std::int64_t kernels = 0;
  std::int64_t jobs_added = 0;     // jobs this store did not hold
  std::int64_t jobs_extended = 0;  // jobs it held that gained measurements
  std::int64_t measurements = 0;
  std::int64_t best = 0;  // best records added or improved
};

// One connection to a store. Not thread-safe: give each thread its own
// Store (the backend's locking arbitrates between connections and
// processes).
class Store {
 public:
  // Opens the store `locator` names (a SQLite file's path, or a PostgreSQL
  // connection URI: postgresql://...), creating it if `create` (in
  // PostgreSQL: its tables, in an existing database), and migrates it to
  // the current schema. Errors: NOT_FOUND (no
  // store and !create), FAILED_PRECONDITION (not a ktune store, or a newer
  // schema), each naming the locator; a refused store is left unchanged.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& locator, bool create);

  virtual ~Store() = default;

  // What the store was opened as, for messages.
  virtual const std::string& locator() const = 0;
  virtual int schema_version() const = 0;

  // Records the job (with its device and kernel) unless a job with this id
  // exists, then marks it running in this process, under `job.strategy`
  // (a job queued as "auto" runs as "auto (bayes)", say). Returns the
  // stored record and sets *resumed when it existed before.
  // FAILED_PRECONDITION when another live process of this host is running
  // the job, or (PostgreSQL) a process of any host whose lease on it is
  // live. In PostgreSQL the job is then this process's for a lease of
  // kRunLease (unless a fleet claim gave it one already), which RenewLease
  // extends; once the lease lapses, the job reads as interrupted and any
  // process may start it again.
  virtual absl::StatusOr<JobRecord> StartJob(const JobRecord& job, bool* resumed) = 0;

  // The same, but leaves the job queued (a daemon's job waiting its turn);
  // *existed is set when the job was stored before.
  virtual absl::StatusOr<JobRecord> QueueJob(const JobRecord& job, bool* existed) = 0;

  // NOT_FOUND if there is no such job. In a fleet (PostgreSQL), the
  // writes to a job that a daemon holds the live lease of are that
  // daemon's: from any other process this, AddMeasurement and
  // UpdateMeasurement return FAILED_PRECONDITION and change nothing.
  virtual absl::Status SetJobState(const std::string& job_id, JobState state,
                                   const std::string& message) = 0;

  // Commits one measurement, bumps the job's evaluation count and, when the
  // candidate is ok and beats the stored best for its kernel, device,
  // problem and objective, the best. ALREADY_EXISTS if the configuration
  // was already measured in this job (nothing changes then);
  // INVALID_ARGUMENT for an ok measurement without a finite time.
  virtual absl::Status AddMeasurement(const std::string& job_id, const StoredMeasurement& m) = 0;

  // Replaces the measured values (status, times, statistics, objective,
  // conditions, message) of a configuration already measured in this job,
  // keeping its sequence: used for the final contenders' re-measurement.
  // NOT_FOUND if it was never measured. Call RefreshBest afterwards.
  virtual absl::Status UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m) = 0;

  // Recomputes the best record of the job's kernel, device, problem and
  // objective from every stored measurement.
  virtual absl::Status RefreshBest(const std::string& job_id) = 0;

  // The job's measurements in evaluation order.
  virtual absl::StatusOr<std::vector<StoredMeasurement>> LoadMeasurements(
      const std::string& job_id) = 0;

  // The best measurement (lowest loss, then first measured) of each of
  // `job_ids` that has an ok one, by job id.
  virtual absl::StatusOr<std::map<std::string, StoredMeasurement>> LoadBestOfJobs(
      const std::vector<std::string>& job_ids) = 0;

  // The job with this id, or the only job whose id starts with it.
  // NOT_FOUND, or INVALID_ARGUMENT when a prefix is ambiguous or empty.
  virtual absl::StatusOr<JobRecord> GetJob(const std::string& id_or_prefix) = 0;

  // All jobs, newest first.
  virtual absl::StatusOr<std::vector<JobRecord>> ListJobs() = 0;

  // Best records of kernel `kernel_name`, optionally only on devices whose
  // name, id or uuid equals `device`, only for `problem`, only for
  // `objective`. Ordered by device name, then problem.
  virtual absl::StatusOr<std::vector<BestRecord>> FindBest(
      const std::string& kernel_name, const std::optional<std::string>& device,
      const std::optional<Problem>& problem, const std::optional<std::string>& objective) = 0;

  // The fallback chain (SelectBestMatch) over the kernel's best records;
  // a device the records do not name may be known to the store by its
  // other jobs (its architecture then counts).
  absl::StatusOr<BestMatch> FindBestMatch(const BestQuery& query);

  // Measurements of other jobs that tuned a kernel with this name and
  // exactly these parameters (names, in order) for `objective`, on any
  // device and problem, excluding job `exclude_job_id`, measured no later
  // than `measured_before` (ISO 8601; empty: any time); constraint exclusions
  // are left out. Newest jobs first, at most `limit` rows.
  virtual absl::StatusOr<std::vector<PriorMeasurement>> LoadPriorMeasurements(
      const std::string& kernel_name, const std::vector<std::string>& parameters,
      const std::string& objective, const std::string& exclude_job_id, std::int64_t limit,
      const std::string& measured_before = "") = 0;

  // Adds what `source` (a headless job's SQLite store) holds and this store
  // lacks, all in one transaction (on any error nothing is added): devices
  // (by UUID), kernels (by name, source hash and parameters), jobs (by id,
  // which covers the kernel, the whole spec, the problem and the device; a
  // job that was running there is `interrupted` here, so running it here
  // resumes it), measurements (by job and configuration: a job held by both
  // gains the configurations only the source measured, numbered after its
  // own, and becomes `succeeded` if it succeeded there), and best records
  // where the source's is better. Merging a source again adds nothing.
  // FAILED_PRECONDITION when a job held by both is being run by a live
  // process of this host.
  virtual absl::StatusOr<MergeStats> Merge(const MergeSource& source) = 0;

  // A number that changes when another connection (of this process or
  // another) commits to the store; it may also change with this one's.
  virtual absl::StatusOr<std::int64_t> ChangeCount() = 0;

  // How many jobs are in each state, as GetJob reads them (a running job
  // whose process of this host ended counts as interrupted). States with
  // no job are absent.
  virtual absl::StatusOr<std::map<JobState, std::int64_t>> CountJobs() = 0;

  // The bytes the store takes: SQLite, the file and its write-ahead log;
  // PostgreSQL, the ktune schema's tables with their indexes.
  virtual absl::StatusOr<std::int64_t> SizeBytes() = 0;

  // The backend's own consistency check; OK when it finds nothing wrong.
  virtual absl::Status CheckIntegrity() = 0;

  // Writes everything this store holds, as one consistent snapshot, to a
  // new SQLite store at `path` (for a machine that cannot reach this one).
  // ALREADY_EXISTS when `path` exists; on any error no file is left.
  virtual absl::Status Snapshot(const std::string& path) = 0;

  // Renews this process's lease on job `job_id`, which it runs (see
  // StartJob), to `lease` from now. FAILED_PRECONDITION when the job is
  // not running in this process (not started yet, ended, or taken over
  // after the lease lapsed). Stores without leases (SQLite, where the
  // process check alone tells a dead run) do nothing.
  virtual absl::Status RenewLease(const std::string& /*job_id*/,
                                  std::chrono::milliseconds /*lease*/) {
    return absl::OkStatus();
  }

  // The fleet's job queue when this store can hold one (PostgreSQL), for
  // as long as this Store lives; else null (SQLite: one daemon per store).
  virtual FleetQueue* fleet() { return nullptr; }

 protected:
  // The architecture of a device the store knows by name, id or UUID from
  // any job; empty when none.
  virtual absl::StatusOr<std::string> KnownArchitecture(const std::string& device) = 0;
};

// How long a job started in a store with leases (PostgreSQL) stays its
// process's without a renewal (Store::RenewLease).
inline constexpr std::chrono::milliseconds kRunLease{15000};

// A job read back as running whose process of this host has ended
// (killed, crashed, or from before a reboot) is not running: `job` is then
// marked interrupted, with a message that says so. Backends call it on
// every job they read.
void MarkInterruptedIfRunnerGone(JobRecord& job);

// A job read back as running whose lease lapsed at `lapsed_at` (nothing
// renewed it: its process died or lost the database, on any host) is not
// running either, unless its process is a live one of this host: `job` is
// then marked interrupted, with a message that says so.
void MarkInterruptedIfLeaseLapsed(JobRecord& job, const std::string& lapsed_at);

// Adds `n` jobs stored in state `state` (run by `runner` when running; its
// lease lapsed when `lapsed`) to `counts` as CountJobs reads them;
// DATA_LOSS for a state it does not know.
absl::Status AddJobCount(std::map<JobState, std::int64_t>& counts, std::string_view state,
                         const std::string& runner, std::int64_t n, bool lapsed = false);

// Whether `runner`, the process that a running job's row names, is another
// process that owns the job now: a live process of this host, or a
// process of another host whose lease on it is live (`leased`). FAILED_PRECONDITION naming
// it if so (`to_start`: and how to run it once that one is done);
// backends check it before a job's writes.
absl::Status CheckNotRunElsewhere(const std::string& job_id, const std::string& runner, bool leased,
                                  bool to_start);

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_STORE_H_
