// ktune tune: runs a tuning job here (--local: a GPU of this machine or a
// recorded space) or sends it to a daemon (--server), and reports the best
// configuration.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "ktune/v1/job.pb.h"
#include "server/cli/command.h"
#include "server/cli/progress_line.h"
#include "server/cli/remote.h"
#include "server/cli/startup_timings.h"
#include "server/common/convert.h"
#include "server/runner/job_run.h"
#include "server/runner/runner.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/lease_keeper.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

const CommandSpec kTuneCommand{
    "tune", "ktune tune [SPEC.json] (--local --device DEVICE | --server ADDR) [flags]",
    "Runs a tuning job on this machine and stores every measurement.\n"
    "DEVICE is a GPU (0, cuda:0 or a UUID; see ktune devices) or sim:FILE\n"
    "(replay a recorded Kernel Tuner cache or T4 file).\n"
    "Without SPEC.json and with a simulated device, the space is the recorded\n"
    "file's parameters and configurations. Running the same job again resumes\n"
    "it: finished configurations are never measured twice. With --server the job\n"
    "goes to a ktuned daemon (the kernel source inline); --wait follows it.",
    WithRemoteFlags(
        {{"local", "", "run here, without a daemon"},
         {"device", "DEVICE",
          "where to run: 0, cuda:0, a GPU UUID, or sim:FILE; several of one model, comma-separated "
          "(0,1) or all, spread the job over them"},
         kDbFlag,
         {"strategy", "NAME",
          "search strategy: auto (default), bayes, genetic, local, annealing, random, "
          "brute_force; settings as NAME:key=value:..."},
         {"max-evals", "N",
          "stop after N evaluations, N >= 1 (default: the job file's, else no limit)"},
         {"batch", "N", "configurations asked of the strategy at once (default 1)"},
         {"no-warm-start", "", "ignore what the store knows about this kernel from other jobs"},
         {"max-seconds", "S",
          "stop after S seconds, S > 0 (recorded time on a simulated device; default: the job "
          "file's, else no limit)"},
         {"seed", "N", "seed of the strategy (default 0)"},
         {"sim-speed", "X", "replay a simulated device in real time, X times faster than recorded"},
         {"compile-workers", "N", "NVRTC worker processes (default: one per core)"},
         {"timings", "",
          "with --local: print when each step of the start was done (the GPU listed and "
          "opening, the job bound, the store opened, the first measurement stored)"},
         {"wait", "", "with --server: follow the job to its end and print the result"},
         {"emit-header", "FILE", "write the best configuration as a C/C++ header (implies --wait)"},
         {"header-style", "STYLE", "define (default: #define name value) or constexpr"},
         {"emit-json", "FILE", "write the result as JSON (implies --wait)"},
         {"priority", "N", "with --server: higher runs first among queued jobs (default 0)"},
         {"client", "NAME",
          "with --server: who submits, for the daemon's per-client limits (default USER@HOST)"}}),
    1};

TuneSummary SummaryOfRun(const Job& job, const DeviceInfo& device, const JobRunResult& r) {
  const Progress& p = r.session.progress;
  TuneSummary summary;
  summary.job_id = r.session.job.id;
  summary.kernel = job.kernel_name;
  summary.device = device;
  summary.problem = job.problem;
  summary.strategy = StrategyLabel(job.strategy, r.strategy);
  summary.evaluations = p.evaluations;
  summary.status_counts = p.status_counts;
  summary.best = r.session.best;
  summary.objective_id = job.objective.id();
  summary.objective_name = job.objective.name();
  summary.state = r.session.job.state;
  summary.end_reason = r.session.end_reason;
  return summary;
}

void ReportLocalRun(const Args& args, const Job& job, const DeviceInfo& device,
                    const JobRunResult& r) {
  const Progress& p = r.session.progress;
  std::fprintf(
      stderr, "ktune: %s after %lld evaluations (%lld from the store%s)%s\n",
      r.session.end_reason.c_str(), static_cast<long long>(p.evaluations),
      static_cast<long long>(p.replayed), r.session.resumed ? ", resumed" : "",
      r.session.end_reason == "interrupted" ? "; run the same command again to resume" : "");
  PrintTuneSummary(SummaryOfRun(job, device, r), args.Has("json"));
}

// Signals set this: the running job stops after the candidate in flight
// and is left resumable.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnSignal(int) { g_stop.store(true); }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal takes the default action
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The job's spec (from the file, if any) with the command line's overrides;
// *base_dir receives the file's folder.
std::optional<Failure> SpecFromArgs(const Args& args, v1::JobSpec* spec, std::string* base_dir) {
  *base_dir = ".";
  if (!args.positional().empty()) {
    const std::string& path = args.positional()[0];
    absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(path);
    if (!loaded.ok()) return InvalidInput(loaded.status());
    *spec = *std::move(loaded);
    *base_dir = DirOf(path);
  }
  return ApplyTuneFlags(args, *spec);
}

