// Limits on what a job's spec may hold, checked before anything is
// resolved, locally and on the daemon alike: every string's length and
// every list's and map's number of entries, by walking the message, so a
// field added later is limited too. The resources a daemon grants (space
// size, evaluations, buffer memory, request size) are its own flags
// (docs/daemon.md); these are fixed.
#ifndef KTUNE_TUNER_SESSION_SPEC_LIMITS_H_
#define KTUNE_TUNER_SESSION_SPEC_LIMITS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "ktune/v1/job.pb.h"

namespace ktune {

struct SpecLimits {
  std::size_t source_chars = std::size_t{8} << 20;  // a kernel's code
  std::size_t string_chars = 4096;                  // any other string
  std::size_t parameters = 256;
  std::size_t parameter_values = 1'000'000;  // one parameter's listed values
  std::size_t arguments = 1024;              // a kernel's arguments
  std::size_t entries = 4096;                // any other list or map
};

// INVALID_ARGUMENT naming the field (its path, as in
// "parameters[2].strings[7]"), its size and the limit.
absl::Status CheckSpecLimits(const v1::JobSpec& spec, const SpecLimits& limits = {});

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_SPEC_LIMITS_H_
