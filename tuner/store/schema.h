// The SQLite store's schema: its migrations, oldest first, and how a file
// is opened, checked and migrated forward.
#ifndef KTUNE_TUNER_STORE_SCHEMA_H_
#define KTUNE_TUNER_STORE_SCHEMA_H_

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/store/sqlite.h"

namespace ktune {

// One schema step: applied in a transaction, then user_version = version.
struct Migration {
  int version;
  const char* sql;
};

// The schema migrations of this ktune, oldest first.
std::span<const Migration> SchemaMigrations();

// Opens the database at `path` (creating it if `create`), checks that it is
// empty or a ktune database, sets WAL mode, the busy timeout and foreign
// keys, and applies the `migrations` it lacks, each in its own transaction.
// Returns the connection; *version receives the schema version. Errors:
// NOT_FOUND (no file and !create), FAILED_PRECONDITION (not SQLite, not a
// ktune database, or a schema newer than `migrations`), each naming the
// path; a refused file is left unchanged.
absl::StatusOr<sqlite::Db> OpenMigrated(const std::string& path, bool create,
                                        std::span<const Migration> migrations, int* version);

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_SCHEMA_H_
