#include "server/runner/runner.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "strategies/registry.h"
#include "tuner/base/file.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/device/device_group.h"
#include "tuner/device/simulated_device.h"
#include "tuner/session/warm_start.h"
#ifdef KTUNE_HAVE_CUDA
#include "tuner/compile/compile_pool.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/device/cuda_device.h"
#endif

namespace ktune {

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& locator,
                                                   const OpenDeviceOptions& options) {
  // Several devices ("0,1", "all"): one job spread over them.
  std::vector<std::string> parts;
  if (locator == "all") {
#ifdef KTUNE_HAVE_CUDA
    absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
        ListCudaDevices(WorkerProgram{options.worker_program});
    if (!gpus.ok()) return gpus.status();
    for (const v1::WorkerDeviceInfo& g : *gpus) parts.push_back(StrCat("cuda:", g.ordinal()));
    if (parts.empty()) return absl::FailedPreconditionError("all: this machine has no GPU");
#else
    return absl::FailedPreconditionError(
        "all: this ktune was built without the CUDA toolkit: only simulated devices (sim:FILE)");
#endif
  } else if (locator.find(',') != std::string::npos) {
    parts = StrSplit(locator, ',');
  }
  if (parts.size() == 1) return OpenDevice(parts.front(), options);
  if (parts.size() > 1) {
    OpenDeviceOptions one = options;
    const bool gpu = std::any_of(parts.begin(), parts.end(),
                                 [](const std::string& p) { return p.rfind("sim:", 0) != 0; });
    if (gpu && one.compile_pool == nullptr) {
      // One NVRTC pool for the group: a configuration compiles once,
      // whichever GPU measures it.
      absl::StatusOr<std::shared_ptr<CompilePool>> pool = StartSharedCompilePool(one);
      if (!pool.ok()) return pool.status();
      one.compile_pool = *std::move(pool);
    }
    std::vector<std::unique_ptr<Device>> members;
    for (const std::string& part : parts) {
      if (part.empty() || part.find(',') != std::string::npos || part == "all") {
        return absl::InvalidArgumentError(StrCat("'", locator, "': an empty or malformed entry"));
      }
      absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(part, one);
      if (!d.ok()) return absl::Status(d.status().code(), StrCat(part, ": ", d.status().message()));
      members.push_back(*std::move(d));
    }
    absl::StatusOr<std::unique_ptr<DeviceGroup>> group = DeviceGroup::Create(std::move(members));
    if (!group.ok()) return group.status();
    return std::unique_ptr<Device>(*std::move(group));
  }
  if (locator.rfind("sim:", 0) == 0) {
    std::string path = locator.substr(4);
    if (path.empty()) return absl::InvalidArgumentError("sim: needs a file name (sim:FILE)");
    if (path[0] != '/' && options.base_dir != ".") path = StrCat(options.base_dir, "/", path);
    absl::StatusOr<std::unique_ptr<SimulatedDevice>> sim = SimulatedDevice::Open(path);
    if (!sim.ok()) return absl::InvalidArgumentError(sim.status().message());
    if (options.sim_speed > 0) (*sim)->set_speed(options.sim_speed);
    return std::unique_ptr<Device>(*std::move(sim));
  }
  if (locator.empty()) return absl::InvalidArgumentError("empty device locator");
#ifdef KTUNE_HAVE_CUDA
  const WorkerProgram program{options.worker_program};
  // The worker that lists the GPUs goes on to open the chosen one; NVRTC
  // loads here meanwhile (the device needs it next).
  std::thread nvrtc_load([] { (void)Nvrtc::Get(); });
  std::optional<Subprocess> lister;
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(program, &lister);
  nvrtc_load.join();
  if (!gpus.ok()) return gpus.status();
  absl::StatusOr<v1::WorkerDeviceInfo> gpu = SelectCudaDevice(*gpus, locator);
  if (!gpu.ok()) return gpu.status();
  CudaDeviceOptions o;
  o.program = program;
  o.compile_workers = options.compile_workers;
  o.cache_dir = CompileCache::DefaultDir();
  o.shared_pool = options.compile_pool;
  absl::StatusOr<std::unique_ptr<CudaDevice>> d = CudaDevice::Open(*gpu, o, std::move(lister));
  if (!d.ok()) return d.status();
  return std::unique_ptr<Device>(*std::move(d));
#else
  return absl::FailedPreconditionError(
      "this ktune was built without the CUDA toolkit: only simulated devices (sim:FILE)");
#endif
}

