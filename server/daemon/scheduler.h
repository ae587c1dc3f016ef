// The daemon's scheduler: jobs queue per daemon (highest priority first,
// then in order of submission), at most `max_running` run at once, each on
// a thread of an Asio pool; jobs on one GPU take turns at its FairGate at
// candidate granularity. The store is the daemon's state: every job is
// recorded when submitted, every measurement as it completes, and a
// restarted scheduler resumes the daemon's unfinished jobs.
//
// With a PostgreSQL store the daemon is one of a fleet (store/fleet.h):
// jobs queue in the store, not here; a fleet thread heartbeats, claims the
// next job of a model this daemon serves whenever a run slot is free, and
// plans the submissions other daemons hand over. Jobs of another daemon
// are watched by polling the store and cancelled through it.
//
// Every public method is thread-safe. Those that read or write the store
// may block briefly on SQLite: call them off the gRPC threads.
#ifndef KTUNE_SERVER_DAEMON_SCHEDULER_H_
#define KTUNE_SERVER_DAEMON_SCHEDULER_H_

#include <array>
#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/tuner.pb.h"
#include "server/daemon/fair_gate.h"
#include "server/runner/runner.h"
#include "tuner/base/clock.h"
#include "tuner/base/file_lock.h"
#include "tuner/session/session.h"
#include "tuner/store/fleet.h"
#include "tuner/store/store.h"

namespace ktune {

struct SchedulerLimits {
  int max_running = 4;   // jobs running at once (all devices)
  int max_queued = 256;  // jobs waiting
  // Jobs one client (SubmitJobRequest.client) may have queued or running
  // at once, counted over the whole fleet with a PostgreSQL store; 0: none.
  int max_jobs_per_client = 0;
  // Jobs GetBest's tune_on_miss may have queued or running for one client
  // on this daemon; 0: tuning on a miss is off.
  int max_miss_jobs_per_client = 4;
  std::int64_t max_evaluations = 0;     // per job; 0: none
  double max_space = 0;                 // configurations per job; 0: none
  double max_wall_seconds = 0;          // per job; 0: none
  double max_kernel_seconds = 0;        // per launch (measurement.kernel_timeout); 0: none
  std::int64_t max_argument_bytes = 0;  // GPU memory of a job's buffers; 0: none
  std::int64_t max_request_bytes = std::int64_t{16} << 20;  // a SubmitJob request
};

struct SchedulerOptions {
  std::string db_path;
  // What wall-time limits, the gates' holds and the look for other
  // processes' writes read; null: the real clock. Must outlive the
  // scheduler.
  const Clock* clock = nullptr;
  std::vector<std::string> devices;  // locators: "sim:FILE", "0", "cuda:1", a UUID
  OpenDeviceOptions device_options;
  SchedulerLimits limits;
  // A fleet's claims: how long one lasts without a heartbeat (beats come
  // every third of it). Another daemon takes a dead one's job over after
  // this.
  std::chrono::milliseconds lease{15000};
};

// What one of the daemon's devices is doing, for its metrics.
struct DeviceActivity {
  std::string locator;
  DeviceInfo info;
  int queued = 0;   // this daemon's jobs waiting for it
  int running = 0;  // jobs running on it
  // Time its gate was held by a timed evaluation (the GPU's busy time; a
  // replay's recorded time at its --sim-speed).
  double busy_seconds = 0;
  // Candidates it finished, by status (a job over several GPUs counts on
  // its first).
  std::array<std::int64_t, kNumCandidateStatuses> evaluations{};
  std::int64_t worker_restarts = 0;
  // The canary's slowdown of the last candidate measured under a load.
  std::optional<double> canary_slowdown;
};

// What the daemon is doing, at one moment.
struct SchedulerActivity {
  std::vector<DeviceActivity> devices;
  std::optional<CompileActivity> compile;  // the GPU jobs' NVRTC pool
  std::map<JobState, std::int64_t> jobs;   // the store's (a fleet's: every daemon's)
  std::int64_t store_bytes = 0;
  std::int64_t fleet_waiting = -1;  // a fleet's jobs waiting to be claimed; -1: no fleet
};

// One watcher of a job's events. Deliver is called from any thread and must
// not block; `last` marks the final event (the job ended or the daemon is
// stopping).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void Deliver(const v1::JobEvent& event, bool last) = 0;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Open then Resume.
  absl::Status Start();
  // Takes the store (one daemon per database: a second one's open fails
  // and names the first) and opens the devices and the store: reads are
  // served from here on. Errors name the device or the database.
  absl::Status Open();
  // Takes jobs from here on, and queues the daemon's unfinished jobs again.
  // REQUIRES: Open succeeded. A daemon resumes once it listens, so that one
  // that cannot listen leaves its jobs as they were.
  absl::Status Resume();
  // Stops taking jobs, lets each running job finish its candidate, records
  // it interrupted (queued jobs stay queued), and waits for them.
  void Shutdown();

