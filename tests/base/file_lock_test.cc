#include "tuner/base/file_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "tests/testing/temp_dir.h"

namespace ktune {
namespace {

// flock belongs to an open file: two FileLocks of one process on one path
// exclude each other as two processes would.
TEST(FileLockTest, OneHolderAtATime) {
  testing::TempDir tmp;
  const std::string path = tmp.File("store.lock");
  absl::StatusOr<FileLock> a = FileLock::Open(path, FileLock::Access::kPrivate);
  absl::StatusOr<FileLock> b = FileLock::Open(path, FileLock::Access::kPrivate);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->TryLock());
  EXPECT_FALSE(b->TryLock());
  EXPECT_EQ(b->Holder(), std::to_string(getpid()));
  a->Unlock();
  EXPECT_TRUE(b->TryLock());
}

// A holder that removes the file on a clean stop must not leave a process
// that opened it before locking an unlinked file: that one would hold a lock
// nobody else can see, beside a new file another process locks.
TEST(FileLockTest, ALockWhoseFileWasRemovedIsTakenOnTheNewFile) {
  testing::TempDir tmp;
  const std::string path = tmp.File("store.lock");
  absl::StatusOr<FileLock> first = FileLock::Open(path, FileLock::Access::kPrivate);
  absl::StatusOr<FileLock> early = FileLock::Open(path, FileLock::Access::kPrivate);
  ASSERT_TRUE(first.ok() && early.ok());
  ASSERT_TRUE(first->TryLock());
  first->Remove();
  EXPECT_FALSE(first->locked());
  EXPECT_NE(access(path.c_str(), F_OK), 0);  // removed

  ASSERT_TRUE(early->TryLock());             // opened the old file, locks the path's
  EXPECT_EQ(access(path.c_str(), F_OK), 0);  // which exists again
  absl::StatusOr<FileLock> late = FileLock::Open(path, FileLock::Access::kPrivate);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->TryLock());  // one holder, as ever
}

TEST(FileLockTest, AnUnwritableFolderIsNamed) {
  absl::StatusOr<FileLock> lock =
      FileLock::Open("/nonexistent-folder/x.lock", FileLock::Access::kPrivate);
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("/nonexistent-folder/x.lock"), std::string::npos);
}

}  // namespace
}  // namespace ktune
