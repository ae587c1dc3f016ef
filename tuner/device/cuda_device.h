// A CUDA GPU as a Device. This side never touches the driver: it compiles
// candidates through the NVRTC worker pool and drives the GPU's
// measurement worker process, which it kills and restarts when a candidate
// hangs or leaves the context unusable. The candidate then ends as
// `timeout` or `runtime_fault` with the reason, is never retried, and the
// job goes on.
#ifndef KTUNE_TUNER_DEVICE_CUDA_DEVICE_H_
#define KTUNE_TUNER_DEVICE_CUDA_DEVICE_H_

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/compile/compile_pool.h"
#include "tuner/device/device.h"
#include "tuner/device/gpu_lock.h"
#include "tuner/device/job_plan.h"
#include "tuner/device/kernel_compile.h"
#include "tuner/device/worker_client.h"

namespace ktune {

// The GPUs this machine has, asked of a short-lived measurement worker
// (so the caller never loads the driver). FAILED_PRECONDITION with a plain
// message when there is no driver or no GPU. With `keep`, the worker is
// left running in *keep after a successful answer, for the device opened
// next to adopt (CudaDevice::Open's `worker`): its driver is initialised
// already, so opening the GPU saves a process start and that
// initialisation. Otherwise the worker ends with the call.
absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> ListCudaDevices(
    const WorkerProgram& program, std::optional<Subprocess>* keep = nullptr);

// Which GPU a selector names: "0", "cuda:0" or a UUID (or a unique prefix
// of one). INVALID_ARGUMENT if none or several match.
absl::StatusOr<v1::WorkerDeviceInfo> SelectCudaDevice(
    const std::vector<v1::WorkerDeviceInfo>& devices, const std::string& selector);

struct CudaDeviceOptions {
  WorkerProgram program;
  int compile_workers = 0;  // 0: one per host core
  int compile_nice = 10;    // see CompilePoolOptions::nice
  std::chrono::milliseconds compile_timeout{120'000};
  std::string cache_dir;  // CUBIN cache; empty: memory only
  // A pool shared with other devices (a daemon's jobs share one); null: the
  // device starts its own from the settings above.
  std::shared_ptr<CompilePool> shared_pool;
  // The watchdog's slack beyond a candidate's time cap and launches.
  std::chrono::milliseconds watchdog_slack{3000};
};

// Running totals, for benchmarks and reports.
struct CudaDeviceStats {
  std::int64_t candidates = 0;
  std::int64_t samples = 0;
  std::int64_t worker_restarts = 0;
  Millis gpu_busy{0};       // timed GPU work
  Millis compile_wait{0};   // the GPU side waiting for the compiler
  Millis compile_cpu{0};    // summed NVRTC time
  Millis setup_wait{0};     // waiting for the worker's set-up and reference
  Millis worker_load{0};    // loading images in the worker
  Millis worker_verify{0};  // verification runs in the worker
};

// Not thread-safe (one session drives it).
class CudaDevice final : public Device {
 public:
  // Starts the device's compile pool (unless it shares one) and its
  // measurement worker, which opens the GPU in the background: `worker`, a
  // running measurement worker kept by ListCudaDevices, or a new one.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Open(
      const v1::WorkerDeviceInfo& gpu, const CudaDeviceOptions& options,
      std::optional<Subprocess> worker = std::nullopt);
  ~CudaDevice() override;

  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override { return false; }
  absl::Status Bind(const JobBinding& job) override;
  absl::StatusOr<Measurement> Evaluate(const Config& config) override;
  int pipeline_depth() const override { return kPipelineDepth; }
  void Prefetch(const std::vector<Config>& configs) override;
  void Forget(const std::vector<Config>& configs) override;
  void NoteBest(Millis time) override {
    if (time.count() > 0 && (best_ms_ == 0 || time.count() < best_ms_)) best_ms_ = time.count();
  }
  bool can_remeasure() const override { return true; }
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override;

  // The totals so far (worker restarts and set-up waits from the worker).
  CudaDeviceStats stats() const;
  std::int64_t worker_restarts() const override;

  // Waits until the worker has opened the GPU (context, helper kernels):
  // the one-time cost a long-running daemon pays before any job.
  absl::Status WaitUntilOpen();
  const std::string& architecture() const { return arch_; }

  // Configurations asked ahead; fixed (not derived from the host) so that a
  // job takes the same path wherever it resumes. On a 16-core host (one
  // NVRTC worker per core) 32 keep the workers and the GPU busy, and the
  // strategy hears of each pick sooner than at 64: by replay of the large
  // SGEMM recording as such a host runs it (90 seeds) on the optimum in 54
  // and 90 seeds at 10 and 20 s, where 64 is in 40 and 84
  // (docs/benchmarks.md). A host with more than 32 cores leaves the extra
  // workers idle for one GPU's job.
  static constexpr int kPipelineDepth = 32;

 private:
  CudaDevice() = default;

  std::shared_future<v1::CompileResult> CompileFuture(const Config& config);
  // The reference candidate, once its image is compiled (see WorkerClient).
  absl::StatusOr<std::optional<v1::WorkerCandidate>> Reference();
  absl::StatusOr<Measurement> Measure(const Config& config, bool final_round);
  // The worker's answer as a measurement of the job.
  Measurement FromWorker(const v1::WorkerMeasurement& w, const v1::WorkerCandidate& c,
                         Measurement m, bool final_round);
  // Records the driver's and NVRTC's versions in the measurement.
  void StampToolchain(Measurement& m) const;
  // Says once that another process holds the GPU's lock.
  void TellWaiting(const std::string& holder);
  // Concurrent and pipeline throughput, and the pipeline's overlap, from
  // the measurement's time.
  void Throughputs(Measurement& m) const;

  DeviceInfo info_;
  v1::WorkerDeviceInfo gpu_;
  CudaDeviceOptions options_;
  std::string arch_;
  std::string nvrtc_version_;
  std::unique_ptr<GpuLock> gpu_lock_;  // turns with other ktune processes
  bool told_waiting_ = false;
  std::shared_ptr<CompilePool> pool_;
  std::unique_ptr<WorkerClient> worker_;

  // The bound job.
  std::optional<JobPlan> plan_;
  // The candidate that makes the reference, replayed after a restart; its
  // image arrives from the compile pool.
  std::optional<v1::WorkerCandidate> reference_;
  std::optional<std::shared_future<v1::CompileResult>> reference_compile_;
  double best_ms_ = 0;
  std::unordered_map<Config, std::shared_future<v1::CompileResult>, ConfigHash> pending_;
  std::uint64_t next_id_ = 1;
  CudaDeviceStats stats_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_CUDA_DEVICE_H_
