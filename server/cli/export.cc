// ktune export: a SQLite snapshot of a store, for a machine that cannot
// reach it (a fleet's PostgreSQL, say).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/cli/command.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/session/export.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

const CommandSpec kExportCommand{
    "export",
    "ktune export --to FILE.db [--db STORE] [--json]\n"
    "       ktune export JOB --format kernel-tuner|t4 FILE [--db STORE] [--json]",
    "Writes everything the store holds (jobs, measurements, best configurations) to a\n"
    "new SQLite store FILE.db, as one consistent snapshot taken while others may\n"
    "write: how a fleet's PostgreSQL store reaches a machine without access to it\n"
    "(ktune best --db FILE.db, or the client library, read it there).\n"
    "With JOB and --format, writes what that job measured to FILE in Kernel Tuner's\n"
    "cache format or the T4 results format (gzip-compressed when FILE ends in .gz):\n"
    "ktune tune --device sim:FILE replays it.",
    {kDbFlag,
     {"to", "FILE.db", "the SQLite store to write; it must not exist"},
     {"format", "FORMAT", "with JOB: kernel-tuner or t4"},
     kJsonFlag},
    2};

// JOB --format FORMAT FILE: one job's measurements in another tool's format.
std::optional<Failure> ExportJob(const Args& args, int* exit_code) {
  const std::optional<ExportFormat> format = ParseExportFormat(args.Get("format").value_or(""));
  if (!format) {
    return Failure{kExitInvalidInput, StrCat("--format: '", args.Get("format").value_or(""),
                                             "' is not a format; give kernel-tuner or t4")};
  }
  if (args.positional().size() != 2) {
    return Failure{kExitInvalidInput,
                   "give JOB and the FILE to write (ktune export JOB --format "
                   "kernel-tuner results.json)"};
  }
  if (args.Has("to")) return Failure{kExitInvalidInput, "--to: not with --format (FILE is named)"};
  const std::string file = args.positional()[1];
  JobRecord job;
  std::vector<StoredMeasurement> ms;
  if (auto f = LoadStoredJob(args, &job, &ms)) return f;
  absl::StatusOr<std::string> text = ExportMeasurements(job, ms, *format);
  if (!text.ok()) return Error(text.status());
  const bool gz = file.size() > 3 && file.compare(file.size() - 3, 3, ".gz") == 0;
  if (absl::Status s = WriteFileAtomically(file, gz ? GzipCompress(*text) : *text); !s.ok()) {
    return Failure{kExitError, StrCat("FILE: ", s.message())};
  }
  if (args.Has("json")) {
    Json out = Json::MakeObject();
    out.Set("job", job.id);
    out.Set("format", *args.Get("format"));
    out.Set("file", file);
    out.Set("measurements", static_cast<std::int64_t>(ms.size()));
    std::printf("%s\n", out.Dump().c_str());
  } else {
    std::printf("%s: job %s, %zu measurements (%s)\n", file.c_str(), job.id.c_str(), ms.size(),
                args.Get("format")->c_str());
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RunExport(const Args& args, int* exit_code) {
  if (args.Has("format") || !args.positional().empty()) return ExportJob(args, exit_code);
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
