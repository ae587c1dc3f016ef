// A genetic algorithm: a population bred by tournament selection, uniform
// crossover and mutation, the best kept (elitism), children repaired into
// the valid and unseen part of the space, a whole generation asked at once.
#ifndef KTUNE_STRATEGIES_GENETIC_H_
#define KTUNE_STRATEGIES_GENETIC_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "strategies/common.h"
#include "tuner/base/rng.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

struct GeneticOptions {
  int population = 20;
  double mutation = 0;  // per-parameter rate; 0: 1 / parameters
  int elite = 2;        // best individuals carried into the breeding pool
  int tournament = 3;
  std::vector<Config> warm;  // configurations to try first
};

// Not thread-safe. Deterministic for a seed.
class GeneticAlgorithm final : public Strategy {
 public:
  GeneticAlgorithm(const Space& space, std::uint64_t seed, GeneticOptions options);
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config& config, const Outcome& outcome) override;

 private:
  void Breed();
  const Config& Select();

  const Space& space_;
  Rng rng_;
  GeneticOptions options_;
  ConfigSet seen_;
  std::deque<Config> queue_;  // the current generation, not yet asked
  // Every evaluated individual with its loss (+inf when it failed).
  std::vector<std::pair<double, Config>> evaluated_;
  std::vector<std::pair<double, Config>> pool_;  // breeding pool, best first
  bool exhausted_ = false;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_GENETIC_H_