  absl::StatusOr<v1::SubmitJobResponse> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  absl::StatusOr<v1::Job> Cancel(const v1::CancelJobRequest& request);
  // With `generation`: the best_generation() the answer was read at.
  // With request.tune_on_miss, a miss may queue a job (TuneOnMiss) under
  // `client`'s name.
  absl::StatusOr<v1::GetBestResponse> GetBest(const v1::GetBestRequest& request,
                                              std::uint64_t* generation = nullptr,
                                              const std::string& client = "");
  v1::ListDevicesResponse ListDevices() const;
  // Reads the store (job counts, size) under the readers' lock.
  absl::StatusOr<SchedulerActivity> Activity();

  // A fleet's daemon tells `health` whether its database answers (each
  // heartbeat; only changes are told), for the daemon's health status.
  // Call before Resume.
  void OnStoreHealth(std::function<void(bool reachable)> health) {
    store_health_ = std::move(health);
  }

  // Follows a job: first its state (and with from_start its stored
  // measurements), then live events until it ends. The sink is held until
  // the last event or Unwatch.
  absl::Status Watch(const v1::WatchJobRequest& request, std::shared_ptr<EventSink> sink);
  void Unwatch(const EventSink* sink);

  // Changes whenever a stored best may have changed: a GetBest answer read
  // at one generation is current while the generation is unchanged.
  std::uint64_t best_generation() const { return best_generation_.load(); }

  // Notices commits to the store by other processes (a `ktune tune --local`
  // or a `ktune merge` on this daemon's --db): at most every 200 ms it reads
  // SQLite's data_version, and a change moves best_generation(). Never
  // blocks: when the store is busy it looks next time. (A fleet's daemon
  // watches its PostgreSQL store's change counter from the fleet thread
  // instead, as often.)
  void NoticeOutsideWrites();

 private:
  struct DeviceSlot;
  struct Entry;
  struct Subscription;
  struct Follower;

  absl::Status OpenDevices();
  // The slots a job's spec asks for (or the least busy one).
  absl::StatusOr<std::vector<DeviceSlot*>> SelectSlots(const v1::JobSpec& spec);
  // The daemon's limits on evaluations and kernel time, into the spec.
  absl::Status ApplyLimits(v1::JobSpec& spec) const;
  // The daemon's limits on the space and the arguments' memory.
  absl::Status CheckSize(const Job& job) const;
  // The job planned on this daemon's devices, not yet queued; `client`
  // submitted it.
  absl::StatusOr<std::shared_ptr<Entry>> Plan(v1::JobSpec spec, int priority,
                                              const std::string& client, bool resuming);
  // Plan, then Enqueue.
  absl::StatusOr<std::shared_ptr<Entry>> Prepare(v1::JobSpec spec, int priority,
                                                 const std::string& client, bool resuming);
  // RESOURCE_EXHAUSTED when `client` already has `unfinished` jobs queued or
  // running and that is its limit (--max-jobs-per-client).
  absl::Status CheckClientLimit(const std::string& client, std::int64_t unfinished,
                                bool fleet) const;
  // Records the job queued and queues it (or finds it here already).
  absl::StatusOr<std::shared_ptr<Entry>> Enqueue(std::shared_ptr<Entry> entry, bool resuming);
  void Dispatch();  // REQUIRES: mu_ held
  void Run(const std::shared_ptr<Entry>& entry);
  // A measurement of `entry`'s, into its device's activity (the session's
  // thread).
  void CountMeasurement(Entry& entry, const StoredMeasurement& m);
  // A GPU job's devices, opened and gated when it runs.
  absl::Status OpenJobDevice(Entry& entry);
  // The session's callbacks: the job's events to its watchers, the
  // wall-time limit.
  SessionOptions EventsOf(const std::shared_ptr<Entry>& entry, bool* wall_limit_hit);
  // Records how the job ended and lets the next one run.
  void Finish(const std::shared_ptr<Entry>& entry, Store* store, const std::string& failure,
              JobState final_state, std::string final_message, bool wall_limit_hit);
  void Broadcast(Entry& entry, const v1::JobEvent& event, bool last);
  absl::Status LockStore();
  // Why a job is not taken now (starting or stopping). REQUIRES: mu_ held.
  absl::Status NotAccepting() const;
  absl::StatusOr<std::string> ResolveId(const std::string& id_or_prefix);

