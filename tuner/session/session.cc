#include "tuner/session/session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

constexpr int kDefaultFinalContenders = 3;
// Rounds of final contenders at most: the first, and more while a
// configuration outside them leads once they are re-measured.
constexpr int kMaxFinalRounds = 3;

}  // namespace

JobRecord MakeJobRecord(const Job& job, const DeviceInfo& device) {
  JobRecord rec;
  rec.id = ComputeJobId(job, device);
  rec.kernel_name = job.kernel_name;
  rec.source_hash = job.source_hash;
  for (const Parameter& p : job.space->params()) rec.parameters.push_back(p.name);
  rec.device = device;
  rec.problem = job.problem;
  rec.spec = DeterministicBytes(job.spec);
  rec.spec_json = JobSpecToJson(job.spec);
  rec.strategy = job.strategy;
  rec.seed = job.seed;
  rec.objective = job.objective.id();
  return rec;
}

Session::Session(const Job& job, Device& device, Strategy& strategy, std::string resolved_strategy)
    : job_(job),
      device_(device),
      strategy_(&strategy),
      resolved_strategy_(std::move(resolved_strategy)),
      job_id_(ComputeJobId(job, device.info())) {}

absl::Status Session::Prepare() {
  if (prepared_) return absl::OkStatus();
  KTUNE_RETURN_IF_ERROR(device_.Bind(BindingFor(job_)));
  prepared_ = true;
  return absl::OkStatus();
}

// The state of one Run, and its steps. Lives for one call of Run.
class Session::Running {
 public:
  Running(Session& session, Store& store, const SessionOptions& options)
      : s_(session),
        space_(*session.job_.space),
        store_(store),
        options_(options),
        clock_(options.clock != nullptr ? *options.clock : Clock::Real()),
        replay_(session.device_.replays_recorded_time()),
        start_(clock_.Now()),
        batch_(static_cast<std::size_t>(std::max(1, session.job_.batch_size))),
        depth_(std::max(batch_, static_cast<std::size_t>(session.device_.pipeline_depth()))) {}

  absl::StatusOr<SessionResult> Run();

 private:
  // Records why the job stopped (if the store still works) and passes the
  // error on. A store that could not take a write (disk full, lock held,
  // read-only) leaves the job interrupted: run again, it resumes.
  absl::Status Fail(const absl::Status& s) {
    (void)store_.SetJobState(s_.job_id_, store_fault_ ? JobState::kInterrupted : JobState::kFailed,
                             std::string(s.message()));
    return s;
  }
  // A write to the store; a failure marks the store at fault. With
  // wait_for_store, an unreachable store is waited for (see SessionOptions).
  absl::Status Stored(const std::function<absl::Status()>& write) {
    double pause_s = 0.1;
    for (int attempt = 0;; ++attempt) {
      absl::Status s = write();
      // Stored before the connection dropped, the answer lost on the way.
      if (attempt > 0 && s.code() == absl::StatusCode::kAlreadyExists) return absl::OkStatus();
      if (s.ok()) return s;
      const bool stopping = options_.stop != nullptr && options_.stop->load();
      if (s.code() != absl::StatusCode::kUnavailable || !options_.wait_for_store || stopping) {
        store_fault_ = true;
        return s;
      }
      if (options_.on_store_retry) options_.on_store_retry(s, pause_s);
      std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
      pause_s = std::min(5.0, pause_s * 2);
    }
  }
  absl::Status Start();
  // The budget that is spent, or nullptr.
  const char* OutOfBudget() const;
  Millis Charged() const;
  // On a stop, measurements that finished meanwhile (on another GPU of a
  // job spread over several) are still recorded, in the order they were
  // asked; false when none is left to record.
  bool NextFinishedWhileStopping();
  // Keeps the strategy's batches coming while the queue has room.
  absl::Status AskAhead(bool stopping);
  // Evaluates `config` (or takes it from the store) and tells the strategy.
  absl::Status Evaluate(const Config& config);
  // The final contenders, re-measured interleaved before one is declared
  // best (on devices that measure; once per job).
  absl::Status FinalRound();
  // Re-measures the first n of ranked_ together and stores what it finds,
  // in the store and in `all` (the job's measurements, `at` their index by
  // key).
  absl::Status RemeasureTop(std::size_t n, std::vector<StoredMeasurement>& all,
                            const std::unordered_map<std::string, std::size_t>& at);
  // Makes `record` the job's best if it beats it; whether it did.
  bool TakeIfBest(const StoredMeasurement& record);
  void Report();

