// The PostgreSQL store's traffic with SQLite stores: merging a headless
// job's store in, and writing a SQLite snapshot out.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/merge.h"
#include "tuner/store/pg_store.h"
#include "tuner/store/schema.h"
#include "tuner/store/sqlite.h"
#include "tuner/store/tables.h"

namespace ktune {
namespace {

// Merges take turns (pg_advisory_xact_lock): two adding the same
// measurements at once would number them alike.
constexpr std::int64_t kMergeLock = 0x6b74756e0002;  // 'ktun', 2

// Copies `table` of the SQLite database `from` into the temporary table
// src_<table> (made like ktune.<table>), with COPY.
absl::Status LoadTable(sqlite::Db& from, pg::Conn& to, const StoreTable& table) {
  KTUNE_RETURN_IF_ERROR(
      to.Run(StrCat("CREATE TEMP TABLE src_", table.name, " ON COMMIT DROP AS SELECT ",
                    ColumnList(table), " FROM ktune.", table.name, " WITH NO DATA")));
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement q,
                         from.Prepare(StrCat("SELECT ", ColumnList(table), " FROM ", table.name)));
  pg::CopyRows rows;
  KTUNE_RETURN_IF_ERROR(q.ForEachRow([&]() -> absl::Status {
    for (int c = 0; c < static_cast<int>(table.columns.size()); ++c) {
      const StoreColumn& col = table.columns[static_cast<std::size_t>(c)];
      if (q.IsNull(c)) {
        rows.Field(std::optional<std::string_view>());
        continue;
      }
      switch (col.kind) {
        case StoreColumn::Kind::kInt: rows.Field(q.Int(c)); break;
        case StoreColumn::Kind::kReal: rows.Field(std::optional<double>(q.Double(c))); break;
        case StoreColumn::Kind::kText: {
          const std::string text = q.Text(c);
          if (text.find('\0') != std::string::npos) {
            return absl::DataLossError(StrCat(table.name, ".", col.name, " holds a NUL byte"));
          }
          rows.Field(std::optional<std::string_view>(text));
          break;
        }
        case StoreColumn::Kind::kBlob: rows.Bytes(q.Blob(c)); break;
      }
    }
    rows.EndRow();
    return absl::OkStatus();
  }));
  return to.CopyIn(StrCat("COPY src_", table.name, " (", ColumnList(table), ") FROM STDIN"),
                   rows.data());
}

}  // namespace

absl::StatusOr<MergeStats> PgStore::Merge(const MergeSource& source) {
  absl::StatusOr<MergeStats> merged = Retrying([&]() -> absl::StatusOr<MergeStats> {
    KTUNE_ASSIGN_OR_RETURN(sqlite::Db from, sqlite::Db::OpenReadOnly(source.copy_path()));
    KTUNE_ASSIGN_OR_RETURN(pg::Transaction tx, pg::Transaction::Begin(conn_));
    KTUNE_RETURN_IF_ERROR(
        conn_.Run("SELECT pg_advisory_xact_lock($1)", pg::Params().Add(kMergeLock)));
    for (const StoreTable& t : StoreTables()) {
      if (absl::Status s = LoadTable(from, conn_, t); !s.ok()) {
        return absl::FailedPreconditionError(StrCat("reading its ", t.name, ": ", s.message()));
      }
    }
    KTUNE_ASSIGN_OR_RETURN(MergeStats stats, MergeLoaded(source.path()));
    KTUNE_RETURN_IF_ERROR(tx.Commit());
    return stats;
  });
  if (!merged.ok()) {
    return absl::Status(merged.status().code(),
                        StrCat("merging ", source.path(), " into ", name_, ": ",
                               merged.status().message(), "; nothing was changed"));
  }
  return merged;
}

