#include "tuner/store/store.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/json.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"

namespace ktune {

namespace {

// 'ktun' in PRAGMA application_id marks a ktune database.
constexpr std::int64_t kApplicationId = 0x6b74756e;

constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  uuid TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  architecture TEXT NOT NULL DEFAULT '',
  driver TEXT NOT NULL DEFAULT '',
  memory_bytes INTEGER NOT NULL DEFAULT 0,
  multiprocessors INTEGER NOT NULL DEFAULT 0,
  simulated INTEGER NOT NULL DEFAULT 0,
  locator TEXT NOT NULL DEFAULT ''
);
CREATE TABLE kernels (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  source_hash TEXT NOT NULL,
  parameters TEXT NOT NULL,
  UNIQUE (name, source_hash, parameters)
);
CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  kernel_id INTEGER NOT NULL REFERENCES kernels(id),
  device_id INTEGER NOT NULL REFERENCES devices(id),
  problem TEXT NOT NULL,
  spec BLOB NOT NULL,
  spec_json TEXT NOT NULL,
  strategy TEXT NOT NULL,
  seed INTEGER NOT NULL,
  objective TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'succeeded',
                                       'failed', 'cancelled', 'interrupted')),
  message TEXT NOT NULL DEFAULT '',
  evaluations INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX jobs_kernel ON jobs(kernel_id);
CREATE TABLE measurements (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  config_key TEXT NOT NULL,
  config TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'invalid_by_constraint',
      'compile_error', 'launch_error', 'runtime_fault', 'timeout',
      'wrong_result')),
  time_ms REAL,
  objective REAL,
  loss REAL,
  median_ms REAL,
  mean_ms REAL,
  min_ms REAL,
  max_ms REAL,
  q1_ms REAL,
  q3_ms REAL,
  stddev_ms REAL,
  samples INTEGER NOT NULL DEFAULT 0,
  compile_ms REAL NOT NULL DEFAULT 0,
  cost_ms REAL NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  measured_at TEXT NOT NULL,
  PRIMARY KEY (job_id, config_key),
  UNIQUE (job_id, seq),
  CHECK ((status = 'ok') = (time_ms IS NOT NULL))
);
CREATE TABLE best (
  kernel_id INTEGER NOT NULL REFERENCES kernels(id),
  device_id INTEGER NOT NULL REFERENCES devices(id),
  problem TEXT NOT NULL,
  objective TEXT NOT NULL,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  config_key TEXT NOT NULL,
  config TEXT NOT NULL,
  time_ms REAL NOT NULL,
  objective_value REAL,
  loss REAL NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (kernel_id, device_id, problem, objective)
);
)sql"},
    // How each measurement was taken (clocks, throttling, launches per
    // sample, racing, the final round) and its raw samples.
    {2, R"sql(
ALTER TABLE measurements ADD COLUMN conditions TEXT NOT NULL DEFAULT '{}';
ALTER TABLE measurements ADD COLUMN samples_ms TEXT NOT NULL DEFAULT '[]';
)sql"},
    // Who submitted each job (a daemon resumes only its own) and its
    // scheduling priority.
    {3, R"sql(
ALTER TABLE jobs ADD COLUMN origin TEXT NOT NULL DEFAULT 'local';
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
)sql"},
    // The process that runs a running job (ProcessName::Encode), so that a
    // job whose process died reads as interrupted and a job still running
    // elsewhere is not run twice at once.
    {4, R"sql(
ALTER TABLE jobs ADD COLUMN runner TEXT NOT NULL DEFAULT '';
)sql"},
};

constexpr const char* kJobColumns = R"sql(
SELECT j.id, k.name, k.source_hash, k.parameters, d.locator, d.name,
       d.architecture, d.uuid, d.memory_bytes, d.driver, d.multiprocessors,
       d.simulated, j.problem, j.spec, j.spec_json, j.strategy, j.seed,
       j.objective, j.state, j.message, j.evaluations, j.created_at,
       j.updated_at, j.origin, j.priority, j.runner
FROM jobs j JOIN kernels k ON k.id = j.kernel_id
            JOIN devices d ON d.id = j.device_id)sql";

// The device columns, selected in this order from `first` on: d.locator,
// d.name, d.architecture, d.uuid, d.memory_bytes, d.driver,
// d.multiprocessors, d.simulated.
DeviceInfo ReadDevice(const sqlite::Statement& s, int first) {
  DeviceInfo d;
  d.id = s.Text(first);
  d.name = s.Text(first + 1);
  d.architecture = s.Text(first + 2);
  d.uuid = s.Text(first + 3);
  d.memory_bytes = s.Int(first + 4);
  d.driver = s.Text(first + 5);
  d.multiprocessors = static_cast<int>(s.Int(first + 6));
  d.simulated = s.Int(first + 7) != 0;
  return d;
}

std::optional<double> FiniteOrNull(double v) {
  if (std::isfinite(v)) return v;
  return std::nullopt;
}

}  // namespace

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

std::span<const Migration> SchemaMigrations() { return kMigrations; }

struct Store::Statements {
  sqlite::Statement upsert_device;
  sqlite::Statement upsert_kernel;
  sqlite::Statement insert_job;
  sqlite::Statement get_job;
  sqlite::Statement get_job_prefix;
  sqlite::Statement list_jobs;
  sqlite::Statement set_state;
  sqlite::Statement get_runner;
  sqlite::Statement set_runner;
  sqlite::Statement insert_measurement;
  sqlite::Statement bump_evaluations;
  sqlite::Statement upsert_best;
  sqlite::Statement load_measurements;
  sqlite::Statement update_measurement;
  sqlite::Statement delete_best;
  sqlite::Statement insert_best;
};

