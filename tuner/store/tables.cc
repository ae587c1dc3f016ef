#include "tuner/store/tables.h"

#include <vector>

#include "tuner/base/strings.h"

namespace ktune {
namespace {

using K = StoreColumn::Kind;

constexpr StoreColumn kDevices[] = {
    {"id", K::kInt},
    {"uuid", K::kText},
    {"name", K::kText},
    {"architecture", K::kText},
    {"driver", K::kText},
    {"memory_bytes", K::kInt},
    {"multiprocessors", K::kInt},
    {"simulated", K::kInt},
    {"locator", K::kText},
};
constexpr StoreColumn kKernels[] = {
    {"id", K::kInt}, {"name", K::kText}, {"source_hash", K::kText}, {"parameters", K::kText}};
constexpr StoreColumn kJobs[] = {
    {"id", K::kText},         {"kernel_id", K::kInt},   {"device_id", K::kInt},
    {"problem", K::kText},    {"spec", K::kBlob},       {"spec_json", K::kText},
    {"strategy", K::kText},   {"seed", K::kInt},        {"objective", K::kText},
    {"state", K::kText},      {"message", K::kText},    {"evaluations", K::kInt},
    {"created_at", K::kText}, {"updated_at", K::kText}, {"origin", K::kText},
    {"priority", K::kInt},    {"runner", K::kText},     {"client", K::kText},
};
constexpr StoreColumn kMeasurements[] = {
    {"job_id", K::kText},     {"seq", K::kInt},          {"config_key", K::kText},
    {"config", K::kText},     {"status", K::kText},      {"time_ms", K::kReal},
    {"objective", K::kReal},  {"loss", K::kReal},        {"median_ms", K::kReal},
    {"mean_ms", K::kReal},    {"min_ms", K::kReal},      {"max_ms", K::kReal},
    {"q1_ms", K::kReal},      {"q3_ms", K::kReal},       {"stddev_ms", K::kReal},
    {"samples", K::kInt},     {"compile_ms", K::kReal},  {"cost_ms", K::kReal},
    {"message", K::kText},    {"measured_at", K::kText}, {"conditions", K::kText},
    {"samples_ms", K::kText},
};
constexpr StoreColumn kBest[] = {
    {"kernel_id", K::kInt},  {"device_id", K::kInt},   {"problem", K::kText},
    {"objective", K::kText}, {"job_id", K::kText},     {"config_key", K::kText},
    {"config", K::kText},    {"time_ms", K::kReal},    {"objective_value", K::kReal},
    {"loss", K::kReal},      {"updated_at", K::kText},
};

constexpr StoreTable kTables[] = {
    {"devices", kDevices},           {"kernels", kKernels}, {"jobs", kJobs},
    {"measurements", kMeasurements}, {"best", kBest},
};

}  // namespace

std::span<const StoreTable> StoreTables() { return kTables; }

std::string ColumnList(const StoreTable& table, const std::string& prefix) {
  std::vector<std::string> names;
  for (const StoreColumn& c : table.columns) names.push_back(prefix + c.name);
  return StrJoin(names, ", ");
}

}  // namespace ktune
