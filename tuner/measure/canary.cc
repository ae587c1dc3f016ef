#include "tuner/measure/canary.h"

#include <algorithm>
#include <cstring>

#include "tuner/base/status_macros.h"

namespace ktune {
namespace {

constexpr std::size_t kCanaryBytes = std::size_t{16} << 20;  // read, and as much written
constexpr std::size_t kRuns = 16;
// Each way through the host link: the link canary (within kCanaryBytes).
constexpr std::size_t kLinkCanaryBytes = std::size_t{4} << 20;

}  // namespace

absl::Status Canary::Init() {
  KTUNE_ASSIGN_OR_RETURN(memory_, cuda::DeviceMemory::Allocate(gpu_.api, 2 * kCanaryBytes));
  KTUNE_RETURN_IF_ERROR(gpu_.Check(
      gpu_.api.cuMemsetD32Async(memory_.get(), 0x3fc00000u, kCanaryBytes / 4, gpu_.stream.get()),
      "cuMemsetD32Async"));
  events_.clear();
  for (std::size_t i = 0; i < 2 * kRuns; ++i) {
    KTUNE_ASSIGN_OR_RETURN(cuda::Event ev, cuda::CreateEvent(gpu_.api));
    events_.push_back(std::move(ev));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Canary::TimeMedian(const std::function<CUresult(CUstream)>& work,
                                          const char* what) {
  const cuda::Api& api = gpu_.api;
  CUstream s = gpu_.stream.get();
  // One untimed run, then the timed ones, each between its own events.
  KTUNE_RETURN_IF_ERROR(gpu_.Check(work(s), what));
  for (std::size_t i = 0; i < kRuns; ++i) {
    KTUNE_RETURN_IF_ERROR(gpu_.Check(api.cuEventRecord(events_[2 * i].get(), s), "cuEventRecord"));
    KTUNE_RETURN_IF_ERROR(gpu_.Check(work(s), what));
    KTUNE_RETURN_IF_ERROR(
        gpu_.Check(api.cuEventRecord(events_[2 * i + 1].get(), s), "cuEventRecord"));
  }
  KTUNE_RETURN_IF_ERROR(gpu_.Check(api.cuStreamSynchronize(s), "cuStreamSynchronize"));
  std::vector<double> times;
  times.reserve(kRuns);
  for (std::size_t i = 0; i < kRuns; ++i) {
    float ms = 0;
    KTUNE_RETURN_IF_ERROR(
        gpu_.Check(api.cuEventElapsedTime(&ms, events_[2 * i].get(), events_[2 * i + 1].get()),
                   "cuEventElapsedTime"));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return 0.5 * (times[(times.size() - 1) / 2] + times[times.size() / 2]);
}

absl::StatusOr<double> Canary::KernelMs() {
  CUdeviceptr in = memory_.get(), out = in + kCanaryBytes;
  unsigned long long n = kCanaryBytes / 16;
  void* args[] = {&in, &out, &n};
  const auto blocks = static_cast<unsigned>(4 * gpu_.multiprocessors);
  return TimeMedian(
      [&](CUstream s) {
        return gpu_.api.cuLaunchKernel(helpers_.canary, blocks, 1, 1, 256, 1, 1, 0, s, args,
                                       nullptr);
      },
      "cuLaunchKernel(canary)");
}

absl::StatusOr<double> Canary::LinkMs() {
  if (link_host_.get() == nullptr) {
    KTUNE_ASSIGN_OR_RETURN(link_host_, cuda::PinnedMemory::Allocate(gpu_.api, kLinkCanaryBytes));
    std::memset(link_host_.get(), 0x3f, kLinkCanaryBytes);  // not all zeros
  }
  void* host = link_host_.get();
  const CUdeviceptr dev = memory_.get() + kCanaryBytes;
  return TimeMedian(
      [&](CUstream s) {
        const CUresult rc = gpu_.api.cuMemcpyHtoDAsync(dev, host, kLinkCanaryBytes, s);
        return rc != CUDA_SUCCESS ? rc : gpu_.api.cuMemcpyDtoHAsync(host, dev, kLinkCanaryBytes, s);
      },
      "copying the link canary");
}

RunningLoad::~RunningLoad() {
  if (load_ != nullptr) (void)load_->Stop();
}

absl::Status RunningLoad::Finish(v1::Conditions& out) {
  if (load_ == nullptr) return absl::OkStatus();
  KTUNE_ASSIGN_OR_RETURN(LoadResult achieved, std::exchange(load_, nullptr)->Stop());
  out.set_load_throughput(achieved.throughput);
  for (const auto& [name, rate] : achieved.rates) (*out.mutable_load_rates())[name] = rate;
  return absl::OkStatus();
}

absl::StatusOr<RunningLoad> StartLoad(LoadRunner* load, const v1::WorkerLoad& spec, Canary& canary,
                                      v1::Conditions& out) {
  if (load == nullptr || load->empty()) return RunningLoad(nullptr);
  // The canary kernel sees contention for memory and SMs; a load with host
  // copies also gets the link canary, which sees contention for the link.
  const bool link = spec.h2d_fraction() > 0 || spec.d2h_fraction() > 0;
  KTUNE_ASSIGN_OR_RETURN(const double idle, canary.KernelMs());
  double idle_link = 0;
  if (link) {
    KTUNE_ASSIGN_OR_RETURN(idle_link, canary.LinkMs());
  }
  KTUNE_RETURN_IF_ERROR(load->Start());
  RunningLoad running(load);
  KTUNE_ASSIGN_OR_RETURN(const double busy, canary.KernelMs());
  out.set_canary_slowdown(idle > 0 ? busy / idle : 0);
  if (link) {
    KTUNE_ASSIGN_OR_RETURN(const double busy_link, canary.LinkMs());
    out.set_link_canary_slowdown(idle_link > 0 ? busy_link / idle_link : 0);
  }
  return running;
}

}  // namespace ktune
