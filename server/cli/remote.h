// ktune --server ADDR COMMAND: what the commands share to talk to a
// ktuned daemon: the connection (address, TLS, token, deadlines), RPC
// failures as exit codes, and following a job's events.
#ifndef KTUNE_SERVER_CLI_REMOTE_H_
#define KTUNE_SERVER_CLI_REMOTE_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/tuner.grpc.pb.h"
#include "server/cli/common.h"

namespace ktune::cli {

inline constexpr double kDefaultTimeoutS = 30;
inline constexpr double kStreamTimeoutS = 24 * 3600;

struct Connection {
  std::string address;
  std::unique_ptr<v1::Tuner::Stub> stub;
  std::string token;
  double timeout_s = kDefaultTimeoutS;
};

// --server, --timeout, --token-file, --tls-ca, --tls-cert, --tls-key.
// INVALID_ARGUMENT naming the flag.
absl::StatusOr<Connection> Connect(const Args& args);

// Who this client is to a daemon's per-client limits: USER@HOST.
std::string DefaultClientName();

// A call's deadline (`seconds` from now) and the bearer token.
void Setup(grpc::ClientContext& ctx, const Connection& c, double seconds);

// A failed RPC as an exit code and a message naming the daemon.
Failure RpcFailure(const Connection& c, const grpc::Status& s);

// GetJob (with its measurements when asked); on failure *rpc says why.
absl::StatusOr<v1::Job> FetchJob(const Connection& c, const std::string& id, bool measurements,
                                 grpc::Status* rpc);

// Follows a job's events to the end. With `print`, each event is a line
// (JSON with --json); without, a progress line on a terminal. Returns the
// last state seen.
absl::StatusOr<v1::JobState> Follow(const Connection& c, const std::string& id, bool from_start,
                                    bool print, bool json, grpc::Status* rpc);

// What `tune` reports of a daemon's job.
TuneSummary SummaryOf(const v1::Job& job);

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_REMOTE_H_
