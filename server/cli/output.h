// JSON and text renderings of stored records for the command line.
#ifndef KTUNE_SERVER_CLI_OUTPUT_H_
#define KTUNE_SERVER_CLI_OUTPUT_H_

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
Json BestToJson(const BestRecord& best);

// A config's JSON text parsed back into an object (empty object if corrupt).
Json ConfigJson(const std::string& config_json);

// "1.234 ms" with four significant digits, or "-" for NaN.
std::string FormatMs(double ms);

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_OUTPUT_H_
