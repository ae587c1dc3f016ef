// A host-wide lock on one GPU, shared by every ktune process of the host
// (each `ktune tune --local`, each ktuned): a candidate's evaluation on a
// GPU (loading, verification, timed samples) holds it, so two processes
// tuning on one GPU take turns instead of timing each other's kernels, as
// the jobs of one daemon take turns at its gate.
//
// The lock is flock(2) on `DIR/ktune-gpu-UUID.lock`, DIR being
// $KTUNE_LOCK_DIR, else /run/lock, else /tmp; the kernel drops it when its
// process ends, however it ends. It counts nested holds, so an evaluation
// inside a held re-measurement does not release it early.
#ifndef KTUNE_TUNER_DEVICE_GPU_LOCK_H_
#define KTUNE_TUNER_DEVICE_GPU_LOCK_H_

#include <functional>
#include <optional>
#include <string>

#include "tuner/base/file_lock.h"

namespace ktune {

// Not thread-safe: one owner (a CudaDevice) uses it from one thread at a
// time.
class GpuLock {
 public:
  // `uuid` names the GPU. Where the lock file cannot be opened the lock
  // does nothing, and says so once on stderr.
  explicit GpuLock(const std::string& uuid);
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  ~GpuLock();

  // Takes the lock, waiting for another process's hold to end. While it
  // waits, `on_wait` (if set) is called once with the holder's pid ("" if
  // unknown).
  void Acquire(const std::function<void(const std::string& holder)>& on_wait = {});
  void Release();

  const std::string& path() const { return path_; }
  bool usable() const { return lock_.has_value(); }

  // The folder of the lock files.
  static std::string Directory();

 private:
  std::string path_;
  std::optional<FileLock> lock_;  // none: the file could not be opened
  int depth_ = 0;
};

// Holds a GpuLock for a scope.
class GpuLockHold {
 public:
  explicit GpuLockHold(GpuLock& lock, const std::function<void(const std::string&)>& on_wait = {})
      : lock_(lock) {
    lock_.Acquire(on_wait);
  }
  GpuLockHold(const GpuLockHold&) = delete;
  GpuLockHold& operator=(const GpuLockHold&) = delete;
  ~GpuLockHold() { lock_.Release(); }

 private:
  GpuLock& lock_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_GPU_LOCK_H_
