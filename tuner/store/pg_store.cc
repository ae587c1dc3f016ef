#include "tuner/store/pg_store.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/rows.h"

namespace ktune {
namespace {

// Daemons starting together migrate one at a time (pg_advisory_xact_lock).
constexpr std::int64_t kMigrationLock = 0x6b74756e0001;  // 'ktun', 1

constexpr PgMigration kPgMigrations[] = {
    // The schema of SQLite's version 4, in PostgreSQL's words, and the
    // change counter.
    {1, R"sql(
CREATE SCHEMA IF NOT EXISTS ktune;
CREATE TABLE ktune.meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO ktune.meta VALUES ('application', 'ktune');
CREATE TABLE ktune.devices (
  id BIGSERIAL PRIMARY KEY,
  uuid TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  architecture TEXT NOT NULL DEFAULT '',
  driver TEXT NOT NULL DEFAULT '',
  memory_bytes BIGINT NOT NULL DEFAULT 0,
  multiprocessors BIGINT NOT NULL DEFAULT 0,
  simulated BIGINT NOT NULL DEFAULT 0,
  locator TEXT NOT NULL DEFAULT ''
);
CREATE TABLE ktune.kernels (
  id BIGSERIAL PRIMARY KEY,
  name TEXT NOT NULL,
  source_hash TEXT NOT NULL,
  parameters TEXT NOT NULL,
  UNIQUE (name, source_hash, parameters)
);
CREATE TABLE ktune.jobs (
  id TEXT PRIMARY KEY,
  kernel_id BIGINT NOT NULL REFERENCES ktune.kernels(id),
  device_id BIGINT NOT NULL REFERENCES ktune.devices(id),
  problem TEXT NOT NULL,
  spec BYTEA NOT NULL,
  spec_json TEXT NOT NULL,
  strategy TEXT NOT NULL,
  seed BIGINT NOT NULL,
  objective TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded',
                                       'failed', 'cancelled', 'interrupted')),
  message TEXT NOT NULL DEFAULT '',
  evaluations BIGINT NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  origin TEXT NOT NULL DEFAULT 'local',
  priority BIGINT NOT NULL DEFAULT 0,
  runner TEXT NOT NULL DEFAULT ''
);
CREATE INDEX jobs_kernel ON ktune.jobs(kernel_id);
CREATE INDEX jobs_created ON ktune.jobs(created_at DESC, id);
CREATE TABLE ktune.measurements (
  job_id TEXT NOT NULL REFERENCES ktune.jobs(id) ON DELETE CASCADE,
  seq BIGINT NOT NULL,
  config_key TEXT NOT NULL,
  config TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'invalid_by_constraint',
      'compile_error', 'launch_error', 'runtime_fault', 'timeout',
      'wrong_result')),
  time_ms DOUBLE PRECISION,
  objective DOUBLE PRECISION,
  loss DOUBLE PRECISION,
  median_ms DOUBLE PRECISION,
  mean_ms DOUBLE PRECISION,
  min_ms DOUBLE PRECISION,
  max_ms DOUBLE PRECISION,
  q1_ms DOUBLE PRECISION,
  q3_ms DOUBLE PRECISION,
  stddev_ms DOUBLE PRECISION,
  samples BIGINT NOT NULL DEFAULT 0,
  compile_ms DOUBLE PRECISION NOT NULL DEFAULT 0,
  cost_ms DOUBLE PRECISION NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  measured_at TEXT NOT NULL,
  conditions TEXT NOT NULL DEFAULT '{}',
  samples_ms TEXT NOT NULL DEFAULT '[]',
  PRIMARY KEY (job_id, config_key),
  UNIQUE (job_id, seq),
  CHECK ((status = 'ok') = (time_ms IS NOT NULL))
);
CREATE TABLE ktune.best (
  kernel_id BIGINT NOT NULL REFERENCES ktune.kernels(id),
  device_id BIGINT NOT NULL REFERENCES ktune.devices(id),
  problem TEXT NOT NULL,
  objective TEXT NOT NULL,
  job_id TEXT NOT NULL REFERENCES ktune.jobs(id) ON DELETE CASCADE,
  config_key TEXT NOT NULL,
  config TEXT NOT NULL,
  time_ms DOUBLE PRECISION NOT NULL,
  objective_value DOUBLE PRECISION,
  loss DOUBLE PRECISION NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (kernel_id, device_id, problem, objective)
);
CREATE TABLE ktune.changes (id INT PRIMARY KEY CHECK (id = 1), n BIGINT NOT NULL);
INSERT INTO ktune.changes VALUES (1, 0);
-- Moves the counter once per transaction, at its commit (the triggers are
-- deferred): the counter's row is locked last, after every other row the
-- transaction writes, so it never closes a circle of waits, and a reader
-- sees it move together with what moved it.
CREATE FUNCTION ktune.count_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('ktune.counted', true) IS DISTINCT FROM 'yes' THEN
    PERFORM set_config('ktune.counted', 'yes', true);
    UPDATE ktune.changes SET n = n + 1 WHERE id = 1;
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER jobs_added AFTER INSERT OR DELETE ON ktune.jobs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ktune.count_change();
CREATE CONSTRAINT TRIGGER jobs_changed AFTER UPDATE ON ktune.jobs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ktune.count_change();
CREATE CONSTRAINT TRIGGER measurements_changed
  AFTER INSERT OR UPDATE OR DELETE ON ktune.measurements
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ktune.count_change();
CREATE CONSTRAINT TRIGGER best_changed AFTER INSERT OR UPDATE OR DELETE ON ktune.best
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ktune.count_change();
)sql"},
    // The fleet's queue (store/fleet.h): the GPU model a daemon's job
    // needs, its claim's lease, a cancellation asked of another daemon;
    // the live daemons and their devices; submissions handed over.
    {2, R"sql(
ALTER TABLE ktune.jobs ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE ktune.jobs ADD COLUMN lease_until TIMESTAMPTZ;
ALTER TABLE ktune.jobs ADD COLUMN cancel_asked BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX jobs_fleet_queue ON ktune.jobs (model, priority DESC, created_at, id)
  WHERE model <> '' AND state IN ('queued', 'interrupted');
CREATE INDEX jobs_fleet_leases ON ktune.jobs (lease_until)
  WHERE model <> '' AND state = 'running';
CREATE INDEX jobs_runner ON ktune.jobs (runner) WHERE state = 'running';
CREATE TABLE ktune.daemons (name TEXT PRIMARY KEY, seen_at TIMESTAMPTZ NOT NULL);
CREATE TABLE ktune.daemon_devices (
  daemon TEXT NOT NULL REFERENCES ktune.daemons(name) ON DELETE CASCADE,
  model TEXT NOT NULL,
  name TEXT NOT NULL,
  uuid TEXT NOT NULL,
  locator TEXT NOT NULL,
  PRIMARY KEY (daemon, locator)
);
CREATE TABLE ktune.submissions (
  id BIGSERIAL PRIMARY KEY,
  spec BYTEA NOT NULL,
  priority BIGINT NOT NULL,
  model TEXT NOT NULL,
  submitted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  taken_at TIMESTAMPTZ,
  answered BOOLEAN NOT NULL DEFAULT false,
  job_id TEXT NOT NULL DEFAULT '',
  code INT NOT NULL DEFAULT 0,
  error TEXT NOT NULL DEFAULT ''
);
CREATE CONSTRAINT TRIGGER submissions_changed AFTER INSERT OR UPDATE ON ktune.submissions
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ktune.count_change();
-- A heartbeat's renewed lease is no change to anyone else.
DROP TRIGGER jobs_changed ON ktune.jobs;
CREATE CONSTRAINT TRIGGER jobs_changed AFTER UPDATE ON ktune.jobs
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (OLD.lease_until IS NOT DISTINCT FROM NEW.lease_until OR OLD.state IS DISTINCT FROM NEW.state
        OR OLD.runner IS DISTINCT FROM NEW.runner)
  EXECUTE FUNCTION ktune.count_change();
)sql"},
    // Who submitted a daemon's job (SQLite's version 5), for the
    // per-client limits, counted fleet-wide through an index; a submission
    // handed over carries its client.
    {3, R"sql(
ALTER TABLE ktune.jobs ADD COLUMN client TEXT NOT NULL DEFAULT '';
CREATE INDEX jobs_client_unfinished ON ktune.jobs (client)
  WHERE model <> '' AND state IN ('queued', 'running', 'interrupted');
ALTER TABLE ktune.submissions ADD COLUMN client TEXT NOT NULL DEFAULT '';
)sql"},
};

