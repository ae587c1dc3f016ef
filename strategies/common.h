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

// An outcome's loss, or +infinity for a failure or a loss that is not a
// number: what the search heuristics compare.
double LossOf(const Outcome& outcome);

// The scale on which the model-based strategies compare losses: their
// logarithm, so that twice as slow counts the same at any speed. A time is
// positive (log(loss)); a maximised objective arrives negated (GB/s as
// -GB/s, and -log(-loss) keeps that order). An objective whose values take
// both signs, or zero, has no logarithm that keeps the order: once one
// such loss is noted, losses are compared as they are.
class LossScale {
 public:
  // Notes a successful, finite loss. Values mapped before a loss of the
  // other sign (or zero) was noted are on the old scale: map them again.
  void Note(double loss);
  double operator()(double loss) const;

 private:
  int sign_ = 0;  // the sign of every loss noted so far; 0 before the first
  bool linear_ = false;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_COMMON_H_
