// ktune report: one job's page of the dashboard as a self-contained HTML
// file (convergence, every measurement, time against each parameter, the
// status breakdown, conditions and the table), for headless jobs and for
// attaching to a review. Opens with no network and no daemon.
#include <google/protobuf/util/json_util.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "server/web/assets.h"
#include "tuner/base/file.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

const CommandSpec kReportCommand{
    "report", "ktune report JOB --html FILE [--db STORE | --server ADDR]",
    "Writes one job's page (the dashboard's: convergence against evaluations and\n"
    "time, every measurement by status, time against each parameter, the status\n"
    "breakdown, conditions and every measurement) to FILE as one HTML file with its\n"
    "scripts and data inside: it opens in any browser, offline.",
    WithRemoteFlags({kDbFlag, {"html", "FILE", "the HTML file to write (replaced if it exists)"}}),
    1};

std::optional<Failure> Write(const Args& args, v1::Job job) {
  // The kernel's code is not shown, and can be large.
  if (job.spec().kernel().source_case() == v1::Kernel::kCode) {
    job.mutable_spec()->mutable_kernel()->clear_code();
  }
  std::string job_json;
  if (const auto s = google::protobuf::util::MessageToJsonString(job, &job_json); !s.ok()) {
    return Failure{kExitError, StrCat("the job as JSON: ", std::string(s.message()))};
  }
  const std::string title =
      StrCat("ktune: ", job.kernel(), " on ", job.device().name(), " (job ", job.id(), ")");
  const std::string page =
      SelfContainedPage(title, StrCat("{\"kind\":\"job\",\"job\":", job_json, "}"));
  const std::string path = *args.Get("html");
  if (const absl::Status s = WriteFileAtomically(path, page); !s.ok()) {
    return Failure{kExitError, StrCat("--html: ", s.message())};
  }
  std::fprintf(stderr, "ktune report: %s: job %s, %lld measurements\n", path.c_str(),
               job.id().c_str(), static_cast<long long>(job.measurements_size()));
  return std::nullopt;
}

std::optional<Failure> CheckArgs(const Args& args) {
  if (args.positional().empty())
    return Failure{kExitInvalidInput, "give a JOB id (see ktune jobs)"};
  if (!args.Has("html") || args.Get("html")->empty()) {
    return Failure{kExitInvalidInput, "--html: give the FILE to write"};
  }
  return std::nullopt;
}

std::optional<Failure> RunReport(const Args& args, int* exit_code) {
  if (auto f = CheckArgs(args)) return f;
  JobRecord job;
  std::vector<StoredMeasurement> ms;
  if (auto f = LoadStoredJob(args, &job, &ms)) return f;
  v1::Job out;
  JobWithMeasurementsToProto(job, ms, /*include=*/true, /*from=*/0, &out);
  if (auto f = Write(args, std::move(out))) return f;
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteReport(const Connection& c, const Args& args, int* exit_code) {
  if (auto f = CheckArgs(args)) return f;
  grpc::Status rpc;
  absl::StatusOr<v1::Job> job = FetchJob(c, args.positional()[0], true, &rpc);
  if (!job.ok()) return RpcFailure(c, rpc);
  if (auto f = Write(args, *std::move(job))) return f;
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

const Command kReport{&kReportCommand, RunReport, RemoteReport};

}  // namespace ktune::cli