  Session& s_;
  const Space& space_;
  Store& store_;
  const SessionOptions& options_;
  const Clock& clock_;
  const bool replay_;
  const Clock::TimePoint start_;
  const std::size_t batch_;
  const std::size_t depth_;

  SessionResult result_;
  std::unordered_map<std::string, StoredMeasurement> stored_;
  std::int64_t next_sequence_ = 0;
  bool final_round_done_ = false;
  Millis replayed_cost_{0};  // stored candidates' cost, charged again
  Millis new_cost_{0};       // this run's candidates' recorded cost
  double best_loss_ = std::numeric_limits<double>::infinity();
  std::unordered_set<std::string> evaluated_;
  // Ok measurements of this run by loss, for the final contenders.
  std::vector<std::pair<double, Config>> ranked_;
  bool interrupted_ = false;
  bool store_fault_ = false;  // a write to the store failed
  // Configurations asked but not yet evaluated. The device may want several
  // in flight (compiling while the GPU measures); the strategy is asked in
  // whole batches, so with a depth of one batch this is plain ask/tell.
  std::deque<Config> queue_;
  std::int64_t asked_ = 0;
  bool exhausted_ = false;
};

absl::Status Session::Running::Start() {
  JobRecord rec = MakeJobRecord(s_.job_, s_.device_.info());
  rec.id = s_.job_id_;
  rec.strategy = StrategyLabel(s_.job_.strategy, s_.resolved_strategy_);
  result_.resolved_strategy = s_.resolved_strategy_;
  KTUNE_RETURN_IF_ERROR(store_.StartJob(rec, &result_.resumed).status());
  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> previous,
                         store_.LoadMeasurements(s_.job_id_));
  for (StoredMeasurement& m : previous) {
    next_sequence_ = std::max(next_sequence_, m.sequence + 1);
    final_round_done_ = final_round_done_ || m.measurement.conditions.final_round();
    stored_.emplace(m.key, std::move(m));
  }
  result_.progress.max_evaluations = s_.job_.max_evaluations;
  result_.progress.max_time = s_.job_.max_time;
  return absl::OkStatus();
}

Millis Session::Running::Charged() const {
  if (replay_) return replayed_cost_ + new_cost_;
  return replayed_cost_ + std::chrono::duration_cast<Millis>(clock_.Now() - start_);
}

const char* Session::Running::OutOfBudget() const {
  const Job& job = s_.job_;
  if (job.max_evaluations > 0 && result_.progress.evaluations >= job.max_evaluations) {
    return "evaluation budget spent";
  }
  if (job.max_time.count() > 0 && Charged() >= job.max_time) return "time budget spent";
  return nullptr;
}

bool Session::Running::NextFinishedWhileStopping() {
  auto done = std::find_if(queue_.begin(), queue_.end(),
                           [&](const Config& c) { return s_.device_.Ready(c); });
  if (done == queue_.end()) return false;
  if (done != queue_.begin()) {
    Config c = std::move(*done);
    queue_.erase(done);
    queue_.push_front(std::move(c));
  }
  return true;
}

absl::Status Session::Running::AskAhead(bool stopping) {
  while (!stopping && !exhausted_ && queue_.size() + batch_ <= depth_) {
    std::size_t n = batch_;
    if (s_.job_.max_evaluations > 0) {
      n = std::min<std::size_t>(n, static_cast<std::size_t>(s_.job_.max_evaluations - asked_));
    }
    if (n == 0) break;
    const std::vector<Config> got = s_.strategy_->Ask(n);
    if (got.empty()) {
      exhausted_ = true;
      break;
    }
    asked_ += static_cast<std::int64_t>(got.size());
    std::vector<Config> to_prepare;
    for (const Config& c : got) {
      if (!space_.InRange(c)) {
        return absl::InternalError(StrCat("strategy ", s_.resolved_strategy_,
                                          " proposed a configuration outside the space"));
      }
      if (stored_.count(space_.Key(c)) == 0) to_prepare.push_back(c);
      queue_.push_back(c);
    }
    if (!to_prepare.empty()) s_.device_.Prefetch(to_prepare);
  }
  return absl::OkStatus();
}

