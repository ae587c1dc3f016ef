// GetBest's answers from stored best records: the exact kernel, device
// and problem; else the nearest problem on that device; else the same
// kernel on another device of the same architecture. The chain works on
// records already loaded, so every store backend (and the client library,
// in process) answers alike.
#ifndef KTUNE_TUNER_STORE_BEST_MATCH_H_
#define KTUNE_TUNER_STORE_BEST_MATCH_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/measurement.h"

namespace ktune {

// The best configuration stored for a kernel, device, problem and
// objective.
struct BestRecord {
  std::string kernel_name;
  std::string source_hash;
  DeviceInfo device;
  Problem problem;
  std::string objective;
  std::string job_id;
  std::string key;
  std::string config_json;
  double time_ms = 0;
  std::optional<double> objective_value;
  double loss = 0;
  std::string updated_at;
};

// GetBest's question: a kernel by name (and optionally its source hash) on
// a device for a problem.
struct BestQuery {
  std::string kernel;
  std::string source_hash;   // optional
  std::string device;        // name, id ("cuda:0") or uuid; empty: any
  std::string architecture;  // of `device`, when the caller knows it
  Problem problem;           // empty: any
  std::string objective;     // empty: "time" when stored, else any
  bool exact_only = false;
};

enum class BestMatchKind { kExact, kNearestProblem, kSameArchitecture };
const char* BestMatchKindName(BestMatchKind kind);  // "exact", ...

struct BestMatch {
  BestMatchKind kind = BestMatchKind::kExact;
  BestRecord best;
  bool source_differs = false;  // the stored source hash is not the one asked
  double distance = 0;          // problem distance (log scale) when nearest
};

// The distance between two problems over the same dimensions: the
// Euclidean norm of the differences of their natural logs. Infinite when
// the dimension names differ.
double ProblemDistance(const Problem& a, const Problem& b);

// The fallback chain over `records` (no I/O). Records with the asked
// source hash are preferred; when only others exist the match says
// source_differs. `query.architecture` should be set when the device is not
// among the records. NOT_FOUND with a message saying what the records hold.
absl::StatusOr<BestMatch> SelectBestMatch(std::vector<BestRecord> records, const BestQuery& query);

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_BEST_MATCH_H_
