#include "strategies/registry.h"

#include <algorithm>

#include "absl/status/status.h"
#include "strategies/brute_force.h"
#include "strategies/random_search.h"
#include "tuner/base/strings.h"

namespace ktune {

std::vector<std::string> StrategyNames() { return {"auto", "brute_force", "random"}; }

std::string ResolveAutoStrategy(const Space& space, std::int64_t max_evaluations) {
  // Until the model-based strategies land, "auto" is exhaustive when the
  // budget covers the whole space and random sampling otherwise.
  const SpaceCount count = space.Count();
  if (max_evaluations <= 0 ||
      (count.exact && count.count <= static_cast<Uint128>(max_evaluations))) {
    return "brute_force";
  }
  return "random";
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name, const Space& space,
                                                       const StrategyOptions& options) {
  if (name == "auto") {
    return MakeStrategy(ResolveAutoStrategy(space, options.max_evaluations), space, options);
  }
  if (!options.settings.empty() && (name == "brute_force" || name == "random")) {
    return absl::InvalidArgumentError(StrCat("strategy ", name, " takes no options; got '",
                                             options.settings.begin()->first, "'"));
  }
  if (name == "brute_force") return std::make_unique<BruteForce>(space);
  if (name == "random") return std::make_unique<RandomSearch>(space, options.seed);
  return absl::InvalidArgumentError(
      StrCat("unknown strategy '", name, "'; known: ", StrJoin(StrategyNames(), ", ")));
}

}  // namespace ktune
