#include "server/daemon/scheduler.h"

#include <fcntl.h>
#include <google/protobuf/util/time_util.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "server/common/convert.h"
#include "strategies/registry.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/device/device_group.h"
#include "tuner/device/simulated_device.h"
#include "tuner/session/session.h"

namespace ktune {
namespace {

void Now(google::protobuf::Timestamp* t) {
  *t = google::protobuf::util::TimeUtil::GetCurrentTime();
}

v1::JobEvent StateEvent(const std::string& id, v1::JobState state) {
  v1::JobEvent e;
  e.set_job_id(id);
  e.set_state(state);
  Now(e.mutable_at());
  return e;
}

bool Finished(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

void SetSeconds(double s, google::protobuf::Duration* d) {
  d->set_seconds(static_cast<std::int64_t>(s));
  d->set_nanos(static_cast<std::int32_t>(std::round((s - std::floor(s)) * 1e9)) % 1000000000);
}

}  // namespace

struct Scheduler::DeviceSlot {
  std::string locator;
  DeviceInfo info;
  std::unique_ptr<Device> probe;  // simulated devices: shares its recording
  FairGate gate;
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
  Job job;
  JobRecord record;
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Device>> spare;  // while submitting: the group's other members
  BuiltStrategy strategy;
  std::atomic<bool> stop{false};
  bool existed = false;    // the store knew the job when it was submitted
  bool cancelled = false;  // by a client (guarded by Scheduler::mu_)
  bool running = false;    // guarded by Scheduler::mu_
  bool done = false;       // guarded by Scheduler::mu_
  std::condition_variable finished;

  std::mutex events_mu;
  std::vector<std::shared_ptr<Subscription>> subs;  // guarded by events_mu
  // The last event went out (guarded by events_mu): a later watcher reads
  // the end from the store. `done` is set after it, under mu_, so it cannot
  // tell a watcher whether its subscription would still hear anything.
  bool ended = false;
};

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)),
      runners_(static_cast<std::size_t>(std::max(1, options_.limits.max_running))) {}

Scheduler::~Scheduler() {
  Shutdown();
  runners_.join();
  if (store_lock_fd_ >= 0) close(store_lock_fd_);
}

absl::Status Scheduler::LockStore() {
  // A lock file beside the database, not the database itself: closing any
  // descriptor of the database would drop SQLite's own locks.
  const std::string path = options_.db_path + ".ktuned-lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        StrCat("--db ", options_.db_path, ": cannot open ", path, ": ", std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    std::string other = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "";
    other.erase(
        std::remove_if(other.begin(), other.end(), [](char c) { return c < '0' || c > '9'; }),
        other.end());
    return absl::FailedPreconditionError(
        StrCat("--db ", options_.db_path, ": another ktuned",
               other.empty() ? "" : StrCat(" (pid ", other, ")"),
               " serves this store; stop it first, or give this one another --db"));
  }
  store_lock_fd_ = fd;
  // The pid only makes a second daemon's message clearer.
  const std::string me = StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    std::fprintf(stderr, "ktuned: could not note the pid in %s\n", path.c_str());
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Start() {
  if (options_.devices.empty()) {
    return absl::InvalidArgumentError("--device: give at least one device (sim:FILE or a GPU)");
  }
  KTUNE_RETURN_IF_ERROR(LockStore());
  // One NVRTC pool for every GPU job: compile work of all jobs shares it.
  const bool any_gpu = std::any_of(options_.devices.begin(), options_.devices.end(),
                                   [](const std::string& l) { return l.rfind("sim:", 0) != 0; });
  if (any_gpu) {
    absl::StatusOr<std::shared_ptr<CompilePool>> pool =
        StartSharedCompilePool(options_.device_options);
    if (!pool.ok()) return pool.status();
    options_.device_options.compile_pool = *std::move(pool);
  }
  for (const std::string& locator : options_.devices) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(locator, options_.device_options);
    if (!d.ok())
      return absl::Status(d.status().code(),
                          StrCat("--device ", locator, ": ", d.status().message()));
    auto slot = std::make_unique<DeviceSlot>();
    slot->locator = locator;
    slot->info = (*d)->info();
    if (dynamic_cast<SimulatedDevice*>(d->get()) != nullptr) slot->probe = *std::move(d);
    for (const auto& other : devices_) {
      // One GPU served twice would time two jobs at once; two copies of a
      // recording are two devices of one model.
      if (other->info.uuid == slot->info.uuid &&
          (!slot->info.simulated || other->locator == slot->locator)) {
        return absl::InvalidArgumentError(
            StrCat("--device ", locator, ": the same device as --device ", other->locator));
      }
    }
    devices_.push_back(std::move(slot));
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, /*create=*/true);
  if (!store.ok()) return store.status();
  reader_ = *std::move(store);

  // The daemon's unfinished jobs, oldest first.
  absl::StatusOr<std::vector<JobRecord>> jobs = reader_->ListJobs();
  if (!jobs.ok()) return jobs.status();
  std::reverse(jobs->begin(), jobs->end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = true;
  }
  for (const JobRecord& j : *jobs) {
    if (j.origin != "daemon" || Finished(j.state)) continue;
    v1::JobSpec spec;
    if (!spec.ParseFromString(j.spec)) {
      (void)reader_->SetJobState(j.id, JobState::kFailed,
                                 "could not resume: the stored spec is damaged");
      continue;
    }
    absl::StatusOr<std::shared_ptr<Entry>> e = Prepare(spec, j.priority, /*resuming=*/true);
    if (!e.ok()) {
      (void)reader_->SetJobState(j.id, JobState::kFailed,
                                 StrCat("could not resume: ", e.status().message()));
      continue;
    }
    std::fprintf(stderr, "ktuned: resuming job %s (%s, %lld evaluations stored)\n", j.id.c_str(),
                 j.kernel_name.c_str(), static_cast<long long>(j.evaluations));
  }
  return absl::OkStatus();
}

