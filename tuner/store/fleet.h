// A fleet's job queue: the part of a shared store (PostgreSQL) that lets
// many daemons share one queue. A job queued by any daemon names the GPU
// model it needs; a daemon with an idle GPU of that model claims it
// (SELECT ... FOR UPDATE SKIP LOCKED), and its claim is a lease that the
// daemon's heartbeat renews. When a daemon dies its leases lapse and
// another daemon of the model claims the job, which resumes from the store.
//
// A job submitted to a daemon that serves no GPU of its model is handed
// over as a submission: a daemon of the model plans it, queues it and
// answers with its id (or why it was refused).
#ifndef KTUNE_TUNER_STORE_FLEET_H_
#define KTUNE_TUNER_STORE_FLEET_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/store/store.h"

namespace ktune {

// A device a daemon of the fleet serves, as the fleet sees it.
struct FleetDevice {
  std::string model;  // what jobs ask for (FleetModelOf)
  DeviceInfo info;
  std::string locator;  // the daemon's name for it
};

// The model of a device: GPUs by name and architecture; a recording
// replayed by several daemons is one model (its UUID).
std::string FleetModelOf(const DeviceInfo& device);

// A submission handed to the daemons of its model.
struct FleetSubmission {
  std::int64_t id = 0;
  std::string spec;  // serialized ktune.v1.JobSpec, as submitted
  int priority = 0;
  std::string model;
  std::string client;  // who submitted it (JobRecord::client)
};

// What a heartbeat learnt.
struct FleetBeat {
  // This daemon's running jobs whose cancellation a client asked for (on
  // any daemon).
  std::vector<std::string> cancel;
  // Jobs this daemon runs whose lease lapsed and that another daemon took
  // over: stop them without recording anything more.
  std::vector<std::string> lost;
};

// Not thread-safe (one per connection, like Store).
class FleetQueue {
 public:
  virtual ~FleetQueue() = default;

  // Says that `daemon` (ProcessName::Encode) lives and serves `devices`,
  // and renews the leases (lease_until = now + lease) of `running`, the
  // jobs it believes it runs, where they are still its own; a job in its
  // name that it does not list lapses.
  virtual absl::StatusOr<FleetBeat> Heartbeat(const std::string& daemon,
                                              const std::vector<FleetDevice>& devices,
                                              const std::vector<std::string>& running,
                                              std::chrono::milliseconds lease) = 0;
  // Removes `daemon` from the fleet (a clean stop).
  virtual absl::Status Leave(const std::string& daemon) = 0;

  // The model a request for device `wanted` (a model, a name, a UUID or a
  // daemon's locator) means, among daemons seen within `alive`; NOT_FOUND
  // when no live daemon serves it.
  virtual absl::StatusOr<std::string> ResolveModel(const std::string& wanted,
                                                   std::chrono::milliseconds alive) = 0;

  // How many of the fleet's jobs wait to be claimed (queued or
  // interrupted), on any model.
  virtual absl::StatusOr<std::int64_t> Waiting() = 0;

  // How many of the fleet's jobs that `client` submitted are unfinished:
  // queued, running or interrupted (they will run), on any model.
  virtual absl::StatusOr<std::int64_t> Unfinished(const std::string& client) = 0;

  // Marks a queued job as the fleet's, to run on a GPU of `model`.
  virtual absl::Status Offer(const std::string& job_id, const std::string& model) = 0;

  // Claims the next job for one of `models`: queued, interrupted, or
  // running with a lapsed lease; highest priority first, then oldest. It
  // is then running, by `daemon`, with a lease. Null when none waits.
  virtual absl::StatusOr<std::optional<JobRecord>> Claim(const std::string& daemon,
                                                         const std::vector<std::string>& models,
                                                         std::chrono::milliseconds lease) = 0;

  // Asks for a job's cancellation. A queued (or interrupted) job is
  // cancelled at once (returns true); a running one is flagged for its
  // daemon's next heartbeat (returns false). FAILED_PRECONDITION when it
  // already ended; NOT_FOUND when there is no such job.
  virtual absl::StatusOr<bool> RequestCancel(const std::string& job_id) = 0;

  // Submissions for daemons of another model.
  virtual absl::StatusOr<std::int64_t> Hand(const std::string& spec, int priority,
                                            const std::string& model,
                                            const std::string& client) = 0;
  virtual absl::StatusOr<std::optional<FleetSubmission>> TakeSubmission(
      const std::vector<std::string>& models) = 0;
  // The answer: the job's id, or why it was refused (`error` non-empty,
  // with `code` an absl::StatusCode).
  virtual absl::Status Answer(std::int64_t id, const std::string& job_id, int code,
                              const std::string& error) = 0;
  // The answer once given: the job id, or the refusal as a status.
  virtual absl::StatusOr<std::optional<std::string>> AnswerOf(std::int64_t id) = 0;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_FLEET_H_
