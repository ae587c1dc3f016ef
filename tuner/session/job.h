// Job specs: reading a job file, validating it, and resolving it into what
// a session runs (space, objective, budgets, identity).
#ifndef KTUNE_TUNER_SESSION_JOB_H_
#define KTUNE_TUNER_SESSION_JOB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "tuner/device/device.h"
#include "tuner/device/recorded.h"
#include "tuner/expr/expr.h"
#include "tuner/space/space.h"
#include "tuner/store/store.h"

namespace ktune {

// Parses a job file's text (the proto3 JSON form of ktune.v1.JobSpec).
// INVALID_ARGUMENT, prefixed with `source_name`: JSON syntax errors give the
// line and column; schema errors name the field path (unknown fields are
// errors).
absl::StatusOr<v1::JobSpec> ParseJobSpecJson(std::string_view text, const std::string& source_name);

// Reads and parses a job file.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

// The spec as JSON (for people and for the store).
std::string JobSpecToJson(const v1::JobSpec& spec);

// The objective: what a measurement is ranked by.
class Objective {
 public:
  // The default: minimise the kernel time in milliseconds.
  Objective() = default;

  // Compiles `expression` over the parameters of `params`, the problem
  // dimensions and the measurement names time_ms, time_s, energy_j (joules
  // per launch) and power_w (watts while it runs).
  static absl::StatusOr<Objective> Create(const std::string& expression, bool maximize,
                                          std::string name, const std::vector<Parameter>& params,
                                          const Problem& problem);

  // The objective's value for `config` measured at `time_ms` (and, for an
  // objective over them, `energy_j` and `power_w`), or nullopt if the
  // expression fails to evaluate (e.g. divides by zero) or reads an energy
  // that was not measured (0).
  std::optional<double> Compute(const Config& config, double time_ms, double energy_j = 0,
                                double power_w = 0) const;
  // The value to minimise: Compute, negated when maximising.
  std::optional<double> Loss(const Config& config, double time_ms, double energy_j = 0,
                             double power_w = 0) const;
  // Whether the expression reads energy_j or power_w: its candidates must
  // have their energy measured.
  bool reads_energy() const { return reads_energy_; }

  // "time" for the default, else the expression text: identifies what a
  // stored best ranks.
  const std::string& id() const { return id_; }
  const std::string& name() const { return name_; }
  bool maximize() const { return maximize_; }

 private:
  std::string id_ = "time";
  std::string name_ = "time_ms";
  bool maximize_ = false;
  std::shared_ptr<const Expr> expr_;  // null for the default
  std::vector<std::vector<Scalar>> param_scalars_;
  std::size_t num_params_ = 0;
  bool reads_energy_ = false;
};

// How a job's strategy is shown: "auto (bayes)" for the default and what
// it became, else the name ("genetic").
std::string StrategyLabel(const std::string& named, const std::string& resolved);

// A validated job, ready to run. Immutable once resolved.
struct Job {
  v1::JobSpec spec;
  std::string base_dir;  // relative paths in the spec start here
  std::string kernel_name;
  std::string source;       // kernel source text (empty if none was given)
  std::string source_hash;  // hex SHA-256 of `source`
  Problem problem;
  std::shared_ptr<const Space> space;
  Objective objective;
  std::string strategy;  // as named (may be "auto")
  std::uint64_t seed = 0;
  std::int64_t max_evaluations = 0;  // 0: no limit
  Millis max_time{0};                // 0: no limit
  int batch_size = 1;
  std::map<std::string, std::string> strategy_settings;
  bool warm_start = true;  // see StrategySpec.warm_start
};

// The job file's parameter `p` (the `index`-th, for messages) as a space
// parameter with its values. INVALID_ARGUMENT names the field.
absl::StatusOr<Parameter> ToParameter(const v1::Parameter& p, std::size_t index);

// Validates `spec` and resolves it. Relative paths (kernel.file,
// include paths) are relative to `base_dir`. INVALID_ARGUMENT names the
// field path and, for expressions, shows a caret under the fault.
absl::StatusOr<Job> ResolveJob(const v1::JobSpec& spec, const std::string& base_dir);

// A job over a recorded space: the recording's kernel, parameters and
// problem, and its configurations as an explicit-list space. `overrides`
// supplies strategy, budget and device settings.
absl::StatusOr<Job> JobForRecording(const RecordedSpace& recording, const v1::JobSpec& overrides);

// What the device needs to know about `job` (which must outlive it).
JobBinding BindingFor(const Job& job);

// Bytes of GPU memory the job's buffer arguments take (sizes evaluated for
// the job's problem), with its companion kernels' buffers and, for a
// pipeline job, a bound on its chunk buffers. INVALID_ARGUMENT names an
// argument whose size cannot be evaluated from the problem alone.
absl::StatusOr<std::int64_t> ArgumentBytes(const Job& job);

// `message` serialised deterministically (map entries sorted): equal
// messages give equal bytes, for identities, hashes and cache keys.
std::string DeterministicBytes(const google::protobuf::MessageLite& message);

// The job's identity: derived from the kernel (name and source), the whole
// spec (strategy, seed and budget included), the device and the problem.
// The same job run again has the same id and resumes.
std::string ComputeJobId(const Job& job, const DeviceInfo& device);

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_JOB_H_