void Scheduler::Shutdown() {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  for (auto& [id, e] : active_) {
    if (e->running) e->stop.store(true);
  }
  queue_.clear();  // they stay queued in the store, for the next start
  idle_.wait(lock, [&] { return running_ == 0; });
  // Watchers of queued jobs: the stream ends; the job resumes later.
  std::vector<std::shared_ptr<Entry>> left;
  for (auto& [id, e] : active_) left.push_back(e);
  active_.clear();
  lock.unlock();
  for (const auto& e : left) Broadcast(*e, StateEvent(e->id, v1::QUEUED), /*last=*/true);
}

absl::StatusOr<std::shared_ptr<Scheduler::Entry>> Scheduler::Prepare(v1::JobSpec spec, int priority,
                                                                     bool resuming) {
  // The device: the first of the spec's that this daemon serves.
  std::vector<DeviceSlot*> slots;
  if (spec.device().devices_size() == 0) {
    // The device with the fewest jobs queued or running.
    std::map<const DeviceSlot*, int> load;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, other] : active_) {
        for (const DeviceSlot* d : other->slots) ++load[d];
      }
    }
    DeviceSlot* best = devices_.front().get();
    for (const auto& d : devices_) {
      if (load[d.get()] < load[best]) best = d.get();
    }
    slots.push_back(best);
  } else {
    for (const std::string& want : spec.device().devices()) {
      DeviceSlot* found = nullptr;
      for (const auto& d : devices_) {
        if (want == d->locator || want == d->info.id || want == d->info.name ||
            want == d->info.uuid) {
          // A model name matches every GPU of that model: the first free.
          if (std::find(slots.begin(), slots.end(), d.get()) == slots.end()) {
            found = d.get();
            break;
          }
        }
      }
      if (found == nullptr) {
        std::vector<std::string> served;
        for (const auto& d : devices_) {
          served.push_back(StrCat(d->locator, " (", d->info.name, ")"));
        }
        return absl::InvalidArgumentError(StrCat(
            "device.devices: '", want,
            "' is not served by this daemon (or named twice); it serves ", StrJoin(served, ", ")));
      }
      slots.push_back(found);
    }
    for (const DeviceSlot* d : slots) {
      const DeviceInfo& a = slots.front()->info;
      const DeviceInfo& b = d->info;
      if (a.name != b.name || a.architecture != b.architecture ||
          a.memory_bytes != b.memory_bytes || a.simulated != b.simulated ||
          (a.simulated && a.uuid != b.uuid)) {
        return absl::InvalidArgumentError(StrCat(
            "device.devices: ", slots.front()->locator, " (", a.name, ") and ", d->locator, " (",
            b.name, ") are not the same model; one job's measurements never mix models"));
      }
    }
  }
  DeviceSlot* slot = slots.front();
  spec.mutable_device()->clear_devices();
  for (const DeviceSlot* d : slots) spec.mutable_device()->add_devices(d->locator);

  // A stored job over a recording keeps the recording's kernel name and
  // parameters in its spec, without source: it reads back as the recording.
  if (resuming && slot->probe != nullptr &&
      spec.kernel().source_case() == v1::Kernel::SOURCE_NOT_SET) {
    v1::JobSpec overrides;
    *overrides.mutable_strategy() = spec.strategy();
    *overrides.mutable_measurement() = spec.measurement();
    *overrides.mutable_device() = spec.device();
    spec = std::move(overrides);
  }
  // A remote spec cannot name files on the daemon's machine.
  if (!resuming) KTUNE_RETURN_IF_ERROR(RejectFileReferences(spec));

  // Limits that shape the job: evaluations and kernel time.
  const SchedulerLimits& lim = options_.limits;
  v1::StrategySpec& st = *spec.mutable_strategy();
  if (lim.max_evaluations > 0) {
    if (st.max_evaluations() > lim.max_evaluations) {
      return absl::InvalidArgumentError(StrCat("strategy.max_evaluations: ", st.max_evaluations(),
                                               " is over this daemon's limit of ",
                                               lim.max_evaluations, " (--max-evals)"));
    }
    if (st.max_evaluations() <= 0) st.set_max_evaluations(lim.max_evaluations);
  }
  if (lim.max_kernel_seconds > 0) {
    v1::MeasurementSettings& ms = *spec.mutable_measurement();
    const double asked = ms.has_kernel_timeout() ? Seconds(ms.kernel_timeout()) : 0;
    if (asked > lim.max_kernel_seconds) {
      return absl::InvalidArgumentError(
          StrCat("measurement.kernel_timeout: ", asked, " s is over this daemon's limit of ",
                 lim.max_kernel_seconds, " s (--max-kernel-seconds)"));
    }
    if (asked <= 0) SetSeconds(lim.max_kernel_seconds, ms.mutable_kernel_timeout());
  }

  auto e = std::make_shared<Entry>();
  e->slot = slot;
  e->slots = slots;
  e->priority = priority;
  // The job, resolved against the device (a simulated one replays its
  // recording when the spec has no kernel).
  std::unique_ptr<Device> device;
  if (slot->probe != nullptr) {
    std::vector<std::unique_ptr<Device>> replays;
    for (DeviceSlot* d : slots) {
      auto* sim = static_cast<SimulatedDevice*>(d->probe.get());
      auto replay = std::make_unique<SimulatedDevice>(sim->shared_recording(), d->locator);
      if (options_.device_options.sim_speed > 0) {
        replay->set_speed(options_.device_options.sim_speed);
      }
      replays.push_back(std::move(replay));
    }
    if (replays.size() == 1) {
      device = std::move(replays.front());
    } else {
      // Resolved against the first; the group is gated per device below.
      device = std::move(replays.front());
      replays.erase(replays.begin());
      e->spare = std::move(replays);
    }
  }
  absl::StatusOr<Job> job =
      device != nullptr
          ? ResolveJobOn(spec, ".", *device)
          : (spec.has_kernel() ? ResolveJob(spec, ".")
                               : absl::StatusOr<Job>(absl::InvalidArgumentError(
                                     "kernel: a GPU tunes a kernel given by the job spec")));
  if (!job.ok()) return job.status();
  e->job = *std::move(job);
  if (lim.max_space > 0) {
    const SpaceCount count = e->job.space->Count();
    if (static_cast<double>(count.count) > lim.max_space) {
      return absl::InvalidArgumentError(
          StrCat("parameters: the space has ", count.exact ? "" : "about ",
                 static_cast<double>(count.count), " configurations, over this daemon's limit of ",
                 lim.max_space, " (--max-space)"));
    }
  }
  if (lim.max_argument_bytes > 0) {
    KTUNE_ASSIGN_OR_RETURN(const std::int64_t bytes, ArgumentBytes(e->job));
    if (bytes > lim.max_argument_bytes) {
      return absl::InvalidArgumentError(StrCat("arguments: the buffers take ", bytes >> 20,
                                               " MiB of GPU memory, over this "
                                               "daemon's limit of ",
                                               lim.max_argument_bytes >> 20,
                                               " MiB (--max-argument-mib)"));
    }
  }
  // The strategy's name and options are checked now; it is built (with its
  // warm start) when the job runs.
  if (absl::StatusOr<BuiltStrategy> s = BuildStrategy(e->job, nullptr, ""); !s.ok()) {
    return absl::InvalidArgumentError(
        StrCat(StrategyErrorField(e->job.spec.strategy().name()), ": ", s.status().message()));
  }
  // A recording that cannot replay this job (other parameters, a pipeline)
  // is refused now rather than queued to fail; binding a replay is cheap,
  // and the session binds it again when the job runs.
  if (device != nullptr) KTUNE_RETURN_IF_ERROR(device->Bind(BindingFor(e->job)));
  e->record = MakeJobRecord(e->job, slot->info);
  e->record.origin = "daemon";
  e->record.priority = priority;
  e->id = e->record.id;
  if (device != nullptr) {
    std::vector<std::unique_ptr<Device>> members;
    members.push_back(std::move(device));
    for (auto& d : e->spare) members.push_back(std::move(d));
    e->spare.clear();
    KTUNE_ASSIGN_OR_RETURN(e->device, GateDevices(std::move(members), slots, priority));
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return absl::UnavailableError("the daemon is stopping; submit again later");
  if (auto it = active_.find(e->id); it != active_.end()) {  // already here
    it->second->existed = true;
    return it->second;
  }
  if (!resuming && static_cast<int>(queue_.size()) >= lim.max_queued) {
    return absl::ResourceExhaustedError(
        StrCat("queued jobs: ", queue_.size(), " are waiting, this daemon's limit (--max-queued)"));
  }
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    absl::StatusOr<JobRecord> stored = reader_->QueueJob(e->record, &e->existed);
    if (!stored.ok()) return stored.status();
    e->record = *std::move(stored);
  }
  e->order = next_order_++;
  active_[e->id] = e;
  queue_[{-priority, e->order}] = e;
  Dispatch();
  return e;
}