  // GetBest's tune_on_miss (scheduler_miss.cc): queues the job for the
  // exact problem `request` asks, or finds the one queued before, into
  // out->tuning_job_id; out->tuning_note says why not.
  void TuneOnMiss(const v1::GetBestRequest& request, const std::string& client,
                  v1::GetBestResponse* out);
  absl::StatusOr<v1::JobSpec> MissSpec(const v1::GetBestRequest& request,
                                       const v1::GetBestResponse& answer);

  // The fleet (scheduler_fleet.cc).
  bool fleet_mode() const { return fleet_ != nullptr; }
  void StartFleet();
  void StopFleet();
  void FleetLoop();
  void BeatLoop();
  // Waits up to `most` (for a poke too, with `poked`); false once the fleet
  // threads are to stop.
  bool FleetWait(std::chrono::milliseconds most, bool* poked);
  // One heartbeat: renews this daemon's leases and hears of its jobs
  // cancelled or taken over elsewhere. UNAVAILABLE when the database does
  // not answer.
  absl::Status Beat(FleetQueue& queue);
  void TakeSubmissions(FleetQueue& queue);
  void ClaimJobs(Store& store);
  // Queues a planned job in the fleet's queue. REQUIRES: read_mu_ held.
  absl::Status OfferToFleet(Entry& e);
  // A submission for a model this daemon does not serve, handed to one
  // that does; waits for its answer.
  absl::StatusOr<v1::SubmitJobResponse> HandOver(const v1::SubmitJobRequest& request,
                                                 const std::string& wanted);
  absl::StatusOr<v1::Job> CancelElsewhere(const std::string& id);
  // Follows a job another daemon runs, by polling the store, from the
  // measurement after `replayed_up_to` (kFromNow: after those stored now).
  static constexpr std::int64_t kFromNow = -2;
  void FollowElsewhere(const std::string& id, std::int64_t replayed_up_to,
                       std::shared_ptr<EventSink> sink);
  void Follow(Follower& follower, const std::string& id, std::int64_t mark);

  SchedulerOptions options_;
  std::vector<std::unique_ptr<DeviceSlot>> devices_;
  // `members` (one per slot) behind their slots' gates, grouped when
  // several.
  absl::StatusOr<std::unique_ptr<Device>> GateDevices(std::vector<std::unique_ptr<Device>> members,
                                                      const std::vector<DeviceSlot*>& slots,
                                                      int priority);
  boost::asio::thread_pool runners_;

  std::mutex mu_;
  std::condition_variable idle_;
  bool accepting_ = false;
  bool stopping_ = false;  // Shutdown was called (else, not resumed yet)
  std::uint64_t next_order_ = 0;
  int running_ = 0;
  std::map<std::pair<int, std::uint64_t>, std::shared_ptr<Entry>> queue_;  // (-priority, order)
  std::unordered_map<std::string, std::shared_ptr<Entry>> active_;         // queued or running

  // Reads for the RPCs: one connection, serialised.
  std::mutex read_mu_;
  std::unique_ptr<Store> reader_;
  // An exclusive lock on DB.ktuned-lock while the daemon lives; the kernel
  // drops it when the process ends, SIGKILL included.
  std::optional<FileLock> store_lock_;

  // The fleet: null for a SQLite store. fleet_ is reader_'s (under
  // read_mu_); the fleet thread has a connection of its own.
  FleetQueue* fleet_ = nullptr;
  std::string daemon_name_;
  std::vector<FleetDevice> fleet_devices_;
  std::vector<std::string> models_;
  std::thread fleet_thread_;
  std::thread beat_thread_;
  std::mutex fleet_mu_;
  std::condition_variable fleet_wake_;
  bool fleet_stop_ = false;                 // guarded by fleet_mu_
  bool fleet_poke_ = false;                 // guarded by fleet_mu_: look for work now
  std::function<void(bool)> store_health_;  // set before Resume
  std::int64_t change_count_ = -1;  // the store's change counter, as the fleet thread last read it
  std::vector<std::shared_ptr<Follower>> followers_;  // guarded by fleet_mu_

  // Jobs queued on misses: by kernel, device and problem, and their
  // clients (guarded by miss_mu_).
  std::mutex miss_mu_;
  std::map<std::string, std::string> miss_jobs_;
  std::map<std::string, std::string> miss_client_;  // job id -> client

  std::atomic<std::uint64_t> best_generation_{0};
  std::atomic<std::int64_t> outside_checked_ns_{0};  // steady clock
  std::int64_t data_version_ = -1;                   // under read_mu_
};

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_SCHEDULER_H_
