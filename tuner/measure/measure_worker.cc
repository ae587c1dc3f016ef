#include "tuner/measure/measure_worker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "ktune/v1/job.pb.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/compile/compile_pool.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/cuda/driver.h"
#include "tuner/space/measurement.h"
#include "tuner/cuda/nvml.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/cuda/fill.h"
#include "tuner/measure/load.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

// Kernels the worker itself needs, compiled once per architecture by NVRTC
// (and cached on disk like any other image).
constexpr char kHelperSource[] = R"cuda(
extern "C" __global__ void ktune_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__device__ double ktune_h2d(unsigned short h) {
  const unsigned int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;
  if (e == 0) v = ldexp((double)m, -24);
  else if (e == 31) v = m ? __longlong_as_double(0x7ff8000000000000LL)
                          : __longlong_as_double(0x7ff0000000000000LL);
  else v = ldexp((double)(m | 0x400), (int)e - 25);
  return (h & 0x8000) ? -v : v;
}
__device__ double ktune_b2d(unsigned short b) {
  return (double)__uint_as_float(((unsigned int)b) << 16);
}

// Argument contents made on the GPU, element for element the values
// FillRange makes on the host (tuner/measure/fill.cc): the same splitmix64
// hash, the same double arithmetic without contraction, the same rounding
// to each type.
__device__ double ktune_uniform(unsigned long long seed, unsigned long long index) {
  unsigned long long z = seed + 0x9e3779b97f4a7c15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return __dmul_rn((double)(z >> 11), 1.1102230246251565404236316680908203125e-16);  // 2^-53
}
__device__ unsigned short ktune_f2h(float f) {
  const unsigned int x = __float_as_uint(f);
  const unsigned int sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return (unsigned short)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return (unsigned short)sign;
    const unsigned int shift = 126 - (abs >> 23);
    const unsigned int mant = (abs & 0x7fffffu) | 0x800000u;
    unsigned int h = mant >> shift;
    const unsigned int rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return (unsigned short)(sign | h);
  }
  unsigned int h = (abs - 0x38000000u) >> 13;
  const unsigned int rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return (unsigned short)(sign | h);
}
__device__ unsigned short ktune_f2b(float f) {
  const unsigned int x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
// Elements [first, first + n) of a buffer of ElementType `type`: mode 0
// a + b * uniform(seed, i), mode 1 the constant a, mode 2 a + b * i.
extern "C" __global__ void ktune_fill(void* out, unsigned long long n, unsigned long long first,
                                      int type, int mode, double a, double b,
                                      unsigned long long seed) {
  for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
       k += (unsigned long long)gridDim.x * blockDim.x) {
    const unsigned long long i = first + k;
    const double v = mode == 1 ? a
                   : mode == 0 ? __dadd_rn(a, __dmul_rn(b, ktune_uniform(seed, i)))
                               : __dadd_rn(a, __dmul_rn(b, (double)i));
    switch (type) {
      case 1: ((unsigned short*)out)[k] = ktune_f2h((float)v); break;
      case 2: ((unsigned short*)out)[k] = ktune_f2b((float)v); break;
      case 3: ((float*)out)[k] = (float)v; break;
      case 4: ((double*)out)[k] = v; break;
      case 5: ((signed char*)out)[k] = (signed char)floor(v); break;
      case 6: ((short*)out)[k] = (short)floor(v); break;
      case 7: ((int*)out)[k] = (int)floor(v); break;
      case 8: ((long long*)out)[k] = (long long)floor(v); break;
      case 9: ((unsigned char*)out)[k] = (unsigned char)floor(v); break;
      case 10: ((unsigned short*)out)[k] = (unsigned short)floor(v); break;
      case 11: ((unsigned int*)out)[k] = (unsigned int)floor(v); break;
      case 12: ((unsigned long long*)out)[k] = (unsigned long long)floor(v); break;
    }
  }
}

#define KTUNE_COMPARE(NAME, T, CONV)                                              \
  extern "C" __global__ void NAME(const T* out, const T* ref,                    \
                                  unsigned long long n, double atol, double rtol, \
                                  unsigned long long* result) {                   \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {                \
      const double a = CONV(out[i]), r = CONV(ref[i]);                            \
      if (isnan(a) || isnan(r) || !(fabs(a - r) <= atol + rtol * fabs(r))) {      \
        atomicAdd(&result[0], 1ULL);                                              \
        atomicMin(&result[1], i);                                                 \
      }                                                                           \
    }                                                                             \
  }
#define KTUNE_PLAIN(x) ((double)(x))
KTUNE_COMPARE(ktune_compare_f16, unsigned short, ktune_h2d)
KTUNE_COMPARE(ktune_compare_bf16, unsigned short, ktune_b2d)
KTUNE_COMPARE(ktune_compare_f32, float, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_f64, double, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_i8, signed char, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_i16, short, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_i32, int, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_i64, long long, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_u8, unsigned char, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_u16, unsigned short, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_u32, unsigned int, KTUNE_PLAIN)
KTUNE_COMPARE(ktune_compare_u64, unsigned long long, KTUNE_PLAIN)

__device__ __forceinline__ unsigned long long ktune_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Bandwidth load: each block copies its share of src to dst, 8 16-byte
// words per thread a step, for duration_ns, pacing itself to one step per
// ns_per_step (0: as fast as it can); adds the bytes moved (read plus
// written) to *moved.
extern "C" __global__ void ktune_load_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                           unsigned long long words,
                                           unsigned long long duration_ns, double ns_per_step,
                                           unsigned long long* moved) {
  __shared__ int done;
  const unsigned long long t0 = ktune_now();
  const unsigned long long share = words / gridDim.x;
  const unsigned long long base = blockIdx.x * share;
  const unsigned long long step = 8ull * blockDim.x;
  unsigned long long offset = 0, steps = 0;
  while (true) {
    for (int k = 0; k < 8; ++k) {
      unsigned long long i = offset + k * blockDim.x + threadIdx.x;
      if (i >= share) i -= share;
      dst[base + i] = src[base + i];
    }
    ++steps;
    offset += step;
    if (offset >= share) offset -= share;
    if (threadIdx.x == 0) {
      unsigned long long now = ktune_now();
      const unsigned long long due = t0 + (unsigned long long)(steps * ns_per_step);
      while (now < due && now - t0 < duration_ns) now = ktune_now();
      done = now - t0 >= duration_ns;
    }
    __syncthreads();
    if (done) break;
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(moved, steps * step * 32ull);
}

// Compute load: FMA chains for duration_ns; adds the flops to *flops.
extern "C" __global__ void ktune_load_fma(float* sink, unsigned long long duration_ns,
                                          unsigned long long* flops) {
  __shared__ int done;
  const unsigned long long t0 = ktune_now();
  float a[8];
  for (int k = 0; k < 8; ++k) a[k] = threadIdx.x * 1e-3f + k;
  unsigned long long rounds = 0;
  while (true) {
#pragma unroll 16
    for (int r = 0; r < 256; ++r) {
#pragma unroll
      for (int k = 0; k < 8; ++k) a[k] = fmaf(a[k], 0.9999f, 1e-4f);
    }
    ++rounds;
    if (threadIdx.x == 0) done = ktune_now() - t0 >= duration_ns;
    __syncthreads();
    if (done) break;
    __syncthreads();
  }
  float sum = 0;
  for (int k = 0; k < 8; ++k) sum += a[k];
  if (sum == 123456.0f) sink[threadIdx.x] = sum;  // never, but not provably
  if (threadIdx.x == 0) atomicAdd(flops, rounds * 256ull * 8ull * 2ull * blockDim.x);
}

// The canary: a fixed short memory-bound kernel, timed on the idle GPU and
// under load to see contention.
extern "C" __global__ void ktune_canary(const float4* __restrict__ in, float4* __restrict__ out,
                                        unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    float4 v = in[i];
    v.x = v.x * 1.0001f + 1.0f;
    v.y = v.y * 1.0001f + 1.0f;
    v.z = v.z * 1.0001f + 1.0f;
    v.w = v.w * 1.0001f + 1.0f;
    out[i] = v;
  }
}
)cuda";

constexpr std::size_t kGuardBytes = 4096;
constexpr unsigned char kGuardByte = 0xa5;
constexpr unsigned char kPoisonByte = 0xff;  // NaN for floats, -1 for ints
constexpr auto kIdleGap = std::chrono::milliseconds(200);
constexpr int kChunk = 4;  // samples enqueued before one synchronisation
constexpr std::size_t kStagingBytes = std::size_t{64} << 20;  // a multiple of 8
constexpr std::size_t kCanaryBytes = std::size_t{16} << 20;   // read, and as much written
constexpr int kCanaryRuns = 16;
// Each way through the host link: the link canary (within kCanaryBytes).
constexpr std::size_t kLinkCanaryBytes = std::size_t{4} << 20;
constexpr int kMaxStreams = 32;  // concurrent instances, pipeline streams

