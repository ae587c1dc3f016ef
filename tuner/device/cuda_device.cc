#include "tuner/device/cuda_device.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <thread>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/cuda/nvml.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFinalRounds = 3;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> ListCudaDevices(const WorkerProgram& program,
                                                                  std::optional<Subprocess>* keep) {
  absl::StatusOr<Subprocess> worker = Subprocess::Start(program.Argv("measure"));
  if (!worker.ok()) return worker.status();
  v1::WorkerRequest req;
  req.set_list_devices(true);
  v1::WorkerResponse resp;
  absl::Status s = worker->channel().Send(req);
  if (s.ok()) s = worker->channel().Receive(&resp, Clock::now() + std::chrono::seconds(120));
  if (!s.ok()) {
    return absl::InternalError(
        StrCat("asking the measurement worker for the GPUs failed: ", s.message()));
  }
  if (!resp.devices().error().empty()) {
    return absl::FailedPreconditionError(resp.devices().error());
  }
  if (keep != nullptr) keep->emplace(*std::move(worker));
  return std::vector<v1::WorkerDeviceInfo>(resp.devices().devices().begin(),
                                           resp.devices().devices().end());
}

absl::StatusOr<v1::WorkerDeviceInfo> SelectCudaDevice(
    const std::vector<v1::WorkerDeviceInfo>& devices, const std::string& selector) {
  if (devices.empty()) return absl::FailedPreconditionError("no CUDA GPU is visible");
  std::string s = selector;
  if (s.rfind("cuda:", 0) == 0) s = s.substr(5);
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const int ordinal = std::stoi(s.substr(0, 6));
    for (const v1::WorkerDeviceInfo& d : devices) {
      if (d.ordinal() == ordinal) return d;
    }
    return absl::InvalidArgumentError(
        StrCat("there is no GPU ", ordinal, " (this machine has ", devices.size(), ")"));
  }
  std::string want = Lower(s);
  if (want.rfind("gpu-", 0) != 0) want = "gpu-" + want;
  std::vector<v1::WorkerDeviceInfo> found;
  for (const v1::WorkerDeviceInfo& d : devices) {
    if (Lower(d.uuid()).rfind(want, 0) == 0) found.push_back(d);
  }
  if (found.size() == 1) return found[0];
  return absl::InvalidArgumentError(found.empty()
                                        ? StrCat("no GPU has the UUID ", selector)
                                        : StrCat("UUID prefix ", selector, " is ambiguous"));
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Open(const v1::WorkerDeviceInfo& gpu,
                                                             const CudaDeviceOptions& options,
                                                             std::optional<Subprocess> worker) {
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->gpu_ = gpu;
  d->options_ = options;
  d->arch_ = StrCat("sm_", gpu.major(), gpu.minor());
  d->info_.id = StrCat("cuda:", gpu.ordinal());
  d->info_.name = gpu.name();
  d->info_.architecture = d->arch_;
  d->info_.uuid = gpu.uuid();
  d->gpu_lock_ = std::make_unique<GpuLock>(gpu.uuid());
  d->info_.memory_bytes = gpu.memory_bytes();
  d->info_.multiprocessors = gpu.multiprocessors();
  d->info_.driver = StrCat(gpu.driver_version() / 1000, ".", (gpu.driver_version() % 1000) / 10);
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (!nvrtc.ok()) return nvrtc.status();
  d->nvrtc_version_ = (*nvrtc)->version_text();
  const int arch = gpu.major() * 10 + gpu.minor();
  const std::vector<int>& archs = (*nvrtc)->supported_archs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    return absl::FailedPreconditionError(StrCat(
        "NVRTC ", d->nvrtc_version_, " cannot compile for this GPU's architecture ", d->arch_));
  }
  // The worker opens the GPU now (the slow part: the context), ahead of
  // any job, and while the compile pool starts.
  d->worker_ = std::make_unique<WorkerClient>(options.program, gpu.ordinal());
  KTUNE_RETURN_IF_ERROR(d->worker_->Start(std::move(worker)));
  CompilePoolOptions po;
  po.worker_argv = options.program.Argv("compile");
  po.workers = options.compile_workers > 0
                   ? options.compile_workers
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po.timeout = options.compile_timeout;
  po.cache_dir = options.cache_dir;
  po.nvrtc_version = d->nvrtc_version_;
  po.start_warm = true;  // NVRTC loads while the GPU opens
  po.nice = options.compile_nice;
  if (options.shared_pool != nullptr) {
    d->pool_ = options.shared_pool;
  } else {
    KTUNE_ASSIGN_OR_RETURN(d->pool_, CompilePool::Start(po));
  }
  return d;
}

CudaDevice::~CudaDevice() = default;

