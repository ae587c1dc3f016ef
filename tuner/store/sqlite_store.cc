#include "tuner/store/sqlite_store.h"

#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/json.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/rows.h"
#include "tuner/store/schema.h"

namespace ktune {

namespace {

constexpr const char* kJobColumns = KTUNE_JOB_COLUMNS("", "");

std::optional<double> FiniteOrNull(double v) {
  if (std::isfinite(v)) return v;
  return std::nullopt;
}

}  // namespace

struct SqliteStore::Statements {
  sqlite::Statement upsert_device;
  sqlite::Statement upsert_kernel;
  sqlite::Statement insert_job;
  sqlite::Statement get_job;
  sqlite::Statement get_job_prefix;
  sqlite::Statement list_jobs;
  sqlite::Statement set_state;
  sqlite::Statement get_runner;
  sqlite::Statement set_runner;
  sqlite::Statement set_strategy;
  sqlite::Statement insert_measurement;
  sqlite::Statement bump_evaluations;
  sqlite::Statement upsert_best;
  sqlite::Statement load_measurements;
  sqlite::Statement update_measurement;
  sqlite::Statement delete_best;
  sqlite::Statement insert_best;
};

SqliteStore::SqliteStore(sqlite::Db db) : db_(std::move(db)) {}
SqliteStore::~SqliteStore() = default;

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               bool create) {
  int version = 0;
  absl::StatusOr<sqlite::Db> db = OpenMigrated(path, create, SchemaMigrations(), &version);
  if (!db.ok()) return db.status();
  std::unique_ptr<SqliteStore> store(new SqliteStore(*std::move(db)));
  store->path_ = path;
  store->schema_version_ = version;
  // Its errors name the file (sqlite::Db does).
  KTUNE_RETURN_IF_ERROR(store->PrepareStatements());
  return store;
}

