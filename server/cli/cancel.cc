// ktune cancel: cancels a daemon's job (a running one after its candidate).
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

const CommandSpec kCancelCommand{
    "cancel", "ktune --server ADDR cancel JOB [--json]",
    "Cancels a daemon's job: a queued job never runs, a running one stops after its\n"
    "current candidate. What was measured stays in the store.",
    WithRemoteFlags({}), 1};

std::optional<Failure> RemoteCancel(const Connection& c, const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "give a JOB id (see ktune jobs)"};
  }
  v1::CancelJobRequest req;
  req.set_job_id(args.positional()[0]);
  v1::Job job;
  grpc::ClientContext ctx;
  Setup(ctx, c, c.timeout_s);
  const grpc::Status rpc = c.stub->CancelJob(&ctx, req, &job);
  if (!rpc.ok()) return RpcFailure(c, rpc);
  if (args.Has("json")) {
    std::cout << JobToJson(JobFromProto(job)).Dump() << "\n";
  } else {
    std::cout << job.id() << " " << JobStateName(JobStateFromProto(job.state())) << "\n";
  }
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kCancel{&kCancelCommand, nullptr, RemoteCancel};

}  // namespace ktune::cli