absl::Status CudaDevice::Bind(const JobBinding& job) {
  PlanTarget target;
  target.ordinal = gpu_.ordinal();
  target.architecture = arch_;
  target.memory_bytes = gpu_.memory_bytes();
  target.multiprocessors = gpu_.multiprocessors();
  KTUNE_ASSIGN_OR_RETURN(JobPlan plan, JobPlan::Make(job, target));
  // The companions are compiled now: they are part of the set-up.
  for (int i = 0; i < static_cast<int>(plan.companion_requests().size()); ++i) {
    const v1::CompileResult compiled =
        pool_->Submit(plan.companion_requests()[static_cast<std::size_t>(i)]).get();
    KTUNE_RETURN_IF_ERROR(plan.SetCompanionImage(i, compiled));
  }
  plan_ = std::move(plan);
  pending_.clear();
  best_ms_ = 0;
  // The reference compiles while the worker sets the job up; the worker
  // makes it once set up (and again after any restart).
  reference_.reset();
  reference_compile_.reset();
  if (plan_->reference_request()) reference_compile_ = pool_->Submit(*plan_->reference_request());
  // The worker takes the job's arguments now, while the session asks for
  // the first candidates and they compile.
  return worker_->Bind(plan_->setup(), [this] { return Reference(); });
}

absl::StatusOr<std::optional<v1::WorkerCandidate>> CudaDevice::Reference() {
  if (reference_compile_) {
    const v1::CompileResult compiled = reference_compile_->get();
    reference_compile_.reset();
    if (!compiled.error().empty()) return absl::InternalError(compiled.error());
    if (!compiled.ok()) {
      return absl::FailedPreconditionError(
          StrCat("verification: the reference does not compile:\n", compiled.log()));
    }
    reference_ = plan_->reference_template();
    reference_->set_cubin(compiled.cubin());
    reference_->set_function(compiled.lowered_name());
  }
  return reference_;
}

std::shared_future<v1::CompileResult> CudaDevice::CompileFuture(const Config& config) {
  auto it = pending_.find(config);
  if (it != pending_.end()) return it->second;
  std::shared_future<v1::CompileResult> f = pool_->Submit(plan_->CompileRequestFor(config));
  pending_.emplace(config, f);
  return f;
}

void CudaDevice::Prefetch(const std::vector<Config>& configs) {
  for (const Config& c : configs) CompileFuture(c);
}

void CudaDevice::Forget(const std::vector<Config>& configs) {
  for (const Config& c : configs) pending_.erase(c);
}

absl::StatusOr<Measurement> CudaDevice::Measure(const Config& config, bool final_round) {
  std::shared_future<v1::CompileResult> future = CompileFuture(config);
  const auto wait_start = Clock::now();
  future.wait();
  stats_.compile_wait += std::chrono::duration_cast<Millis>(Clock::now() - wait_start);
  const v1::CompileResult& compiled = future.get();  // `future` keeps it alive
  pending_.erase(config);
  if (!compiled.error().empty()) {
    return absl::InternalError(StrCat("compiling: ", compiled.error()));
  }
  Measurement m;
  // A re-measurement reuses the image: its cost is the worker's time only.
  m.compile_time = final_round ? Millis(0) : Millis(compiled.compile_ms());
  stats_.compile_cpu += m.compile_time;
  if (!compiled.ok()) {
    m.status = CandidateStatus::kCompileError;
    m.message = compiled.log();
    m.cost = m.compile_time;
    return m;
  }
  v1::WorkerCandidate c;
  c.set_id(next_id_++);
  c.set_cubin(compiled.cubin());
  c.set_function(compiled.lowered_name());
  std::string why;
  KTUNE_RETURN_IF_ERROR(plan_->LaunchFor(config, &c, &why));
  if (!why.empty()) {
    m.status = CandidateStatus::kLaunchError;
    m.message = why;
    m.cost = m.compile_time;
    return m;
  }
  c.set_verify(plan_->verifies());
  c.set_best_ms(best_ms_);
  c.set_no_racing(final_round);
  if (final_round) {
    // The rounds' samples are pooled: each round takes its share.
    c.set_min_samples(
        std::max(3, (plan_->setup().settings().min_samples() + kFinalRounds - 1) / kFinalRounds));
  }
  // The watchdog: a per-launch limit from the spec, or derived from the
  // best time so far, and room for the whole sampling loop.
  Millis per_launch = plan_->kernel_timeout();
  if (per_launch.count() <= 0) {
    per_launch = best_ms_ > 0 ? std::clamp(Millis(100 * best_ms_), Millis(1000), Millis(30000))
                              : Millis(10000);
  }
  Millis budget = plan_->max_candidate_time() + 6 * per_launch +
                  std::chrono::duration_cast<Millis>(options_.watchdog_slack);
  // The energy's window, and the wait for the counter's updates past it
  // (the worker gives up after kEnergyOvertime).
  const v1::WorkerSettings& settings = plan_->setup().settings();
  if (settings.measure_energy()) {
    budget += Millis(settings.energy_window_ms()) + kEnergyOvertime + per_launch;
  }
  Measurement failure;
  // Other ktune processes measuring on this GPU take turns with us.
  GpuLockHold hold(*gpu_lock_, [&](const std::string& holder) { TellWaiting(holder); });
  KTUNE_ASSIGN_OR_RETURN(std::optional<v1::WorkerMeasurement> w,
                         worker_->Run(c, budget, per_launch, &failure));
  ++stats_.candidates;
  if (!w) {
    failure.compile_time = m.compile_time;
    failure.cost = m.compile_time;
    return failure;
  }
  return FromWorker(*w, c, std::move(m), final_round);
}

