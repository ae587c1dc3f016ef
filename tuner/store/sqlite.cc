#include "tuner/store/sqlite.h"

#include <atomic>
#include <cstdio>
#include <thread>

#include "tuner/base/strings.h"

namespace ktune::sqlite {

namespace {

std::atomic<LockWaitNotice> lock_wait_notice{nullptr};

// The database's file name, for messages.
std::string_view FileOf(sqlite3* db) {
  const char* f = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  return f != nullptr && *f != '\0' ? std::string_view(f) : std::string_view("the store");
}

}  // namespace

void SetLockWaitNotice(LockWaitNotice notice) { lock_wait_notice.store(notice); }

absl::Status StatusFor(std::string_view path, std::string_view what, int rc,
                       std::string_view detail) {
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          StrCat(path,
                 ": the disk holding the store is full. What was stored before is "
                 "kept; free some space and run the command again (a job resumes where it "
                 "stopped)"));
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(
          StrCat(path,
                 ": the store cannot be written (a read-only file system, or no "
                 "permission to write the file or its folder); nothing was changed. Give --db "
                 "a store that can be written (copy this one, or merge it into one)"));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(
          StrCat(path, ": another process held the store's lock for ", kLockWait.count(),
                 " s (a long `ktune merge`, or a process stopped mid-write: `fuser ", path,
                 "` names it); try again once it is done"));
    case SQLITE_IOERR:
      return absl::InternalError(StrCat(path, ": the disk failed a read or write (", what, ": ",
                                        detail, ", code ", rc, ")"));
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(StrCat(what, " failed: ", detail, " (code ", rc, ")"));
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::DataLossError(StrCat(path, ": ", what, " failed: ", detail, " (code ", rc, ")"));
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
      return absl::PermissionDeniedError(
          StrCat(path, ": ", what, " failed: ", detail, " (code ", rc, ")"));
    default:
      return absl::InternalError(StrCat(path, ": ", what, " failed: ", detail, " (code ", rc, ")"));
  }
}

// SQLite's busy handler for one connection: waits with growing sleeps up
// to kLockWait, telling the notice once when the wait passes a second.
struct Db::LockWaiter {
  sqlite3* db = nullptr;
  std::chrono::steady_clock::time_point since;
  bool told = false;

  static int Wait(void* self, int count) {
    auto* w = static_cast<LockWaiter*>(self);
    const auto now = std::chrono::steady_clock::now();
    if (count == 0) {
      w->since = now;
      w->told = false;
    }
    const auto waited = now - w->since;
    if (waited >= kLockWait) return 0;
    if (!w->told && waited >= std::chrono::seconds(1)) {
      w->told = true;
      if (LockWaitNotice notice = lock_wait_notice.load(); notice != nullptr) {
        notice(StrCat(FileOf(w->db),
                      ": another process holds the store's lock; waiting for it "
                      "(up to ",
                      kLockWait.count(), " s; nothing is lost meanwhile)"));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(count < 10 ? 1 + count : 25));
    return 1;
  }
};

Db::Db(sqlite3* db) : waiter_(std::make_unique<LockWaiter>()), db_(db) {
  waiter_->db = db;
  if (db_ != nullptr) sqlite3_busy_handler(db_.get(), &LockWaiter::Wait, waiter_.get());
}

Db::Db(Db&&) noexcept = default;
Db& Db::operator=(Db&&) noexcept = default;
Db::~Db() = default;

absl::Status NotASqliteDatabase(const std::string& path) {
  return absl::FailedPreconditionError(
      StrCat(path, ": not a SQLite database, so not a ktune store; nothing was changed"));
}

void DbCloser::operator()(sqlite3* db) const noexcept {
  // Statements are finalised by their owners first; close_v2 defers the
  // close if one is still alive instead of failing.
  const int rc = sqlite3_close_v2(db);
  if (rc != SQLITE_OK) {
    std::fprintf(stderr, "ktune: sqlite3_close_v2 failed: %s\n", sqlite3_errstr(rc));
  }
}

void StmtFinalizer::operator()(sqlite3_stmt* stmt) const noexcept {
  // The return code repeats the last step's error, already reported.
  sqlite3_finalize(stmt);
}

absl::Status Db::Error(std::string_view what, int rc) const {
  const char* msg = db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
  return StatusFor(FileOf(db_.get()), what, rc, msg);
}

absl::StatusOr<Db> Db::OpenWith(const std::string& path, const std::string& name, int flags) {
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);  // owns the handle even on failure
  if (rc != SQLITE_OK) {
    if ((flags & SQLITE_OPEN_CREATE) == 0 && (rc & 0xff) == SQLITE_CANTOPEN) {
      return absl::NotFoundError(StrCat(path, ": no such database"));
    }
    return StatusFor(path, "opening", rc, sqlite3_errmsg(raw));
  }
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

absl::StatusOr<Db> Db::Open(const std::string& path, bool create) {
  return OpenWith(path, path, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0));
}

