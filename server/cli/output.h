// JSON and text renderings of stored records for the command line.
#ifndef KTUNE_SERVER_CLI_OUTPUT_H_
#define KTUNE_SERVER_CLI_OUTPUT_H_

#include <array>
#include <optional>
#include <vector>

#include <string>

#include "tuner/base/json.h"
#include "tuner/device/device.h"
#include "tuner/store/store.h"

namespace ktune::cli {

Json DeviceToJson(const DeviceInfo& device);
Json ProblemJson(const Problem& problem);
// {"id", "kernel", "device", "problem", "strategy", "seed", "state", ...}.
Json JobToJson(const JobRecord& job);
// {"sequence", "key", "config", "status", "time_ms" (null unless ok), ...}.
Json MeasurementToJson(const StoredMeasurement& m);
// A measurement's load profile, canary slowdown, load rates, throughput
// (concurrent, pipeline) and the GPU that took it, as JSON and as one line
// of text ("" for an isolated measurement on one device).
Json ConditionsJson(const Conditions& c);
std::string ConditionsText(const Conditions& c);
Json BestToJson(const BestRecord& best);

// A config's JSON text parsed back into an object (empty object if corrupt).
Json ConfigJson(const std::string& config_json);

// A table for people: each column as wide as its widest cell, two spaces
// between columns, the last column not padded. `right` says which columns
// are right-aligned (numbers); missing entries are left-aligned.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows,
                        const std::vector<bool>& right = {});

// "1.234 ms" with four significant digits, or "-" for NaN.
std::string FormatMs(double ms);

// What `ktune tune` reports at the end of a run, local or remote.
struct TuneSummary {
  std::string job_id;
  std::string kernel;
  DeviceInfo device;
  Problem problem;
  std::string strategy;  // StrategyLabel: "auto (bayes)", "genetic"
  std::int64_t evaluations = 0;
  std::array<std::int64_t, kNumCandidateStatuses> status_counts{};
  std::optional<StoredMeasurement> best;
  std::string objective_id = "time";
  std::string objective_name = "time_ms";
  JobState state = JobState::kSucceeded;
  std::string end_reason;
};

Json TuneSummaryJson(const TuneSummary& s);
// On stdout: one JSON object, or lines for people.
void PrintTuneSummary(const TuneSummary& s, bool json);
void PrintJobs(const std::vector<JobRecord>& jobs, bool json);
void PrintShow(const JobRecord& job, const std::vector<StoredMeasurement>& measurements, bool json);
// `matches`, when given, says per record how a fallback lookup found it.
struct BestMatchNote {
  std::string match;  // "exact", "nearest_problem", "same_architecture"
  bool source_differs = false;
  double distance = 0;
};
void PrintBest(const std::string& kernel, const std::vector<BestRecord>& found,
               const std::vector<BestMatchNote>* matches, bool json);

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_OUTPUT_H_
