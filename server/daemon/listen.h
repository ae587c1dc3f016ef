// The address ktuned listens on: its form, and whether it can be taken.
//
// One daemon per address: gRPC would share a TCP port between processes
// (SO_REUSEPORT) and unlink another daemon's Unix socket, splitting the
// calls between two daemons and two stores. ktuned turns port sharing off
// and asks, before it opens anything, whether the address is free.
#ifndef KTUNE_SERVER_DAEMON_LISTEN_H_
#define KTUNE_SERVER_DAEMON_LISTEN_H_

#include <string>

#include "absl/status/status.h"

namespace ktune::daemon {

// HOST:PORT ([V6]:PORT for IPv6) with a port in [0, 65535], or
// unix:PATH. INVALID_ARGUMENT naming --listen and the forms it takes.
absl::Status CheckListenAddress(const std::string& address);

// Whether a listener could take `address` now (REQUIRES: its form checked):
// OK, FAILED_PRECONDITION when it is in use (another ktuned?), or
// INVALID_ARGUMENT when it is not an address of this machine, the host
// name does not resolve, or the port needs privileges. Port 0 is always
// free. The address is not held: a listener must still refuse to share it.
absl::Status ProbeListenAddress(const std::string& address);

}  // namespace ktune::daemon

#endif  // KTUNE_SERVER_DAEMON_LISTEN_H_
