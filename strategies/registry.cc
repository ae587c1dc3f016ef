#include "strategies/registry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/status/status.h"
#include "strategies/bayes.h"
#include "strategies/brute_force.h"
#include "strategies/genetic.h"
#include "strategies/local.h"
#include "strategies/random_search.h"
#include "tuner/base/strings.h"

namespace ktune {

std::vector<std::string> StrategyNames() {
  return {"annealing", "auto", "bayes", "brute_force", "genetic", "local", "random"};
}

namespace {

// The best few configurations known from elsewhere, best first.
std::vector<Config> WarmStart(const Space& space, const StrategyOptions& options,
                              std::size_t count) {
  std::vector<std::pair<double, Config>> ok;
  for (const auto& [c, o] : options.prior) {
    if (o.ok() && space.IsValid(c)) ok.emplace_back(o.loss, c);
  }
  std::stable_sort(ok.begin(), ok.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  for (std::size_t i = 0; i < ok.size() && out.size() < count; ++i) out.push_back(ok[i].second);
  return out;
}

// Reads an integer or real option; INVALID_ARGUMENT naming it if malformed.
absl::Status ReadNumber(const std::string& strategy, const std::string& key,
                        const std::string& value, double* out) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == nullptr || *end != '\0' || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        StrCat("strategy ", strategy, ": option ", key, " needs a number, not '", value, "'"));
  }
  *out = v;
  return absl::OkStatus();
}

constexpr std::size_t kWarmCount = 3;

}  // namespace

std::string ResolveAutoStrategy(const Space& space, std::int64_t max_evaluations, bool warm) {
  // Exhaustive when the budget covers the whole space. Otherwise, with a
  // warm start, local search from the best configurations known elsewhere
  // (the strongest start on the recorded spaces of one kernel on another
  // GPU); without one, Bayesian optimisation, the strongest strategy from
  // scratch.
  const SpaceCount count = space.Count();
  if (max_evaluations <= 0 ||
      (count.exact && count.count <= static_cast<Uint128>(max_evaluations))) {
    return "brute_force";
  }
  return warm ? "local" : "bayes";
}

bool HasWarmStart(const Space& space, const StrategyOptions& options) {
  return std::any_of(options.prior.begin(), options.prior.end(),
                     [&](const auto& p) { return p.second.ok() && space.IsValid(p.first); });
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(std::string_view name, const Space& space,
                                                       const StrategyOptions& options) {
  if (name == "auto") {
    if (!options.settings.empty()) {
      return absl::InvalidArgumentError(StrCat("strategy auto takes no options; got '",
                                               options.settings.begin()->first,
                                               "' (name the strategy to set its options)"));
    }
    return MakeStrategy(
        ResolveAutoStrategy(space, options.max_evaluations, HasWarmStart(space, options)), space,
        options);
  }
  // Options: each strategy takes its own numbers.
  auto options_for =
      [&](const std::vector<std::string>& known) -> absl::StatusOr<std::map<std::string, double>> {
    std::map<std::string, double> out;
    for (const auto& [key, value] : options.settings) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return absl::InvalidArgumentError(
            StrCat("strategy ", name, ": unknown option '", key,
                   "' (known: ", known.empty() ? "none" : StrJoin(known, ", "), ")"));
      }
      double v = 0;
      if (absl::Status s = ReadNumber(std::string(name), key, value, &v); !s.ok()) return s;
      out[key] = v;
    }
    return out;
  };
  if (name == "genetic") {
    absl::StatusOr<std::map<std::string, double>> o =
        options_for({"population", "mutation", "elite", "tournament"});
    if (!o.ok()) return o.status();
    GeneticOptions go;
    if (o->count("population")) go.population = static_cast<int>((*o)["population"]);
    if (o->count("mutation")) go.mutation = (*o)["mutation"];
    if (o->count("elite")) go.elite = static_cast<int>((*o)["elite"]);
    if (o->count("tournament")) go.tournament = std::max(1, static_cast<int>((*o)["tournament"]));
    go.warm = WarmStart(space, options, kWarmCount);
    return std::make_unique<GeneticAlgorithm>(space, options.seed, std::move(go));
  }
  if (name == "annealing") {
    absl::StatusOr<std::map<std::string, double>> o =
        options_for({"temperature", "cooling", "patience"});
    if (!o.ok()) return o.status();
    SimulatedAnnealing::Options ao;
    if (o->count("temperature")) ao.initial_temperature = (*o)["temperature"];
    if (o->count("cooling")) ao.cooling = (*o)["cooling"];
    if (o->count("patience")) ao.patience = static_cast<int>((*o)["patience"]);
    ao.warm = WarmStart(space, options, kWarmCount);
    return std::make_unique<SimulatedAnnealing>(space, options.seed, std::move(ao));
  }
  if (name == "local") {
    absl::StatusOr<std::map<std::string, double>> o = options_for({"perturbation"});
    if (!o.ok()) return o.status();
    LocalSearch::Options lo;
    if (o->count("perturbation")) lo.perturbation = static_cast<int>((*o)["perturbation"]);
    lo.warm = WarmStart(space, options, kWarmCount);
    return std::make_unique<LocalSearch>(space, options.seed, std::move(lo));
  }
  if (!options.settings.empty() && (name == "brute_force" || name == "random")) {
    return absl::InvalidArgumentError(StrCat("strategy ", name, " takes no options; got '",
                                             options.settings.begin()->first, "'"));
  }
  if (name == "brute_force") return std::make_unique<BruteForce>(space);
  if (name == "bayes") {
    absl::StatusOr<std::map<std::string, double>> o = options_for(
        {"initial", "candidates", "random_every", "acquisitions", "warp", "failures_in_objective"});
    if (!o.ok()) return o.status();
    BayesOptions bo;
    if (o->count("initial")) bo.initial = static_cast<int>((*o)["initial"]);
    if (o->count("candidates")) bo.candidates = static_cast<int>((*o)["candidates"]);
    if (o->count("random_every")) bo.random_every = static_cast<int>((*o)["random_every"]);
    if (o->count("acquisitions")) bo.acquisitions = static_cast<int>((*o)["acquisitions"]);
    if (o->count("warp")) bo.warp = (*o)["warp"] != 0;
    if (o->count("failures_in_objective")) {
      bo.failures_in_objective = (*o)["failures_in_objective"] != 0;
    }
    bo.warm = WarmStart(space, options, kWarmCount);
    bo.prior = options.prior;
    return std::make_unique<BayesianOptimization>(space, options.seed, std::move(bo));
  }
  if (name == "random") return std::make_unique<RandomSearch>(space, options.seed);
  return absl::InvalidArgumentError(
      StrCat("unknown strategy '", name, "'; known: ", StrJoin(StrategyNames(), ", ")));
}

}  // namespace ktune
