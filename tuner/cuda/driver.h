// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1 and
// cuGetProcAddress), never linked: ktune starts on machines without a
// driver and says so. Only the measurement worker process uses it.
//
// Every handle has one move-only owner whose destructor never throws (it
// logs a failing release). Each call's failure becomes an absl::Status
// naming the call and the driver's error name.
#ifndef KTUNE_TUNER_CUDA_DRIVER_H_
#define KTUNE_TUNER_CUDA_DRIVER_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ktune::cuda {

// The driver's entry points. One per process; immutable after Load.
struct Api {
#define KTUNE_CUDA_FN(name) decltype(&::name) name = nullptr  // NOLINT(bugprone-macro-parentheses)
  KTUNE_CUDA_FN(cuInit);
  KTUNE_CUDA_FN(cuGetErrorName);
  KTUNE_CUDA_FN(cuGetErrorString);
  KTUNE_CUDA_FN(cuDriverGetVersion);
  KTUNE_CUDA_FN(cuDeviceGetCount);
  KTUNE_CUDA_FN(cuDeviceGet);
  KTUNE_CUDA_FN(cuDeviceGetName);
  KTUNE_CUDA_FN(cuDeviceGetUuid);
  KTUNE_CUDA_FN(cuDeviceTotalMem);
  KTUNE_CUDA_FN(cuDeviceGetAttribute);
  KTUNE_CUDA_FN(cuDevicePrimaryCtxRetain);
  KTUNE_CUDA_FN(cuDevicePrimaryCtxRelease);
  KTUNE_CUDA_FN(cuDevicePrimaryCtxSetFlags);
  KTUNE_CUDA_FN(cuCtxSetCurrent);
  KTUNE_CUDA_FN(cuCtxSynchronize);
  KTUNE_CUDA_FN(cuCtxGetCurrent);
  KTUNE_CUDA_FN(cuModuleLoadData);
  KTUNE_CUDA_FN(cuModuleUnload);
  KTUNE_CUDA_FN(cuModuleGetFunction);
  KTUNE_CUDA_FN(cuModuleGetGlobal);
  KTUNE_CUDA_FN(cuFuncGetAttribute);
  KTUNE_CUDA_FN(cuFuncSetAttribute);
  KTUNE_CUDA_FN(cuLaunchKernel);
  KTUNE_CUDA_FN(cuStreamCreate);
  KTUNE_CUDA_FN(cuStreamDestroy);
  KTUNE_CUDA_FN(cuStreamSynchronize);
  KTUNE_CUDA_FN(cuStreamWaitEvent);
  KTUNE_CUDA_FN(cuStreamBeginCapture);
  KTUNE_CUDA_FN(cuStreamEndCapture);
  KTUNE_CUDA_FN(cuGraphInstantiateWithFlags);
  KTUNE_CUDA_FN(cuGraphLaunch);
  KTUNE_CUDA_FN(cuGraphExecDestroy);
  KTUNE_CUDA_FN(cuGraphDestroy);
  KTUNE_CUDA_FN(cuEventCreate);
  KTUNE_CUDA_FN(cuEventDestroy);
  KTUNE_CUDA_FN(cuEventRecord);
  KTUNE_CUDA_FN(cuEventSynchronize);
  KTUNE_CUDA_FN(cuEventQuery);
  KTUNE_CUDA_FN(cuEventElapsedTime);
  KTUNE_CUDA_FN(cuMemAlloc);
  KTUNE_CUDA_FN(cuMemFree);
  KTUNE_CUDA_FN(cuMemAllocHost);
  KTUNE_CUDA_FN(cuMemFreeHost);
  KTUNE_CUDA_FN(cuMemcpyHtoDAsync);
  KTUNE_CUDA_FN(cuMemcpyDtoHAsync);
  KTUNE_CUDA_FN(cuMemcpyDtoDAsync);
  KTUNE_CUDA_FN(cuMemsetD8Async);
  KTUNE_CUDA_FN(cuMemsetD32Async);
#undef KTUNE_CUDA_FN
};

