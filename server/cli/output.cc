#include "server/cli/output.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

#include "tuner/base/strings.h"

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
  if (!job.client.empty()) j.Set("client", job.client);
  j.Set("created_at", job.created_at);
  j.Set("updated_at", job.updated_at);
  absl::StatusOr<Json> spec = ParseJson(job.spec_json);
  j.Set("spec", spec.ok() ? *std::move(spec) : Json());
  return j;
}

// The load profile and what was measured under it; only what applies.
Json ConditionsJson(const Conditions& c) {
  Json j = Json::MakeObject();
  // KIND_UNSPECIFIED means isolated.
  std::string kind = c.load() == v1::LoadProfile::KIND_UNSPECIFIED
                         ? "isolated"
                         : v1::LoadProfile::Kind_Name(c.load());
  for (char& ch : kind) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  j.Set("load", kind);
  if (c.canary_slowdown() > 0) j.Set("canary_slowdown", c.canary_slowdown());
  if (c.link_canary_slowdown() > 0) j.Set("link_canary_slowdown", c.link_canary_slowdown());
  if (c.load_throughput() > 0) j.Set("load_throughput", c.load_throughput());
  if (!c.load_rates().empty()) {
    const std::map<std::string, double> sorted(c.load_rates().begin(), c.load_rates().end());
    Json rates = Json::MakeObject();
    for (const auto& [k, v] : sorted) rates.Set(k, v);
    j.Set("load_rates", std::move(rates));
  }
  if (c.instances() > 0) j.Set("instances", c.instances());
  if (c.streams() > 0) j.Set("streams", c.streams());
  if (c.instances() > 0 && c.throughput() > 0) j.Set("instances_per_s", c.throughput());
  if (c.overlap() > 0) {
    j.Set("bytes_per_s", c.throughput());
    j.Set("h2d_ms", c.h2d_ms());
    j.Set("kernel_ms", c.kernel_ms());
    j.Set("d2h_ms", c.d2h_ms());
    j.Set("ideal_ms", std::max(c.h2d_ms() + c.d2h_ms(), c.kernel_ms()));
    j.Set("overlap", c.overlap());
  }
  if (c.input_copies() > 1) j.Set("input_copies", c.input_copies());
  if (c.sm_clock_mhz_before() > 0) j.Set("sm_clock_mhz_before", c.sm_clock_mhz_before());
  if (c.sm_clock_mhz_after() > 0) j.Set("sm_clock_mhz_after", c.sm_clock_mhz_after());
  if (c.warm_up_ms() > 0) j.Set("warm_up_ms", c.warm_up_ms());
  if (c.final_round()) j.Set("final_round", true);
  if (c.power_w() > 0) {
    j.Set("energy_j", c.energy_j());
    j.Set("power_w", c.power_w());
    j.Set("energy_method", c.energy_method());
    j.Set("energy_window_ms", c.energy_window_ms());
    if (c.energy_updates() > 0) j.Set("energy_updates", c.energy_updates());
  }
  if (!c.device().empty()) j.Set("device", c.device());
  if (!c.driver().empty()) j.Set("driver", c.driver());
  if (!c.nvrtc().empty()) j.Set("nvrtc", c.nvrtc());
  return j;
}

