// A stand-in for ktune's measurement worker: it speaks the worker protocol
// (tuner/measure/measure_worker.h) without a GPU, so the parent side
// (CudaDevice, WorkerClient) is tested on any machine. It reports one GPU,
// takes any set-up, and answers each candidate by its block's x size:
//
//   KTUNE_FAKE_WORKER="64=hang,128=die,256=lose,512=wrong,96=fault"
//
//   hang   never answers (until killed)
//   die    ends at once without answering (SIGKILL)
//   lose   answers runtime_fault with the CUDA context lost, then exits
//   wrong  answers for another candidate (out of step)
//   fault  answers runtime_fault (an ordinary kernel fault)
//
// Any other candidate is ok, its samples all block.x / 100 ms. Compile
// workers ("__worker compile") are the real one (NVRTC runs on any
// machine), except for the variants KTUNE_FAKE_COMPILE names by their
// block_size_x:
//
//   KTUNE_FAKE_COMPILE="64=die,128=hang"
//
//   die    killed mid-compile (SIGKILL once the request is in)
//   hang   never answers (until killed)
//
// With KTUNE_FAKE_WORKER_LOG=FILE each measurement worker appends a line
// "PID REQUEST" to FILE for each request it takes (list, open, setup,
// candidate): which process served what.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ktune/v1/worker.pb.h"
#include "tuner/compile/compile_pool.h"
#include "tuner/ipc/subprocess.h"

namespace ktune {
namespace {

std::map<std::uint32_t, std::string> Script(const char* variable = "KTUNE_FAKE_WORKER") {
  std::map<std::uint32_t, std::string> out;
  const char* env = std::getenv(variable);
  std::string text = env != nullptr ? env : "";
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const std::size_t eq = item.find('=');
    if (eq != std::string::npos) {
      out[static_cast<std::uint32_t>(std::stoul(item.substr(0, eq)))] = item.substr(eq + 1);
    }
    at = end + 1;
  }
  return out;
}

v1::WorkerDevices Devices() {
  v1::WorkerDevices out;
  v1::WorkerDeviceInfo* d = out.add_devices();
  d->set_ordinal(0);
  d->set_name("Fake GPU");
  d->set_uuid("GPU-00000000-0000-0000-0000-00000000fa6e");
  d->set_major(9);
  d->set_minor(0);
  d->set_memory_bytes(std::int64_t{80} << 30);
  d->set_multiprocessors(132);
  d->set_l2_bytes(50 << 20);
  d->set_driver_version(13000);
  d->set_max_shared_per_block_optin(227 << 10);
  return out;
}

int RunFakeMeasureWorker() {
  DieWithParent();
  MessageChannel channel = ParentChannel();
  const std::map<std::uint32_t, std::string> script = Script();
  while (true) {
    v1::WorkerRequest request;
    if (!channel.Receive(&request).ok()) return 0;
    v1::WorkerResponse response;
    bool exit_after = false;
    if (const char* log = std::getenv("KTUNE_FAKE_WORKER_LOG"); log != nullptr) {
      const char* kind = request.has_list_devices()  ? "list"
                         : request.has_init_device() ? "open"
                         : request.has_setup()       ? "setup"
                                                     : "candidate";
      std::ofstream(log, std::ios::app) << getpid() << " " << kind << "\n";
    }
    if (request.has_list_devices()) {
      *response.mutable_devices() = Devices();
    } else if (request.has_init_device() || request.has_setup()) {
      response.set_setup_done("Fake GPU");
    } else if (request.has_candidate()) {
      const v1::WorkerCandidate& c = request.candidate();
      v1::WorkerMeasurement* m = response.mutable_measurement();
      m->set_id(c.id());
      auto it = script.find(c.block().x());
      const std::string action = it != script.end() ? it->second : "";
      if (action == "hang") {
        while (true) pause();
      } else if (action == "die") {
        raise(SIGKILL);
      } else if (action == "lose") {
        m->set_status(v1::RUNTIME_FAULT);
        m->set_message("CUDA_ERROR_ILLEGAL_ADDRESS (fake)");
        m->set_context_lost(true);
        exit_after = true;
      } else if (action == "wrong") {
        m->set_id(c.id() + 1000);
        m->set_status(v1::OK);
        m->add_samples_ms(1.0);
      } else if (action == "fault") {
        m->set_status(v1::RUNTIME_FAULT);
        m->set_message("a fault of the kernel (fake)");
      } else {
        m->set_status(v1::OK);
        for (int i = 0; i < 10; ++i) m->add_samples_ms(c.block().x() / 100.0);
        m->mutable_conditions()->set_launches_per_sample(1);
        m->mutable_conditions()->set_gpu_busy_ms(10 * c.block().x() / 100.0);
        m->set_wall_ms(1.0);
      }
    } else {
      response.set_error("unknown request");
    }
    if (!channel.Send(response).ok()) return 0;
    if (exit_after) return 3;
  }
}

// The block_size_x a compile request defines (#define block_size_x N at
// the top of its source), or 0.
std::uint32_t BlockSizeX(const v1::CompileRequest& request) {
  constexpr std::string_view kDefine = "#define block_size_x ";
  const std::size_t at = request.source().find(kDefine);
  if (at == std::string::npos) return 0;
  return static_cast<std::uint32_t>(
      std::strtoul(request.source().c_str() + at + kDefine.size(), nullptr, 10));
}

int RunFakeCompileWorker(const std::vector<std::string>& args) {
  const std::map<std::uint32_t, std::string> script = Script("KTUNE_FAKE_COMPILE");
  return RunCompileWorker(args, [&script](const v1::CompileRequest& request) {
    auto it = script.find(BlockSizeX(request));
    const std::string action = it != script.end() ? it->second : "";
    if (action == "die") raise(SIGKILL);
    if (action == "hang") {
      while (true) pause();
    }
  });
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "__worker" && args[1] == "compile") {
    return ktune::RunFakeCompileWorker({args.begin() + 2, args.end()});
  }
  if (args.size() >= 2 && args[0] == "__worker" && args[1] == "measure") {
    return ktune::RunFakeMeasureWorker();
  }
  return 2;
}