// The device the job runs on: --device, else the spec's device.devices.
absl::StatusOr<std::unique_ptr<Device>> DeviceFromArgs(const Args& args, v1::JobSpec& spec,
                                                       const std::string& base_dir,
                                                       std::optional<Failure>* failure) {
  std::string locator;
  std::string device_base = ".";
  if (auto d = args.Get("device")) {
    locator = *d;
  } else if (spec.device().devices_size() > 0) {
    locator = StrJoin({spec.device().devices().begin(), spec.device().devices().end()}, ",");
    device_base = base_dir;
  } else {
    *failure = Failure{kExitInvalidInput,
                       "no device; give --device sim:FILE (or name one in the "
                       "job file's device.devices)"};
    return absl::InvalidArgumentError("no device");
  }
  if (args.positional().empty() && locator.rfind("sim:", 0) != 0) {
    *failure = Failure{kExitInvalidInput, StrCat("--device ", locator,
                                                 ": a GPU tunes a kernel given by a job file "
                                                 "(ktune tune SPEC.json ...)")};
    return absl::InvalidArgumentError("no spec");
  }
  OpenDeviceOptions options;
  options.base_dir = device_base;
  options.worker_program = WorkerExecutable();
  absl::StatusOr<std::optional<double>> speed = args.GetDouble("sim-speed", 0);
  absl::StatusOr<std::optional<std::int64_t>> workers = args.GetInt("compile-workers", 1, 1024);
  for (const absl::Status& s : {speed.status(), workers.status()}) {
    if (!s.ok()) {
      *failure = InvalidInput(s);
      return s;
    }
  }
  if (speed->has_value() && locator.rfind("sim:", 0) != 0) {
    const absl::Status s = absl::InvalidArgumentError(
        StrCat("--sim-speed sets how fast a recorded space replays; --device ", locator,
               " is not one (sim:FILE)"));
    *failure = InvalidInput(s);
    return s;
  }
  options.sim_speed = speed->value_or(0);
  options.compile_workers = static_cast<int>(workers->value_or(0));
  absl::StatusOr<std::unique_ptr<Device>> opened = OpenDevice(locator, options);
  if (!opened.ok()) {
    *failure =
        Failure{opened.status().code() == absl::StatusCode::kInvalidArgument ? kExitInvalidInput
                                                                             : kExitError,
                StrCat("--device ", locator, ": ", opened.status().message())};
    return opened.status();
  }
  spec.mutable_device()->clear_devices();
  for (const std::string& d : StrSplit(locator, ',')) spec.mutable_device()->add_devices(d);
  return opened;
}

std::optional<Failure> LocalTune(const Args& args, int* exit_code) {
  if (!args.Has("local")) {
    return Failure{kExitInvalidInput,
                   "give --local to run here, or --server ADDR to send the job to a ktuned "
                   "daemon"};
  }
  const StartupTimings timings(args.Has("timings"));
  for (const char* remote_only : {"wait", "priority", "client"}) {
    if (args.Has(remote_only)) {
      return Failure{kExitInvalidInput, StrCat("--", remote_only, ": only with --server")};
    }
  }
  // 1. The job spec and the device.
  v1::JobSpec spec;
  std::string base_dir;
  if (auto f = SpecFromArgs(args, &spec, &base_dir)) return f;
  std::optional<Failure> failure;
  absl::StatusOr<std::unique_ptr<Device>> device = DeviceFromArgs(args, spec, base_dir, &failure);
  if (!device.ok()) return failure;
  timings.Mark("device listed and opening");

  // 2. The job, planned and bound to the device (for a GPU: worker,
  // arguments, reference), before anything is stored.
  PlanNames names;
  if (!args.positional().empty()) names.spec = args.positional()[0];
  if (args.Has("strategy")) names.strategy = "--strategy";
  absl::StatusOr<JobRun> run = JobRun::Plan(spec, base_dir, device->get(), names);
  if (!run.ok()) return InvalidInput(run.status());
  if (absl::Status s = run->Bind(**device); !s.ok()) {
    return s.code() == absl::StatusCode::kInvalidArgument ? InvalidInput(s) : Error(s);
  }
  timings.Mark("job planned and bound to the device");

  // 3. The store: opened only now, after all input was checked.
  const std::string db_path = args.Get("db").value_or(DefaultDbPath());
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db_path, /*create=*/true);
  if (!store.ok()) {
    if (store.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Failure{kExitInvalidInput, StrCat("--db: ", store.status().message())};
    }
    return Error(store.status());
  }
  timings.Mark("store opened");

  // 4. Run.
  const Job& job = run->job();
  const SpaceCount count = job.space->Count();
  ProgressLine line(count.count > UINT64_MAX ? UINT64_MAX
                                             : static_cast<std::uint64_t>(count.count));
  InstallSignalHandlers();
  SessionOptions so;
  so.stop = &g_stop;
  so.on_progress = [&line](const Progress& p) { line.Update(p); };
  bool first_stored = false;
  so.on_measurement = [&](const StoredMeasurement&) {
    if (!first_stored) timings.Mark("first measurement stored");
    first_stored = true;
  };
  // A shared store (PostgreSQL): the job stays this process's while it
  // lives, on any host's view, and a database that goes away for a while
  // is waited for, as a daemon does, keeping the measured candidate.
  std::optional<LeaseKeeper> lease;
  if ((*store)->fleet() != nullptr) {
    const std::string id = run->IdOn((*device)->info());
    lease.emplace(db_path, id);
    so.wait_for_store = true;
    so.on_store_retry = SayStoreRetries("ktune", id);
  }
  absl::StatusOr<JobRunResult> result =
      run->Run(**device, **store, so, [&](const JobRunResult& start) {
        if (start.warm_configurations > 0) {
          std::fprintf(stderr, "ktune: warm start from %lld earlier job(s): %zu configurations\n",
                       static_cast<long long>(start.warm_jobs), start.warm_configurations);
        }
        std::fprintf(
            stderr, "ktune: job %s: %s on %s, strategy %s, %s configurations\n",
            run->IdOn((*device)->info()).c_str(), job.kernel_name.c_str(),
            (*device)->info().name.c_str(), StrategyLabel(job.strategy, start.strategy).c_str(),
            StrCat(count.exact ? "" : "~", static_cast<std::uint64_t>(count.count)).c_str());
      });
  lease.reset();
  line.Finish();
  timings.Mark("job ended");
  if (!result.ok()) return Error(result.status());
  ReportLocalRun(args, job, (*device)->info(), *result);
  *exit_code = result->session.end_reason == "interrupted" ? kExitError : kExitOk;
  return EmitResults(args, SummaryOfRun(job, (*device)->info(), *result));
}