Store::Store(sqlite::Db db) : db_(std::move(db)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

absl::StatusOr<sqlite::Db> OpenMigrated(const std::string& path, bool create,
                                        std::span<const Migration> migrations, int* version_out) {
  absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path, create);
  if (!db.ok()) return db.status();
  sqlite::Db& d = *db;
  sqlite3_busy_timeout(d.get(), 5000);
  auto with_path = [&](const absl::Status& s) {
    return absl::Status(s.code(), StrCat(path, ": ", s.message()));
  };
  auto not_sqlite = [&](const absl::Status& s) {
    return absl::FailedPreconditionError(
        StrCat(path, ": not a SQLite database (", s.message(), "); nothing was changed"));
  };
  // The first read tells whether this is SQLite at all.
  int version = 0;
  {
    absl::StatusOr<sqlite::Statement> q = d.Prepare(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_schema)");
    if (!q.ok()) {
      return q.status().code() == absl::StatusCode::kDataLoss ? not_sqlite(q.status())
                                                              : with_path(q.status());
    }
    absl::StatusOr<bool> row = q->Step();
    if (!row.ok()) {
      return row.status().code() == absl::StatusCode::kDataLoss ? not_sqlite(row.status())
                                                                : with_path(row.status());
    }
    const std::int64_t app_id = q->Int(0);
    version = static_cast<int>(q->Int(1));
    const std::int64_t tables = q->Int(2);
    if (app_id != kApplicationId && !(app_id == 0 && version == 0 && tables == 0)) {
      return absl::FailedPreconditionError(
          StrCat(path, ": not a ktune database (it holds other data); nothing was changed"));
    }
  }
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  if (version > latest) {
    return absl::FailedPreconditionError(StrCat(path, ": schema version ", version,
                                                " is newer than this ktune knows (", latest,
                                                "); use a newer ktune. Nothing was changed."));
  }
  // Switching a new file to WAL needs it alone: while another connection
  // creates the same file SQLite may answer busy at once, without waiting
  // (the busy handler cannot break that tie), so wait here, a while.
  for (int attempt = 0;; ++attempt) {
    absl::Status s = d.Exec("PRAGMA journal_mode=WAL");
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kUnavailable || attempt >= 500) return with_path(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + attempt % 10));
  }
  if (absl::Status s = d.Exec("PRAGMA foreign_keys=ON"); !s.ok()) return with_path(s);
  if (absl::Status s = d.Exec("PRAGMA synchronous=NORMAL"); !s.ok()) return with_path(s);
  if (version < latest) {
    // Another process may be opening the same new file: the version read
    // above is only a hint. Under the write lock, read it again and apply
    // what is still missing, all or nothing.
    absl::StatusOr<sqlite::Transaction> tx = sqlite::Transaction::Begin(d);
    if (!tx.ok()) return with_path(tx.status());
    {
      absl::StatusOr<sqlite::Statement> q =
          d.Prepare("SELECT user_version FROM pragma_user_version");
      if (!q.ok()) return with_path(q.status());
      absl::StatusOr<bool> row = q->Step();
      if (!row.ok()) return with_path(row.status());
      version = static_cast<int>(q->Int(0));
    }
    for (const Migration& m : migrations) {
      if (m.version <= version) continue;
      if (absl::Status s = d.Exec(m.sql); !s.ok()) {
        return with_path(absl::Status(
            s.code(), StrCat("migration to schema version ", m.version, ": ", s.message())));
      }
      absl::Status s = d.Exec(StrCat("PRAGMA user_version = ", m.version));
      if (s.ok()) s = d.Exec(StrCat("PRAGMA application_id = ", kApplicationId));
      if (!s.ok()) return with_path(s);
      version = m.version;
    }
    if (absl::Status s = tx->Commit(); !s.ok()) return with_path(s);
  }
  if (version_out != nullptr) *version_out = version;
  return db;
}

absl::StatusOr<Store> Store::Open(const std::string& path, bool create) {
  int version = 0;
  absl::StatusOr<sqlite::Db> db = OpenMigrated(path, create, SchemaMigrations(), &version);
  if (!db.ok()) return db.status();
  Store store(*std::move(db));
  store.path_ = path;
  store.schema_version_ = version;
  if (absl::Status s = store.PrepareStatements(); !s.ok()) {
    return absl::Status(s.code(), StrCat(path, ": ", s.message()));
  }
  return store;
}

absl::Status Store::PrepareStatements() {
  auto st = std::make_unique<Statements>();
  auto prep = [&](sqlite::Statement& out, std::string_view sql) -> absl::Status {
    absl::StatusOr<sqlite::Statement> s = db_.Prepare(sql);
    if (!s.ok()) return s.status();
    out = *std::move(s);
    return absl::OkStatus();
  };
  KTUNE_RETURN_IF_ERROR(prep(st->upsert_device, R"sql(
INSERT INTO devices (uuid, name, architecture, driver, memory_bytes,
                     multiprocessors, simulated, locator)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (uuid) DO UPDATE SET name = excluded.name,
  architecture = excluded.architecture, driver = excluded.driver,
  memory_bytes = excluded.memory_bytes,
  multiprocessors = excluded.multiprocessors, locator = excluded.locator
RETURNING id)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->upsert_kernel, R"sql(
INSERT INTO kernels (name, source_hash, parameters) VALUES (?1, ?2, ?3)
ON CONFLICT (name, source_hash, parameters) DO UPDATE SET name = excluded.name
RETURNING id)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->insert_job, R"sql(
INSERT INTO jobs (id, kernel_id, device_id, problem, spec, spec_json, strategy,
                  seed, objective, state, message, evaluations, created_at,
                  updated_at, origin, priority)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, '', 0, ?11, ?11, ?12, ?13)
ON CONFLICT (id) DO NOTHING)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->get_job, StrCat(kJobColumns, " WHERE j.id = ?1")));
  KTUNE_RETURN_IF_ERROR(prep(st->get_job_prefix, StrCat(kJobColumns,
                                                        " WHERE substr(j.id, 1, length(?1)) = ?1"
                                                        " ORDER BY j.id LIMIT 2")));
  KTUNE_RETURN_IF_ERROR(
      prep(st->list_jobs, StrCat(kJobColumns, " ORDER BY j.created_at DESC, j.id")));
  KTUNE_RETURN_IF_ERROR(prep(st->set_state, R"sql(
UPDATE jobs SET state = ?2, message = ?3, updated_at = ?4 WHERE id = ?1)sql"));
  KTUNE_RETURN_IF_ERROR(
      prep(st->get_runner, "SELECT runner FROM jobs WHERE id = ?1 AND state = 'running'"));
  KTUNE_RETURN_IF_ERROR(prep(st->set_runner, "UPDATE jobs SET runner = ?2 WHERE id = ?1"));
  KTUNE_RETURN_IF_ERROR(prep(st->insert_measurement, R"sql(
INSERT INTO measurements (job_id, seq, config_key, config, status, time_ms,
  objective, loss, median_ms, mean_ms, min_ms, max_ms, q1_ms, q3_ms,
  stddev_ms, samples, compile_ms, cost_ms, message, measured_at, conditions,
  samples_ms)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
        ?17, ?18, ?19, ?20, ?21, ?22))sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->update_measurement, R"sql(
UPDATE measurements SET status = ?5, time_ms = ?6, objective = ?7, loss = ?8,
  median_ms = ?9, mean_ms = ?10, min_ms = ?11, max_ms = ?12, q1_ms = ?13,
  q3_ms = ?14, stddev_ms = ?15, samples = ?16, compile_ms = ?17, cost_ms = ?18,
  message = ?19, measured_at = ?20, conditions = ?21, samples_ms = ?22
WHERE job_id = ?1 AND config_key = ?3)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->delete_best, R"sql(
DELETE FROM best WHERE (kernel_id, device_id, problem, objective) =
  (SELECT kernel_id, device_id, problem, objective FROM jobs WHERE id = ?1))sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->insert_best, R"sql(