// One line for a measurement's load and throughput ("" when isolated).
std::string ConditionsText(const Conditions& c) {
  std::string out;
  char buf[160];
  if (c.load() == v1::LoadProfile::UNDER_LOAD) {
    std::snprintf(buf, sizeof buf, "under load: canary %.2fx", c.canary_slowdown());
    out += buf;
    if (c.link_canary_slowdown() > 0) {
      std::snprintf(buf, sizeof buf, ", link canary %.2fx", c.link_canary_slowdown());
      out += buf;
    }
    std::snprintf(buf, sizeof buf, ", load got %.0f%%", 100 * c.load_throughput());
    out += buf;
  }
  if (c.instances() > 0 && c.throughput() > 0) {
    std::snprintf(buf, sizeof buf, "%d instances / %d streams: %.4g per s", c.instances(),
                  c.streams(), c.throughput());
    out += buf;
  }
  if (c.overlap() > 0) {
    std::snprintf(buf, sizeof buf, "%.4g GB/s, overlap %.2fx (stages %.3g + %.3g + %.3g ms)",
                  c.throughput() / 1e9, c.overlap(), c.h2d_ms(), c.kernel_ms(), c.d2h_ms());
    out += buf;
  }
  if (c.input_copies() > 1) {
    std::snprintf(buf, sizeof buf, "%sinputs rotated over %d copies", out.empty() ? "" : ", ",
                  c.input_copies());
    out += buf;
  }
  if (c.power_w() > 0) {
    std::snprintf(buf, sizeof buf, "%s%.4g J, %.1f W", out.empty() ? "" : ", ", c.energy_j(),
                  c.power_w());
    out += buf;
  }
  if (!c.device().empty()) out += (out.empty() ? "on " : ", on ") + c.device();
  return out;
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
  j.Set("conditions", ConditionsJson(r.conditions));
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

Json TuneSummaryJson(const TuneSummary& s) {
  Json out = Json::MakeObject();
  out.Set("job_id", s.job_id);
  out.Set("kernel", s.kernel);
  out.Set("device", s.device.name);
  out.Set("strategy", s.strategy);
  out.Set("evaluations", s.evaluations);
  if (s.best) {
    Json best = Json::MakeObject();
    best.Set("key", s.best->key);
    best.Set("config", ConfigJson(s.best->config_json));
    best.Set("time_ms", s.best->measurement.time.count());
    best.Set("conditions", ConditionsJson(s.best->measurement.conditions));
    if (s.objective_id != "time") {
      best.Set("objective", s.best->objective ? Json(*s.best->objective) : Json());
    }
    out.Set("best", std::move(best));
  } else {
    out.Set("best", Json());
  }
  Json sc = Json::MakeObject();
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    if (s.status_counts[static_cast<std::size_t>(i)] > 0) {
      sc.Set(CandidateStatusName(static_cast<CandidateStatus>(i)),
             s.status_counts[static_cast<std::size_t>(i)]);
    }
  }
  out.Set("status_counts", std::move(sc));
  out.Set("state", JobStateName(s.state));
  out.Set("end_reason", s.end_reason);
  return out;
}

void PrintTuneSummary(const TuneSummary& s, bool json) {
  if (json) {
    std::cout << TuneSummaryJson(s).Dump() << "\n";
    return;
  }
  std::string counts;
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    if (s.status_counts[static_cast<std::size_t>(i)] == 0) continue;
    if (!counts.empty()) counts += ", ";
    counts += StrCat(CandidateStatusName(static_cast<CandidateStatus>(i)), " ",
                     s.status_counts[static_cast<std::size_t>(i)]);
  }
  std::cout << "job       " << s.job_id << "\n"
            << "kernel    " << s.kernel << "\n"
            << "device    " << s.device.name << (s.device.simulated ? " (replayed)" : "") << "\n"
            << "strategy  " << s.strategy << "\n"
            << "evaluated " << s.evaluations << " (" << counts << ")\n";
  if (s.best) {
    std::cout << "best      " << s.best->key << "  " << FormatMs(s.best->measurement.time.count());
    if (s.objective_id != "time" && s.best->objective) {
      std::cout << "  " << s.objective_name << " = " << *s.best->objective;
    }
    std::cout << "\n          " << s.best->config_json << "\n";
    if (std::string c = ConditionsText(s.best->measurement.conditions); !c.empty()) {
      std::cout << "          " << c << "\n";
    }
  } else {
    std::cout << "best      none (no configuration succeeded)\n";
  }
}

std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      const std::string pad(width[c] - cell.size(), ' ');
      const bool last = c + 1 == width.size();
      if (c > 0) text += "  ";
      if (c < right.size() && right[c]) {
        text += pad + cell;
      } else {
        text += last ? cell : cell + pad;
      }
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
  return out;
}

