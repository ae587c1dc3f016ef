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

int OpenLockFile(const std::string& path, FileLock::Access access) {
  return access == FileLock::Access::kShared
             ? OpenShared(path)
             : open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
}

// Attempts at a lock whose file keeps being removed under it.
constexpr int kSettleAttempts = 16;

}  // namespace

absl::StatusOr<FileLock> FileLock::Open(const std::string& path, Access access) {
  const int fd = OpenLockFile(path, access);
  if (fd < 0) {
    return absl::PermissionDeniedError(StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return FileLock(path, access, fd);
}

FileLock::FileLock(FileLock&& other) noexcept
    : path_(std::move(other.path_)),
      access_(other.access_),
      fd_(std::exchange(other.fd_, -1)),
      locked_(std::exchange(other.locked_, false)) {}

FileLock& FileLock::operator=(FileLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    access_ = other.access_;
    fd_ = std::exchange(other.fd_, -1);
    locked_ = std::exchange(other.locked_, false);
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);  // drops the lock if held
}

bool FileLock::StillAtPath() const {
  struct stat held {};
  struct stat named {};
  return fstat(fd_, &held) == 0 && stat(path_.c_str(), &named) == 0 &&
         held.st_dev == named.st_dev && held.st_ino == named.st_ino;
}

bool FileLock::Settle(bool* held) {
  if (StillAtPath()) {
    locked_ = true;
    NoteHolder();
    *held = true;
    return true;
  }
  // Removed by its last holder after this process opened it.
  flock(fd_, LOCK_UN);
  const int fd = OpenLockFile(path_, access_);
  if (fd < 0) return false;
  close(fd_);
  fd_ = fd;
  *held = false;
  return true;
}

bool FileLock::TryLock() {
  if (locked_) return true;
  for (int attempt = 0; attempt < kSettleAttempts; ++attempt) {
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) return false;
    bool held = false;
    if (!Settle(&held)) return false;
    if (held) return true;
  }
  return false;
}

void FileLock::Lock() {
  while (!locked_) {
    if (flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      return;  // EBADF/ENOLCK: nothing to wait on; locked() stays false
    }
    bool held = false;
    if (!Settle(&held)) return;
  }
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