INSERT INTO best (kernel_id, device_id, problem, objective, job_id, config_key,
                  config, time_ms, objective_value, loss, updated_at)
SELECT j.kernel_id, j.device_id, j.problem, j.objective, m.job_id, m.config_key,
       m.config, m.time_ms, m.objective, m.loss, ?2
FROM measurements m JOIN jobs j ON j.id = m.job_id
WHERE (j.kernel_id, j.device_id, j.problem, j.objective) =
      (SELECT kernel_id, device_id, problem, objective FROM jobs WHERE id = ?1)
  AND m.status = 'ok' AND m.loss IS NOT NULL
ORDER BY m.loss, m.job_id, m.seq LIMIT 1)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->bump_evaluations, R"sql(
UPDATE jobs SET evaluations = evaluations + 1, updated_at = ?2 WHERE id = ?1)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->upsert_best, R"sql(
INSERT INTO best (kernel_id, device_id, problem, objective, job_id, config_key,
                  config, time_ms, objective_value, loss, updated_at)
SELECT kernel_id, device_id, problem, objective, id, ?2, ?3, ?4, ?5, ?6, ?7
FROM jobs WHERE id = ?1
ON CONFLICT (kernel_id, device_id, problem, objective) DO UPDATE SET
  job_id = excluded.job_id, config_key = excluded.config_key,
  config = excluded.config, time_ms = excluded.time_ms,
  objective_value = excluded.objective_value, loss = excluded.loss,
  updated_at = excluded.updated_at
WHERE excluded.loss < best.loss)sql"));
  KTUNE_RETURN_IF_ERROR(prep(st->load_measurements, R"sql(
SELECT seq, config_key, config, status, time_ms, objective, loss, median_ms,
       mean_ms, min_ms, max_ms, q1_ms, q3_ms, stddev_ms, samples, compile_ms,
       cost_ms, message, measured_at, conditions, samples_ms
FROM measurements WHERE job_id = ?1 ORDER BY seq)sql"));
  stmts_ = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<std::int64_t> Store::UpsertDevice(const DeviceInfo& device) {
  sqlite::Statement& s = stmts_->upsert_device;
  s.Bind(1, std::string_view(device.uuid))
      .Bind(2, std::string_view(device.name))
      .Bind(3, std::string_view(device.architecture))
      .Bind(4, std::string_view(device.driver))
      .Bind(5, device.memory_bytes)
      .Bind(6, std::int64_t{device.multiprocessors})
      .Bind(7, std::int64_t{device.simulated ? 1 : 0})
      .Bind(8, std::string_view(device.id));
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) {
    s.Reset();
    return row.status();
  }
  const std::int64_t id = s.Int(0);
  s.Reset();
  return id;
}

absl::StatusOr<std::int64_t> Store::UpsertKernel(const JobRecord& job) {
  sqlite::Statement& s = stmts_->upsert_kernel;
  const std::string params = StrJoin(job.parameters, ",");
  s.Bind(1, std::string_view(job.kernel_name))
      .Bind(2, std::string_view(job.source_hash))
      .Bind(3, std::string_view(params));
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) {
    s.Reset();
    return row.status();
  }
  const std::int64_t id = s.Int(0);
  s.Reset();
  return id;
}

absl::StatusOr<JobRecord> Store::ReadJob(sqlite::Statement& s) {
  JobRecord j;
  j.id = s.Text(0);
  j.kernel_name = s.Text(1);
  j.source_hash = s.Text(2);
  const std::string params = s.Text(3);
  if (!params.empty()) j.parameters = StrSplit(params, ',');
  j.device = ReadDevice(s, 4);
  KTUNE_ASSIGN_OR_RETURN(j.problem, ProblemFromJson(s.Text(12)));
  j.spec = s.Blob(13);
  j.spec_json = s.Text(14);
  j.strategy = s.Text(15);
  j.seed = static_cast<std::uint64_t>(s.Int(16));
  j.objective = s.Text(17);
  std::optional<JobState> state = ParseJobState(s.Text(18));
  if (!state) return absl::DataLossError(StrCat("job ", j.id, ": unknown state"));
  j.state = *state;
  j.message = s.Text(19);
  j.evaluations = s.Int(20);
  j.created_at = s.Text(21);
  j.updated_at = s.Text(22);
  j.origin = s.Text(23);
  j.priority = static_cast<int>(s.Int(24));
  j.runner = s.Text(25);
  // A job left running by a process of this host that has ended (killed,
  // crashed, or from before a reboot) is not running: say so.
  if (j.state == JobState::kRunning && LivenessOf(j.runner) == Liveness::kGone) {
    j.state = JobState::kInterrupted;
    const std::optional<ProcessName> was = ProcessName::Decode(j.runner);
    j.message = StrCat("its process (", was ? was->Describe() : "?",
                       ") ended without recording the job's end; ",
                       j.origin == "daemon" ? "ktuned resumes it when it starts again"
                                            : "run the same job again to resume it");
  }
  return j;
}

bool RunByAnotherProcess(const std::string& runner) {
  const std::optional<ProcessName> self = ThisProcess();
  return !runner.empty() && (!self || runner != self->Encode()) &&
         LivenessOf(runner) == Liveness::kAlive;
}

absl::StatusOr<JobRecord> Store::StartJob(const JobRecord& job, bool* resumed) {
  return RecordJob(job, JobState::kRunning, resumed);
}

absl::StatusOr<JobRecord> Store::QueueJob(const JobRecord& job, bool* existed) {
  return RecordJob(job, JobState::kQueued, existed);
}

