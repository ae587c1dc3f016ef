#include "server/common/convert.h"

#include <array>

#include <google/protobuf/util/time_util.h>

#include <cmath>
#include <utility>

#include "tuner/base/json.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using google::protobuf::util::TimeUtil;

void ValueToProto(const Json& v, v1::ParameterValue* out) {
  if (v.is_bool()) {
    out->set_bool_value(v.as_bool());
  } else if (v.is_int()) {
    out->set_int_value(v.as_int());
  } else if (v.is_number()) {
    out->set_float_value(v.as_double());
  } else if (v.is_string()) {
    out->set_string_value(v.as_string());
  }
}

Json ValueFromProto(const v1::ParameterValue& v) {
  switch (v.kind_case()) {
    case v1::ParameterValue::kIntValue: return Json(static_cast<std::int64_t>(v.int_value()));
    case v1::ParameterValue::kFloatValue: return Json(v.float_value());
    case v1::ParameterValue::kBoolValue: return Json(v.bool_value());
    case v1::ParameterValue::kStringValue: return Json(v.string_value());
    case v1::ParameterValue::KIND_NOT_SET: break;
  }
  return Json();
}

Millis Ms(double v) { return Millis(v); }

}  // namespace

void TimeToProto(const std::string& iso8601, google::protobuf::Timestamp* out) {
  if (iso8601.empty()) return;
  google::protobuf::Timestamp t;
  if (TimeUtil::FromString(iso8601, &t)) *out = t;
}

std::string TimeFromProto(const google::protobuf::Timestamp& t) {
  if (t.seconds() == 0 && t.nanos() == 0) return "";
  // The store's form: milliseconds, "Z".
  const std::int64_t ms = t.seconds() * 1000 + t.nanos() / 1000000;
  google::protobuf::Timestamp rounded = TimeUtil::MillisecondsToTimestamp(ms);
  std::string s = TimeUtil::ToString(rounded);  // RFC 3339, 0/3/6/9 digits
  const std::size_t dot = s.find('.');
  if (dot == std::string::npos) s.insert(s.size() - 1, ".000");
  return s;
}

void DeviceToProto(const DeviceInfo& d, v1::DeviceInfo* out) {
  out->set_id(d.id);
  out->set_name(d.name);
  out->set_architecture(d.architecture);
  out->set_uuid(d.uuid);
  out->set_memory_bytes(d.memory_bytes);
  out->set_driver(d.driver);
  out->set_simulated(d.simulated);
  out->set_multiprocessors(d.multiprocessors);
}

DeviceInfo DeviceFromProto(const v1::DeviceInfo& d) {
  DeviceInfo out;
  out.id = d.id();
  out.name = d.name();
  out.architecture = d.architecture();
  out.uuid = d.uuid();
  out.memory_bytes = d.memory_bytes();
  out.driver = d.driver();
  out.simulated = d.simulated();
  out.multiprocessors = d.multiprocessors();
  return out;
}

