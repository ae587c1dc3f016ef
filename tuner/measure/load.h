// The background workload of an under_load measurement, run by the
// measurement worker on streams of its own while a candidate is timed.
//
// Components (any combination): a copy kernel paced to a fraction of the
// device's copy bandwidth, an FMA kernel on a number of SMs, host-to-device
// and device-to-host copies from pinned memory paced to a fraction of the
// host link's bandwidth, and the job's companion kernels, each kept running
// a fraction of the time. The kernels run for a few milliseconds each and
// are relaunched back to back by a feeder thread, so the load is continuous
// from Start to Stop and stops within one launch. Peak rates are calibrated
// once per job on the idle GPU, so the load asks for fractions of what this
// GPU really does, and Stop reports what each component achieved: a
// candidate that wins by starving its neighbours shows as a load that got
// less than it asked.
#ifndef KTUNE_TUNER_MEASURE_LOAD_H_
#define KTUNE_TUNER_MEASURE_LOAD_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"

namespace ktune {

// The worker's helper kernels the load needs.
struct LoadKernels {
  CUfunction copy = nullptr;  // ktune_load_copy
  CUfunction fma = nullptr;   // ktune_load_fma
};

// What a load achieved between Start and Stop.
struct LoadResult {
  // Achieved over asked, the lowest over the components (1: all it asked).
  double throughput = 0;
  // Per component, in its unit: bandwidth_gbs, compute_tflops, h2d_gbs,
  // d2h_gbs, companion<i>_per_s.
  std::map<std::string, double> rates;
};

class LoadRunner {
 public:
  LoadRunner(const cuda::Api& api, CUcontext context, int multiprocessors, LoadKernels kernels);
  ~LoadRunner();
  LoadRunner(const LoadRunner&) = delete;
  LoadRunner& operator=(const LoadRunner&) = delete;

  // Allocates the load's buffers and streams, loads the companions and
  // calibrates the peak rates on the idle GPU.
  absl::Status Setup(const v1::WorkerLoad& load);
  bool empty() const;

  // Starts the feeder; the load is running on the GPU when this returns.
  absl::Status Start();
  // Stops feeding, waits for the launched work and reports the rates.
  absl::StatusOr<LoadResult> Stop();

 private:
  absl::Status Check(CUresult rc, const char* call) const { return cuda::Check(api_, rc, call); }
  // A copy between host and device memory, waited for.
  absl::Status CopyNow(void* host, CUdeviceptr device, std::size_t bytes, bool to_device);
  absl::Status LaunchCopyKernel(CUstream s, double ns_per_chunk, unsigned long long duration_ns);
  absl::Status LaunchFma(CUstream s, unsigned long long duration_ns);
  absl::StatusOr<double> TimeOnIdle(const std::function<absl::Status(CUstream)>& work);
  // The counters the load kernels add to: [0] bytes moved, [1] flops.
  absl::Status ReadCounters(unsigned long long out[2]);
  absl::Status ZeroCounters();
  // Peak rates on the idle GPU, so the load asks for fractions of what
  // this GPU really does.
  absl::Status CalibrateCopy(const v1::WorkerLoad& load);
  absl::Status CalibrateFma();
  absl::Status CalibrateHostLink();
  // A companion kernel: loaded, its arguments filled, timed alone.
  absl::Status AddCompanion(const v1::WorkerCompanion& spec);
  void Feed();
  absl::Status FeedOnce();

  const cuda::Api& api_;
  CUcontext context_;
  int multiprocessors_;
  LoadKernels kernels_;
  v1::WorkerLoad spec_;

  // Copy kernel.
  cuda::DeviceMemory copy_src_, copy_dst_;
  double copy_peak_bytes_per_ns_ = 0;
  double copy_ns_per_chunk_ = 0;
  // FMA kernel.
  cuda::DeviceMemory sink_;
  double fma_peak_flops_per_ns_ = 0;
  cuda::DeviceMemory counters_;  // [0] bytes moved, [1] flops
  // Host link copies.
  cuda::PinnedMemory host_;
  cuda::DeviceMemory host_target_;
  double h2d_peak_bytes_per_ns_ = 0, d2h_peak_bytes_per_ns_ = 0;

  struct Lane {
    cuda::Stream stream;
    std::vector<cuda::Event> pending;  // launched, not known finished
    std::vector<cuda::Event> free;
  };
  Lane copy_lane_, fma_lane_, h2d_lane_, d2h_lane_;
  double h2d_bytes_ = 0, d2h_bytes_ = 0;  // enqueued since Start

  struct CompanionState {
    cuda::Module module;
    CUfunction function = nullptr;
    v1::WorkerCompanion spec;
    std::vector<cuda::DeviceMemory> buffers;
    std::vector<CUdeviceptr> pointers;
    std::vector<std::string> scalars;
    std::vector<void*> params;
    cuda::Stream stream;
    cuda::Event start, end;
    bool running = false;
    double idle_ms = 0;  // one launch on the idle GPU
    double next_due_ns = 0;
    long launches = 0;
  };
  std::vector<CompanionState> companions_;

  std::thread feeder_;
  std::atomic<bool> stop_{false};
  absl::Status feed_status_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_LOAD_H_
