#include "tuner/measure/measure_worker.h"

#include <memory>
#include <string>
#include <utility>

#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/measure/worker.h"

namespace ktune {
namespace {

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
    info->set_uuid(DeviceUuid(api, d));
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

// Opens GPU `ordinal` unless `worker` already has it. False, with
// `response`'s error set, when it cannot.
bool EnsureWorker(int ordinal, std::unique_ptr<Worker>& worker, std::string& device_name,
                  v1::WorkerResponse& response) {
  if (worker != nullptr && worker->ordinal() == ordinal) return true;
  absl::StatusOr<const cuda::Api*> api = cuda::Load();
  if (!api.ok()) {
    response.set_error(std::string(api.status().message()));
    return false;
  }
  worker = std::make_unique<Worker>(**api);
  if (absl::Status s = worker->Init(ordinal, &device_name); !s.ok()) {
    response.set_error(std::string(s.message()));
    worker.reset();
    return false;
  }
  return true;
}

}  // namespace

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
        if (!EnsureWorker(ordinal, worker, device_name, response)) break;
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
