// ktune best: the best stored configuration of a kernel, from the store or
// a daemon, with the fallback to the nearest problem or another device of
// the architecture.
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

const CommandSpec kBestCommand{
    "best", "ktune best --kernel NAME [--device NAME] [--problem name=value,...] [flags]",
    "Prints the best stored configuration of a kernel, per device and problem.",
    WithRemoteFlags(
        {kDbFlag,
         {"kernel", "NAME", "kernel name (required)"},
         {"device", "NAME", "only this device (name, id or uuid)"},
         {"problem", "DIMS", "only this problem, e.g. M=4096,N=4096"},
         {"objective", "ID", "only this objective (default: all)"},
         {"exact", "", "no fallback to the nearest problem or another device of the architecture"},
         {"source-hash", "HEX",
          "with --server: the kernel source's SHA-256, to be told if it differs"},
         {"emit-header", "FILE", "with --server: write the answer as a C/C++ header"},
         {"header-style", "STYLE", "define (default) or constexpr"},
         {"emit-json", "FILE", "with --server: write the answer as JSON"}}),
    0};

std::optional<Failure> RunBest(const Args& args, int* exit_code) {
  std::optional<std::string> kernel = args.Get("kernel");
  if (!kernel || kernel->empty()) {
    return Failure{kExitInvalidInput, "--kernel NAME is required"};
  }
  std::optional<Problem> problem;
  if (auto p = args.Get("problem")) {
    absl::StatusOr<Problem> parsed = ParseProblem(*p);
    if (!parsed.ok()) return InvalidInput(parsed.status());
    problem = *std::move(parsed);
  }
  std::unique_ptr<Store> store;
  if (auto f = OpenExistingStore(args, store)) return f;
  absl::StatusOr<std::vector<BestRecord>> found =
      store->FindBest(*kernel, args.Get("device"), problem, args.Get("objective"));
  if (!found.ok()) return Error(found.status());
  if (found->empty() && !args.Has("exact") && (args.Has("device") || problem)) {
    // Nothing for exactly this device and problem: the fallback chain.
    BestQuery q;
    q.kernel = *kernel;
    q.device = args.Get("device").value_or("");
    if (problem) q.problem = *problem;
    q.objective = args.Get("objective").value_or("");
    absl::StatusOr<BestMatch> match = store->FindBestMatch(q);
    if (!match.ok()) {
      if (match.status().code() == absl::StatusCode::kNotFound) {
        return Failure{kExitError, std::string(match.status().message())};
      }
      return Error(match.status());
    }
    const std::vector<BestMatchNote> notes = {
        {BestMatchKindName(match->kind), match->source_differs, match->distance}};
    PrintBest(*kernel, {match->best}, &notes, args.Has("json"));
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (found->empty()) {
    std::string what = StrCat("kernel ", *kernel);
    if (auto d = args.Get("device")) what += StrCat(" on ", *d);
    if (auto p = args.Get("problem")) what += StrCat(" for ", *p);
    return Failure{kExitError, StrCat("no stored best configuration for ", what)};
  }
  PrintBest(*kernel, *found, nullptr, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteBest(const Connection& c, const Args& args, int* exit_code) {
  std::optional<std::string> kernel = args.Get("kernel");
  if (!kernel || kernel->empty()) {
    return Failure{kExitInvalidInput, "--kernel NAME is required"};
  }
  v1::GetBestRequest req;
  req.set_kernel(*kernel);
  if (auto d = args.Get("device")) req.set_device(*d);
  if (auto h = args.Get("source-hash")) req.set_source_hash(*h);
  if (auto p = args.Get("problem")) {
    absl::StatusOr<Problem> parsed = ParseProblem(*p);
    if (!parsed.ok()) return InvalidInput(parsed.status());
    for (const auto& [name, v] : *parsed) (*req.mutable_problem())[name] = v;
  }
  if (args.Has("objective")) {
    return Failure{kExitInvalidInput,
                   "--objective: not available with --server (the daemon "
                   "answers the time objective, or the only one stored)"};
  }
  req.set_exact_only(args.Has("exact"));
  v1::GetBestResponse resp;
  grpc::ClientContext ctx;
  Setup(ctx, c, c.timeout_s);
  grpc::Status s = c.stub->GetBest(&ctx, req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  BestMatchNote note;
  switch (resp.match()) {
    case v1::GetBestResponse::NEAREST_PROBLEM: note.match = "nearest_problem"; break;
    case v1::GetBestResponse::SAME_ARCHITECTURE: note.match = "same_architecture"; break;
    default: note.match = "exact"; break;
  }
  note.source_differs = resp.source_differs();
  note.distance = resp.problem_distance();
  const std::vector<BestMatchNote> notes = {note};
  const BestRecord best = BestFromProto(resp);
  PrintBest(*kernel, {best}, &notes, args.Has("json"));
  if (args.Has("emit-header") || args.Has("emit-json")) {
    TuneSummary summary;
    summary.job_id = best.job_id;
    summary.kernel = best.kernel_name;
    summary.device = best.device;
    summary.problem = best.problem;
    StoredMeasurement m;
    m.key = best.key;
    m.config_json = best.config_json;
    m.measurement.time = Millis(best.time_ms);
    m.objective = best.objective_value;
    summary.best = m;
    summary.objective_id = best.objective;
    if (auto f = EmitResults(args, summary, note.match)) return f;
  }
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kBest{&kBestCommand, RunBest, RemoteBest};

}  // namespace ktune::cli