absl::StatusOr<Db> Db::OpenReadOnly(const std::string& path) {
  return OpenWith(path, path, SQLITE_OPEN_READONLY);
}

absl::StatusOr<Db> Db::OpenImmutable(const std::string& path) {
  // A file: URI escapes what a path may hold that a URI may not.
  std::string uri = "file:";
  for (const char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      uri += hex;
    } else {
      uri += c;
    }
  }
  uri += "?immutable=1";
  return OpenWith(path, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
}

absl::Status Db::Exec(std::string_view sql) {
  const std::string text(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  if (rc != SQLITE_OK) return Error(StrCat("executing `", sql, "`"), rc);
  return absl::OkStatus();
}

absl::StatusOr<Statement> Db::Prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Error(StrCat("preparing `", sql, "`"), rc);
  }
  return Statement(stmt, db_.get());
}

Statement& Statement::Bind(int index, std::int64_t v) {
  const int rc = sqlite3_bind_int64(stmt_.get(), index, v);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, double v) {
  const int rc = sqlite3_bind_double(stmt_.get(), index, v);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::string_view v) {
  const int rc =
      sqlite3_bind_text64(stmt_.get(), index, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  const int rc =
      sqlite3_bind_blob64(stmt_.get(), index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_.get(), index);
  if (rc != SQLITE_OK && bind_error_ == SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, std::optional<double> v) {
  return v ? Bind(index, *v) : BindNull(index);
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_error_ != SQLITE_OK) {
    const int rc = bind_error_;
    bind_error_ = SQLITE_OK;
    return absl::InternalError(StrCat("binding a parameter of `", sqlite3_sql(stmt_.get()),
                                      "` failed: ", sqlite3_errstr(rc)));
  }
  const int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return StatusFor(FileOf(db_), StrCat("`", sqlite3_sql(stmt_.get()), "`"), rc,
                   sqlite3_errmsg(db_));
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) {
      Reset();
      return row.status();
    }
    if (!*row) break;
  }
  Reset();
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
  bind_error_ = SQLITE_OK;
}

bool Statement::IsNull(int col) const {
  return sqlite3_column_type(stmt_.get(), col) == SQLITE_NULL;
}

std::int64_t Statement::Int(int col) const { return sqlite3_column_int64(stmt_.get(), col); }

double Statement::Double(int col) const { return sqlite3_column_double(stmt_.get(), col); }

std::optional<double> Statement::OptionalDouble(int col) const {
  if (IsNull(col)) return std::nullopt;
  return Double(col);
}

std::string Statement::Text(int col) const {
  const auto* p = sqlite3_column_text(stmt_.get(), col);
  const int n = sqlite3_column_bytes(stmt_.get(), col);
  if (p == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
}

std::string Statement::Blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_.get(), col);
  const int n = sqlite3_column_bytes(stmt_.get(), col);
  if (p == nullptr) return std::string();
  return std::string(static_cast<const char*>(p), static_cast<std::size_t>(n));
}

absl::StatusOr<Transaction> Transaction::Begin(Db& db) {
  if (absl::Status s = db.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  return Transaction(&db);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(other.db_), open_(other.open_) {
  other.open_ = false;
}

Transaction::~Transaction() {
  // A failed COMMIT (disk full, say) may have rolled back already.
  if (!open_ || sqlite3_get_autocommit(db_->get()) != 0) return;
  if (absl::Status s = db_->Exec("ROLLBACK"); !s.ok()) {
    std::fprintf(stderr, "ktune: rollback failed: %s\n", std::string(s.message()).c_str());
  }
}

absl::Status Transaction::Commit() {
  if (!open_) return absl::FailedPreconditionError("transaction already ended");
  absl::Status s = db_->Exec("COMMIT");
  if (s.ok()) open_ = false;
  return s;
}

}  // namespace ktune::sqlite