// Column 27: when a running job's lease lapsed (nothing renews it), else
// empty.
constexpr const char* kJobColumns = KTUNE_JOB_COLUMNS(
    "ktune.",
    ",\n       CASE WHEN j.state = 'running' AND j.lease_until < now() THEN\n"
    "         to_char(j.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')\n"
    "       ELSE '' END");

std::optional<double> FiniteOrNull(double v) {
  if (std::isfinite(v)) return v;
  return std::nullopt;
}

// Parameters $1..$22 of the measurement insert and update, in the order
// of the columns (store/tables.cc).
pg::Params MeasurementParams(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  const bool ok = r.ok();
  const bool has_stats = r.stats.samples > 0;
  auto stat = [&](Millis v) -> std::optional<double> {
    if (!has_stats) return std::nullopt;
    return FiniteOrNull(v.count());
  };
  pg::Params p;
  p.Add(job_id)
      .Add(m.sequence)
      .Add(m.key)
      .Add(m.config_json)
      .Add(CandidateStatusName(r.status))
      .Add(ok ? std::optional<double>(r.time.count()) : std::nullopt)
      .Add(ok ? m.objective : std::nullopt)
      .Add(ok ? m.loss : std::nullopt)
      .Add(stat(r.stats.median))
      .Add(stat(r.stats.mean))
      .Add(stat(r.stats.min))
      .Add(stat(r.stats.max))
      .Add(stat(r.stats.q1))
      .Add(stat(r.stats.q3))
      .Add(stat(r.stats.stddev))
      .Add(std::int64_t{r.stats.samples})
      .Add(FiniteOrNull(r.compile_time.count()).value_or(0))
      .Add(FiniteOrNull(r.cost.count()).value_or(0))
      .Add(r.message)
      .Add(m.measured_at.empty() ? NowIso8601() : m.measured_at)
      .Add(ConditionsToJson(r.conditions))
      .Add(SamplesToJson(r.samples_ms));
  return p;
}

