#include "tuner/cuda/driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune::cuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

absl::StatusOr<const Api*> LoadOnce() {
  const char* path = std::getenv("KTUNE_CUDA_DRIVER");
  if (path == nullptr || *path == '\0') path = "libcuda.so.1";
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    // dlerror names the library itself: "libcuda.so.1: cannot open ...".
    const char* err = dlerror();
    return absl::FailedPreconditionError(StrCat(
        "no CUDA driver on this machine (", err != nullptr ? err : StrCat(path, ": not found"),
        "); only simulated devices (--device sim:FILE) are available"));
  }
  auto get = reinterpret_cast<GetProcAddress>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get == nullptr) {
    return absl::FailedPreconditionError(
        "the CUDA driver is too old (no cuGetProcAddress_v2; a CUDA 12 or newer driver is needed)");
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  auto bind = [&](const char* name, int version, auto* fn) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult found{};
    if (get(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
        p == nullptr) {
      missing += StrCat(" ", name);
      return;
    }
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
  };
  // Each entry point is asked for at the version whose signature the
  // declaration in cuda.h has: asking for the toolkit's own version can
  // return a newer ABI (cuCtxSynchronize gained a context argument in 13.0).
#define KTUNE_BIND(name, version) bind(#name, version, &api->name)
  KTUNE_BIND(cuInit, 2000);
  KTUNE_BIND(cuGetErrorName, 6000);
  KTUNE_BIND(cuGetErrorString, 6000);
  KTUNE_BIND(cuDriverGetVersion, 2020);
  KTUNE_BIND(cuDeviceGetCount, 2000);
  KTUNE_BIND(cuDeviceGet, 2000);
  KTUNE_BIND(cuDeviceGetName, 2000);
  KTUNE_BIND(cuDeviceGetUuid, 11040);
  KTUNE_BIND(cuDeviceTotalMem, 3020);
  KTUNE_BIND(cuDeviceGetAttribute, 2000);
  KTUNE_BIND(cuDevicePrimaryCtxRetain, 7000);
  KTUNE_BIND(cuDevicePrimaryCtxRelease, 11000);
  KTUNE_BIND(cuDevicePrimaryCtxSetFlags, 11000);
  KTUNE_BIND(cuCtxSetCurrent, 4000);
  KTUNE_BIND(cuCtxSynchronize, 2000);
  KTUNE_BIND(cuCtxGetCurrent, 4000);
  KTUNE_BIND(cuModuleLoadData, 2000);
  KTUNE_BIND(cuModuleUnload, 2000);
  KTUNE_BIND(cuModuleGetFunction, 2000);
  KTUNE_BIND(cuModuleGetGlobal, 3020);
  KTUNE_BIND(cuFuncGetAttribute, 2020);
  KTUNE_BIND(cuFuncSetAttribute, 9000);
  KTUNE_BIND(cuLaunchKernel, 4000);
  KTUNE_BIND(cuStreamCreate, 2000);
  KTUNE_BIND(cuStreamDestroy, 4000);
  KTUNE_BIND(cuStreamSynchronize, 2000);
  KTUNE_BIND(cuStreamWaitEvent, 3020);
  KTUNE_BIND(cuStreamBeginCapture, 10010);
  KTUNE_BIND(cuStreamEndCapture, 10000);
  KTUNE_BIND(cuGraphInstantiateWithFlags, 11040);
  KTUNE_BIND(cuGraphLaunch, 10000);
  KTUNE_BIND(cuGraphExecDestroy, 10000);
  KTUNE_BIND(cuGraphDestroy, 10000);
  KTUNE_BIND(cuEventCreate, 2000);
  KTUNE_BIND(cuEventDestroy, 4000);
  KTUNE_BIND(cuEventRecord, 2000);
  KTUNE_BIND(cuEventSynchronize, 2000);
  KTUNE_BIND(cuEventQuery, 2000);
  KTUNE_BIND(cuEventElapsedTime, 2000);
  KTUNE_BIND(cuMemAlloc, 3020);
  KTUNE_BIND(cuMemFree, 3020);
  KTUNE_BIND(cuMemAllocHost, 3020);
  KTUNE_BIND(cuMemFreeHost, 2000);
  KTUNE_BIND(cuMemcpyHtoDAsync, 3020);
  KTUNE_BIND(cuMemcpyDtoHAsync, 3020);
  KTUNE_BIND(cuMemcpyDtoDAsync, 3020);
  KTUNE_BIND(cuMemsetD8Async, 3020);
  KTUNE_BIND(cuMemsetD32Async, 3020);
#undef KTUNE_BIND
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        StrCat("the CUDA driver lacks functions ktune needs:", missing));
  }
  const CUresult rc = api->cuInit(0);
  if (rc != CUDA_SUCCESS) {
    const char* name = nullptr;
    api->cuGetErrorName(rc, &name);
    return absl::FailedPreconditionError(
        StrCat("cuInit failed: ", name != nullptr ? name : "unknown error",
               rc == CUDA_ERROR_NO_DEVICE ? " (no CUDA GPU is visible)" : ""));
  }
  return api.release();  // lives for the process
}

}  // namespace

