// The scheduler as one daemon of a fleet (a PostgreSQL store): heartbeats,
// claims, submissions handed between daemons, and the jobs other daemons
// run, watched and cancelled through the store.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "server/common/convert.h"
#include "server/daemon/scheduler.h"
#include "server/daemon/scheduler_entry.h"
#include "tuner/base/process.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;

// How often the fleet thread looks for work, and how often a follower
// polls the store for another daemon's job.
constexpr auto kFleetPoll = 200ms;
constexpr auto kFollowPoll = 250ms;

}  // namespace

void Scheduler::StartFleet() {
  const std::optional<ProcessName> self = ThisProcess();
  daemon_name_ = self ? self->Encode() : StrCat("ktuned-", getpid());
  for (const auto& d : devices_) {
    FleetDevice f;
    f.model = FleetModelOf(d->info);
    f.info = d->info;
    f.locator = d->locator;
    fleet_devices_.push_back(f);
    if (std::find(models_.begin(), models_.end(), f.model) == models_.end()) {
      models_.push_back(f.model);
    }
  }
  // Known to the fleet before the daemon says it is up.
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    absl::StatusOr<FleetBeat> first =
        fleet_->Heartbeat(daemon_name_, fleet_devices_, {}, options_.lease);
    if (!first.ok()) {
      std::fprintf(stderr, "ktuned: fleet: first heartbeat failed: %s; trying again\n",
                   std::string(first.status().message()).c_str());
    }
  }
  // The heartbeat has a thread and a connection of its own: planning a
  // claimed job, or a slow query of the queue, never delays it.
  beat_thread_ = std::thread([this] { BeatLoop(); });
  fleet_thread_ = std::thread([this] { FleetLoop(); });
}

void Scheduler::StopFleet() {
  std::vector<std::shared_ptr<Follower>> followers;
  {
    std::lock_guard<std::mutex> lock(fleet_mu_);
    fleet_stop_ = true;
    followers.swap(followers_);
  }
  fleet_wake_.notify_all();
  if (fleet_thread_.joinable()) fleet_thread_.join();
  if (beat_thread_.joinable()) beat_thread_.join();
  for (const auto& f : followers) {
    f->stop.store(true);
    if (f->thread.joinable()) f->thread.join();
  }
}

bool Scheduler::FleetWait(std::chrono::milliseconds most, bool* poked) {
  std::unique_lock<std::mutex> lock(fleet_mu_);
  if (poked == nullptr) {
    fleet_wake_.wait_for(lock, most, [&] { return fleet_stop_; });
  } else {
    fleet_wake_.wait_for(lock, most, [&] { return fleet_stop_ || fleet_poke_; });
    *poked = fleet_poke_;
    fleet_poke_ = false;
  }
  return !fleet_stop_;
}

void Scheduler::BeatLoop() {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, false);
  bool reachable = true;
  auto told = [&](bool now, const absl::Status& why) {
    if (now == reachable) return;
    reachable = now;
    if (!now) {
      std::fprintf(stderr,
                   "ktuned: fleet: the store does not answer (%s); running jobs go on "
                   "measuring, keep what they measured and store it when it answers again\n",
                   std::string(why.message()).c_str());
    } else {
      std::fprintf(stderr, "ktuned: fleet: the store answers again\n");
    }
    if (store_health_) store_health_(now);
  };
  while (FleetWait(std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease / 3),
                   nullptr)) {
    if (!store.ok()) {
      store = Store::Open(options_.db_path, false);
      if (!store.ok()) {
        told(false, store.status());
        continue;
      }
    }
    const absl::Status beat = Beat(*(*store)->fleet());
    told(beat.ok(), beat);
  }
  // A clean stop: this daemon's running jobs end as interrupted (Shutdown
  // waits for them), so the fleet's other daemons claim them at once.
  if (store.ok()) (void)(*store)->fleet()->Leave(daemon_name_);
}

