#include "tuner/base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

// Opens (creating if needed) a lock file every user of the host can lock.
// An existing file is opened without O_CREAT: in a sticky folder the
// kernel may refuse O_CREAT on another user's file (protected_regular).
int OpenShared(const std::string& path) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == EACCES) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0 || errno != ENOENT) return fd;
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      (void)fchmod(fd, 0666);  // whatever the umask: others must lock it too
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

}  // namespace

absl::StatusOr<FileLock> FileLock::Open(const std::string& path, Access access) {
  const int fd = access == Access::kShared ? OpenShared(path)
                                           : open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return FileLock(path, fd);
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      locked_(std::exchange(other.locked_, false)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);  // drops the lock if held
}

bool FileLock::TryLock() {
  if (locked_) return true;
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) return false;
  locked_ = true;
  NoteHolder();
  return true;
}

void FileLock::Lock() {
  if (locked_) return;
  while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
  locked_ = true;
  NoteHolder();
}

void FileLock::Unlock() {
  if (!locked_) return;
  flock(fd_, LOCK_UN);
  locked_ = false;
}

std::string FileLock::Holder() const {
  char buf[32] = {};
  const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
  std::string holder;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] >= '0' && buf[i] <= '9') holder.push_back(buf[i]);
  }
  return holder;
}

void FileLock::NoteHolder() {
  // The file may be read-only to this user: then others are not told.
  const std::string me = StrCat(getpid(), "\n");
  if (pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size())) {
    (void)ftruncate(fd_, static_cast<off_t>(me.size()));
  }
}

void FileLock::Remove() {
  if (locked_) unlink(path_.c_str());
  Unlock();
}

}  // namespace ktune