// The version of the store in the connected database: 0 when there is
// none. FAILED_PRECONDITION when a schema `ktune` holds something else.
absl::StatusOr<int> StoredVersion(pg::Conn& conn) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn.Exec(R"sql(
SELECT (SELECT count(*) FROM pg_namespace WHERE nspname = 'ktune'),
       to_regclass('ktune.meta') IS NOT NULL)sql"));
  if (r.Int(0, 0) == 0) return 0;
  if (r.Text(0, 1) != "t") {
    return absl::FailedPreconditionError(
        StrCat(conn.name(),
               ": the schema 'ktune' of this database holds something that is not a ktune "
               "store; nothing was changed. Give ktune a database of its own, or drop that "
               "schema"));
  }
  KTUNE_ASSIGN_OR_RETURN(
      pg::Result v,
      conn.Exec("SELECT (SELECT value FROM ktune.meta WHERE key = 'application'), "
                "COALESCE((SELECT value FROM ktune.meta WHERE key = 'schema_version'), '0')"));
  if (v.rows() != 1 || v.Text(0, 0) != "ktune") {
    return absl::FailedPreconditionError(
        StrCat(conn.name(), ": the schema 'ktune' is not a ktune store; nothing was changed"));
  }
  return static_cast<int>(std::strtol(v.Text(0, 1).c_str(), nullptr, 10));
}

}  // namespace

std::span<const PgMigration> PgSchemaMigrations() { return kPgMigrations; }

PgStore::~PgStore() = default;

