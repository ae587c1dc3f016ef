// Moves shared by the search heuristics: random unseen configurations,
// mutations and repair into the valid, unseen part of a space.
#ifndef KTUNE_STRATEGIES_COMMON_H_
#define KTUNE_STRATEGIES_COMMON_H_

#include <cstddef>
#include <deque>
#include <optional>
#include <unordered_set>
#include <vector>

#include "tuner/base/rng.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

using ConfigSet = std::unordered_set<Config, ConfigHash>;

// A uniformly drawn valid configuration not in `seen`, or nullopt when none
// turns up (the space is exhausted or nearly so).
std::optional<Config> RandomUnseen(const Space& space, Rng& rng, const ConfigSet& seen);

// `config` with each parameter changed with probability `rate` (at least
// one change): to an adjacent value or, half the time, to any other.
Config Mutate(const Space& space, Rng& rng, Config config, double rate);

// `config` if valid and unseen; else a valid unseen configuration close to
// it (a few mutations); else a random unseen one; nullopt if none.
std::optional<Config> Repair(const Space& space, Rng& rng, const Config& config,
                             const ConfigSet& seen);

// Moves configurations from the front of `warm` (warm-start suggestions)
// into `out` until it holds `n`, skipping invalid and seen ones and marking
// the taken ones seen.
void TakeWarm(const Space& space, std::deque<Config>& warm, ConfigSet& seen, std::size_t n,
              std::vector<Config>& out);

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_COMMON_H_
