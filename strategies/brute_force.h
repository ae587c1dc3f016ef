// Exhaustive search in enumeration order.
#ifndef KTUNE_STRATEGIES_BRUTE_FORCE_H_
#define KTUNE_STRATEGIES_BRUTE_FORCE_H_

#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// Proposes every valid configuration once, in the space's enumeration
// order. Deterministic; ignores outcomes. Not thread-safe.
class BruteForce final : public Strategy {
 public:
  explicit BruteForce(const Space& space) : enumerator_(space.Enumerate()) {}
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config&, const Outcome&) override {}

 private:
  Space::Enumerator enumerator_;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_BRUTE_FORCE_H_
