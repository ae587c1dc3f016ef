// The PostgreSQL store: a fleet's shared store, one database that every
// ktuned and ktune of a team uses, named by a libpq connection URI
// (postgresql://USER@HOST/DATABASE). Its tables live in the schema `ktune`
// of that database, created and migrated on first use; the rest of the
// database is never touched. One connection per Store.
#ifndef KTUNE_TUNER_STORE_PG_STORE_H_
#define KTUNE_TUNER_STORE_PG_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/store/fleet.h"
#include "tuner/store/pg.h"
#include "tuner/store/store.h"

namespace ktune {

// One step of the PostgreSQL schema, applied in a transaction.
struct PgMigration {
  int version;
  const char* sql;
};
std::span<const PgMigration> PgSchemaMigrations();

// Not thread-safe; not copyable.
class PgStore final : public Store, public FleetQueue {
 public:
  // Connects to `uri` and migrates the schema `ktune` (under an advisory
  // lock, so daemons starting together migrate once). Errors:
  // INVALID_ARGUMENT (not a URI), UNAVAILABLE (unreachable),
  // PERMISSION_DENIED, NOT_FOUND (no such database, or no ktune store in
  // it and !create), FAILED_PRECONDITION (a schema `ktune` that is not
  // ktune's, or a newer schema), each naming the URI without its password.
  static absl::StatusOr<std::unique_ptr<PgStore>> Open(const std::string& uri, bool create);

  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;
  ~PgStore() override;

  const std::string& locator() const override { return name_; }
  int schema_version() const override { return schema_version_; }
  absl::StatusOr<JobRecord> StartJob(const JobRecord& job, bool* resumed) override;
  absl::Status RenewLease(const std::string& job_id, std::chrono::milliseconds lease) override;
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
  // Copies the source's tables into temporary tables (COPY), then adds
  // what this store lacks in one transaction (store/pg_merge.cc).
  absl::StatusOr<MergeStats> Merge(const MergeSource& source) override;
  // ktune.changes: a counter that every committed transaction writing jobs
  // (but for a renewed lease), measurements, best or submissions moves once
  // (deferred triggers), visible with the write itself.
  absl::StatusOr<std::int64_t> ChangeCount() override;
  // Checks that every row reads back (jobs, measurements, best records).
  absl::Status CheckIntegrity() override;
  absl::StatusOr<std::map<std::string, StoredMeasurement>> LoadBestOfJobs(
      const std::vector<std::string>& job_ids) override;
  absl::StatusOr<std::map<JobState, std::int64_t>> CountJobs() override;
  absl::StatusOr<std::int64_t> SizeBytes() override;
  // One REPEATABLE READ transaction, table by table (store/pg_merge.cc).
  absl::Status Snapshot(const std::string& path) override;

  FleetQueue* fleet() override { return this; }

  // The fleet's queue (store/pg_fleet.cc).
  absl::StatusOr<FleetBeat> Heartbeat(const std::string& daemon,
                                      const std::vector<FleetDevice>& devices,
                                      const std::vector<std::string>& running,
                                      std::chrono::milliseconds lease) override;
  absl::Status Leave(const std::string& daemon) override;
  absl::StatusOr<std::string> ResolveModel(const std::string& wanted,
                                           std::chrono::milliseconds alive) override;
  absl::StatusOr<std::int64_t> Waiting() override;
  absl::StatusOr<std::int64_t> Unfinished(const std::string& client) override;
  absl::Status Offer(const std::string& job_id, const std::string& model) override;
  absl::StatusOr<std::optional<JobRecord>> Claim(const std::string& daemon,
                                                 const std::vector<std::string>& models,
                                                 std::chrono::milliseconds lease) override;
  absl::StatusOr<bool> RequestCancel(const std::string& job_id) override;
  absl::StatusOr<std::int64_t> Hand(const std::string& spec, int priority, const std::string& model,
                                    const std::string& client) override;
  absl::StatusOr<std::optional<FleetSubmission>> TakeSubmission(
      const std::vector<std::string>& models) override;
  absl::Status Answer(std::int64_t id, const std::string& job_id, int code,
                      const std::string& error) override;
  absl::StatusOr<std::optional<std::string>> AnswerOf(std::int64_t id) override;

  pg::Conn& conn() { return conn_; }

 private:
  PgStore(pg::Conn conn, std::string name) : conn_(std::move(conn)), name_(std::move(name)) {}
  absl::StatusOr<JobRecord> RecordJob(const JobRecord& job, JobState state, bool* existed);
  absl::StatusOr<JobRecord> RecordJobOnce(const JobRecord& job, JobState state, bool* existed);
  absl::Status AddMeasurementOnce(const std::string& job_id, const StoredMeasurement& m);
  absl::Status RefreshBestOnce(const std::string& job_id);
  absl::StatusOr<FleetBeat> HeartbeatOnce(const std::string& daemon,
                                          const std::vector<FleetDevice>& devices,
                                          const std::vector<std::string>& running,
                                          std::chrono::milliseconds lease);
  absl::StatusOr<std::vector<JobRecord>> ReadJobs(const pg::Result& r);
  absl::StatusOr<std::int64_t> UpsertDevice(const DeviceInfo& device);
  absl::StatusOr<std::int64_t> UpsertKernel(const JobRecord& job);
  absl::StatusOr<MergeStats> MergeLoaded(const std::string& source_name);
  absl::StatusOr<std::string> KnownArchitecture(const std::string& device) override;
  // CheckNotRunElsewhere (store.h) for the job, whose row stays locked
  // until the transaction ends; no job, or one not running, is no
  // objection. REQUIRES: a transaction.
  absl::Status CheckRunner(const std::string& job_id, bool to_start = false);
  // Runs `attempt`, one whole transaction, again when PostgreSQL aborted
  // it to break a deadlock or a serialization conflict (ABORTED): nothing
  // of it was kept, so it is safe to repeat. At most five attempts.
  template <typename F>
  auto Retrying(F attempt) -> decltype(attempt()) {
    for (int tries = 1;; ++tries) {
      auto result = attempt();
      if (tries == 5 || !AbortedBy(result)) return result;
      PauseBeforeRetry(tries);
    }
  }
  static bool AbortedBy(const absl::Status& s) { return absl::IsAborted(s); }
  template <typename T>
  static bool AbortedBy(const absl::StatusOr<T>& s) {
    return absl::IsAborted(s.status());
  }
  static void PauseBeforeRetry(int tries);

  pg::Conn conn_;
  std::string name_;  // the URI without its password
  int schema_version_ = 0;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_PG_STORE_H_