absl::StatusOr<std::unique_ptr<PgStore>> PgStore::Open(const std::string& uri, bool create) {
  KTUNE_ASSIGN_OR_RETURN(pg::Conn conn, pg::Conn::Connect(uri));
  const std::string name = conn.name();
  const int latest = kPgMigrations[std::size(kPgMigrations) - 1].version;
  KTUNE_ASSIGN_OR_RETURN(int version, StoredVersion(conn));
  if (version == 0 && !create) {
    return absl::NotFoundError(
        StrCat(name,
               ": no ktune store in this database (ktune tune --local --db URI or ktuned --db "
               "URI creates one)"));
  }
  auto newer = [&](int v) {
    return absl::FailedPreconditionError(StrCat(name, ": schema version ", v,
                                                " is newer than this ktune knows (", latest,
                                                "); use a newer ktune. Nothing was changed."));
  };
  if (version > latest) return newer(version);
  if (version < latest) {
    // Under the lock, read again: another process may have migrated.
    KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn));
    KTUNE_RETURN_IF_ERROR(
        conn.Run("SELECT pg_advisory_xact_lock($1)", pg::Params().Add(kMigrationLock)));
    KTUNE_ASSIGN_OR_RETURN(version, StoredVersion(conn));
    if (version > latest) return newer(version);
    for (const PgMigration& m : kPgMigrations) {
      if (m.version <= version) continue;
      if (absl::Status s = conn.Run(m.sql); !s.ok()) {
        return absl::Status(s.code(),
                            StrCat("migration to schema version ", m.version, ": ", s.message()));
      }
      version = m.version;
    }
    KTUNE_RETURN_IF_ERROR(conn.Run(R"sql(
INSERT INTO ktune.meta VALUES ('schema_version', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value)sql",
                                   pg::Params().Add(std::to_string(version))));
    KTUNE_RETURN_IF_ERROR(tx.Commit());
  }
  std::unique_ptr<PgStore> store(new PgStore(std::move(conn), name));
  store->schema_version_ = version;
  return store;
}

absl::StatusOr<std::int64_t> PgStore::UpsertDevice(const DeviceInfo& device) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
INSERT INTO ktune.devices (uuid, name, architecture, driver, memory_bytes,
                           multiprocessors, simulated, locator)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (uuid) DO UPDATE SET name = excluded.name,
  architecture = excluded.architecture, driver = excluded.driver,
  memory_bytes = excluded.memory_bytes,
  multiprocessors = excluded.multiprocessors, locator = excluded.locator
RETURNING id)sql",
                                                  pg::Params()
                                                      .Add(device.uuid)
                                                      .Add(device.name)
                                                      .Add(device.architecture)
                                                      .Add(device.driver)
                                                      .Add(device.memory_bytes)
                                                      .Add(device.multiprocessors)
                                                      .Add(device.simulated ? 1 : 0)
                                                      .Add(device.id)));
  return r.Int(0, 0);
}

absl::StatusOr<std::int64_t> PgStore::UpsertKernel(const JobRecord& job) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
INSERT INTO ktune.kernels (name, source_hash, parameters) VALUES ($1, $2, $3)
ON CONFLICT (name, source_hash, parameters) DO UPDATE SET name = excluded.name
RETURNING id)sql",
                                                  pg::Params()
                                                      .Add(job.kernel_name)
                                                      .Add(job.source_hash)
                                                      .Add(StrJoin(job.parameters, ","))));
  return r.Int(0, 0);
}

absl::StatusOr<std::vector<JobRecord>> PgStore::ReadJobs(const pg::Result& r) {
  std::vector<JobRecord> out;
  for (int i = 0; i < r.rows(); ++i) {
    KTUNE_ASSIGN_OR_RETURN(JobRecord j, rows::Job(r.At(i)));
    if (const std::string lapsed = r.Text(i, 27); !lapsed.empty()) {
      MarkInterruptedIfLeaseLapsed(j, lapsed);
    }
    out.push_back(std::move(j));
  }
  return out;
}

absl::Status PgStore::RenewLease(const std::string& job_id, std::chrono::milliseconds lease) {
  const std::optional<ProcessName> self = ThisProcess();
  KTUNE_ASSIGN_OR_RETURN(pg::Result r,
                         conn_.Exec(R"sql(
UPDATE ktune.jobs SET lease_until = now() + $3 * interval '1 millisecond'
WHERE id = $1 AND runner = $2 AND state = 'running')sql",
                                    pg::Params()
                                        .Add(job_id)
                                        .Add(self ? self->Encode() : "")
                                        .Add(static_cast<std::int64_t>(lease.count()))));
  if (r.Changed() == 0) {
    return absl::FailedPreconditionError(StrCat("job ", job_id, " is not running in this process"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobRecord> PgStore::StartJob(const JobRecord& job, bool* resumed) {
  return RecordJob(job, JobState::kRunning, resumed);
}

absl::StatusOr<JobRecord> PgStore::QueueJob(const JobRecord& job, bool* existed) {
  return RecordJob(job, JobState::kQueued, existed);
}

absl::StatusOr<JobRecord> PgStore::RecordJob(const JobRecord& job, JobState state, bool* existed) {
  return Retrying([&] { return RecordJobOnce(job, state, existed); });
}

absl::Status PgStore::CheckRunner(const std::string& job_id, bool to_start) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT runner, COALESCE(lease_until > now(), false) FROM ktune.jobs
WHERE id = $1 AND state = 'running' FOR UPDATE)sql",
                                                  pg::Params().Add(job_id)));
  if (r.rows() == 0) return absl::OkStatus();
  return CheckNotRunElsewhere(job_id, r.Text(0, 0), r.Text(0, 1) == "t", to_start);
}