absl::StatusOr<const Api*> Load() {
  static const absl::StatusOr<const Api*>* api = new absl::StatusOr<const Api*>(LoadOnce());
  return *api;
}

absl::Status Check(const Api& api, CUresult rc, const char* call) {
  if (rc == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  api.cuGetErrorName(rc, &name);
  api.cuGetErrorString(rc, &text);
  return absl::InternalError(StrCat(call, " failed: ", name != nullptr ? name : "unknown", " (",
                                    text != nullptr ? text : "", ")"));
}

bool IsStickyError(CUresult rc) {
  switch (rc) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN: return true;
    default: return false;
  }
}

absl::StatusOr<Context> Context::Open(const Api& api, int ordinal) {
  CUdevice device = 0;
  if (auto s = Check(api, api.cuDeviceGet(&device, ordinal), "cuDeviceGet"); !s.ok()) return s;
  // Block rather than spin while waiting for the GPU: a spinning wait takes a
  // core from the compile workers. (Fails harmlessly if the context is
  // already active with other flags.)
  api.cuDevicePrimaryCtxSetFlags(device, CU_CTX_SCHED_BLOCKING_SYNC);
  CUcontext ctx = nullptr;
  if (auto s = Check(api, api.cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
      !s.ok()) {
    return s;
  }
  Context owner(&api, device);
  if (auto s = Check(api, api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"); !s.ok()) return s;
  return owner;
}

Context::~Context() {
  if (device_ < 0) return;
  const CUresult rc = api_->cuDevicePrimaryCtxRelease(device_);
  if (rc != CUDA_SUCCESS)
    std::fprintf(stderr, "ktune: releasing the CUDA context failed (%d)\n", rc);
}

template <typename Handle, CUresult (*Release)(const Api&, Handle)>
void Owner<Handle, Release>::Reset() noexcept {
  if (h_ == Handle{}) return;
  const CUresult rc = Release(*api_, h_);
  // After a sticky error every release fails; there is nothing to do but
  // let the process end, so say it once per kind of handle at most.
  if (rc != CUDA_SUCCESS && !IsStickyError(rc)) {
    std::fprintf(stderr, "ktune: releasing a CUDA handle failed (%d)\n", rc);
  }
  h_ = Handle{};
}

CUresult ReleaseModule(const Api& api, CUmodule m) { return api.cuModuleUnload(m); }
CUresult ReleaseStream(const Api& api, CUstream s) { return api.cuStreamDestroy(s); }
CUresult ReleaseEvent(const Api& api, CUevent e) { return api.cuEventDestroy(e); }
CUresult ReleaseGraphExec(const Api& api, CUgraphExec g) { return api.cuGraphExecDestroy(g); }
CUresult ReleaseGraph(const Api& api, CUgraph g) { return api.cuGraphDestroy(g); }

template class Owner<CUmodule, ReleaseModule>;
template class Owner<CUstream, ReleaseStream>;
template class Owner<CUevent, ReleaseEvent>;
template class Owner<CUgraphExec, ReleaseGraphExec>;
template class Owner<CUgraph, ReleaseGraph>;

absl::StatusOr<DeviceMemory> DeviceMemory::Allocate(const Api& api, std::size_t bytes) {
  DeviceMemory m;
  m.api_ = &api;
  if (bytes == 0) return m;
  if (auto s = Check(api, api.cuMemAlloc(&m.ptr_, bytes), "cuMemAlloc"); !s.ok()) {
    return absl::ResourceExhaustedError(StrCat(s.message(), " for ", bytes, " bytes"));
  }
  m.bytes_ = bytes;
  return m;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& o) noexcept {
  if (this != &o) {
    this->~DeviceMemory();
    api_ = o.api_;
    ptr_ = std::exchange(o.ptr_, 0);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (ptr_ == 0) return;
  const CUresult rc = api_->cuMemFree(ptr_);
  if (rc != CUDA_SUCCESS && !IsStickyError(rc)) {
    std::fprintf(stderr, "ktune: cuMemFree failed (%d)\n", rc);
  }
  ptr_ = 0;
}

absl::StatusOr<PinnedMemory> PinnedMemory::Allocate(const Api& api, std::size_t bytes) {
  PinnedMemory m;
  m.api_ = &api;
  if (bytes == 0) return m;
  if (auto s = Check(api, api.cuMemAllocHost(&m.ptr_, bytes), "cuMemAllocHost"); !s.ok()) {
    return absl::ResourceExhaustedError(StrCat(s.message(), " for ", bytes, " bytes"));
  }
  m.bytes_ = bytes;
  return m;
}

PinnedMemory& PinnedMemory::operator=(PinnedMemory&& o) noexcept {
  if (this != &o) {
    this->~PinnedMemory();
    api_ = o.api_;
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedMemory::~PinnedMemory() {
  if (ptr_ == nullptr) return;
  const CUresult rc = api_->cuMemFreeHost(ptr_);
  if (rc != CUDA_SUCCESS && !IsStickyError(rc)) {
    std::fprintf(stderr, "ktune: cuMemFreeHost failed (%d)\n", rc);
  }
  ptr_ = nullptr;
}

absl::StatusOr<Module> LoadModule(const Api& api, const std::string& image) {
  CUmodule m = nullptr;
  if (auto s = Check(api, api.cuModuleLoadData(&m, image.data()), "cuModuleLoadData"); !s.ok()) {
    return s;
  }
  return Module(&api, m);
}

absl::Status CopyToSymbol(const Api& api, CUmodule module, const std::string& name, CUdeviceptr src,
                          std::size_t bytes, CUstream s) {
  CUdeviceptr symbol = 0;
  std::size_t symbol_bytes = 0;
  const CUresult rc = api.cuModuleGetGlobal(&symbol, &symbol_bytes, module, name.c_str());
  if (rc == CUDA_ERROR_NOT_FOUND) {
    return absl::NotFoundError(StrCat("the kernel's module has no __constant__ variable '", name,
                                      "' (a constant argument names one at global scope)"));
  }
  KTUNE_RETURN_IF_ERROR(Check(api, rc, "cuModuleGetGlobal"));
  if (symbol_bytes != bytes) {
    return absl::InvalidArgumentError(StrCat("the kernel's __constant__ '", name, "' holds ",
                                             symbol_bytes, " bytes; the argument gives ", bytes));
  }
  return Check(api, api.cuMemcpyDtoDAsync(symbol, src, bytes, s), "cuMemcpyDtoDAsync(constant)");
}

absl::StatusOr<Stream> CreateStream(const Api& api) {
  CUstream s = nullptr;
  if (auto st = Check(api, api.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
      !st.ok()) {
    return st;
  }
  return Stream(&api, s);
}

absl::StatusOr<Event> CreateEvent(const Api& api) {
  CUevent e = nullptr;
  if (auto s = Check(api, api.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"); !s.ok()) {
    return s;
  }
  return Event(&api, e);
}

}  // namespace ktune::cuda
