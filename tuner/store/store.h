// The SQLite store: devices, kernels, jobs, every measurement, and the best
// configuration per kernel, device, problem and objective.
//
// The database runs in WAL mode with a busy timeout and foreign keys on.
// Each measurement is committed in its own transaction as it completes, so a
// crash loses at most the candidate in flight. The schema carries a version
// (PRAGMA user_version) and is migrated forward on open; a database written
// by a newer ktune is refused rather than damaged.
#ifndef KTUNE_TUNER_STORE_STORE_H_
#define KTUNE_TUNER_STORE_STORE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/measurement.h"
#include "tuner/store/codecs.h"
#include "tuner/store/sqlite.h"

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

struct BestRecord {
  std::string kernel_name;
  std::string source_hash;
  DeviceInfo device;
  Problem problem;
  std::string objective;
  std::string job_id;
  std::string key;
  std::string config_json;
  double time_ms = 0;
  std::optional<double> objective_value;
  double loss = 0;
  std::string updated_at;
};

// GetBest's question: a kernel by name (and optionally its source hash) on
// a device for a problem.
struct BestQuery {
  std::string kernel;
  std::string source_hash;   // optional
  std::string device;        // name, id ("cuda:0") or uuid; empty: any
  std::string architecture;  // of `device`, when the caller knows it
  Problem problem;           // empty: any
  std::string objective;     // empty: "time" when stored, else any
  bool exact_only = false;
};

enum class BestMatchKind { kExact, kNearestProblem, kSameArchitecture };
const char* BestMatchKindName(BestMatchKind kind);  // "exact", ...

struct BestMatch {
  BestMatchKind kind = BestMatchKind::kExact;
  BestRecord best;
  bool source_differs = false;  // the stored source hash is not the one asked
  double distance = 0;          // problem distance (log scale) when nearest
};

// The distance between two problems over the same dimensions: the
// Euclidean norm of the differences of their natural logs. Infinite when
// the dimension names differ.
double ProblemDistance(const Problem& a, const Problem& b);

// The fallback chain of Store::FindBestMatch over records already loaded
// (no I/O): for in-process lookups. `query.architecture` should be set when
// the device is not among the records.
absl::StatusOr<BestMatch> SelectBestMatch(std::vector<BestRecord> records, const BestQuery& query);

// One schema step: applied in a transaction, then user_version = version.
struct Migration {
  int version;
  const char* sql;
};

// The schema migrations of this ktune, oldest first.
std::span<const Migration> SchemaMigrations();

// Opens the database at `path` (creating it if `create`), checks that it is
// empty or a ktune database, sets WAL mode, the busy timeout and foreign
// keys, and applies the `migrations` it lacks, each in its own transaction.
// Returns the connection; *version receives the schema version. Errors:
// NOT_FOUND (no file and !create), FAILED_PRECONDITION (not SQLite, not a
// ktune database, or a schema newer than `migrations`), each naming the
// path; a refused file is left unchanged.
absl::StatusOr<sqlite::Db> OpenMigrated(const std::string& path, bool create,
                                        std::span<const Migration> migrations, int* version);

// Whether `runner` (JobRecord::runner) names a live process of this host
// other than this one: that process's job is not ours to run or to end.
bool RunByAnotherProcess(const std::string& runner);

// Another ktune database, copied (SQLite's online backup: a consistent
// snapshot, even while a job writes to it), checked and migrated to this
// ktune's schema, ready for Store::Merge. The original is only read. The
// copy lives in the temporary folder and is removed with this object, its
// only owner (move-only). Not thread-safe.
class MergeSource {
 public:
  // NOT_FOUND (no file), FAILED_PRECONDITION (not SQLite, not a ktune
  // database, a schema newer than this ktune's), each naming `path`.
  static absl::StatusOr<MergeSource> Prepare(const std::string& path);
  MergeSource(MergeSource&& other) noexcept;
  MergeSource& operator=(MergeSource&& other) noexcept;
  ~MergeSource();
  const std::string& path() const { return path_; }
  const std::string& copy_path() const { return copy_; }

 private:
  MergeSource(std::string path, std::string copy)
      : path_(std::move(path)), copy_(std::move(copy)) {}
  std::string path_;
  std::string copy_;
};

// What a merge added.
struct MergeStats {
  std::int64_t devices = 0;
  std::int64_t kernels = 0;
  std::int64_t jobs_added = 0;     // jobs this store did not hold
  std::int64_t jobs_extended = 0;  // jobs it held that gained measurements
  std::int64_t measurements = 0;
  std::int64_t best = 0;  // best records added or improved
};

// A connection to one database file. Move-only; not thread-safe (give each
// thread its own Store; SQLite's locking and the busy timeout arbitrate).
class Store {
 public:
  // Opens the database at `path`, creating it if `create`, and migrates it
  // to the current schema (see OpenMigrated for the errors).
  static absl::StatusOr<Store> Open(const std::string& path, bool create);

  Store(Store&&) noexcept;
  Store& operator=(Store&&) noexcept;
  ~Store();

  const std::string& path() const { return path_; }
  int schema_version() const { return schema_version_; }