absl::Status Session::Running::Evaluate(const Config& config) {
  const std::string key = space_.Key(config);
  if (!evaluated_.insert(key).second) {
    return absl::InternalError(
        StrCat("strategy ", s_.resolved_strategy_, " proposed ", key, " twice"));
  }
  StoredMeasurement record;
  bool fresh = false;
  if (auto it = stored_.find(key); it != stored_.end()) {
    record = it->second;
    ++result_.progress.replayed;
    replayed_cost_ += record.measurement.cost;
  } else {
    Measurement m;
    if (int c = space_.FirstViolated(config); c >= 0 || !space_.IsValid(config)) {
      m.status = CandidateStatus::kInvalidByConstraint;
      m.message = c >= 0 ? StrCat("violates constraint ", c, ": ",
                                  space_.constraint_text(static_cast<std::size_t>(c)))
                         : "not in the space";
    } else {
      KTUNE_ASSIGN_OR_RETURN(m, s_.device_.Evaluate(config));
    }
    record.sequence = next_sequence_++;
    record.key = key;
    record.config_json = space_.ToJson(config).Dump();
    if (m.ok()) {
      const double joules = m.conditions.energy_j(), watts = m.conditions.power_w();
      record.objective = s_.job_.objective.Compute(config, m.time.count(), joules, watts);
      record.loss = s_.job_.objective.Loss(config, m.time.count(), joules, watts);
    }
    record.measurement = std::move(m);
    record.measured_at = NowIso8601();
    KTUNE_RETURN_IF_ERROR(Stored([&] { return store_.AddMeasurement(s_.job_id_, record); }));
    new_cost_ += record.measurement.cost;
    fresh = true;
  }
  const Measurement& m = record.measurement;
  Outcome outcome;
  outcome.status = m.status;
  if (m.ok() && record.loss) {
    outcome.loss = *record.loss;
    ranked_.emplace_back(*record.loss, config);
  }
  s_.strategy_->Tell(config, outcome);

  Progress& progress = result_.progress;
  ++progress.evaluations;
  ++progress.status_counts[static_cast<std::size_t>(m.status)];
  const bool improved = TakeIfBest(record);
  if (fresh && options_.on_measurement) options_.on_measurement(record);
  if (improved && options_.on_new_best) options_.on_new_best(record);
  Report();
  return absl::OkStatus();
}

void Session::Running::Report() {
  result_.progress.elapsed = Charged();
  result_.progress.wall = clock_.Now() - start_;
  if (options_.on_progress) options_.on_progress(result_.progress);
}

absl::Status Session::Running::FinalRound() {
  const int wanted = s_.job_.spec.measurement().final_contenders() > 0
                         ? s_.job_.spec.measurement().final_contenders()
                         : kDefaultFinalContenders;
  // The job's measurements in evaluation order, kept as the rounds update
  // them.
  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> all, store_.LoadMeasurements(s_.job_id_));
  std::unordered_map<std::string, std::size_t> at;
  for (std::size_t i = 0; i < all.size(); ++i) at.emplace(all[i].key, i);
  auto by_loss = [](const auto& a, const auto& b) { return a.first < b.first; };
  std::unordered_set<std::string> remeasured;
  for (int round = 0; round < kMaxFinalRounds; ++round) {
    std::stable_sort(ranked_.begin(), ranked_.end(), by_loss);
    // Contenders re-measured slower than they first were can leave the
    // lead to a configuration measured once: it gets a round of its own,
    // beside the others now at the top.
    if (round > 0 && remeasured.count(space_.Key(ranked_.front().second)) != 0) break;
    const std::size_t n = std::min(ranked_.size(), static_cast<std::size_t>(wanted));
    KTUNE_RETURN_IF_ERROR(RemeasureTop(n, all, at));
    for (std::size_t i = 0; i < n; ++i) remeasured.insert(space_.Key(ranked_[i].second));
  }
  // The job's best is the store's: the lowest loss, then the first measured.
  best_loss_ = std::numeric_limits<double>::infinity();
  for (const StoredMeasurement& record : all) TakeIfBest(record);
  KTUNE_RETURN_IF_ERROR(Stored([&] { return store_.RefreshBest(s_.job_id_); }));
  if (result_.best && options_.on_new_best) options_.on_new_best(*result_.best);
  return absl::OkStatus();
}

