// The bearer token a secured daemon asks of every call, on its gRPC port and
// its HTTP endpoint alike.
#ifndef KTUNE_SERVER_DAEMON_TOKEN_H_
#define KTUNE_SERVER_DAEMON_TOKEN_H_

#include <string>
#include <string_view>

namespace ktune {

// Whether `presented` is `token`. Compared in constant time, as SHA-256
// digests: neither the token's bytes nor its length show in how long a
// wrong guess takes. REQUIRES: `token` is not empty.
bool TokenMatches(std::string_view presented, const std::string& token);

// Whether an `authorization` header's value is "Bearer TOKEN" for `token`.
bool BearerMatches(std::string_view header, const std::string& token);

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_TOKEN_H_
