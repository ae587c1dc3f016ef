#include "tuner/session/session.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

constexpr int kDefaultFinalContenders = 3;

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

absl::StatusOr<SessionResult> Session::Run(Store& store, const SessionOptions& options) {
  const Space& space = *job_.space;
  KTUNE_RETURN_IF_ERROR(Prepare());

  const JobRecord rec = MakeJobRecord(job_, device_.info());
  SessionResult result;
  result.resolved_strategy = resolved_strategy_;
  KTUNE_RETURN_IF_ERROR(store.StartJob(rec, &result.resumed).status());

  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> previous, store.LoadMeasurements(job_id_));
  std::unordered_map<std::string, StoredMeasurement> stored;
  std::int64_t next_sequence = 0;
  bool final_round_done = false;
  for (StoredMeasurement& m : previous) {
    next_sequence = std::max(next_sequence, m.sequence + 1);
    final_round_done = final_round_done || m.measurement.conditions.final_round();
    stored.emplace(m.key, std::move(m));
  }

  // On failure of the device or the store, record why (if the store still
  // works) and give the error to the caller.
  auto fail = [&](const absl::Status& s) {
    (void)store.SetJobState(job_id_, JobState::kFailed, std::string(s.message()));
    return s;
  };

  Progress& progress = result.progress;
  progress.max_evaluations = job_.max_evaluations;
  progress.max_time = job_.max_time;
  const bool replay = device_.replays_recorded_time();
  const auto start = std::chrono::steady_clock::now();
  Millis replayed_cost{0};  // stored candidates' cost, charged again
  Millis new_cost{0};       // this run's candidates' recorded cost
  auto charged = [&] {
    if (replay) return replayed_cost + new_cost;
    return replayed_cost +
           std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
  };
  double best_loss = std::numeric_limits<double>::infinity();
  std::unordered_set<std::string> evaluated;
  // Ok measurements of this run by loss, for the final contenders.
  std::vector<std::pair<double, Config>> ranked;
  bool interrupted = false;

  auto out_of_budget = [&]() -> const char* {
    if (job_.max_evaluations > 0 && progress.evaluations >= job_.max_evaluations) {
      return "evaluation budget spent";
    }
    if (job_.max_time.count() > 0 && charged() >= job_.max_time) return "time budget spent";
    return nullptr;
  };
  auto stop_requested = [&] { return options.stop != nullptr && options.stop->load(); };

  // Configurations asked but not yet evaluated. The device may want several
  // in flight (compiling while the GPU measures); the strategy is asked in
  // whole batches, so with a depth of one batch this is plain ask/tell.
  std::deque<Config> queue;
  const auto batch = static_cast<std::size_t>(std::max(1, job_.batch_size));
  const std::size_t depth = std::max(batch, static_cast<std::size_t>(device_.pipeline_depth()));
  std::int64_t asked = 0;
  bool exhausted = false;

  while (true) {
    // Stopping: measurements that finished meanwhile (on another GPU of a
    // job spread over several) are still recorded, in the order they were
    // asked, whichever finished first; the rest are left for a resume.
    const bool stopping = stop_requested();
    if (stopping) {
      auto done = std::find_if(queue.begin(), queue.end(),
                               [&](const Config& c) { return device_.Ready(c); });
      if (done == queue.end()) {
        interrupted = true;
        result.end_reason = "interrupted";
        break;
      }
      if (done != queue.begin()) {
        Config c = std::move(*done);
        queue.erase(done);
        queue.push_front(std::move(c));
      }
    }
    if (const char* why = out_of_budget()) {
      result.end_reason = why;
      break;
    }
    while (!stopping && !exhausted && queue.size() + batch <= depth) {
      std::size_t n = batch;
      if (job_.max_evaluations > 0) {
        n = std::min<std::size_t>(n, static_cast<std::size_t>(job_.max_evaluations - asked));
      }
      if (n == 0) break;
      const std::vector<Config> got = strategy_->Ask(n);
      if (got.empty()) {
        exhausted = true;
        break;
      }
      asked += static_cast<std::int64_t>(got.size());
      std::vector<Config> to_prepare;
      for (const Config& c : got) {
        if (!space.InRange(c)) {
          return fail(absl::InternalError(StrCat("strategy ", resolved_strategy_,
                                                 " proposed a configuration outside the space")));
        }
        if (stored.count(space.Key(c)) == 0) to_prepare.push_back(c);
        queue.push_back(c);
      }
      if (!to_prepare.empty()) device_.Prefetch(to_prepare);
    }
    if (queue.empty()) {
      result.end_reason = "search space exhausted";
      break;
    }
    const Config config = std::move(queue.front());
    queue.pop_front();
    std::string key = space.Key(config);
    if (!evaluated.insert(key).second) {
      return fail(absl::InternalError(
          StrCat("strategy ", resolved_strategy_, " proposed ", key, " twice")));
    }
    StoredMeasurement record;
    bool fresh = false;
    bool improved = false;
    if (auto it = stored.find(key); it != stored.end()) {
      record = it->second;
      ++progress.replayed;
      replayed_cost += record.measurement.cost;
    } else {
      Measurement m;
      if (int c = space.FirstViolated(config); c >= 0 || !space.IsValid(config)) {
        m.status = CandidateStatus::kInvalidByConstraint;
        m.message = c >= 0 ? StrCat("violates constraint ", c, ": ",
                                    space.constraint_text(static_cast<std::size_t>(c)))
                           : "not in the space";
      } else {
        absl::StatusOr<Measurement> measured = device_.Evaluate(config);
        if (!measured.ok()) return fail(measured.status());
        m = *std::move(measured);
      }
      record.sequence = next_sequence++;
      record.key = key;
      record.config_json = space.ToJson(config).Dump();
      if (m.ok()) {
        record.objective = job_.objective.Compute(config, m.time.count());
        record.loss = job_.objective.Loss(config, m.time.count());
      }
      record.measurement = std::move(m);
      record.measured_at = NowIso8601();
      if (absl::Status s = store.AddMeasurement(job_id_, record); !s.ok()) return fail(s);
      new_cost += record.measurement.cost;
      fresh = true;
    }
    const Measurement& m = record.measurement;
    Outcome outcome;
    outcome.status = m.status;
    if (m.ok() && record.loss) {
      outcome.loss = *record.loss;
      ranked.emplace_back(*record.loss, config);
    }
    strategy_->Tell(config, outcome);

    ++progress.evaluations;
    ++progress.status_counts[static_cast<std::size_t>(m.status)];
    if (m.ok() && record.loss && *record.loss < best_loss) {
      best_loss = *record.loss;
      progress.best_time_ms = m.time.count();
      progress.best_objective = record.objective;
      progress.best_key = key;
      result.best = record;
      improved = true;
    }
    if (fresh && options.on_measurement) options.on_measurement(record);
    if (improved && options.on_new_best) options.on_new_best(record);
    progress.elapsed = charged();
    progress.wall = std::chrono::steady_clock::now() - start;
    if (options.on_progress) options.on_progress(progress);
  }

  // The final contenders, re-measured interleaved before one is declared
  // best (on devices that measure; once per job).
  if (!interrupted && device_.can_remeasure() && !final_round_done && ranked.size() > 1) {
    const int wanted = job_.spec.measurement().final_contenders() > 0
                           ? job_.spec.measurement().final_contenders()
                           : kDefaultFinalContenders;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Config> contenders;
    for (std::size_t i = 0; i < ranked.size() && static_cast<int>(i) < wanted; ++i) {
      contenders.push_back(ranked[i].second);
    }
    absl::StatusOr<std::vector<Measurement>> again = device_.Remeasure(contenders);
    if (!again.ok()) return fail(again.status());
    KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> all, store.LoadMeasurements(job_id_));
    std::unordered_map<std::string, StoredMeasurement> by_key;
    for (StoredMeasurement& m : all) by_key.emplace(m.key, std::move(m));
    best_loss = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < contenders.size(); ++i) {
      StoredMeasurement record = by_key.at(space.Key(contenders[i]));
      Measurement m = (*again)[i];
      m.conditions.set_final_round(true);
      m.compile_time = record.measurement.compile_time;
      m.cost = record.measurement.cost + m.cost;
      if (!m.ok()) {
        // A contender that fails now (it passed before) keeps its first
        // measurement, with the failure noted.
        record.measurement.conditions.set_final_round(true);
        record.measurement.message = StrCat("re-measurement failed: ", m.message);
      } else {
        record.objective = job_.objective.Compute(contenders[i], m.time.count());
        record.loss = job_.objective.Loss(contenders[i], m.time.count());
        record.measurement = std::move(m);
      }
      if (absl::Status s = store.UpdateMeasurement(job_id_, record); !s.ok()) return fail(s);
      if (record.measurement.ok() && record.loss && *record.loss < best_loss) {
        best_loss = *record.loss;
        progress.best_time_ms = record.measurement.time.count();
        progress.best_objective = record.objective;
        progress.best_key = record.key;
        result.best = record;
      }
      if (options.on_measurement) options.on_measurement(record);
    }
    if (absl::Status s = store.RefreshBest(job_id_); !s.ok()) return fail(s);
    if (result.best && options.on_new_best) options.on_new_best(*result.best);
  }

  progress.elapsed = charged();
  progress.wall = std::chrono::steady_clock::now() - start;
  const JobState final_state = interrupted ? JobState::kInterrupted : JobState::kSucceeded;
  if (absl::Status s = store.SetJobState(job_id_, final_state, result.end_reason); !s.ok()) {
    return s;
  }
  KTUNE_ASSIGN_OR_RETURN(result.job, store.GetJob(job_id_));
  return result;
}

}  // namespace ktune
