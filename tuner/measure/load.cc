#include "tuner/measure/load.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kCopyBytes = std::size_t{256} << 20;  // each way; beyond L2
constexpr std::size_t kHostChunk = std::size_t{8} << 20;    // one host link copy
constexpr unsigned long long kLaunchNs = 4'000'000;         // one load kernel
constexpr int kCopyThreads = 512;
constexpr int kCopyWordsPerThread = 8;  // 16-byte words per thread per step
constexpr int kFmaThreads = 1024;
constexpr std::size_t kInFlight = 2;  // launches queued per lane

double NsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::nano>(Clock::now() - t).count();
}

}  // namespace

LoadRunner::LoadRunner(const cuda::Api& api, CUcontext context, int multiprocessors,
                       LoadKernels kernels)
    : api_(api), context_(context), multiprocessors_(multiprocessors), kernels_(kernels) {}

LoadRunner::~LoadRunner() {
  if (feeder_.joinable()) {
    stop_ = true;
    feeder_.join();
  }
}

bool LoadRunner::empty() const {
  return spec_.bandwidth_fraction() <= 0 && spec_.compute_sms() <= 0 && spec_.h2d_fraction() <= 0 &&
         spec_.d2h_fraction() <= 0 && spec_.companions_size() == 0;
}

absl::Status LoadRunner::CopyNow(void* host, CUdeviceptr device, std::size_t bytes,
                                 bool to_device) {
  CUstream s = copy_lane_.stream.get();
  const CUresult rc = to_device ? api_.cuMemcpyHtoDAsync(device, host, bytes, s)
                                : api_.cuMemcpyDtoHAsync(host, device, bytes, s);
  if (auto st = Check(rc, to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync"); !st.ok()) {
    return st;
  }
  return Check(api_.cuStreamSynchronize(s), "cuStreamSynchronize");
}

absl::Status LoadRunner::LaunchCopyKernel(CUstream s, double ns_per_chunk,
                                          unsigned long long duration_ns) {
  CUdeviceptr src = copy_src_.get(), dst = copy_dst_.get(), moved = counters_.get();
  unsigned long long words = kCopyBytes / 16;
  void* args[] = {&src, &dst, &words, &duration_ns, &ns_per_chunk, &moved};
  const unsigned grid = static_cast<unsigned>(2 * multiprocessors_);
  return Check(
      api_.cuLaunchKernel(kernels_.copy, grid, 1, 1, kCopyThreads, 1, 1, 0, s, args, nullptr),
      "cuLaunchKernel(bandwidth load)");
}

absl::Status LoadRunner::LaunchFma(CUstream s, unsigned long long duration_ns) {
  CUdeviceptr sink = sink_.get(), flops = counters_.get() + 8;
  void* args[] = {&sink, &duration_ns, &flops};
  return Check(api_.cuLaunchKernel(kernels_.fma, static_cast<unsigned>(spec_.compute_sms()), 1, 1,
                                   kFmaThreads, 1, 1, 0, s, args, nullptr),
               "cuLaunchKernel(compute load)");
}

absl::StatusOr<double> LoadRunner::TimeOnIdle(const std::function<absl::Status(CUstream)>& work) {
  CUstream s = copy_lane_.stream.get();
  absl::StatusOr<cuda::Event> a = cuda::CreateEvent(api_);
  absl::StatusOr<cuda::Event> b = cuda::CreateEvent(api_);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  if (auto st = Check(api_.cuEventRecord(a->get(), s), "cuEventRecord"); !st.ok()) return st;
  if (auto st = work(s); !st.ok()) return st;
  if (auto st = Check(api_.cuEventRecord(b->get(), s), "cuEventRecord"); !st.ok()) return st;
  if (auto st = Check(api_.cuEventSynchronize(b->get()), "cuEventSynchronize"); !st.ok()) return st;
  float ms = 0;
  if (auto st = Check(api_.cuEventElapsedTime(&ms, a->get(), b->get()), "cuEventElapsedTime");
      !st.ok()) {
    return st;
  }
  return static_cast<double>(ms);
}

absl::Status LoadRunner::ReadCounters(unsigned long long out[2]) {
  return CopyNow(out, counters_.get(), 16, /*to_device=*/false);
}

absl::Status LoadRunner::ZeroCounters() {
  return Check(api_.cuMemsetD8Async(counters_.get(), 0, 16, copy_lane_.stream.get()),
               "cuMemsetD8Async");
}

absl::Status LoadRunner::CalibrateCopy(const v1::WorkerLoad& load) {
  // The copy kernel unpaced for 20 ms gives the peak.
  if (copy_src_.get() == 0) {
    absl::StatusOr<cuda::DeviceMemory> a = cuda::DeviceMemory::Allocate(api_, kCopyBytes);
    if (!a.ok()) return a.status();
    absl::StatusOr<cuda::DeviceMemory> b = cuda::DeviceMemory::Allocate(api_, kCopyBytes);
    if (!b.ok()) return b.status();
    copy_src_ = *std::move(a);
    copy_dst_ = *std::move(b);
    if (auto st = Check(api_.cuMemsetD32Async(copy_src_.get(), 0x3f800000u, kCopyBytes / 4,
                                              copy_lane_.stream.get()),
                        "cuMemsetD32Async");
        !st.ok()) {
      return st;
    }
  }
  if (auto st = ZeroCounters(); !st.ok()) return st;
  absl::StatusOr<double> ms =
      TimeOnIdle([&](CUstream s) { return LaunchCopyKernel(s, 0, 20'000'000); });
  if (!ms.ok()) return ms.status();
  unsigned long long c[2];
  if (auto st = ReadCounters(c); !st.ok()) return st;
  copy_peak_bytes_per_ns_ = static_cast<double>(c[0]) / (*ms * 1e6);
  // Each block paces itself to its share of the asked rate.
  const double chunk_bytes = 32.0 * kCopyThreads * kCopyWordsPerThread;
  const double per_block = load.bandwidth_fraction() * copy_peak_bytes_per_ns_ /
                           static_cast<double>(2 * multiprocessors_);
  copy_ns_per_chunk_ = load.bandwidth_fraction() >= 1 ? 0 : chunk_bytes / per_block;
  return absl::OkStatus();
}

absl::Status LoadRunner::CalibrateFma() {
  // The FMA kernel on its SMs for 10 ms.
  if (sink_.get() == 0) {
    absl::StatusOr<cuda::DeviceMemory> m =
        cuda::DeviceMemory::Allocate(api_, std::size_t{4} * kFmaThreads);
    if (!m.ok()) return m.status();
    sink_ = *std::move(m);
  }
  if (auto st = ZeroCounters(); !st.ok()) return st;
  absl::StatusOr<double> ms = TimeOnIdle([&](CUstream s) { return LaunchFma(s, 10'000'000); });
  if (!ms.ok()) return ms.status();
  unsigned long long c[2];
  if (auto st = ReadCounters(c); !st.ok()) return st;
  fma_peak_flops_per_ns_ = static_cast<double>(c[1]) / (*ms * 1e6);
  return absl::OkStatus();
}

absl::Status LoadRunner::CalibrateHostLink() {
  // One 64 MiB copy each way from pinned memory.
  const std::size_t bytes = 8 * kHostChunk;
  if (host_.get() == nullptr) {
    absl::StatusOr<cuda::PinnedMemory> h = cuda::PinnedMemory::Allocate(api_, bytes);
    if (!h.ok()) return h.status();
    host_ = *std::move(h);
    std::memset(host_.get(), 0x3c, bytes);
    absl::StatusOr<cuda::DeviceMemory> d = cuda::DeviceMemory::Allocate(api_, 2 * bytes);
    if (!d.ok()) return d.status();
    host_target_ = *std::move(d);
  }
  absl::StatusOr<double> h2d = TimeOnIdle([&](CUstream s) {
    return Check(api_.cuMemcpyHtoDAsync(host_target_.get(), host_.get(), bytes, s),
                 "cuMemcpyHtoDAsync");
  });
  if (!h2d.ok()) return h2d.status();
  absl::StatusOr<double> d2h = TimeOnIdle([&](CUstream s) {
    return Check(api_.cuMemcpyDtoHAsync(host_.get(), host_target_.get() + bytes, bytes, s),
                 "cuMemcpyDtoHAsync");
  });
  if (!d2h.ok()) return d2h.status();
  h2d_peak_bytes_per_ns_ = static_cast<double>(bytes) / (*h2d * 1e6);
  d2h_peak_bytes_per_ns_ = static_cast<double>(bytes) / (*d2h * 1e6);
  return absl::OkStatus();
}

absl::Status LoadRunner::AddCompanion(const v1::WorkerCompanion& spec) {
  // Loaded, arguments filled, one launch timed on the idle GPU.
  CompanionState c;
  c.spec = spec;
  absl::StatusOr<cuda::Module> m = cuda::LoadModule(api_, spec.cubin());
  if (!m.ok()) return m.status();
  c.module = *std::move(m);
  if (auto st =
          Check(api_.cuModuleGetFunction(&c.function, c.module.get(), spec.function().c_str()),
                "cuModuleGetFunction(companion)");
      !st.ok()) {
    return st;
  }
  for (const v1::WorkerBuffer& b : spec.buffers()) {
    const std::size_t bytes = static_cast<std::size_t>(b.elements()) * ElementBytes(b.type());
    absl::StatusOr<cuda::DeviceMemory> d = cuda::DeviceMemory::Allocate(api_, bytes);
    if (!d.ok()) {
      return absl::ResourceExhaustedError(
          StrCat("companion ", spec.name(), ", argument ", b.name(), ": ", d.status().message()));
    }
    std::vector<char> host(bytes);
    if (auto st = FillBuffer(b, host.data()); !st.ok()) return st;
    if (auto st = CopyNow(host.data(), d->get(), bytes, /*to_device=*/true); !st.ok()) return st;
    c.pointers.push_back(d->get());
    c.buffers.push_back(*std::move(d));
  }
  for (int i = 0; i < spec.buffers_size(); ++i) {
    const v1::WorkerBuffer& b = spec.buffers(i);
    if (!b.constant_symbol()) continue;
    const std::size_t bytes = static_cast<std::size_t>(b.elements()) * ElementBytes(b.type());
    if (auto st = cuda::CopyToSymbol(api_, c.module.get(), b.name(),
                                     c.pointers[static_cast<std::size_t>(i)], bytes,
                                     copy_lane_.stream.get());
        !st.ok()) {
      return absl::InvalidArgumentError(
          StrCat("companion ", spec.name(), ", argument ", b.name(), ": ", st.message()));
    }
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuStreamSynchronize(copy_lane_.stream.get()), "cuStreamSynchronize"));
  }
  c.scalars.assign(spec.scalars().begin(), spec.scalars().end());
  std::size_t next_scalar = 0;
  for (int index : spec.argument_buffers()) {
    if (index >= 0 && static_cast<std::size_t>(index) < c.pointers.size()) {
      c.params.push_back(&c.pointers[static_cast<std::size_t>(index)]);
    } else if (index < 0 && next_scalar < c.scalars.size()) {
      c.params.push_back(c.scalars[next_scalar++].data());
    } else {
      return absl::InternalError(StrCat("companion ", spec.name(), ": malformed arguments"));
    }
  }
  absl::StatusOr<cuda::Stream> st = cuda::CreateStream(api_);
  if (!st.ok()) return st.status();
  c.stream = *std::move(st);
  absl::StatusOr<cuda::Event> a = cuda::CreateEvent(api_);
  absl::StatusOr<cuda::Event> b = cuda::CreateEvent(api_);
  if (!a.ok()) return a.status();
  if (!b.ok()) return b.status();
  c.start = *std::move(a);
  c.end = *std::move(b);
  CompanionState* cs = &c;
  auto launch = [&](CUstream s) {
    return Check(
        api_.cuLaunchKernel(cs->function, spec.grid().x(), spec.grid().y(), spec.grid().z(),
                            spec.block().x(), spec.block().y(), spec.block().z(),
                            spec.shared_memory_bytes(), s, cs->params.data(), nullptr),
        "cuLaunchKernel(companion)");
  };
  absl::StatusOr<double> first = TimeOnIdle(launch);  // module load, clocks
  if (!first.ok()) {
    return absl::InvalidArgumentError(
        StrCat("companion ", spec.name(), " failed on its own: ", first.status().message()));
  }
  absl::StatusOr<double> ms = TimeOnIdle(launch);
  if (!ms.ok()) return ms.status();
  c.idle_ms = std::max(*ms, 1e-3);
  companions_.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status LoadRunner::Setup(const v1::WorkerLoad& load) {
  spec_ = load;
  companions_.clear();
  for (Lane* lane : {&copy_lane_, &fma_lane_, &h2d_lane_, &d2h_lane_}) {
    if (lane->stream) continue;
    absl::StatusOr<cuda::Stream> st = cuda::CreateStream(api_);
    if (!st.ok()) return st.status();
    lane->stream = *std::move(st);
  }
  if (counters_.get() == 0) {
    absl::StatusOr<cuda::DeviceMemory> c = cuda::DeviceMemory::Allocate(api_, 16);
    if (!c.ok()) return c.status();
    counters_ = *std::move(c);
  }
  if (load.bandwidth_fraction() > 0) {
    if (auto st = CalibrateCopy(load); !st.ok()) return st;
  }
  if (load.compute_sms() > 0) {
    if (auto st = CalibrateFma(); !st.ok()) return st;
  }
  if (load.h2d_fraction() > 0 || load.d2h_fraction() > 0) {
    if (auto st = CalibrateHostLink(); !st.ok()) return st;
  }
  for (const v1::WorkerCompanion& spec : load.companions()) {
    if (auto st = AddCompanion(spec); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status LoadRunner::Start() {
  if (feeder_.joinable()) return absl::InternalError("the load is already running");
  if (auto st = Check(api_.cuMemsetD8Async(counters_.get(), 0, 16, copy_lane_.stream.get()),
                      "cuMemsetD8Async");
      !st.ok()) {
    return st;
  }
  if (auto st = Check(api_.cuStreamSynchronize(copy_lane_.stream.get()), "cuStreamSynchronize");
      !st.ok()) {
    return st;
  }
  h2d_bytes_ = d2h_bytes_ = 0;
  for (CompanionState& c : companions_) {
    c.launches = 0;
    c.running = false;
    c.next_due_ns = 0;
  }
  stop_ = false;
  feed_status_ = absl::OkStatus();
  started_ = Clock::now();
  // The first round of launches is queued here, so the load runs when
  // Start returns; the feeder keeps it going.
  if (auto st = FeedOnce(); !st.ok()) return st;
  feeder_ = std::thread([this] { Feed(); });
  return absl::OkStatus();
}

void LoadRunner::Feed() {
  if (auto st = Check(api_.cuCtxSetCurrent(context_), "cuCtxSetCurrent"); !st.ok()) {
    feed_status_ = st;
    return;
  }
  while (!stop_.load()) {
    if (absl::Status st = FeedOnce(); !st.ok()) {
      feed_status_ = st;
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

absl::Status LoadRunner::FeedOnce() {
  // Retires finished launches of a lane; true when another may be queued.
  auto retire = [&](Lane& lane) -> absl::StatusOr<bool> {
    while (!lane.pending.empty()) {
      const CUresult rc = api_.cuEventQuery(lane.pending.front().get());
      if (rc == CUDA_ERROR_NOT_READY) break;
      if (rc != CUDA_SUCCESS) return Check(rc, "cuEventQuery(load)");
      lane.free.push_back(std::move(lane.pending.front()));
      lane.pending.erase(lane.pending.begin());
    }
    return lane.pending.size() < kInFlight;
  };
  auto record = [&](Lane& lane) -> absl::Status {
    cuda::Event e;
    if (!lane.free.empty()) {
      e = std::move(lane.free.back());
      lane.free.pop_back();
    } else {
      absl::StatusOr<cuda::Event> made = cuda::CreateEvent(api_);
      if (!made.ok()) return made.status();
      e = *std::move(made);
    }
    if (auto st = Check(api_.cuEventRecord(e.get(), lane.stream.get()), "cuEventRecord");
        !st.ok()) {
      return st;
    }
    lane.pending.push_back(std::move(e));
    return absl::OkStatus();
  };
  if (spec_.bandwidth_fraction() > 0) {
    absl::StatusOr<bool> room = retire(copy_lane_);
    if (!room.ok()) return room.status();
    while (*room) {
      if (auto st = LaunchCopyKernel(copy_lane_.stream.get(), copy_ns_per_chunk_, kLaunchNs);
          !st.ok()) {
        return st;
      }
      if (auto st = record(copy_lane_); !st.ok()) return st;
      *room = copy_lane_.pending.size() < kInFlight;
    }
  }
  if (spec_.compute_sms() > 0) {
    absl::StatusOr<bool> room = retire(fma_lane_);
    if (!room.ok()) return room.status();
    while (*room) {
      if (auto st = LaunchFma(fma_lane_.stream.get(), kLaunchNs); !st.ok()) return st;
      if (auto st = record(fma_lane_); !st.ok()) return st;
      *room = fma_lane_.pending.size() < kInFlight;
    }
  }
  // Host link copies, paced on the host: the next is due when the bytes
  // so far match the asked rate.
  const double now_ns = NsSince(started_);
  auto copies = [&](Lane& lane, double fraction, double peak, double* bytes, bool h2d) {
    if (fraction <= 0) return absl::OkStatus();
    absl::StatusOr<bool> room = retire(lane);
    if (!room.ok()) return room.status();
    const double rate = std::min(fraction, 1.0) * peak;
    while (*room && *bytes <= now_ns * rate) {
      const std::size_t slot =
          static_cast<std::size_t>(*bytes / static_cast<double>(kHostChunk)) % 8;
      char* host = static_cast<char*>(host_.get()) + slot * kHostChunk;
      const CUdeviceptr dev = host_target_.get() + (h2d ? 0 : 8 * kHostChunk) + slot * kHostChunk;
      const CUresult rc = h2d ? api_.cuMemcpyHtoDAsync(dev, host, kHostChunk, lane.stream.get())
                              : api_.cuMemcpyDtoHAsync(host, dev, kHostChunk, lane.stream.get());
      if (auto st = Check(rc, h2d ? "cuMemcpyHtoDAsync(load)" : "cuMemcpyDtoHAsync(load)");
          !st.ok()) {
        return st;
      }
      if (auto st = record(lane); !st.ok()) return st;
      *bytes += static_cast<double>(kHostChunk);
      *room = lane.pending.size() < kInFlight;
    }
    return absl::OkStatus();
  };
  if (auto st = copies(h2d_lane_, spec_.h2d_fraction(), h2d_peak_bytes_per_ns_, &h2d_bytes_, true);
      !st.ok()) {
    return st;
  }
  if (auto st = copies(d2h_lane_, spec_.d2h_fraction(), d2h_peak_bytes_per_ns_, &d2h_bytes_, false);
      !st.ok()) {
    return st;
  }
  // Companions: relaunched after a pause that keeps each busy its
  // intensity's share of the time.
  for (CompanionState& c : companions_) {
    if (c.running) {
      const CUresult rc = api_.cuEventQuery(c.end.get());
      if (rc == CUDA_ERROR_NOT_READY) continue;
      if (rc != CUDA_SUCCESS) return Check(rc, "cuEventQuery(companion)");
      float ms = 0;
      if (auto st =
              Check(api_.cuEventElapsedTime(&ms, c.start.get(), c.end.get()), "cuEventElapsedTime");
          !st.ok()) {
        return st;
      }
      c.running = false;
      ++c.launches;
      const double intensity = c.spec.intensity() > 0 ? std::min(c.spec.intensity(), 1.0) : 1.0;
      c.next_due_ns =
          NsSince(started_) + static_cast<double>(ms) * 1e6 * (1 - intensity) / intensity;
    }
    if (!c.running && NsSince(started_) >= c.next_due_ns) {
      if (auto st = Check(api_.cuEventRecord(c.start.get(), c.stream.get()), "cuEventRecord");
          !st.ok()) {
        return st;
      }
      const v1::WorkerCompanion& s = c.spec;
      if (auto st = Check(api_.cuLaunchKernel(c.function, s.grid().x(), s.grid().y(), s.grid().z(),
                                              s.block().x(), s.block().y(), s.block().z(),
                                              s.shared_memory_bytes(), c.stream.get(),
                                              c.params.data(), nullptr),
                          "cuLaunchKernel(companion)");
          !st.ok()) {
        return st;
      }
      if (auto st = Check(api_.cuEventRecord(c.end.get(), c.stream.get()), "cuEventRecord");
          !st.ok()) {
        return st;
      }
      c.running = true;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadResult> LoadRunner::Stop() {
  if (!feeder_.joinable()) return absl::InternalError("the load is not running");
  stop_ = true;
  feeder_.join();
  if (!feed_status_.ok()) return feed_status_;
  for (Lane* lane : {&copy_lane_, &fma_lane_, &h2d_lane_, &d2h_lane_}) {
    if (auto st = Check(api_.cuStreamSynchronize(lane->stream.get()), "cuStreamSynchronize");
        !st.ok()) {
      return st;
    }
    for (cuda::Event& e : lane->pending) lane->free.push_back(std::move(e));
    lane->pending.clear();
  }
  for (CompanionState& c : companions_) {
    if (auto st = Check(api_.cuStreamSynchronize(c.stream.get()), "cuStreamSynchronize");
        !st.ok()) {
      return st;
    }
    if (c.running) {
      ++c.launches;
      c.running = false;
    }
  }
  const double ns = NsSince(started_);
  unsigned long long counters[2] = {0, 0};
  if (auto st = CopyNow(counters, counters_.get(), 16, /*to_device=*/false); !st.ok()) return st;
  LoadResult r;
  double lowest = INFINITY;
  auto add = [&](const std::string& name, double achieved_per_ns, double asked_per_ns,
                 double unit) {
    r.rates[name] = achieved_per_ns * unit;
    if (asked_per_ns > 0) lowest = std::min(lowest, achieved_per_ns / asked_per_ns);
  };
  if (spec_.bandwidth_fraction() > 0) {
    add("bandwidth_gbs", static_cast<double>(counters[0]) / ns,
        std::min(spec_.bandwidth_fraction(), 1.0) * copy_peak_bytes_per_ns_, 1.0);
  }
  if (spec_.compute_sms() > 0) {
    add("compute_tflops", static_cast<double>(counters[1]) / ns, fma_peak_flops_per_ns_, 1e-3);
  }
  if (spec_.h2d_fraction() > 0) {
    add("h2d_gbs", h2d_bytes_ / ns, std::min(spec_.h2d_fraction(), 1.0) * h2d_peak_bytes_per_ns_,
        1.0);
  }
  if (spec_.d2h_fraction() > 0) {
    add("d2h_gbs", d2h_bytes_ / ns, std::min(spec_.d2h_fraction(), 1.0) * d2h_peak_bytes_per_ns_,
        1.0);
  }
  for (std::size_t i = 0; i < companions_.size(); ++i) {
    const CompanionState& c = companions_[i];
    const double intensity = c.spec.intensity() > 0 ? std::min(c.spec.intensity(), 1.0) : 1.0;
    // Launches per ns asked: its intensity's share of back-to-back idle runs.
    add(StrCat("companion", i, "_per_s"), static_cast<double>(c.launches) / ns,
        intensity / (c.idle_ms * 1e6), 1e9);
  }
  r.throughput = std::isfinite(lowest) ? lowest : 0;
  return r;
}

}  // namespace ktune
