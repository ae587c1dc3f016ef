// Tuning throughput and measurement fidelity on a real GPU.
//
//   tune_bench [--kernels DIR] [--ktune PATH] [--compile-workers N] [--compile-nice N]
//
// For the saxpy and SGEMM spaces of kernels/ (brute force, cold compile
// cache) it prints configurations per second next to Kernel Tuner 1.4's on
// the same H200, the GPU busy fraction (timed GPU work over wall time), the
// share of wall time the GPU side waited for the compiler, samples per
// configuration and the best configuration (NVRTC's use of the driver's
// compute cache is turned off, so cold is cold). Then a fidelity check: for a
// few configurations, ktune's median against an independent plain loop of
// the same CUBIN (events around 100 launches after a warm-up, and 100
// launches timed one by one), as ratios;
// and saxpy tuned a second time, to compare the two best times.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "strategies/registry.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/device/cuda_device.h"
#include "tuner/cuda/driver.h"
#include "tuner/cuda/fill.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string kernels = std::string(KTUNE_SOURCE_DIR) + "/kernels";
  std::string ktune = KTUNE_CLI_PATH;
  int compile_workers = 0;
  int compile_nice = 10;  // CudaDeviceOptions' default
};

struct TuneOutcome {
  std::string name;
  int configs = 0;
  double wall_s = 0;   // set-up included
  double setup_s = 0;  // validation; the worker's set-up overlaps the job
  double open_s = 0;   // the worker opening the GPU, before the job
  CudaDeviceStats stats;
  std::string best_key;
  double best_ms = 0;
  std::optional<double> best_objective;
  std::string objective_name;
  std::vector<StoredMeasurement> measurements;
  Job job;
};

Job LoadJob(const Flags& f, const std::string& name) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(f.kernels + "/" + name + ".json");
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    std::exit(1);
  }
  absl::StatusOr<Job> job = ResolveJob(*spec, f.kernels);
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(job);
}

TuneOutcome TuneOnce(const Flags& f, const v1::WorkerDeviceInfo& gpu, const std::string& name,
                     const testing::TempDir& tmp, const std::string& tag,
                     const std::string& cache_tag) {
  TuneOutcome out;
  out.name = name;
  out.job = LoadJob(f, name);
  CudaDeviceOptions o;
  o.program = WorkerProgram{f.ktune};
  o.compile_workers = f.compile_workers;
  o.compile_nice = f.compile_nice;
  // Cold unless a run with the same cache tag came before.
  o.cache_dir = tmp.File("cubin-" + cache_tag);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Open(gpu, o);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    std::exit(1);
  }
  // Opening the GPU (the worker's context) is a one-time cost, outside the
  // job's time and printed on its own.
  const auto open_start = Clock::now();
  if (absl::Status s = (*device)->WaitUntilOpen(); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
  out.open_s = std::chrono::duration<double>(Clock::now() - open_start).count();
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(tmp.File(tag + ".db"), true);
  auto strategy = MakeStrategy("brute_force", *out.job.space, {});
  Session session(out.job, **device, **strategy, "brute_force");
  // Wall time from the start of the job, set-up (upload, reference) included.
  const auto t0 = Clock::now();
  if (absl::Status s = session.Prepare(); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(s.message()).c_str());
    std::exit(1);
  }
  out.setup_s = std::chrono::duration<double>(Clock::now() - t0).count();
  absl::StatusOr<SessionResult> r = session.Run(**store);
  out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(r.status().message()).c_str());
    std::exit(1);
  }
  out.configs = static_cast<int>(r->progress.evaluations);
  out.stats = (*device)->stats();
  if (r->best) {
    out.best_key = r->best->key;
    out.best_ms = r->best->measurement.time.count();
    out.best_objective = r->best->objective;
  }
  out.objective_name = out.job.objective.name();
  out.measurements = *(*store)->LoadMeasurements(r->job.id);
  return out;
}

