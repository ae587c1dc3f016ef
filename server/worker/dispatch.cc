#include "server/worker/dispatch.h"

#include <algorithm>
#include <iostream>

#include "tuner/ipc/worker_protocol.h"

#ifdef KTUNE_HAVE_CUDA
#include "tuner/compile/compile_pool.h"
#include "tuner/measure/measure_worker.h"
#endif

namespace ktune {

std::optional<int> RunIfWorker(const std::vector<std::string>& args, const char* program) {
  if (args.empty() || args[0] != "__worker") return std::nullopt;
  if (absl::Status s = CheckWorkerProtocol(args); !s.ok()) {
    std::cerr << program << ": " << s.message() << "\n";
    return 3;
  }
#ifdef KTUNE_HAVE_CUDA
  const std::vector<std::string> rest(args.begin() + std::min<std::size_t>(2, args.size()),
                                      args.end());
  if (args.size() >= 2 && args[1] == "compile") return RunCompileWorker(rest);
  if (args.size() >= 2 && args[1] == "measure") return RunMeasureWorker(rest);
#endif
  std::cerr << program << ": unknown worker \"" << (args.size() >= 2 ? args[1] : "")
            << "\" (this build runs "
#ifdef KTUNE_HAVE_CUDA
            << "\"compile\" and \"measure\""
#else
            << "none: it was built without CUDA"
#endif
            << ")\n";
  return 1;
}

}  // namespace ktune
