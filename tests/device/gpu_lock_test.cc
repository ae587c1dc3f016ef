#include "tuner/device/gpu_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>

#include "tests/testing/temp_dir.h"

namespace ktune {
namespace {

// One owner of the lock file's descriptor.
static_assert(!std::is_copy_constructible_v<GpuLock>);
static_assert(!std::is_copy_assignable_v<GpuLock>);

class GpuLockTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("KTUNE_LOCK_DIR", tmp_.path().c_str(), 1); }
  void TearDown() override { unsetenv("KTUNE_LOCK_DIR"); }

  // Whether some holder keeps the lock file locked (a fresh descriptor
  // cannot take it).
  static bool Held(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd);
    return held;
  }

  testing::TempDir tmp_;
};

TEST_F(GpuLockTest, OneHolderAtATimeAndTheWaiterIsToldWho) {
  GpuLock a("GPU-1234/abc");
  ASSERT_TRUE(a.usable());
  EXPECT_EQ(a.path(), tmp_.path() + "/ktune-gpu-GPU-1234_abc.lock");
  struct stat st = {};
  ASSERT_EQ(stat(a.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);  // every user can lock it

  GpuLock b("GPU-1234/abc");  // another descriptor: as another process
  a.Acquire();
  std::atomic<bool> released{false}, acquired_after_release{false};
  std::string told;
  std::atomic<bool> waiting{false};
  std::thread t([&] {
    b.Acquire([&](const std::string& holder) {
      told = holder;
      waiting = true;
    });
    acquired_after_release = released.load();
    b.Release();
  });
  while (!waiting) std::this_thread::yield();
  EXPECT_EQ(told, std::to_string(getpid()));
  released = true;
  a.Release();
  t.join();
  EXPECT_TRUE(acquired_after_release);
  EXPECT_FALSE(Held(a.path()));
}

TEST_F(GpuLockTest, NestedHoldsReleaseAtTheOutermost) {
  GpuLock a("GPU-9");
  {
    GpuLockHold outer(a);
    {
      GpuLockHold inner(a);
      EXPECT_TRUE(Held(a.path()));
    }
    EXPECT_TRUE(Held(a.path()));  // the inner hold did not release it
  }
  EXPECT_FALSE(Held(a.path()));
  GpuLock other("GPU-10");  // another GPU: another lock
  GpuLockHold h(a);
  EXPECT_FALSE(Held(other.path()));
}

TEST_F(GpuLockTest, AProcessThatDiesHoldingItFreesIt) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    GpuLock lock("GPU-7");
    lock.Acquire();
    if (write(ready[1], "y", 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  GpuLock mine("GPU-7");
  std::string told;
  std::thread killer;
  mine.Acquire([&](const std::string& holder) {
    told = holder;
    // The holder ends, however it ends; the kernel drops its lock.
    killer = std::thread([child] { kill(child, SIGKILL); });
  });
  EXPECT_EQ(told, std::to_string(child));
  EXPECT_TRUE(Held(mine.path()));
  mine.Release();
  killer.join();
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

TEST_F(GpuLockTest, AFolderItCannotUseLeavesTheLockInert) {
  setenv("KTUNE_LOCK_DIR", (tmp_.path() + "/missing").c_str(), 1);
  GpuLock lock("GPU-1");
  EXPECT_FALSE(lock.usable());
  lock.Acquire();  // does nothing, does not block
  lock.Release();
}

}  // namespace
}  // namespace ktune
