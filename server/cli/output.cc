#include "server/cli/output.h"

#include <cmath>
#include <cstdio>

namespace ktune::cli {

Json DeviceToJson(const DeviceInfo& device) {
  Json d = Json::MakeObject();
  d.Set("id", device.id);
  d.Set("name", device.name);
  d.Set("architecture", device.architecture);
  d.Set("uuid", device.uuid);
  d.Set("simulated", device.simulated);
  if (device.memory_bytes > 0) d.Set("memory_bytes", device.memory_bytes);
  if (!device.driver.empty()) d.Set("driver", device.driver);
  if (device.multiprocessors > 0) d.Set("multiprocessors", device.multiprocessors);
  return d;
}

Json ProblemJson(const Problem& problem) {
  Json p = Json::MakeObject();
  for (const auto& [name, v] : problem) p.Set(name, Json(v));
  return p;
}

Json ConfigJson(const std::string& config_json) {
  absl::StatusOr<Json> j = ParseJson(config_json);
  if (!j.ok() || !j->is_object()) return Json::MakeObject();
  return *std::move(j);
}

Json JobToJson(const JobRecord& job) {
  Json j = Json::MakeObject();
  j.Set("id", job.id);
  j.Set("kernel", job.kernel_name);
  j.Set("source_hash", job.source_hash);
  Json params = Json::MakeArray();
  for (const std::string& p : job.parameters) params.Push(p);
  j.Set("parameters", std::move(params));
  j.Set("device", DeviceToJson(job.device));
  j.Set("problem", ProblemJson(job.problem));
  j.Set("strategy", job.strategy);
  j.Set("seed", Json(static_cast<std::int64_t>(job.seed)));
  j.Set("objective", job.objective);
  j.Set("state", JobStateName(job.state));
  j.Set("message", job.message);
  j.Set("evaluations", job.evaluations);
  j.Set("created_at", job.created_at);
  j.Set("updated_at", job.updated_at);
  absl::StatusOr<Json> spec = ParseJson(job.spec_json);
  j.Set("spec", spec.ok() ? *std::move(spec) : Json());
  return j;
}

Json MeasurementToJson(const StoredMeasurement& m) {
  const Measurement& r = m.measurement;
  Json j = Json::MakeObject();
  j.Set("sequence", m.sequence);
  j.Set("key", m.key);
  j.Set("config", ConfigJson(m.config_json));
  j.Set("status", CandidateStatusName(r.status));
  j.Set("time_ms", r.ok() ? Json(r.time.count()) : Json());
  j.Set("objective", m.objective ? Json(*m.objective) : Json());
  if (r.stats.samples > 0) {
    Json s = Json::MakeObject();
    s.Set("median_ms", r.stats.median.count());
    s.Set("mean_ms", r.stats.mean.count());
    s.Set("min_ms", r.stats.min.count());
    s.Set("max_ms", r.stats.max.count());
    s.Set("q1_ms", r.stats.q1.count());
    s.Set("q3_ms", r.stats.q3.count());
    s.Set("stddev_ms", r.stats.stddev.count());
    s.Set("samples", r.stats.samples);
    j.Set("stats", std::move(s));
  } else {
    j.Set("stats", Json());
  }
  j.Set("compile_ms", r.compile_time.count());
  j.Set("cost_ms", r.cost.count());
  j.Set("message", r.message);
  j.Set("measured_at", m.measured_at);
  return j;
}

Json BestToJson(const BestRecord& b) {
  Json j = Json::MakeObject();
  j.Set("kernel", b.kernel_name);
  j.Set("source_hash", b.source_hash);
  j.Set("device", DeviceToJson(b.device));
  j.Set("problem", ProblemJson(b.problem));
  j.Set("objective", b.objective);
  j.Set("job_id", b.job_id);
  j.Set("key", b.key);
  j.Set("config", ConfigJson(b.config_json));
  j.Set("time_ms", b.time_ms);
  j.Set("objective_value", b.objective_value ? Json(*b.objective_value) : Json());
  j.Set("updated_at", b.updated_at);
  return j;
}

std::string FormatMs(double ms) {
  if (!std::isfinite(ms)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g ms", ms);
  return buf;
}

}  // namespace ktune::cli