absl::StatusOr<JobRecord> Store::RecordJob(const JobRecord& job, JobState state, bool* existed) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  const std::optional<ProcessName> self = ThisProcess();
  const std::string runner = self ? self->Encode() : "";
  if (state == JobState::kRunning) {
    // Never two processes on one job: a job that a live process of this
    // host runs is refused (a dead one's job is taken over).
    sqlite::Statement& g = stmts_->get_runner;
    g.Bind(1, std::string_view(job.id));
    absl::StatusOr<bool> row = g.Step();
    const std::string other = row.ok() && *row ? g.Text(0) : "";
    g.Reset();
    if (!row.ok()) return row.status();
    if (RunByAnotherProcess(other)) {
      return absl::FailedPreconditionError(
          StrCat("job ", job.id, " is already running (", ProcessName::Decode(other)->Describe(),
                 "); wait for it to end, or stop that process and run the job again to resume "
                 "it"));
    }
  }
  KTUNE_ASSIGN_OR_RETURN(const std::int64_t device_id, UpsertDevice(job.device));
  KTUNE_ASSIGN_OR_RETURN(const std::int64_t kernel_id, UpsertKernel(job));
  const std::string now = NowIso8601();
  const std::string problem = ProblemToJson(job.problem);
  sqlite::Statement& ins = stmts_->insert_job;
  ins.Bind(1, std::string_view(job.id))
      .Bind(2, kernel_id)
      .Bind(3, device_id)
      .Bind(4, std::string_view(problem))
      .BindBlob(5, job.spec)
      .Bind(6, std::string_view(job.spec_json))
      .Bind(7, std::string_view(job.strategy))
      .Bind(8, static_cast<std::int64_t>(job.seed))
      .Bind(9, std::string_view(job.objective))
      .Bind(10, std::string_view(JobStateName(state)))
      .Bind(11, std::string_view(now))
      .Bind(12, std::string_view(job.origin))
      .Bind(13, static_cast<std::int64_t>(job.priority));
  KTUNE_RETURN_IF_ERROR(ins.Run());
  const bool inserted = sqlite3_changes(db_.get()) > 0;
  if (!inserted) {
    sqlite::Statement& up = stmts_->set_state;
    up.Bind(1, std::string_view(job.id))
        .Bind(2, std::string_view(JobStateName(state)))
        .Bind(3, std::string_view(""))
        .Bind(4, std::string_view(now));
    KTUNE_RETURN_IF_ERROR(up.Run());
  }
  sqlite::Statement& r = stmts_->set_runner;
  r.Bind(1, std::string_view(job.id))
      .Bind(2, std::string_view(state == JobState::kRunning ? runner : ""));
  KTUNE_RETURN_IF_ERROR(r.Run());
  KTUNE_RETURN_IF_ERROR(tx.Commit());
  if (existed != nullptr) *existed = !inserted;
  return GetJob(job.id);
}

absl::Status Store::SetJobState(const std::string& job_id, JobState state,
                                const std::string& message) {
  sqlite::Statement& s = stmts_->set_state;
  const std::string now = NowIso8601();
  s.Bind(1, std::string_view(job_id))
      .Bind(2, std::string_view(JobStateName(state)))
      .Bind(3, std::string_view(message))
      .Bind(4, std::string_view(now));
  KTUNE_RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(StrCat("no job ", job_id));
  }
  return absl::OkStatus();
}

namespace {

// Binds parameters ?1..?22 of the insert and update statements.
void BindMeasurement(sqlite::Statement& st, const std::string& job_id, const StoredMeasurement& m,
                     const std::string& conditions, const std::string& samples) {
  const Measurement& r = m.measurement;
  const bool ok = r.ok();
  const bool has_stats = r.stats.samples > 0;
  auto stat = [&](Millis v) -> std::optional<double> {
    if (!has_stats) return std::nullopt;
    return FiniteOrNull(v.count());
  };
  st.Bind(1, std::string_view(job_id))
      .Bind(2, m.sequence)
      .Bind(3, std::string_view(m.key))
      .Bind(4, std::string_view(m.config_json))
      .Bind(5, std::string_view(CandidateStatusName(r.status)))
      .Bind(6, ok ? std::optional<double>(r.time.count()) : std::nullopt)
      .Bind(7, ok ? m.objective : std::nullopt)
      .Bind(8, ok ? m.loss : std::nullopt)
      .Bind(9, stat(r.stats.median))
      .Bind(10, stat(r.stats.mean))
      .Bind(11, stat(r.stats.min))
      .Bind(12, stat(r.stats.max))
      .Bind(13, stat(r.stats.q1))
      .Bind(14, stat(r.stats.q3))
      .Bind(15, stat(r.stats.stddev))
      .Bind(16, std::int64_t{r.stats.samples})
      .Bind(17, FiniteOrNull(r.compile_time.count()).value_or(0))
      .Bind(18, FiniteOrNull(r.cost.count()).value_or(0))
      .Bind(19, std::string_view(r.message))
      .Bind(20, std::string_view(m.measured_at.empty() ? NowIso8601() : m.measured_at))
      .Bind(21, std::string_view(conditions))
      .Bind(22, std::string_view(samples));
}

}  // namespace

absl::Status Store::AddMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  const bool ok = r.ok();
  if (ok && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  sqlite::Statement& ins = stmts_->insert_measurement;
  BindMeasurement(ins, job_id, m, ConditionsToJson(r.conditions), SamplesToJson(r.samples_ms));
  KTUNE_RETURN_IF_ERROR(ins.Run());
  const std::string now = NowIso8601();
  sqlite::Statement& bump = stmts_->bump_evaluations;
  bump.Bind(1, std::string_view(job_id)).Bind(2, std::string_view(now));
  KTUNE_RETURN_IF_ERROR(bump.Run());
  if (ok && m.loss && std::isfinite(*m.loss)) {
    sqlite::Statement& best = stmts_->upsert_best;
    best.Bind(1, std::string_view(job_id))
        .Bind(2, std::string_view(m.key))
        .Bind(3, std::string_view(m.config_json))
        .Bind(4, r.time.count())
        .Bind(5, m.objective)
        .Bind(6, *m.loss)
        .Bind(7, std::string_view(now));
    KTUNE_RETURN_IF_ERROR(best.Run());
  }
  return tx.Commit();
}

absl::Status Store::UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  if (r.ok() && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  sqlite::Statement& up = stmts_->update_measurement;
  BindMeasurement(up, job_id, m, ConditionsToJson(r.conditions), SamplesToJson(r.samples_ms));
  KTUNE_RETURN_IF_ERROR(up.Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(StrCat("job ", job_id, " has no measurement of ", m.key));
  }
  return absl::OkStatus();
}

absl::Status Store::RefreshBest(const std::string& job_id) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  sqlite::Statement& del = stmts_->delete_best;
  del.Bind(1, std::string_view(job_id));
  KTUNE_RETURN_IF_ERROR(del.Run());
  const std::string now = NowIso8601();
  sqlite::Statement& ins = stmts_->insert_best;
  ins.Bind(1, std::string_view(job_id)).Bind(2, std::string_view(now));
  KTUNE_RETURN_IF_ERROR(ins.Run());
  return tx.Commit();
}

