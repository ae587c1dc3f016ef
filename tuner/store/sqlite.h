// A thin owner layer over SQLite's C API: every handle has one move-only
// owner, every call's failure becomes an absl::Status that names the call
// and SQLite's error.
#ifndef KTUNE_TUNER_STORE_SQLITE_H_
#define KTUNE_TUNER_STORE_SQLITE_H_

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ktune::sqlite {

struct DbCloser {
  void operator()(sqlite3* db) const noexcept;
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* stmt) const noexcept;
};

class Statement;

// FAILED_PRECONDITION: the file at `path` is not a SQLite database, so not
// a ktune store; it was left as it was. (SQLite's own words for this, with
// the statement that found it, say nothing a user can act on.)
absl::Status NotASqliteDatabase(const std::string& path);

// How long a connection waits for another connection's lock on the store
// before its statement fails (UNAVAILABLE, naming the wait). A wait past
// a second is told, once, to the notice set here (by ktune and ktuned: a
// line on stderr; nothing by default).
inline constexpr std::chrono::seconds kLockWait{120};
using LockWaitNotice = void (*)(const std::string& message);
void SetLockWaitNotice(LockWaitNotice notice);

// The status for SQLite result code `rc` met while `what` ran on the
// database at `path`: the conditions a user can act on (disk full, store
// read-only, lock held too long, I/O error) in words that say what to do;
// any other with SQLite's own words. `detail` is SQLite's message.
absl::Status StatusFor(std::string_view path, std::string_view what, int rc,
                       std::string_view detail);

// An open connection. Move-only; not thread-safe.
class Db {
 public:
  // Opens (creating if `create`) the database at `path`. Errors name the
  // path and SQLite's reason.
  static absl::StatusOr<Db> Open(const std::string& path, bool create);
  // Opens an existing database for reading only.
  static absl::StatusOr<Db> OpenReadOnly(const std::string& path);
  // Opens an existing database that nothing can change while it is open
  // (one on a read-only file system): read-only, without locks or the
  // write-ahead log's shared memory, which such a file system cannot hold.
  static absl::StatusOr<Db> OpenImmutable(const std::string& path);

  Db(Db&&) noexcept;
  Db& operator=(Db&&) noexcept;
  ~Db();

  sqlite3* get() const { return db_.get(); }

  // Runs one or more statements without results.
  absl::Status Exec(std::string_view sql);
  absl::StatusOr<Statement> Prepare(std::string_view sql);

  // The error for a failed call `what` with result code `rc`, including the
  // connection's message.
  absl::Status Error(std::string_view what, int rc) const;

 private:
  struct LockWaiter;
  explicit Db(sqlite3* db);
  // Open and OpenReadOnly: sqlite3_open_v2 with `flags`; `name` is the
  // path or a file: URI.
  static absl::StatusOr<Db> OpenWith(const std::string& path, const std::string& name, int flags);
  std::unique_ptr<LockWaiter> waiter_;  // the busy handler's state
  std::unique_ptr<sqlite3, DbCloser> db_;
};

// A prepared statement. Move-only; must be destroyed before its Db.
class Statement {
 public:
  Statement() = default;
  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;

  // Binders use 1-based parameter indices. They return *this; a binding
  // error surfaces from the next Step.
  Statement& Bind(int index, std::int64_t v);
  Statement& Bind(int index, double v);
  Statement& Bind(int index, std::string_view v);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);
  Statement& Bind(int index, std::optional<double> v);

  // Executes one step: true if a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to completion, expecting no rows.
  absl::Status Run();
  // Resets for re-use and clears the bindings.
  void Reset();

  // Steps through every row, calling `row()` (which returns absl::Status)
  // for each; stops at the first error. Always resets the statement.
  template <typename F>
  absl::Status ForEachRow(F&& row) {
    absl::Status status;
    while (status.ok()) {
      absl::StatusOr<bool> more = Step();
      if (!more.ok()) {
        status = more.status();
      } else if (!*more) {
        break;
      } else {
        status = row();
      }
    }
    Reset();
    return status;
  }

  // Column readers (0-based) for the current row.
  bool IsNull(int col) const;
  std::int64_t Int(int col) const;
  double Double(int col) const;
  std::optional<double> OptionalDouble(int col) const;
  std::string Text(int col) const;
  std::string Blob(int col) const;

 private:
  friend class Db;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  std::unique_ptr<sqlite3_stmt, StmtFinalizer> stmt_;
  sqlite3* db_ = nullptr;
  int bind_error_ = SQLITE_OK;
};

// A transaction (BEGIN IMMEDIATE) that rolls back in its destructor unless
// Commit succeeded. Move-only.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Db& db);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  absl::Status Commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_;
  bool open_ = true;
};

}  // namespace ktune::sqlite

#endif  // KTUNE_TUNER_STORE_SQLITE_H_