absl::StatusOr<std::shared_ptr<CompilePool>> StartSharedCompilePool(
    const OpenDeviceOptions& options) {
#ifdef KTUNE_HAVE_CUDA
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (!nvrtc.ok()) return nvrtc.status();
  CompilePoolOptions po;
  po.worker_argv = WorkerProgram{options.worker_program}.Argv("compile");
  po.workers = options.compile_workers > 0
                   ? options.compile_workers
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po.cache_dir = CompileCache::DefaultDir();
  po.nvrtc_version = (*nvrtc)->version_text();
  po.start_warm = true;                        // NVRTC loads while the GPU opens
  po.nice = CudaDeviceOptions{}.compile_nice;  // as a device's own pool
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(po);
  if (!pool.ok()) return pool.status();
  return std::shared_ptr<CompilePool>(*std::move(pool));
#else
  (void)options;
  return absl::FailedPreconditionError("this build has no CUDA support: nothing to compile");
#endif
}

std::optional<CompileActivity> CompileActivityOf(const std::shared_ptr<CompilePool>& pool) {
#ifdef KTUNE_HAVE_CUDA
  if (pool == nullptr) return std::nullopt;
  const CompilePoolStats s = pool->stats();
  CompileActivity a;
  a.workers = s.workers;
  a.busy = s.busy;
  a.backlog = s.backlog;
  a.compiled = s.compiled;
  a.cache_hits = s.cache_hits;
  a.busy_seconds = s.busy_seconds;
  return a;
#else
  (void)pool;
  return std::nullopt;
#endif
}

std::string NvrtcVersion() {
#ifdef KTUNE_HAVE_CUDA
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  return nvrtc.ok() ? (*nvrtc)->version_text() : "";
#else
  return "";
#endif
}

absl::StatusOr<Job> ResolveJobOn(const v1::JobSpec& spec, const std::string& base_dir,
                                 const Device& device) {
  if (spec.has_kernel()) return ResolveJob(spec, base_dir);
  // A group of replays resolves against its first member's recording (the
  // members share one).
  const Device* probe = &device;
  if (const auto* group = dynamic_cast<const DeviceGroup*>(&device)) probe = &group->member(0);
  const auto* sim = dynamic_cast<const SimulatedDevice*>(probe);
  if (sim == nullptr) {
    return absl::InvalidArgumentError(
        "kernel: a GPU tunes a kernel given by the job spec (only a simulated device "
        "replays its recorded space without one)");
  }
  return JobForRecording(sim->recording(), spec);
}

absl::StatusOr<BuiltStrategy> BuildStrategy(const Job& job, Store* store,
                                            const std::string& job_id) {
  StrategyOptions options;
  options.seed = job.seed;
  options.max_evaluations = job.max_evaluations;
  options.time_limited = job.max_time.count() > 0;
  options.settings = job.strategy_settings;
  BuiltStrategy out;
  if (store != nullptr && job.warm_start) {
    absl::StatusOr<WarmStart> warm = LoadWarmStart(*store, job, job_id);
    if (!warm.ok()) return warm.status();
    out.warm_jobs = warm->jobs;
    out.warm_configurations = warm->prior.size();
    options.prior = std::move(warm->prior);
  }
  out.resolved = job.strategy == "auto"
                     ? ResolveAutoStrategy(*job.space, job.max_evaluations,
                                           HasWarmStart(*job.space, options), options.time_limited)
                     : job.strategy;
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy(job.strategy, *job.space, options);
  if (!s.ok()) return s.status();
  out.strategy = *std::move(s);
  return out;
}

