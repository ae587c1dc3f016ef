// ktune: the command-line client. Runs tuning jobs locally (headless jobs
// on GPU nodes, or replays of recorded spaces anywhere) and queries the
// store.
//
// Exit codes: 0 success, 2 invalid input (the message names the field, flag
// or position), 1 anything else.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ktune/v1/job.pb.h"
#include "server/cli/common.h"
#include "server/common/flags.h"
#include "server/cli/output.h"
#include "server/runner/runner.h"
#include "strategies/registry.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/device/simulated_device.h"
#include "tuner/ipc/subprocess.h"
#ifdef KTUNE_HAVE_CUDA
#include "tuner/compile/compile_pool.h"
#include "tuner/device/cuda_device.h"
#include "tuner/measure/measure_worker.h"
#endif
#include "tuner/session/evaluate.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/session/warm_start.h"
#include "tuner/store/merge.h"
#include "tuner/store/store.h"

namespace ktune::cli {
namespace {

constexpr char kVersion[] = "0.1.0";

// Set by SIGINT/SIGTERM: the running job stops after the candidate in
// flight and is left resumable.
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

std::string DefaultDbPath() {
  const char* env = std::getenv("KTUNE_DB");
  return env != nullptr && *env != '\0' ? env : "ktune.db";
}

const FlagSpec kDbFlag{"db", "PATH", "the SQLite store (default: $KTUNE_DB, else ./ktune.db)"};
const FlagSpec kJsonFlag{"json", "", "print one JSON object on stdout"};

// A command's own flags, then those that reach a daemon, then --json.
std::vector<FlagSpec> WithRemoteFlags(std::vector<FlagSpec> own) {
  for (const FlagSpec* f : {&kServerFlag, &kTokenFileFlag, &kTlsCaFlag, &kTlsCertFlag, &kTlsKeyFlag,
                            &kTimeoutFlag, &kJsonFlag}) {
    own.push_back(*f);
  }
  return own;
}

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
         {"max-evals", "N", "stop after N evaluations"},
         {"batch", "N", "configurations asked of the strategy at once (default 1)"},
         {"no-warm-start", "", "ignore what the store knows about this kernel from other jobs"},
         {"max-seconds", "S", "stop after S seconds (recorded time on a simulated device)"},
         {"seed", "N", "seed of the strategy (default 0)"},
         {"sim-speed", "X", "replay a simulated device in real time, X times faster than recorded"},
         {"compile-workers", "N", "NVRTC worker processes (default: one per core)"},
         {"wait", "", "with --server: follow the job to its end and print the result"},
         {"emit-header", "FILE", "write the best configuration as a C/C++ header (implies --wait)"},
         {"header-style", "STYLE", "define (default: #define name value) or constexpr"},
         {"emit-json", "FILE", "write the result as JSON (implies --wait)"},
         {"priority", "N", "with --server: higher runs first among queued jobs (default 0)"}}),
    1};

const CommandSpec kEvaluateCommand{
    "evaluate",
    "ktune evaluate --device sim:FILE [--device sim:FILE ...] --strategy a,b,c [flags]",
    "Scores search strategies on recorded spaces: per space and strategy, the score at\n"
    "the short and the long budget (0 = random search, 1 = the optimum at once; see\n"
    "README), the mean fraction of the optimum after 20, 50, 100 and 200\n"
    "evaluations, and the strategy's time per proposal; then the averages.",
    {{"device", "sim:FILE", "a recorded space (repeatable)", true},
     {"strategy", "NAMES",
      "comma-separated strategies, each optionally name:key=value:... (default: auto)"},
     {"repeats", "N", "seeded repeats per space and strategy (default 30)"},
     {"batch", "N", "configurations asked at once (default 1)"},
     {"seed", "N", "first seed (default 0)"},
     {"short-only", "",
      "stop each run at the short budget: the short score only, ten times faster"},
     {"warm-from", "sim:FILE",
      "warm-start every run from this recording of the same kernel (another GPU)"},
     kJsonFlag},
    0};

const CommandSpec kDevicesCommand{
    "devices", "ktune devices [--server ADDR] [--json]",
    "Lists this machine's CUDA GPUs (or a daemon's devices): name, architecture,\n"
    "memory, driver.",
    WithRemoteFlags({}), 0};