absl::StatusOr<std::vector<StoredMeasurement>> Store::LoadMeasurements(const std::string& job_id) {
  sqlite::Statement& s = stmts_->load_measurements;
  s.Bind(1, std::string_view(job_id));
  std::vector<StoredMeasurement> out;
  absl::Status status = s.ForEachRow([&]() -> absl::Status {
    StoredMeasurement m;
    m.sequence = s.Int(0);
    m.key = s.Text(1);
    m.config_json = s.Text(2);
    std::optional<CandidateStatus> parsed = ParseCandidateStatus(s.Text(3));
    if (!parsed) {
      return absl::DataLossError(
          StrCat("job ", job_id, ": measurement ", m.key, " has an unknown status"));
    }
    Measurement& r = m.measurement;
    r.status = *parsed;
    if (std::optional<double> t = s.OptionalDouble(4)) r.time = Millis(*t);
    m.objective = s.OptionalDouble(5);
    m.loss = s.OptionalDouble(6);
    auto ms = [&](int col) { return Millis(s.OptionalDouble(col).value_or(0)); };
    r.stats.median = ms(7);
    r.stats.mean = ms(8);
    r.stats.min = ms(9);
    r.stats.max = ms(10);
    r.stats.q1 = ms(11);
    r.stats.q3 = ms(12);
    r.stats.stddev = ms(13);
    r.stats.samples = static_cast<int>(s.Int(14));
    r.compile_time = Millis(s.Double(15));
    r.cost = Millis(s.Double(16));
    r.message = s.Text(17);
    m.measured_at = s.Text(18);
    auto damaged = [&](const absl::Status& st) {
      return absl::DataLossError(StrCat("job ", job_id, ": measurement ", m.key, ": ", st.message()));
    };
    absl::StatusOr<Conditions> conditions = ConditionsFromJson(s.Text(19));
    if (!conditions.ok()) return damaged(conditions.status());
    r.conditions = *std::move(conditions);
    absl::StatusOr<std::vector<double>> samples = SamplesFromJson(s.Text(20));
    if (!samples.ok()) return damaged(samples.status());
    r.samples_ms = *std::move(samples);
    out.push_back(std::move(m));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<JobRecord>> Store::ReadJobs(sqlite::Statement& stmt) {
  std::vector<JobRecord> out;
  absl::Status s = stmt.ForEachRow([&]() -> absl::Status {
    absl::StatusOr<JobRecord> j = ReadJob(stmt);
    if (!j.ok()) return j.status();
    out.push_back(*std::move(j));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<JobRecord> Store::GetJob(const std::string& id_or_prefix) {
  if (id_or_prefix.empty()) return absl::InvalidArgumentError("empty job id");
  sqlite::Statement& exact = stmts_->get_job;
  exact.Bind(1, std::string_view(id_or_prefix));
  KTUNE_ASSIGN_OR_RETURN(std::vector<JobRecord> found, ReadJobs(exact));
  if (found.empty()) {
    sqlite::Statement& prefix = stmts_->get_job_prefix;
    prefix.Bind(1, std::string_view(id_or_prefix));
    KTUNE_ASSIGN_OR_RETURN(found, ReadJobs(prefix));
  }
  if (found.empty()) return absl::NotFoundError(StrCat("no job ", id_or_prefix));
  if (found.size() > 1) {
    return absl::InvalidArgumentError(StrCat("job id prefix ", id_or_prefix, " is ambiguous"));
  }
  return std::move(found[0]);
}

absl::StatusOr<std::vector<JobRecord>> Store::ListJobs() { return ReadJobs(stmts_->list_jobs); }

absl::StatusOr<std::vector<BestRecord>> Store::FindBest(
    const std::string& kernel_name, const std::optional<std::string>& device,
    const std::optional<Problem>& problem, const std::optional<std::string>& objective) {
  // Filters are optional, so this statement is prepared per call.
  std::string sql = R"sql(
SELECT k.name, k.source_hash, d.locator, d.name, d.architecture, d.uuid,
       d.memory_bytes, d.driver, d.multiprocessors, d.simulated, b.problem,
       b.objective, b.job_id, b.config_key, b.config, b.time_ms,
       b.objective_value, b.loss, b.updated_at
FROM best b JOIN kernels k ON k.id = b.kernel_id
            JOIN devices d ON d.id = b.device_id
WHERE k.name = ?1)sql";
  if (device) sql += " AND (d.name = ?2 OR d.locator = ?2 OR d.uuid = ?2)";
  if (problem) sql += " AND b.problem = ?3";
  if (objective) sql += " AND b.objective = ?4";
  sql += " ORDER BY d.name, b.problem, b.objective";
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare(sql));
  s.Bind(1, std::string_view(kernel_name));
  if (device) s.Bind(2, std::string_view(*device));
  const std::string problem_json = problem ? ProblemToJson(*problem) : "";
  if (problem) s.Bind(3, std::string_view(problem_json));
  if (objective) s.Bind(4, std::string_view(*objective));
  std::vector<BestRecord> out;
  absl::Status status = s.ForEachRow([&]() -> absl::Status {
    BestRecord b;
    b.kernel_name = s.Text(0);
    b.source_hash = s.Text(1);
    b.device = ReadDevice(s, 2);
    KTUNE_ASSIGN_OR_RETURN(b.problem, ProblemFromJson(s.Text(10)));
    b.objective = s.Text(11);
    b.job_id = s.Text(12);
    b.key = s.Text(13);
    b.config_json = s.Text(14);
    b.time_ms = s.Double(15);
    b.objective_value = s.OptionalDouble(16);
    b.loss = s.Double(17);
    b.updated_at = s.Text(18);
    out.push_back(std::move(b));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

const char* BestMatchKindName(BestMatchKind kind) {
  switch (kind) {
    case BestMatchKind::kExact: return "exact";
    case BestMatchKind::kNearestProblem: return "nearest_problem";
    case BestMatchKind::kSameArchitecture: return "same_architecture";
  }
  return "?";
}

double ProblemDistance(const Problem& a, const Problem& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double sum = 0;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return std::numeric_limits<double>::infinity();
    const double d = std::log(static_cast<double>(std::max<std::int64_t>(ia->second, 1))) -
                     std::log(static_cast<double>(std::max<std::int64_t>(ib->second, 1)));
    sum += d * d;
  }
  return std::sqrt(sum);
}

absl::StatusOr<BestMatch> Store::FindBestMatch(const BestQuery& query) {
  KTUNE_ASSIGN_OR_RETURN(
      std::vector<BestRecord> all,
      FindBest(
          query.kernel, std::nullopt, std::nullopt,
          query.objective.empty() ? std::nullopt : std::optional<std::string>(query.objective)));
  BestQuery q = query;
  if (q.architecture.empty() && !q.device.empty() && q.device.rfind("sm_", 0) != 0) {
    // The store may know the device from other kernels' jobs.
    KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare(R"sql(
SELECT architecture FROM devices
WHERE (name = ?1 OR locator = ?1 OR uuid = ?1) AND architecture <> '' LIMIT 1)sql"));
    s.Bind(1, std::string_view(q.device));
    KTUNE_ASSIGN_OR_RETURN(const bool row, s.Step());
    if (row) q.architecture = s.Text(0);
  }
  return SelectBestMatch(std::move(all), q);
}

absl::StatusOr<BestMatch> SelectBestMatch(std::vector<BestRecord> all, const BestQuery& q) {
  std::erase_if(all, [&](const BestRecord& b) {
    return b.kernel_name != q.kernel || (!q.objective.empty() && b.objective != q.objective);
  });
  if (all.empty()) {
    return absl::NotFoundError(
        StrCat("no stored best configuration for kernel ", q.kernel,
               q.objective.empty() ? "" : StrCat(" (objective ", q.objective, ")")));
  }
  if (q.objective.empty()) {
    // One objective: "time" when there is one, else the first stored.
    std::string objective = all.front().objective;
    for (const BestRecord& b : all) {
      if (b.objective == "time") objective = "time";
    }
    std::erase_if(all, [&](const BestRecord& b) { return b.objective != objective; });
  }
  bool source_differs = false;
  if (!q.source_hash.empty()) {
    const bool any_same = std::any_of(all.begin(), all.end(), [&](const BestRecord& b) {
      return b.source_hash == q.source_hash;
    });
    if (any_same) {
      std::erase_if(all, [&](const BestRecord& b) { return b.source_hash != q.source_hash; });
    } else {
      source_differs = true;
    }
  }
  auto on_device = [&](const BestRecord& b) {
    return q.device.empty() || b.device.name == q.device || b.device.id == q.device ||
           b.device.uuid == q.device;
  };
  auto answer = [&](BestMatchKind kind, const BestRecord& b, double distance) {
    BestMatch m;
    m.kind = kind;
    m.best = b;
    m.source_differs = source_differs;
    m.distance = distance;
    return m;
  };
  // The exact problem, else the nearest, among records passing `keep`.
  auto pick = [&](auto keep, bool nearest) -> std::optional<std::pair<const BestRecord*, double>> {
    const BestRecord* found = nullptr;
    double best_distance = std::numeric_limits<double>::infinity();
    for (const BestRecord& b : all) {
      if (!keep(b)) continue;
      if (q.problem.empty() || b.problem == q.problem) return std::make_pair(&b, 0.0);
      if (!nearest) continue;
      const double d = ProblemDistance(q.problem, b.problem);
      if (d < best_distance) {
        best_distance = d;
        found = &b;
      }
    }
    if (found == nullptr) return std::nullopt;
    return std::make_pair(found, best_distance);
  };
  if (auto exact = pick(on_device, false)) {
    return answer(BestMatchKind::kExact, *exact->first, 0);
  }
  std::string architecture = q.architecture;
  if (!q.exact_only) {
    if (auto near = pick(on_device, true)) {
      return answer(BestMatchKind::kNearestProblem, *near->first, near->second);
    }
    if (architecture.empty() && q.device.rfind("sm_", 0) == 0) architecture = q.device;
    if (architecture.empty() && !q.device.empty()) {
      // A device some record was measured on.
      for (const BestRecord& b : all) {
        if (b.device.name == q.device || b.device.id == q.device || b.device.uuid == q.device) {
          architecture = b.device.architecture;
        }
      }
    }
    if (!architecture.empty()) {
      auto same_arch = [&](const BestRecord& b) { return b.device.architecture == architecture; };
      if (auto other = pick(same_arch, true)) {
        return answer(BestMatchKind::kSameArchitecture, *other->first, other->second);
      }
    }
  }
  std::vector<std::string> held;
  for (const BestRecord& b : all) {
    std::string h = StrCat(b.device.name, " ", ProblemToJson(b.problem));
    if (std::find(held.begin(), held.end(), h) == held.end()) held.push_back(std::move(h));
  }
  if (held.size() > 8) held.resize(8);
  return absl::NotFoundError(StrCat(
      "no stored best configuration for kernel ", q.kernel,
      q.device.empty() ? "" : StrCat(" on ", q.device),
      q.problem.empty() ? "" : StrCat(" for ", ProblemToJson(q.problem)),
      q.exact_only
          ? " (exact match asked)"
          : StrCat(
                " nor a nearby problem",
                architecture.empty() ? "" : StrCat(" nor a device of architecture ", architecture)),
      "; the store holds: ", StrJoin(held, "; ")));
}

absl::StatusOr<std::vector<PriorMeasurement>> Store::LoadPriorMeasurements(
    const std::string& kernel_name, const std::vector<std::string>& parameters,
    const std::string& objective, const std::string& exclude_job_id, std::int64_t limit,
    const std::string& measured_before) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare(R"sql(
SELECT m.job_id, m.config_key, m.status, m.loss
FROM measurements m JOIN jobs j ON j.id = m.job_id
                    JOIN kernels k ON k.id = j.kernel_id
WHERE k.name = ?1 AND k.parameters = ?2 AND j.objective = ?3 AND j.id <> ?4
  AND m.status <> 'invalid_by_constraint' AND (?6 = '' OR m.measured_at <= ?6)
ORDER BY j.created_at DESC, j.id, m.seq
LIMIT ?5)sql"));
  const std::string params = StrJoin(parameters, ",");
  s.Bind(1, std::string_view(kernel_name))
      .Bind(2, std::string_view(params))
      .Bind(3, std::string_view(objective))
      .Bind(4, std::string_view(exclude_job_id))
      .Bind(5, limit)
      .Bind(6, std::string_view(measured_before));
  std::vector<PriorMeasurement> out;
  absl::Status status = s.ForEachRow([&]() -> absl::Status {
    PriorMeasurement m;
    m.job_id = s.Text(0);
    m.key = s.Text(1);
    std::optional<CandidateStatus> parsed = ParseCandidateStatus(s.Text(2));
    if (!parsed) {
      return absl::DataLossError(
          StrCat("job ", m.job_id, ": measurement ", m.key, " has an unknown status"));
    }
    m.status = *parsed;
    m.loss = s.OptionalDouble(3);
    out.push_back(std::move(m));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::Status Store::CheckIntegrity() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare("PRAGMA integrity_check"));
  KTUNE_ASSIGN_OR_RETURN(const bool row, s.Step());
  if (!row) return absl::DataLossError(StrCat(path_, ": integrity_check returned nothing"));
  const std::string result = s.Text(0);
  if (result != "ok") {
    return absl::DataLossError(StrCat(path_, ": integrity_check: ", result));
  }
  return absl::OkStatus();
}

// ---- Merging another store ----

namespace {

// Replaces every occurrence of `from` in `text` with `to`.
std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (std::size_t at = text.find(from); at != std::string::npos;
       at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

void RemoveDatabaseFiles(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    std::remove(StrCat(path, suffix).c_str());
  }
}

// The column names of table main.`table`, in order.
absl::StatusOr<std::vector<std::string>> ColumnsOf(sqlite::Db& db, const std::string& table) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q,
                         db.Prepare("SELECT name FROM pragma_table_info(?1, 'main') ORDER BY cid"));
  q.Bind(1, std::string_view(table));
  std::vector<std::string> out;
  KTUNE_RETURN_IF_ERROR(q.ForEachRow([&]() -> absl::Status {
    out.push_back(q.Text(0));
    return absl::OkStatus();
  }));
  if (out.empty()) return absl::DataLossError(StrCat("no table main.", table));
  return out;
}

// "INSERT INTO main.T (columns) SELECT expressions FROM <from>": every
// column of the table but `skip`, each taken from alias `s` unless
// `overrides` gives its expression.
absl::StatusOr<std::string> CopyRowsSql(sqlite::Db& db, const std::string& table,
                                        const std::map<std::string, std::string>& overrides,
                                        const std::vector<std::string>& skip,
                                        const std::string& from) {
  KTUNE_ASSIGN_OR_RETURN(const std::vector<std::string> columns, ColumnsOf(db, table));
  std::vector<std::string> names, exprs;
  for (const std::string& c : columns) {
    if (std::find(skip.begin(), skip.end(), c) != skip.end()) continue;
    names.push_back(c);
    auto o = overrides.find(c);
    exprs.push_back(o != overrides.end() ? o->second : StrCat("s.", c));
  }
  return StrCat("INSERT INTO main.", table, " (", StrJoin(names, ", "), ") SELECT ",
                StrJoin(exprs, ", "), " FROM ", from);
}

}  // namespace

absl::StatusOr<std::int64_t> Store::DataVersion() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q, db_.Prepare("PRAGMA data_version"));
  KTUNE_ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) return absl::InternalError("PRAGMA data_version gave no row");
  return q.Int(0);
}

absl::StatusOr<MergeSource> MergeSource::Prepare(const std::string& path) {
  absl::StatusOr<sqlite::Db> from = sqlite::Db::OpenReadOnly(path);
  if (!from.ok()) return from.status();
  sqlite3_busy_timeout(from->get(), 5000);
  std::string dir = "/tmp";
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') dir = t;
  std::string copy = StrCat(dir, "/ktune-merge-XXXXXX");
  const int fd = mkstemp(copy.data());
  if (fd < 0) {
    return absl::InternalError(
        StrCat("cannot make a temporary copy of ", path, " in ", dir, ": ", std::strerror(errno)));
  }
  close(fd);
  MergeSource source(path, copy);  // removes the copy on any return below
  {
    absl::StatusOr<sqlite::Db> to = sqlite::Db::Open(copy, false);
    if (!to.ok()) return to.status();
    sqlite3_backup* b = sqlite3_backup_init(to->get(), "main", from->get(), "main");
    if (b == nullptr) return to->Error(StrCat("copying ", path), sqlite3_errcode(to->get()));
    const int rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
      const absl::Status s = from->Error(StrCat("reading ", path), rc);
      if (s.code() == absl::StatusCode::kDataLoss) {
        return absl::FailedPreconditionError(
            StrCat(path, ": not a SQLite database (", s.message(), "); nothing was changed"));
      }
      return s;
    }
  }
  // The copy is checked and migrated as any store is opened; its messages
  // name the original.
  absl::StatusOr<Store> store = Store::Open(copy, false);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        ReplaceAll(std::string(store.status().message()), copy, path));
  }
  // Every row is read as the store's readers will read it once merged, so
  // a damaged or forged source cannot leave the target unreadable.
  auto damaged = [&](const absl::Status& s) {
    return absl::FailedPreconditionError(StrCat(path, ": a damaged ktune database (",
                                                ReplaceAll(std::string(s.message()), copy, path),
                                                "); nothing was changed"));
  };
  std::vector<std::string> kernels;
  {
    absl::StatusOr<sqlite::Statement> q = store->db_.Prepare("SELECT DISTINCT name FROM kernels");
    if (!q.ok()) return damaged(q.status());
    absl::Status s = q->ForEachRow([&]() -> absl::Status {
      kernels.push_back(q->Text(0));
      return absl::OkStatus();
    });
    if (!s.ok()) return damaged(s);
  }
  absl::StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  if (!jobs.ok()) return damaged(jobs.status());
  for (const JobRecord& job : *jobs) {
    if (auto ms = store->LoadMeasurements(job.id); !ms.ok()) return damaged(ms.status());
  }
  for (const std::string& kernel : kernels) {
    if (auto b = store->FindBest(kernel, std::nullopt, std::nullopt, std::nullopt); !b.ok()) {
      return damaged(b.status());
    }
  }
  return source;
}

