#include "tuner/store/pg.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tuner/base/strings.h"

namespace ktune::pg {

bool IsUri(std::string_view locator) {
  return locator.starts_with("postgresql://") || locator.starts_with("postgres://");
}

std::string ArrayLiteral(const std::vector<std::string>& items) {
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ',';
    out += '"';
    for (const char c : items[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

std::string Redact(std::string_view uri) {
  std::string out(uri);
  // user:PASSWORD@ in the authority.
  const std::size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const std::size_t start = scheme + 3;
    const std::size_t end = out.find_first_of("/?", start);
    const std::size_t at = out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at != std::string::npos && at >= start) {
      const std::size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // password=... among the query parameters.
  for (std::size_t p = out.find("password="); p != std::string::npos;
       p = out.find("password=", p + 1)) {
    if (p > 0 && out[p - 1] != '?' && out[p - 1] != '&') continue;
    const std::size_t v = p + 9;
    const std::size_t e = out.find('&', v);
    out.replace(v, (e == std::string::npos ? out.size() : e) - v, "***");
  }
  return out;
}

namespace {

std::string Trimmed(const char* message) {
  std::string s = message != nullptr ? message : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  // libpq's multi-line messages read better on one line.
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

void IgnoreNotice(void*, const char*) {}

}  // namespace

std::string Result::Text(int row, int col) const {
  return std::string(Pq().PQgetvalue(r_.get(), row, col),
                     static_cast<std::size_t>(Pq().PQgetlength(r_.get(), row, col)));
}

std::int64_t Result::Int(int row, int col) const {
  if (IsNull(row, col)) return 0;
  const char* v = Pq().PQgetvalue(r_.get(), row, col);
  std::int64_t out = 0;
  std::from_chars(v, v + std::strlen(v), out);
  return out;
}

double Result::Double(int row, int col) const { return OptionalDouble(row, col).value_or(0); }

std::optional<double> Result::OptionalDouble(int row, int col) const {
  if (IsNull(row, col)) return std::nullopt;
  return std::strtod(Pq().PQgetvalue(r_.get(), row, col), nullptr);
}

std::string Result::Bytes(int row, int col) const {
  if (IsNull(row, col)) return "";
  std::size_t n = 0;
  unsigned char* raw = Pq().PQunescapeBytea(
      reinterpret_cast<const unsigned char*>(Pq().PQgetvalue(r_.get(), row, col)), &n);
  if (raw == nullptr) return "";
  std::string out(reinterpret_cast<const char*>(raw), n);
  Pq().PQfreemem(raw);
  return out;
}

std::int64_t Result::Changed() const {
  const char* n = r_ ? Pq().PQcmdTuples(r_.get()) : "";
  return n != nullptr && *n != '\0' ? std::strtoll(n, nullptr, 10) : 0;
}

bool Row::IsNull(int col) const { return r_.IsNull(row_, col); }
std::string Row::Text(int col) const { return r_.Text(row_, col); }
std::string Row::Blob(int col) const { return r_.Bytes(row_, col); }
std::int64_t Row::Int(int col) const { return r_.Int(row_, col); }
double Row::Double(int col) const { return r_.Double(row_, col); }
std::optional<double> Row::OptionalDouble(int col) const { return r_.OptionalDouble(row_, col); }

Params& Params::Add(std::string_view text) {
  values_.emplace_back(std::string(text));
  formats_.push_back(0);
  return *this;
}

Params& Params::Add(std::int64_t v) { return Add(std::string_view(std::to_string(v))); }

Params& Params::Add(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return Add(std::string_view(buf));
}

Params& Params::Add(std::optional<double> v) { return v ? Add(*v) : AddNull(); }

Params& Params::AddNull() {
  values_.emplace_back(std::nullopt);
  formats_.push_back(0);
  return *this;
}

Params& Params::AddBytes(std::string_view bytes) {
  values_.emplace_back(std::string(bytes));
  formats_.push_back(1);
  return *this;
}

std::vector<const char*> Params::Values() const {
  std::vector<const char*> out;
  for (const auto& v : values_) out.push_back(v ? v->c_str() : nullptr);
  return out;
}

std::vector<int> Params::Lengths() const {
  std::vector<int> out;
  for (const auto& v : values_) out.push_back(v ? static_cast<int>(v->size()) : 0);
  return out;
}

std::vector<int> Params::Formats() const { return formats_; }

absl::StatusOr<Conn> Conn::Connect(const std::string& uri) {
  const std::string name = Redact(uri);
  if (absl::StatusOr<const LibPq*> api = LoadLibPq(); !api.ok()) {
    return absl::Status(api.status().code(), StrCat(name, ": ", api.status().message()));
  }
  char* parse_error = nullptr;
  PQconninfoOption* options = Pq().PQconninfoParse(uri.c_str(), &parse_error);
  if (options == nullptr) {
    const std::string why = parse_error != nullptr ? Trimmed(parse_error) : "out of memory";
    if (parse_error != nullptr) Pq().PQfreemem(parse_error);
    return absl::InvalidArgumentError(
        StrCat(name, ": not a PostgreSQL connection URI (", why,
               "); the form is postgresql://USER@HOST[:PORT]/DATABASE[?PARAM=VALUE...]"));
  }
  Pq().PQconninfoFree(options);
  std::unique_ptr<PGconn, ConnCloser> conn(Pq().PQconnectdb(uri.c_str()));
  if (conn == nullptr) return absl::ResourceExhaustedError(StrCat(name, ": out of memory"));
  if (Pq().PQstatus(conn.get()) != CONNECTION_OK) {
    const std::string why = Trimmed(Pq().PQerrorMessage(conn.get()));
    if (why.find("does not exist") != std::string::npos &&
        why.find("database") != std::string::npos) {
      return absl::NotFoundError(StrCat(name, ": ", why,
                                        " (create it: createdb, or CREATE "
                                        "DATABASE; ktune creates its tables)"));
    }
    if (why.find("authentication failed") != std::string::npos ||
        why.find("pg_hba.conf") != std::string::npos ||
        (why.find("role") != std::string::npos &&
         why.find("does not exist") != std::string::npos)) {
      return absl::PermissionDeniedError(StrCat(name, ": the server refused the user: ", why));
    }
    return absl::UnavailableError(StrCat(name, ": cannot reach the database: ", why));
  }
  Pq().PQsetNoticeProcessor(conn.get(), IgnoreNotice, nullptr);
  return Conn(conn.release(), name);
}

absl::Status Conn::Error(std::string_view what, const PGresult* r) const {
  const char* state = r != nullptr ? Pq().PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  const std::string code = state != nullptr ? state : "";
  const std::string why =
      Trimmed(r != nullptr ? Pq().PQresultErrorMessage(r) : Pq().PQerrorMessage(conn_.get()));
  const std::string where = StrCat(name_, ": ", what, ": ", why);
  if (Pq().PQstatus(conn_.get()) == CONNECTION_BAD || code.starts_with("08") || code == "57P01" ||
      code == "57P02" || code == "57P03") {
    return absl::UnavailableError(
        StrCat(name_, ": lost the connection to the database (", why,
               "); what was stored before is kept, and the next call connects again"));
  }
  if (code.starts_with("23")) return absl::AlreadyExistsError(where);
  if (code.starts_with("53")) {
    return absl::ResourceExhaustedError(
        StrCat(name_, ": the database server is out of space or memory (", why,
               "); what was stored before is kept; free some and run the command again"));
  }
  if (code == "25006" || code == "42501") return absl::PermissionDeniedError(where);
  if (code == "40001" || code == "40P01") return absl::AbortedError(where);
  if (code == "55P03" || code == "57014") return absl::UnavailableError(where);
  return absl::InternalError(where);
}

absl::Status Conn::Reconnect() {
  if (Pq().PQstatus(conn_.get()) != CONNECTION_BAD) return absl::OkStatus();
  if (in_transaction_) return Error("the transaction", nullptr);
  // The server restarted, or the network dropped, since the last call.
  Pq().PQreset(conn_.get());
  if (Pq().PQstatus(conn_.get()) != CONNECTION_OK) return Error("connecting again", nullptr);
  Pq().PQsetNoticeProcessor(conn_.get(), IgnoreNotice, nullptr);
  return absl::OkStatus();
}

namespace {

// The statement's first words, to say what failed.
std::string FirstWords(std::string_view sql) {
  std::size_t b = sql.find_first_not_of(" \n");
  if (b == std::string_view::npos) return "a statement";
  sql = sql.substr(b);
  return std::string(sql.substr(0, std::min(sql.find_first_of("\n("), std::size_t{60})));
}

}  // namespace

absl::StatusOr<Result> Conn::Exec(std::string_view sql, const Params& params) {
  if (absl::Status s = Reconnect(); !s.ok()) return s;
  const std::string text(sql);
  const std::vector<const char*> values = params.Values();
  const std::vector<int> lengths = params.Lengths();
  const std::vector<int> formats = params.Formats();
  // Without parameters, several statements may be given at once.
  Result r(params.size() == 0
               ? Pq().PQexec(conn_.get(), text.c_str())
               : Pq().PQexecParams(conn_.get(), text.c_str(), params.size(), nullptr, values.data(),
                                   lengths.data(), formats.data(), 0));
  const ExecStatusType status = Pq().PQresultStatus(r.raw());
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return Error(FirstWords(sql), r.raw());
  }
  return r;
}

absl::Status Conn::Run(std::string_view sql, const Params& params) {
  absl::StatusOr<Result> r = Exec(sql, params);
  return r.ok() ? absl::OkStatus() : r.status();
}

absl::Status Conn::CopyIn(std::string_view sql, std::string_view data) {
  if (absl::Status s = Reconnect(); !s.ok()) return s;
  const std::string text(sql);
  {
    Result started(Pq().PQexec(conn_.get(), text.c_str()));
    if (Pq().PQresultStatus(started.raw()) != PGRES_COPY_IN)
      return Error(FirstWords(sql), started.raw());
  }
  constexpr std::size_t kChunk = 1 << 20;
  std::string failure;
  for (std::size_t at = 0; at < data.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, data.size() - at);
    if (Pq().PQputCopyData(conn_.get(), data.data() + at, static_cast<int>(n)) != 1) {
      failure = Trimmed(Pq().PQerrorMessage(conn_.get()));
      break;
    }
  }
  Pq().PQputCopyEnd(conn_.get(), failure.empty() ? nullptr : failure.c_str());
  absl::Status out;
  for (;;) {
    Result r(Pq().PQgetResult(conn_.get()));
    if (r.raw() == nullptr) break;
    if (out.ok() && Pq().PQresultStatus(r.raw()) != PGRES_COMMAND_OK) {
      out = Error(FirstWords(sql), r.raw());
    }
  }
  return out;
}

absl::StatusOr<Transaction> Transaction::Begin(Conn& conn) {
  if (absl::Status s = conn.Run("BEGIN"); !s.ok()) return s;
  conn.in_transaction_ = true;
  return Transaction(&conn);
}

Transaction::~Transaction() {
  if (conn_ == nullptr) return;
  if (Pq().PQstatus(conn_->get()) == CONNECTION_OK) (void)conn_->Run("ROLLBACK");
  conn_->in_transaction_ = false;
}

absl::Status Transaction::Commit() {
  Conn* c = conn_;
  conn_ = nullptr;
  absl::Status s = c->Run("COMMIT");
  c->in_transaction_ = false;
  return s;
}

void CopyRows::Separate() {
  if (row_started_) data_.push_back('\t');
  row_started_ = true;
}

CopyRows& CopyRows::Field(std::optional<std::string_view> value) {
  Separate();
  if (!value) {
    data_ += "\\N";
    return *this;
  }
  for (const char c : *value) {
    switch (c) {
      case '\\': data_ += "\\\\"; break;
      case '\t': data_ += "\\t"; break;
      case '\n': data_ += "\\n"; break;
      case '\r': data_ += "\\r"; break;
      default: data_.push_back(c);
    }
  }
  return *this;
}

CopyRows& CopyRows::Field(std::int64_t v) {
  Separate();
  data_ += std::to_string(v);
  return *this;
}

CopyRows& CopyRows::Field(std::optional<double> v) {
  Separate();
  if (!v) {
    data_ += "\\N";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", *v);
  data_ += buf;
  return *this;
}

CopyRows& CopyRows::Bytes(std::string_view bytes) {
  Separate();
  // bytea's hex form, its backslash escaped for COPY.
  static constexpr char kHex[] = "0123456789abcdef";
  data_ += "\\\\x";
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    data_.push_back(kHex[u >> 4]);
    data_.push_back(kHex[u & 15]);
  }
  return *this;
}

void CopyRows::EndRow() {
  data_.push_back('\n');
  row_started_ = false;
}

}  // namespace ktune::pg
