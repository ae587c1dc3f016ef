// A small file system of the test's own: a tmpfs mounted in a mount
// namespace private to this test process (and the processes it starts),
// so a test can fill a disk or make it read-only without touching the
// machine's. Needs root, or unprivileged user namespaces.
#ifndef KTUNE_TESTS_TESTING_SMALL_DISK_H_
#define KTUNE_TESTS_TESTING_SMALL_DISK_H_

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

namespace ktune::testing {

namespace internal {

inline bool WriteTo(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  return static_cast<bool>(f.flush());
}

// Enters a mount namespace of this process's own; mounts made afterwards
// are seen by it and its children only.
inline bool PrivateMounts(std::string* why) {
  if (unshare(CLONE_NEWNS) != 0) {
    const uid_t uid = getuid();
    const gid_t gid = getgid();
    // Not root: a user namespace gives the rights inside it (single-threaded
    // processes only, as a test's is when it starts).
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      *why = std::string("no mount namespace (unshare: ") + std::strerror(errno) + ")";
      return false;
    }
    (void)WriteTo("/proc/self/setgroups", "deny");
    if (!WriteTo("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1\n") ||
        !WriteTo("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1\n")) {
      *why = "no mount namespace (uid_map refused)";
      return false;
    }
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *why = std::string("mount --make-rprivate /: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace internal

// Mounts a tmpfs of `bytes` at the existing folder `dir`, for this process
// and its children. False (with the reason) if this machine does not let
// the test do so; the caller skips.
inline bool MountSmallDisk(const std::string& dir, std::size_t bytes, std::string* why) {
  if (!internal::PrivateMounts(why)) return false;
  const std::string options = "size=" + std::to_string(bytes) + ",mode=0777";
  if (mount("ktune-test", dir.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    *why = std::string("mount -t tmpfs: ") + std::strerror(errno);
    return false;
  }
  return true;
}

// Unmounts it (before the test's folder is removed).
inline void UnmountSmallDisk(const std::string& dir) { (void)umount2(dir.c_str(), MNT_DETACH); }

// Makes the disk at `dir` read-only, or writable again.
inline bool RemountReadOnly(const std::string& dir, bool read_only) {
  return mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | (read_only ? MS_RDONLY : 0), nullptr) ==
         0;
}

// Fills the disk holding `path` (a new file there) until it is full, then
// gives back `leave` bytes of it.
inline bool FillDisk(const std::string& path, std::size_t leave) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  const std::string block(4096, 'x');
  off_t written = 0;
  while (true) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n <= 0) break;
    written += n;
  }
  const bool ok =
      ftruncate(fd,
                written > static_cast<off_t>(leave) ? written - static_cast<off_t>(leave) : 0) == 0;
  close(fd);
  return ok;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_SMALL_DISK_H_
