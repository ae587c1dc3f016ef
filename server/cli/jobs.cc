// ktune jobs: the stored jobs, newest first (the store's or a daemon's).
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

const CommandSpec kJobsCommand{"jobs", "ktune jobs [--db PATH | --server ADDR] [--json]",
                               "Lists the stored jobs, newest first.", WithRemoteFlags({kDbFlag}),
                               0};

std::optional<Failure> RunJobs(const Args& args, int* exit_code) {
  std::unique_ptr<Store> store;
  if (auto f = OpenExistingStore(args, store)) return f;
  absl::StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  if (!jobs.ok()) return Error(jobs.status());
  PrintJobs(*jobs, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteJobs(const Connection& c, const Args& args, int* exit_code) {
  std::vector<JobRecord> jobs;
  v1::ListJobsRequest req;
  req.set_page_size(1000);
  do {
    grpc::ClientContext ctx;
    Setup(ctx, c, c.timeout_s);
    v1::ListJobsResponse resp;
    const grpc::Status rpc = c.stub->ListJobs(&ctx, req, &resp);
    if (!rpc.ok()) return RpcFailure(c, rpc);
    for (const v1::Job& j : resp.jobs()) jobs.push_back(JobFromProto(j));
    req.set_page_token(resp.next_page_token());
  } while (!req.page_token().empty());
  PrintJobs(jobs, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kJobs{&kJobsCommand, RunJobs, RemoteJobs};

}  // namespace ktune::cli