absl::StatusOr<std::unique_ptr<Device>> Scheduler::GateDevices(
    std::vector<std::unique_ptr<Device>> members, const std::vector<DeviceSlot*>& slots,
    int priority) {
  // Each device's evaluations take turns at its own gate, so a job spread
  // over several GPUs never overlaps another job's timed region on any.
  const double weight = std::pow(2.0, std::clamp(priority, -4, 4));
  std::vector<std::unique_ptr<Device>> gated;
  for (std::size_t i = 0; i < members.size(); ++i) {
    gated.push_back(std::make_unique<GatedDevice>(std::move(members[i]), slots[i]->gate, weight));
  }
  if (gated.size() == 1) return std::move(gated.front());
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group = DeviceGroup::Create(std::move(gated));
  if (!group.ok()) return group.status();
  return std::unique_ptr<Device>(*std::move(group));
}

void Scheduler::Dispatch() {
  while (accepting_ && running_ < options_.limits.max_running && !queue_.empty()) {
    std::shared_ptr<Entry> e = queue_.begin()->second;
    queue_.erase(queue_.begin());
    e->running = true;
    ++running_;
    boost::asio::post(runners_, [this, e] { Run(e); });
  }
}

void Scheduler::Broadcast(Entry& e, const v1::JobEvent& event, bool last) {
  std::lock_guard<std::mutex> lock(e.events_mu);
  for (const auto& sub : e.subs) {
    if (sub->replaying) {
      sub->held.emplace_back(event, last);
    } else if (event.event_case() != v1::JobEvent::kMeasurement ||
               event.measurement().sequence() > sub->replayed_up_to) {
      sub->sink->Deliver(event, last);
    }
  }
  if (last) {
    e.subs.clear();
    e.ended = true;
  }
}

