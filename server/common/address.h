// Addresses of a ktuned: the port of HOST:PORT as every address flag
// reads it, and the address as clients name it (ktune --server, the client
// library's Connect): HOST:PORT, [V6]:PORT, unix:PATH or any other gRPC
// target. gRPC takes a port above 65535 modulo 65536 and would call another
// port's daemon (or none) under the name given: such a port is refused here.
#ifndef KTUNE_SERVER_COMMON_ADDRESS_H_
#define KTUNE_SERVER_COMMON_ADDRESS_H_

#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {

// The number `port` writes in decimal (leading zeros allowed), if it is
// one in [0, 65535]; nullopt for anything else, the empty string included.
inline std::optional<int> PortNumber(std::string_view port) {
  if (port.empty()) return std::nullopt;
  int n = 0;
  for (const char c : port) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
    if (n > 65535) return std::nullopt;
  }
  return n;
}

// INVALID_ARGUMENT, naming the address, when it is empty or ends in a port
// outside [1, 65535]; OK otherwise (whether it answers is for the call).
inline absl::Status CheckServerAddress(std::string_view address) {
  if (address.empty()) return absl::InvalidArgumentError("empty address");
  // A socket's path may end in ":digits" of its own.
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) {
    return absl::OkStatus();
  }
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return absl::OkStatus();
  const std::string_view port = address.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return absl::OkStatus();  // no port (gRPC's default) or not one: gRPC says
  }
  if (const std::optional<int> n = PortNumber(port); !n || *n == 0) {
    return absl::InvalidArgumentError(
        StrCat(address, ": port ", port, " is not a port; give one in [1, 65535]"));
  }
  return absl::OkStatus();
}

}  // namespace ktune

#endif  // KTUNE_SERVER_COMMON_ADDRESS_H_
