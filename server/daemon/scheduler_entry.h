// The scheduler's own records of devices, jobs and watchers, shared by its
// two source files (scheduler.cc: jobs from submission to end;
// scheduler_queries.cc: reads, watches, cancellation). Internal to
// server/daemon.
#ifndef KTUNE_SERVER_DAEMON_SCHEDULER_ENTRY_H_
#define KTUNE_SERVER_DAEMON_SCHEDULER_ENTRY_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/daemon/fair_gate.h"
#include "server/daemon/scheduler.h"
#include "server/runner/job_run.h"

namespace ktune {

struct Scheduler::DeviceSlot {
  explicit DeviceSlot(const Clock& clock) : gate(std::chrono::milliseconds(2), clock) {}
  std::string locator;
  DeviceInfo info;
  std::unique_ptr<Device> probe;  // simulated devices: shares its recording
  FairGate gate;
  // Its activity (Scheduler::Activity), written by the jobs' threads.
  std::array<std::atomic<std::int64_t>, kNumCandidateStatuses> evaluations{};
  std::atomic<std::int64_t> worker_restarts{0};
  std::atomic<double> canary_slowdown{0};  // 0: none measured under load yet
};

struct Scheduler::Subscription {
  std::shared_ptr<EventSink> sink;
  bool replaying = false;
  std::int64_t replayed_up_to = -1;                 // measurement sequences already sent
  std::vector<std::pair<v1::JobEvent, bool>> held;  // live events during replay
};

struct Scheduler::Entry {
  std::string id;
  int priority = 0;
  std::uint64_t order = 0;
  DeviceSlot* slot = nullptr;
  // A job spread over several GPUs of one model: all its slots, `slot`
  // first.
  std::vector<DeviceSlot*> slots;
  std::optional<JobRun> run;
  JobRecord record;
  std::unique_ptr<Device> device;
  std::atomic<bool> stop{false};
  bool existed = false;    // the store knew the job when it was submitted
  bool cancelled = false;  // by a client (guarded by Scheduler::mu_)
  bool running = false;    // guarded by Scheduler::mu_
  bool done = false;       // guarded by Scheduler::mu_
  // A fleet's job whose lease lapsed and that another daemon took over:
  // it stops here without recording its end (guarded by Scheduler::mu_).
  bool lost = false;
  // Its run ended and its end is being recorded (guarded by
  // Scheduler::mu_): the heartbeat no longer speaks for it.
  bool ending = false;
  // The sequence of the last measurement this daemon stored (and told).
  std::atomic<std::int64_t> last_sequence{-1};
  // The device's worker restarts already counted (the session's thread).
  std::int64_t restarts_seen = 0;
  std::condition_variable finished;

  std::mutex events_mu;
  std::vector<std::shared_ptr<Subscription>> subs;  // guarded by events_mu
  // The last event went out (guarded by events_mu): a later watcher reads
  // the end from the store. `done` is set after it, under mu_, so it cannot
  // tell a watcher whether its subscription would still hear anything.
  bool ended = false;
};

// A watcher of a job another daemon of the fleet runs.
struct Scheduler::Follower {
  std::shared_ptr<EventSink> sink;
  std::atomic<bool> stop{false};  // Unwatch or Shutdown
  std::atomic<bool> done{false};  // the thread ended
  std::thread thread;
};

// A state change as an event of the job's stream, stamped now.
v1::JobEvent StateEvent(const std::string& id, v1::JobState state);
void Now(google::protobuf::Timestamp* t);

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_SCHEDULER_ENTRY_H_
