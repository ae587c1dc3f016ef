// Neighbourhood searches: simulated annealing and iterated local search.
// Cheap and strong on smooth spaces; both restart when they stall.
#ifndef KTUNE_STRATEGIES_LOCAL_H_
#define KTUNE_STRATEGIES_LOCAL_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "strategies/common.h"
#include "tuner/base/rng.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// Simulated annealing over one-parameter moves, on the log of the loss
// (LossScale): a worse move is accepted with probability
// exp(-increase / T); T cools geometrically and is reset when the search
// restarts (after `patience` moves without a new best) from a random
// configuration. Not thread-safe.
class SimulatedAnnealing final : public Strategy {
 public:
  struct Options {
    double initial_temperature = 0.5;
    double cooling = 0.95;
    int patience = 40;
    std::vector<Config> warm;
  };
  SimulatedAnnealing(const Space& space, std::uint64_t seed, Options options);
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config& config, const Outcome& outcome) override;

 private:
  const Space& space_;
  Rng rng_;
  Options options_;
  ConfigSet seen_;
  std::deque<Config> warm_;
  std::optional<Config> current_;
  double current_loss_ = 0;  // losses as told (LossOf)
  double best_loss_;
  LossScale scale_;
  double temperature_;
  int since_best_ = 0;
};

// Iterated local search: from the current configuration, try its
// one-parameter neighbours (adjacent values first) and move to the first
// that improves; at a local optimum, perturb the best so far with a few
// mutations and continue from there. Not thread-safe.
class LocalSearch final : public Strategy {
 public:
  struct Options {
    int perturbation = 3;  // mutations applied at a local optimum
    std::vector<Config> warm;
  };
  LocalSearch(const Space& space, std::uint64_t seed, Options options);
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config& config, const Outcome& outcome) override;

 private:
  void Refill();

  const Space& space_;
  Rng rng_;
  Options options_;
  ConfigSet seen_;
  std::deque<Config> warm_;
  std::optional<Config> current_;
  double current_loss_ = 0;
  std::optional<Config> best_;
  double best_loss_;
  std::deque<Config> moves_;     // untried neighbours of current_
  std::optional<Config> start_;  // a perturbed start awaiting its outcome
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_LOCAL_H_
