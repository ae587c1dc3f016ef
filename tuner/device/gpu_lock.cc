#include "tuner/device/gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tuner/base/file_lock.h"
#include "tuner/base/strings.h"

namespace ktune {

namespace {

bool WritableDirectory(const char* path) {
  struct stat st = {};
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK | X_OK) == 0;
}

}  // namespace

std::string GpuLock::Directory() {
  if (const char* d = std::getenv("KTUNE_LOCK_DIR"); d != nullptr && *d != '\0') return d;
  if (WritableDirectory("/run/lock")) return "/run/lock";
  return "/tmp";
}

GpuLock::GpuLock(const std::string& uuid) {
  // The UUID goes into a file name: keep what is safe there.
  std::string name;
  for (char c : uuid) {
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
    name.push_back(safe ? c : '_');
  }
  path_ = StrCat(Directory(), "/ktune-gpu-", name, ".lock");
  absl::StatusOr<FileLock> lock = FileLock::Open(path_, FileLock::Access::kShared);
  if (!lock.ok()) {
    std::fprintf(stderr,
                 "ktune: %s: evaluations on this GPU do not take turns with other ktune "
                 "processes (set KTUNE_LOCK_DIR to a folder every user can write)\n",
                 std::string(lock.status().message()).c_str());
    return;
  }
  lock_.emplace(*std::move(lock));
}

GpuLock::~GpuLock() = default;

void GpuLock::Acquire(const std::function<void(const std::string& holder)>& on_wait) {
  if (!lock_ || depth_++ > 0) return;
  if (!lock_->TryLock()) {
    if (on_wait) on_wait(lock_->Holder());
    lock_->Lock();
  }
}

void GpuLock::Release() {
  if (!lock_ || depth_ == 0 || --depth_ > 0) return;
  lock_->Unlock();
}

}  // namespace ktune