void Scheduler::FleetLoop() {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, false);
  auto last_look = std::chrono::steady_clock::time_point();
  bool poked = true;
  while (FleetWait(kFleetPoll, &poked)) {
    if (!store.ok()) {
      store = Store::Open(options_.db_path, false);
      if (!store.ok()) continue;  // the heartbeat's thread says so
    }
    FleetQueue& queue = *(*store)->fleet();
    // What any daemon stored moves the answers' generation: GetBest reads
    // again, and its calls never wait on the database for this.
    bool moved = poked;
    if (absl::StatusOr<std::int64_t> v = (*store)->ChangeCount(); v.ok()) {
      if (change_count_ >= 0 && *v != change_count_) {
        best_generation_.fetch_add(1);
        moved = true;
      }
      change_count_ = *v;
    }
    // Work shows as a change (a job queued, a submission, a job's end);
    // a lapsed lease does not, so the queue is also looked at as often as
    // a heartbeat goes out. An idle fleet costs each daemon one query per
    // poll.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_look >= options_.lease / 3) moved = true;
    if (moved) {
      last_look = now;
      TakeSubmissions(queue);
      ClaimJobs(**store);
    }
  }
}

absl::Status Scheduler::Beat(FleetQueue& queue) {
  std::vector<std::string> running;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : active_) {
      if (e->running && !e->ending) running.push_back(id);
    }
  }
  absl::StatusOr<FleetBeat> beat =
      queue.Heartbeat(daemon_name_, fleet_devices_, running, options_.lease);
  if (!beat.ok()) return beat.status();
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : beat->cancel) {
    if (auto it = active_.find(id); it != active_.end()) {
      it->second->cancelled = true;
      it->second->stop.store(true);
    }
  }
  for (const std::string& id : beat->lost) {
    // A job whose end this daemon is recording is not lost: the end moved
    // its state.
    if (auto it = active_.find(id);
        it != active_.end() && !it->second->lost && !it->second->ending) {
      it->second->lost = true;
      it->second->stop.store(true);
      std::fprintf(stderr,
                   "ktuned: job %s: this daemon's lease lapsed and another daemon took the job "
                   "over; stopping it here\n",
                   id.c_str());
    }
  }
  return absl::OkStatus();
}

void Scheduler::TakeSubmissions(FleetQueue& queue) {
  for (;;) {
    absl::StatusOr<std::optional<FleetSubmission>> s = queue.TakeSubmission(models_);
    if (!s.ok() || !s->has_value()) return;
    const FleetSubmission& sub = **s;
    v1::JobSpec spec;
    absl::StatusOr<std::shared_ptr<Entry>> e =
        spec.ParseFromString(sub.spec)
            ? Prepare(spec, sub.priority, sub.client, /*resuming=*/false)
            : absl::StatusOr<std::shared_ptr<Entry>>(
                  absl::InvalidArgumentError("spec: the handed-over spec is damaged"));
    if (e.ok()) {
      (void)queue.Answer(sub.id, (*e)->id, 0, "");
    } else {
      (void)queue.Answer(sub.id, "", static_cast<int>(e.status().code()),
                         std::string(e.status().message()));
    }
  }
}

absl::Status Scheduler::OfferToFleet(Entry& e) {
  // A job running on some daemon is left to it; any other is queued (again).
  absl::StatusOr<JobRecord> now = reader_->GetJob(e.id);
  if (now.ok() && now->id == e.id && now->state == JobState::kRunning) {
    e.existed = true;
    e.record = *now;
    return absl::OkStatus();
  }
  // The queue's limit holds for the whole fleet.
  if (!now.ok() || now->state == JobState::kSucceeded || now->state == JobState::kFailed ||
      now->state == JobState::kCancelled) {
    KTUNE_ASSIGN_OR_RETURN(const std::int64_t waiting, fleet_->Waiting());
    if (waiting >= options_.limits.max_queued) {
      return absl::ResourceExhaustedError(
          StrCat("queued jobs: ", waiting,
                 " are waiting in the fleet, this daemon's limit (--max-queued)"));
    }
    if (options_.limits.max_jobs_per_client > 0) {
      KTUNE_ASSIGN_OR_RETURN(const std::int64_t unfinished, fleet_->Unfinished(e.record.client));
      KTUNE_RETURN_IF_ERROR(CheckClientLimit(e.record.client, unfinished, /*fleet=*/true));
    }
  }
  KTUNE_ASSIGN_OR_RETURN(e.record, reader_->QueueJob(e.record, &e.existed));
  KTUNE_RETURN_IF_ERROR(fleet_->Offer(e.id, FleetModelOf(e.slot->info)));
  {
    std::lock_guard<std::mutex> lock(fleet_mu_);
    fleet_poke_ = true;
  }
  fleet_wake_.notify_all();
  return absl::OkStatus();
}

