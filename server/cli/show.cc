// ktune show: one job and its measurements in evaluation order.
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

const CommandSpec kShowCommand{
    "show", "ktune show JOB [--db PATH] [--json]",
    "Shows a job and its measurements in evaluation order (JOB may be a\n"
    "unique prefix of the id).",
    WithRemoteFlags({kDbFlag}), 1};

std::optional<Failure> RunShow(const Args& args, int* exit_code) {
  JobRecord job;
  std::vector<StoredMeasurement> ms;
  if (auto f = LoadStoredJob(args, &job, &ms)) return f;
  PrintShow(job, ms, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteShow(const Connection& c, const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "give a JOB id (see ktune jobs)"};
  }
  grpc::Status rpc;
  absl::StatusOr<v1::Job> job = FetchJob(c, args.positional()[0], true, &rpc);
  if (!job.ok()) return RpcFailure(c, rpc);
  std::vector<StoredMeasurement> ms;
  for (const v1::MeasurementRecord& m : job->measurements()) ms.push_back(MeasurementFromProto(m));
  PrintShow(JobFromProto(*job), ms, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kShow{&kShowCommand, RunShow, RemoteShow};

}  // namespace ktune::cli