absl::Status Session::Running::RemeasureTop(
    std::size_t n, std::vector<StoredMeasurement>& all,
    const std::unordered_map<std::string, std::size_t>& at) {
  std::vector<Config> contenders;
  for (std::size_t i = 0; i < n; ++i) contenders.push_back(ranked_[i].second);
  KTUNE_ASSIGN_OR_RETURN(std::vector<Measurement> again, s_.device_.Remeasure(contenders));
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    StoredMeasurement& record = all[at.at(space_.Key(contenders[i]))];
    Measurement m = again[i];
    m.conditions.set_final_round(true);
    m.compile_time = record.measurement.compile_time;
    m.cost = record.measurement.cost + m.cost;
    if (!m.ok()) {
      // A contender that fails now (it passed before) keeps its first
      // measurement, with the failure noted.
      record.measurement.conditions.set_final_round(true);
      record.measurement.message = StrCat("re-measurement failed: ", m.message);
    } else {
      const double joules = m.conditions.energy_j(), watts = m.conditions.power_w();
      record.objective = s_.job_.objective.Compute(contenders[i], m.time.count(), joules, watts);
      record.loss = s_.job_.objective.Loss(contenders[i], m.time.count(), joules, watts);
      // What it measured before stays in the message: the gap between the
      // two is what the final rounds are for.
      char before[48];
      std::snprintf(before, sizeof before, ", %.4f ms before", record.measurement.time.count());
      m.message = StrCat(m.message.empty() ? "re-measured" : m.message, before);
      record.measurement = std::move(m);
      ranked_[i].first = record.loss.value_or(std::numeric_limits<double>::infinity());
    }
    KTUNE_RETURN_IF_ERROR(Stored([&] { return store_.UpdateMeasurement(s_.job_id_, record); }));
    if (options_.on_measurement) options_.on_measurement(record);
  }
  return absl::OkStatus();
}

bool Session::Running::TakeIfBest(const StoredMeasurement& record) {
  if (!record.measurement.ok() || !record.loss || *record.loss >= best_loss_) return false;
  best_loss_ = *record.loss;
  Progress& progress = result_.progress;
  progress.best_time_ms = record.measurement.time.count();
  progress.best_objective = record.objective;
  progress.best_key = record.key;
  result_.best = record;
  return true;
}

absl::StatusOr<SessionResult> Session::Running::Run() {
  KTUNE_RETURN_IF_ERROR(Start());
  auto stop_requested = [&] { return options_.stop != nullptr && options_.stop->load(); };
  while (true) {
    const bool stopping = stop_requested();
    if (stopping && !NextFinishedWhileStopping()) {
      interrupted_ = true;
      result_.end_reason = "interrupted";
      break;
    }
    if (const char* why = OutOfBudget()) {
      result_.end_reason = why;
      break;
    }
    if (absl::Status s = AskAhead(stopping); !s.ok()) return Fail(s);
    if (queue_.empty()) {
      result_.end_reason = "search space exhausted";
      break;
    }
    const Config config = std::move(queue_.front());
    queue_.pop_front();
    if (absl::Status s = Evaluate(config); !s.ok()) return Fail(s);
  }
  if (!interrupted_ && s_.device_.can_remeasure() && !final_round_done_ && ranked_.size() > 1) {
    if (absl::Status s = FinalRound(); !s.ok()) return Fail(s);
  }
  result_.progress.elapsed = Charged();
  result_.progress.wall = clock_.Now() - start_;
  const JobState final_state = interrupted_ ? JobState::kInterrupted : JobState::kSucceeded;
  KTUNE_RETURN_IF_ERROR(store_.SetJobState(s_.job_id_, final_state, result_.end_reason));
  KTUNE_ASSIGN_OR_RETURN(result_.job, store_.GetJob(s_.job_id_));
  return std::move(result_);
}

absl::StatusOr<SessionResult> Session::Run(Store& store, const SessionOptions& options) {
  KTUNE_RETURN_IF_ERROR(Prepare());
  Running running(*this, store, options);
  return running.Run();
}

}  // namespace ktune
