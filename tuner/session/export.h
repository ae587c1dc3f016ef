// What a job measured, in other tools' formats: a Kernel Tuner cache file
// and a T4 results file, so ktune's results go back into the tools and
// papers that read those formats. The readers of both (tuner/device/
// recorded.h) replay what these write: the same configurations, the same
// best, failures marked as each format marks them.
#ifndef KTUNE_TUNER_SESSION_EXPORT_H_
#define KTUNE_TUNER_SESSION_EXPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/store/store.h"

namespace ktune {

enum class ExportFormat { kKernelTuner, kT4 };

// "kernel-tuner" or "t4"; nullopt for another name.
std::optional<ExportFormat> ParseExportFormat(const std::string& name);

// The job's measurements (in evaluation order) as a file of `format`:
//  - Kernel Tuner: its cache format (kernel and device names, the problem
//    as problem_size, tune_params with every value of each parameter,
//    and per configuration the parameter values, "time" (the time ktune
//    ranks: the median of the samples), "times" (the samples),
//    compile_time and benchmark_time in ms). Failures carry Kernel
//    Tuner's markers in "time": InvalidConfig (constraints),
//    CompilationFailedConfig (compile errors) and RuntimeFailedConfig (the
//    rest); "ktune_status" keeps ktune's status, which Kernel Tuner
//    ignores and ktune's reader prefers.
//  - T4: its results format (schema 1.0.0), each configuration with its
//    times, "invalidity" (correct, compile, runtime, timeout, correctness,
//    constraints; a launch error is T4's "runtime") and its time as a
//    measurement.
// An objective other than time is not exported (both formats rank time).
// INVALID_ARGUMENT when a stored configuration cannot be read back.
absl::StatusOr<std::string> ExportMeasurements(const JobRecord& job,
                                               const std::vector<StoredMeasurement>& measurements,
                                               ExportFormat format);

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_EXPORT_H_