Measurement CudaDevice::FromWorker(const v1::WorkerMeasurement& w, const v1::WorkerCandidate& c,
                                   Measurement m, bool final_round) {
  m.status = CandidateStatusFromProto(w.status());
  m.message = w.message();
  m.cost = m.compile_time + Millis(w.wall_ms());
  Conditions& cond = m.conditions;
  cond = w.conditions();
  cond.set_final_round(final_round);
  cond.set_load(plan_->load_kind());
  cond.set_instances(c.instances());
  cond.set_streams(c.streams());
  stats_.gpu_busy += Millis(cond.gpu_busy_ms());
  stats_.worker_load += Millis(w.load_ms());
  stats_.worker_verify += Millis(w.verify_ms());
  if (m.ok()) {
    m.samples_ms.assign(w.samples_ms().begin(), w.samples_ms().end());
    stats_.samples += static_cast<std::int64_t>(m.samples_ms.size());
    m.stats = ComputeStats(m.samples_ms);
    m.time = m.stats.median;
    if (best_ms_ == 0 || m.time.count() < best_ms_) best_ms_ = m.time.count();
    Throughputs(m);
  }
  return m;
}

void CudaDevice::Throughputs(Measurement& m) const {
  const double ms = m.time.count();
  if (!(ms > 0)) return;
  Conditions& c = m.conditions;
  if (c.instances() > 0) c.set_throughput(1e3 / ms);  // the time is per instance
  if (plan_->pipeline()) {
    c.set_throughput(2.0 * static_cast<double>(plan_->pipeline_bytes()) / (ms * 1e-3));
    c.set_overlap((c.h2d_ms() + c.kernel_ms() + c.d2h_ms()) / ms);
  }
}

absl::Status CudaDevice::WaitUntilOpen() { return worker_->WaitUntilOpen(); }

CudaDeviceStats CudaDevice::stats() const {
  CudaDeviceStats s = stats_;
  s.worker_restarts = worker_->restarts();
  s.setup_wait = worker_->setup_wait();
  return s;
}

std::int64_t CudaDevice::worker_restarts() const { return worker_->restarts(); }

void CudaDevice::TellWaiting(const std::string& holder) {
  if (told_waiting_) return;
  told_waiting_ = true;
  std::fprintf(stderr,
               "ktune: %s: another ktune process%s is measuring on this GPU; candidates take "
               "turns with it (%s)\n",
               info_.id.c_str(), holder.empty() ? "" : StrCat(" (pid ", holder, ")").c_str(),
               gpu_lock_->path().c_str());
}

void CudaDevice::StampToolchain(Measurement& m) const {
  m.conditions.set_driver(info_.driver);
  m.conditions.set_nvrtc(nvrtc_version_);
}

absl::StatusOr<Measurement> CudaDevice::Evaluate(const Config& config) {
  KTUNE_ASSIGN_OR_RETURN(Measurement m, Measure(config, false));
  StampToolchain(m);
  return m;
}

absl::StatusOr<std::vector<Measurement>> CudaDevice::Remeasure(const std::vector<Config>& configs) {
  // The contenders are compared under one hold: no other process's work
  // between their rounds.
  GpuLockHold hold(*gpu_lock_, [&](const std::string& holder) { TellWaiting(holder); });
  std::vector<Measurement> out(configs.size());
  std::vector<std::vector<double>> pooled(configs.size());
  std::vector<bool> failed(configs.size(), false);
  for (int round = 0; round < kFinalRounds; ++round) {
    for (std::size_t k = 0; k < configs.size(); ++k) {
      // Rotate the order each round so no contender always goes first.
      const std::size_t i = (k + static_cast<std::size_t>(round)) % configs.size();
      if (failed[i]) continue;
      KTUNE_ASSIGN_OR_RETURN(Measurement m, Measure(configs[i], true));
      if (!m.ok()) {
        failed[i] = true;
        out[i] = std::move(m);
        continue;
      }
      pooled[i].insert(pooled[i].end(), m.samples_ms.begin(), m.samples_ms.end());
      const double busy_ms = out[i].conditions.gpu_busy_ms() + m.conditions.gpu_busy_ms();
      const Millis cost = out[i].cost + m.cost;
      out[i] = std::move(m);
      out[i].conditions.set_gpu_busy_ms(busy_ms);
      out[i].cost = cost;
    }
  }
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (failed[i]) continue;
    out[i].samples_ms = pooled[i];
    out[i].stats = ComputeStats(pooled[i]);
    out[i].time = out[i].stats.median;
    Throughputs(out[i]);
    out[i].message =
        StrCat("re-measured in ", kFinalRounds, " interleaved rounds with the final contenders");
  }
  for (Measurement& m : out) StampToolchain(m);
  return out;
}

}  // namespace ktune