void PrintJobs(const std::vector<JobRecord>& jobs, bool json) {
  if (json) {
    Json out = Json::MakeObject();
    Json list = Json::MakeArray();
    for (const JobRecord& j : jobs) list.Push(JobToJson(j));
    out.Set("jobs", std::move(list));
    std::cout << out.Dump() << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows;
  rows.reserve(jobs.size());
  for (const JobRecord& j : jobs) {
    rows.push_back({j.id, JobStateName(j.state), StrCat(j.evaluations), j.kernel_name, j.strategy,
                    j.device.name});
  }
  std::cout << FormatTable({"JOB", "STATE", "EVALUATIONS", "KERNEL", "STRATEGY", "DEVICE"}, rows,
                           {false, false, true});
}

void PrintShow(const JobRecord& job, const std::vector<StoredMeasurement>& ms, bool json) {
  if (json) {
    Json out = Json::MakeObject();
    out.Set("job", JobToJson(job));
    Json list = Json::MakeArray();
    for (const StoredMeasurement& m : ms) list.Push(MeasurementToJson(m));
    out.Set("measurements", std::move(list));
    std::cout << out.Dump() << "\n";
    return;
  }
  std::cout << "job       " << job.id << " (" << JobStateName(job.state)
            << (job.message.empty() ? "" : ": " + job.message) << ")\n"
            << "kernel    " << job.kernel_name << "\n"
            << "device    " << job.device.name << " [" << job.device.id << "]\n"
            << "problem   " << ProblemToJson(job.problem) << "\n"
            << "strategy  " << job.strategy << ", seed " << job.seed << "\n";
  if (!job.client.empty()) std::cout << "client    " << job.client << "\n";
  std::cout << "evaluated " << job.evaluations << "\n\n";
  std::printf("%6s  %-32s  %-22s  %-12s  %s\n", "SEQ", "KEY", "STATUS", "TIME", "CONDITIONS");
  for (const StoredMeasurement& m : ms) {
    std::printf("%6lld  %-32s  %-22s  %-12s  %s\n", static_cast<long long>(m.sequence),
                m.key.c_str(), CandidateStatusName(m.measurement.status),
                m.measurement.ok() ? FormatMs(m.measurement.time.count()).c_str() : "-",
                m.measurement.ok() ? ConditionsText(m.measurement.conditions).c_str() : "");
  }
}

void PrintBest(const std::string& kernel, const std::vector<BestRecord>& found,
               const std::vector<BestMatchNote>* matches, bool json) {
  if (json) {
    Json out = Json::MakeObject();
    out.Set("kernel", kernel);
    Json results = Json::MakeArray();
    for (std::size_t i = 0; i < found.size(); ++i) {
      Json b = BestToJson(found[i]);
      if (matches != nullptr && i < matches->size()) {
        b.Set("match", (*matches)[i].match);
        b.Set("source_differs", (*matches)[i].source_differs);
        if ((*matches)[i].distance > 0) b.Set("problem_distance", (*matches)[i].distance);
      }
      results.Push(std::move(b));
    }
    out.Set("results", std::move(results));
    std::cout << out.Dump() << "\n";
    return;
  }
  for (std::size_t i = 0; i < found.size(); ++i) {
    const BestRecord& b = found[i];
    std::cout << b.kernel_name << " on " << b.device.name
              << (b.device.simulated ? " (replayed)" : "") << ", problem "
              << ProblemToJson(b.problem) << ", objective " << b.objective << "\n";
    if (matches != nullptr && i < matches->size() && (*matches)[i].match != "exact") {
      std::cout << "  found by fallback: " << (*matches)[i].match << "\n";
    }
    if (matches != nullptr && i < matches->size() && (*matches)[i].source_differs) {
      std::cout << "  note: the stored kernel source differs from the one asked about\n";
    }
    std::cout << "  best " << b.key << "  " << FormatMs(b.time_ms) << "  (job " << b.job_id
              << ")\n  " << b.config_json << "\n";
  }
}

}  // namespace ktune::cli