const CommandSpec kWatchCommand{
    "watch", "ktune --server ADDR watch JOB [--from-start] [--json]",
    "Follows a daemon's job: each measurement, each new best, state changes, until it\n"
    "ends (one JSON object per line with --json). Exit 0 when it succeeded.",
    WithRemoteFlags({{"from-start", "", "first the measurements already made"}}), 1};

const CommandSpec kCancelCommand{
    "cancel", "ktune --server ADDR cancel JOB [--json]",
    "Cancels a daemon's job: a queued job never runs, a running one stops after its\n"
    "current candidate. What was measured stays in the store.",
    WithRemoteFlags({}), 1};

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

const CommandSpec kJobsCommand{"jobs", "ktune jobs [--db PATH | --server ADDR] [--json]",
                               "Lists the stored jobs, newest first.", WithRemoteFlags({kDbFlag}),
                               0};

const CommandSpec kShowCommand{
    "show", "ktune show JOB [--db PATH] [--json]",
    "Shows a job and its measurements in evaluation order (JOB may be a\n"
    "unique prefix of the id).",
    WithRemoteFlags({kDbFlag}), 1};

const CommandSpec kMergeCommand{
    "merge",
    "ktune merge SOURCE.db [SOURCE.db ...] [--db TARGET] [--json]",
    "Adds what other stores hold to this one (created if missing): headless jobs'\n"
    "databases from GPU nodes, merged into one store for ktuned or for\n"
    "applications. Sources are only read. Jobs are matched by id, measurements by\n"
    "job and configuration, so merging a source again adds nothing; each best\n"
    "record keeps the better of the two. Each source is merged in one transaction.",
    {kDbFlag, kJsonFlag},
    1 << 20};

std::string MainHelp() {
  return StrCat("ktune ", kVersion,
                ": online auto-tuning of GPU kernels\n\n"
                "Usage: ktune [--server ADDR] COMMAND [ARGS]\n\n"
                "Commands:\n"
                "  tune      run a tuning job (--local here, or on a daemon with --server)\n"
                "  best      print the best stored configuration of a kernel\n"
                "  jobs      list stored jobs\n"
                "  show      show one job and its measurements\n"
                "  watch     follow a daemon's job (--server)\n"
                "  cancel    cancel a daemon's job (--server)\n"
                "  devices   list this machine's GPUs (or a daemon's devices)\n"
                "  evaluate  score search strategies on recorded spaces\n"
                "  merge     add other stores' jobs and measurements to this one\n"
                "  version   print the version\n\n"
                "With --server ADDR the commands talk to a ktuned daemon instead of the\n"
                "local store (--token-file, --tls-ca for a secured daemon).\n\n"
                "Run 'ktune COMMAND --help' for a command's flags.\n");
}

// Opens the store for a command that only reads: the file must exist.
std::optional<Failure> OpenExistingStore(const Args& args, std::unique_ptr<Store>& out) {
  const std::string path = args.Get("db").value_or(DefaultDbPath());
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path, /*create=*/false);
  if (!store.ok()) {
    if (store.status().code() == absl::StatusCode::kNotFound ||
        store.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Failure{kExitInvalidInput, StrCat("--db: ", store.status().message())};
    }
    return Error(store.status());
  }
  out = *std::move(store);
  return std::nullopt;
}

// ---------------------------------------------------------------- tune

class ProgressLine {
 public:
  explicit ProgressLine(std::uint64_t space_size)
      : tty_(isatty(STDERR_FILENO) == 1), space_size_(space_size) {}

