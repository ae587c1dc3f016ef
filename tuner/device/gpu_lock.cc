#include "tuner/device/gpu_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tuner/base/strings.h"

namespace ktune {

namespace {

bool WritableDirectory(const char* path) {
  struct stat st = {};
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK | X_OK) == 0;
}

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
  fd_ = OpenShared(path_);
  if (fd_ < 0) {
    std::fprintf(stderr,
                 "ktune: cannot open %s (%s): evaluations on this GPU do not take turns with other "
                 "ktune processes (set KTUNE_LOCK_DIR to a folder every user can write)\n",
                 path_.c_str(), std::strerror(errno));
  }
}

GpuLock::~GpuLock() {
  if (fd_ >= 0) close(fd_);  // drops the lock if still held
}

void GpuLock::Acquire(const std::function<void(const std::string& holder)>& on_wait) {
  if (fd_ < 0 || depth_++ > 0) return;
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK && on_wait) {
      char buf[32] = {};
      const ssize_t n = pread(fd_, buf, sizeof buf - 1, 0);
      std::string holder;
      for (ssize_t i = 0; i < n; ++i) {
        if (buf[i] >= '0' && buf[i] <= '9') holder.push_back(buf[i]);
      }
      on_wait(holder);
    }
    while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  // The holder's pid, for a waiter's message (the file may be read-only
  // to this user: then waiters are not told who holds it).
  const std::string me = StrCat(getpid(), "\n");
  if (pwrite(fd_, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size())) {
    (void)ftruncate(fd_, static_cast<off_t>(me.size()));
  }
}

void GpuLock::Release() {
  if (fd_ < 0 || depth_ == 0 || --depth_ > 0) return;
  flock(fd_, LOCK_UN);
}

}  // namespace ktune