void Scheduler::Run(const std::shared_ptr<Entry>& e) {
  const auto start = std::chrono::steady_clock::now();
  bool wall_limit_hit = false;
  std::string failure;
  JobState final_state = JobState::kFailed;
  std::string final_message;

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, /*create=*/false);
  if (!store.ok()) {
    failure = StrCat("store: ", store.status().message());
  } else {
    if (e->device == nullptr) {
      std::vector<std::unique_ptr<Device>> members;
      for (DeviceSlot* slot : e->slots) {
        absl::StatusOr<std::unique_ptr<Device>> d =
            OpenDevice(slot->locator, options_.device_options);
        if (!d.ok()) {
          failure = StrCat("device ", slot->locator, ": ", d.status().message());
          break;
        }
        members.push_back(*std::move(d));
      }
      if (failure.empty()) {
        absl::StatusOr<std::unique_ptr<Device>> gated =
            GateDevices(std::move(members), e->slots, e->priority);
        if (gated.ok()) {
          e->device = *std::move(gated);
        } else {
          failure = std::string(gated.status().message());
        }
      }
    }
    if (failure.empty()) {
      absl::StatusOr<BuiltStrategy> built = BuildStrategy(e->job, &**store, e->id);
      if (!built.ok()) {
        failure = StrCat("strategy: ", built.status().message());
      } else {
        e->strategy = *std::move(built);
      }
    }
    if (failure.empty()) {
      Broadcast(*e, StateEvent(e->id, v1::RUNNING), false);
      Session session(e->job, *e->device, *e->strategy.strategy, e->strategy.resolved);
      SessionOptions so;
      so.stop = &e->stop;
      const double wall_limit = options_.limits.max_wall_seconds;
      so.on_progress = [&](const Progress& p) {
        v1::JobEvent ev;
        ev.set_job_id(e->id);
        ProgressToProto(p, ev.mutable_progress());
        Now(ev.mutable_at());
        Broadcast(*e, ev, false);
        if (wall_limit > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
                wall_limit) {
          wall_limit_hit = true;
          e->stop.store(true);
        }
      };
      so.on_measurement = [&](const StoredMeasurement& m) {
        v1::JobEvent ev;
        ev.set_job_id(e->id);
        MeasurementToProto(m, ev.mutable_measurement());
        Now(ev.mutable_at());
        Broadcast(*e, ev, false);
      };
      so.on_new_best = [&](const StoredMeasurement& m) {
        best_generation_.fetch_add(1);
        v1::JobEvent ev;
        ev.set_job_id(e->id);
        MeasurementToProto(m, ev.mutable_new_best());
        Now(ev.mutable_at());
        Broadcast(*e, ev, false);
      };
      absl::Status prepared = session.Prepare();
      if (!prepared.ok()) {
        failure = StrCat("the device cannot run this job: ", prepared.message());
      } else {
        absl::StatusOr<SessionResult> result = session.Run(**store, so);
        if (!result.ok()) {
          failure = std::string(result.status().message());
        } else {
          final_state = result->job.state;
          final_message = result->end_reason;
        }
      }
    }
  }

  bool cancelled = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = e->cancelled;
  }
  if (!failure.empty()) {
    final_state = JobState::kFailed;
    final_message = failure;
  } else if (cancelled) {
    final_state = JobState::kCancelled;
    final_message = "cancelled by a client";
  } else if (wall_limit_hit) {
    final_state = JobState::kFailed;
    final_message = StrCat("stopped at this daemon's wall-time limit of ",
                           options_.limits.max_wall_seconds, " s (--max-wall-seconds)");
  }
  if (store.ok()) {
    // A job that another live process runs (a local `ktune tune` of the
    // same job) stays that process's to end.
    absl::StatusOr<JobRecord> now = (*store)->GetJob(e->id);
    if (!now.ok() || now->state != JobState::kRunning || !RunByAnotherProcess(now->runner)) {
      (void)(*store)->SetJobState(e->id, final_state, final_message);
    }
  } else {
    std::lock_guard<std::mutex> rl(read_mu_);
    (void)reader_->SetJobState(e->id, final_state, final_message);
  }
  best_generation_.fetch_add(1);
  if (!failure.empty())
    std::fprintf(stderr, "ktuned: job %s failed: %s\n", e->id.c_str(), failure.c_str());
  Broadcast(*e, StateEvent(e->id, JobStateToProto(final_state)), /*last=*/true);

  std::lock_guard<std::mutex> lock(mu_);
  e->done = true;
  e->running = false;
  e->device.reset();  // a GPU's workers go now, not when the last watcher leaves
  active_.erase(e->id);
  --running_;
  e->finished.notify_all();
  Dispatch();
  if (running_ == 0) idle_.notify_all();
}

