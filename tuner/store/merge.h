// Gathering headless jobs' stores into one: a SQLite store, copied and
// checked before anything is added (see Store::Merge).
#ifndef KTUNE_TUNER_STORE_MERGE_H_
#define KTUNE_TUNER_STORE_MERGE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace ktune {

// Another ktune database, copied (SQLite's online backup: a consistent
// snapshot, even while a job writes to it), checked and migrated to this
// ktune's schema, ready for Store::Merge. The original is only read. The
// copy lives in the temporary folder and is removed with this object, its
// only owner (move-only). Not thread-safe.
class MergeSource {
 public:
  // NOT_FOUND (no file), FAILED_PRECONDITION (not SQLite, not a ktune
  // database, a schema newer than this ktune's), each naming `path`.
  static absl::StatusOr<MergeSource> Prepare(const std::string& path);
  MergeSource(MergeSource&& other) noexcept;
  MergeSource& operator=(MergeSource&& other) noexcept;
  ~MergeSource();
  const std::string& path() const { return path_; }
  const std::string& copy_path() const { return copy_; }

 private:
  MergeSource(std::string path, std::string copy)
      : path_(std::move(path)), copy_(std::move(copy)) {}
  std::string path_;
  std::string copy_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_MERGE_H_
