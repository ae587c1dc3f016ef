// Child processes connected by a socket pair, and length-delimited
// protobuf messages over it with deadlines.
//
// GPU work and NVRTC compiles run in worker processes so that a kernel that
// faults or hangs, or a compile that runs away, costs a process and not the
// job. The parent never initialises CUDA, so starting a worker never forks
// a CUDA process.
#ifndef KTUNE_TUNER_IPC_SUBPROCESS_H_
#define KTUNE_TUNER_IPC_SUBPROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace google::protobuf {
class MessageLite;
}

namespace ktune {

// A connected, owned file descriptor. Move-only; closes on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

using Deadline = std::chrono::steady_clock::time_point;

// Length-delimited protobuf messages (a little-endian uint32 length, then
// the bytes) over a stream socket. Move-only; not thread-safe.
class MessageChannel {
 public:
  static constexpr std::size_t kMaxMessageBytes = std::size_t{1} << 30;

  MessageChannel() = default;
  explicit MessageChannel(FileDescriptor fd) : fd_(std::move(fd)) {}

  bool valid() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }

  // Sends one message. UNAVAILABLE if the peer is gone (never SIGPIPE).
  absl::Status Send(const google::protobuf::MessageLite& message);
  // Receives one message into `message`. DEADLINE_EXCEEDED if none
  // arrived in time (the channel is then out of step: drop it), UNAVAILABLE
  // if the peer closed or died, DATA_LOSS if the bytes do not parse.
  absl::Status Receive(google::protobuf::MessageLite* message,
                       std::optional<Deadline> deadline = std::nullopt);

 private:
  absl::Status ReadExactly(char* out, std::size_t n, std::optional<Deadline> deadline);
  FileDescriptor fd_;
};

// A child process whose stdin and stdout are one end of a socket pair.
// Move-only; the destructor kills (SIGKILL) and reaps a child still alive.
class Subprocess {
 public:
  // Starts `argv` (argv[0] is a path). The child's stderr is inherited.
  // The child should ask to die with its parent (DieWithParent()).
  static absl::StatusOr<Subprocess> Start(const std::vector<std::string>& argv);

  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  MessageChannel& channel() { return channel_; }

  // Sends SIGKILL (if still running) and reaps. Returns how it ended, as
  // "exit code N" or "killed by signal N".
  std::string Kill();
  // Reaps the child if it has exited, without blocking: how it ended, or
  // nullopt if it still runs.
  std::optional<std::string> Poll();

 private:
  Subprocess(pid_t pid, MessageChannel channel) : pid_(pid), channel_(std::move(channel)) {}
  pid_t pid_ = -1;
  MessageChannel channel_;
};

// For worker mains: the socket to the parent (stdin), and a request that
// the kernel kill this process when the parent dies.
MessageChannel ParentChannel();
void DieWithParent();

// The path of the running executable (/proc/self/exe).
std::string SelfExecutable();

// The program to start worker processes with ("__worker compile" or
// "__worker measure"): ktune-worker beside the running executable or in
// ../libexec/ktune/ from its folder, where one is installed (it loads a
// fraction of the libraries, so every worker starts sooner), else the
// running executable itself (ktune and ktuned run workers too). The second
// form looks beside `self` instead.
std::string WorkerExecutable();
std::string WorkerExecutable(const std::string& self);

}  // namespace ktune

#endif  // KTUNE_TUNER_IPC_SUBPROCESS_H_