void PgStore::PauseBeforeRetry(int tries) {
  // A few milliseconds, growing, so that the two sides of a deadlock do
  // not meet again at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * tries + getpid() % 5));
}

absl::StatusOr<JobRecord> PgStore::RecordJobOnce(const JobRecord& job, JobState state,
                                                 bool* existed) {
  KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
  const std::optional<ProcessName> self = ThisProcess();
  const std::string runner = self ? self->Encode() : "";
  // Never two processes on one job: the row is locked until commit, so two
  // starting it at once take turns here.
  if (state == JobState::kRunning) {
    KTUNE_RETURN_IF_ERROR(CheckRunner(job.id, /*to_start=*/true));
  }
  KTUNE_ASSIGN_OR_RETURN(const std::int64_t device_id, UpsertDevice(job.device));
  KTUNE_ASSIGN_OR_RETURN(const std::int64_t kernel_id, UpsertKernel(job));
  const std::string now = NowIso8601();
  KTUNE_ASSIGN_OR_RETURN(pg::Result ins, conn_.Exec(R"sql(
INSERT INTO ktune.jobs (id, kernel_id, device_id, problem, spec, spec_json, strategy,
                        seed, objective, state, message, evaluations, created_at,
                        updated_at, origin, priority, client)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, '', 0, $11, $11, $12, $13, $14)
ON CONFLICT (id) DO NOTHING)sql",
                                                    pg::Params()
                                                        .Add(job.id)
                                                        .Add(kernel_id)
                                                        .Add(device_id)
                                                        .Add(ProblemToJson(job.problem))
                                                        .AddBytes(job.spec)
                                                        .Add(job.spec_json)
                                                        .Add(job.strategy)
                                                        .Add(static_cast<std::int64_t>(job.seed))
                                                        .Add(job.objective)
                                                        .Add(JobStateName(state))
                                                        .Add(now)
                                                        .Add(job.origin)
                                                        .Add(job.priority)
                                                        .Add(job.client)));
  const bool inserted = ins.Changed() > 0;
  if (!inserted) {
    KTUNE_RETURN_IF_ERROR(
        conn_.Run("UPDATE ktune.jobs SET state = $2, message = '', updated_at = $3 WHERE id = $1",
                  pg::Params().Add(job.id).Add(JobStateName(state)).Add(now)));
    if (state == JobState::kRunning) {  // what "auto" became, now it runs
      KTUNE_RETURN_IF_ERROR(conn_.Run("UPDATE ktune.jobs SET strategy = $2 WHERE id = $1",
                                      pg::Params().Add(job.id).Add(job.strategy)));
    }
  }
  if (state == JobState::kRunning) {
    // The job is this process's for a lease, renewed while it runs
    // (RenewLease, or a fleet daemon's heartbeat); a claim's live lease is
    // kept as it is.
    KTUNE_RETURN_IF_ERROR(conn_.Run(
        R"sql(
UPDATE ktune.jobs SET runner = $2,
  lease_until = CASE WHEN runner = $2 AND lease_until > now() THEN lease_until
                     ELSE now() + $3 * interval '1 millisecond' END
WHERE id = $1)sql",
        pg::Params().Add(job.id).Add(runner).Add(static_cast<std::int64_t>(kRunLease.count()))));
  } else {
    KTUNE_RETURN_IF_ERROR(
        conn_.Run("UPDATE ktune.jobs SET runner = '' WHERE id = $1", pg::Params().Add(job.id)));
  }
  KTUNE_RETURN_IF_ERROR(tx.Commit());
  if (existed != nullptr) *existed = !inserted;
  return GetJob(job.id);
}

