// Uniform random search without replacement.
#ifndef KTUNE_STRATEGIES_RANDOM_SEARCH_H_
#define KTUNE_STRATEGIES_RANDOM_SEARCH_H_

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "tuner/base/rng.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// Proposes valid configurations uniformly at random, each at most once. On
// spaces of up to kListLimit valid configurations it shuffles the list
// lazily (so it ends exactly when the space is exhausted); on larger ones it
// draws uniform samples and skips repeats. Same seed, same sequence.
// Not thread-safe.
class RandomSearch final : public Strategy {
 public:
  static constexpr std::uint64_t kListLimit = std::uint64_t{1} << 19;

  RandomSearch(const Space& space, std::uint64_t seed);
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config&, const Outcome&) override {}

 private:
  const Space& space_;
  Rng rng_;
  bool listed_ = false;
  std::vector<Config> pool_;  // when listed: shuffled prefix [0, next_)
  std::size_t next_ = 0;
  std::unordered_set<Config, ConfigHash> seen_;  // when sampling
  bool exhausted_ = false;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_RANDOM_SEARCH_H_
