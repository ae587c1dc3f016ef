// Reading the store's rows back, shared by the backends: each selects the
// same columns in the same order, and hands its row to these through an
// accessor with Text(col), Blob(col), Int(col), Double(col) and
// OptionalDouble(col) (a sqlite::Statement on its row; a pg::Row).
#ifndef KTUNE_TUNER_STORE_ROWS_H_
#define KTUNE_TUNER_STORE_ROWS_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/store.h"

namespace ktune::rows {

// The job columns every backend selects, `K` its schema's prefix for
// table names ("" or "ktune."), then the backend's own (`EXTRA`, from
// column 27 on; Job below reads the first 27).
#define KTUNE_JOB_COLUMNS(K, EXTRA)                                               \
  "SELECT j.id, k.name, k.source_hash, k.parameters, d.locator, d.name,\n"        \
  "       d.architecture, d.uuid, d.memory_bytes, d.driver, d.multiprocessors,\n" \
  "       d.simulated, j.problem, j.spec, j.spec_json, j.strategy, j.seed,\n"     \
  "       j.objective, j.state, j.message, j.evaluations, j.created_at,\n"        \
  "       j.updated_at, j.origin, j.priority, j.runner, j.client" EXTRA           \
  "\n"                                                                            \
  "FROM " K "jobs j JOIN " K                                                      \
  "kernels k ON k.id = j.kernel_id\n"                                             \
  "     JOIN " K "devices d ON d.id = j.device_id"

// The measurement columns, in the order the readers below expect.
inline constexpr const char* kMeasurementColumns =
    "seq, config_key, config, status, time_ms, objective, loss, median_ms, mean_ms, min_ms, "
    "max_ms, q1_ms, q3_ms, stddev_ms, samples, compile_ms, cost_ms, message, measured_at, "
    "conditions, samples_ms";

// Each job's best ok measurement: kMeasurementColumns then job_id, from
// `K`measurements filtered by `where` (naming the jobs).
#define KTUNE_BEST_OF_JOBS(K, where)                                                \
  "SELECT seq, config_key, config, status, time_ms, objective, loss, median_ms,\n"  \
  "  mean_ms, min_ms, max_ms, q1_ms, q3_ms, stddev_ms, samples, compile_ms,\n"      \
  "  cost_ms, message, measured_at, conditions, samples_ms, job_id FROM (\n"        \
  "  SELECT m.*, ROW_NUMBER() OVER (PARTITION BY job_id ORDER BY loss, seq) AS r\n" \
  "  FROM " K                                                                       \
  "measurements m\n"                                                                \
  "  WHERE " where " AND status = 'ok' AND loss IS NOT NULL) best WHERE r = 1"

// The best-record columns (b: best, k: kernels, d: devices).
inline constexpr const char* kBestColumns =
    "k.name, k.source_hash, d.locator, d.name, d.architecture, d.uuid, d.memory_bytes, d.driver, "
    "d.multiprocessors, d.simulated, b.problem, b.objective, b.job_id, b.config_key, b.config, "
    "b.time_ms, b.objective_value, b.loss, b.updated_at";

// d.locator, d.name, d.architecture, d.uuid, d.memory_bytes, d.driver,
// d.multiprocessors, d.simulated from column `first` on.
template <typename Row>
DeviceInfo Device(const Row& r, int first) {
  DeviceInfo d;
  d.id = r.Text(first);
  d.name = r.Text(first + 1);
  d.architecture = r.Text(first + 2);
  d.uuid = r.Text(first + 3);
  d.memory_bytes = r.Int(first + 4);
  d.driver = r.Text(first + 5);
  d.multiprocessors = static_cast<int>(r.Int(first + 6));
  d.simulated = r.Int(first + 7) != 0;
  return d;
}

// A row of KTUNE_JOB_COLUMNS.
template <typename Row>
absl::StatusOr<JobRecord> Job(const Row& r) {
  JobRecord j;
  j.id = r.Text(0);
  j.kernel_name = r.Text(1);
  j.source_hash = r.Text(2);
  const std::string params = r.Text(3);
  if (!params.empty()) j.parameters = StrSplit(params, ',');
  j.device = Device(r, 4);
  KTUNE_ASSIGN_OR_RETURN(j.problem, ProblemFromJson(r.Text(12)));
  j.spec = r.Blob(13);
  j.spec_json = r.Text(14);
  j.strategy = r.Text(15);
  j.seed = static_cast<std::uint64_t>(r.Int(16));
  j.objective = r.Text(17);
  std::optional<JobState> state = ParseJobState(r.Text(18));
  if (!state) return absl::DataLossError(StrCat("job ", j.id, ": unknown state"));
  j.state = *state;
  j.message = r.Text(19);
  j.evaluations = r.Int(20);
  j.created_at = r.Text(21);
  j.updated_at = r.Text(22);
  j.origin = r.Text(23);
  j.priority = static_cast<int>(r.Int(24));
  j.runner = r.Text(25);
  j.client = r.Text(26);
  MarkInterruptedIfRunnerGone(j);
  return j;
}

// A row of kMeasurementColumns of job `job_id`.
template <typename Row>
absl::StatusOr<StoredMeasurement> Measurement(const Row& r, const std::string& job_id) {
  StoredMeasurement m;
  m.sequence = r.Int(0);
  m.key = r.Text(1);
  m.config_json = r.Text(2);
  std::optional<CandidateStatus> parsed = ParseCandidateStatus(r.Text(3));
  if (!parsed) {
    return absl::DataLossError(
        StrCat("job ", job_id, ": measurement ", m.key, " has an unknown status"));
  }
  ktune::Measurement& x = m.measurement;
  x.status = *parsed;
  if (std::optional<double> t = r.OptionalDouble(4)) x.time = Millis(*t);
  m.objective = r.OptionalDouble(5);
  m.loss = r.OptionalDouble(6);
  auto ms = [&](int col) { return Millis(r.OptionalDouble(col).value_or(0)); };
  x.stats.median = ms(7);
  x.stats.mean = ms(8);
  x.stats.min = ms(9);
  x.stats.max = ms(10);
  x.stats.q1 = ms(11);
  x.stats.q3 = ms(12);
  x.stats.stddev = ms(13);
  x.stats.samples = static_cast<int>(r.Int(14));
  x.compile_time = Millis(r.Double(15));
  x.cost = Millis(r.Double(16));
  x.message = r.Text(17);
  m.measured_at = r.Text(18);
  auto damaged = [&](const absl::Status& st) {
    return absl::DataLossError(StrCat("job ", job_id, ": measurement ", m.key, ": ", st.message()));
  };
  absl::StatusOr<Conditions> conditions = ConditionsFromJson(r.Text(19));
  if (!conditions.ok()) return damaged(conditions.status());
  x.conditions = *std::move(conditions);
  absl::StatusOr<std::vector<double>> samples = SamplesFromJson(r.Text(20));
  if (!samples.ok()) return damaged(samples.status());
  x.samples_ms = *std::move(samples);
  return m;
}

// A row of kBestColumns.
template <typename Row>
absl::StatusOr<BestRecord> Best(const Row& r) {
  BestRecord b;
  b.kernel_name = r.Text(0);
  b.source_hash = r.Text(1);
  b.device = Device(r, 2);
  KTUNE_ASSIGN_OR_RETURN(b.problem, ProblemFromJson(r.Text(10)));
  b.objective = r.Text(11);
  b.job_id = r.Text(12);
  b.key = r.Text(13);
  b.config_json = r.Text(14);
  b.time_ms = r.Double(15);
  b.objective_value = r.OptionalDouble(16);
  b.loss = r.Double(17);
  b.updated_at = r.Text(18);
  return b;
}

// A row of m.job_id, m.config_key, m.status, m.loss.
template <typename Row>
absl::StatusOr<PriorMeasurement> Prior(const Row& r) {
  PriorMeasurement m;
  m.job_id = r.Text(0);
  m.key = r.Text(1);
  std::optional<CandidateStatus> parsed = ParseCandidateStatus(r.Text(2));
  if (!parsed) {
    return absl::DataLossError(
        StrCat("job ", m.job_id, ": measurement ", m.key, " has an unknown status"));
  }
  m.status = *parsed;
  m.loss = r.OptionalDouble(3);
  return m;
}

}  // namespace ktune::rows

#endif  // KTUNE_TUNER_STORE_ROWS_H_