  // Records the job (with its device and kernel) unless a job with this id
  // exists, then marks it running in this process. Returns the stored
  // record and sets *resumed when it existed before. FAILED_PRECONDITION
  // when another live process of this host is running the job.
  absl::StatusOr<JobRecord> StartJob(const JobRecord& job, bool* resumed);

  // The same, but leaves the job queued (a daemon's job waiting its turn);
  // *existed is set when the job was stored before.
  absl::StatusOr<JobRecord> QueueJob(const JobRecord& job, bool* existed);

  absl::Status SetJobState(const std::string& job_id, JobState state, const std::string& message);

  // Commits one measurement, bumps the job's evaluation count and, when the
  // candidate is ok and beats the stored best for its kernel, device,
  // problem and objective, the best. ALREADY_EXISTS if the configuration
  // was already measured in this job.
  absl::Status AddMeasurement(const std::string& job_id, const StoredMeasurement& m);

  // Replaces the measured values (status, times, statistics, objective,
  // conditions, message) of a configuration already measured in this job,
  // keeping its sequence: used for the final contenders' re-measurement.
  // NOT_FOUND if it was never measured. Call RefreshBest afterwards.
  absl::Status UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m);

  // Recomputes the best record of the job's kernel, device, problem and
  // objective from every stored measurement.
  absl::Status RefreshBest(const std::string& job_id);

  // The job's measurements in evaluation order.
  absl::StatusOr<std::vector<StoredMeasurement>> LoadMeasurements(const std::string& job_id);

  // The job with this id, or the only job whose id starts with it.
  // NOT_FOUND, or INVALID_ARGUMENT when a prefix is ambiguous.
  absl::StatusOr<JobRecord> GetJob(const std::string& id_or_prefix);

  // All jobs, newest first.
  absl::StatusOr<std::vector<JobRecord>> ListJobs();

  // Best records of kernel `kernel_name`, optionally only on devices whose
  // name, id or uuid equals `device`, only for `problem`, only for
  // `objective`. Ordered by device name, then problem.
  absl::StatusOr<std::vector<BestRecord>> FindBest(const std::string& kernel_name,
                                                   const std::optional<std::string>& device,
                                                   const std::optional<Problem>& problem,
                                                   const std::optional<std::string>& objective);

  // The fallback chain: the exact kernel, device and problem; else the
  // nearest problem on that device; else the same kernel on another device
  // of the same architecture (exact problem first, else nearest). Records
  // with the asked source hash are preferred; when only others exist the
  // match says source_differs. NOT_FOUND with a message saying what the
  // store does hold.
  absl::StatusOr<BestMatch> FindBestMatch(const BestQuery& query);

  // Measurements of other jobs that tuned a kernel with this name and
  // exactly these parameters (names, in order) for `objective`, on any
  // device and problem, excluding job `exclude_job_id`, measured no later
  // than `measured_before` (ISO 8601; empty: any time); constraint exclusions
  // are left out. Newest jobs first, at most `limit` rows.
  absl::StatusOr<std::vector<PriorMeasurement>> LoadPriorMeasurements(
      const std::string& kernel_name, const std::vector<std::string>& parameters,
      const std::string& objective, const std::string& exclude_job_id, std::int64_t limit,
      const std::string& measured_before = "");

  // Adds what `source` holds and this store lacks, all in one transaction
  // (on any error nothing is added): devices (by UUID), kernels (by name,
  // source hash and parameters), jobs (by id, which covers the kernel, the
  // whole spec, the problem and the device; a job that was running there is
  // `interrupted` here, so running it here resumes it), measurements (by job
  // and configuration: a job held by both gains the configurations only the
  // source measured, numbered after its own, and becomes `succeeded` if it
  // succeeded there), and best records where the source's is better.
  // Merging a source again adds nothing. FAILED_PRECONDITION when a job held
  // by both is being run by a live process of this host.
  absl::StatusOr<MergeStats> Merge(const MergeSource& source);

  // SQLite's data_version of this connection: it changes when another
  // connection (of this process or another) commits to the database.
  absl::StatusOr<std::int64_t> DataVersion();

  // Runs PRAGMA integrity_check; OK when it reports "ok".
  absl::Status CheckIntegrity();

 private:
  friend class MergeSource;  // reads a source's kernels through db_
  explicit Store(sqlite::Db db);
  absl::Status PrepareStatements();
  absl::StatusOr<std::int64_t> UpsertDevice(const DeviceInfo& device);
  absl::StatusOr<std::int64_t> UpsertKernel(const JobRecord& job);
  absl::StatusOr<JobRecord> RecordJob(const JobRecord& job, JobState state, bool* existed);
  absl::StatusOr<JobRecord> ReadJob(sqlite::Statement& stmt);
  // Merge's work, with the source attached as `src`; `source_name` for
  // messages.
  absl::StatusOr<MergeStats> MergeAttached(const std::string& source_name);
  absl::StatusOr<std::vector<JobRecord>> ReadJobs(sqlite::Statement& stmt);

  std::string path_;
  int schema_version_ = 0;
  // Declared after db_, so destroyed (finalised) before it.
  sqlite::Db db_;
  struct Statements;
  std::unique_ptr<Statements> stmts_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_STORE_H_