void PrintThroughput(const TuneOutcome& o, double kt_configs_per_s, int cores) {
  const double rate = o.configs / o.wall_s;
  std::int64_t samples = 0, ok = 0, raced = 0;
  double worker_ms = 0;
  for (const StoredMeasurement& m : o.measurements) {
    worker_ms += (m.measurement.cost - m.measurement.compile_time).count();
    if (!m.measurement.ok()) continue;
    ++ok;
    samples += m.measurement.stats.samples;
    raced += m.measurement.conditions.raced() ? 1 : 0;
  }
  const double limit_s =
      std::max(o.stats.compile_cpu.count() / 1e3 / cores, o.stats.gpu_busy.count() / 1e3);
  std::printf("%-6s %4d configs  %6.2f s  %7.1f configs/s  (Kernel Tuner %.1f: %.1fx)\n",
              o.name.c_str(), o.configs, o.wall_s, rate, kt_configs_per_s, rate / kt_configs_per_s);
  std::printf("       opening the GPU before the job %.2f s\n", o.open_s);
  std::printf(
      "       waiting for the worker's set-up (arguments, reference) %.2f s; measurement "
      "worker %.2f ms per configuration (image load %.2f, verification %.2f)\n",
      o.stats.setup_wait.count() / 1e3, worker_ms / o.configs,
      o.stats.worker_load.count() / o.configs, o.stats.worker_verify.count() / o.configs);
  std::printf(
      "       GPU busy %.0f%%  waiting for the compiler %.0f%%  compile CPU %.1f s  "
      "limit max(compile/cores, GPU work) %.2f s\n",
      100 * o.stats.gpu_busy.count() / 1e3 / o.wall_s,
      100 * o.stats.compile_wait.count() / 1e3 / o.wall_s, o.stats.compile_cpu.count() / 1e3,
      limit_s);
  std::printf("       %lld ok, %.1f samples per ok configuration, %lld raced; best %s %.4f ms",
              static_cast<long long>(ok), ok > 0 ? static_cast<double>(samples) / ok : 0.0,
              static_cast<long long>(raced), o.best_key.c_str(), o.best_ms);
  if (o.best_objective) std::printf(" (%.2f %s)", *o.best_objective, o.objective_name.c_str());
  std::printf("\n");
}

// An independent timing: the bench process loads the CUBIN itself and,
// after a warm-up, times 100 back-to-back launches with one event pair
// (`loop_ms`, their mean), then 100 launches with an event pair each
// (`per_launch_ms`, the median). ktune times one launch per sample, as
// the second does; the first also hides each launch's start-up behind the
// previous one, so the two differ by what a single launch costs beyond its
// share of a busy stream.
struct PlainTimes {
  double loop_ms = 0;
  double per_launch_ms = 0;
};

