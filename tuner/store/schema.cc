#include "tuner/store/schema.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <chrono>
#include <thread>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

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
    // Who submitted a daemon's job, for the per-client limits.
    {5, R"sql(
ALTER TABLE jobs ADD COLUMN client TEXT NOT NULL DEFAULT '';
)sql"},
};

}  // namespace

std::span<const Migration> SchemaMigrations() { return kMigrations; }

namespace {

// Whether `path` is an existing file on a file system mounted read-only.
bool OnReadOnlyFileSystem(const std::string& path) {
  struct stat st;
  struct statvfs vfs;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && statvfs(path.c_str(), &vfs) == 0 &&
         (vfs.f_flag & ST_RDONLY) != 0;
}

// Opens a store that cannot change: one on a read-only file system is read
// as it is (SQLite's write-ahead log needs a writable folder), unless its
// log still holds changes, which reading it that way would miss.
absl::StatusOr<sqlite::Db> OpenOnReadOnlyFileSystem(const std::string& path) {
  struct stat wal;
  if (stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 0) {
    return absl::FailedPreconditionError(
        StrCat(path,
               ": the store is on a read-only file system with changes still in its "
               "write-ahead log (",
               path,
               "-wal), so it cannot be read whole here. Open it "
               "once where it can be written (e.g. ktune jobs --db ",
               path, ") to fold them in; nothing was changed"));
  }
  return sqlite::Db::OpenImmutable(path);
}

}  // namespace

absl::StatusOr<sqlite::Db> OpenMigrated(const std::string& path, bool create,
                                        std::span<const Migration> migrations, int* version_out) {
  const bool read_only_fs = OnReadOnlyFileSystem(path);
  absl::StatusOr<sqlite::Db> db =
      read_only_fs ? OpenOnReadOnlyFileSystem(path) : sqlite::Db::Open(path, create);
  if (!db.ok()) return db.status();
  sqlite::Db& d = *db;
  // Errors below come from sqlite::Db and Statement, which name the file.
  // The first read tells whether this is SQLite at all.
  int version = 0;
  {
    absl::StatusOr<sqlite::Statement> q = d.Prepare(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_schema)");
    if (!q.ok()) {
      return q.status().code() == absl::StatusCode::kDataLoss ? sqlite::NotASqliteDatabase(path)
                                                              : q.status();
    }
    absl::StatusOr<bool> row = q->Step();
    if (!row.ok()) {
      return row.status().code() == absl::StatusCode::kDataLoss ? sqlite::NotASqliteDatabase(path)
                                                                : row.status();
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
  if (read_only_fs) {
    // Read as it is: writes fail, saying the store cannot be written.
    if (version < latest) {
      return absl::FailedPreconditionError(
          StrCat(path, ": schema version ", version, " needs migrating to ", latest,
                 ", but the store is on a read-only file system; copy it somewhere writable "
                 "(nothing was changed)"));
    }
    if (version_out != nullptr) *version_out = version;
    return db;
  }
  // Switching a new file to WAL needs it alone: while another connection
  // creates the same file SQLite may answer busy at once, without waiting
  // (the busy handler cannot break that tie), so wait here, a while.
  for (int attempt = 0;; ++attempt) {
    absl::Status s = d.Exec("PRAGMA journal_mode=WAL");
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kUnavailable || attempt >= 500) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + attempt % 10));
  }
  if (absl::Status s = d.Exec("PRAGMA foreign_keys=ON"); !s.ok()) return s;
  if (absl::Status s = d.Exec("PRAGMA synchronous=NORMAL"); !s.ok()) return s;
  if (version < latest) {
    // Another process may be opening the same new file: the version read
    // above is only a hint. Under the write lock, read it again and apply
    // what is still missing, all or nothing.
    absl::StatusOr<sqlite::Transaction> tx = sqlite::Transaction::Begin(d);
    if (!tx.ok()) return tx.status();
    {
      absl::StatusOr<sqlite::Statement> q =
          d.Prepare("SELECT user_version FROM pragma_user_version");
      if (!q.ok()) return q.status();
      absl::StatusOr<bool> row = q->Step();
      if (!row.ok()) return row.status();
      version = static_cast<int>(q->Int(0));
    }
    for (const Migration& m : migrations) {
      if (m.version <= version) continue;
      if (absl::Status s = d.Exec(m.sql); !s.ok()) {
        return absl::Status(s.code(),
                            StrCat("migration to schema version ", m.version, ": ", s.message()));
      }
      absl::Status s = d.Exec(StrCat("PRAGMA user_version = ", m.version));
      if (s.ok()) s = d.Exec(StrCat("PRAGMA application_id = ", kApplicationId));
      if (!s.ok()) return s;
      version = m.version;
    }
    if (absl::Status s = tx->Commit(); !s.ok()) return s;
  }
  if (version_out != nullptr) *version_out = version;
  return db;
}

}  // namespace ktune
