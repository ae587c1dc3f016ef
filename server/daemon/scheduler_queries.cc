// The scheduler's reads, watches and cancellations (the jobs themselves,
// from submission to end, are scheduler.cc's).
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "server/common/convert.h"
#include "server/daemon/scheduler.h"
#include "server/daemon/scheduler_entry.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {

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

absl::StatusOr<std::string> Scheduler::ResolveId(const std::string& id_or_prefix) {
  if (id_or_prefix.empty()) return absl::InvalidArgumentError("job_id: required");
  std::lock_guard<std::mutex> rl(read_mu_);
  absl::StatusOr<JobRecord> j = reader_->GetJob(id_or_prefix);
  if (!j.ok()) return absl::Status(j.status().code(), StrCat("job_id: ", j.status().message()));
  return j->id;
}

absl::StatusOr<v1::Job> Scheduler::GetJob(const v1::GetJobRequest& request) {
  KTUNE_ASSIGN_OR_RETURN(const std::string id, ResolveId(request.job_id()));
  v1::Job out;
  std::lock_guard<std::mutex> rl(read_mu_);
  KTUNE_ASSIGN_OR_RETURN(JobRecord rec, reader_->GetJob(id));
  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> ms, reader_->LoadMeasurements(id));
  JobWithMeasurementsToProto(rec, ms, request.include_measurements(), request.measurements_from(),
                             &out);
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
  std::vector<std::string> listed;
  for (std::size_t i = offset; i < jobs.size() && i < offset + static_cast<std::size_t>(page);
       ++i) {
    v1::Job* j = out.add_jobs();
    JobToProto(jobs[i], j);
    // Lists stay small (GetJob has the spec), but for the budget.
    const v1::StrategySpec strategy = j->spec().strategy();
    j->clear_spec();
    *j->mutable_spec()->mutable_strategy() = strategy;
    j->mutable_progress()->set_max_evaluations(strategy.max_evaluations());
    listed.push_back(jobs[i].id);
  }
  if (request.include_best()) {
    std::map<std::string, StoredMeasurement> best;
    {
      std::lock_guard<std::mutex> rl(read_mu_);
      KTUNE_ASSIGN_OR_RETURN(best, reader_->LoadBestOfJobs(listed));
    }
    for (v1::Job& j : *out.mutable_jobs()) {
      if (auto it = best.find(j.id()); it != best.end()) {
        MeasurementToProto(it->second, j.mutable_best());
      }
    }
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
    if (it == active_.end() && fleet_mode()) {
      lock.unlock();
      return CancelElsewhere(id);
    }
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
  if (fleet_mode()) return;  // the fleet thread watches the store
  constexpr std::int64_t kEveryNs = 200'000'000;
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(options_.clock->Now().time_since_epoch())
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
                                                       std::uint64_t* generation,
                                                       const std::string& client) {
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
  v1::GetBestResponse out;
  if (match.ok()) {
    BestMatchToProto(*match, &out);
  } else if (!absl::IsNotFound(match.status()) || !request.tune_on_miss()) {
    return match.status();
  }
  if (request.tune_on_miss() && out.match() != v1::GetBestResponse::EXACT) {
    TuneOnMiss(request, client, &out);
    // Nothing stored and nothing queued: the miss stays a NOT_FOUND.
    if (!match.ok() && out.tuning_job_id().empty()) {
      return absl::Status(match.status().code(),
                          StrCat(match.status().message(), "; ", out.tuning_note()));
    }
  }
  return out;
}

v1::ListDevicesResponse Scheduler::ListDevices() const {
  v1::ListDevicesResponse out;
  for (const auto& d : devices_) DeviceToProto(d->info, out.add_devices());
  return out;
}

absl::StatusOr<SchedulerActivity> Scheduler::Activity() {
  SchedulerActivity out;
  std::map<const DeviceSlot*, std::pair<int, int>> load;  // queued, running
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, e] : active_) {
      for (const DeviceSlot* d : e->slots) {
        ++(e->running ? load[d].second : load[d].first);
      }
    }
  }
  for (const auto& d : devices_) {
    DeviceActivity a;
    a.locator = d->locator;
    a.info = d->info;
    a.queued = load[d.get()].first;
    a.running = load[d.get()].second;
    a.busy_seconds = std::chrono::duration<double>(d->gate.busy_time()).count();
    for (std::size_t i = 0; i < a.evaluations.size(); ++i) a.evaluations[i] = d->evaluations[i];
    a.worker_restarts = d->worker_restarts;
    if (const double c = d->canary_slowdown; c > 0) a.canary_slowdown = c;
    out.devices.push_back(std::move(a));
  }
  out.compile = CompileActivityOf(options_.device_options.compile_pool);
  std::lock_guard<std::mutex> rl(read_mu_);
  KTUNE_ASSIGN_OR_RETURN(out.jobs, reader_->CountJobs());
  KTUNE_ASSIGN_OR_RETURN(out.store_bytes, reader_->SizeBytes());
  if (fleet_ != nullptr) {
    KTUNE_ASSIGN_OR_RETURN(out.fleet_waiting, fleet_->Waiting());
  }
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
  // A job not running here is told once, as the last event; a live one's
  // state comes first and its changes follow.
  v1::JobEvent state = StateEvent(id, job->state());
  if (e != nullptr) sink->Deliver(state, false);
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
  if (e == nullptr && fleet_mode() && (job->state() == v1::QUEUED || job->state() == v1::RUNNING)) {
    // Queued in the fleet, or run by another daemon: followed through the
    // store.
    sink->Deliver(state, false);
    sink->Deliver(progress, false);
    FollowElsewhere(id, request.from_start() ? sub->replayed_up_to : kFromNow, sink);
    return absl::OkStatus();
  }
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
  {
    std::lock_guard<std::mutex> lock(fleet_mu_);
    for (const auto& f : followers_) {
      if (f->sink.get() == sink) f->stop.store(true);
    }
  }
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