absl::StatusOr<std::string> Scheduler::ResolveId(const std::string& id_or_prefix) {
  if (id_or_prefix.empty()) return absl::InvalidArgumentError("job_id: required");
  std::lock_guard<std::mutex> rl(read_mu_);
  absl::StatusOr<JobRecord> j = reader_->GetJob(id_or_prefix);
  if (!j.ok()) return absl::Status(j.status().code(), StrCat("job_id: ", j.status().message()));
  return j->id;
}

absl::StatusOr<v1::SubmitJobResponse> Scheduler::Submit(const v1::SubmitJobRequest& request) {
  if (request.priority() < -1000 || request.priority() > 1000) {
    return absl::InvalidArgumentError("priority: must lie in [-1000, 1000]");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return absl::UnavailableError("the daemon is stopping; submit again later");
  }
  absl::StatusOr<std::shared_ptr<Entry>> e = Prepare(request.spec(), request.priority(), false);
  if (!e.ok()) return e.status();
  v1::SubmitJobResponse out;
  out.set_job_id((*e)->id);
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    absl::StatusOr<JobRecord> rec = reader_->GetJob((*e)->id);
    if (!rec.ok()) return rec.status();
    JobToProto(*rec, out.mutable_job());
  }
  out.set_resumed((*e)->existed);
  return out;
}

