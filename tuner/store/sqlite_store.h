// The SQLite store: one file, in WAL mode with a busy timeout and foreign
// keys on; the embedded default. Several processes may use one file (SQLite
// arbitrates), one connection per Store.
#ifndef KTUNE_TUNER_STORE_SQLITE_STORE_H_
#define KTUNE_TUNER_STORE_SQLITE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/store/sqlite.h"
#include "tuner/store/store.h"

namespace ktune {

// Not thread-safe; not copyable.
class SqliteStore final : public Store {
 public:
  // Opens the database at `path`, creating it if `create` (see OpenMigrated
  // for the errors).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path, bool create);

  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;
  ~SqliteStore() override;

  const std::string& locator() const override { return path_; }
  int schema_version() const override { return schema_version_; }
  absl::StatusOr<JobRecord> StartJob(const JobRecord& job, bool* resumed) override;
  absl::StatusOr<JobRecord> QueueJob(const JobRecord& job, bool* existed) override;
  absl::Status SetJobState(const std::string& job_id, JobState state,
                           const std::string& message) override;
  absl::Status AddMeasurement(const std::string& job_id, const StoredMeasurement& m) override;
  absl::Status UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m) override;
  absl::Status RefreshBest(const std::string& job_id) override;
  absl::StatusOr<std::vector<StoredMeasurement>> LoadMeasurements(
      const std::string& job_id) override;
  absl::StatusOr<JobRecord> GetJob(const std::string& id_or_prefix) override;
  absl::StatusOr<std::vector<JobRecord>> ListJobs() override;
  absl::StatusOr<std::vector<BestRecord>> FindBest(
      const std::string& kernel_name, const std::optional<std::string>& device,
      const std::optional<Problem>& problem, const std::optional<std::string>& objective) override;
  absl::StatusOr<std::vector<PriorMeasurement>> LoadPriorMeasurements(
      const std::string& kernel_name, const std::vector<std::string>& parameters,
      const std::string& objective, const std::string& exclude_job_id, std::int64_t limit,
      const std::string& measured_before = "") override;
  absl::StatusOr<MergeStats> Merge(const MergeSource& source) override;
  // SQLite's data_version: it changes when another connection commits.
  absl::StatusOr<std::int64_t> ChangeCount() override;
  // PRAGMA integrity_check; OK when it reports "ok".
  absl::Status CheckIntegrity() override;
  absl::StatusOr<std::map<std::string, StoredMeasurement>> LoadBestOfJobs(
      const std::vector<std::string>& job_ids) override;
  absl::StatusOr<std::map<JobState, std::int64_t>> CountJobs() override;
  absl::StatusOr<std::int64_t> SizeBytes() override;
  // VACUUM INTO: a compact copy, consistent even while others write.
  absl::Status Snapshot(const std::string& path) override;

 private:
  // CheckNotRunElsewhere (store.h) for the job, when it is running.
  absl::Status CheckRunner(const std::string& job_id, bool to_start = false);
  friend class MergeSource;  // reads a source's kernels through db_
  explicit SqliteStore(sqlite::Db db);
  absl::Status PrepareStatements();
  absl::StatusOr<std::int64_t> UpsertDevice(const DeviceInfo& device);
  absl::StatusOr<std::int64_t> UpsertKernel(const JobRecord& job);
  absl::StatusOr<JobRecord> RecordJob(const JobRecord& job, JobState state, bool* existed);
  absl::StatusOr<JobRecord> ReadJob(sqlite::Statement& stmt);
  absl::StatusOr<std::vector<JobRecord>> ReadJobs(sqlite::Statement& stmt);
  // Merge's work, with the source attached as `src`; `source_name` for
  // messages (store/merge.cc).
  absl::StatusOr<MergeStats> MergeAttached(const std::string& source_name);
  absl::StatusOr<std::string> KnownArchitecture(const std::string& device) override;

  std::string path_;
  int schema_version_ = 0;
  // Declared after db_, so destroyed (finalised) before it.
  sqlite::Db db_;
  struct Statements;
  std::unique_ptr<Statements> stmts_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_SQLITE_STORE_H_
