#include "tuner/cuda/nvml.h"

#include <dlfcn.h>

namespace ktune {
namespace {

// From NVML's C API (stable ABI).
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr int kNvmlClockSm = 1;
constexpr unsigned long long kSlowdownReasons =
    0x0000000000000008ULL |  // hardware slowdown
    0x0000000000000020ULL |  // software thermal slowdown
    0x0000000000000040ULL |  // hardware thermal slowdown
    0x0000000000000080ULL;   // hardware power brake

struct NvmlApi {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*energy)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned int*) = nullptr;
};

const NvmlApi* LoadNvml() {
  static const NvmlApi* api = []() -> const NvmlApi* {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return nullptr;
    auto* a = new NvmlApi();
    a->init = reinterpret_cast<NvmlReturn (*)()>(dlsym(h, "nvmlInit_v2"));
    a->by_uuid = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
        dlsym(h, "nvmlDeviceGetHandleByUUID"));
    a->clock = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(
        dlsym(h, "nvmlDeviceGetClockInfo"));
    a->max_clock = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned int*)>(
        dlsym(h, "nvmlDeviceGetMaxClockInfo"));
    a->reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
        dlsym(h, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (a->reasons == nullptr) {
      a->reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
          dlsym(h, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    }
    a->energy = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
        dlsym(h, "nvmlDeviceGetTotalEnergyConsumption"));
    a->power = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*)>(
        dlsym(h, "nvmlDeviceGetPowerUsage"));
    if (a->init == nullptr || a->by_uuid == nullptr || a->clock == nullptr || a->init() != 0) {
      return nullptr;
    }
    return a;
  }();
  return api;
}

}  // namespace

Nvml Nvml::ForUuid(const std::string& uuid) {
  Nvml n;
  const NvmlApi* api = LoadNvml();
  if (api == nullptr) return n;
  NvmlDevice d = nullptr;
  if (api->by_uuid(uuid.c_str(), &d) == 0) n.device_ = d;
  return n;
}

int Nvml::SmClockMhz() const {
  const NvmlApi* api = LoadNvml();
  unsigned int mhz = 0;
  if (api == nullptr || device_ == nullptr || api->clock(device_, kNvmlClockSm, &mhz) != 0) {
    return 0;
  }
  return static_cast<int>(mhz);
}

int Nvml::MaxSmClockMhz() const {
  const NvmlApi* api = LoadNvml();
  unsigned int mhz = 0;
  if (api == nullptr || device_ == nullptr || api->max_clock == nullptr ||
      api->max_clock(device_, kNvmlClockSm, &mhz) != 0) {
    return 0;
  }
  return static_cast<int>(mhz);
}

bool Nvml::Throttled() const {
  const NvmlApi* api = LoadNvml();
  unsigned long long reasons = 0;
  if (api == nullptr || device_ == nullptr || api->reasons == nullptr ||
      api->reasons(device_, &reasons) != 0) {
    return false;
  }
  return (reasons & kSlowdownReasons) != 0;
}

std::optional<std::uint64_t> Nvml::EnergyMillijoules() const {
  const NvmlApi* api = LoadNvml();
  unsigned long long mj = 0;
  if (api == nullptr || device_ == nullptr || api->energy == nullptr ||
      api->energy(device_, &mj) != 0) {
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(mj);
}

std::optional<unsigned> Nvml::PowerMilliwatts() const {
  const NvmlApi* api = LoadNvml();
  unsigned int mw = 0;
  if (api == nullptr || device_ == nullptr || api->power == nullptr ||
      api->power(device_, &mw) != 0) {
    return std::nullopt;
  }
  return mw;
}

}  // namespace ktune