std::optional<Failure> RemoteTune(const Connection& c, const Args& args, int* exit_code) {
  if (args.Has("timings")) {
    return Failure{kExitInvalidInput,
                   "--timings: only with --local (a daemon's GPU is open already)"};
  }
  v1::JobSpec spec;
  if (!args.positional().empty()) {
    const std::string& path = args.positional()[0];
    absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(path);
    if (!loaded.ok()) return InvalidInput(loaded.status());
    spec = *std::move(loaded);
    // The daemon cannot read this machine's files: the sources go inline.
    if (absl::Status st = InlineFiles(spec, DirOf(path)); !st.ok()) {
      return Failure{kExitInvalidInput, StrCat(path, ": ", st.message())};
    }
  }
  if (auto f = ApplyTuneFlags(args, spec)) return f;
  if (auto d = args.Get("device")) {
    spec.mutable_device()->clear_devices();
    spec.mutable_device()->add_devices(*d);
  }
  absl::StatusOr<std::optional<std::int64_t>> priority = args.GetInt("priority", -1000, 1000);
  if (!priority.ok()) return InvalidInput(priority.status());

  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_priority(static_cast<std::int32_t>(priority->value_or(0)));
  req.set_client(args.Get("client").value_or(DefaultClientName()));
  v1::SubmitJobResponse resp;
  {
    grpc::ClientContext ctx;
    Setup(ctx, c, c.timeout_s);
    grpc::Status s = c.stub->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(c, s);
  }
  std::fprintf(stderr, "ktune: job %s %s on %s (%s)\n", resp.job_id().c_str(),
               resp.resumed() ? "resumed" : "queued", c.address.c_str(),
               resp.job().device().name().c_str());
  const bool wait = args.Has("wait") || args.Has("emit-header") || args.Has("emit-json");
  if (!wait) {
    if (args.Has("json")) {
      Json out = Json::MakeObject();
      out.Set("job_id", resp.job_id());
      out.Set("state", JobStateName(JobStateFromProto(resp.job().state())));
      out.Set("resumed", resp.resumed());
      std::cout << out.Dump() << "\n";
    } else {
      std::cout << resp.job_id() << "\n";
    }
    *exit_code = kExitOk;
    return std::nullopt;
  }
  grpc::Status rpc;
  absl::StatusOr<v1::JobState> last = Follow(c, resp.job_id(), false, false, false, &rpc);
  if (!last.ok()) return RpcFailure(c, rpc);
  absl::StatusOr<v1::Job> job = FetchJob(c, resp.job_id(), false, &rpc);
  if (!job.ok()) return RpcFailure(c, rpc);
  const TuneSummary summary = SummaryOf(*job);
  std::fprintf(stderr, "ktune: job %s %s after %lld evaluations%s%s\n", job->id().c_str(),
               JobStateName(summary.state), static_cast<long long>(summary.evaluations),
               job->message().empty() ? "" : ": ", job->message().c_str());
  PrintTuneSummary(summary, args.Has("json"));
  if (summary.state != JobState::kSucceeded) {
    *exit_code = kExitError;
    return std::nullopt;
  }
  if (auto f = EmitResults(args, summary)) return f;
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

const Command kTune{&kTuneCommand, LocalTune, RemoteTune};

}  // namespace ktune::cli