absl::StatusOr<PlainTimes> PlainLoopMs(const Job& job, const Config& config,
                                       const std::string& arch) {
  KTUNE_ASSIGN_OR_RETURN(const cuda::Api* api, cuda::Load());
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (!nvrtc.ok()) return nvrtc.status();
  const v1::CompileResult compiled = (*nvrtc)->Compile(
      BuildCompileRequest(job.spec, job.source, job.base_dir, *job.space, config, arch));
  if (!compiled.ok()) return absl::InternalError("compile failed: " + compiled.log());
  KTUNE_ASSIGN_OR_RETURN(cuda::Context ctx, cuda::Context::Open(*api, 0));
  KTUNE_ASSIGN_OR_RETURN(cuda::Module module, cuda::LoadModule(*api, compiled.cubin()));
  CUfunction f = nullptr;
  KTUNE_RETURN_IF_ERROR(
      cuda::Check(*api, api->cuModuleGetFunction(&f, module.get(), compiled.lowered_name().c_str()),
                  "cuModuleGetFunction"));
  // Arguments: buffers of the spec's sizes filled with seeded noise, and
  // the spec's scalars (evaluated at this configuration).
  SymbolTable symbols;
  std::vector<Scalar> slots;
  for (std::size_t i = 0; i < job.space->num_params(); ++i) {
    const Parameter& p = job.space->param(i);
    KTUNE_RETURN_IF_ERROR(symbols.AddSlot(p.name, p.type, static_cast<int>(i)));
    slots.push_back(ToScalar(job.space->ValueOf(config, i), symbols));
  }
  for (const auto& [k, v] : job.problem) {
    KTUNE_RETURN_IF_ERROR(symbols.AddConstant(k, ValueType::kInt, IntScalar(v)));
  }
  auto eval = [&](const std::string& text) -> std::int64_t {
    absl::StatusOr<Expr> e = Expr::Compile(text, symbols);
    std::int64_t v = 1;
    if (e.ok()) e->EvaluateInt(slots.data(), &v);
    return v;
  };
  std::vector<cuda::DeviceMemory> buffers;
  std::vector<CUdeviceptr> pointers;
  std::vector<std::string> scalars;
  for (const v1::Argument& a : job.spec.arguments()) {
    if (a.kind_case() != v1::Argument::kBuffer) continue;
    const auto type = static_cast<v1::ElementType>(a.type());
    v1::WorkerBuffer wb;
    wb.set_type(type);
    wb.set_elements(eval(a.buffer().size()));
    wb.mutable_uniform()->set_low(-1);
    wb.mutable_uniform()->set_high(1);
    wb.mutable_uniform()->set_seed(99);
    const std::size_t bytes = static_cast<std::size_t>(wb.elements()) * ElementBytes(type);
    std::vector<char> host(bytes);
    KTUNE_RETURN_IF_ERROR(FillBuffer(wb, host.data()));
    KTUNE_ASSIGN_OR_RETURN(cuda::DeviceMemory m, cuda::DeviceMemory::Allocate(*api, bytes));
    KTUNE_RETURN_IF_ERROR(cuda::Check(
        *api, api->cuMemcpyHtoDAsync(m.get(), host.data(), bytes, nullptr), "cuMemcpyHtoD"));
    KTUNE_RETURN_IF_ERROR(cuda::Check(*api, api->cuCtxSynchronize(), "cuCtxSynchronize"));
    pointers.push_back(m.get());
    buffers.push_back(std::move(m));
  }
  std::vector<void*> params;
  std::size_t b = 0;
  scalars.reserve(job.spec.arguments_size());
  for (const v1::Argument& a : job.spec.arguments()) {
    if (a.kind_case() == v1::Argument::kBuffer) {
      params.push_back(&pointers[b++]);
      continue;
    }
    std::string bytes;
    if (a.type() == v1::Argument::F32) {
      absl::StatusOr<Expr> e = Expr::Compile(a.scalar(), symbols);
      double v = 0;
      e->EvaluateDouble(slots.data(), &v);
      const float fv = static_cast<float>(v);
      bytes.assign(reinterpret_cast<const char*>(&fv), 4);
    } else {
      const auto iv = static_cast<std::int32_t>(eval(a.scalar()));
      bytes.assign(reinterpret_cast<const char*>(&iv), 4);
    }
    scalars.push_back(bytes);
    params.push_back(scalars.back().data());
  }
  std::int64_t block[3], grid[3];
  static constexpr const char* kBlock[] = {"block_size_x", "block_size_y", "block_size_z"};
  for (int d = 0; d < 3; ++d) {
    std::string bt = "1";
    if (d < job.spec.launch().block_size()) {
      bt = job.spec.launch().block(d);
    } else if (job.spec.launch().block_size() == 0 && job.space->ParamIndex(kBlock[d])) {
      bt = kBlock[d];
    }
    block[d] = eval(bt);
    grid[d] = d < job.spec.launch().grid_size() ? eval(job.spec.launch().grid(d)) : 1;
  }
  KTUNE_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::CreateStream(*api));
  KTUNE_ASSIGN_OR_RETURN(cuda::Event e0, cuda::CreateEvent(*api));
  KTUNE_ASSIGN_OR_RETURN(cuda::Event e1, cuda::CreateEvent(*api));
  auto launch = [&] {
    return api->cuLaunchKernel(f, static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                               static_cast<unsigned>(grid[2]), static_cast<unsigned>(block[0]),
                               static_cast<unsigned>(block[1]), static_cast<unsigned>(block[2]), 0,
                               stream.get(), params.data(), nullptr);
  };
  // Warm-up: 10 launches plus enough to keep the GPU busy for ~200 ms.
  for (int i = 0; i < 10; ++i) KTUNE_RETURN_IF_ERROR(cuda::Check(*api, launch(), "cuLaunchKernel"));
  KTUNE_RETURN_IF_ERROR(cuda::Check(*api, api->cuStreamSynchronize(stream.get()), "sync"));
  const auto w0 = Clock::now();
  while (Clock::now() - w0 < std::chrono::milliseconds(200)) {
    KTUNE_RETURN_IF_ERROR(cuda::Check(*api, launch(), "cuLaunchKernel"));
    KTUNE_RETURN_IF_ERROR(cuda::Check(*api, api->cuStreamSynchronize(stream.get()), "sync"));
  }
  api->cuEventRecord(e0.get(), stream.get());
  for (int i = 0; i < 100; ++i)
    KTUNE_RETURN_IF_ERROR(cuda::Check(*api, launch(), "cuLaunchKernel"));
  api->cuEventRecord(e1.get(), stream.get());
  KTUNE_RETURN_IF_ERROR(cuda::Check(*api, api->cuEventSynchronize(e1.get()), "sync"));
  float ms = 0;
  KTUNE_RETURN_IF_ERROR(
      cuda::Check(*api, api->cuEventElapsedTime(&ms, e0.get(), e1.get()), "cuEventElapsedTime"));
  PlainTimes out;
  out.loop_ms = static_cast<double>(ms) / 100;
  std::vector<cuda::Event> starts, ends;
  for (int i = 0; i < 100; ++i) {
    KTUNE_ASSIGN_OR_RETURN(cuda::Event a, cuda::CreateEvent(*api));
    KTUNE_ASSIGN_OR_RETURN(cuda::Event z, cuda::CreateEvent(*api));
    starts.push_back(std::move(a));
    ends.push_back(std::move(z));
  }
  for (int i = 0; i < 100; ++i) {
    KTUNE_RETURN_IF_ERROR(
        cuda::Check(*api, api->cuEventRecord(starts[i].get(), stream.get()), "cuEventRecord"));
    KTUNE_RETURN_IF_ERROR(cuda::Check(*api, launch(), "cuLaunchKernel"));
    KTUNE_RETURN_IF_ERROR(
        cuda::Check(*api, api->cuEventRecord(ends[i].get(), stream.get()), "cuEventRecord"));
  }
  KTUNE_RETURN_IF_ERROR(cuda::Check(*api, api->cuEventSynchronize(ends[99].get()), "sync"));
  std::vector<double> each;
  for (int i = 0; i < 100; ++i) {
    KTUNE_RETURN_IF_ERROR(cuda::Check(
        *api, api->cuEventElapsedTime(&ms, starts[i].get(), ends[i].get()), "cuEventElapsedTime"));
    each.push_back(ms);
  }
  std::nth_element(each.begin(), each.begin() + 50, each.end());
  out.per_launch_ms = each[50];
  return out;
}

