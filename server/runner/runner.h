// What the command line and the daemon share to run a job: opening a device
// by its locator, resolving a spec against it, and building the strategy
// (warm-started from the store when the job asks).
#ifndef KTUNE_SERVER_RUNNER_RUNNER_H_
#define KTUNE_SERVER_RUNNER_RUNNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "tuner/device/device.h"
#include "tuner/session/job.h"
#include "tuner/space/config.h"
#include "tuner/store/store.h"

namespace ktune {

class CompilePool;  // tuner/compile (CUDA builds only)

struct OpenDeviceOptions {
  std::string base_dir = ".";  // a relative sim:FILE starts here
  double sim_speed = 0;        // see SimulatedDevice::set_speed
  int compile_workers = 0;     // GPU: NVRTC worker processes; 0: one per core
  std::string worker_program;  // GPU: the binary that runs "__worker ..."
  // GPU: compile with this pool (shared by a daemon's jobs) rather than a
  // pool of the device's own.
  std::shared_ptr<CompilePool> compile_pool;
};

// What a shared NVRTC pool is doing (see CompilePoolStats).
struct CompileActivity {
  int workers = 0;
  int busy = 0;
  std::int64_t backlog = 0;
  std::int64_t compiled = 0;
  std::int64_t cache_hits = 0;
  double busy_seconds = 0;
};
// Null pool: nothing.
std::optional<CompileActivity> CompileActivityOf(const std::shared_ptr<CompilePool>& pool);

// The NVRTC library's version ("13.0"), or empty when it cannot be loaded
// (or the build has no CUDA).
std::string NvrtcVersion();

// An NVRTC pool to share between GPU devices (see OpenDeviceOptions), sized
// as compile_workers says (0: one per core), using the CUBIN cache.
// FAILED_PRECONDITION without CUDA support in this build.
absl::StatusOr<std::shared_ptr<CompilePool>> StartSharedCompilePool(
    const OpenDeviceOptions& options);

// Opens "sim:FILE" (a recorded space) or a GPU ("0", "cuda:0", a UUID).
// INVALID_ARGUMENT for a malformed locator or an unreadable recording;
// FAILED_PRECONDITION when there is no driver, no GPU or no CUDA support in
// this build.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(const std::string& locator,
                                                   const OpenDeviceOptions& options);

// The job `spec` describes on `device`. Without a kernel in the spec (and on
// a simulated device) the job is the recorded space, with the spec's
// strategy, budget and measurement settings. INVALID_ARGUMENT names the
// field.
absl::StatusOr<Job> ResolveJobOn(const v1::JobSpec& spec, const std::string& base_dir,
                                 const Device& device);

struct BuiltStrategy {
  std::unique_ptr<Strategy> strategy;
  std::string resolved;        // what "auto" became, or the name
  std::int64_t warm_jobs = 0;  // earlier jobs the warm start read
  std::size_t warm_configurations = 0;
};

// The job's strategy. With a store (and the job's warm start on), the
// strategy starts from what other jobs of the same kernel learnt; job
// `job_id` itself is left out. INVALID_ARGUMENT for an unknown strategy or
// option (the message names it).
absl::StatusOr<BuiltStrategy> BuildStrategy(const Job& job, Store* store,
                                            const std::string& job_id);

// A spec for another machine (a daemon): kernel sources named by file (the
// kernel's and a reference kernel's) are read, relative to `base_dir`, into
// the spec. INVALID_ARGUMENT, naming the field, for what cannot travel
// inline: include paths and data files.
absl::Status InlineFiles(v1::JobSpec& spec, const std::string& base_dir);

// A daemon's check of a spec from a client: no field may name a file on the
// daemon's machine. INVALID_ARGUMENT names the field.
absl::Status RejectFileReferences(const v1::JobSpec& spec);

// For SessionOptions::on_store_retry: says each failed attempt to store a
// measurement on stderr, as "PROGRAM: job ID: cannot store its measurement
// (WHY); keeping it and trying again in S s".
std::function<void(const absl::Status& why, double retry_in_s)> SayStoreRetries(std::string program,
                                                                                std::string job_id);

}  // namespace ktune

#endif  // KTUNE_SERVER_RUNNER_RUNNER_H_
