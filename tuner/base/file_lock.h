// An exclusive flock(2) on a file, with one owner: the kernel drops it when
// the owning process ends, however it ends (SIGKILL included). The holder
// writes its pid into the file, so a process that finds the lock taken can
// say who holds it.
#ifndef KTUNE_TUNER_BASE_FILE_LOCK_H_
#define KTUNE_TUNER_BASE_FILE_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace ktune {

// Move-only; not thread-safe.
class FileLock {
 public:
  enum class Access {
    kPrivate,  // created 0600: this user's processes only
    kShared,   // created 0666 whatever the umask: every user of the host
  };

  // Opens `path`, creating it if missing. Errors (the folder cannot be
  // written, ...) name the path. The lock is not taken yet.
  static absl::StatusOr<FileLock> Open(const std::string& path, Access access);

  FileLock(FileLock&& other) noexcept;
  FileLock& operator=(FileLock&& other) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();  // releases the lock

  // Takes the lock if it is free: false when another process holds it.
  bool TryLock();
  // Takes the lock, waiting for the holder to release it.
  void Lock();
  void Unlock();
  bool locked() const { return locked_; }

  // The pid the holder wrote ("" when unknown or unreadable).
  std::string Holder() const;

  // Removes the file while holding the lock, then releases it. A process
  // that opened the file before it was removed and then locks it sees that
  // the path no longer names what it locked, and opens the path again
  // (TryLock and Lock do this), so two processes never both hold "the" lock.
  void Remove();

  const std::string& path() const { return path_; }

 private:
  FileLock(std::string path, Access access, int fd)
      : path_(std::move(path)), access_(access), fd_(fd) {}
  // Writes this process's pid, for those who find the lock taken.
  void NoteHolder();
  // Whether the descriptor is still the file the path names.
  bool StillAtPath() const;
  // After flock succeeded: keeps the lock if it is the path's file, else
  // drops it and opens the path again (false if that fails).
  bool Settle(bool* held);

  std::string path_;
  Access access_ = Access::kPrivate;
  int fd_ = -1;
  bool locked_ = false;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_FILE_LOCK_H_