absl::Status PgStore::SetJobState(const std::string& job_id, JobState state,
                                  const std::string& message) {
  return Retrying([&]() -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
    KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
    KTUNE_ASSIGN_OR_RETURN(
        pg::Result r,
        conn_.Exec(
            R"sql(
UPDATE ktune.jobs SET state = $2, message = $3, updated_at = $4 WHERE id = $1)sql",
            pg::Params().Add(job_id).Add(JobStateName(state)).Add(message).Add(NowIso8601())));
    if (r.Changed() == 0) return absl::NotFoundError(StrCat("no job ", job_id));
    return tx.Commit();
  });
}

absl::Status PgStore::AddMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  if (r.ok() && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  return Retrying([&] { return AddMeasurementOnce(job_id, m); });
}

absl::Status PgStore::AddMeasurementOnce(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
  KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
  KTUNE_RETURN_IF_ERROR(conn_.Run(R"sql(
INSERT INTO ktune.measurements (job_id, seq, config_key, config, status, time_ms,
  objective, loss, median_ms, mean_ms, min_ms, max_ms, q1_ms, q3_ms,
  stddev_ms, samples, compile_ms, cost_ms, message, measured_at, conditions,
  samples_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
        $17, $18, $19, $20, $21, $22))sql",
                                  MeasurementParams(job_id, m)));
  const std::string now = NowIso8601();
  KTUNE_RETURN_IF_ERROR(conn_.Run(
      "UPDATE ktune.jobs SET evaluations = evaluations + 1, updated_at = $2 WHERE id = $1",
      pg::Params().Add(job_id).Add(now)));
  if (r.ok() && m.loss && std::isfinite(*m.loss)) {
    KTUNE_RETURN_IF_ERROR(conn_.Run(R"sql(
INSERT INTO ktune.best AS b (kernel_id, device_id, problem, objective, job_id,
                             config_key, config, time_ms, objective_value, loss, updated_at)
SELECT kernel_id, device_id, problem, objective, id, $2, $3, $4, $5, $6, $7
FROM ktune.jobs WHERE id = $1
ON CONFLICT (kernel_id, device_id, problem, objective) DO UPDATE SET
  job_id = excluded.job_id, config_key = excluded.config_key,
  config = excluded.config, time_ms = excluded.time_ms,
  objective_value = excluded.objective_value, loss = excluded.loss,
  updated_at = excluded.updated_at
WHERE excluded.loss < b.loss)sql",
                                    pg::Params()
                                        .Add(job_id)
                                        .Add(m.key)
                                        .Add(m.config_json)
                                        .Add(r.time.count())
                                        .Add(m.objective)
                                        .Add(*m.loss)
                                        .Add(now)));
  }
  return tx.Commit();
}

absl::Status PgStore::UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  if (r.ok() && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  return Retrying([&]() -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
    KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
    // $2 (the sequence, kept) and $4 (the configuration) are the insert's;
    // PostgreSQL wants every parameter typed, hence their casts.
    KTUNE_ASSIGN_OR_RETURN(pg::Result u, conn_.Exec(R"sql(
UPDATE ktune.measurements SET status = $5, time_ms = $6, objective = $7, loss = $8,
  median_ms = $9, mean_ms = $10, min_ms = $11, max_ms = $12, q1_ms = $13,
  q3_ms = $14, stddev_ms = $15, samples = $16, compile_ms = $17, cost_ms = $18,
  message = $19, measured_at = $20, conditions = $21, samples_ms = $22
WHERE job_id = $1 AND config_key = $3 AND $2::bigint IS NOT NULL AND $4::text IS NOT NULL)sql",
                                                    MeasurementParams(job_id, m)));
    if (u.Changed() == 0) {
      return absl::NotFoundError(StrCat("job ", job_id, " has no measurement of ", m.key));
    }
    return tx.Commit();
  });
}

absl::Status PgStore::RefreshBest(const std::string& job_id) {
  return Retrying([&] { return RefreshBestOnce(job_id); });
}

