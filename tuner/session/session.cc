#include "tuner/session/session.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

std::string SerializeSpec(const v1::JobSpec& spec) {
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  spec.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

}  // namespace

Session::Session(const Job& job, Device& device, Store& store, Strategy& strategy,
                 std::string resolved_strategy)
    : job_(job),
      device_(device),
      store_(store),
      strategy_(strategy),
      resolved_strategy_(std::move(resolved_strategy)),
      job_id_(ComputeJobId(job, device.info())) {}

absl::StatusOr<SessionResult> Session::Run(const SessionOptions& options) {
  const Space& space = *job_.space;
  KTUNE_RETURN_IF_ERROR(device_.Bind(space));

  JobRecord rec;
  rec.id = job_id_;
  rec.kernel_name = job_.kernel_name;
  rec.source_hash = job_.source_hash;
  for (const Parameter& p : space.params()) rec.parameters.push_back(p.name);
  rec.device = device_.info();
  rec.problem = job_.problem;
  rec.spec = SerializeSpec(job_.spec);
  rec.spec_json = JobSpecToJson(job_.spec);
  rec.strategy = job_.strategy;
  rec.seed = job_.seed;
  rec.objective = job_.objective.id();
  SessionResult result;
  result.resolved_strategy = resolved_strategy_;
  KTUNE_RETURN_IF_ERROR(store_.StartJob(rec, &result.resumed).status());

  KTUNE_ASSIGN_OR_RETURN(std::vector<StoredMeasurement> previous, store_.LoadMeasurements(job_id_));
  std::unordered_map<std::string, StoredMeasurement> stored;
  std::int64_t next_sequence = 0;
  for (StoredMeasurement& m : previous) {
    next_sequence = std::max(next_sequence, m.sequence + 1);
    stored.emplace(m.key, std::move(m));
  }

  // On failure of the device or the store, record why (if the store still
  // works) and give the error to the caller.
  auto fail = [&](const absl::Status& s) {
    (void)store_.SetJobState(job_id_, JobState::kFailed, std::string(s.message()));
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
  bool interrupted = false;

  auto out_of_budget = [&]() -> const char* {
    if (job_.max_evaluations > 0 && progress.evaluations >= job_.max_evaluations) {
      return "evaluation budget spent";
    }
    if (job_.max_time.count() > 0 && charged() >= job_.max_time) {
      return "time budget spent";
    }
    return nullptr;
  };

  while (result.end_reason.empty()) {
    if (options.stop != nullptr && options.stop->load()) {
      interrupted = true;
      result.end_reason = "interrupted";
      break;
    }
    if (const char* why = out_of_budget()) {
      result.end_reason = why;
      break;
    }
    std::size_t n = static_cast<std::size_t>(job_.batch_size);
    if (job_.max_evaluations > 0) {
      n = std::min<std::size_t>(
          n, static_cast<std::size_t>(job_.max_evaluations - progress.evaluations));
    }
    const std::vector<Config> batch = strategy_.Ask(n);
    if (batch.empty()) {
      result.end_reason = "search space exhausted";
      break;
    }
    for (const Config& config : batch) {
      if (options.stop != nullptr && options.stop->load()) {
        interrupted = true;
        result.end_reason = "interrupted";
        break;
      }
      if (!space.InRange(config)) {
        return fail(absl::InternalError(StrCat("strategy ", resolved_strategy_,
                                               " proposed a configuration "
                                               "outside the space")));
      }
      std::string key = space.Key(config);
      if (!evaluated.insert(key).second) {
        return fail(absl::InternalError(
            StrCat("strategy ", resolved_strategy_, " proposed ", key, " twice")));
      }
      StoredMeasurement record;
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
        if (absl::Status s = store_.AddMeasurement(job_id_, record); !s.ok()) {
          return fail(s);
        }
        new_cost += record.measurement.cost;
      }
      const Measurement& m = record.measurement;
      Outcome outcome;
      outcome.status = m.status;
      if (m.ok() && record.loss) outcome.loss = *record.loss;
      strategy_.Tell(config, outcome);

      ++progress.evaluations;
      ++progress.status_counts[static_cast<std::size_t>(m.status)];
      if (m.ok() && record.loss && *record.loss < best_loss) {
        best_loss = *record.loss;
        progress.best_time_ms = m.time.count();
        progress.best_objective = record.objective;
        progress.best_key = key;
        result.best = record;
      }
      progress.elapsed = charged();
      progress.wall = std::chrono::steady_clock::now() - start;
      if (options.on_progress) options.on_progress(progress);
      if (out_of_budget() != nullptr) break;
    }
  }
  progress.elapsed = charged();
  progress.wall = std::chrono::steady_clock::now() - start;
  const JobState final_state = interrupted ? JobState::kInterrupted : JobState::kSucceeded;
  if (absl::Status s = store_.SetJobState(job_id_, final_state, result.end_reason); !s.ok()) {
    return s;
  }
  KTUNE_ASSIGN_OR_RETURN(result.job, store_.GetJob(job_id_));
  return result;
}

}  // namespace ktune