absl::Status SqliteStore::PrepareStatements() {
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
                  updated_at, origin, priority, client)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, '', 0, ?11, ?11, ?12, ?13, ?14)
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
  KTUNE_RETURN_IF_ERROR(prep(st->set_strategy, "UPDATE jobs SET strategy = ?2 WHERE id = ?1"));
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
SELECT )sql" + std::string(rows::kMeasurementColumns) + R"sql(
FROM measurements WHERE job_id = ?1 ORDER BY seq)sql"));
  stmts_ = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<std::int64_t> SqliteStore::UpsertDevice(const DeviceInfo& device) {
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

absl::StatusOr<std::int64_t> SqliteStore::UpsertKernel(const JobRecord& job) {
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

absl::StatusOr<JobRecord> SqliteStore::ReadJob(sqlite::Statement& s) { return rows::Job(s); }

absl::StatusOr<JobRecord> SqliteStore::StartJob(const JobRecord& job, bool* resumed) {
  return RecordJob(job, JobState::kRunning, resumed);
}

absl::StatusOr<JobRecord> SqliteStore::QueueJob(const JobRecord& job, bool* existed) {
  return RecordJob(job, JobState::kQueued, existed);
}

absl::StatusOr<JobRecord> SqliteStore::RecordJob(const JobRecord& job, JobState state,
                                                 bool* existed) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  const std::optional<ProcessName> self = ThisProcess();
  const std::string runner = self ? self->Encode() : "";
  if (state == JobState::kRunning) {
    // Never two processes on one job: a job that a live process of this
    // host runs is refused (a dead one's job is taken over).
    KTUNE_RETURN_IF_ERROR(CheckRunner(job.id, /*to_start=*/true));
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
      .Bind(13, static_cast<std::int64_t>(job.priority))
      .Bind(14, std::string_view(job.client));
  KTUNE_RETURN_IF_ERROR(ins.Run());
  const bool inserted = sqlite3_changes(db_.get()) > 0;
  if (!inserted) {
    sqlite::Statement& up = stmts_->set_state;
    up.Bind(1, std::string_view(job.id))
        .Bind(2, std::string_view(JobStateName(state)))
        .Bind(3, std::string_view(""))
        .Bind(4, std::string_view(now));
    KTUNE_RETURN_IF_ERROR(up.Run());
    if (state == JobState::kRunning) {  // what "auto" became, now it runs
      sqlite::Statement& st = stmts_->set_strategy;
      st.Bind(1, std::string_view(job.id)).Bind(2, std::string_view(job.strategy));
      KTUNE_RETURN_IF_ERROR(st.Run());
    }
  }
  sqlite::Statement& r = stmts_->set_runner;
  r.Bind(1, std::string_view(job.id))
      .Bind(2, std::string_view(state == JobState::kRunning ? runner : ""));
  KTUNE_RETURN_IF_ERROR(r.Run());
  KTUNE_RETURN_IF_ERROR(tx.Commit());
  if (existed != nullptr) *existed = !inserted;
  return GetJob(job.id);
}

absl::Status SqliteStore::CheckRunner(const std::string& job_id, bool to_start) {
  sqlite::Statement& g = stmts_->get_runner;
  g.Bind(1, std::string_view(job_id));
  absl::StatusOr<bool> row = g.Step();
  const std::string runner = row.ok() && *row ? g.Text(0) : "";
  g.Reset();
  if (!row.ok()) return row.status();
  return CheckNotRunElsewhere(job_id, runner, /*leased=*/false, to_start);
}

absl::Status SqliteStore::SetJobState(const std::string& job_id, JobState state,
                                      const std::string& message) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
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
  return tx.Commit();
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

absl::Status SqliteStore::AddMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  const bool ok = r.ok();
  if (ok && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
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

absl::Status SqliteStore::UpdateMeasurement(const std::string& job_id, const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  if (r.ok() && !std::isfinite(r.time.count())) {
    return absl::InvalidArgumentError("an ok measurement needs a finite time");
  }
  KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction tx, sqlite::Transaction::Begin(db_));
  KTUNE_RETURN_IF_ERROR(CheckRunner(job_id));
  sqlite::Statement& up = stmts_->update_measurement;
  BindMeasurement(up, job_id, m, ConditionsToJson(r.conditions), SamplesToJson(r.samples_ms));
  KTUNE_RETURN_IF_ERROR(up.Run());
  if (sqlite3_changes(db_.get()) == 0) {
    return absl::NotFoundError(StrCat("job ", job_id, " has no measurement of ", m.key));
  }
  return tx.Commit();
}

absl::Status SqliteStore::RefreshBest(const std::string& job_id) {
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

absl::StatusOr<std::vector<StoredMeasurement>> SqliteStore::LoadMeasurements(
    const std::string& job_id) {
  sqlite::Statement& s = stmts_->load_measurements;
  s.Bind(1, std::string_view(job_id));
  std::vector<StoredMeasurement> out;
  absl::Status status = s.ForEachRow([&]() -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(StoredMeasurement m, rows::Measurement(s, job_id));
    out.push_back(std::move(m));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::map<std::string, StoredMeasurement>> SqliteStore::LoadBestOfJobs(
    const std::vector<std::string>& job_ids) {
  std::map<std::string, StoredMeasurement> out;
  if (job_ids.empty()) return out;
  Json ids = Json::MakeArray();
  for (const std::string& id : job_ids) ids.Push(id);
  KTUNE_ASSIGN_OR_RETURN(
      sqlite::Statement q,
      db_.Prepare(KTUNE_BEST_OF_JOBS("", "job_id IN (SELECT value FROM json_each(?1))")));
  const std::string list = ids.Dump();
  q.Bind(1, std::string_view(list));
  KTUNE_RETURN_IF_ERROR(q.ForEachRow([&]() -> absl::Status {
    const std::string job = q.Text(21);
    KTUNE_ASSIGN_OR_RETURN(StoredMeasurement m, rows::Measurement(q, job));
    out.emplace(job, std::move(m));
    return absl::OkStatus();
  }));
  return out;
}

absl::StatusOr<std::vector<JobRecord>> SqliteStore::ReadJobs(sqlite::Statement& stmt) {
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

absl::StatusOr<JobRecord> SqliteStore::GetJob(const std::string& id_or_prefix) {
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

absl::StatusOr<std::vector<JobRecord>> SqliteStore::ListJobs() {
  return ReadJobs(stmts_->list_jobs);
}

absl::StatusOr<std::vector<BestRecord>> SqliteStore::FindBest(
    const std::string& kernel_name, const std::optional<std::string>& device,
    const std::optional<Problem>& problem, const std::optional<std::string>& objective) {
  // Filters are optional, so this statement is prepared per call.
  std::string sql = StrCat("SELECT ", rows::kBestColumns, R"sql(
FROM best b JOIN kernels k ON k.id = b.kernel_id
            JOIN devices d ON d.id = b.device_id
WHERE k.name = ?1)sql");
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
    KTUNE_ASSIGN_OR_RETURN(BestRecord b, rows::Best(s));
    out.push_back(std::move(b));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::string> SqliteStore::KnownArchitecture(const std::string& device) {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare(R"sql(
SELECT architecture FROM devices
WHERE (name = ?1 OR locator = ?1 OR uuid = ?1) AND architecture <> '' ORDER BY id LIMIT 1)sql"));
  s.Bind(1, std::string_view(device));
  KTUNE_ASSIGN_OR_RETURN(const bool row, s.Step());
  return row ? s.Text(0) : std::string();
}

absl::StatusOr<std::vector<PriorMeasurement>> SqliteStore::LoadPriorMeasurements(
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
    KTUNE_ASSIGN_OR_RETURN(PriorMeasurement m, rows::Prior(s));
    out.push_back(std::move(m));
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::map<JobState, std::int64_t>> SqliteStore::CountJobs() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q, db_.Prepare(R"sql(
SELECT state, CASE WHEN state = 'running' THEN runner ELSE '' END, count(*) FROM jobs
GROUP BY 1, 2)sql"));
  std::map<JobState, std::int64_t> counts;
  KTUNE_RETURN_IF_ERROR(
      q.ForEachRow([&] { return AddJobCount(counts, q.Text(0), q.Text(1), q.Int(2)); }));
  return counts;
}

absl::StatusOr<std::int64_t> SqliteStore::SizeBytes() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q,
                         db_.Prepare("SELECT (SELECT page_count FROM pragma_page_count) * "
                                     "(SELECT page_size FROM pragma_page_size)"));
  KTUNE_ASSIGN_OR_RETURN(const bool row, q.Step());
  std::int64_t bytes = row ? q.Int(0) : 0;
  struct stat wal;
  if (stat((path_ + "-wal").c_str(), &wal) == 0) bytes += wal.st_size;
  return bytes;
}

absl::Status SqliteStore::CheckIntegrity() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare("PRAGMA integrity_check"));
  KTUNE_ASSIGN_OR_RETURN(const bool row, s.Step());
  if (!row) return absl::DataLossError(StrCat(path_, ": integrity_check returned nothing"));
  const std::string result = s.Text(0);
  if (result != "ok") {
    return absl::DataLossError(StrCat(path_, ": integrity_check: ", result));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::Snapshot(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(
        StrCat(path, ": exists; give a new file (nothing was changed)"));
  }
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement s, db_.Prepare("VACUUM INTO ?1"));
  s.Bind(1, std::string_view(path));
  absl::Status done = s.Run();
  if (!done.ok()) std::remove(path.c_str());
  return done;
}

absl::StatusOr<std::int64_t> SqliteStore::ChangeCount() {
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q, db_.Prepare("PRAGMA data_version"));
  KTUNE_ASSIGN_OR_RETURN(const bool row, q.Step());
  if (!row) return absl::InternalError("PRAGMA data_version gave no row");
  return q.Int(0);
}

}  // namespace ktune