absl::StatusOr<v1::Job> Scheduler::GetJob(const v1::GetJobRequest& request) {
  KTUNE_ASSIGN_OR_RETURN(const std::string id, ResolveId(request.job_id()));
  v1::Job out;
  std::lock_guard<std::mutex> rl(read_mu_);
  KTUNE_ASSIGN_OR_RETURN(JobRecord rec, reader_->GetJob(id));
  JobToProto(rec, &out);
  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> ms, reader_->LoadMeasurements(id));
  const StoredMeasurement* best = nullptr;
  std::array<std::int64_t, kNumCandidateStatuses> counts{};
  for (const StoredMeasurement& m : ms) {
    ++counts[static_cast<std::size_t>(m.measurement.status)];
    if (m.measurement.ok() && m.loss && (best == nullptr || *m.loss < *best->loss)) best = &m;
    if (request.include_measurements()) MeasurementToProto(m, out.add_measurements());
  }
  if (best != nullptr) MeasurementToProto(*best, out.mutable_best());
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    if (counts[static_cast<std::size_t>(i)] > 0) {
      (*out.mutable_progress()
            ->mutable_status_counts())[CandidateStatusName(static_cast<CandidateStatus>(i))] =
          counts[static_cast<std::size_t>(i)];
    }
  }
  out.mutable_progress()->set_max_evaluations(out.spec().strategy().max_evaluations());
  return out;
}

