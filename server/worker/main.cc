// ktune-worker: runs the worker processes of ktune and ktuned (a compile
// worker or the measurement worker). It links the compiler front end and
// the measurement code and nothing of the store, gRPC or the search, so a
// worker starts in a fraction of the time the full program takes to load;
// ktune and ktuned start it when it is installed beside them
// (tuner/ipc/subprocess.h: WorkerExecutable).
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "server/worker/dispatch.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (std::optional<int> code = ktune::RunIfWorker(args, "ktune-worker")) return *code;
  std::cerr << "ktune-worker: runs the worker processes of ktune and ktuned, which start it "
               "(\"__worker compile\" or \"__worker measure\"); it is not a command to run by "
               "hand\n";
  return 2;
}
