// Which messages a job and its worker processes exchange: a hash of
// ktune/v1/worker.proto as compiled into this binary. The parent passes its
// own on the worker's command line; a worker program built from another
// version of the file (a ktune-worker left from another install) refuses to
// run rather than misread the requests.
#ifndef KTUNE_TUNER_IPC_WORKER_PROTOCOL_H_
#define KTUNE_TUNER_IPC_WORKER_PROTOCOL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ktune {

inline constexpr char kWorkerProtocolFlag[] = "--protocol";

// 16 hex digits, the same in every binary built from the same worker.proto.
const std::string& WorkerProtocol();

// For a worker's arguments: OK when they name no protocol or this binary's;
// FAILED_PRECONDITION naming both otherwise.
absl::Status CheckWorkerProtocol(const std::vector<std::string>& args);

}  // namespace ktune

#endif  // KTUNE_TUNER_IPC_WORKER_PROTOCOL_H_
