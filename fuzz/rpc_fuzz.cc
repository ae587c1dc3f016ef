// The daemon's requests handled in process: the first byte picks the call
// (SubmitJob, GetBest, GetJob, ListJobs, CancelJob), the rest is the
// request's wire bytes. A scheduler on a small replayed recording answers;
// a submitted job is cancelled at once, so the queue never fills.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "ktune/v1/tuner.pb.h"
#include "server/daemon/scheduler.h"

namespace {

// The scheduler's folder, removed at exit (a plain array: strings are
// destroyed before the exit handler runs).
char folder[] = "/tmp/ktune_fuzz_rpc_XXXXXX";

ktune::Scheduler& TheScheduler() {
  static ktune::Scheduler* scheduler = [] {
    if (mkdtemp(folder) == nullptr) std::abort();
    ktune::SchedulerOptions so;
    so.db_path = std::string(folder) + "/fuzz.db";
    so.devices = {"sim:" KTUNE_FUZZ_DIR "/corpus/recorded/small_cache.json"};
    so.limits.max_evaluations = 4;
    so.limits.max_queued = 8;
    auto* s = new ktune::Scheduler(so);
    if (!s->Start().ok()) std::abort();
    std::atexit([] {
      char command[64];
      std::snprintf(command, sizeof command, "rm -rf %s", folder);
      (void)std::system(command);
    });
    return s;
  }();
  return *scheduler;
}

// Parses the bytes as a Request and, when they parse, hands it to `call`.
template <typename Request, typename Call>
void Handle(const std::uint8_t* data, std::size_t size, Call call) {
  Request request;
  if (request.ParseFromArray(data, static_cast<int>(size))) call(request);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  if (size == 0) return 0;
  Scheduler& scheduler = TheScheduler();
  const std::uint8_t call = data[0] % 5;
  ++data;
  --size;
  switch (call) {
    case 0:
      Handle<v1::SubmitJobRequest>(data, size, [&](const v1::SubmitJobRequest& r) {
        absl::StatusOr<v1::SubmitJobResponse> resp = scheduler.Submit(r);
        if (!resp.ok()) return;
        v1::CancelJobRequest cancel;
        cancel.set_job_id(resp->job_id());
        (void)scheduler.Cancel(cancel);
      });
      break;
    case 1:
      Handle<v1::GetBestRequest>(data, size, [&](const auto& r) { (void)scheduler.GetBest(r); });
      break;
    case 2:
      Handle<v1::GetJobRequest>(data, size, [&](const auto& r) { (void)scheduler.GetJob(r); });
      break;
    case 3:
      Handle<v1::ListJobsRequest>(data, size, [&](const auto& r) { (void)scheduler.ListJobs(r); });
      break;
    default:
      Handle<v1::CancelJobRequest>(data, size, [&](const auto& r) { (void)scheduler.Cancel(r); });
      break;
  }
  return 0;
}
