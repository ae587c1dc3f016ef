// Strategies by name. The session receives its strategy from whoever builds
// it (the command line, the daemon); the engine never includes this.
#ifndef KTUNE_STRATEGIES_REGISTRY_H_
#define KTUNE_STRATEGIES_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

struct StrategyOptions {
  std::uint64_t seed = 0;
  // The evaluation budget of the run (0: none), for strategies that plan.
  std::int64_t max_evaluations = 0;
  // Whether the run stops after a time budget (a job's max_time): then
  // "auto" searches rather than listing the space in order, which the time
  // may not cover.
  bool time_limited = false;
  // Strategy-specific settings from the job spec.
  std::map<std::string, std::string> settings;
  // Outcomes of this kernel's configurations measured elsewhere (another
  // device or problem size), for a warm start: the best are tried first,
  // and the model-based strategies learn from them.
  std::vector<std::pair<Config, Outcome>> prior;
};

// The registered names, sorted.
std::vector<std::string> StrategyNames();

// The field of a job spec that MakeStrategy's error for `name` is about:
// "strategy.options" for a registered name, else "strategy.name".
std::string StrategyErrorField(std::string_view name);

// A strategy over `space` (which must outlive it). INVALID_ARGUMENT for an
// unknown name (the message lists the known ones) or a bad setting.
absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name, const Space& space,
                                                       const StrategyOptions& options);

// What "auto" resolves to for this space and budget, with or without a
// warm start: brute_force when the evaluation budget covers the space, or
// when there is no budget at all (neither evaluations nor time); else
// local with a warm start, else bayes.
std::string ResolveAutoStrategy(const Space& space, std::int64_t max_evaluations, bool warm = false,
                                bool time_limited = false);

// Whether `options.prior` holds a successful configuration of `space`.
bool HasWarmStart(const Space& space, const StrategyOptions& options);

// A strategy written as text: "name" or "name:key=value:key=value", the
// settings being StrategyOptions::settings (a spec's `strategy.options`).
struct StrategyChoice {
  std::string name;
  std::map<std::string, std::string> settings;
};
// INVALID_ARGUMENT, quoting `text`, for an empty name or a setting that is
// not key=value. The name is not checked against the registered ones.
absl::StatusOr<StrategyChoice> ParseStrategyChoice(std::string_view text);

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_REGISTRY_H_
