#include "server/daemon/listen.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "server/common/address.h"
#include "tuner/base/strings.h"

namespace ktune::daemon {
namespace {

constexpr const char* kForms =
    "give HOST:PORT (127.0.0.1:7070, [::1]:7070, 0.0.0.0:7070; port 0 picks one) or unix:PATH";

// A file descriptor closed on scope exit.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

absl::Status ProbeUnix(const std::string& address, const std::string& path) {
  sockaddr_un sa{};
  if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
    return absl::InvalidArgumentError(StrCat("--listen ", address,
                                             ": the socket path must have 1 to ",
                                             sizeof(sa.sun_path) - 1, " characters"));
  }
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.c_str(), path.size());
  Socket s(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd() < 0) return absl::OkStatus();  // let the listener say what is wrong
  // Someone answers there: a listener would unlink their socket and take it.
  if (connect(s.fd(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) == 0) {
    return absl::FailedPreconditionError(
        StrCat("--listen ", address, ": the address is in use (another ktuned?)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckListenAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) {
    if (address.size() > 5) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat("--listen ", address, ": no socket path; ", kForms));
  }
  const absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        StrCat("--listen ", address, ": ", hp.status().message(), "; ", kForms));
  }
  if (!PortNumber(hp->port)) {
    return absl::InvalidArgumentError(
        StrCat("--listen ", address, ": the port must be a number in [0, 65535]; ", kForms));
  }
  return absl::OkStatus();
}

absl::Status ProbeListenAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return ProbeUnix(address, address.substr(5));
  const absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok()) return CheckListenAddress(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(hp->host.c_str(), hp->port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        StrCat("--listen ", address, ": cannot resolve ", hp->host, " (", gai_strerror(rc), ")"));
  }
  absl::Status out = absl::OkStatus();
  for (addrinfo* a = found; a != nullptr && out.ok(); a = a->ai_next) {
    Socket s(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (s.fd() < 0) continue;
    // As a listener binds: a socket in TIME_WAIT does not hold the port,
    // a listening one does.
    const int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0) continue;
    const int err = errno;
    if (err == EADDRINUSE) {
      out = absl::FailedPreconditionError(
          StrCat("--listen ", address, ": the address is in use (another ktuned?)"));
    } else if (err == EADDRNOTAVAIL) {
      out = absl::InvalidArgumentError(
          StrCat("--listen ", address, ": ", hp->host, " is not an address of this machine"));
    } else if (err == EACCES) {
      out = absl::InvalidArgumentError(StrCat("--listen ", address, ": port ", hp->port,
                                              " needs privileges; use a port of 1024 or above"));
    }
  }
  freeaddrinfo(found);
  return out;
}

}  // namespace ktune::daemon