void Fidelity(const TuneOutcome& o, const std::string& arch) {
  std::vector<const StoredMeasurement*> ok;
  for (const StoredMeasurement& m : o.measurements) {
    if (m.measurement.ok()) ok.push_back(&m);
  }
  if (ok.empty()) return;
  std::sort(ok.begin(), ok.end(),
            [](const auto* a, const auto* b) { return a->measurement.time < b->measurement.time; });
  const std::vector<const StoredMeasurement*> picks = {ok.front(), ok[ok.size() / 4],
                                                       ok[ok.size() / 2]};
  for (const StoredMeasurement* m : picks) {
    absl::StatusOr<Config> c = o.job.space->ParseKey(m->key);
    absl::StatusOr<PlainTimes> plain = PlainLoopMs(o.job, *c, arch);
    if (!plain.ok()) {
      std::printf("  fidelity %s: %s\n", m->key.c_str(),
                  std::string(plain.status().message()).c_str());
      continue;
    }
    const double t = m->measurement.time.count();
    std::printf(
        "  fidelity %-6s %-12s ktune median %.4f ms (%d samples)  plain loop %.4f ms  "
        "ratio %.4f  (per-launch events %.4f ms, ratio %.4f)\n",
        o.name.c_str(), m->key.c_str(), t, m->measurement.stats.samples, plain->loop_ms,
        t / plain->loop_ms, plain->per_launch_ms, t / plain->per_launch_ms);
  }
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  using namespace ktune;
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--kernels") f.kernels = argv[i + 1];
    if (a == "--ktune") f.ktune = argv[i + 1];
    if (a == "--compile-workers") f.compile_workers = std::atoi(argv[i + 1]);
    if (a == "--compile-nice") f.compile_nice = std::atoi(argv[i + 1]);
  }
  // Cold means cold: NVRTC would otherwise answer repeats from the driver's
  // compute cache (~/.nv/ComputeCache), filled by any earlier run.
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(WorkerProgram{f.ktune});
  if (!gpus.ok() || gpus->empty()) {
    std::fprintf(stderr, "no GPU: %s\n", std::string(gpus.status().message()).c_str());
    return 1;
  }
  const v1::WorkerDeviceInfo gpu = (*gpus)[0];
  const int cores = f.compile_workers > 0 ? f.compile_workers
                                          : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("%s (sm_%d%d, %d SMs), %d compile workers\n", gpu.name().c_str(), gpu.major(),
              gpu.minor(), gpu.multiprocessors(), cores);
  const testing::TempDir tmp;
  std::printf("cold compile cache:\n");
  const TuneOutcome saxpy = TuneOnce(f, gpu, "saxpy", tmp, "saxpy1", "saxpy");
  PrintThroughput(saxpy, 22.0, cores);
  const TuneOutcome sgemm = TuneOnce(f, gpu, "sgemm", tmp, "sgemm", "sgemm");
  PrintThroughput(sgemm, 3.7, cores);
  std::printf("warm compile cache (the images of the first run):\n");
  const TuneOutcome again = TuneOnce(f, gpu, "saxpy", tmp, "saxpy2", "saxpy");
  PrintThroughput(again, 22.0, cores);
  std::printf("saxpy tuned twice: best %s %.4f ms and %s %.4f ms (ratio %.4f)\n",
              saxpy.best_key.c_str(), saxpy.best_ms, again.best_key.c_str(), again.best_ms,
              again.best_ms / saxpy.best_ms);
  const std::string arch = StrCat("sm_", gpu.major(), gpu.minor());
  Fidelity(saxpy, arch);
  Fidelity(sgemm, arch);
  return 0;
}
