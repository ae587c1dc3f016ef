#include "tuner/ipc/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include <google/protobuf/message_lite.h>

#include "tuner/base/strings.h"

extern char** environ;

namespace ktune {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) close(fd_);
}

absl::Status MessageChannel::Send(const google::protobuf::MessageLite& message) {
  if (!fd_.valid()) return absl::UnavailableError("channel closed");
  std::string bytes;
  const std::size_t size = message.ByteSizeLong();
  if (size > kMaxMessageBytes) return absl::InvalidArgumentError("message too large");
  bytes.resize(4 + size);
  for (int i = 0; i < 4; ++i)
    bytes[static_cast<std::size_t>(i)] = static_cast<char>(size >> (8 * i));
  if (!message.SerializeToArray(bytes.data() + 4, static_cast<int>(size))) {
    return absl::InternalError("serialising a message failed");
  }
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(StrCat("send to worker failed: ", std::strerror(errno)));
    }
    sent += static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status MessageChannel::ReadExactly(char* out, std::size_t n,
                                         std::optional<Deadline> deadline) {
  std::size_t got = 0;
  while (got < n) {
    int timeout_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("no answer in time");
      timeout_ms = static_cast<int>(std::min<long long>(left.count() + 1, INT_MAX));
    }
    pollfd p{fd_.get(), POLLIN, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(StrCat("poll failed: ", std::strerror(errno)));
    }
    if (r == 0) return absl::DeadlineExceededError("no answer in time");
    const ssize_t k = recv(fd_.get(), out + got, n - got, 0);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(StrCat("receive failed: ", std::strerror(errno)));
    }
    if (k == 0) return absl::UnavailableError("the other side closed the channel");
    got += static_cast<std::size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status MessageChannel::Receive(google::protobuf::MessageLite* message,
                                     std::optional<Deadline> deadline) {
  if (!fd_.valid()) return absl::UnavailableError("channel closed");
  char header[4];
  if (absl::Status s = ReadExactly(header, 4, deadline); !s.ok()) return s;
  std::size_t size = 0;
  for (int i = 0; i < 4; ++i) {
    size |= static_cast<std::size_t>(static_cast<unsigned char>(header[i])) << (8 * i);
  }
  if (size > kMaxMessageBytes) return absl::DataLossError("message length out of range");
  // Grown as the bytes arrive: a length the peer never sends costs no
  // more memory than what it did send.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::string bytes;
  while (bytes.size() < size) {
    const std::size_t have = bytes.size();
    bytes.resize(have + std::min(kChunk, size - have));
    if (absl::Status s = ReadExactly(bytes.data() + have, bytes.size() - have, deadline); !s.ok()) {
      return s;
    }
  }
  if (!message->ParseFromString(bytes)) return absl::DataLossError("message does not parse");
  return absl::OkStatus();
}

namespace {

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to start");
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return absl::InternalError(StrCat("socketpair failed: ", std::strerror(errno)));
  }
  FileDescriptor parent(fds[0]);
  FileDescriptor child(fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears close-on-exec on the copies.
  posix_spawn_file_actions_adddup2(&actions, child.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, child.get(), 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The child starts with default signal handling, whatever the parent set.
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(StrCat("starting ", argv[0], " failed: ", std::strerror(rc)));
  }
  return Subprocess(pid, MessageChannel(std::move(parent)));
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), channel_(std::move(other.channel_)) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    channel_ = std::move(other.channel_);
  }
  return *this;
}

Subprocess::~Subprocess() { Kill(); }

std::string Subprocess::Kill() {
  if (pid_ < 0) return "not running";
  channel_ = MessageChannel();
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return DescribeWait(status);
}

std::optional<std::string> Subprocess::Poll() {
  if (pid_ < 0) return "not running";
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return std::nullopt;
  pid_ = -1;
  channel_ = MessageChannel();
  return r < 0 ? std::string("lost") : DescribeWait(status);
}

MessageChannel ParentChannel() {
  // stdin and stdout are the same socket; keep stdout for the channel's
  // writes through fd 0 and point fd 1 at stderr so stray prints from
  // libraries cannot corrupt the message stream.
  const int fd = dup(0);
  dup2(2, 1);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return MessageChannel(FileDescriptor(fd));
}

void DieWithParent() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before the request took effect.
  if (getppid() == 1) _exit(1);
}

std::string SelfExecutable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::string();
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string WorkerExecutable() { return WorkerExecutable(SelfExecutable()); }

std::string WorkerExecutable(const std::string& self) {
  const std::size_t slash = self.rfind('/');
  if (slash == std::string::npos) return self;
  const std::string folder = self.substr(0, slash + 1);
  for (const std::string& candidate :
       {folder + "ktune-worker", folder + "../libexec/ktune/ktune-worker"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return self;
}

}  // namespace ktune
