// A thin owner layer over libpq: a connection and a result each have one
// move-only owner, and every failure becomes an absl::Status that names the
// database (its URI without the password) and PostgreSQL's own words.
#ifndef KTUNE_TUNER_STORE_PG_H_
#define KTUNE_TUNER_STORE_PG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tuner/store/libpq.h"

namespace ktune::pg {

// Whether `locator` names a PostgreSQL database (a libpq connection URI:
// postgresql://... or postgres://...) rather than a SQLite file.
bool IsUri(std::string_view locator);

// `uri` with any password (user:PASSWORD@ or password=...) replaced by
// "***", for messages and logs.
std::string Redact(std::string_view uri);

// A text[] literal of `items` ({"a","b"}, each element quoted), for a
// parameter cast to text[].
std::string ArrayLiteral(const std::vector<std::string>& items);

struct ResultClearer {
  void operator()(PGresult* r) const noexcept { Pq().PQclear(r); }
};
struct ConnCloser {
  void operator()(PGconn* c) const noexcept { Pq().PQfinish(c); }
};

class Result;

// One row of a Result, read by column (store/rows.h's accessor).
class Row {
 public:
  Row(const Result& r, int row) : r_(r), row_(row) {}
  bool IsNull(int col) const;
  std::string Text(int col) const;
  std::string Blob(int col) const;
  std::int64_t Int(int col) const;
  double Double(int col) const;
  std::optional<double> OptionalDouble(int col) const;

 private:
  const Result& r_;
  int row_;
};

// A statement's rows, in text form. Move-only.
class Result {
 public:
  Result() = default;
  explicit Result(PGresult* r) : r_(r) {}
  int rows() const { return r_ ? Pq().PQntuples(r_.get()) : 0; }
  bool IsNull(int row, int col) const { return Pq().PQgetisnull(r_.get(), row, col) != 0; }
  std::string Text(int row, int col) const;
  std::int64_t Int(int row, int col) const;
  double Double(int row, int col) const;
  std::optional<double> OptionalDouble(int row, int col) const;
  // A bytea column, unescaped.
  std::string Bytes(int row, int col) const;
  // Rows an INSERT, UPDATE or DELETE changed.
  std::int64_t Changed() const;
  const PGresult* raw() const { return r_.get(); }
  Row At(int row) const { return Row(*this, row); }

 private:
  std::unique_ptr<PGresult, ResultClearer> r_;
};

// Parameters of one statement ($1, $2, ... in the order added), sent as
// text except bytes (binary). Values are copied.
class Params {
 public:
  Params& Add(std::string_view text);
  Params& Add(const char* text) { return Add(std::string_view(text)); }
  Params& Add(const std::string& text) { return Add(std::string_view(text)); }
  Params& Add(std::int64_t v);
  Params& Add(int v) { return Add(static_cast<std::int64_t>(v)); }
  Params& Add(double v);
  Params& Add(std::optional<double> v);
  Params& AddNull();
  Params& AddBytes(std::string_view bytes);

  int size() const { return static_cast<int>(values_.size()); }
  // Pointers into this object: valid while it lives unchanged.
  std::vector<const char*> Values() const;
  std::vector<int> Lengths() const;
  std::vector<int> Formats() const;

 private:
  std::vector<std::optional<std::string>> values_;
  std::vector<int> formats_;
};

// One connection. Move-only; not thread-safe.
class Conn {
 public:
  // Connects to `uri`. UNAVAILABLE when the server cannot be reached,
  // PERMISSION_DENIED when it refuses the user, NOT_FOUND when the
  // database does not exist; each names the URI (redacted).
  static absl::StatusOr<Conn> Connect(const std::string& uri);

  // Runs `sql` with `params` (without any, `sql` may hold several
  // statements; the last one's rows are returned). Errors name the database and what failed:
  // ALREADY_EXISTS for a unique or foreign-key violation, UNAVAILABLE when
  // the connection is lost, RESOURCE_EXHAUSTED when the server's disk is
  // full, PERMISSION_DENIED, else INTERNAL, each with the server's words.
  absl::StatusOr<Result> Exec(std::string_view sql, const Params& params = Params());
  // The same, for statements whose rows are not needed.
  absl::Status Run(std::string_view sql, const Params& params = Params());
  // Runs `sql` (COPY ... FROM STDIN, text format) feeding it `data`.
  absl::Status CopyIn(std::string_view sql, std::string_view data);

  const std::string& name() const { return name_; }  // the redacted URI
  PGconn* get() const { return conn_.get(); }

 private:
  Conn(PGconn* conn, std::string name) : conn_(conn), name_(std::move(name)) {}
  // Connects again when the connection was lost since the last call.
  absl::Status Reconnect();
  absl::Status Error(std::string_view what, const PGresult* r) const;

  friend class Transaction;
  std::unique_ptr<PGconn, ConnCloser> conn_;
  std::string name_;
  // Inside a transaction a lost connection is an error, never a silent
  // reconnection: the statements after it would run outside it.
  bool in_transaction_ = false;
};

// BEGIN ... COMMIT; rolled back when destroyed without Commit.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Conn& conn);
  Transaction(Transaction&& other) noexcept : conn_(other.conn_) { other.conn_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Conn* conn) : conn_(conn) {}
  Conn* conn_;
};

// Text for COPY ... FROM STDIN (text format): one row's fields, escaped,
// tab-separated; std::nullopt is NULL.
class CopyRows {
 public:
  CopyRows& Field(std::optional<std::string_view> value);
  CopyRows& Field(std::int64_t v);
  CopyRows& Field(std::optional<double> v);
  CopyRows& Bytes(std::string_view bytes);  // a bytea field
  void EndRow();
  const std::string& data() const { return data_; }

 private:
  void Separate();
  std::string data_;
  bool row_started_ = false;
};

}  // namespace ktune::pg

#endif  // KTUNE_TUNER_STORE_PG_H_