absl::StatusOr<MergeStats> PgStore::MergeLoaded(const std::string& source_name) {
  MergeStats stats;
  auto run = [&](const std::string& sql, std::int64_t* count,
                 const pg::Params& params = pg::Params()) -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(sql, params));
    if (count != nullptr) *count += r.Changed();
    return absl::OkStatus();
  };
  // A job held by both that a live process here is running is its to
  // write: refuse rather than add measurements behind its back.
  {
    KTUNE_ASSIGN_OR_RETURN(pg::Result r, conn_.Exec(R"sql(
SELECT t.id, t.runner FROM ktune.jobs t JOIN src_jobs s ON s.id = t.id
WHERE t.state = 'running' ORDER BY t.id)sql"));
    for (int i = 0; i < r.rows(); ++i) {
      if (RunByAnotherProcess(r.Text(i, 1))) {
        return absl::FailedPreconditionError(StrCat("job ", r.Text(i, 0), " is running here (",
                                                    ProcessName::Decode(r.Text(i, 1))->Describe(),
                                                    "); merge after it ends"));
      }
    }
  }
  const StoreTable& devices = StoreTables()[0];
  const StoreTable& kernels = StoreTables()[1];
  const StoreTable& jobs = StoreTables()[2];
  const StoreTable& measurements = StoreTables()[3];
  // Devices by UUID and kernels by identity; what this store holds stays.
  auto without_id = [](const StoreTable& t, const std::string& prefix) {
    std::string cols = ColumnList(t, prefix);
    return cols.substr(cols.find(", ") + 2);  // id comes first
  };
  KTUNE_RETURN_IF_ERROR(
      run(StrCat("INSERT INTO ktune.devices (", without_id(devices, ""), ") SELECT ",
                 without_id(devices, "s."), " FROM src_devices s ON CONFLICT (uuid) DO NOTHING"),
          &stats.devices));
  KTUNE_RETURN_IF_ERROR(
      run(StrCat("INSERT INTO ktune.kernels (", without_id(kernels, ""), ") SELECT ",
                 without_id(kernels, "s."), " FROM src_kernels s ON CONFLICT DO NOTHING"),
          &stats.kernels));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_kernel ON COMMIT DROP AS
SELECT s.id AS src_id, k.id AS dst_id FROM src_kernels s
JOIN ktune.kernels k ON k.name = s.name AND k.source_hash = s.source_hash
                    AND k.parameters = s.parameters)sql",
                            nullptr));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_device ON COMMIT DROP AS
SELECT s.id AS src_id, d.id AS dst_id FROM src_devices s JOIN ktune.devices d ON d.uuid = s.uuid)sql",
                            nullptr));
  // Jobs by id. One that was running there has no process here.
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_new_jobs ON COMMIT DROP AS
SELECT id FROM src_jobs WHERE id NOT IN (SELECT id FROM ktune.jobs))sql",
                            nullptr));
  std::string job_values = ColumnList(jobs, "s.");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"s.kernel_id", "(SELECT dst_id FROM merge_kernel WHERE src_id = s.kernel_id)"},
           {"s.device_id", "(SELECT dst_id FROM merge_device WHERE src_id = s.device_id)"},
           {"s.state", "CASE s.state WHEN 'running' THEN 'interrupted' ELSE s.state END"},
           {"s.message", "CASE s.state WHEN 'running' THEN $1 ELSE s.message END"},
           {"s.runner", "''"}}) {
    job_values.replace(job_values.find(from), from.size(), to);
  }
  KTUNE_RETURN_IF_ERROR(
      run(StrCat("INSERT INTO ktune.jobs (", ColumnList(jobs), ") SELECT ", job_values,
                 " FROM src_jobs s WHERE s.id IN (SELECT id FROM merge_new_jobs)"),
          &stats.jobs_added,
          pg::Params().Add(StrCat("merged from ", source_name,
                                  " while it ran there; run it again to resume it"))));
  // Measurements by job and configuration, numbered after the job's own.
  KTUNE_RETURN_IF_ERROR(run(R"sql(
CREATE TEMP TABLE merge_rows ON COMMIT DROP AS
SELECT s.job_id AS job_id, s.config_key AS config_key,
       COALESCE((SELECT MAX(t.seq) FROM ktune.measurements t WHERE t.job_id = s.job_id), -1) +
       ROW_NUMBER() OVER (PARTITION BY s.job_id ORDER BY s.seq) AS new_seq
FROM src_measurements s
WHERE NOT EXISTS (SELECT 1 FROM ktune.measurements t
                  WHERE t.job_id = s.job_id AND t.config_key = s.config_key))sql",
                            nullptr));
  std::string m_values = ColumnList(measurements, "s.");
  m_values.replace(m_values.find("s.seq"), 5, "r.new_seq");
  KTUNE_RETURN_IF_ERROR(run(StrCat("INSERT INTO ktune.measurements (", ColumnList(measurements),
                                   ") SELECT ", m_values, R"sql( FROM src_measurements s
JOIN merge_rows r ON r.job_id = s.job_id AND r.config_key = s.config_key)sql"),
                            &stats.measurements));
  // Jobs held by both: their evaluation count, and success there counts.
  const std::string now = NowIso8601();
  KTUNE_RETURN_IF_ERROR(run(R"sql(
UPDATE ktune.jobs SET evaluations = (SELECT count(*) FROM ktune.measurements m
                                     WHERE m.job_id = jobs.id),
                      updated_at = $1
WHERE id IN (SELECT job_id FROM merge_rows)
  AND id NOT IN (SELECT id FROM merge_new_jobs))sql",
                            &stats.jobs_extended, pg::Params().Add(now)));
  KTUNE_RETURN_IF_ERROR(run(R"sql(
UPDATE ktune.jobs SET state = 'succeeded',
                      message = (SELECT s.message FROM src_jobs s WHERE s.id = jobs.id),
                      updated_at = $1
WHERE state IN ('queued', 'interrupted', 'failed', 'cancelled')
  AND id IN (SELECT id FROM src_jobs WHERE state = 'succeeded')
  AND id NOT IN (SELECT id FROM merge_new_jobs))sql",
                            nullptr, pg::Params().Add(now)));
  // The best records, where the source's is better (or the only one).
  KTUNE_RETURN_IF_ERROR(run(R"sql(
INSERT INTO ktune.best AS b (kernel_id, device_id, problem, objective, job_id, config_key,
                             config, time_ms, objective_value, loss, updated_at)
SELECT k.dst_id, d.dst_id, s.problem, s.objective, s.job_id, s.config_key, s.config,
       s.time_ms, s.objective_value, s.loss, s.updated_at
FROM src_best s JOIN merge_kernel k ON k.src_id = s.kernel_id
JOIN merge_device d ON d.src_id = s.device_id
ON CONFLICT (kernel_id, device_id, problem, objective) DO UPDATE SET
  job_id = excluded.job_id, config_key = excluded.config_key, config = excluded.config,
  time_ms = excluded.time_ms, objective_value = excluded.objective_value,
  loss = excluded.loss, updated_at = excluded.updated_at
WHERE excluded.loss < b.loss)sql",
                            &stats.best));
  return stats;
}