namespace {

absl::Status CheckDataFiles(const v1::JobSpec& spec) {
  for (int i = 0; i < spec.arguments_size(); ++i) {
    if (spec.arguments(i).buffer().init_case() == v1::Buffer::kFile) {
      return absl::InvalidArgumentError(
          StrCat("arguments[", i,
                 "].buffer.file: a data file cannot be sent to a daemon; use a "
                 "generated initialisation (uniform, normal, iota, constant)"));
    }
  }
  if (spec.verification().has_expected_data()) {
    return absl::InvalidArgumentError(
        "verification.expected_data: data files cannot be sent to a daemon; verify against a "
        "reference configuration or a reference kernel");
  }
  const v1::LoadProfile& load = spec.measurement().load();
  for (int c = 0; c < load.companions_size(); ++c) {
    for (int i = 0; i < load.companions(c).arguments_size(); ++i) {
      if (load.companions(c).arguments(i).buffer().init_case() == v1::Buffer::kFile) {
        return absl::InvalidArgumentError(
            StrCat("measurement.load.companions[", c, "].arguments[", i,
                   "].buffer.file: a data file cannot be sent to a daemon"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status InlineKernel(const std::string& field, v1::Kernel& k, const std::string& base_dir) {
  if (k.include_paths_size() > 0) {
    return absl::InvalidArgumentError(
        StrCat(field, ".include_paths: a daemon cannot read this machine's headers; inline them"));
  }
  if (k.source_case() != v1::Kernel::kFile) return absl::OkStatus();
  const std::string path = k.file().empty() || k.file()[0] == '/' || base_dir == "."
                               ? k.file()
                               : StrCat(base_dir, "/", k.file());
  absl::StatusOr<std::string> source = ReadFileContents(path);
  if (!source.ok())
    return absl::InvalidArgumentError(StrCat(field, ".file: ", source.status().message()));
  k.set_code(*source);
  return absl::OkStatus();
}

// NVRTC options that name a file or a folder: to read headers from
// (-I, --pre-include, --use-pch, --pch-dir) or to write to (--create-pch,
// --time, --fdevice-time-trace). A daemon's client names none of its paths.
bool NamesAPath(const std::string& option) {
  static constexpr std::string_view kPathOptions[] = {"-I",
                                                      "--include-path",
                                                      "-include",
                                                      "--pre-include",
                                                      "--create-pch",
                                                      "-create-pch",
                                                      "--use-pch",
                                                      "-use-pch",
                                                      "--pch-dir",
                                                      "-pch-dir",
                                                      "--time",
                                                      "-time",
                                                      "--pch",
                                                      "--fdevice-time-trace",
                                                      "-fdevice-time-trace"};
  const std::string_view name = std::string_view(option).substr(0, option.find('='));
  for (std::string_view p : kPathOptions) {
    if (name == p || (p == "-I" && option.rfind("-I", 0) == 0)) return true;
  }
  // Anything else with a slash in it, but a macro's value.
  const bool macro = option.rfind("-D", 0) == 0 || option.rfind("-U", 0) == 0 ||
                     option.rfind("--define-macro", 0) == 0 ||
                     option.rfind("--undefine-macro", 0) == 0;
  return !macro && option.find('/') != std::string::npos;
}

absl::Status RejectKernelFiles(const std::string& field, const v1::Kernel& k) {
  for (int i = 0; i < k.compiler_options_size(); ++i) {
    if (NamesAPath(k.compiler_options(i))) {
      return absl::InvalidArgumentError(
          StrCat(field, ".compiler_options[", i, "]: '", k.compiler_options(i),
                 "' names a file or folder, which a daemon does not take from its clients "
                 "(inline headers; options with paths work with ktune tune --local)"));
    }
  }
  if (k.source_case() == v1::Kernel::kFile) {
    return absl::InvalidArgumentError(
        StrCat(field, ".file: the daemon takes the source inline (", field,
               ".code); `ktune --server ADDR tune SPEC.json` inlines the file"));
  }
  if (k.include_paths_size() > 0) {
    return absl::InvalidArgumentError(
        StrCat(field,
               ".include_paths: not accepted by the daemon (paths on its machine); "
               "inline the headers"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InlineFiles(v1::JobSpec& spec, const std::string& base_dir) {
  KTUNE_RETURN_IF_ERROR(CheckDataFiles(spec));
  if (spec.has_kernel())
    KTUNE_RETURN_IF_ERROR(InlineKernel("kernel", *spec.mutable_kernel(), base_dir));
  if (spec.verification().has_reference_kernel()) {
    KTUNE_RETURN_IF_ERROR(InlineKernel(
        "verification.reference_kernel.kernel",
        *spec.mutable_verification()->mutable_reference_kernel()->mutable_kernel(), base_dir));
  }
  v1::LoadProfile& load = *spec.mutable_measurement()->mutable_load();
  for (int c = 0; c < load.companions_size(); ++c) {
    KTUNE_RETURN_IF_ERROR(InlineKernel(StrCat("measurement.load.companions[", c, "].kernel"),
                                       *load.mutable_companions(c)->mutable_kernel(), base_dir));
  }
  return absl::OkStatus();
}

absl::Status RejectFileReferences(const v1::JobSpec& spec) {
  KTUNE_RETURN_IF_ERROR(CheckDataFiles(spec));
  if (spec.has_kernel()) KTUNE_RETURN_IF_ERROR(RejectKernelFiles("kernel", spec.kernel()));
  if (spec.verification().has_reference_kernel()) {
    KTUNE_RETURN_IF_ERROR(RejectKernelFiles("verification.reference_kernel.kernel",
                                            spec.verification().reference_kernel().kernel()));
  }
  const v1::LoadProfile& load = spec.measurement().load();
  for (int c = 0; c < load.companions_size(); ++c) {
    KTUNE_RETURN_IF_ERROR(RejectKernelFiles(StrCat("measurement.load.companions[", c, "].kernel"),
                                            load.companions(c).kernel()));
  }
  return absl::OkStatus();
}

std::function<void(const absl::Status& why, double retry_in_s)> SayStoreRetries(
    std::string program, std::string job_id) {
  return [program = std::move(program), job_id = std::move(job_id)](const absl::Status& why,
                                                                    double retry_in_s) {
    std::fprintf(stderr,
                 "%s: job %s: cannot store its measurement (%s); keeping it and trying again "
                 "in %.1f s\n",
                 program.c_str(), job_id.c_str(), std::string(why.message()).c_str(), retry_in_s);
  };
}

}  // namespace ktune
