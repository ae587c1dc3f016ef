#include "tuner/ipc/worker_protocol.h"

#include <google/protobuf/descriptor.pb.h>

#include "ktune/v1/worker.pb.h"
#include "tuner/base/sha256.h"
#include "tuner/base/strings.h"

namespace ktune {

const std::string& WorkerProtocol() {
  static const std::string protocol = [] {
    google::protobuf::FileDescriptorProto file;
    v1::WorkerRequest::descriptor()->file()->CopyTo(&file);
    return Sha256Hex(file.SerializeAsString()).substr(0, 16);
  }();
  return protocol;
}

absl::Status CheckWorkerProtocol(const std::vector<std::string>& args) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] != kWorkerProtocolFlag || args[i + 1] == WorkerProtocol()) continue;
    return absl::FailedPreconditionError(
        StrCat("this worker program speaks worker protocol ", WorkerProtocol(),
               ", the program that started it ", args[i + 1],
               ": they come from different builds; install ktune, ktuned and ktune-worker "
               "from one build"));
  }
  return absl::OkStatus();
}

}  // namespace ktune
