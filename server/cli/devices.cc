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
#include "tuner/ipc/subprocess.h"
#include "tuner/store/store.h"
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
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
      ListCudaDevices(WorkerProgram{WorkerExecutable()});
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
    std::vector<std::vector<std::string>> rows;
    for (const v1::WorkerDeviceInfo& g : *gpus) {
      rows.push_back({StrCat("cuda:", g.ordinal()), g.name(), StrCat("sm_", g.major(), g.minor()),
                      StrCat(g.memory_bytes() >> 20, " MiB"), StrCat(g.multiprocessors()),
                      StrCat(g.driver_version() / 1000, ".", (g.driver_version() % 1000) / 10),
                      g.uuid()});
    }
    std::cout << FormatTable({"ID", "NAME", "ARCH", "MEMORY", "SMS", "DRIVER", "UUID"}, rows,
                             {false, false, false, true, true});
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
    std::vector<std::vector<std::string>> rows;
    for (const v1::DeviceInfo& d : resp.devices()) {
      // A replayed recording knows its GPU's name, not its memory or SMs.
      const bool known = d.memory_bytes() > 0;
      rows.push_back({d.id(), d.name(), d.architecture().empty() ? "-" : d.architecture(),
                      known ? StrCat(d.memory_bytes() >> 20, " MiB") : "-",
                      known ? StrCat(d.multiprocessors()) : "-", d.uuid()});
    }
    std::cout << FormatTable({"ID", "NAME", "ARCH", "MEMORY", "SMS", "UUID"}, rows,
                             {false, false, false, true, true});
  }
  *exit_code = kExitOk;
  return std::nullopt;
}
}  // namespace

const Command kDevices{&kDevicesCommand, RunDevices, RemoteDevices};

}  // namespace ktune::cli