absl::StatusOr<v1::ListJobsResponse> Scheduler::ListJobs(const v1::ListJobsRequest& request) {
  if (request.page_size() < 0 || request.page_size() > 1000) {
    return absl::InvalidArgumentError("page_size: must lie in [0, 1000] (0: 100)");
  }
  const int page = request.page_size() == 0 ? 100 : request.page_size();
  std::size_t offset = 0;
  if (!request.page_token().empty()) {
    const std::string& t = request.page_token();
    if (t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("page_token: '", t.substr(0, 32), "' is not a token this daemon gave"));
    }
    offset = std::stoull(t);
  }
  std::vector<JobRecord> jobs;
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    KTUNE_ASSIGN_OR_RETURN(jobs, reader_->ListJobs());
  }
  std::erase_if(jobs, [&](const JobRecord& j) {
    return (!request.kernel().empty() && j.kernel_name != request.kernel()) ||
           (request.state() != v1::JOB_STATE_UNSPECIFIED &&
            JobStateToProto(j.state) != request.state());
  });
  v1::ListJobsResponse out;
  for (std::size_t i = offset; i < jobs.size() && i < offset + static_cast<std::size_t>(page);
       ++i) {
    v1::Job* j = out.add_jobs();
    JobToProto(jobs[i], j);
    j->clear_spec();  // lists stay small; GetJob has the spec
  }
  if (offset + static_cast<std::size_t>(page) < jobs.size()) {
    out.set_next_page_token(std::to_string(offset + static_cast<std::size_t>(page)));
  }
  return out;
}

absl::StatusOr<v1::Job> Scheduler::Cancel(const v1::CancelJobRequest& request) {
  KTUNE_ASSIGN_OR_RETURN(const std::string id, ResolveId(request.job_id()));
  std::shared_ptr<Entry> e;
  bool was_queued = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = active_.find(id);
    if (it == active_.end()) {
      lock.unlock();
      v1::GetJobRequest g;
      g.set_job_id(id);
      KTUNE_ASSIGN_OR_RETURN(v1::Job job, GetJob(g));
      if (job.state() == v1::QUEUED || job.state() == v1::RUNNING) {
        return absl::FailedPreconditionError(
            StrCat("job ", id, " is not this daemon's to cancel (run by ktune tune --local?)"));
      }
      return absl::FailedPreconditionError(
          StrCat("job ", id, " already ended: ", v1::JobState_Name(job.state())));
    }
    e = it->second;
    e->cancelled = true;
    if (!e->running) {
      was_queued = true;
      for (auto q = queue_.begin(); q != queue_.end(); ++q) {
        if (q->second == e) {
          queue_.erase(q);
          break;
        }
      }
      active_.erase(it);
      e->done = true;
    } else {
      e->stop.store(true);
      // The job stops after its current candidate.
      e->finished.wait_for(lock, std::chrono::seconds(30), [&] { return e->done; });
    }
  }
  if (was_queued) {
    {
      std::lock_guard<std::mutex> rl(read_mu_);
      KTUNE_RETURN_IF_ERROR(
          reader_->SetJobState(id, JobState::kCancelled, "cancelled by a client"));
    }
    Broadcast(*e, StateEvent(id, v1::CANCELLED), /*last=*/true);
  }
  v1::GetJobRequest g;
  g.set_job_id(id);
  return GetJob(g);
}

void Scheduler::NoticeOutsideWrites() {
  constexpr std::int64_t kEveryNs = 200'000'000;
  const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  std::int64_t last = outside_checked_ns_.load(std::memory_order_relaxed);
  if (now - last < kEveryNs ||
      !outside_checked_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return;
  }
  std::unique_lock<std::mutex> rl(read_mu_, std::try_to_lock);
  if (!rl.owns_lock()) {
    outside_checked_ns_.store(last, std::memory_order_relaxed);  // look again next call
    return;
  }
  absl::StatusOr<std::int64_t> v = reader_->ChangeCount();
  if (!v.ok()) return;
  if (data_version_ >= 0 && *v != data_version_) best_generation_.fetch_add(1);
  data_version_ = *v;
}

absl::StatusOr<v1::GetBestResponse> Scheduler::GetBest(const v1::GetBestRequest& request,
                                                       std::uint64_t* generation) {
  if (request.kernel().empty()) return absl::InvalidArgumentError("kernel: required");
  for (const auto& [name, v] : request.problem()) {
    if (name.empty()) return absl::InvalidArgumentError("problem: a dimension without a name");
    if (v <= 0) {
      return absl::InvalidArgumentError(
          StrCat("problem.", name, ": ", v, " is not a positive size"));
    }
  }
  // Read before the store: an answer is never newer than its generation.
  if (generation != nullptr) *generation = best_generation_.load();
  BestQuery q;
  q.kernel = request.kernel();
  q.source_hash = request.source_hash();
  q.device = request.device();
  for (const auto& [name, v] : request.problem()) q.problem[name] = v;
  q.exact_only = request.exact_only();
  for (const auto& d : devices_) {
    if (q.device == d->locator || q.device == d->info.id || q.device == d->info.name ||
        q.device == d->info.uuid) {
      q.architecture = d->info.architecture;
    }
  }
  absl::StatusOr<BestMatch> match;
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    match = reader_->FindBestMatch(q);
  }
  if (!match.ok()) return match.status();
  v1::GetBestResponse out;
  BestMatchToProto(*match, &out);
  return out;
}

