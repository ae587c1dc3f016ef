// libpq, loaded when a PostgreSQL database is first opened rather than
// linked: a program or application that only uses SQLite files neither
// needs libpq installed nor pays, at every start, for loading it and the
// twenty libraries it brings (Kerberos, LDAP, GnuTLS, ...).
#ifndef KTUNE_TUNER_STORE_LIBPQ_H_
#define KTUNE_TUNER_STORE_LIBPQ_H_

#include <libpq-fe.h>

#include "absl/status/statusor.h"

namespace ktune::pg {

// The libpq functions the PostgreSQL store calls, named as in libpq.
struct LibPq {
  decltype(&::PQclear) PQclear = nullptr;
  decltype(&::PQcmdTuples) PQcmdTuples = nullptr;
  decltype(&::PQconnectdb) PQconnectdb = nullptr;
  decltype(&::PQconninfoFree) PQconninfoFree = nullptr;
  decltype(&::PQconninfoParse) PQconninfoParse = nullptr;
  decltype(&::PQerrorMessage) PQerrorMessage = nullptr;
  decltype(&::PQexec) PQexec = nullptr;
  decltype(&::PQexecParams) PQexecParams = nullptr;
  decltype(&::PQfinish) PQfinish = nullptr;
  decltype(&::PQfreemem) PQfreemem = nullptr;
  decltype(&::PQgetResult) PQgetResult = nullptr;
  decltype(&::PQgetisnull) PQgetisnull = nullptr;
  decltype(&::PQgetlength) PQgetlength = nullptr;
  decltype(&::PQgetvalue) PQgetvalue = nullptr;
  decltype(&::PQntuples) PQntuples = nullptr;
  decltype(&::PQputCopyData) PQputCopyData = nullptr;
  decltype(&::PQputCopyEnd) PQputCopyEnd = nullptr;
  decltype(&::PQreset) PQreset = nullptr;
  decltype(&::PQresultErrorField) PQresultErrorField = nullptr;
  decltype(&::PQresultErrorMessage) PQresultErrorMessage = nullptr;
  decltype(&::PQresultStatus) PQresultStatus = nullptr;
  decltype(&::PQsetNoticeProcessor) PQsetNoticeProcessor = nullptr;
  decltype(&::PQstatus) PQstatus = nullptr;
  decltype(&::PQunescapeBytea) PQunescapeBytea = nullptr;
};

// libpq.so.5, loaded once (later calls return the same): FAILED_PRECONDITION
// when it is not installed or lacks a function, saying so and how to
// install it.
absl::StatusOr<const LibPq*> LoadLibPq();

// The same from the library file `soname` (not cached), for tests.
absl::StatusOr<const LibPq*> LoadLibPqFrom(const char* soname);

// The loaded library. Only where LoadLibPq succeeded before: every
// connection is made through it, so anything holding a connection or a
// result may call this.
const LibPq& Pq();

}  // namespace ktune::pg

#endif  // KTUNE_TUNER_STORE_LIBPQ_H_