std::string FormatUuid(const CUuuid& u) {
  char buf[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

v1::WorkerDevices ListDevices() {
  v1::WorkerDevices out;
  absl::StatusOr<const cuda::Api*> loaded = cuda::Load();
  if (!loaded.ok()) {
    out.set_error(std::string(loaded.status().message()));
    return out;
  }
  const cuda::Api& api = **loaded;
  int count = 0;
  int driver = 0;
  api.cuDriverGetVersion(&driver);
  if (auto s = cuda::Check(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) {
    out.set_error(std::string(s.message()));
    return out;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice d = 0;
    if (api.cuDeviceGet(&d, i) != CUDA_SUCCESS) continue;
    v1::WorkerDeviceInfo* info = out.add_devices();
    info->set_ordinal(i);
    char name[256] = {};
    api.cuDeviceGetName(name, sizeof name, d);
    info->set_name(name);
    CUuuid uuid;
    if (api.cuDeviceGetUuid(&uuid, d) == CUDA_SUCCESS) info->set_uuid(FormatUuid(uuid));
    int v = 0;
    api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
    info->set_major(v);
    api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
    info->set_minor(v);
    api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    info->set_multiprocessors(v);
    api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
    info->set_l2_bytes(v);
    api.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d);
    info->set_max_shared_per_block_optin(v);
    std::size_t mem = 0;
    api.cuDeviceTotalMem(&mem, d);
    info->set_memory_bytes(static_cast<std::int64_t>(mem));
    info->set_driver_version(driver);
  }
  return out;
}

double FirstQuartile(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = 0.25 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// Relative standard error of the mean.
double RelativeError(const std::vector<double>& v) {
  if (v.size() < 2) return INFINITY;
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / static_cast<double>(v.size() - 1));
  return mean > 0 ? sd / std::sqrt(static_cast<double>(v.size())) / mean : INFINITY;
}

// Launches per sample for a kernel of `ms` below the short-kernel limit:
// enough for a sample of about five times that limit.
int LaunchesPerSample(const v1::WorkerSettings& settings, float ms) {
  const int n = static_cast<int>(std::ceil(5 * settings.short_kernel_ms() / std::max(ms, 1e-4f)));
  return std::clamp(n, 1, 1000);
}

// Whether a candidate has samples enough: the time cap is spent (once it
// has `cap_min` samples), racing shows it clearly slower than `best_ms`
// (marked in `out`), or the mean is as stable as asked.
bool SamplingDone(const std::vector<double>& samples, const v1::WorkerSettings& settings,
                  double best_ms, bool racing, int min_samples, int cap_min,
                  Clock::time_point start, v1::WorkerMeasurement* out) {
  const int count = static_cast<int>(samples.size());
  const double elapsed = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (settings.max_candidate_ms() > 0 && elapsed > settings.max_candidate_ms() &&
      count >= cap_min) {
    return true;
  }
  if (racing && count >= std::max(1, settings.racing_min_samples()) &&
      FirstQuartile(samples) > settings.racing_factor() * best_ms) {
    out->mutable_conditions()->set_raced(true);
    return true;
  }
  return count >= min_samples && RelativeError(samples) < settings.target_relative_noise();
}

// Polls NVML from its own thread, so the sampling loop reads clocks and
// throttling without calling NVML (whose calls can take a millisecond).
class ClockSampler {
 public:
  ClockSampler() = default;
  ~ClockSampler() { Stop(); }
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  void Start(Nvml nvml) {
    Stop();
    if (!nvml.available()) return;
    stop_ = false;
    thread_ = std::thread([this, nvml] {
      while (!stop_.load()) {
        clock_mhz_.store(nvml.SmClockMhz());
        const bool t = nvml.Throttled();
        throttled_now_.store(t);
        if (t) throttle_polls_.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int clock_mhz() const { return clock_mhz_.load(); }
  bool throttled_now() const { return throttled_now_.load(); }
  // Polls that saw the GPU throttled, since the start.
  std::uint64_t throttle_polls() const { return throttle_polls_.load(); }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<int> clock_mhz_{0};
  std::atomic<bool> throttled_now_{false};
  std::atomic<std::uint64_t> throttle_polls_{0};
};

// How a candidate's measurement ends: its wall time stamped, a failed call
// classified (after a sticky error only a new process recovers).
struct Ending {
  const cuda::Api& api;
  v1::WorkerMeasurement& out;
  Clock::time_point start;
  Clock::time_point& last_activity;

  v1::WorkerMeasurement Finish() {
    out.set_wall_ms(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    last_activity = Clock::now();
    return out;
  }
  v1::WorkerMeasurement LaunchError(const std::string& message) {
    out.set_status(v1::LAUNCH_ERROR);
    out.set_message(message);
    return Finish();
  }
  v1::WorkerMeasurement Failed(CUresult rc, const char* call, bool launch) {
    const absl::Status st = cuda::Check(api, rc, call);
    if (cuda::IsStickyError(rc)) {
      out.set_status(v1::RUNTIME_FAULT);
      out.set_context_lost(true);
    } else {
      out.set_status(launch ? v1::LAUNCH_ERROR : v1::RUNTIME_FAULT);
    }
    out.set_message(std::string(st.message()));
    return Finish();
  }
  // Our own failure: start over in a fresh process, to be safe.
  v1::WorkerMeasurement Infra(const absl::Status& st) {
    out.set_status(v1::RUNTIME_FAULT);
    out.set_message(std::string(st.message()));
    out.set_context_lost(true);
    return Finish();
  }
};

class Worker {
 public:
  explicit Worker(const cuda::Api& api) : api_(api) {}

  // Opens the GPU: context, helper kernels, streams, events, clock sampler.
  absl::Status Init(int ordinal, std::string* device_name);
  // A job's arguments and settings (replacing the previous job's).
  absl::Status Setup(const v1::WorkerSetup& setup);
  int ordinal() const { return ordinal_; }
  v1::WorkerMeasurement Measure(const v1::WorkerCandidate& candidate);

 private:
  struct Buffer {
    v1::WorkerBuffer spec;
    std::size_t bytes = 0;
    cuda::DeviceMemory memory;  // guard | data | guard
    CUdeviceptr data = 0;
    cuda::DeviceMemory pristine;   // inputs the kernel also writes
    cuda::DeviceMemory reference;  // verified outputs' expected contents
    bool has_reference = false;
    // rotate_inputs: copies 1, 2, ... of a read-only input (copy 0 is data).
    std::vector<cuda::DeviceMemory> copies;
  };

  absl::Status Check(CUresult rc, const char* call) { return cuda::Check(api_, rc, call); }
  absl::Status CompileHelpers(const std::string& arch);
  absl::Status Upload(Buffer& b);
  // Fills `b` on the GPU on stream `s` (seeded uniform, constant, iota,
  // zeros): the values FillRange would make.
  absl::Status FillOnDevice(const Buffer& b, CUstream s);
  // Copies `bytes` produced chunk by chunk by `fill(offset, len, host)` to
  // `dst`, through the pinned staging buffers on the copy stream.
  absl::Status Stage(CUdeviceptr dst, std::size_t bytes,
                     const std::function<absl::Status(std::size_t, std::size_t, void*)>& fill);
  absl::Status ResetGuards(CUstream s);
  absl::Status RestoreInputs(CUstream s);
  absl::Status PoisonOutputs(CUstream s);
  absl::Status WarmUp();
  // Verification, one synchronisation for all of it: EnqueueChecks queues
  // the copies of every buffer's guard zones (and, with `compare`, the
  // comparison of each verified output with its reference) on `s`; after
  // `s` is synchronised, GuardMessage and CompareMessage say what is wrong
  // ("" when nothing is).
  absl::Status EnqueueChecks(CUstream s, bool compare);
  std::string GuardMessage() const;
  absl::StatusOr<std::string> CompareMessage(CUstream s);
  // The canary's median time (ms) on the launch stream, as things stand.
  absl::StatusOr<double> Canary();
  // The median time (ms) of `work` on the launch stream: one untimed run,
  // then kCanaryRuns, each between events. `what` names it in errors.
  absl::StatusOr<double> TimeMedian(const std::function<CUresult(CUstream)>& work,
                                    const char* what);
  // The link canary: a fixed pinned copy to the GPU and back, the median
  // time (ms) on the launch stream, as things stand.
  absl::StatusOr<double> LinkCanary();
  // UNDER_LOAD (a no-op otherwise): times the canary (and, with host
  // copies in the load, the link canary) on the idle GPU, starts the load,
  // times them again under it and records the slowdowns in `out`. The load
  // runs until `loaded` is finished (or destroyed: every way out of a
  // measurement stops it).
  class Loaded;
  absl::StatusOr<Loaded> StartLoad(v1::WorkerMeasurement& out);
  // Side streams for concurrent instances and pipelines, at least n.
  absl::Status EnsureStreams(int n);
  // Side streams [from, to) wait for `at`; `into` waits for all their work
  // so far.
  CUresult Fork(CUevent at, int from, int to);
  CUresult Join(CUstream into, int from, int to);
  v1::WorkerMeasurement MeasurePipeline(const v1::WorkerCandidate& c, CUfunction f, unsigned shared,
                                        v1::WorkerMeasurement out, Clock::time_point start);
  // One pass of the pipeline; `stage` < 0: all stages over `streams`
  // streams, else only that stage (0 copy in, 1 kernel, 2 copy out) on
  // one stream. Timed between `begin` and `end` on the first stream.
  CUresult RunPipeline(CUfunction f, const v1::WorkerCandidate& c, unsigned shared, int stage,
                       CUevent begin, CUevent end);

  const cuda::Api& api_;
  std::optional<cuda::Context> context_;
  cuda::Stream stream_;
  cuda::Stream copy_stream_;
  std::vector<cuda::Event> starts_, ends_;
  cuda::Event first_start_, first_end_;
  v1::WorkerSetup setup_;
  std::vector<Buffer> buffers_;
  cuda::DeviceMemory flush_;
  cuda::DeviceMemory compare_results_;  // 16 bytes per buffer
  cuda::PinnedMemory checks_host_;      // see EnqueueChecks
  cuda::PinnedMemory host_small_;
  cuda::PinnedMemory staging_[2];
  cuda::Event staged_[2];
  cuda::Module helpers_;
  CUfunction spin_ = nullptr;
  CUfunction canary_ = nullptr;
  CUfunction fill_ = nullptr;
  LoadKernels load_kernels_;
  std::vector<CUfunction> compare_;  // by ElementType
  CUcontext cu_context_ = nullptr;
  cuda::DeviceMemory canary_memory_;
  std::vector<cuda::Event> canary_events_;
  cuda::PinnedMemory link_canary_host_;  // allocated with a load on the host link
  std::unique_ptr<LoadRunner> load_;     // under_load jobs
  std::vector<cuda::Stream> side_;       // concurrent instances, pipeline streams
  std::vector<cuda::Event> joins_;
  cuda::Event fork_;
  // Pipeline jobs: the host arrays (pinned and pageable), the per-stream
  // chunk buffers, the reference output.
  std::size_t pipe_bytes_ = 0;
  cuda::PinnedMemory pinned_in_, pinned_out_;
  std::unique_ptr<char[]> pageable_in_, pageable_out_;
  cuda::DeviceMemory pipe_device_;
  std::vector<char> pipe_reference_;
  ClockSampler clocks_;
  int ordinal_ = -1;
  int l2_bytes_ = 0;
  int multiprocessors_ = 1;
  int max_shared_optin_ = 48 * 1024;
  Clock::time_point last_activity_{};
  std::uint32_t flush_counter_ = 0;
  int rotations_ = 1;           // copies of the read-only inputs in turn
  std::uint64_t rotation_ = 0;  // launches made on rotated inputs
  absl::Status SetUpRotation();
};

absl::Status Worker::CompileHelpers(const std::string& arch) {
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (!nvrtc.ok()) return nvrtc.status();
  v1::CompileRequest req;
  req.set_source(kHelperSource);
  req.set_source_name("ktune_helpers.cu");
  req.set_kernel_expression("ktune_spin");
  req.set_architecture(arch);
  req.add_options("-std=c++17");
  CompileCache cache(CompileCache::DefaultDir());
  const std::string key = CompileCache::Key(req, (*nvrtc)->version_text());
  std::optional<v1::CompileResult> result = cache.Get(key);
  if (!result) {
    result = (*nvrtc)->Compile(req);
    if (result->ok()) cache.Put(key, *result);
  }
  if (!result->ok()) {
    return absl::InternalError(
        StrCat("compiling ktune's helper kernels failed: ", result->error(), result->log()));
  }
  absl::StatusOr<cuda::Module> m = cuda::LoadModule(api_, result->cubin());
  if (!m.ok()) return m.status();
  helpers_ = *std::move(m);
  if (auto s = Check(api_.cuModuleGetFunction(&spin_, helpers_.get(), "ktune_spin"),
                     "cuModuleGetFunction(ktune_spin)");
      !s.ok()) {
    return s;
  }
  for (auto [fn, name] :
       {std::pair{&canary_, "ktune_canary"}, std::pair{&load_kernels_.copy, "ktune_load_copy"},
        std::pair{&load_kernels_.fma, "ktune_load_fma"}, std::pair{&fill_, "ktune_fill"}}) {
    if (auto s = Check(api_.cuModuleGetFunction(fn, helpers_.get(), name), "cuModuleGetFunction");
        !s.ok()) {
      return s;
    }
  }
  compare_.assign(v1::ElementType_ARRAYSIZE, nullptr);
  for (int t = v1::ELEMENT_F16; t <= v1::ELEMENT_U64; ++t) {
    const auto type = static_cast<v1::ElementType>(t);
    const std::string name = StrCat("ktune_compare_", ElementName(type));
    if (auto s = Check(api_.cuModuleGetFunction(&compare_[static_cast<std::size_t>(t)],
                                                helpers_.get(), name.c_str()),
                       "cuModuleGetFunction");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::Stage(
    CUdeviceptr dst, std::size_t bytes,
    const std::function<absl::Status(std::size_t, std::size_t, void*)>& fill) {
  // Double-buffered: chunk k+1 is filled on the host while chunk k copies.
  CUstream cs = copy_stream_.get();
  const std::size_t chunk = staging_[0].size_bytes();
  for (std::size_t offset = 0, k = 0; offset < bytes; offset += chunk, ++k) {
    const std::size_t len = std::min(chunk, bytes - offset);
    const std::size_t slot = k % 2;
    if (k >= 2) {
      if (auto s = Check(api_.cuEventSynchronize(staged_[slot].get()), "cuEventSynchronize");
          !s.ok()) {
        return s;
      }
    }
    if (auto s = fill(offset, len, staging_[slot].get()); !s.ok()) return s;
    if (auto s = Check(api_.cuMemcpyHtoDAsync(dst + offset, staging_[slot].get(), len, cs),
                       "cuMemcpyHtoDAsync");
        !s.ok()) {
      return s;
    }
    if (auto s = Check(api_.cuEventRecord(staged_[slot].get(), cs), "cuEventRecord"); !s.ok()) {
      return s;
    }
  }
  return Check(api_.cuStreamSynchronize(cs), "cuStreamSynchronize");
}

absl::Status Worker::FillOnDevice(const Buffer& b, CUstream s) {
  const v1::WorkerBuffer& spec = b.spec;
  if (spec.init_case() == v1::WorkerBuffer::kZeros ||
      spec.init_case() == v1::WorkerBuffer::INIT_NOT_SET) {
    return Check(api_.cuMemsetD8Async(b.data, 0, b.bytes, s), "cuMemsetD8Async");
  }
  int mode = 0;
  double a = 0, span = 0;
  unsigned long long seed = 0;
  switch (spec.init_case()) {
    case v1::WorkerBuffer::kUniform:
      a = spec.uniform().low();
      span = spec.uniform().high() - a;
      seed = spec.uniform().seed();
      break;
    case v1::WorkerBuffer::kConstant:
      mode = 1;
      a = spec.constant();
      break;
    default:  // kIota
      mode = 2;
      a = spec.iota().start();
      span = spec.iota().step();
      break;
  }
  CUdeviceptr out = b.data;
  unsigned long long n = static_cast<unsigned long long>(spec.elements()), first = 0;
  int type = spec.type();
  void* args[] = {&out, &n, &first, &type, &mode, &a, &span, &seed};
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(
      (n + 255) / 256, static_cast<unsigned long long>(multiprocessors_) * 32));
  return Check(
      api_.cuLaunchKernel(fill_, std::max(1u, blocks), 1, 1, 256, 1, 1, 0, s, args, nullptr),
      "cuLaunchKernel(fill)");
}

absl::Status Worker::Upload(Buffer& b) {
  if (b.bytes == 0) return absl::OkStatus();
  const std::size_t eb = ElementBytes(b.spec.type());
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Seeded noise, constants and sequences are made on the GPU (the values
  // FillRange makes, without host work or copies); normal noise and files
  // go through the staging buffers.
  const bool on_device = b.spec.init_case() != v1::WorkerBuffer::kNormal &&
                         b.spec.init_case() != v1::WorkerBuffer::kData;
  absl::Status s =
      on_device ? FillOnDevice(b, copy_stream_.get())
                : Stage(b.data, b.bytes, [&](std::size_t offset, std::size_t len, void* out) {
                    return FillRange(b.spec, static_cast<std::int64_t>(offset / eb),
                                     static_cast<std::int64_t>(len / eb), out, threads);
                  });
  if (!s.ok()) return s;

  if (b.pristine.get() != 0) {
    if (auto st =
            Check(api_.cuMemcpyDtoDAsync(b.pristine.get(), b.data, b.bytes, copy_stream_.get()),
                  "cuMemcpyDtoDAsync");
        !st.ok()) {
      return st;
    }
  }
  if (!b.spec.expected().empty()) {
    if (b.spec.expected().size() != b.bytes) {
      return absl::InvalidArgumentError(StrCat("argument ", b.spec.name(),
                                               ": the expected data has ", b.spec.expected().size(),
                                               " bytes, the buffer ", b.bytes));
    }
    s = Stage(b.reference.get(), b.bytes, [&](std::size_t offset, std::size_t len, void* out) {
      std::memcpy(out, b.spec.expected().data() + offset, len);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    b.has_reference = true;
  }
  return Check(api_.cuStreamSynchronize(copy_stream_.get()), "cuStreamSynchronize");
}

absl::Status Worker::Init(int ordinal, std::string* device_name) {
  ordinal_ = ordinal;
  absl::StatusOr<cuda::Context> ctx = cuda::Context::Open(api_, ordinal);
  if (!ctx.ok()) return ctx.status();
  context_.emplace(*std::move(ctx));
  const CUdevice d = context_->device();
  char name[256] = {};
  api_.cuDeviceGetName(name, sizeof name, d);
  *device_name = name;
  int major = 0, minor = 0;
  api_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  api_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  api_.cuDeviceGetAttribute(&multiprocessors_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  api_.cuDeviceGetAttribute(&l2_bytes_, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
  api_.cuDeviceGetAttribute(&max_shared_optin_,
                            CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d);
  CUuuid uuid;
  if (api_.cuDeviceGetUuid(&uuid, d) == CUDA_SUCCESS)
    clocks_.Start(Nvml::ForUuid(FormatUuid(uuid)));

  if (auto s = CompileHelpers(StrCat("sm_", major, minor)); !s.ok()) return s;
  absl::StatusOr<cuda::Stream> st = cuda::CreateStream(api_);
  if (!st.ok()) return st.status();
  stream_ = *std::move(st);
  st = cuda::CreateStream(api_);
  if (!st.ok()) return st.status();
  copy_stream_ = *std::move(st);
  starts_.clear();
  ends_.clear();
  for (int i = 0; i < kChunk; ++i) {
    absl::StatusOr<cuda::Event> a = cuda::CreateEvent(api_);
    absl::StatusOr<cuda::Event> b = cuda::CreateEvent(api_);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    starts_.push_back(*std::move(a));
    ends_.push_back(*std::move(b));
  }
  absl::StatusOr<cuda::Event> e = cuda::CreateEvent(api_);
  if (!e.ok()) return e.status();
  first_start_ = *std::move(e);
  e = cuda::CreateEvent(api_);
  if (!e.ok()) return e.status();
  first_end_ = *std::move(e);

  if (auto s = Check(api_.cuCtxGetCurrent(&cu_context_), "cuCtxGetCurrent"); !s.ok()) return s;
  absl::StatusOr<cuda::DeviceMemory> canary = cuda::DeviceMemory::Allocate(api_, 2 * kCanaryBytes);
  if (!canary.ok()) return canary.status();
  canary_memory_ = *std::move(canary);
  if (auto s = Check(
          api_.cuMemsetD32Async(canary_memory_.get(), 0x3fc00000u, kCanaryBytes / 4, stream_.get()),
          "cuMemsetD32Async");
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < 2 * kCanaryRuns; ++i) {
    absl::StatusOr<cuda::Event> ev = cuda::CreateEvent(api_);
    if (!ev.ok()) return ev.status();
    canary_events_.push_back(*std::move(ev));
  }
  absl::StatusOr<cuda::PinnedMemory> small = cuda::PinnedMemory::Allocate(api_, 2 * kGuardBytes);
  if (!small.ok()) return small.status();
  host_small_ = *std::move(small);
  // Pinned staging for uploads: two chunks, kept for every job.
  for (int k = 0; k < 2; ++k) {
    absl::StatusOr<cuda::PinnedMemory> p = cuda::PinnedMemory::Allocate(api_, kStagingBytes);
    if (!p.ok()) return p.status();
    staging_[k] = *std::move(p);
    absl::StatusOr<cuda::Event> ev = cuda::CreateEvent(api_);
    if (!ev.ok()) return ev.status();
    staged_[k] = *std::move(ev);
  }
  return absl::OkStatus();
}

absl::Status Worker::Setup(const v1::WorkerSetup& setup) {
  setup_ = setup;
  buffers_.clear();
  flush_ = cuda::DeviceMemory();
  if (setup.settings().flush_l2() && l2_bytes_ > 0) {
    absl::StatusOr<cuda::DeviceMemory> f =
        cuda::DeviceMemory::Allocate(api_, 2 * static_cast<std::size_t>(l2_bytes_));
    if (!f.ok()) return f.status();
    flush_ = *std::move(f);
  }

  for (const v1::WorkerBuffer& spec : setup.buffers()) {
    Buffer b;
    b.spec = spec;
    b.bytes = static_cast<std::size_t>(spec.elements()) * ElementBytes(spec.type());
    absl::StatusOr<cuda::DeviceMemory> m =
        cuda::DeviceMemory::Allocate(api_, b.bytes + 2 * kGuardBytes);
    if (!m.ok()) {
      return absl::ResourceExhaustedError(
          StrCat("argument ", spec.name(), ": ", m.status().message()));
    }
    b.memory = *std::move(m);
    b.data = b.memory.get() + kGuardBytes;
    if (spec.input() && spec.output()) {
      absl::StatusOr<cuda::DeviceMemory> p = cuda::DeviceMemory::Allocate(api_, b.bytes);
      if (!p.ok()) return p.status();
      b.pristine = *std::move(p);
    }
    if (spec.output()) {
      absl::StatusOr<cuda::DeviceMemory> r = cuda::DeviceMemory::Allocate(api_, b.bytes);
      if (!r.ok()) return r.status();
      b.reference = *std::move(r);
    }
    buffers_.push_back(std::move(b));
  }
  {
    const std::size_t n = std::max<std::size_t>(1, buffers_.size());
    absl::StatusOr<cuda::DeviceMemory> results = cuda::DeviceMemory::Allocate(api_, 16 * n);
    if (!results.ok()) return results.status();
    compare_results_ = *std::move(results);
    absl::StatusOr<cuda::PinnedMemory> host =
        cuda::PinnedMemory::Allocate(api_, (2 * kGuardBytes + 16) * n);
    if (!host.ok()) return host.status();
    checks_host_ = *std::move(host);
  }
  for (Buffer& b : buffers_) {
    if (auto s = Upload(b); !s.ok()) return s;
  }
  if (auto s = SetUpRotation(); !s.ok()) return s;
  load_.reset();
  if (setup.load().kind() == v1::LoadProfile::UNDER_LOAD) {
    load_ = std::make_unique<LoadRunner>(api_, cu_context_, multiprocessors_, load_kernels_);
    if (auto s = load_->Setup(setup.load()); !s.ok()) {
      return absl::Status(s.code(), StrCat("setting up the load: ", s.message()));
    }
  }
  pipe_reference_.clear();
  if (setup.has_pipeline()) {
    const v1::WorkerPipeline& p = setup.pipeline();
    const std::size_t bytes = static_cast<std::size_t>(p.elements()) * ElementBytes(p.type());
    if (bytes != pipe_bytes_) {
      pinned_in_ = cuda::PinnedMemory();
      pinned_out_ = cuda::PinnedMemory();
      pageable_in_.reset();
      pageable_out_.reset();
      pipe_bytes_ = 0;
      absl::StatusOr<cuda::PinnedMemory> in = cuda::PinnedMemory::Allocate(api_, bytes);
      if (!in.ok()) return in.status();
      absl::StatusOr<cuda::PinnedMemory> out = cuda::PinnedMemory::Allocate(api_, bytes);
      if (!out.ok()) return out.status();
      pinned_in_ = *std::move(in);
      pinned_out_ = *std::move(out);
      pageable_in_.reset(new char[bytes]);
      pageable_out_.reset(new char[bytes]);
      std::memset(pageable_out_.get(), 0, bytes);  // pages present, as an application's are
      pipe_bytes_ = bytes;
    }
    v1::WorkerBuffer input;
    input.set_name("pipeline input");
    input.set_type(p.type());
    input.set_elements(p.elements());
    *input.mutable_uniform() = p.input();
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (auto s = FillRange(input, 0, p.elements(), pinned_in_.get(), threads); !s.ok()) return s;
    std::memcpy(pageable_in_.get(), pinned_in_.get(), bytes);
  }
  if (auto s = ResetGuards(stream_.get()); !s.ok()) return s;
  if (auto s = Check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize"); !s.ok()) {
    return s;
  }
  last_activity_ = Clock::time_point{};  // warm up before the first sample
  return absl::OkStatus();
}

absl::Status Worker::SetUpRotation() {
  rotations_ = 1;
  if (!setup_.settings().rotate_inputs()) return absl::OkStatus();
  std::int64_t inputs = 0;
  for (const Buffer& b : buffers_) {
    if (b.spec.input() && !b.spec.output()) inputs += static_cast<std::int64_t>(b.bytes);
  }
  const std::int64_t span = 2 * static_cast<std::int64_t>(l2_bytes_);
  if (inputs == 0 || inputs >= span || inputs >= kMaxRotationBytes) return absl::OkStatus();
  // Enough copies that the other copies together exceed twice the L2: a
  // copy's lines are gone by the time it is read again.
  int copies = static_cast<int>((span + inputs - 1) / inputs) + 1;
  copies = std::min<int>(copies, kMaxRotationCopies);
  copies = std::min<int>(copies, static_cast<int>(1 + (kMaxRotationBytes + inputs) / inputs));
  for (Buffer& b : buffers_) {
    if (!b.spec.input() || b.spec.output()) continue;
    for (int k = 1; k < copies; ++k) {
      absl::StatusOr<cuda::DeviceMemory> m = cuda::DeviceMemory::Allocate(api_, b.bytes);
      if (!m.ok()) {
        return absl::ResourceExhaustedError(StrCat("measurement.rotate_inputs: copy ", k, " of ",
                                                   b.spec.name(), ": ", m.status().message()));
      }
      KTUNE_RETURN_IF_ERROR(
          Check(api_.cuMemcpyDtoDAsync(m->get(), b.data, b.bytes, copy_stream_.get()),
                "cuMemcpyDtoDAsync"));
      b.copies.push_back(*std::move(m));
    }
  }
  KTUNE_RETURN_IF_ERROR(Check(api_.cuStreamSynchronize(copy_stream_.get()), "cuStreamSynchronize"));
  rotations_ = copies;
  return absl::OkStatus();
}

absl::Status Worker::ResetGuards(CUstream s) {
  for (const Buffer& b : buffers_) {
    if (auto st = Check(api_.cuMemsetD8Async(b.memory.get(), kGuardByte, kGuardBytes, s),
                        "cuMemsetD8Async");
        !st.ok()) {
      return st;
    }
    if (auto st = Check(api_.cuMemsetD8Async(b.data + b.bytes, kGuardByte, kGuardBytes, s),
                        "cuMemsetD8Async");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::RestoreInputs(CUstream s) {
  for (const Buffer& b : buffers_) {
    if (b.pristine.get() == 0) continue;
    if (auto st = Check(api_.cuMemcpyDtoDAsync(b.data, b.pristine.get(), b.bytes, s),
                        "cuMemcpyDtoDAsync");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::PoisonOutputs(CUstream s) {
  for (const Buffer& b : buffers_) {
    if (!b.spec.output() || b.spec.input()) continue;
    if (auto st = Check(api_.cuMemsetD8Async(b.data, kPoisonByte, b.bytes, s), "cuMemsetD8Async");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status Worker::WarmUp() {
  const double ms = setup_.settings().warmup_ms();
  if (ms <= 0) return absl::OkStatus();
  unsigned long long ns = static_cast<unsigned long long>(ms * 1e6);
  void* args[] = {&ns};
  if (auto s = Check(api_.cuLaunchKernel(spin_, static_cast<unsigned>(multiprocessors_) * 2, 1, 1,
                                         128, 1, 1, 0, stream_.get(), args, nullptr),
                     "cuLaunchKernel(warm-up)");
      !s.ok()) {
    return s;
  }
  return Check(api_.cuStreamSynchronize(stream_.get()), "cuStreamSynchronize");
}

absl::Status Worker::EnqueueChecks(CUstream s, bool compare) {
  // Host layout: each buffer's two guard zones, then one 16-byte result
  // (differing count, first index) per buffer.
  auto* h = static_cast<unsigned char*>(checks_host_.get());
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = buffers_[i];
    unsigned char* at = h + 2 * kGuardBytes * i;
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuMemcpyDtoHAsync(at, b.memory.get(), kGuardBytes, s), "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuMemcpyDtoHAsync(at + kGuardBytes, b.data + b.bytes, kGuardBytes, s),
              "cuMemcpyDtoHAsync"));
  }
  if (!compare) return absl::OkStatus();
  bool any = false;
  for (int index : setup_.verified()) {
    const Buffer& b = buffers_[static_cast<std::size_t>(index)];
    if (!b.has_reference) continue;
    any = true;
    const CUdeviceptr slot = compare_results_.get() + 16 * static_cast<std::size_t>(index);
    KTUNE_RETURN_IF_ERROR(Check(api_.cuMemsetD8Async(slot, 0, 8, s), "cuMemsetD8Async"));
    KTUNE_RETURN_IF_ERROR(Check(api_.cuMemsetD8Async(slot + 8, 0xff, 8, s), "cuMemsetD8Async"));
    CUdeviceptr out = b.data, ref = b.reference.get(), result = slot;
    unsigned long long n = static_cast<unsigned long long>(b.spec.elements());
    double atol = setup_.settings().atol(), rtol = setup_.settings().rtol();
    void* args[] = {&out, &ref, &n, &atol, &rtol, &result};
    const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(
        (n + 255) / 256, static_cast<unsigned long long>(multiprocessors_) * 16));
    CUfunction f = compare_[static_cast<std::size_t>(b.spec.type())];
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuLaunchKernel(f, std::max(1u, blocks), 1, 1, 256, 1, 1, 0, s, args, nullptr),
              "cuLaunchKernel(compare)"));
  }
  if (!any) return absl::OkStatus();
  return Check(api_.cuMemcpyDtoHAsync(h + 2 * kGuardBytes * buffers_.size(), compare_results_.get(),
                                      16 * buffers_.size(), s),
               "cuMemcpyDtoHAsync");
}

std::string Worker::GuardMessage() const {
  const auto* h = static_cast<const unsigned char*>(checks_host_.get());
  for (std::size_t k = 0; k < buffers_.size(); ++k) {
    const unsigned char* at = h + 2 * kGuardBytes * k;
    for (std::size_t i = 0; i < 2 * kGuardBytes; ++i) {
      if (at[i] != kGuardByte) {
        return StrCat("the kernel wrote outside argument ", buffers_[k].spec.name(), " (",
                      i < kGuardBytes ? StrCat(kGuardBytes - i, " bytes before its start")
                                      : StrCat(i - kGuardBytes, " bytes past its end"),
                      ")");
      }
    }
  }
  return std::string();
}

absl::StatusOr<std::string> Worker::CompareMessage(CUstream s) {
  const auto* results = reinterpret_cast<const unsigned long long*>(
      static_cast<const unsigned char*>(checks_host_.get()) + 2 * kGuardBytes * buffers_.size());
  for (int index : setup_.verified()) {
    const Buffer& b = buffers_[static_cast<std::size_t>(index)];
    if (!b.has_reference) continue;
    const unsigned long long bad = results[2 * index], first = results[2 * index + 1];
    if (bad == 0) continue;
    // The first differing element, for the message.
    const std::size_t eb = ElementBytes(b.spec.type());
    char* h = static_cast<char*>(host_small_.get());
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuMemcpyDtoHAsync(h, b.data + first * eb, eb, s), "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(
        Check(api_.cuMemcpyDtoHAsync(h + 16, b.reference.get() + first * eb, eb, s),
              "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(Check(api_.cuStreamSynchronize(s), "cuStreamSynchronize"));
    return StrCat(bad, " of ", b.spec.elements(), " elements of ", b.spec.name(),
                  " differ from the reference (atol ", setup_.settings().atol(), ", rtol ",
                  setup_.settings().rtol(), "); the first at index ", first, ": ",
                  ElementAsDouble(b.spec.type(), h, 0), " instead of ",
                  ElementAsDouble(b.spec.type(), h + 16, 0));
  }
  return std::string();
}

class Worker::Loaded {
 public:
  explicit Loaded(LoadRunner* load) : load_(load) {}
  Loaded(Loaded&& o) noexcept : load_(std::exchange(o.load_, nullptr)) {}
  Loaded& operator=(Loaded&&) = delete;
  ~Loaded() {
    if (load_ != nullptr) (void)load_->Stop();
  }
  // Stops the load and records what it achieved in `out`.
  absl::Status Finish(v1::WorkerMeasurement& out) {
    if (load_ == nullptr) return absl::OkStatus();
    absl::StatusOr<LoadResult> achieved = std::exchange(load_, nullptr)->Stop();
    if (!achieved.ok()) return achieved.status();
    out.mutable_conditions()->set_load_throughput(achieved->throughput);
    for (const auto& [name, rate] : achieved->rates) (*out.mutable_conditions()->mutable_load_rates())[name] = rate;
    return absl::OkStatus();
  }

 private:
  LoadRunner* load_;  // null: no load, or stopped
};

absl::StatusOr<Worker::Loaded> Worker::StartLoad(v1::WorkerMeasurement& out) {
  if (load_ == nullptr || load_->empty()) return Loaded(nullptr);
  // The canary kernel sees contention for memory and SMs; a load with host
  // copies also gets the link canary, which sees contention for the link.
  const bool link = setup_.load().h2d_fraction() > 0 || setup_.load().d2h_fraction() > 0;
  absl::StatusOr<double> idle = Canary();
  if (!idle.ok()) return idle.status();
  absl::StatusOr<double> idle_link = link ? LinkCanary() : absl::StatusOr<double>(0.0);
  if (!idle_link.ok()) return idle_link.status();
  KTUNE_RETURN_IF_ERROR(load_->Start());
  Loaded loaded(load_.get());
  absl::StatusOr<double> busy = Canary();
  if (!busy.ok()) return busy.status();
  out.mutable_conditions()->set_canary_slowdown(*idle > 0 ? *busy / *idle : 0);
  if (link) {
    absl::StatusOr<double> busy_link = LinkCanary();
    if (!busy_link.ok()) return busy_link.status();
    out.mutable_conditions()->set_link_canary_slowdown(*idle_link > 0 ? *busy_link / *idle_link : 0);
  }
  return loaded;
}

absl::StatusOr<double> Worker::TimeMedian(const std::function<CUresult(CUstream)>& work,
                                          const char* what) {
  CUstream s = stream_.get();
  // One untimed run, then the timed ones, each between its own events.
  if (auto st = Check(work(s), what); !st.ok()) return st;
  for (int i = 0; i < kCanaryRuns; ++i) {
    if (auto st = Check(api_.cuEventRecord(canary_events_[2 * i].get(), s), "cuEventRecord");
        !st.ok()) {
      return st;
    }
    if (auto st = Check(work(s), what); !st.ok()) return st;
    if (auto st = Check(api_.cuEventRecord(canary_events_[2 * i + 1].get(), s), "cuEventRecord");
        !st.ok()) {
      return st;
    }
  }
  if (auto st = Check(api_.cuStreamSynchronize(s), "cuStreamSynchronize"); !st.ok()) return st;
  std::vector<double> times;
  for (int i = 0; i < kCanaryRuns; ++i) {
    float ms = 0;
    if (auto st = Check(api_.cuEventElapsedTime(&ms, canary_events_[2 * i].get(),
                                                canary_events_[2 * i + 1].get()),
                        "cuEventElapsedTime");
        !st.ok()) {
      return st;
    }
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return 0.5 * (times[(times.size() - 1) / 2] + times[times.size() / 2]);
}

absl::StatusOr<double> Worker::Canary() {
  CUdeviceptr in = canary_memory_.get(), out = in + kCanaryBytes;
  unsigned long long n = kCanaryBytes / 16;
  void* args[] = {&in, &out, &n};
  const auto blocks = static_cast<unsigned>(4 * multiprocessors_);
  return TimeMedian(
      [&](CUstream s) {
        return api_.cuLaunchKernel(canary_, blocks, 1, 1, 256, 1, 1, 0, s, args, nullptr);
      },
      "cuLaunchKernel(canary)");
}

absl::StatusOr<double> Worker::LinkCanary() {
  if (link_canary_host_.get() == nullptr) {
    absl::StatusOr<cuda::PinnedMemory> m = cuda::PinnedMemory::Allocate(api_, kLinkCanaryBytes);
    if (!m.ok()) return m.status();
    link_canary_host_ = *std::move(m);
    std::memset(link_canary_host_.get(), 0x3f, kLinkCanaryBytes);  // not all zeros
  }
  void* host = link_canary_host_.get();
  const CUdeviceptr dev = canary_memory_.get() + kCanaryBytes;
  return TimeMedian(
      [&](CUstream s) {
        const CUresult rc = api_.cuMemcpyHtoDAsync(dev, host, kLinkCanaryBytes, s);
        return rc != CUDA_SUCCESS ? rc : api_.cuMemcpyDtoHAsync(host, dev, kLinkCanaryBytes, s);
      },
      "copying the link canary");
}

absl::Status Worker::EnsureStreams(int n) {
  if (!fork_) {
    absl::StatusOr<cuda::Event> e = cuda::CreateEvent(api_);
    if (!e.ok()) return e.status();
    fork_ = *std::move(e);
  }
  while (static_cast<int>(side_.size()) < n) {
    absl::StatusOr<cuda::Stream> st = cuda::CreateStream(api_);
    if (!st.ok()) return st.status();
    absl::StatusOr<cuda::Event> e = cuda::CreateEvent(api_);
    if (!e.ok()) return e.status();
    side_.push_back(*std::move(st));
    joins_.push_back(*std::move(e));
  }
  return absl::OkStatus();
}

CUresult Worker::Fork(CUevent at, int from, int to) {
  for (int k = from; k < to; ++k) {
    if (CUresult rc = api_.cuStreamWaitEvent(side_[static_cast<std::size_t>(k)].get(), at, 0);
        rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

CUresult Worker::Join(CUstream into, int from, int to) {
  for (int k = from; k < to; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    if (CUresult rc = api_.cuEventRecord(joins_[kk].get(), side_[kk].get()); rc != CUDA_SUCCESS) {
      return rc;
    }
    if (CUresult rc = api_.cuStreamWaitEvent(into, joins_[kk].get(), 0); rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

CUresult Worker::RunPipeline(CUfunction f, const v1::WorkerCandidate& c, unsigned shared, int stage,
                             CUevent begin, CUevent end) {
  const int streams = stage < 0 ? c.streams() : 1;
  const std::size_t eb = ElementBytes(setup_.pipeline().type());
  const auto total = static_cast<std::size_t>(setup_.pipeline().elements());
  const std::size_t chunk = std::min(total, static_cast<std::size_t>(c.chunk_elements()));
  const char* in = static_cast<const char*>(c.pinned() ? pinned_in_.get() : pageable_in_.get());
  char* out = static_cast<char*>(c.pinned() ? pinned_out_.get() : pageable_out_.get());
  CUstream first = side_[0].get();
  if (CUresult rc = api_.cuEventRecord(begin, first); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = Fork(begin, 1, streams); rc != CUDA_SUCCESS) return rc;
  std::size_t i = 0;
  for (std::size_t offset = 0; offset < total; offset += chunk, ++i) {
    const std::size_t n = std::min(chunk, total - offset);
    const std::size_t k = i % static_cast<std::size_t>(streams);
    CUstream st = side_[k].get();
    CUdeviceptr din = pipe_device_.get() + 2 * k * chunk * eb;
    CUdeviceptr dout = din + chunk * eb;
    if (stage < 0 || stage == 0) {
      if (CUresult rc = api_.cuMemcpyHtoDAsync(din, in + offset * eb, n * eb, st);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
    if (stage < 0 || stage == 1) {
      unsigned long long count = n;
      void* args[] = {&din, &dout, &count};
      if (CUresult rc =
              api_.cuLaunchKernel(f, c.grid().x(), c.grid().y(), c.grid().z(), c.block().x(),
                                  c.block().y(), c.block().z(), shared, st, args, nullptr);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
    if (stage < 0 || stage == 2) {
      if (CUresult rc = api_.cuMemcpyDtoHAsync(out + offset * eb, dout, n * eb, st);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
  }
  if (CUresult rc = Join(first, 1, streams); rc != CUDA_SUCCESS) return rc;
  return api_.cuEventRecord(end, first);
}

v1::WorkerMeasurement Worker::MeasurePipeline(const v1::WorkerCandidate& c, CUfunction f,
                                              unsigned shared, v1::WorkerMeasurement out,
                                              Clock::time_point start) {
  const v1::WorkerSettings& settings = setup_.settings();
  Ending end{api_, out, start, last_activity_};
  auto finish = [&] { return end.Finish(); };
  auto failed = [&](CUresult rc, const char* call, bool launch) {
    return end.Failed(rc, call, launch);
  };
  auto infra = [&](const absl::Status& st) { return end.Infra(st); };
  const int streams = c.streams();
  if (streams < 1 || streams > kMaxStreams || c.chunk_elements() < 1) {
    out.set_status(v1::LAUNCH_ERROR);
    out.set_message(StrCat("the pipeline asks for ", streams, " streams (1 to ", kMaxStreams,
                           ") and chunks of ", c.chunk_elements(), " elements (at least 1)"));
    return finish();
  }
  // In and out buffers of one chunk for each stream that gets a chunk.
  const std::size_t eb = ElementBytes(setup_.pipeline().type());
  const auto total = static_cast<std::size_t>(setup_.pipeline().elements());
  const std::size_t chunk = std::min(total, static_cast<std::size_t>(c.chunk_elements()));
  const std::size_t used = std::min(static_cast<std::size_t>(streams), (total + chunk - 1) / chunk);
  const std::size_t need = 2 * used * chunk * eb;
  if (pipe_device_.size_bytes() < need) {
    pipe_device_ = cuda::DeviceMemory();
    absl::StatusOr<cuda::DeviceMemory> m = cuda::DeviceMemory::Allocate(api_, need);
    if (!m.ok()) {
      out.set_status(v1::LAUNCH_ERROR);
      out.set_message(StrCat("the pipeline's chunk buffers (", need >> 20,
                             " MiB) do not fit: ", m.status().message()));
      return finish();
    }
    pipe_device_ = *std::move(m);
  }
  if (auto st = EnsureStreams(streams); !st.ok()) return infra(st);
  char* host_out = static_cast<char*>(c.pinned() ? pinned_out_.get() : pageable_out_.get());

  // The first run: poisoned output, verified against the reference.
  std::memset(host_out, kPoisonByte, pipe_bytes_);
  if (CUresult rc = RunPipeline(f, c, shared, -1, first_start_.get(), first_end_.get());
      rc != CUDA_SUCCESS) {
    return failed(rc, "enqueueing the pipeline", true);
  }
  if (CUresult rc = api_.cuEventSynchronize(first_end_.get()); rc != CUDA_SUCCESS) {
    return failed(rc, "running the pipeline", false);
  }
  float first_ms = 0;
  if (CUresult rc = api_.cuEventElapsedTime(&first_ms, first_start_.get(), first_end_.get());
      rc != CUDA_SUCCESS) {
    return failed(rc, "cuEventElapsedTime", false);
  }
  if (c.make_reference()) {
    pipe_reference_.assign(host_out, host_out + pipe_bytes_);
    out.set_status(v1::OK);
    out.add_samples_ms(first_ms);
    out.mutable_conditions()->set_launches_per_sample(1);
    return finish();
  }
  if (c.verify() && !pipe_reference_.empty()) {
    const v1::ElementType type = setup_.pipeline().type();
    const auto n = static_cast<std::size_t>(setup_.pipeline().elements());
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::size_t> bad(static_cast<std::size_t>(threads), 0);
    std::vector<std::size_t> first_bad(static_cast<std::size_t>(threads), n);
    std::vector<std::thread> pool;
    const double atol = settings.atol(), rtol = settings.rtol();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t lo = n * static_cast<std::size_t>(t) / static_cast<std::size_t>(threads);
        const std::size_t hi =
            n * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(threads);
        for (std::size_t i = lo; i < hi; ++i) {
          const double a = ElementAsDouble(type, host_out, i);
          const double r = ElementAsDouble(type, pipe_reference_.data(), i);
          if (std::isnan(a) || std::isnan(r) || !(std::fabs(a - r) <= atol + rtol * std::fabs(r))) {
            if (bad[static_cast<std::size_t>(t)]++ == 0) first_bad[static_cast<std::size_t>(t)] = i;
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    std::size_t total_bad = 0, first = n;
    for (int t = 0; t < threads; ++t) {
      total_bad += bad[static_cast<std::size_t>(t)];
      first = std::min(first, first_bad[static_cast<std::size_t>(t)]);
    }
    if (total_bad > 0) {
      out.set_status(v1::WRONG_RESULT);
      out.set_message(StrCat(total_bad, " of ", n,
                             " elements of the pipeline's output differ from the reference (atol ",
                             atol, ", rtol ", rtol, "); the first at index ", first, ": ",
                             ElementAsDouble(type, host_out, first), " instead of ",
                             ElementAsDouble(type, pipe_reference_.data(), first)));
      return finish();
    }
  }

  // UNDER_LOAD: the load runs through the samples and the stages.
  absl::StatusOr<Loaded> loaded = StartLoad(out);
  if (!loaded.ok()) return infra(loaded.status());

  // Samples: whole pipeline runs, end to end.
  out.mutable_conditions()->set_launches_per_sample(1);
  out.mutable_conditions()->set_sm_clock_mhz_before(clocks_.clock_mhz());
  std::vector<double> samples;
  double busy = first_ms;
  const int min_samples =
      std::max(1, c.min_samples() > 0 ? c.min_samples() : settings.min_samples());
  const int max_samples = std::max(min_samples, settings.max_samples());
  const bool racing = !c.no_racing() && settings.racing_factor() > 0 && c.best_ms() > 0;
  // One timed pass (stage < 0: the whole pipeline); a failure ends the
  // candidate.
  float ms = 0;
  auto timed_pass = [&](int stage) -> std::optional<v1::WorkerMeasurement> {
    if (CUresult rc = RunPipeline(f, c, shared, stage, starts_[0].get(), ends_[0].get());
        rc != CUDA_SUCCESS) {
      return failed(rc, "enqueueing the pipeline", true);
    }
    if (CUresult rc = api_.cuEventSynchronize(ends_[0].get()); rc != CUDA_SUCCESS) {
      return failed(rc, "running the pipeline", false);
    }
    if (CUresult rc = api_.cuEventElapsedTime(&ms, starts_[0].get(), ends_[0].get());
        rc != CUDA_SUCCESS) {
      return failed(rc, "cuEventElapsedTime", false);
    }
    return std::nullopt;
  };
  while (static_cast<int>(samples.size()) < max_samples) {
    if (std::optional<v1::WorkerMeasurement> failure = timed_pass(-1)) return *std::move(failure);
    samples.push_back(ms);
    busy += ms;
    if (SamplingDone(samples, settings, c.best_ms(), racing, min_samples, std::min(3, min_samples),
                     start, &out)) {
      break;
    }
  }
  // The stages one after another on one stream: what overlap can save.
  double stage_ms[3] = {0, 0, 0};
  for (int stage = 0; stage < 3; ++stage) {
    if (std::optional<v1::WorkerMeasurement> failure = timed_pass(stage)) {
      return *std::move(failure);
    }
    stage_ms[stage] = ms;
    busy += ms;
  }
  if (auto st = loaded->Finish(out); !st.ok()) return infra(st);
  out.mutable_conditions()->set_h2d_ms(stage_ms[0]);
  out.mutable_conditions()->set_kernel_ms(stage_ms[1]);
  out.mutable_conditions()->set_d2h_ms(stage_ms[2]);
  out.mutable_conditions()->set_sm_clock_mhz_after(clocks_.clock_mhz());
  out.mutable_conditions()->set_gpu_busy_ms(busy);
  for (double v : samples) out.add_samples_ms(v);
  out.set_status(v1::OK);
  return finish();
}

v1::WorkerMeasurement Worker::Measure(const v1::WorkerCandidate& c) {
  const auto start = Clock::now();
  v1::WorkerMeasurement out;
  out.set_id(c.id());
  const v1::WorkerSettings& settings = setup_.settings();
  CUstream s = stream_.get();
  Ending end{api_, out, start, last_activity_};
  auto finish = [&] { return end.Finish(); };
  auto launch_error = [&](const std::string& message) { return end.LaunchError(message); };
  auto cuda_failure = [&](CUresult rc, const char* call, bool launch) {
    return end.Failed(rc, call, launch);
  };
  auto infra = [&](const absl::Status& st) { return end.Infra(st); };

  absl::StatusOr<cuda::Module> module = cuda::LoadModule(api_, c.cubin());
  out.set_load_ms(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  const auto verify_start = Clock::now();
  if (!module.ok()) return launch_error(std::string(module.status().message()));
  CUfunction f = nullptr;
  if (CUresult rc = api_.cuModuleGetFunction(&f, module->get(), c.function().c_str());
      rc != CUDA_SUCCESS) {
    return launch_error(StrCat("the image has no kernel named ", c.function(), ": ",
                               Check(rc, "cuModuleGetFunction").message()));
  }
  int regs = 0, static_shared = 0, local = 0, max_threads = 0;
  api_.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
  api_.cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
  api_.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
  api_.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
  out.mutable_conditions()->set_registers(regs);
  out.mutable_conditions()->set_static_shared_bytes(static_shared);
  out.mutable_conditions()->set_local_bytes(local);
  const std::uint64_t threads = std::uint64_t{c.block().x()} * c.block().y() * c.block().z();
  if (threads > static_cast<std::uint64_t>(max_threads)) {
    return launch_error(StrCat("the block has ", threads, " threads; this kernel allows at most ",
                               max_threads, " (it uses ", regs, " registers per thread)"));
  }
  const unsigned dynamic_shared = c.shared_memory_bytes();
  if (dynamic_shared > 48 * 1024) {
    if (static_cast<int>(dynamic_shared) + static_shared > max_shared_optin_) {
      return launch_error(StrCat("the kernel asks for ", dynamic_shared + static_shared,
                                 " bytes of shared memory; the device allows ", max_shared_optin_));
    }
    if (CUresult rc = api_.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                              static_cast<int>(dynamic_shared));
        rc != CUDA_SUCCESS) {
      return cuda_failure(rc, "cuFuncSetAttribute", true);
    }
  }
  if (setup_.has_pipeline()) return MeasurePipeline(c, f, dynamic_shared, std::move(out), start);
  // Kernel parameters.
  std::vector<CUdeviceptr> pointers(buffers_.size());
  for (std::size_t i = 0; i < buffers_.size(); ++i) pointers[i] = buffers_[i].data;
  std::vector<std::string> scalars(c.scalars().begin(), c.scalars().end());
  std::vector<void*> params;
  std::size_t next_scalar = 0;
  for (int index : setup_.argument_buffers()) {
    if (index >= 0) {
      params.push_back(&pointers[static_cast<std::size_t>(index)]);
    } else {
      if (next_scalar >= scalars.size()) {
        return infra(absl::InternalError("fewer scalar arguments than the kernel takes"));
      }
      params.push_back(scalars[next_scalar++].data());
    }
  }
  auto launch = [&](CUstream stream) {
    return api_.cuLaunchKernel(f, c.grid().x(), c.grid().y(), c.grid().z(), c.block().x(),
                               c.block().y(), c.block().z(), dynamic_shared, stream, params.data(),
                               nullptr);
  };
  // CONCURRENT: K instances spread round-robin over S streams forked from
  // and joined back to the launch stream, so one sample spans them all.
  const int instances = c.instances();
  const int nstreams = c.streams();
  const bool concurrent = instances > 0;
  if (concurrent) {
    if (nstreams < 1 || nstreams > kMaxStreams || instances > 4096) {
      return launch_error(StrCat("concurrent: ", instances, " instances over ", nstreams,
                                 " streams (1 to 4096 instances, 1 to ", kMaxStreams, " streams)"));
    }
    if (auto st = EnsureStreams(nstreams); !st.ok()) return infra(st);
  }
  auto launch_concurrent = [&]() -> CUresult {
    if (CUresult rc = api_.cuEventRecord(fork_.get(), s); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = Fork(fork_.get(), 0, nstreams); rc != CUDA_SUCCESS) return rc;
    for (int j = 0; j < instances; ++j) {
      if (CUresult rc = launch(side_[static_cast<std::size_t>(j % nstreams)].get());
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
    return Join(s, 0, nstreams);
  };

  // 1. The untimed first launch, which is also the verification run.
  if (auto st = RestoreInputs(s); !st.ok()) return infra(st);
  if (auto st = PoisonOutputs(s); !st.ok()) return infra(st);
  if (auto st = ResetGuards(s); !st.ok()) return infra(st);
  if (CUresult rc = api_.cuEventRecord(first_start_.get(), s); rc != CUDA_SUCCESS) {
    return cuda_failure(rc, "cuEventRecord", false);
  }
  if (CUresult rc = launch(s); rc != CUDA_SUCCESS) return cuda_failure(rc, "cuLaunchKernel", true);
  if (CUresult rc = api_.cuEventRecord(first_end_.get(), s); rc != CUDA_SUCCESS) {
    return cuda_failure(rc, "cuEventRecord", false);
  }
  // The checks follow the launch on the stream: one synchronisation, which
  // also reports a fault of the kernel.
  const bool compare = c.verify() && !c.make_reference();
  if (auto st = EnqueueChecks(s, compare); !st.ok()) return infra(st);
  if (CUresult rc = api_.cuStreamSynchronize(s); rc != CUDA_SUCCESS) {
    return cuda_failure(rc, "running the kernel", false);
  }
  float first_ms = 0;
  if (CUresult rc = api_.cuEventElapsedTime(&first_ms, first_start_.get(), first_end_.get());
      rc != CUDA_SUCCESS) {
    return cuda_failure(rc, "cuEventElapsedTime", false);
  }
  if (const std::string guard = GuardMessage(); !guard.empty()) {
    out.set_status(v1::WRONG_RESULT);
    out.set_message(guard);
    return finish();
  }
  if (c.make_reference()) {
    for (int index : setup_.verified()) {
      Buffer& b = buffers_[static_cast<std::size_t>(index)];
      if (CUresult rc = api_.cuMemcpyDtoDAsync(b.reference.get(), b.data, b.bytes, s);
          rc != CUDA_SUCCESS) {
        return cuda_failure(rc, "cuMemcpyDtoDAsync", false);
      }
      b.has_reference = true;
    }
    if (CUresult rc = api_.cuStreamSynchronize(s); rc != CUDA_SUCCESS) {
      return cuda_failure(rc, "cuStreamSynchronize", false);
    }
    out.set_status(v1::OK);
    out.add_samples_ms(first_ms);
    out.mutable_conditions()->set_launches_per_sample(1);
    return finish();
  }
  if (compare) {
    absl::StatusOr<std::string> diff = CompareMessage(s);
    if (!diff.ok()) return infra(diff.status());
    if (!diff->empty()) {
      out.set_status(v1::WRONG_RESULT);
      out.set_message(*diff);
      return finish();
    }
  }

  out.set_verify_ms(std::chrono::duration<double, std::milli>(Clock::now() - verify_start).count());

  // 2. Warm-up after start or an idle gap (the GPU clocks down when idle).
  if (Clock::now() - last_activity_ > kIdleGap) {
    if (auto st = WarmUp(); !st.ok()) return infra(st);
  }

  // 3. How many launches make a sample: one, unless the kernel is short.
  // The first launch after loading carries one-time costs, so a kernel
  // that looks short is decided on by its first chunk of samples: if their
  // median is short too, they are dropped and sampling starts again with
  // several launches per sample.
  const bool restore = std::any_of(buffers_.begin(), buffers_.end(),
                                   [](const Buffer& b) { return b.pristine.get() != 0; });
  double busy = first_ms;  // event-timed kernel work, the untimed launches included
  bool undecided = !concurrent && settings.short_kernel_ms() > 0 && first_ms < 0.25f;
  int per_sample = 1;
  if (!concurrent && !undecided && settings.short_kernel_ms() > 0 &&
      first_ms < settings.short_kernel_ms()) {
    per_sample = LaunchesPerSample(settings, first_ms);
  }
  cuda::Graph graph;
  cuda::GraphExec graph_exec;
  // Rotated inputs change with every launch: plain launches, no graph.
  const bool rotate = rotations_ > 1 && !concurrent;
  out.mutable_conditions()->set_input_copies(rotate ? rotations_ : 1);
  auto capture = [&] {
    if (per_sample <= 1 || !settings.use_graphs() || rotate) return;
    if (CUresult rc = api_.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        rc == CUDA_SUCCESS) {
      for (int k = 0; k < per_sample; ++k) launch(s);
      CUgraph g = nullptr;
      if (api_.cuStreamEndCapture(s, &g) == CUDA_SUCCESS && g != nullptr) {
        graph = cuda::Graph(&api_, g);
        CUgraphExec ge = nullptr;
        if (api_.cuGraphInstantiateWithFlags(&ge, g, 0) == CUDA_SUCCESS)
          graph_exec = cuda::GraphExec(&api_, ge);
      }
    }
  };
  capture();

  // UNDER_LOAD: the load runs until the samples are taken.
  absl::StatusOr<Loaded> loaded = StartLoad(out);
  if (!loaded.ok()) return infra(loaded.status());

  // 4. Samples, enqueued kChunk at a time so the GPU never waits on us.
  out.mutable_conditions()->set_sm_clock_mhz_before(clocks_.clock_mhz());
  std::vector<double> samples;
  int discarded = 0;
  const int min_samples =
      std::max(1, c.min_samples() > 0 ? c.min_samples() : settings.min_samples());
  const int max_samples = std::max(min_samples, settings.max_samples());
  const bool racing = !c.no_racing() && settings.racing_factor() > 0 && c.best_ms() > 0;
  while (true) {
    // The first chunk stops where racing can first decide.
    const int chunk =
        samples.empty() && racing ? std::clamp(settings.racing_min_samples(), 1, kChunk) : kChunk;
    const int n = std::min(chunk, max_samples - static_cast<int>(samples.size()));
    if (n <= 0) break;
    const bool throttled_before = clocks_.throttled_now();
    const std::uint64_t polls_before = clocks_.throttle_polls();
    for (int i = 0; i < n; ++i) {
      if (restore) {
        if (auto st = RestoreInputs(s); !st.ok()) return infra(st);
      }
      if (flush_.get() != 0) {
        if (CUresult rc =
                api_.cuMemsetD32Async(flush_.get(), ++flush_counter_, flush_.size_bytes() / 4, s);
            rc != CUDA_SUCCESS) {
          return cuda_failure(rc, "cuMemsetD32Async(flush)", false);
        }
      }
      if (CUresult rc = api_.cuEventRecord(starts_[static_cast<std::size_t>(i)].get(), s);
          rc != CUDA_SUCCESS) {
        return cuda_failure(rc, "cuEventRecord", false);
      }
      if (concurrent) {
        if (CUresult rc = launch_concurrent(); rc != CUDA_SUCCESS) {
          return cuda_failure(rc, "cuLaunchKernel", true);
        }
      } else if (graph_exec) {
        if (CUresult rc = api_.cuGraphLaunch(graph_exec.get(), s); rc != CUDA_SUCCESS) {
          return cuda_failure(rc, "cuGraphLaunch", true);
        }
      } else {
        for (int k = 0; k < per_sample; ++k) {
          if (rotate) {
            const auto copy = static_cast<std::size_t>(rotation_++ % rotations_);
            for (std::size_t b = 0; b < buffers_.size(); ++b) {
              if (!buffers_[b].copies.empty()) {
                pointers[b] = copy == 0 ? buffers_[b].data : buffers_[b].copies[copy - 1].get();
              }
            }
          }
          if (CUresult rc = launch(s); rc != CUDA_SUCCESS) {
            return cuda_failure(rc, "cuLaunchKernel", true);
          }
        }
      }
      if (CUresult rc = api_.cuEventRecord(ends_[static_cast<std::size_t>(i)].get(), s);
          rc != CUDA_SUCCESS) {
        return cuda_failure(rc, "cuEventRecord", false);
      }
    }
    if (CUresult rc = api_.cuEventSynchronize(ends_[static_cast<std::size_t>(n - 1)].get());
        rc != CUDA_SUCCESS) {
      return cuda_failure(rc, "running the kernel", false);
    }
    const bool throttled =
        throttled_before || clocks_.throttled_now() || clocks_.throttle_polls() != polls_before;
    for (int i = 0; i < n; ++i) {
      float ms = 0;
      if (CUresult rc = api_.cuEventElapsedTime(&ms, starts_[static_cast<std::size_t>(i)].get(),
                                                ends_[static_cast<std::size_t>(i)].get());
          rc != CUDA_SUCCESS) {
        return cuda_failure(rc, "cuEventElapsedTime", false);
      }
      busy += ms;
      if (throttled) {
        ++discarded;
      } else {
        samples.push_back(static_cast<double>(ms) / per_sample / (concurrent ? instances : 1));
      }
    }
    if (discarded > 4 * max_samples) break;  // throttled throughout: give up
    if (undecided && !samples.empty()) {
      undecided = false;
      std::vector<double> first(samples);
      std::nth_element(first.begin(), first.begin() + first.size() / 2, first.end());
      const double median = first[first.size() / 2];
      if (median < settings.short_kernel_ms()) {
        per_sample = LaunchesPerSample(settings, static_cast<float>(median));
        capture();
        samples.clear();
        continue;
      }
    }
    if (static_cast<int>(samples.size()) >= max_samples) break;
    if (SamplingDone(samples, settings, c.best_ms(), racing, min_samples, 1, start, &out)) break;
  }
  out.mutable_conditions()->set_launches_per_sample(per_sample);
  out.mutable_conditions()->set_sm_clock_mhz_after(clocks_.clock_mhz());
  out.mutable_conditions()->set_throttled_samples_discarded(discarded);
  out.mutable_conditions()->set_gpu_busy_ms(busy);
  if (auto st = loaded->Finish(out); !st.ok()) return infra(st);
  if (samples.empty()) {
    out.set_status(v1::RUNTIME_FAULT);
    out.set_message("every sample was taken while the GPU was throttled");
    return finish();
  }
  for (double v : samples) out.add_samples_ms(v);
  out.set_status(v1::OK);
  return finish();
}

}  // namespace

const char* MeasureHelperSource() { return kHelperSource; }

int RunMeasureWorker(const std::vector<std::string>& args) {
  (void)args;
  DieWithParent();
  MessageChannel channel = ParentChannel();
  std::unique_ptr<Worker> worker;
  std::string device_name;
  while (true) {
    v1::WorkerRequest request;
    if (!channel.Receive(&request).ok()) return 0;
    v1::WorkerResponse response;
    switch (request.request_case()) {
      case v1::WorkerRequest::kListDevices: *response.mutable_devices() = ListDevices(); break;
      case v1::WorkerRequest::kInitDevice:
      case v1::WorkerRequest::kSetup: {
        const int ordinal =
            request.has_setup() ? request.setup().device_ordinal() : request.init_device();
        if (worker == nullptr || worker->ordinal() != ordinal) {
          absl::StatusOr<const cuda::Api*> api = cuda::Load();
          if (!api.ok()) {
            response.set_error(std::string(api.status().message()));
            break;
          }
          worker = std::make_unique<Worker>(**api);
          if (absl::Status s = worker->Init(ordinal, &device_name); !s.ok()) {
            response.set_error(std::string(s.message()));
            worker.reset();
            break;
          }
        }
        if (request.has_setup()) {
          if (absl::Status s = worker->Setup(request.setup()); !s.ok()) {
            response.set_error(std::string(s.message()));
            break;
          }
        }
        response.set_setup_done(device_name);
        break;
      }
      case v1::WorkerRequest::kCandidate:
        if (worker == nullptr) {
          response.set_error("candidate before setup");
        } else {
          *response.mutable_measurement() = worker->Measure(request.candidate());
        }
        break;
      default: response.set_error("unknown request");
    }
    const bool lost = response.has_measurement() && response.measurement().context_lost();
    if (!channel.Send(response).ok()) return 0;
    // After a sticky error only a new process recovers.
    if (lost) return 3;
  }
}

}  // namespace ktune