MergeSource::MergeSource(MergeSource&& other) noexcept
    : path_(std::move(other.path_)), copy_(std::move(other.copy_)) {
  other.copy_.clear();
}

MergeSource& MergeSource::operator=(MergeSource&& other) noexcept {
  if (this != &other) {
    if (!copy_.empty()) RemoveDatabaseFiles(copy_);
    path_ = std::move(other.path_);
    copy_ = std::move(other.copy_);
    other.copy_.clear();
  }
  return *this;
}

MergeSource::~MergeSource() {
  if (!copy_.empty()) RemoveDatabaseFiles(copy_);
}

absl::StatusOr<MergeStats> Store::Merge(const MergeSource& source) {
  // Statements of this connection must not hold the database while the
  // source is attached and detached.
  {
    KTUNE_ASSIGN_OR_RETURN(sqlite::Statement attach, db_.Prepare("ATTACH DATABASE ?1 AS src"));
    attach.Bind(1, std::string_view(source.copy_path()));
    KTUNE_RETURN_IF_ERROR(attach.Run());
  }
  absl::StatusOr<MergeStats> merged = MergeAttached(source.path());
  if (absl::Status s = db_.Exec("DETACH DATABASE src"); !s.ok() && merged.ok()) return s;
  if (!merged.ok()) {
    return absl::Status(merged.status().code(),
                        StrCat("merging ", source.path(), " into ", path_, ": ",
                               merged.status().message(), "; nothing was changed"));
  }
  return merged;
}

