// ktune export: a SQLite snapshot of a store, for a machine that cannot
// reach it (a fleet's PostgreSQL, say).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/cli/command.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

const CommandSpec kExportCommand{
    "export",
    "ktune export --to FILE.db [--db STORE] [--json]",
    "Writes everything the store holds (jobs, measurements, best configurations) to a\n"
    "new SQLite store FILE.db, as one consistent snapshot taken while others may\n"
    "write: how a fleet's PostgreSQL store reaches a machine without access to it\n"
    "(ktune best --db FILE.db, or the client library, read it there).",
    {kDbFlag,
     {"to", "FILE.db", "the SQLite store to write; it must not exist"},
     kJsonFlag},
    0};

std::optional<Failure> RunExport(const Args& args, int* exit_code) {
  const std::optional<std::string> to = args.Get("to");
  if (!to || to->empty()) return Failure{kExitInvalidInput, "--to: give the FILE.db to write"};
  std::unique_ptr<Store> store;
  if (std::optional<Failure> f = OpenExistingStore(args, store)) return f;
  if (absl::Status s = store->Snapshot(*to); !s.ok()) {
    return Failure{s.code() == absl::StatusCode::kAlreadyExists ? kExitInvalidInput : kExitError,
                   StrCat("--to: ", s.message())};
  }
  absl::StatusOr<std::unique_ptr<Store>> written = Store::Open(*to, /*create=*/false);
  if (!written.ok()) return Error(written.status());
  absl::StatusOr<std::vector<JobRecord>> jobs = (*written)->ListJobs();
  if (!jobs.ok()) return Error(jobs.status());
  if (args.Has("json")) {
    Json out = Json::MakeObject();
    out.Set("db", store->locator());
    out.Set("to", *to);
    out.Set("jobs", static_cast<std::int64_t>(jobs->size()));
    std::printf("%s\n", out.Dump().c_str());
  } else {
    std::printf("%s: %zu jobs from %s\n", to->c_str(), jobs->size(), store->locator().c_str());
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

const Command kExport{&kExportCommand, RunExport, nullptr};

}  // namespace ktune::cli