v1::JobState JobStateToProto(JobState s) {
  switch (s) {
    case JobState::kQueued: return v1::QUEUED;
    case JobState::kRunning: return v1::RUNNING;
    case JobState::kSucceeded: return v1::SUCCEEDED;
    case JobState::kFailed: return v1::FAILED;
    case JobState::kCancelled: return v1::CANCELLED;
    case JobState::kInterrupted: return v1::INTERRUPTED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

JobState JobStateFromProto(v1::JobState s) {
  switch (s) {
    case v1::RUNNING: return JobState::kRunning;
    case v1::SUCCEEDED: return JobState::kSucceeded;
    case v1::FAILED: return JobState::kFailed;
    case v1::CANCELLED: return JobState::kCancelled;
    case v1::INTERRUPTED: return JobState::kInterrupted;
    default: return JobState::kQueued;
  }
}

void MeasurementToProto(const StoredMeasurement& m, v1::MeasurementRecord* out) {
  out->set_sequence(m.sequence);
  out->mutable_config()->set_key(m.key);
  if (absl::StatusOr<Json> config = ParseJson(m.config_json); config.ok() && config->is_object()) {
    auto& values = *out->mutable_config()->mutable_values();
    for (const auto& [name, v] : config->as_object()) {
      ValueToProto(v, &values[name]);
      out->mutable_config()->add_names(name);
    }
  }
  const Measurement& r = m.measurement;
  out->set_status(CandidateStatusToProto(r.status));
  if (r.ok() && std::isfinite(r.time.count())) out->set_time_ms(r.time.count());
  if (m.objective) out->set_objective(*m.objective);
  v1::TimeStats* st = out->mutable_stats();
  st->set_median_ms(r.stats.median.count());
  st->set_mean_ms(r.stats.mean.count());
  st->set_min_ms(r.stats.min.count());
  st->set_max_ms(r.stats.max.count());
  st->set_q1_ms(r.stats.q1.count());
  st->set_q3_ms(r.stats.q3.count());
  st->set_stddev_ms(r.stats.stddev.count());
  st->set_samples(r.stats.samples);
  out->set_compile_ms(r.compile_time.count());
  out->set_cost_ms(r.cost.count());
  out->set_message(r.message);
  *out->mutable_conditions() = r.conditions;
  TimeToProto(m.measured_at, out->mutable_measured_at());
}

StoredMeasurement MeasurementFromProto(const v1::MeasurementRecord& m) {
  StoredMeasurement out;
  out.sequence = m.sequence();
  out.key = m.config().key();
  // In parameter order when the names say it, else sorted by name.
  std::map<std::string, Json> sorted;
  for (const auto& [name, v] : m.config().values()) sorted[name] = ValueFromProto(v);
  Json config = Json::MakeObject();
  for (const std::string& name : m.config().names()) {
    if (auto it = sorted.find(name); it != sorted.end()) {
      config.Set(name, std::move(it->second));
      sorted.erase(it);
    }
  }
  for (auto& [name, v] : sorted) config.Set(name, std::move(v));
  out.config_json = config.Dump();
  Measurement& r = out.measurement;
  r.status = CandidateStatusFromProto(m.status());
  if (m.has_time_ms()) r.time = Ms(m.time_ms());
  if (m.has_objective()) out.objective = m.objective();
  r.stats.median = Ms(m.stats().median_ms());
  r.stats.mean = Ms(m.stats().mean_ms());
  r.stats.min = Ms(m.stats().min_ms());
  r.stats.max = Ms(m.stats().max_ms());
  r.stats.q1 = Ms(m.stats().q1_ms());
  r.stats.q3 = Ms(m.stats().q3_ms());
  r.stats.stddev = Ms(m.stats().stddev_ms());
  r.stats.samples = m.stats().samples();
  r.compile_time = Ms(m.compile_ms());
  r.cost = Ms(m.cost_ms());
  r.message = m.message();
  r.conditions = m.conditions();
  out.measured_at = TimeFromProto(m.measured_at());
  return out;
}

void JobToProto(const JobRecord& j, v1::Job* out) {
  out->set_id(j.id);
  (void)out->mutable_spec()->ParseFromString(j.spec);
  out->set_state(JobStateToProto(j.state));
  out->set_kernel(j.kernel_name);
  DeviceToProto(j.device, out->mutable_device());
  for (const auto& [name, v] : j.problem) (*out->mutable_problem())[name] = v;
  out->mutable_progress()->set_evaluations(j.evaluations);
  out->set_message(j.message);
  TimeToProto(j.created_at, out->mutable_created_at());
  TimeToProto(j.updated_at, out->mutable_updated_at());
  out->set_priority(j.priority);
  out->set_strategy(j.strategy);
  out->set_source_hash(j.source_hash);
  out->set_client(j.client);
}

void JobWithMeasurementsToProto(const JobRecord& job, const std::vector<StoredMeasurement>& ms,
                                bool include, std::int64_t from, v1::Job* out) {
  JobToProto(job, out);
  const StoredMeasurement* best = nullptr;
  std::array<std::int64_t, kNumCandidateStatuses> counts{};
  for (const StoredMeasurement& m : ms) {
    ++counts[static_cast<std::size_t>(m.measurement.status)];
    if (m.measurement.ok() && m.loss && (best == nullptr || *m.loss < *best->loss)) best = &m;
    if (include && m.sequence >= from) MeasurementToProto(m, out->add_measurements());
  }
  if (best != nullptr) MeasurementToProto(*best, out->mutable_best());
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    if (counts[static_cast<std::size_t>(i)] > 0) {
      (*out->mutable_progress()
            ->mutable_status_counts())[CandidateStatusName(static_cast<CandidateStatus>(i))] =
          counts[static_cast<std::size_t>(i)];
    }
  }
  out->mutable_progress()->set_max_evaluations(out->spec().strategy().max_evaluations());
}

JobRecord JobFromProto(const v1::Job& j) {
  JobRecord out;
  out.id = j.id();
  out.kernel_name = j.kernel();
  out.source_hash = j.source_hash();
  for (const v1::Parameter& p : j.spec().parameters()) out.parameters.push_back(p.name());
  out.device = DeviceFromProto(j.device());
  for (const auto& [name, v] : j.problem()) out.problem[name] = v;
  out.spec = j.spec().SerializeAsString();
  out.strategy = j.strategy();
  out.seed = j.spec().strategy().seed();
  out.state = JobStateFromProto(j.state());
  out.message = j.message();
  out.evaluations = j.progress().evaluations();
  out.created_at = TimeFromProto(j.created_at());
  out.updated_at = TimeFromProto(j.updated_at());
  out.priority = j.priority();
  out.client = j.client();
  out.origin = "daemon";
  return out;
}

void ProgressToProto(const Progress& p, v1::Progress* out) {
  out->set_evaluations(p.evaluations);
  out->set_max_evaluations(p.max_evaluations);
  out->set_elapsed_s(p.elapsed.count() / 1000.0);
  out->set_max_time_s(p.max_time.count() / 1000.0);
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    const std::int64_t n = p.status_counts[static_cast<std::size_t>(i)];
    if (n > 0)
      (*out->mutable_status_counts())[CandidateStatusName(static_cast<CandidateStatus>(i))] = n;
  }
}

