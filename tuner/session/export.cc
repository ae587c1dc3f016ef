#include "tuner/session/export.h"

#include <algorithm>
#include <map>
#include <set>

#include "ktune/v1/job.pb.h"
#include "tuner/base/json.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/session/job.h"
#include "tuner/space/value.h"

namespace ktune {
namespace {

// Each parameter's values, in order: the job file's lists, or (a job over a
// recording, whose spec has none) the values its measurements hold,
// numbers ascending.
absl::StatusOr<std::vector<Json>> ValueLists(const JobRecord& job,
                                             const std::vector<Json>& configs) {
  v1::JobSpec spec;
  (void)spec.ParseFromString(job.spec);
  std::vector<Json> lists(job.parameters.size(), Json::MakeArray());
  if (spec.parameters_size() == static_cast<int>(job.parameters.size())) {
    for (int i = 0; i < spec.parameters_size(); ++i) {
      KTUNE_ASSIGN_OR_RETURN(Parameter p,
                             ToParameter(spec.parameters(i), static_cast<std::size_t>(i)));
      for (const Value& v : p.values) lists[static_cast<std::size_t>(i)].Push(ValueToJson(v));
    }
    return lists;
  }
  for (std::size_t i = 0; i < job.parameters.size(); ++i) {
    std::set<std::string> seen;
    auto& a = lists[i].as_array();
    for (const Json& c : configs) {
      const Json* v = c.Find(job.parameters[i]);
      if (v != nullptr && seen.insert(v->Dump()).second) a.push_back(*v);
    }
    if (std::all_of(a.begin(), a.end(), [](const Json& j) { return j.is_number(); })) {
      std::stable_sort(a.begin(), a.end(),
                       [](const Json& x, const Json& y) { return x.as_double() < y.as_double(); });
    }
  }
  return lists;
}

const char* KernelTunerMarker(CandidateStatus s) {
  switch (s) {
    case CandidateStatus::kInvalidByConstraint: return "InvalidConfig";
    case CandidateStatus::kCompileError: return "CompilationFailedConfig";
    default: return "RuntimeFailedConfig";
  }
}

const char* T4Invalidity(CandidateStatus s) {
  switch (s) {
    case CandidateStatus::kOk: return "correct";
    case CandidateStatus::kInvalidByConstraint: return "constraints";
    case CandidateStatus::kCompileError: return "compile";
    case CandidateStatus::kTimeout: return "timeout";
    case CandidateStatus::kWrongResult: return "correctness";
    default: return "runtime";  // launch errors and faults
  }
}

Json Samples(const Measurement& m) {
  Json times = Json::MakeArray();
  for (double t : m.samples_ms) times.Push(t);
  return times;
}

Json KernelTunerCache(const JobRecord& job, const std::vector<StoredMeasurement>& ms,
                      const std::vector<Json>& configs, std::vector<Json> lists) {
  Json out = Json::MakeObject();
  out.Set("device_name", job.device.name);
  out.Set("kernel_name", job.kernel_name);
  Json problem = Json::MakeArray();
  for (const auto& [name, v] : job.problem) problem.Push(v);
  out.Set("problem_size", std::move(problem));
  Json keys = Json::MakeArray();
  Json params = Json::MakeObject();
  for (std::size_t i = 0; i < job.parameters.size(); ++i) {
    keys.Push(job.parameters[i]);
    params.Set(job.parameters[i], std::move(lists[i]));
  }
  out.Set("tune_params_keys", std::move(keys));
  out.Set("tune_params", std::move(params));
  out.Set("objective", "time");
  Json cache = Json::MakeObject();
  for (std::size_t k = 0; k < ms.size(); ++k) {
    const Measurement& m = ms[k].measurement;
    Json e = Json::MakeObject();
    for (const std::string& name : job.parameters) {
      const Json* v = configs[k].Find(name);
      e.Set(name, v != nullptr ? *v : Json());
    }
    if (m.ok()) {
      e.Set("time", m.time.count());
      e.Set("times", Samples(m));
    } else {
      e.Set("time", KernelTunerMarker(m.status));
    }
    e.Set("compile_time", m.compile_time.count());
    e.Set("verification_time", 0);
    e.Set("benchmark_time", std::max(0.0, (m.cost - m.compile_time).count()));
    e.Set("strategy_time", 0);
    e.Set("framework_time", 0);
    e.Set("timestamp", ms[k].measured_at);
    e.Set("ktune_status", CandidateStatusName(m.status));
    cache.Set(ms[k].key, std::move(e));
  }
  out.Set("cache", std::move(cache));
  return out;
}

Json T4Results(const JobRecord& job, const std::vector<StoredMeasurement>& ms,
               const std::vector<Json>& configs) {
  Json out = Json::MakeObject();
  out.Set("schema_version", "1.0.0");
  Json meta = Json::MakeObject();
  meta.Set("timeunit", "milliseconds");
  meta.Set("kernel", job.kernel_name);
  meta.Set("device", job.device.name);
  out.Set("metadata", std::move(meta));
  Json results = Json::MakeArray();
  for (std::size_t k = 0; k < ms.size(); ++k) {
    const Measurement& m = ms[k].measurement;
    Json r = Json::MakeObject();
    r.Set("timestamp", ms[k].measured_at);
    Json config = Json::MakeObject();
    for (const std::string& name : job.parameters) {
      const Json* v = configs[k].Find(name);
      config.Set(name, v != nullptr ? *v : Json());
    }
    r.Set("configuration", std::move(config));
    Json times = Json::MakeObject();
    times.Set("compilation", m.compile_time.count());
    times.Set("framework", 0);
    times.Set("search_algorithm", 0);
    times.Set("validation", 0);
    times.Set("runtimes", Samples(m));
    r.Set("times", std::move(times));
    r.Set("invalidity", T4Invalidity(m.status));
    r.Set("correctness", m.ok() ? 1 : 0);
    Json measurements = Json::MakeArray();
    if (m.ok()) {
      Json t = Json::MakeObject();
      t.Set("name", "time");
      t.Set("value", m.time.count());
      t.Set("unit", "ms");
      measurements.Push(std::move(t));
    }
    r.Set("measurements", std::move(measurements));
    Json objectives = Json::MakeArray();
    objectives.Push("time");
    r.Set("objectives", std::move(objectives));
    results.Push(std::move(r));
  }
  out.Set("results", std::move(results));
  return out;
}

}  // namespace

std::optional<ExportFormat> ParseExportFormat(const std::string& name) {
  if (name == "kernel-tuner") return ExportFormat::kKernelTuner;
  if (name == "t4") return ExportFormat::kT4;
  return std::nullopt;
}

absl::StatusOr<std::string> ExportMeasurements(const JobRecord& job,
                                               const std::vector<StoredMeasurement>& measurements,
                                               ExportFormat format) {
  std::vector<Json> configs;
  configs.reserve(measurements.size());
  for (const StoredMeasurement& m : measurements) {
    absl::StatusOr<Json> c = ParseJson(m.config_json);
    if (!c.ok() || !c->is_object()) {
      return absl::InvalidArgumentError(
          StrCat("job ", job.id, ": measurement ", m.key, ": its configuration is not readable"));
    }
    configs.push_back(*std::move(c));
  }
  KTUNE_ASSIGN_OR_RETURN(std::vector<Json> lists, ValueLists(job, configs));
  const Json out = format == ExportFormat::kKernelTuner
                       ? KernelTunerCache(job, measurements, configs, std::move(lists))
                       : T4Results(job, measurements, configs);
  return out.Dump(1) + "\n";
}

}  // namespace ktune
