// ktune merge: adds other stores' jobs and measurements to this one.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/stat.h>
#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

#include "tuner/store/merge.h"

namespace ktune::cli {
namespace {

const CommandSpec kMergeCommand{
    "merge",
    "ktune merge SOURCE.db [SOURCE.db ...] [--db TARGET] [--json]",
    "Adds what other stores hold to this one (created if missing): headless jobs'\n"
    "databases from GPU nodes, merged into one store for ktuned or for\n"
    "applications; with --db postgresql://..., how nodes without network access\n"
    "join a fleet's store. Sources are only read. Jobs are matched by id, measurements by\n"
    "job and configuration, so merging a source again adds nothing; each best\n"
    "record keeps the better of the two. Each source is merged in one transaction.",
    {kDbFlag, kJsonFlag},
    1 << 20};

std::optional<Failure> RunMerge(const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "give at least one SOURCE.db to merge"};
  }
  const std::string target = args.Get("db").value_or(DefaultDbPath());
  struct stat target_stat = {};
  const bool target_exists = stat(target.c_str(), &target_stat) == 0;
  // Every source is checked (copied and migrated) before the target is
  // touched.
  std::vector<MergeSource> sources;
  for (const std::string& path : args.positional()) {
    struct stat st = {};
    if (target_exists && stat(path.c_str(), &st) == 0 && st.st_dev == target_stat.st_dev &&
        st.st_ino == target_stat.st_ino) {
      return Failure{kExitInvalidInput,
                     StrCat("SOURCE ", path, ": is the target store (--db ", target, ")")};
    }
    absl::StatusOr<MergeSource> source = MergeSource::Prepare(path);
    if (!source.ok()) {
      const absl::StatusCode code = source.status().code();
      return Failure{
          code == absl::StatusCode::kNotFound || code == absl::StatusCode::kFailedPrecondition
              ? kExitInvalidInput
              : kExitError,
          StrCat("SOURCE: ", source.status().message())};
    }
    sources.push_back(*std::move(source));
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(target, /*create=*/true);
  if (!store.ok()) {
    if (store.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Failure{kExitInvalidInput, StrCat("--db: ", store.status().message())};
    }
    return Error(store.status());
  }
  const bool json = args.Has("json");
  Json out = Json::MakeObject();
  Json merged = Json::MakeArray();
  for (const MergeSource& source : sources) {
    absl::StatusOr<MergeStats> stats = (*store)->Merge(source);
    if (!stats.ok()) {
      return Failure{stats.status().code() == absl::StatusCode::kFailedPrecondition
                         ? kExitInvalidInput
                         : kExitError,
                     std::string(stats.status().message())};
    }
    if (json) {
      Json j = Json::MakeObject();
      j.Set("source", source.path());
      j.Set("devices", stats->devices);
      j.Set("kernels", stats->kernels);
      j.Set("jobs_added", stats->jobs_added);
      j.Set("jobs_extended", stats->jobs_extended);
      j.Set("measurements", stats->measurements);
      j.Set("best", stats->best);
      merged.Push(std::move(j));
    } else {
      std::printf(
          "%s: %lld jobs added, %lld extended, %lld measurements, %lld best records added or "
          "improved (%lld devices, %lld kernels new here)\n",
          source.path().c_str(), static_cast<long long>(stats->jobs_added),
          static_cast<long long>(stats->jobs_extended), static_cast<long long>(stats->measurements),
          static_cast<long long>(stats->best), static_cast<long long>(stats->devices),
          static_cast<long long>(stats->kernels));
    }
  }
  if (json) {
    out.Set("db", target);
    out.Set("merged", std::move(merged));
    std::printf("%s\n", out.Dump().c_str());
  }
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kMerge{&kMergeCommand, RunMerge, nullptr};

}  // namespace ktune::cli