absl::StatusOr<MergeStats> Store::MergeAttached(const std::string& source_name) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  MergeStats stats;
  // Runs `sql` with ?1 bound to `text` when given; adds the rows changed
  // to *count.
  auto run = [&](const std::string& sql, std::int64_t* count,
                 std::optional<std::string_view> text = std::nullopt) -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(sqlite::Statement st, db_.Prepare(sql));
    if (text) st.Bind(1, *text);
    KTUNE_RETURN_IF_ERROR(st.Run());
    if (count != nullptr) *count += sqlite3_changes(db_.get());
    return absl::OkStatus();
  };
  // A job held by both that a live process here is running is its to
  // write: refuse rather than add measurements behind its back.
  {
    KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q, db_.Prepare(R"sql(
SELECT t.id, t.runner FROM main.jobs t JOIN src.jobs s ON s.id = t.id
WHERE t.state = 'running')sql"));
    absl::Status busy;
    KTUNE_RETURN_IF_ERROR(q.ForEachRow([&]() -> absl::Status {
      if (busy.ok() && RunByAnotherProcess(q.Text(1))) {
        busy = absl::FailedPreconditionError(StrCat("job ", q.Text(0), " is running here (",
                                                    ProcessName::Decode(q.Text(1))->Describe(),
                                                    "); merge after it ends"));
      }
      return absl::OkStatus();
    }));
    KTUNE_RETURN_IF_ERROR(busy);
  }
  for (const char* t : {"merge_kernel", "merge_device", "merge_new_jobs", "merge_rows"}) {
    KTUNE_RETURN_IF_ERROR(run(StrCat("DROP TABLE IF EXISTS temp.", t), nullptr));
  }
  // Devices by UUID and kernels by identity; what this store holds stays.
  KTUNE_ASSIGN_OR_RETURN(
      std::string sql,
      CopyRowsSql(db_, "devices", {}, {"id"},
                  "src.devices s WHERE s.uuid NOT IN (SELECT uuid FROM main.devices)"));
  KTUNE_RETURN_IF_ERROR(run(sql, &stats.devices));
  KTUNE_ASSIGN_OR_RETURN(sql, CopyRowsSql(db_, "kernels", {}, {"id"}, R"sql(src.kernels s
WHERE NOT EXISTS (SELECT 1 FROM main.kernels k WHERE k.name = s.name
                  AND k.source_hash = s.source_hash AND k.parameters = s.parameters))sql"));
  KTUNE_RETURN_IF_ERROR(run(sql, &stats.kernels));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_kernel AS
SELECT s.id AS src_id, k.id AS dst_id FROM src.kernels s
JOIN main.kernels k ON k.name = s.name AND k.source_hash = s.source_hash
                   AND k.parameters = s.parameters)sql",
                            nullptr));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_device AS