  void Update(const Progress& p) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && p.evaluations > 1) return;
    last_ = now;
    const double wall = p.wall.count();
    const double rate = wall > 0 ? static_cast<double>(p.evaluations) / wall : 0;
    std::string line = StrCat("\r\033[K", p.evaluations);
    if (p.max_evaluations > 0) line += StrCat("/", p.max_evaluations);
    line += " evaluations";
    if (p.best_time_ms) {
      line += StrCat("  best ", FormatMs(*p.best_time_ms), " (", p.best_key, ")");
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %.0f/s", rate);
    line += buf;
    // Time left: by the evaluation budget, the space size, or the time budget.
    std::optional<double> left;
    std::uint64_t target = space_size_;
    if (p.max_evaluations > 0 && static_cast<std::uint64_t>(p.max_evaluations) < target) {
      target = static_cast<std::uint64_t>(p.max_evaluations);
    }
    if (rate > 0 && target > static_cast<std::uint64_t>(p.evaluations)) {
      left = static_cast<double>(target - static_cast<std::uint64_t>(p.evaluations)) / rate;
    }
    if (p.max_time.count() > 0 && p.elapsed.count() > 0) {
      const double by_time =
          (p.max_time - p.elapsed).count() / 1e3 * (wall / (p.elapsed.count() / 1e3));
      left = left ? std::min(*left, std::max(0.0, by_time)) : std::max(0.0, by_time);
    }
    if (left) {
      std::snprintf(buf, sizeof buf, "  ~%.0fs left", *left);
      line += buf;
    }
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    shown_ = true;
  }

  void Finish() {
    if (shown_) std::fputs("\r\033[K", stderr);
  }

 private:
  bool tty_;
  std::uint64_t space_size_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

WorkerProgram SelfProgram() { return WorkerProgram{SelfExecutable()}; }