absl::Status PgStore::RefreshBestOnce(const std::string& job_id) {
  KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
  KTUNE_RETURN_IF_ERROR(conn_.Run(R"sql(
DELETE FROM ktune.best WHERE (kernel_id, device_id, problem, objective) =
  (SELECT kernel_id, device_id, problem, objective FROM ktune.jobs WHERE id = $1))sql",
                                  pg::Params().Add(job_id)));
  KTUNE_RETURN_IF_ERROR(conn_.Run(R"sql(
INSERT INTO ktune.best (kernel_id, device_id, problem, objective, job_id, config_key,
                        config, time_ms, objective_value, loss, updated_at)
SELECT j.kernel_id, j.device_id, j.problem, j.objective, m.job_id, m.config_key,
       m.config, m.time_ms, m.objective, m.loss, $2
FROM ktune.measurements m JOIN ktune.jobs j ON j.id = m.job_id
WHERE (j.kernel_id, j.device_id, j.problem, j.objective) =
      (SELECT kernel_id, device_id, problem, objective FROM ktune.jobs WHERE id = $1)
  AND m.status = 'ok' AND m.loss IS NOT NULL
ORDER BY m.loss, m.job_id, m.seq LIMIT 1)sql",
                                  pg::Params().Add(job_id).Add(NowIso8601())));
  return tx.Commit();
}

absl::StatusOr<std::vector<StoredMeasurement>> PgStore::LoadMeasurements(
    const std::string& job_id) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT )sql" + std::string(rows::kMeasurementColumns) +
                                                      R"sql(
FROM ktune.measurements WHERE job_id = $1 ORDER BY seq)sql",
                                                  pg::Params().Add(job_id)));
  std::vector<StoredMeasurement> out;
  out.reserve(static_cast<std::size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    KTUNE_ASSIGN_OR_RETURN(StoredMeasurement m, rows::Measurement(r.At(i), job_id));
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::map<std::string, StoredMeasurement>> PgStore::LoadBestOfJobs(
    const std::vector<std::string>& job_ids) {
  std::map<std::string, StoredMeasurement> out;
  if (job_ids.empty()) return out;
  KTUNE_ASSIGN_OR_RETURN(pg::Result r,
                         conn_.Exec(KTUNE_BEST_OF_JOBS("ktune.", "job_id = ANY($1::text[])"),
                                    pg::Params().Add(pg::ArrayLiteral(job_ids))));
  for (int i = 0; i < r.rows(); ++i) {
    const std::string job = r.Text(i, 21);
    KTUNE_ASSIGN_OR_RETURN(StoredMeasurement m, rows::Measurement(r.At(i), job));
    out.emplace(job, std::move(m));
  }
  return out;
}

absl::StatusOr<JobRecord> PgStore::GetJob(const std::string& id_or_prefix) {
  if (id_or_prefix.empty()) return absl::InvalidArgumentError("empty job id");
  KTUNE_ASSIGN_OR_RETURN(pg::Result exact, conn_.Exec(StrCat(kJobColumns, " WHERE j.id = $1"),
                                                      pg::Params().Add(id_or_prefix)));
  KTUNE_ASSIGN_OR_RETURN(std::vector<JobRecord> found, ReadJobs(exact));
  if (found.empty()) {
    KTUNE_ASSIGN_OR_RETURN(
        pg::Result prefix,
        conn_.Exec(StrCat(kJobColumns, " WHERE left(j.id, length($1)) = $1 ORDER BY j.id LIMIT 2"),
                   pg::Params().Add(id_or_prefix)));
    KTUNE_ASSIGN_OR_RETURN(found, ReadJobs(prefix));
  }
  if (found.empty()) return absl::NotFoundError(StrCat("no job ", id_or_prefix));
  if (found.size() > 1) {
    return absl::InvalidArgumentError(StrCat("job id prefix ", id_or_prefix, " is ambiguous"));
  }
  return std::move(found[0]);
}

absl::StatusOr<std::vector<JobRecord>> PgStore::ListJobs() {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r,
                         conn_.Exec(StrCat(kJobColumns, " ORDER BY j.created_at DESC, j.id")));
  return ReadJobs(r);
}