SELECT s.id AS src_id, d.id AS dst_id FROM src.devices s JOIN main.devices d ON d.uuid = s.uuid)sql",
                            nullptr));
  // Jobs by id. One that was running there has no process here.
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_new_jobs AS
SELECT id FROM src.jobs WHERE id NOT IN (SELECT id FROM main.jobs))sql",
                            nullptr));
  const std::string interrupted_message =
      StrCat("merged from ", source_name, " while it ran there; run it again to resume it");
  KTUNE_ASSIGN_OR_RETURN(
      sql,
      CopyRowsSql(db_, "jobs",
                  {{"kernel_id",
                    "(SELECT dst_id FROM temp.merge_kernel WHERE src_id = "
                    "s.kernel_id)"},
                   {"device_id",
                    "(SELECT dst_id FROM temp.merge_device WHERE src_id = "
                    "s.device_id)"},
                   {"state", "CASE s.state WHEN 'running' THEN 'interrupted' ELSE s.state END"},
                   {"message", "CASE s.state WHEN 'running' THEN ?1 ELSE s.message END"},
                   {"runner", "''"}},
                  {}, "src.jobs s WHERE s.id IN (SELECT id FROM temp.merge_new_jobs)"));
  KTUNE_RETURN_IF_ERROR(run(sql, &stats.jobs_added, interrupted_message));
  // Measurements by job and configuration, numbered after the job's own.
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_rows AS
SELECT s.job_id AS job_id, s.config_key AS config_key,
       COALESCE((SELECT MAX(t.seq) FROM main.measurements t WHERE t.job_id = s.job_id), -1) +
       ROW_NUMBER() OVER (PARTITION BY s.job_id ORDER BY s.seq) AS new_seq
FROM src.measurements s
WHERE NOT EXISTS (SELECT 1 FROM main.measurements t
                  WHERE t.job_id = s.job_id AND t.config_key = s.config_key))sql",
                            nullptr));
  KTUNE_ASSIGN_OR_RETURN(sql, CopyRowsSql(db_, "measurements", {{"seq", "r.new_seq"}}, {},
                                          R"sql(src.measurements s
JOIN temp.merge_rows r ON r.job_id = s.job_id AND r.config_key = s.config_key)sql"));
  KTUNE_RETURN_IF_ERROR(run(sql, &stats.measurements));
  // Jobs held by both: their evaluation count, and success there counts.
  const std::string now = NowIso8601();
  KTUNE_RETURN_IF_ERROR(run(R"sql(
UPDATE main.jobs SET evaluations = (SELECT count(*) FROM main.measurements m
                                   WHERE m.job_id = jobs.id),
                     updated_at = ?1
WHERE id IN (SELECT job_id FROM temp.merge_rows)
  AND id NOT IN (SELECT id FROM temp.merge_new_jobs))sql",
                            &stats.jobs_extended, now));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
UPDATE main.jobs SET state = 'succeeded',
                     message = (SELECT s.message FROM src.jobs s WHERE s.id = jobs.id),
                     updated_at = ?1
WHERE state IN ('queued', 'interrupted', 'failed', 'cancelled')
  AND id IN (SELECT id FROM src.jobs WHERE state = 'succeeded')
  AND id NOT IN (SELECT id FROM temp.merge_new_jobs))sql",
                            nullptr, now));
  // The best records, where the source's is better (or the only one).
  KTUNE_RETURN_IF_ERROR(run(R"sql(
INSERT INTO main.best (kernel_id, device_id, problem, objective, job_id, config_key, config,
                       time_ms, objective_value, loss, updated_at)
SELECT k.dst_id, d.dst_id, s.problem, s.objective, s.job_id, s.config_key, s.config,
       s.time_ms, s.objective_value, s.loss, s.updated_at
FROM src.best s JOIN temp.merge_kernel k ON k.src_id = s.kernel_id
JOIN temp.merge_device d ON d.src_id = s.device_id
WHERE true
ON CONFLICT (kernel_id, device_id, problem, objective) DO UPDATE SET
  job_id = excluded.job_id, config_key = excluded.config_key, config = excluded.config,
  time_ms = excluded.time_ms, objective_value = excluded.objective_value,
  loss = excluded.loss, updated_at = excluded.updated_at
WHERE excluded.loss < best.loss)sql",
                            &stats.best));
  for (const char* t : {"merge_kernel", "merge_device", "merge_new_jobs", "merge_rows"}) {
    KTUNE_RETURN_IF_ERROR(run(StrCat("DROP TABLE temp.", t), nullptr));
  }
  KTUNE_RETURN_IF_ERROR(tx.Commit());
  return stats;
}

}  // namespace ktune