std::optional<Failure> RunTune(const Args& args, int* exit_code) {
  if (!args.Has("local")) {
    return Failure{kExitInvalidInput,
                   "ktune tune: give --local to run here, or --server ADDR to send the job to a "
                   "ktuned daemon"};
  }
  for (const char* remote_only : {"wait", "priority"}) {
    if (args.Has(remote_only)) {
      return Failure{kExitInvalidInput, StrCat("--", remote_only, ": only with --server")};
    }
  }
  // 1. The job spec, if any, with the command line's overrides.
  v1::JobSpec spec;
  std::string base_dir = ".";
  const bool has_spec = !args.positional().empty();
  if (has_spec) {
    const std::string& path = args.positional()[0];
    absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(path);
    if (!loaded.ok()) return InvalidInput(loaded.status());
    spec = *std::move(loaded);
    base_dir = DirOf(path);
  }
  if (auto f = ApplyTuneFlags(args, spec)) return f;

  // 2. The device.
  std::string device_arg;
  std::string device_base = ".";
  if (auto d = args.Get("device")) {
    device_arg = *d;
  } else if (spec.device().devices_size() > 0) {
    device_arg = StrJoin({spec.device().devices().begin(), spec.device().devices().end()}, ",");
    device_base = base_dir;
  } else {
    return Failure{kExitInvalidInput,
                   "ktune tune: no device; give --device sim:FILE (or name one in the "
                   "job file's device.devices)"};
  }
  if (!has_spec && device_arg.rfind("sim:", 0) != 0) {
    return Failure{kExitInvalidInput, StrCat("--device ", device_arg,
                                             ": a GPU tunes a kernel given by a job file "
                                             "(ktune tune SPEC.json ...)")};
  }
  OpenDeviceOptions device_options;
  device_options.base_dir = device_base;
  device_options.worker_program = SelfExecutable();
  absl::StatusOr<std::optional<double>> speed = args.GetDouble("sim-speed", 0);
  if (!speed.ok()) return InvalidInput(speed.status());
  device_options.sim_speed = speed->value_or(0);
  absl::StatusOr<std::optional<std::int64_t>> workers = args.GetInt("compile-workers", 1, 1024);
  if (!workers.ok()) return InvalidInput(workers.status());
  device_options.compile_workers = static_cast<int>(workers->value_or(0));
  absl::StatusOr<std::unique_ptr<Device>> opened = OpenDevice(device_arg, device_options);
  if (!opened.ok()) {
    return Failure{opened.status().code() == absl::StatusCode::kInvalidArgument ? kExitInvalidInput
                                                                                : kExitError,
                   StrCat("--device ", device_arg, ": ", opened.status().message())};
  }
  std::unique_ptr<Device> device = *std::move(opened);
  spec.mutable_device()->clear_devices();
  for (const std::string& d : StrSplit(device_arg, ',')) spec.mutable_device()->add_devices(d);

  // 3. The job.
  absl::StatusOr<Job> job = ResolveJobOn(spec, base_dir, *device);
  if (!job.ok()) {
    return Failure{kExitInvalidInput,
                   has_spec ? StrCat(args.positional()[0], ": ", job.status().message())
                            : std::string(job.status().message())};
  }

  // 4. The strategy (checked now; rebuilt around a warm start below).
  absl::StatusOr<BuiltStrategy> strat = BuildStrategy(*job, nullptr, "");
  if (!strat.ok()) {
    return Failure{kExitInvalidInput,
                   StrCat(args.Has("strategy") ? std::string("--strategy")
                                               : StrategyErrorField(job->spec.strategy().name()),
                          ": ", strat.status().message())};
  }
  std::string resolved = strat->resolved;

  // 5. Bind the job to the device (for a GPU: worker, arguments,
  // reference), still before anything is stored.
  Session session(*job, *device, *strat->strategy, resolved);
  if (absl::Status s = session.Prepare(); !s.ok()) {
    return s.code() == absl::StatusCode::kInvalidArgument ? InvalidInput(s) : Error(s);
  }

  // 6. The store: opened only now, after all input was checked.
  const std::string db_path = args.Get("db").value_or(DefaultDbPath());
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db_path, /*create=*/true);
  if (!store.ok()) {
    if (store.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Failure{kExitInvalidInput, StrCat("--db: ", store.status().message())};
    }
    return Error(store.status());
  }

  // 7. A warm start from other jobs of this kernel, if the store has any:
  // the strategy is rebuilt around it.
  BuiltStrategy warm;
  if (job->warm_start) {
    absl::StatusOr<BuiltStrategy> rebuilt = BuildStrategy(*job, &**store, session.job_id());
    if (!rebuilt.ok()) return Error(rebuilt.status());
    warm = *std::move(rebuilt);
    if (warm.warm_configurations > 0) {
      resolved = warm.resolved;
      session.set_strategy(*warm.strategy, resolved);
      std::fprintf(stderr, "ktune: warm start from %lld earlier job(s): %zu configurations\n",
                   static_cast<long long>(warm.warm_jobs), warm.warm_configurations);
    }
  }

  // 8. Run.
  const SpaceCount count = job->space->Count();
  ProgressLine line(count.count > UINT64_MAX ? UINT64_MAX
                                             : static_cast<std::uint64_t>(count.count));
  std::fprintf(stderr, "ktune: job %s: %s on %s, strategy %s, %s configurations\n",
               session.job_id().c_str(), job->kernel_name.c_str(), device->info().name.c_str(),
               resolved.c_str(),
               StrCat(count.exact ? "" : "~", static_cast<std::uint64_t>(count.count)).c_str());
  InstallSignalHandlers();
  SessionOptions so;
  so.stop = &g_stop;
  so.on_progress = [&line](const Progress& p) { line.Update(p); };
  absl::StatusOr<SessionResult> result = session.Run(**store, so);
  line.Finish();
  if (!result.ok()) return Error(result.status());

  const Progress& p = result->progress;
  std::fprintf(stderr, "ktune: %s after %lld evaluations (%lld from the store%s)%s\n",
               result->end_reason.c_str(), static_cast<long long>(p.evaluations),
               static_cast<long long>(p.replayed), result->resumed ? ", resumed" : "",
               result->end_reason == "interrupted" ? "; run the same command again to resume" : "");
  TuneSummary summary;
  summary.job_id = result->job.id;
  summary.kernel = job->kernel_name;
  summary.device = device->info();
  summary.problem = job->problem;
  summary.strategy = resolved;
  summary.evaluations = p.evaluations;
  summary.status_counts = p.status_counts;
  summary.best = result->best;
  summary.objective_id = job->objective.id();
  summary.objective_name = job->objective.name();
  summary.state = result->job.state;
  summary.end_reason = result->end_reason;
  PrintTuneSummary(summary, args.Has("json"));
  if (auto f = EmitResults(args, summary)) return f;
  *exit_code = result->end_reason == "interrupted" ? kExitError : kExitOk;
  return std::nullopt;
}

