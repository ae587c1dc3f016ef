// Addresses of a ktuned: the port of HOST:PORT as every address flag
// reads it, and the address as clients name it (ktune --server, the client
// library's Connect): HOST:PORT, [V6]:PORT, unix:PATH or a gRPC target
// with its scheme. Left to gRPC, a port above 65535 is taken modulo 65536
// and calls another port's daemon (or none) under the name given, a
// missing port becomes 443 (or 0), and an IPv6 address without brackets
// cannot be told from its port: each is refused here, naming what is wrong.
#ifndef KTUNE_SERVER_COMMON_ADDRESS_H_
#define KTUNE_SERVER_COMMON_ADDRESS_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// HOST:PORT or [V6]:PORT taken apart (the host without its brackets).
struct HostPort {
  std::string host;
  std::string port;  // as written: PortNumber says whether it is one
};

// `address` as HOST:PORT or [V6]:PORT; INVALID_ARGUMENT saying what it
// lacks otherwise (no host, no port, an IPv6 address without brackets,
// ...), for the caller to prefix with the flag and the address.
inline absl::StatusOr<HostPort> SplitHostPort(std::string_view address) {
  const std::size_t colon = address.rfind(':');
  if (!address.empty() && address.front() == '[') {
    const std::size_t close = address.find(']');
    if (close == std::string_view::npos) return absl::InvalidArgumentError("no closing ']'");
    if (close == 1) return absl::InvalidArgumentError("no address in the brackets");
    if (close + 1 == address.size()) return absl::InvalidArgumentError("no port");
    if (colon != close + 1) {
      return absl::InvalidArgumentError("after [ADDRESS] comes :PORT and nothing else");
    }
  } else if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError("no port");
  } else if (colon == 0) {
    return absl::InvalidArgumentError("no host");
  } else if (address.substr(0, colon).find_first_of(":[]") != std::string_view::npos) {
    return absl::InvalidArgumentError("an IPv6 address goes in brackets, [ADDRESS]:PORT");
  }
  if (colon + 1 == address.size()) return absl::InvalidArgumentError("no port");
  const bool bracketed = address.front() == '[';
  return HostPort{std::string(address.substr(bracketed ? 1 : 0, colon - (bracketed ? 2 : 0))),
                  std::string(address.substr(colon + 1))};
}

// INVALID_ARGUMENT, naming the address, when a client could not mean it:
// empty; HOST:PORT (or [V6]:PORT) that SplitHostPort refuses or whose port
// is not a number in [1, 65535]; or a gRPC target (dns:///HOST:PORT,
// ipv4:, ipv6:, unix:PATH, unix-abstract:, vsock:, xds:, any scheme://)
// ending in a port outside [1, 65535]. OK otherwise: whether it answers is
// for the call.
inline absl::Status CheckServerAddress(std::string_view address) {
  constexpr std::string_view kForms =
      "give HOST:PORT (127.0.0.1:7070, gpu7.example:7070, [::1]:7070), unix:PATH or a gRPC "
      "target (dns:///HOST:PORT)";
  if (address.empty()) return absl::InvalidArgumentError(StrCat("empty address; ", kForms));
  // A socket's path may end in ":digits" of its own.
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) {
    return absl::OkStatus();
  }
  const std::size_t colon = address.rfind(':');
  const std::string_view port = colon == std::string_view::npos ? "" : address.substr(colon + 1);
  bool target = address.find("://") != std::string_view::npos;
  for (const std::string_view scheme : {"dns:", "ipv4:", "ipv6:", "vsock:", "xds:"}) {
    target = target || address.rfind(scheme, 0) == 0;
  }
  if (target) {
    // gRPC's to read; a last part that is all digits is a port.
    if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos) {
      return absl::OkStatus();
    }
  } else if (const absl::StatusOr<HostPort> hp = SplitHostPort(address); !hp.ok()) {
    return absl::InvalidArgumentError(StrCat(address, ": ", hp.status().message(), "; ", kForms));
  }
  if (const std::optional<int> n = PortNumber(port); n && *n != 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(address, ": port ", port, " is not a port; give one in [1, 65535]"));
}

}  // namespace ktune

#endif  // KTUNE_SERVER_COMMON_ADDRESS_H_
