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
#include "tuner/expr/expr.h"
#include "tuner/ipc/subprocess.h"

namespace ktune {

// Where the worker program is: a binary that runs RunCompileWorker for
// "__worker compile" and RunMeasureWorker for "__worker measure" (ktune).
struct WorkerProgram {
  std::string path;
  std::vector<std::string> Argv(const std::string& kind) const { return {path, "__worker", kind}; }
};

// The GPUs this machine has, asked of a short-lived measurement worker
// (so the caller never loads the driver). FAILED_PRECONDITION with a plain
// message when there is no driver or no GPU.
absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> ListCudaDevices(const WorkerProgram& program);

// Which GPU a selector names: "0", "cuda:0" or a UUID (or a unique prefix
// of one). INVALID_ARGUMENT if none or several match.
absl::StatusOr<v1::WorkerDeviceInfo> SelectCudaDevice(
    const std::vector<v1::WorkerDeviceInfo>& devices, const std::string& selector);

// The NVRTC request that compiles `config` of a job: parameters as -D
// macros (bools as 1/0) or substituted into the name expression of a
// templated kernel, the spec's options, defines and include paths (relative
// to `base_dir`), C++17 unless the options name a standard.
v1::CompileRequest BuildCompileRequest(const v1::JobSpec& spec, const std::string& source,
                                       const std::string& base_dir, const Space& space,
                                       const Config& config, const std::string& arch);

struct CudaDeviceOptions {
  WorkerProgram program;
  int compile_workers = 0;  // 0: one per host core
  int compile_nice = 10;    // see CompilePoolOptions::nice
  std::chrono::milliseconds compile_timeout{120'000};
  std::string cache_dir;  // CUBIN cache; empty: memory only
  // A pool shared with other devices (a daemon's jobs share one); null: the
  // device starts its own from the settings above.
  std::shared_ptr<CompilePool> shared_pool;
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
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Open(const v1::WorkerDeviceInfo& gpu,
                                                          const CudaDeviceOptions& options);
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

  const CudaDeviceStats& stats() const { return stats_; }

  // Waits until the worker has opened the GPU (context, helper kernels):
  // the one-time cost a long-running daemon pays before any job.
  absl::Status WaitUntilOpen();
  const std::string& architecture() const { return arch_; }

  // Configurations asked ahead; fixed (not derived from the host) so that a
  // job takes the same path wherever it resumes.
  static constexpr int kPipelineDepth = 64;

 private:
  CudaDevice() = default;

  std::shared_future<v1::CompileResult> CompileFuture(const Config& config);
  // Starts a worker and asks it to open the GPU (and, when a job is bound,
  // to set it up), without waiting for the answers.
  absl::Status StartWorker();
  absl::Status SendSetup();
  // A worker that is set up, with the reference made: waits for a set-up
  // under way, or starts a fresh worker after a death.
  absl::Status EnsureWorker();
  // Runs a candidate in the worker under the watchdog. nullopt: the worker
  // hung or died, and *failure says how the candidate ended.
  absl::StatusOr<std::optional<v1::WorkerMeasurement>> Run(const v1::WorkerCandidate& candidate,
                                                           Measurement* failure);
  absl::StatusOr<Measurement> Measure(const Config& config, bool final_round);
  // Records the driver's and NVRTC's versions in the measurement.
  void StampToolchain(Measurement& m) const;
  // Says once that another process holds the GPU's lock.
  void TellWaiting(const std::string& holder);
  absl::Status LaunchFor(const Config& config, v1::WorkerCandidate* c, std::string* why) const;
  // An under_load companion kernel: compiled, its launch and arguments
  // resolved against the problem.
  absl::Status AddCompanion(const v1::CompanionKernel& ck, int index, SymbolTable& symbols,
                            v1::WorkerCompanion* out);
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
  std::optional<Subprocess> worker_;
  bool worker_ready_ = false;  // set up, reference made
  int worker_starts_ = 0;      // for this job
  int outstanding_ = 0;        // answers the worker still owes
  bool bound_ = false;

  // The bound job.
  const Space* space_ = nullptr;
  const v1::JobSpec* spec_ = nullptr;
  std::string source_;
  std::string base_dir_;
  v1::WorkerSetup setup_;
  std::vector<std::vector<Scalar>> param_scalars_;
  std::vector<Expr> block_, grid_;
  std::optional<Expr> shared_bytes_;
  struct ScalarArg {
    Expr expr;
    v1::ElementType type;
  };
  std::vector<ScalarArg> scalars_;
  // The candidate that makes the reference, replayed after a restart; its
  // image arrives from the compile pool.
  std::optional<v1::WorkerCandidate> reference_;
  v1::WorkerCandidate reference_template_;
  std::optional<std::shared_future<v1::CompileResult>> reference_compile_;
  v1::LoadProfile::Kind load_kind_ = v1::LoadProfile::ISOLATED;
  std::optional<Expr> instances_, streams_;  // CONCURRENT
  bool pipeline_ = false;
  std::optional<Expr> pipe_chunk_, pipe_streams_, pipe_pinned_;
  std::int64_t pipe_bytes_ = 0;  // the host array
  Millis kernel_timeout_{0};     // spec's cap per launch; 0: derived
  double max_candidate_ms_ = 1000;
  double best_ms_ = 0;
  std::unordered_map<Config, std::shared_future<v1::CompileResult>, ConfigHash> pending_;
  std::uint64_t next_id_ = 1;
  CudaDeviceStats stats_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_CUDA_DEVICE_H_
