#include "tuner/ipc/subprocess.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "ktune/v1/worker.pb.h"
#include "tests/testing/temp_dir.h"
#include "tuner/ipc/worker_protocol.h"

namespace ktune {
namespace {

static_assert(std::is_nothrow_move_constructible_v<Subprocess>);
static_assert(!std::is_copy_constructible_v<Subprocess>);
static_assert(std::is_nothrow_move_constructible_v<FileDescriptor>);
static_assert(!std::is_copy_constructible_v<FileDescriptor>);

TEST(SubprocessTest, MessagesRoundTripThroughAnEchoingChild) {
  // cat echoes the framed bytes back: what is sent is what is received.
  absl::StatusOr<Subprocess> p = Subprocess::Start({"/bin/cat"});
  ASSERT_TRUE(p.ok()) << p.status();
  v1::CompileRequest sent;
  sent.set_id(42);
  sent.set_source(std::string(200000, 'x'));  // larger than a socket buffer
  sent.add_options("-DA=1");
  ASSERT_TRUE(p->channel().Send(sent).ok());
  v1::CompileRequest got;
  ASSERT_TRUE(
      p->channel().Receive(&got, std::chrono::steady_clock::now() + std::chrono::seconds(10)).ok());
  EXPECT_EQ(got.id(), 42u);
  EXPECT_EQ(got.source(), sent.source());
  EXPECT_EQ(got.options(0), "-DA=1");
}

TEST(SubprocessTest, DeadlinesAndDeathAreReported) {
  absl::StatusOr<Subprocess> sleeper = Subprocess::Start({"/bin/sleep", "30"});
  ASSERT_TRUE(sleeper.ok());
  v1::CompileResult r;
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = sleeper->channel().Receive(&r, t0 + std::chrono::milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(sleeper->Kill(), "killed by signal 9 (Killed)");

  absl::StatusOr<Subprocess> quitter = Subprocess::Start({"/bin/true"});
  ASSERT_TRUE(quitter.ok());
  s = quitter->channel().Receive(&r, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  // Writing to a dead child is an error, not SIGPIPE.
  for (int i = 0; i < 3; ++i) (void)quitter->channel().Send(r);
  EXPECT_EQ(quitter->Kill(), "exit code 0");
}

TEST(SubprocessTest, GarbageIsDataLoss) {
  absl::StatusOr<Subprocess> p =
      Subprocess::Start({"/bin/sh", "-c", "printf '\\004\\000\\000\\000\\377\\377\\377\\377'"});
  ASSERT_TRUE(p.ok());
  v1::CompileResult r;
  absl::Status s =
      p->channel().Receive(&r, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
}

TEST(SubprocessTest, MissingProgramIsAnError) {
  absl::StatusOr<Subprocess> p = Subprocess::Start({"/nonexistent/program"});
  // posix_spawn may report the failure at once or as exit code 127.
  if (p.ok()) {
    EXPECT_EQ(p->Kill().substr(0, 9), "exit code");
  }
}

TEST(SubprocessTest, WorkersRunFromTheLeanProgramWhereItIsInstalled) {
  namespace fs = std::filesystem;
  const testing::TempDir tmp;
  const std::string bin = tmp.path() + "/bin";
  fs::create_directories(bin);
  const std::string self = bin + "/ktune";
  auto make = [](const std::string& path, fs::perms perms) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << "#!/bin/sh\n";
    fs::permissions(path, perms);
  };
  make(self, fs::perms::owner_all);
  // Nothing installed: the program runs its own workers.
  EXPECT_EQ(WorkerExecutable(self), self);
  // An installed layout: PREFIX/libexec/ktune/ktune-worker.
  const std::string libexec = tmp.path() + "/libexec/ktune/ktune-worker";
  make(libexec, fs::perms::owner_all);
  EXPECT_EQ(WorkerExecutable(self), bin + "/../libexec/ktune/ktune-worker");
  // A build tree or a bundle: beside the program, found first.
  make(bin + "/ktune-worker", fs::perms::owner_all);
  EXPECT_EQ(WorkerExecutable(self), bin + "/ktune-worker");
  // A file that cannot be run is not a worker program.
  fs::permissions(bin + "/ktune-worker", fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(libexec, fs::perms::owner_read);
  EXPECT_EQ(WorkerExecutable(self), self);
}

TEST(SubprocessTest, AWorkerRefusesAParentOfAnotherProtocol) {
  EXPECT_EQ(WorkerProtocol().size(), 16u);
  EXPECT_TRUE(CheckWorkerProtocol({"__worker", "measure"}).ok());
  EXPECT_TRUE(CheckWorkerProtocol({"__worker", "measure", "--protocol", WorkerProtocol()}).ok());
  const absl::Status other =
      CheckWorkerProtocol({"__worker", "compile", "--protocol", "0123456789abcdef", "--warm"});
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.message().find("0123456789abcdef"), std::string_view::npos) << other;
  EXPECT_NE(other.message().find(WorkerProtocol()), std::string_view::npos) << other;
}

}  // namespace
}  // namespace ktune
