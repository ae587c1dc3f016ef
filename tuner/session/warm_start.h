// Warm starts from the store: what other jobs learnt about the same kernel
// (another device, another problem size) offered to a new job's strategy.
#ifndef KTUNE_TUNER_SESSION_WARM_START_H_
#define KTUNE_TUNER_SESSION_WARM_START_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/session/job.h"
#include "tuner/space/config.h"
#include "tuner/store/store.h"

namespace ktune {

struct WarmStart {
  // Each configuration of the job's space measured elsewhere, once. Losses
  // are ranks, not times: within each earlier job, 0 for its best and 1 for
  // its worst ok configuration, so jobs on faster and slower devices (or
  // larger and smaller problems) rank together; a configuration measured in
  // several jobs keeps its best rank and counts as failed only if it never
  // succeeded.
  std::vector<std::pair<Config, Outcome>> prior;
  std::int64_t jobs = 0;     // earlier jobs that contributed
  std::int64_t skipped = 0;  // stored keys outside this job's space
};

// Reads the warm start for `job` (whose own id, `job_id`, is excluded):
// measurements of kernels with the job's name and parameter names, for the
// same objective, at most `limit` rows, newest jobs first, measured no later
// than the job was first stored (so a resumed job gets the same warm start).
absl::StatusOr<WarmStart> LoadWarmStart(Store& store, const Job& job, const std::string& job_id,
                                        std::int64_t limit = 100000);

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_WARM_START_H_