// Loads the driver once per process and calls cuInit(0).
// FAILED_PRECONDITION when no driver is installed (saying so plainly) or
// cuInit fails (e.g. no GPU).
absl::StatusOr<const Api*> Load();

// "cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory
// access was encountered)". INTERNAL unless `rc` is CUDA_SUCCESS.
absl::Status Check(const Api& api, CUresult rc, const char* call);

// True for errors after which the context is unusable: only a new process
// recovers (illegal address, launch failure, misaligned address, ...).
bool IsStickyError(CUresult rc);

// ------------------------------------------------------------------ owners

// Retains a device's primary context and makes it current. Move-only.
class Context {
 public:
  static absl::StatusOr<Context> Open(const Api& api, int ordinal);
  Context(Context&& o) noexcept : api_(o.api_), device_(std::exchange(o.device_, -1)) {}
  Context& operator=(Context&&) = delete;
  Context(const Context&) = delete;
  ~Context();
  CUdevice device() const { return device_; }

 private:
  Context(const Api* api, CUdevice device) : api_(api), device_(device) {}
  const Api* api_;
  CUdevice device_ = -1;
};

// A generic owner: Handle released by Release(api, handle). Move-only.
template <typename Handle, CUresult (*Release)(const Api&, Handle)>
class Owner {
 public:
  Owner() = default;
  Owner(const Api* api, Handle h) : api_(api), h_(h) {}
  Owner(Owner&& o) noexcept : api_(o.api_), h_(std::exchange(o.h_, Handle{})) {}
  Owner& operator=(Owner&& o) noexcept {
    if (this != &o) {
      Reset();
      api_ = o.api_;
      h_ = std::exchange(o.h_, Handle{});
    }
    return *this;
  }
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() { Reset(); }

  Handle get() const { return h_; }
  explicit operator bool() const { return h_ != Handle{}; }
  void Reset() noexcept;

 private:
  const Api* api_ = nullptr;
  Handle h_{};
};

CUresult ReleaseModule(const Api& api, CUmodule m);
CUresult ReleaseStream(const Api& api, CUstream s);
CUresult ReleaseEvent(const Api& api, CUevent e);
CUresult ReleaseGraphExec(const Api& api, CUgraphExec g);
CUresult ReleaseGraph(const Api& api, CUgraph g);

using Module = Owner<CUmodule, ReleaseModule>;
using Stream = Owner<CUstream, ReleaseStream>;
using Event = Owner<CUevent, ReleaseEvent>;
using GraphExec = Owner<CUgraphExec, ReleaseGraphExec>;
using Graph = Owner<CUgraph, ReleaseGraph>;

// Device memory. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  static absl::StatusOr<DeviceMemory> Allocate(const Api& api, std::size_t bytes);
  DeviceMemory(DeviceMemory&& o) noexcept
      : api_(o.api_), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();

  CUdeviceptr get() const { return ptr_; }
  std::size_t size_bytes() const { return bytes_; }

 private:
  const Api* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

// Page-locked host memory. Move-only.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  static absl::StatusOr<PinnedMemory> Allocate(const Api& api, std::size_t bytes);
  PinnedMemory(PinnedMemory&& o) noexcept
      : api_(o.api_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedMemory& operator=(PinnedMemory&& o) noexcept;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  ~PinnedMemory();

  void* get() const { return ptr_; }
  std::size_t size_bytes() const { return bytes_; }

 private:
  const Api* api_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

absl::StatusOr<Module> LoadModule(const Api& api, const std::string& image);
// Enqueues on `s` a copy of `bytes` from device memory `src` into the
// __constant__ (or __device__) variable `name` of `module`. NOT_FOUND when
// the module has no variable of that name, INVALID_ARGUMENT when the
// variable holds another number of bytes (both messages say the sizes and
// name the variable).
absl::Status CopyToSymbol(const Api& api, CUmodule module, const std::string& name, CUdeviceptr src,
                          std::size_t bytes, CUstream s);
absl::StatusOr<Stream> CreateStream(const Api& api);
absl::StatusOr<Event> CreateEvent(const Api& api);

}  // namespace ktune::cuda

#endif  // KTUNE_TUNER_CUDA_DRIVER_H_