void Scheduler::ClaimJobs(Store& store) {
  FleetQueue& queue = *store.fleet();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!accepting_ || running_ >= options_.limits.max_running) return;
    }
    absl::StatusOr<std::optional<JobRecord>> claimed =
        queue.Claim(daemon_name_, models_, options_.lease);
    if (!claimed.ok() || !claimed->has_value()) return;
    JobRecord rec = **claimed;
    const std::string model = FleetModelOf(rec.device);
    v1::JobSpec spec;
    absl::Status planned = spec.ParseFromString(rec.spec)
                               ? absl::OkStatus()
                               : absl::DataLossError("the stored spec is damaged");
    if (planned.ok()) {
      // This daemon's GPUs of the model, as many as the job had.
      const int wanted = std::max(1, spec.device().devices_size());
      spec.mutable_device()->clear_devices();
      for (const FleetDevice& d : fleet_devices_) {
        if (d.model == model && spec.device().devices_size() < wanted) {
          spec.mutable_device()->add_devices(d.locator);
        }
      }
      if (spec.device().devices_size() < wanted) {
        planned = absl::FailedPreconditionError(
            StrCat("it needs ", wanted, " GPUs of ", model, "; this daemon has fewer"));
      }
    }
    absl::StatusOr<std::shared_ptr<Entry>> e =
        planned.ok() ? Plan(spec, rec.priority, rec.client, /*resuming=*/true)
                     : absl::StatusOr<std::shared_ptr<Entry>>(planned);
    if (!e.ok()) {
      (void)store.SetJobState(rec.id, JobState::kFailed,
                              StrCat("could not run on this daemon: ", e.status().message()));
      continue;
    }
    (*e)->id = rec.id;
    (*e)->record = rec;
    (*e)->run->KeepJobId(rec.id);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto here = active_.find(rec.id);
        accepting_ && here != active_.end() && !here->second->lost && !here->second->ending) {
      // Still running here, its lease lapsed while the database did not
      // answer: the claim renewed it.
      continue;
    }
    if (!accepting_ || active_.count(rec.id) > 0) {
      // Stopping (or still ending it here): for any daemon to claim again.
      (void)store.SetJobState(rec.id, JobState::kInterrupted, "");
      return;
    }
    std::fprintf(stderr, "ktuned: running job %s of the fleet (%s, %lld evaluations stored)\n",
                 rec.id.c_str(), rec.kernel_name.c_str(), static_cast<long long>(rec.evaluations));
    (*e)->order = next_order_++;
    (*e)->running = true;
    active_[rec.id] = *e;
    ++running_;
    boost::asio::post(runners_, [this, entry = *e] { Run(entry); });
  }
}

absl::StatusOr<v1::SubmitJobResponse> Scheduler::HandOver(const v1::SubmitJobRequest& request,
                                                          const std::string& wanted) {
  std::int64_t id = 0;
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    absl::StatusOr<std::string> model = fleet_->ResolveModel(wanted, options_.lease);
    if (!model.ok()) {
      return absl::InvalidArgumentError(StrCat("device.devices: ", model.status().message()));
    }
    KTUNE_ASSIGN_OR_RETURN(id, fleet_->Hand(request.spec().SerializeAsString(), request.priority(),
                                            *model, request.client()));
  }
  // A daemon of the model plans it within its next look for work.
  const auto deadline = std::chrono::steady_clock::now() + options_.lease * 2;
  for (auto wait = 5ms;; wait = std::min(wait * 2, std::chrono::milliseconds(100))) {
    std::this_thread::sleep_for(wait);
    std::optional<std::string> job_id;
    {
      std::lock_guard<std::mutex> rl(read_mu_);
      KTUNE_ASSIGN_OR_RETURN(job_id, fleet_->AnswerOf(id));
    }
    if (job_id) {
      v1::SubmitJobResponse out;
      out.set_job_id(*job_id);
      v1::GetJobRequest g;
      g.set_job_id(*job_id);
      KTUNE_ASSIGN_OR_RETURN(*out.mutable_job(), GetJob(g));
      out.mutable_job()->clear_measurements();
      return out;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          StrCat("device.devices: no daemon serving '", wanted, "' took the job within ",
                 std::chrono::duration_cast<std::chrono::seconds>(options_.lease * 2).count(),
                 " s; it stays handed over, and a daemon of the model plans it when it can"));
    }
  }
}