namespace {

// Copies ktune.<table> into the SQLite table of that name, through a
// cursor of the open transaction.
absl::Status CopyOut(pg::Conn& from, sqlite::Db& to, const StoreTable& table) {
  std::vector<std::string> marks;
  for (std::size_t i = 1; i <= table.columns.size(); ++i) marks.push_back(StrCat("?", i));
  KTUNE_ASSIGN_OR_RETURN(sqlite::Statement ins,
                         to.Prepare(StrCat("INSERT INTO ", table.name, " (", ColumnList(table),
                                           ") VALUES (", StrJoin(marks, ", "), ")")));
  KTUNE_RETURN_IF_ERROR(from.Run(StrCat("DECLARE snapshot_rows NO SCROLL CURSOR FOR SELECT ",
                                        ColumnList(table), " FROM ktune.", table.name)));
  for (;;) {
    KTUNE_ASSIGN_OR_RETURN(pg::Result r, from.Exec("FETCH 2000 FROM snapshot_rows"));
    if (r.rows() == 0) break;
    for (int i = 0; i < r.rows(); ++i) {
      for (int c = 0; c < static_cast<int>(table.columns.size()); ++c) {
        if (r.IsNull(i, c)) {
          ins.BindNull(c + 1);
          continue;
        }
        switch (table.columns[static_cast<std::size_t>(c)].kind) {
          case StoreColumn::Kind::kInt: ins.Bind(c + 1, r.Int(i, c)); break;
          case StoreColumn::Kind::kReal: ins.Bind(c + 1, r.Double(i, c)); break;
          case StoreColumn::Kind::kText: ins.Bind(c + 1, std::string_view(r.Text(i, c))); break;
          case StoreColumn::Kind::kBlob: ins.BindBlob(c + 1, r.Bytes(i, c)); break;
        }
      }
      KTUNE_RETURN_IF_ERROR(ins.Run());
    }
  }
  return from.Run("CLOSE snapshot_rows");
}

}  // namespace

absl::Status PgStore::Snapshot(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) {
    return absl::AlreadyExistsError(
        StrCat(path, ": exists; give a new file (nothing was changed)"));
  }
  absl::Status done = [&]() -> absl::Status {
    int version = 0;
    KTUNE_ASSIGN_OR_RETURN(sqlite::Db to, OpenMigrated(path, true, SchemaMigrations(), &version));
    KTUNE_ASSIGN_OR_RETURN(sqlite::Transaction wtx, sqlite::Transaction::Begin(to));
    KTUNE_ASSIGN_OR_RETURN(pg::Transaction rtx, pg::Transaction::Begin(conn_));
    // One view of the whole store, however long the copy takes.
    KTUNE_RETURN_IF_ERROR(conn_.Run("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"));
    for (const StoreTable& t : StoreTables()) KTUNE_RETURN_IF_ERROR(CopyOut(conn_, to, t));
    KTUNE_RETURN_IF_ERROR(rtx.Commit());
    return wtx.Commit();
  }();
  if (!done.ok()) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      std::remove(StrCat(path, suffix).c_str());
    }
  }
  return done;
}

}  // namespace ktune
