#include "tuner/store/merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/sqlite_store.h"

namespace ktune {

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

absl::StatusOr<MergeSource> MergeSource::Prepare(const std::string& path) {
  absl::StatusOr<sqlite::Db> from = sqlite::Db::OpenReadOnly(path);
  if (!from.ok()) return from.status();
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
      if (s.code() == absl::StatusCode::kDataLoss) return sqlite::NotASqliteDatabase(path);
      return s;
    }
  }
  // The copy is checked and migrated as any store is opened; its messages
  // name the original.
  absl::StatusOr<std::unique_ptr<SqliteStore>> store = SqliteStore::Open(copy, false);
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
    absl::StatusOr<sqlite::Statement> q =
        (*store)->db_.Prepare("SELECT DISTINCT name FROM kernels");
    if (!q.ok()) return damaged(q.status());
    absl::Status s = q->ForEachRow([&]() -> absl::Status {
      kernels.push_back(q->Text(0));
      return absl::OkStatus();
    });
    if (!s.ok()) return damaged(s);
  }
  absl::StatusOr<std::vector<JobRecord>> jobs = (*store)->ListJobs();
  if (!jobs.ok()) return damaged(jobs.status());
  for (const JobRecord& job : *jobs) {
    if (auto ms = (*store)->LoadMeasurements(job.id); !ms.ok()) return damaged(ms.status());
  }
  for (const std::string& kernel : kernels) {
    if (auto b = (*store)->FindBest(kernel, std::nullopt, std::nullopt, std::nullopt); !b.ok()) {
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

absl::StatusOr<MergeStats> SqliteStore::Merge(const MergeSource& source) {
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

absl::StatusOr<MergeStats> SqliteStore::MergeAttached(const std::string& source_name) {
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