absl::StatusOr<v1::Job> Scheduler::CancelElsewhere(const std::string& id) {
  bool now = false;
  {
    std::lock_guard<std::mutex> rl(read_mu_);
    absl::StatusOr<bool> asked = fleet_->RequestCancel(id);
    if (!asked.ok()) return asked.status();
    now = *asked;
  }
  v1::GetJobRequest g;
  g.set_job_id(id);
  // A running job stops after its candidate, once its daemon's heartbeat
  // hears of it. Its session first leaves it interrupted, then its daemon
  // records the cancellation: the answer waits for that.
  const auto deadline = std::chrono::steady_clock::now() + options_.lease + 30s;
  for (;;) {
    KTUNE_ASSIGN_OR_RETURN(v1::Job job, GetJob(g));
    const bool stopping = job.state() == v1::RUNNING || job.state() == v1::INTERRUPTED;
    if (now || !stopping || std::chrono::steady_clock::now() > deadline) {
      return job;
    }
    std::this_thread::sleep_for(kFleetPoll);
  }
}

void Scheduler::FollowElsewhere(const std::string& id, std::int64_t replayed_up_to,
                                std::shared_ptr<EventSink> sink) {
  auto f = std::make_shared<Follower>();
  f->sink = std::move(sink);
  std::lock_guard<std::mutex> lock(fleet_mu_);
  if (fleet_stop_) {
    f->sink->Deliver(StateEvent(id, v1::QUEUED), /*last=*/true);
    return;
  }
  f->thread = std::thread([this, f, id, replayed_up_to] {
    Follow(*f, id, replayed_up_to);
    f->done.store(true);
  });
  // Ended followers are dropped as others come.
  std::erase_if(followers_, [](const std::shared_ptr<Follower>& old) {
    if (!old->done.load()) return false;
    old->thread.join();
    return true;
  });
  followers_.push_back(f);
}

void Scheduler::Follow(Follower& follower, const std::string& id, std::int64_t mark) {
  Follower* f = &follower;
  {
    bool first = true;  // its state was told by Watch
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options_.db_path, false);
    v1::JobState last_state = v1::JOB_STATE_UNSPECIFIED;
    while (!f->stop.load()) {
      if (store.ok()) {
        absl::StatusOr<JobRecord> job = (*store)->GetJob(id);
        absl::StatusOr<std::vector<StoredMeasurement>> ms = (*store)->LoadMeasurements(id);
        if (job.ok() && ms.ok()) {
          for (const StoredMeasurement& m : *ms) {
            if (mark != kFromNow && m.sequence > mark) {
              v1::JobEvent ev;
              ev.set_job_id(id);
              MeasurementToProto(m, ev.mutable_measurement());
              Now(ev.mutable_at());
              f->sink->Deliver(ev, false);
            }
          }
          for (const StoredMeasurement& m : *ms) mark = std::max(mark, m.sequence);
          if (mark == kFromNow) mark = -1;
          const v1::JobState state = JobStateToProto(job->state);
          if (state != v1::QUEUED && state != v1::RUNNING) {
            f->sink->Deliver(StateEvent(id, state), /*last=*/true);
            return;
          }
          if (!first && state != last_state) f->sink->Deliver(StateEvent(id, state), false);
          first = false;
          last_state = state;
        }
      }
      std::this_thread::sleep_for(kFollowPoll);
    }
    f->sink->Deliver(
        StateEvent(id, last_state == v1::JOB_STATE_UNSPECIFIED ? v1::QUEUED : last_state),
        /*last=*/true);
  }
}

}  // namespace ktune
