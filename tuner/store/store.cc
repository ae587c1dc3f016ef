#include "tuner/store/store.h"

#include "tuner/store/sqlite_store.h"

namespace ktune {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
    case JobState::kInterrupted: return "interrupted";
  }
  return "?";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(JobState::kInterrupted); ++i) {
    const auto s = static_cast<JobState>(i);
    if (name == JobStateName(s)) return s;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& locator, bool create) {
  absl::StatusOr<std::unique_ptr<SqliteStore>> sqlite = SqliteStore::Open(locator, create);
  if (!sqlite.ok()) return sqlite.status();
  return std::unique_ptr<Store>(*std::move(sqlite));
}

}  // namespace ktune