void BestMatchToProto(const BestMatch& match, v1::GetBestResponse* out) {
  switch (match.kind) {
    case BestMatchKind::kExact: out->set_match(v1::GetBestResponse::EXACT); break;
    case BestMatchKind::kNearestProblem:
      out->set_match(v1::GetBestResponse::NEAREST_PROBLEM);
      break;
    case BestMatchKind::kSameArchitecture:
      out->set_match(v1::GetBestResponse::SAME_ARCHITECTURE);
      break;
  }
  const BestRecord& b = match.best;
  out->set_kernel(b.kernel_name);
  DeviceToProto(b.device, out->mutable_device());
  for (const auto& [name, v] : b.problem) (*out->mutable_problem())[name] = v;
  StoredMeasurement m;
  m.key = b.key;
  m.config_json = b.config_json;
  m.measurement.status = CandidateStatus::kOk;
  m.measurement.time = Millis(b.time_ms);
  m.objective = b.objective_value;
  m.measured_at = b.updated_at;
  MeasurementToProto(m, out->mutable_best());
  out->set_job_id(b.job_id);
  out->set_source_differs(match.source_differs);
  out->set_problem_distance(match.distance);
  out->set_objective(b.objective);
  out->set_source_hash(b.source_hash);
}

BestRecord BestFromProto(const v1::GetBestResponse& r) {
  BestRecord b;
  b.kernel_name = r.kernel();
  b.source_hash = r.source_hash();
  b.device = DeviceFromProto(r.device());
  for (const auto& [name, v] : r.problem()) b.problem[name] = v;
  b.objective = r.objective();
  b.job_id = r.job_id();
  const StoredMeasurement m = MeasurementFromProto(r.best());
  b.key = m.key;
  b.config_json = m.config_json;
  b.time_ms = r.best().time_ms();
  b.objective_value = m.objective;
  b.loss = b.time_ms;
  b.updated_at = m.measured_at;
  return b;
}

}  // namespace ktune
