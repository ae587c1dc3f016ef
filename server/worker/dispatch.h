// The worker processes' entry: a compile worker (NVRTC) or the measurement
// worker (the GPU), started by a job with "__worker compile" or "__worker
// measure". ktune-worker runs them, loading only what a worker needs; ktune
// and ktuned run them too, where ktune-worker is not installed beside them.
#ifndef KTUNE_SERVER_WORKER_DISPATCH_H_
#define KTUNE_SERVER_WORKER_DISPATCH_H_

#include <optional>
#include <string>
#include <vector>

namespace ktune {

// For "__worker compile" and "__worker measure" (argv after the program
// name) runs the worker and returns its exit code; nullopt for any other
// command line. A worker whose parent names another worker protocol
// (tuner/ipc/worker_protocol.h) says so and exits with 3. `program` names
// the binary in messages.
std::optional<int> RunIfWorker(const std::vector<std::string>& args, const char* program);

}  // namespace ktune

#endif  // KTUNE_SERVER_WORKER_DISPATCH_H_
