// The store's tables as both backends hold them: the same tables, columns
// and meanings in SQLite and PostgreSQL, so rows move between them column
// by column (ktune merge into PostgreSQL, ktune export to SQLite).
#ifndef KTUNE_TUNER_STORE_TABLES_H_
#define KTUNE_TUNER_STORE_TABLES_H_

#include <span>
#include <string>

namespace ktune {

struct StoreColumn {
  enum class Kind { kInt, kReal, kText, kBlob };
  const char* name;
  Kind kind;
};

struct StoreTable {
  const char* name;
  std::span<const StoreColumn> columns;
};

// devices, kernels, jobs, measurements, best: parents before children.
std::span<const StoreTable> StoreTables();

// "a, b, c": the table's column names, each after `prefix` ("s.", say).
std::string ColumnList(const StoreTable& table, const std::string& prefix = "");

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_TABLES_H_
