#include "server/daemon/scheduler.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "server/common/convert.h"
#include "server/daemon/scheduler_entry.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/device/device_group.h"
#include "tuner/device/simulated_device.h"
#include "tuner/session/session.h"
#include "tuner/store/pg.h"

namespace ktune {
namespace {

bool Finished(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

// A client's name is a label in messages, metrics and the store: short
// and printable.
absl::Status CheckClientName(const std::string& client) {
  constexpr std::size_t kMost = 128;
  if (client.size() > kMost) {
    return absl::InvalidArgumentError(
        StrCat("client: ", client.size(), " characters, over the ", kMost, " a name may have"));
  }
  for (std::size_t i = 0; i < client.size(); ++i) {
    const auto c = static_cast<unsigned char>(client[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          StrCat("client: character ", i + 1, " is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

void SetSeconds(double s, google::protobuf::Duration* d) {
  d->set_seconds(static_cast<std::int64_t>(s));
  d->set_nanos(static_cast<std::int32_t>(std::round((s - std::floor(s)) * 1e9)) % 1000000000);
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)),
      runners_(static_cast<std::size_t>(std::max(1, options_.limits.max_running))) {
  if (options_.clock == nullptr) options_.clock = &Clock::Real();
}

Scheduler::~Scheduler() {
  Shutdown();
  runners_.join();
  // A clean stop leaves no lock file beside the store.
  reader_.reset();
  if (store_lock_) store_lock_->Remove();
}

absl::Status Scheduler::LockStore() {
  // A lock file beside the database, not the database itself: closing any
  // descriptor of the database would drop SQLite's own locks.
  const std::string path = options_.db_path + ".ktuned-lock";
  absl::StatusOr<FileLock> lock = FileLock::Open(path, FileLock::Access::kPrivate);
  if (!lock.ok()) {
    return absl::PermissionDeniedError(
        StrCat("--db ", options_.db_path, ": ", lock.status().message()));
  }
  if (!lock->TryLock()) {
    const std::string other = lock->Holder();
    return absl::FailedPreconditionError(
        StrCat("--db ", options_.db_path, ": another ktuned",
               other.empty() ? "" : StrCat(" (pid ", other, ")"),
               " serves this store; stop it first, or give this one another --db"));
  }
  store_lock_.emplace(*std::move(lock));
  return absl::OkStatus();
}

absl::Status Scheduler::OpenDevices() {
  // One NVRTC pool for every GPU job: compile work of all jobs shares it.
  const bool any_gpu = std::any_of(options_.devices.begin(), options_.devices.end(),
                                   [](const std::string& l) { return l.rfind("sim:", 0) != 0; });
  if (any_gpu) {
    KTUNE_ASSIGN_OR_RETURN(options_.device_options.compile_pool,
                           StartSharedCompilePool(options_.device_options));
  }
  for (const std::string& locator : options_.devices) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(locator, options_.device_options);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          StrCat("--device ", locator, ": ", d.status().message()));
    }
    auto slot = std::make_unique<DeviceSlot>(*options_.clock);
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
  return absl::OkStatus();
}

absl::Status Scheduler::NotAccepting() const {
  return absl::UnavailableError(stopping_ ? "the daemon is stopping; submit again later"
                                          : "the daemon is starting; submit again in a moment");
}

absl::Status Scheduler::Start() {
  KTUNE_RETURN_IF_ERROR(Open());
  return Resume();
}

absl::Status Scheduler::Open() {
  if (options_.devices.empty()) {
    return absl::InvalidArgumentError("--device: give at least one device (sim:FILE or a GPU)");
  }
  // A SQLite store has one daemon; a PostgreSQL store a fleet.
  if (!pg::IsUri(options_.db_path)) KTUNE_RETURN_IF_ERROR(LockStore());
  KTUNE_RETURN_IF_ERROR(OpenDevices());
  KTUNE_ASSIGN_OR_RETURN(reader_, Store::Open(options_.db_path, /*create=*/true));
  fleet_ = reader_->fleet();
  return absl::OkStatus();
}

absl::Status Scheduler::Resume() {
  if (fleet_mode()) {
    // The fleet's unfinished jobs are claimed, by this daemon or another.
    {
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = true;
    }
    StartFleet();
    return absl::OkStatus();
  }
  // The daemon's unfinished jobs, oldest first.
  KTUNE_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, reader_->ListJobs());
  std::reverse(jobs.begin(), jobs.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = true;
  }
  for (const JobRecord& j : jobs) {
    if (j.origin != "daemon" || Finished(j.state)) continue;
    v1::JobSpec spec;
    if (!spec.ParseFromString(j.spec)) {
      (void)reader_->SetJobState(j.id, JobState::kFailed,
                                 "could not resume: the stored spec is damaged");
      continue;
    }
    absl::StatusOr<std::shared_ptr<Entry>> e =
        Prepare(spec, j.priority, j.client, /*resuming=*/true);
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
  StopFleet();
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  stopping_ = true;
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

absl::StatusOr<std::vector<Scheduler::DeviceSlot*>> Scheduler::SelectSlots(
    const v1::JobSpec& spec) {
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
    return slots;
  }
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
          "device.devices: '", want, "' is not served by this daemon (or named twice); it serves ",
          StrJoin(served, ", ")));
    }
    slots.push_back(found);
  }
  for (const DeviceSlot* d : slots) {
    const DeviceInfo& a = slots.front()->info;
    const DeviceInfo& b = d->info;
    if (a.name != b.name || a.architecture != b.architecture || a.memory_bytes != b.memory_bytes ||
        a.simulated != b.simulated || (a.simulated && a.uuid != b.uuid)) {
      return absl::InvalidArgumentError(StrCat(
          "device.devices: ", slots.front()->locator, " (", a.name, ") and ", d->locator, " (",
          b.name, ") are not the same model; one job's measurements never mix models"));
    }
  }
  return slots;
}

absl::Status Scheduler::ApplyLimits(v1::JobSpec& spec) const {
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

  return absl::OkStatus();
}

absl::Status Scheduler::CheckSize(const Job& job) const {
  const SchedulerLimits& lim = options_.limits;
  if (lim.max_space > 0) {
    const SpaceCount count = job.space->Count();
    if (static_cast<double>(count.count) > lim.max_space) {
      return absl::InvalidArgumentError(
          StrCat("parameters: the space has ", count.exact ? "" : "about ",
                 static_cast<double>(count.count), " configurations, over this daemon's limit of ",
                 lim.max_space, " (--max-space)"));
    }
  }
  if (lim.max_argument_bytes > 0) {
    KTUNE_ASSIGN_OR_RETURN(const std::int64_t bytes, ArgumentBytes(job));
    if (bytes > lim.max_argument_bytes) {
      return absl::InvalidArgumentError(StrCat("arguments: the buffers take ", bytes >> 20,
                                               " MiB of GPU memory, over this "
                                               "daemon's limit of ",
                                               lim.max_argument_bytes >> 20,
                                               " MiB (--max-argument-mib)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Scheduler::Entry>> Scheduler::Prepare(v1::JobSpec spec, int priority,
                                                                     const std::string& client,
                                                                     bool resuming) {
  KTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Entry> e,
                         Plan(std::move(spec), priority, client, resuming));
  return Enqueue(std::move(e), resuming);
}

absl::Status Scheduler::CheckClientLimit(const std::string& client, std::int64_t unfinished,
                                         bool fleet) const {
  const int limit = options_.limits.max_jobs_per_client;
  if (limit <= 0 || unfinished < limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      StrCat("client '", client, "' has ", unfinished, " jobs queued or running",
             fleet ? " in the fleet" : "", ", this daemon's limit per client ",
             "(--max-jobs-per-client); submit again once one ends"));
}

absl::StatusOr<std::shared_ptr<Scheduler::Entry>> Scheduler::Plan(v1::JobSpec spec, int priority,
                                                                  const std::string& client,
                                                                  bool resuming) {
  KTUNE_ASSIGN_OR_RETURN(std::vector<DeviceSlot*> slots, SelectSlots(spec));
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
  KTUNE_RETURN_IF_ERROR(ApplyLimits(spec));

  auto e = std::make_shared<Entry>();
  e->slot = slot;
  e->slots = slots;
  e->priority = priority;
  // Simulated devices replay their recordings now (cheap); a GPU is opened
  // when the job runs.
  std::vector<std::unique_ptr<Device>> replays;
  if (slot->probe != nullptr) {
    for (DeviceSlot* d : slots) {
      auto* sim = static_cast<SimulatedDevice*>(d->probe.get());
      auto replay = std::make_unique<SimulatedDevice>(sim->shared_recording(), d->locator);
      if (options_.device_options.sim_speed > 0) {
        replay->set_speed(options_.device_options.sim_speed);
      }
      replays.push_back(std::move(replay));
    }
  }
  // The job (resolved against the first replay: a spec without a kernel is
  // its recording), its strategy checked.
  KTUNE_ASSIGN_OR_RETURN(
      JobRun run, JobRun::Plan(spec, ".", replays.empty() ? nullptr : replays.front().get()));
  KTUNE_RETURN_IF_ERROR(CheckSize(run.job()));
  // A recording that cannot replay this job (other parameters, a pipeline)
  // is refused now rather than queued to fail; binding a replay is cheap,
  // and the job binds its gated device again when it runs.
  if (!replays.empty()) KTUNE_RETURN_IF_ERROR(replays.front()->Bind(BindingFor(run.job())));
  e->record = MakeJobRecord(run.job(), slot->info);
  e->record.origin = "daemon";
  e->record.priority = priority;
  e->record.client = client;
  e->id = e->record.id;
  e->run.emplace(std::move(run));
  if (!replays.empty()) {
    KTUNE_ASSIGN_OR_RETURN(e->device, GateDevices(std::move(replays), slots, priority));
  }
  return e;
}

absl::StatusOr<std::shared_ptr<Scheduler::Entry>> Scheduler::Enqueue(std::shared_ptr<Entry> e,
                                                                     bool resuming) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return NotAccepting();
  if (auto it = active_.find(e->id); it != active_.end()) {  // already here
    it->second->existed = true;
    return it->second;
  }
  if (fleet_mode()) {  // the fleet's queue, in the store
    std::lock_guard<std::mutex> rl(read_mu_);
    KTUNE_RETURN_IF_ERROR(OfferToFleet(*e));
    return e;
  }
  if (!resuming && static_cast<int>(queue_.size()) >= options_.limits.max_queued) {
    return absl::ResourceExhaustedError(
        StrCat("queued jobs: ", queue_.size(), " are waiting, this daemon's limit (--max-queued)"));
  }
  if (!resuming) {
    const std::string& client = e->record.client;
    const auto unfinished = std::count_if(active_.begin(), active_.end(), [&](const auto& a) {
      return a.second->record.client == client;
    });
    KTUNE_RETURN_IF_ERROR(CheckClientLimit(client, unfinished, /*fleet=*/false));
  }
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    KTUNE_ASSIGN_OR_RETURN(e->record, reader_->QueueJob(e->record, &e->existed));
  }
  e->order = next_order_++;
  active_[e->id] = e;
  queue_[{-e->priority, e->order}] = e;
  Dispatch();
  return e;
}

absl::StatusOr<std::unique_ptr<Device>> Scheduler::GateDevices(
    std::vector<std::unique_ptr<Device>> members, const std::vector<DeviceSlot*>& slots,
    int priority) {
  // Each device's evaluations take turns at its own gate, so a job spread
  // over several GPUs never overlaps another job's timed region on any.
  const double weight = GateWeight(priority);
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

absl::Status Scheduler::OpenJobDevice(Entry& e) {
  if (e.device != nullptr) return absl::OkStatus();
  std::vector<std::unique_ptr<Device>> members;
  for (DeviceSlot* slot : e.slots) {
    absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(slot->locator, options_.device_options);
    if (!d.ok()) {
      return absl::Status(d.status().code(),
                          StrCat("device ", slot->locator, ": ", d.status().message()));
    }
    members.push_back(*std::move(d));
  }
  KTUNE_ASSIGN_OR_RETURN(e.device, GateDevices(std::move(members), e.slots, e.priority));
  return absl::OkStatus();
}

SessionOptions Scheduler::EventsOf(const std::shared_ptr<Entry>& e, bool* wall_limit_hit) {
  SessionOptions so;
  so.stop = &e->stop;
  so.clock = options_.clock;
  if (fleet_mode()) {
    // A fleet's database may go away for a while: keep the measured
    // candidate and wait for it, saying so.
    so.wait_for_store = true;
    so.on_store_retry = SayStoreRetries("ktuned", e->id);
  }
  const Clock::TimePoint start = options_.clock->Now();
  const double wall_limit = options_.limits.max_wall_seconds;
  so.on_progress = [this, e, start, wall_limit, wall_limit_hit](const Progress& p) {
    v1::JobEvent ev;
    ev.set_job_id(e->id);
    ProgressToProto(p, ev.mutable_progress());
    Now(ev.mutable_at());
    Broadcast(*e, ev, false);
    if (wall_limit > 0 &&
        std::chrono::duration<double>(options_.clock->Now() - start).count() > wall_limit) {
      *wall_limit_hit = true;
      e->stop.store(true);
    }
  };
  so.on_measurement = [this, e](const StoredMeasurement& m) {
    if (m.sequence > e->last_sequence.load()) e->last_sequence.store(m.sequence);
    CountMeasurement(*e, m);
    v1::JobEvent ev;
    ev.set_job_id(e->id);
    MeasurementToProto(m, ev.mutable_measurement());
    Now(ev.mutable_at());
    Broadcast(*e, ev, false);
  };
  so.on_new_best = [this, e](const StoredMeasurement& m) {
    best_generation_.fetch_add(1);
    v1::JobEvent ev;
    ev.set_job_id(e->id);
    MeasurementToProto(m, ev.mutable_new_best());
    Now(ev.mutable_at());
    Broadcast(*e, ev, false);
  };
  return so;
}

void Scheduler::CountMeasurement(Entry& e, const StoredMeasurement& m) {
  DeviceSlot& slot = *e.slot;
  slot.evaluations[static_cast<std::size_t>(m.measurement.status)].fetch_add(1);
  const v1::Conditions& c = m.measurement.conditions;
  if (c.load() == v1::LoadProfile::UNDER_LOAD && c.canary_slowdown() > 0) {
    slot.canary_slowdown.store(c.canary_slowdown());
  }
  if (e.device != nullptr) {
    const std::int64_t restarts = e.device->worker_restarts();
    slot.worker_restarts.fetch_add(restarts - e.restarts_seen);
    e.restarts_seen = restarts;
  }
}

void Scheduler::Run(const std::shared_ptr<Entry>& e) {
  bool wall_limit_hit = false;
  std::string failure;
  JobState final_state = JobState::kFailed;
  std::string final_message;

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, /*create=*/false);
  if (!store.ok()) {
    failure = StrCat("store: ", store.status().message());
  } else if (absl::Status opened = OpenJobDevice(*e); !opened.ok()) {
    failure = std::string(opened.message());
  } else if (absl::Status bound = e->run->Bind(*e->device); !bound.ok()) {
    failure = StrCat("the device cannot run this job: ", bound.message());
  } else {
    Broadcast(*e, StateEvent(e->id, v1::RUNNING), false);
    absl::StatusOr<JobRunResult> result =
        e->run->Run(*e->device, **store, EventsOf(e, &wall_limit_hit));
    if (!result.ok()) {
      failure = std::string(result.status().message());
    } else {
      final_state = result->session.job.state;
      final_message = result->session.end_reason;
    }
  }
  Finish(e, store.ok() ? store->get() : nullptr, failure, final_state, final_message,
         wall_limit_hit);
}

void Scheduler::Finish(const std::shared_ptr<Entry>& e, Store* store, const std::string& failure,
                       JobState final_state, std::string final_message, bool wall_limit_hit) {
  bool cancelled = false;
  bool lost = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled = e->cancelled;
    lost = e->lost;
    e->ending = true;
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
  if (lost) {
    // Another daemon of the fleet runs it now: its end is that one's.
  } else if (store != nullptr) {
    // A job that another live process runs now (a local `ktune tune` of
    // the same job, or in a fleet a daemon that took it over) stays that
    // process's to end: the store refuses the write.
    const absl::Status ended = store->SetJobState(e->id, final_state, final_message);
    lost = fleet_mode() && absl::IsFailedPrecondition(ended);
  } else {
    std::lock_guard<std::mutex> rl(read_mu_);
    (void)reader_->SetJobState(e->id, final_state, final_message);
  }
  if (fleet_mode()) {
    if (lost) {
      std::fprintf(stderr,
                   "ktuned: job %s: another daemon of the fleet runs it now; stopped here\n",
                   e->id.c_str());
    } else {
      std::fprintf(stderr, "ktuned: job %s ended here: %s\n", e->id.c_str(),
                   JobStateName(final_state));
    }
  }
  best_generation_.fetch_add(1);
  if (!failure.empty() && !lost) {
    std::fprintf(stderr, "ktuned: job %s failed: %s\n", e->id.c_str(), failure.c_str());
  }
  if (lost) {
    // Its watchers follow it on, through the store, from what they heard.
    std::vector<std::shared_ptr<Subscription>> moved;
    {
      std::lock_guard<std::mutex> lock(e->events_mu);
      std::erase_if(e->subs, [&](const std::shared_ptr<Subscription>& sub) {
        if (sub->replaying) return false;
        moved.push_back(sub);
        return true;
      });
    }
    for (const auto& sub : moved) {
      FollowElsewhere(e->id, std::max(sub->replayed_up_to, e->last_sequence.load()), sub->sink);
    }
    Broadcast(*e, StateEvent(e->id, v1::RUNNING), /*last=*/true);
  } else {
    Broadcast(*e, StateEvent(e->id, JobStateToProto(final_state)), /*last=*/true);
  }
  if (fleet_mode()) {  // a run slot frees: claim the fleet's next job
    {
      std::lock_guard<std::mutex> fl(fleet_mu_);
      fleet_poke_ = true;
    }
    fleet_wake_.notify_all();
  }

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

absl::StatusOr<v1::SubmitJobResponse> Scheduler::Submit(const v1::SubmitJobRequest& request) {
  if (request.priority() < -1000 || request.priority() > 1000) {
    return absl::InvalidArgumentError("priority: must lie in [-1000, 1000]");
  }
  KTUNE_RETURN_IF_ERROR(CheckClientName(request.client()));
  if (const std::size_t bytes = request.ByteSizeLong();
      bytes > static_cast<std::size_t>(options_.limits.max_request_bytes)) {
    return absl::ResourceExhaustedError(
        StrCat("the request is ", bytes, " bytes; this daemon takes up to ",
               options_.limits.max_request_bytes >> 20, " MiB (ktuned --max-request-mib)"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return NotAccepting();
  }
  if (fleet_mode() && request.spec().device().devices_size() == 1 &&
      !SelectSlots(request.spec()).ok()) {
    return HandOver(request, request.spec().device().devices(0));
  }
  absl::StatusOr<std::shared_ptr<Entry>> e =
      Prepare(request.spec(), request.priority(), request.client(), false);
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

}  // namespace ktune