// ---------------------------------------------------------------- best

std::optional<Failure> RunBest(const Args& args, int* exit_code) {
  std::optional<std::string> kernel = args.Get("kernel");
  if (!kernel || kernel->empty()) {
    return Failure{kExitInvalidInput, "ktune best: --kernel NAME is required"};
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

// ---------------------------------------------------------------- jobs, show

std::optional<Failure> RunJobs(const Args& args, int* exit_code) {
  std::unique_ptr<Store> store;
  if (auto f = OpenExistingStore(args, store)) return f;
  absl::StatusOr<std::vector<JobRecord>> jobs = store->ListJobs();
  if (!jobs.ok()) return Error(jobs.status());
  PrintJobs(*jobs, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RunShow(const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "ktune show: give a JOB id (see ktune jobs)"};
  }
  std::unique_ptr<Store> store;
  if (auto f = OpenExistingStore(args, store)) return f;
  absl::StatusOr<JobRecord> job = store->GetJob(args.positional()[0]);
  if (!job.ok()) {
    if (job.status().code() == absl::StatusCode::kNotFound ||
        job.status().code() == absl::StatusCode::kInvalidArgument) {
      return Failure{kExitInvalidInput, StrCat("JOB: ", job.status().message())};
    }
    return Error(job.status());
  }
  absl::StatusOr<std::vector<StoredMeasurement>> ms = store->LoadMeasurements(job->id);
  if (!ms.ok()) return Error(ms.status());
  PrintShow(*job, *ms, args.Has("json"));
  *exit_code = kExitOk;
  return std::nullopt;
}

// --------------------------------------------------------------- merge

std::optional<Failure> RunMerge(const Args& args, int* exit_code) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "ktune merge: give at least one SOURCE.db to merge"};
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

// A score or fraction right-aligned in `width` with three decimals; "-"
// where there is none (NaN: not run that far).
std::string Figure(double v, int width) {
  char buf[32];
  if (std::isnan(v)) {
    std::snprintf(buf, sizeof buf, "%*s", width, "-");
  } else {
    std::snprintf(buf, sizeof buf, "%*.3f", width, v);
  }
  return buf;
}

std::optional<Failure> RunEvaluate(const Args& args, int* exit_code) {
  const std::vector<std::string> devices = args.GetAll("device");
  if (devices.empty()) {
    return Failure{kExitInvalidInput, "ktune evaluate: give at least one --device sim:FILE"};
  }
  std::vector<std::string> strategies = StrSplit(args.Get("strategy").value_or("auto"), ',');
  const std::vector<std::string> known = StrategyNames();
  // A strategy may carry options: name:key=value:key=value.
  std::map<std::string, StrategyFlag> parsed;
  for (const std::string& s : strategies) {
    absl::StatusOr<StrategyFlag> flag = ParseStrategyFlag(s);
    if (!flag.ok()) return InvalidInput(flag.status());
    if (std::find(known.begin(), known.end(), flag->name) == known.end()) {
      return Failure{kExitInvalidInput, StrCat("--strategy: unknown strategy '", flag->name,
                                               "'; known: ", StrJoin(known, ", "))};
    }
    parsed[s] = *std::move(flag);
  }
  absl::StatusOr<std::optional<std::int64_t>> repeats = args.GetInt("repeats", 1, 100000);
  if (!repeats.ok()) return InvalidInput(repeats.status());
  absl::StatusOr<std::optional<std::int64_t>> batch = args.GetInt("batch", 1, 4096);
  if (!batch.ok()) return InvalidInput(batch.status());
  absl::StatusOr<std::optional<std::uint64_t>> seed = args.GetUint("seed");
  if (!seed.ok()) return InvalidInput(seed.status());
  EvaluateOptions options;
  options.repeats = static_cast<int>(repeats->value_or(30));
  options.batch = static_cast<int>(batch->value_or(1));
  options.seed = seed->value_or(0);
  options.short_only = args.Has("short-only");

  std::vector<RecordedSpace> recordings;
  for (const std::string& d : devices) {
    if (d.rfind("sim:", 0) != 0) {
      return Failure{kExitInvalidInput, StrCat("--device ", d, ": give sim:FILE")};
    }
    absl::StatusOr<RecordedSpace> rs = RecordedSpace::Load(d.substr(4));
    if (!rs.ok())
      return Failure{kExitInvalidInput, StrCat("--device ", d, ": ", rs.status().message())};
    recordings.push_back(*std::move(rs));
  }
  // The strategies' settings are checked before anything runs.
  {
    absl::StatusOr<Space> first = recordings.front().ToSpace();
    if (!first.ok()) return Error(first.status());
    for (const auto& [text, flag] : parsed) {
      StrategyOptions so;
      so.settings = flag.options;
      if (auto s = MakeStrategy(flag.name, *first, so); !s.ok()) {
        return Failure{kExitInvalidInput, StrCat("--strategy: ", s.status().message())};
      }
    }
  }
  std::optional<RecordedSpace> warm;
  if (auto w = args.Get("warm-from")) {
    if (w->rfind("sim:", 0) != 0) {
      return Failure{kExitInvalidInput, StrCat("--warm-from ", *w, ": give sim:FILE")};
    }
    absl::StatusOr<RecordedSpace> rs = RecordedSpace::Load(w->substr(4));
    if (!rs.ok())
      return Failure{kExitInvalidInput, StrCat("--warm-from ", *w, ": ", rs.status().message())};
    warm = *std::move(rs);
  }
  Json out = Json::MakeObject();
  Json spaces = Json::MakeArray();
  std::map<std::string, std::vector<double>> short_scores, long_scores;
  const bool json = args.Has("json");
  if (!json) {
    std::printf("%-44s %-12s %7s %7s %6s %6s %6s %6s %9s\n", "SPACE (short/long budget)",
                "STRATEGY", "SHORT", "LONG", "@20", "@50", "@100", "@200", "MS/PROP");
  }
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    const RecordedSpace& rs = recordings[i];
    const ScoreBaseline baseline = BaselineOf(rs);
    std::string label = devices[i].substr(devices[i].find_last_of('/') + 1);
    Json space = Json::MakeObject();
    space.Set("space", devices[i]);
    space.Set("short_budget", baseline.short_budget());
    space.Set("long_budget", baseline.long_budget());
    Json results = Json::MakeArray();
    std::vector<std::pair<Config, Outcome>> prior;
    if (warm) {
      absl::StatusOr<Space> target = rs.ToSpace();
      if (!target.ok()) return Error(target.status());
      prior = PriorFrom(*warm, *target);
      if (prior.empty()) {
        return Failure{kExitInvalidInput, StrCat("--warm-from: ", warm->path(),
                                                 " shares no configurations with ", devices[i])};
      }
    }
    for (const std::string& name : strategies) {
      StrategyFactory factory = [&](const Space& sp, std::uint64_t s) {
        StrategyOptions so;
        so.prior = prior;
        so.seed = s;
        so.max_evaluations = baseline.long_budget();
        so.settings = parsed.at(name).options;
        return MakeStrategy(parsed.at(name).name, sp, so);
      };
      absl::StatusOr<StrategyScore> sc = EvaluateStrategy(rs, name, factory, options);
      if (!sc.ok()) return Error(sc.status());
      short_scores[name].push_back(sc->short_score);
      long_scores[name].push_back(sc->long_score);
      if (json) {
        Json r = Json::MakeObject();
        r.Set("strategy", name);
        r.Set("short_score", sc->short_score);
        r.Set("long_score", sc->long_score);
        Json f = Json::MakeArray();
        for (double v : sc->fraction_of_optimum) f.Push(v);
        r.Set("fraction_of_optimum_at_20_50_100_200", std::move(f));
        r.Set("ms_per_proposal", sc->time_per_proposal.count());
        results.Push(std::move(r));
        // Long runs: say how far they got.
        std::fprintf(stderr, "ktune evaluate: %s %s: %.3f / %.3f\n", label.c_str(), name.c_str(),
                     sc->short_score, sc->long_score);
      } else {
        std::printf("%-44s %-12s %7.3f %7s %6s %6s %6s %6s %9.3f\n",
                    StrCat(label.substr(0, 34), " (", baseline.short_budget(), "/",
                           baseline.long_budget(), ")")
                        .c_str(),
                    name.c_str(), sc->short_score, Figure(sc->long_score, 7).c_str(),
                    Figure(sc->fraction_of_optimum[0], 6).c_str(),
                    Figure(sc->fraction_of_optimum[1], 6).c_str(),
                    Figure(sc->fraction_of_optimum[2], 6).c_str(),
                    Figure(sc->fraction_of_optimum[3], 6).c_str(), sc->time_per_proposal.count());
        std::fflush(stdout);
      }
    }
    space.Set("results", std::move(results));
    spaces.Push(std::move(space));
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  Json averages = Json::MakeArray();
  for (const std::string& name : strategies) {
    const double lo_short = *std::min_element(short_scores[name].begin(), short_scores[name].end());
    const double lo_long = *std::min_element(long_scores[name].begin(), long_scores[name].end());
    if (json) {
      Json a = Json::MakeObject();
      a.Set("strategy", name);
      a.Set("short_score", mean(short_scores[name]));
      a.Set("long_score", mean(long_scores[name]));
      a.Set("lowest_short_score", lo_short);
      a.Set("lowest_long_score", lo_long);
      averages.Push(std::move(a));
    } else {
      std::printf("%-44s %-12s %7.3f %7s   (lowest %.3f / %s; %d repeats, batch %d%s)\n",
                  StrCat("average over ", recordings.size(), " spaces").c_str(), name.c_str(),
                  mean(short_scores[name]), Figure(mean(long_scores[name]), 7).c_str(), lo_short,
                  Figure(lo_long, 0).c_str(), options.repeats, options.batch,
                  options.short_only ? ", short budget only" : "");
    }
  }
  if (json) {
    out.Set("spaces", std::move(spaces));
    out.Set("averages", std::move(averages));
    out.Set("repeats", options.repeats);
    out.Set("batch", options.batch);
    std::cout << out.Dump() << "\n";
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RunDevices(const Args& args, int* exit_code) {
#ifdef KTUNE_HAVE_CUDA
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(SelfProgram());
#else
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = absl::FailedPreconditionError(
      "this ktune was built without the CUDA toolkit: only simulated devices (sim:FILE)");
#endif
  if (args.Has("json")) {
    Json out = Json::MakeObject();
    Json list = Json::MakeArray();
    if (gpus.ok()) {
      for (const v1::WorkerDeviceInfo& g : *gpus) {
        Json d = Json::MakeObject();
        d.Set("id", StrCat("cuda:", g.ordinal()));
        d.Set("name", g.name());
        d.Set("architecture", StrCat("sm_", g.major(), g.minor()));
        d.Set("uuid", g.uuid());
        d.Set("memory_bytes", g.memory_bytes());
        d.Set("multiprocessors", g.multiprocessors());
        d.Set("l2_bytes", g.l2_bytes());
        d.Set("driver", StrCat(g.driver_version() / 1000, ".", (g.driver_version() % 1000) / 10));
        list.Push(std::move(d));
      }
    }
    out.Set("devices", std::move(list));
    if (!gpus.ok()) out.Set("error", std::string(gpus.status().message()));
    std::cout << out.Dump() << "\n";
  } else if (gpus.ok()) {
    std::printf("%-8s  %-28s  %-6s  %10s  %4s  %-7s  %s\n", "ID", "NAME", "ARCH", "MEMORY", "SMS",
                "DRIVER", "UUID");
    for (const v1::WorkerDeviceInfo& g : *gpus) {
      std::printf("%-8s  %-28s  %-6s  %7lld MiB  %4d  %-7s  %s\n",
                  StrCat("cuda:", g.ordinal()).c_str(), g.name().c_str(),
                  StrCat("sm_", g.major(), g.minor()).c_str(),
                  static_cast<long long>(g.memory_bytes() >> 20), g.multiprocessors(),
                  StrCat(g.driver_version() / 1000, ".", (g.driver_version() % 1000) / 10).c_str(),
                  g.uuid().c_str());
    }
  }
  if (!gpus.ok()) {
    if (!args.Has("json")) std::cerr << "ktune devices: " << gpus.status().message() << "\n";
    *exit_code = kExitError;
    return std::nullopt;
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

int Main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  // Worker processes are this same program (see tuner/ipc).
  if (std::optional<int> code = RunIfWorker(all, "ktune")) return *code;
  if (all.empty() || all[0] == "help" || all[0] == "--help" || all[0] == "-h") {
    std::cout << MainHelp();
    return all.empty() ? kExitInvalidInput : kExitOk;
  }
  if (all[0] == "version" || all[0] == "--version") {
    std::cout << "ktune " << kVersion << "\n";
    return kExitOk;
  }
  // Connection flags may come before the command: ktune --server ADDR tune ...
  std::vector<std::string> global;
  while (!all.empty() && all[0].rfind("--", 0) == 0) {
    const std::string flag = all[0].substr(
        2, all[0].find('=') == std::string::npos ? std::string::npos : all[0].find('=') - 2);
    const bool known = flag == "server" || flag == "token-file" || flag == "tls-ca" ||
                       flag == "tls-cert" || flag == "tls-key" || flag == "timeout";
    if (!known) break;
    global.push_back(all[0]);
    all.erase(all.begin());
    if (global.back().find('=') == std::string::npos && !all.empty()) {
      global.push_back(all[0]);
      all.erase(all.begin());
    }
  }
  if (all.empty()) {
    std::cerr << "ktune: no command after " << (global.empty() ? "" : global[0]) << "\n\n"
              << MainHelp();
    return kExitInvalidInput;
  }
  const std::string command = all[0];
  std::vector<std::string> rest(all.begin() + 1, all.end());
  rest.insert(rest.end(), global.begin(), global.end());
  const CommandSpec* spec = nullptr;
  std::optional<Failure> (*run)(const Args&, int*) = nullptr;
  if (command == "tune") {
    spec = &kTuneCommand;
    run = RunTune;
  } else if (command == "best") {
    spec = &kBestCommand;
    run = RunBest;
  } else if (command == "jobs") {
    spec = &kJobsCommand;
    run = RunJobs;
  } else if (command == "show") {
    spec = &kShowCommand;
    run = RunShow;
  } else if (command == "devices") {
    spec = &kDevicesCommand;
    run = RunDevices;
  } else if (command == "evaluate") {
    spec = &kEvaluateCommand;
    run = RunEvaluate;
  } else if (command == "merge") {
    spec = &kMergeCommand;
    run = RunMerge;
  } else if (command == "watch") {
    spec = &kWatchCommand;
  } else if (command == "cancel") {
    spec = &kCancelCommand;
  } else {
    std::cerr << "ktune: unknown command '" << command << "'\n\n" << MainHelp();
    return kExitInvalidInput;
  }
  absl::StatusOr<Args> args = Parse(*spec, rest);
  if (!args.ok()) {
    std::cerr << "ktune " << command << ": " << args.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (args->help()) {
    std::cout << HelpText(*spec);
    return kExitOk;
  }
  int exit_code = kExitOk;
  if (args->Has("server") && args->Has("local")) {
    std::cerr << "ktune " << command << ": --local and --server exclude each other\n";
    return kExitInvalidInput;
  }
  if (args->Has("server")) {
    if (std::optional<Failure> f = RunRemote(command, *args, &exit_code)) {
      std::cerr << "ktune " << command << ": error: " << f->message << "\n";
      return f->code;
    }
    return exit_code;
  }
  if (run == nullptr) {
    std::cerr << "ktune " << command << ": needs --server ADDR (a ktuned daemon)\n";
    return kExitInvalidInput;
  }
  for (const char* flag : {"token-file", "tls-ca", "tls-cert", "tls-key", "timeout"}) {
    if (args->Has(flag)) {
      std::cerr << "ktune " << command << ": --" << flag << " only with --server\n";
      return kExitInvalidInput;
    }
  }
  if (std::optional<Failure> f = run(*args, &exit_code)) {
    std::cerr << "ktune " << command << ": error: " << f->message << "\n";
    return f->code;
  }
  return exit_code;
}

}  // namespace
}  // namespace ktune::cli

int main(int argc, char** argv) { return ktune::cli::Main(argc, argv); }
