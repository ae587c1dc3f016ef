// Helpers for absl::Status propagation.
#ifndef KTUNE_TUNER_BASE_STATUS_MACROS_H_
#define KTUNE_TUNER_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define KTUNE_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status ktune_status_ = (expr);         \
    if (!ktune_status_.ok()) return ktune_status_; \
  } while (false)

#define KTUNE_CONCAT_INNER_(a, b) a##b
#define KTUNE_CONCAT_(a, b) KTUNE_CONCAT_INNER_(a, b)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its status.
#define KTUNE_ASSIGN_OR_RETURN(lhs, rexpr) \
  KTUNE_ASSIGN_OR_RETURN_IMPL_(KTUNE_CONCAT_(ktune_statusor_, __LINE__), lhs, rexpr)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` may be a declaration.
#define KTUNE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)
// NOLINTEND(bugprone-macro-parentheses)

#endif  // KTUNE_TUNER_BASE_STATUS_MACROS_H_