absl::StatusOr<std::vector<BestRecord>> PgStore::FindBest(
    const std::string& kernel_name, const std::optional<std::string>& device,
    const std::optional<Problem>& problem, const std::optional<std::string>& objective) {
  std::string sql = StrCat("SELECT ", rows::kBestColumns, R"sql(
FROM ktune.best b JOIN ktune.kernels k ON k.id = b.kernel_id
                  JOIN ktune.devices d ON d.id = b.device_id
WHERE k.name = $1)sql");
  pg::Params p;
  p.Add(kernel_name);
  if (device) {
    p.Add(*device);
    sql += StrCat(" AND (d.name = $", p.size(), " OR d.locator = $", p.size(), " OR d.uuid = $",
                  p.size(), ")");
  }
  if (problem) {
    p.Add(ProblemToJson(*problem));
    sql += StrCat(" AND b.problem = $", p.size());
  }
  if (objective) {
    p.Add(*objective);
    sql += StrCat(" AND b.objective = $", p.size());
  }
  // Byte order, as SQLite sorts text.
  sql += " ORDER BY d.name COLLATE \"C\", b.problem COLLATE \"C\", b.objective COLLATE \"C\"";
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(sql, p));
  std::vector<BestRecord> out;
  for (int i = 0; i < r.rows(); ++i) {
    KTUNE_ASSIGN_OR_RETURN(BestRecord b, rows::Best(r.At(i)));
    out.push_back(std::move(b));
  }
  return out;
}

absl::StatusOr<std::string> PgStore::KnownArchitecture(const std::string& device) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT architecture FROM ktune.devices
WHERE (name = $1 OR locator = $1 OR uuid = $1) AND architecture <> '' ORDER BY id LIMIT 1)sql",
                                                  pg::Params().Add(device)));
  return r.rows() > 0 ? r.Text(0, 0) : std::string();
}

absl::StatusOr<std::vector<PriorMeasurement>> PgStore::LoadPriorMeasurements(
    const std::string& kernel_name, const std::vector<std::string>& parameters,
    const std::string& objective, const std::string& exclude_job_id, std::int64_t limit,
    const std::string& measured_before) {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT m.job_id, m.config_key, m.status, m.loss
FROM ktune.measurements m JOIN ktune.jobs j ON j.id = m.job_id
                          JOIN ktune.kernels k ON k.id = j.kernel_id
WHERE k.name = $1 AND k.parameters = $2 AND j.objective = $3 AND j.id <> $4
  AND m.status <> 'invalid_by_constraint' AND ($6 = '' OR m.measured_at <= $6)
ORDER BY j.created_at DESC, j.id, m.seq
LIMIT $5)sql",
                                                  pg::Params()
                                                      .Add(kernel_name)
                                                      .Add(StrJoin(parameters, ","))
                                                      .Add(objective)
                                                      .Add(exclude_job_id)
                                                      .Add(limit)
                                                      .Add(measured_before)));
  std::vector<PriorMeasurement> out;
  for (int i = 0; i < r.rows(); ++i) {
    KTUNE_ASSIGN_OR_RETURN(PriorMeasurement m, rows::Prior(r.At(i)));
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::int64_t> PgStore::ChangeCount() {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec("SELECT n FROM ktune.changes WHERE id = 1"));
  if (r.rows() != 1) return absl::DataLossError(StrCat(name_, ": ktune.changes has no row"));
  return r.Int(0, 0);
}

absl::StatusOr<std::map<JobState, std::int64_t>> PgStore::CountJobs() {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT state, CASE WHEN state = 'running' THEN runner ELSE '' END,
       state = 'running' AND COALESCE(lease_until < now(), false), count(*)
FROM ktune.jobs GROUP BY 1, 2, 3)sql"));
  std::map<JobState, std::int64_t> counts;
  for (int i = 0; i < r.rows(); ++i) {
    KTUNE_RETURN_IF_ERROR(
        AddJobCount(counts, r.Text(i, 0), r.Text(i, 1), r.Int(i, 3), r.Text(i, 2) == "t"));
  }
  return counts;
}

absl::StatusOr<std::int64_t> PgStore::SizeBytes() {
  KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'ktune' AND c.relkind = 'r')sql"));
  return r.Int(0, 0);
}

absl::Status PgStore::CheckIntegrity() {
  KTUNE_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, ListJobs());
  for (const JobRecord& j : jobs) {
    KTUNE_RETURN_IF_ERROR(LoadMeasurements(j.id).status());
  }
  KTUNE_ASSIGN_OR_RETURN(pg::Result k, conn_.Exec("SELECT DISTINCT name FROM ktune.kernels"));
  for (int i = 0; i < k.rows(); ++i) {
    KTUNE_RETURN_IF_ERROR(
        FindBest(k.Text(i, 0), std::nullopt, std::nullopt, std::nullopt).status());
  }
  return absl::OkStatus();
}

}  // namespace ktune