v1::ListDevicesResponse Scheduler::ListDevices() const {
  v1::ListDevicesResponse out;
  for (const auto& d : devices_) DeviceToProto(d->info, out.add_devices());
  return out;
}

absl::Status Scheduler::Watch(const v1::WatchJobRequest& request, std::shared_ptr<EventSink> sink) {
  KTUNE_ASSIGN_OR_RETURN(const std::string id, ResolveId(request.job_id()));
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = active_.find(id); it != active_.end()) e = it->second;
  }
  auto sub = std::make_shared<Subscription>();
  sub->sink = sink;
  sub->replaying = true;
  if (e != nullptr) {
    std::lock_guard<std::mutex> lock(e->events_mu);
    if (!e->ended) e->subs.push_back(sub);
  }
  // The job as stored, then (with from_start) its measurements.
  v1::GetJobRequest g;
  g.set_job_id(id);
  g.set_include_measurements(request.from_start());
  absl::StatusOr<v1::Job> job = GetJob(g);
  if (!job.ok()) {
    Unwatch(sink.get());
    return job.status();
  }
  v1::JobEvent state = StateEvent(id, job->state());
  sink->Deliver(state, false);
  for (const v1::MeasurementRecord& m : job->measurements()) {
    v1::JobEvent ev;
    ev.set_job_id(id);
    *ev.mutable_measurement() = m;
    Now(ev.mutable_at());
    sink->Deliver(ev, false);
    sub->replayed_up_to = std::max(sub->replayed_up_to, m.sequence());
  }
  v1::JobEvent progress;
  progress.set_job_id(id);
  *progress.mutable_progress() = job->progress();
  Now(progress.mutable_at());
  if (e == nullptr) {
    // Not running here: what the store says is all there is.
    sink->Deliver(progress, false);
    sink->Deliver(state, /*last=*/true);
    return absl::OkStatus();
  }
  // Hand over to live events: those that came in meanwhile first.
  std::lock_guard<std::mutex> lock(e->events_mu);
  // Delivers the held events not already replayed; true if the last was
  // among them. REQUIRES: events_mu held.
  auto flush_held = [&] {
    bool closed = false;
    for (auto& [ev, last] : sub->held) {
      if (ev.event_case() == v1::JobEvent::kMeasurement &&
          ev.measurement().sequence() <= sub->replayed_up_to) {
        continue;
      }
      sink->Deliver(ev, last);
      closed = closed || last;
    }
    sub->held.clear();
    return closed;
  };
  if (std::find(e->subs.begin(), e->subs.end(), sub) == e->subs.end()) {
    // The job ended before the subscription: its last event was held or
    // never came; the store's final state closes the stream.
    if (!flush_held()) {
      v1::GetJobRequest again;
      again.set_job_id(id);
      absl::StatusOr<v1::Job> now = GetJob(again);
      sink->Deliver(StateEvent(id, now.ok() ? now->state() : job->state()), /*last=*/true);
    }
    return absl::OkStatus();
  }
  sink->Deliver(progress, false);
  sub->replaying = false;
  if (flush_held()) std::erase(e->subs, sub);
  return absl::OkStatus();
}

void Scheduler::Unwatch(const EventSink* sink) {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : active_) entries.push_back(e);
  }
  for (const auto& e : entries) {
    std::lock_guard<std::mutex> lock(e->events_mu);
    std::erase_if(e->subs, [&](const auto& s) { return s->sink.get() == sink; });
  }
}

}  // namespace ktune
