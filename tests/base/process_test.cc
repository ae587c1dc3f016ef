#include "tuner/base/process.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/testing/process.h"

namespace ktune {
namespace {

TEST(ProcessTest, ThisProcessIsAliveAndRoundTrips) {
  const std::optional<ProcessName> self = ThisProcess();
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->pid, getpid());
  EXPECT_GT(self->start_ticks, 0u);
  const std::optional<ProcessName> back = ProcessName::Decode(self->Encode());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->Encode(), self->Encode());
  EXPECT_EQ(LivenessOf(self->Encode()), Liveness::kAlive);
  EXPECT_EQ(self->Describe(), "pid " + std::to_string(getpid()) + " on " + self->host);
}

TEST(ProcessTest, AnEndedProcessIsGoneEvenWhenItsPidIsReused) {
  const pid_t child = fork();
  if (child == 0) {
    for (;;) pause();
  }
  ASSERT_GT(child, 0);
  testing::KilledAtExit reaper(child);
  const std::optional<ProcessName> named = ProcessOnThisHost(child);
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(LivenessOf(named->Encode()), Liveness::kAlive);
  // The same pid with another start time is another process.
  ProcessName other = *named;
  other.start_ticks += 1;
  EXPECT_EQ(LivenessOf(other.Encode()), Liveness::kGone);
  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  reaper.Release();
  EXPECT_EQ(LivenessOf(named->Encode()), Liveness::kGone);
  EXPECT_FALSE(ProcessOnThisHost(child).has_value());
}

TEST(ProcessTest, OtherHostsOtherBootsAndDamagedNames) {
  ProcessName p = *ThisProcess();
  p.host = p.host + "-elsewhere";
  EXPECT_EQ(LivenessOf(p.Encode()), Liveness::kUnknown);
  p = *ThisProcess();
  p.pid_namespace = "pid:[1]";  // a container's: its pids mean nothing here
  EXPECT_EQ(LivenessOf(p.Encode()), Liveness::kUnknown);
  p = *ThisProcess();
  p.boot_id = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(LivenessOf(p.Encode()), Liveness::kGone);  // from before a reboot
  for (const char* bad : {"", "||||", "h|b|n|1", "h|b|n|x|1", "h|b|n|0|1", "h|b|n|-3|1",
                          "h|b|n|1|2|3", "h|b|n|99999999999|1", "|b|n|1|1", "h||n|1|1", "h|b||1|1",
                          "h|b|n|1|18446744073709551616", "h|b|1|1"}) {
    EXPECT_FALSE(ProcessName::Decode(bad).has_value()) << bad;
    EXPECT_EQ(LivenessOf(bad), Liveness::kUnknown) << bad;
  }
}

}  // namespace
}  // namespace ktune
