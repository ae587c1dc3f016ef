// ktune watch: follows a daemon's job to its end.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

const CommandSpec kWatchCommand{
    "watch", "ktune --server ADDR watch JOB [--from-start] [--json]",
    "Follows a daemon's job: each measurement, each new best, state changes, until it\n"
    "ends (one JSON object per line with --json). Exit 0 when it succeeded.",
    WithRemoteFlags({{"from-start", "", "first the measurements already made"}}), 1};

std::optional<Failure> RemoteWatch(const Connection& c, const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "give a JOB id (see ktune jobs)"};
  }
  grpc::Status rpc;
  absl::StatusOr<v1::JobState> last =
      Follow(c, args.positional()[0], args.Has("from-start"), true, args.Has("json"), &rpc);
  if (!last.ok()) return RpcFailure(c, rpc);
  *exit_code = *last == v1::SUCCEEDED ? kExitOk : kExitError;
  return std::nullopt;
}
}  // namespace

const Command kWatch{&kWatchCommand, nullptr, RemoteWatch};

}  // namespace ktune::cli
