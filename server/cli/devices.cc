// ktune devices: this machine's GPUs (asked of a measurement worker, so
// ktune itself never loads the driver), or a daemon's devices.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"
#include "tuner/ipc/subprocess.h"
#ifdef KTUNE_HAVE_CUDA
#include "tuner/device/cuda_device.h"
#endif

namespace ktune::cli {
namespace {

const CommandSpec kDevicesCommand{
    "devices", "ktune devices [--server ADDR] [--json]",
    "Lists this machine's CUDA GPUs (or a daemon's devices): name, architecture,\n"
    "memory, driver.",
    WithRemoteFlags({}), 0};

std::optional<Failure> RunDevices(const Args& args, int* exit_code) {
#ifdef KTUNE_HAVE_CUDA
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(WorkerProgram{SelfExecutable()});
#else
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = absl::FailedPreconditionError(
      "this ktune was built without the CUDA toolkit: only simulated devices (sim:FILE)");
#endif
  if (args.Has("json")) {
    Json out = Json::MakeObject();
    Json list = Json::MakeArray();
    if (gpus.ok()) {
      for (const v1::WorkerDeviceInfo& g : *gpus) {
        Json d = Json::MakeObject();
        d.Set("id", StrCat("cuda:", g.ordinal()));
        d.Set("name", g.name());
        d.Set("architecture", StrCat("sm_", g.major(), g.minor()));
        d.Set("uuid", g.uuid());
        d.Set("memory_bytes", g.memory_bytes());
        d.Set("multiprocessors", g.multiprocessors());
        d.Set("l2_bytes", g.l2_bytes());
        d.Set("driver", StrCat(g.driver_version() / 1000, ".", (g.driver_version() % 1000) / 10));
        list.Push(std::move(d));
      }
    }
    out.Set("devices", std::move(list));
    if (!gpus.ok()) out.Set("error", std::string(gpus.status().message()));
    std::cout << out.Dump() << "\n";
  } else if (gpus.ok()) {
    std::printf("%-8s  %-28s  %-6s  %10s  %4s  %-7s  %s\n", "ID", "NAME", "ARCH", "MEMORY", "SMS",
                "DRIVER", "UUID");
    for (const v1::WorkerDeviceInfo& g : *gpus) {
      std::printf("%-8s  %-28s  %-6s  %7lld MiB  %4d  %-7s  %s\n",
                  StrCat("cuda:", g.ordinal()).c_str(), g.name().c_str(),
                  StrCat("sm_", g.major(), g.minor()).c_str(),
                  static_cast<long long>(g.memory_bytes() >> 20), g.multiprocessors(),
                  StrCat(g.driver_version() / 1000, ".", (g.driver_version() % 1000) / 10).c_str(),
                  g.uuid().c_str());
    }
  }
  if (!gpus.ok()) {
    if (!args.Has("json")) std::cerr << "ktune devices: " << gpus.status().message() << "\n";
    *exit_code = kExitError;
    return std::nullopt;
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteDevices(const Connection& c, const Args& args, int* exit_code) {
  const bool json = args.Has("json");
  grpc::Status rpc;
  v1::ListDevicesResponse resp;
  grpc::ClientContext ctx;
  Setup(ctx, c, c.timeout_s);
  rpc = c.stub->ListDevices(&ctx, v1::ListDevicesRequest(), &resp);
  if (!rpc.ok()) return RpcFailure(c, rpc);
  if (json) {
    Json out = Json::MakeObject();
    Json list = Json::MakeArray();
    for (const v1::DeviceInfo& d : resp.devices()) list.Push(DeviceToJson(DeviceFromProto(d)));
    out.Set("devices", std::move(list));
    std::cout << out.Dump() << "\n";
  } else {
    std::printf("%-40s  %-28s  %-6s  %10s  %4s  %s\n", "ID", "NAME", "ARCH", "MEMORY", "SMS",
                "UUID");
    for (const v1::DeviceInfo& d : resp.devices()) {
      std::printf("%-40s  %-28s  %-6s  %7lld MiB  %4d  %s\n", d.id().c_str(), d.name().c_str(),
                  d.architecture().c_str(), static_cast<long long>(d.memory_bytes() >> 20),
                  d.multiprocessors(), d.uuid().c_str());
    }
  }
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kDevices{&kDevicesCommand, RunDevices, RemoteDevices};

}  // namespace ktune::cli
