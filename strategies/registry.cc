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

std::string StrategyErrorField(std::string_view name) {
  const std::vector<std::string> names = StrategyNames();
  return std::find(names.begin(), names.end(), name) != names.end() ? "strategy.options"
                                                                    : "strategy.name";
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

// An option a strategy takes: its name and the values it accepts.
struct OptionSpec {
  const char* key;
  double lo;
  double hi;
  bool integer;
};

// Checks a value read by ReadNumber against its option's range.
absl::Status CheckRange(std::string_view strategy, const OptionSpec& spec, const std::string& value,
                        double v) {
  if (v < spec.lo || v > spec.hi || (spec.integer && v != std::floor(v))) {
    // Whole bounds print as integers (100000, not 1e+05).
    auto bound = [](double b) {
      return b == std::floor(b) && std::abs(b) < 1e15 ? StrCat(static_cast<std::int64_t>(b))
                                                      : StrCat(b);
    };
    return absl::InvalidArgumentError(StrCat("strategy ", strategy, ": option ", spec.key,
                                             " must be ", spec.integer ? "an integer" : "a number",
                                             " from ", bound(spec.lo), " to ", bound(spec.hi),
                                             ", not '", value, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ResolveAutoStrategy(const Space& space, std::int64_t max_evaluations, bool warm,
                                bool time_limited) {
  // Exhaustive when the budget covers the whole space, or when the job has
  // no budget at all (it asked for everything). A time budget alone may end
  // anywhere in the space, so the search goes to the promising part first.
  // Otherwise, with a warm start, local search from the best
  // configurations known elsewhere (the strongest start on the recorded
  // spaces of one kernel on another GPU); without one, Bayesian
  // optimisation, the strongest strategy from scratch.
  const SpaceCount count = space.Count();
  if (max_evaluations <= 0 && !time_limited) return "brute_force";
  if (max_evaluations > 0 && count.exact && count.count <= static_cast<Uint128>(max_evaluations)) {
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
    return MakeStrategy(ResolveAutoStrategy(space, options.max_evaluations,
                                            HasWarmStart(space, options), options.time_limited),
                        space, options);
  }
  // Options: each strategy takes its own numbers.
  auto options_for =
      [&](const std::vector<OptionSpec>& known) -> absl::StatusOr<std::map<std::string, double>> {
    std::map<std::string, double> out;
    for (const auto& [key, value] : options.settings) {
      auto spec = std::find_if(known.begin(), known.end(),
                               [&key = key](const OptionSpec& o) { return key == o.key; });
      if (spec == known.end()) {
        std::vector<std::string> names;
        names.reserve(known.size());
        for (const OptionSpec& o : known) names.emplace_back(o.key);
        return absl::InvalidArgumentError(
            StrCat("strategy ", name, ": unknown option '", key,
                   "' (known: ", names.empty() ? "none" : StrJoin(names, ", "), ")"));
      }
      double v = 0;
      if (absl::Status s = ReadNumber(std::string(name), key, value, &v); !s.ok()) return s;
      if (absl::Status s = CheckRange(name, *spec, value, v); !s.ok()) return s;
      out[key] = v;
    }
    return out;
  };
  if (name == "genetic") {
    absl::StatusOr<std::map<std::string, double>> o = options_for({{"population", 2, 100000, true},
                                                                   {"mutation", 0, 1, false},
                                                                   {"elite", 0, 100000, true},
                                                                   {"tournament", 1, 1000, true}});
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
        options_for({{"temperature", 1e-6, 1e6, false},
                     {"cooling", 1e-3, 1, false},
                     {"patience", 1, 1e7, true}});
    if (!o.ok()) return o.status();
    SimulatedAnnealing::Options ao;
    if (o->count("temperature")) ao.initial_temperature = (*o)["temperature"];
    if (o->count("cooling")) ao.cooling = (*o)["cooling"];
    if (o->count("patience")) ao.patience = static_cast<int>((*o)["patience"]);
    ao.warm = WarmStart(space, options, kWarmCount);
    return std::make_unique<SimulatedAnnealing>(space, options.seed, std::move(ao));
  }
  if (name == "local") {
    absl::StatusOr<std::map<std::string, double>> o =
        options_for({{"perturbation", 1, 1000, true}});
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
    absl::StatusOr<std::map<std::string, double>> o =
        options_for({{"initial", 1, 100000, true},
                     {"candidates", 1, 1e6, true},
                     {"random_every", 0, 1e6, true},
                     {"acquisitions", 1, 7, true},
                     {"warp", 0, 1, true},
                     {"failures_in_objective", 0, 1, true},
                     {"polish", 0, 1e6, true},
                     {"polish_limit", 0, 1e6, true},
                     {"polish_radius", 1, 2, true},
                     {"trust", 0, 1e6, true},
                     {"trust_start", 1, 1e6, true},
                     {"input_warp", 0, 1, true},
                     {"centre", 0, 1, true},
                     {"length_floor", 0, 1, false},
                     {"length_floor_below", 0, 1e6, true}});
    if (!o.ok()) return o.status();
    BayesOptions bo;
    if (o->count("initial")) bo.initial = static_cast<int>((*o)["initial"]);
    if (o->count("candidates")) bo.candidates = static_cast<int>((*o)["candidates"]);
    if (o->count("random_every")) bo.random_every = static_cast<int>((*o)["random_every"]);
    if (o->count("acquisitions")) bo.acquisitions = static_cast<int>((*o)["acquisitions"]);
    if (o->count("warp")) bo.warp = (*o)["warp"] != 0;
    if (o->count("polish")) bo.polish = static_cast<int>((*o)["polish"]);
    if (o->count("polish_limit")) bo.polish_limit = static_cast<int>((*o)["polish_limit"]);
    if (o->count("polish_radius")) bo.polish_radius = static_cast<int>((*o)["polish_radius"]);
    if (o->count("trust")) bo.trust = static_cast<int>((*o)["trust"]);
    if (o->count("trust_start")) bo.trust_start = static_cast<int>((*o)["trust_start"]);
    if (o->count("input_warp")) bo.input_warp = (*o)["input_warp"] != 0;
    if (o->count("centre")) bo.centre = (*o)["centre"] != 0;
    if (o->count("length_floor")) bo.length_floor = (*o)["length_floor"];
    if (o->count("length_floor_below")) {
      bo.length_floor_below = static_cast<int>((*o)["length_floor_below"]);
    }
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

absl::StatusOr<StrategyChoice> ParseStrategyChoice(std::string_view text) {
  const std::vector<std::string> parts = StrSplit(text, ':');
  StrategyChoice out;
  out.name = parts[0];
  if (out.name.empty()) {
    return absl::InvalidArgumentError(StrCat("'", text, "' names no strategy"));
  }
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          StrCat("'", text, "': option '", parts[i], "' is not key=value"));
    }
    out.settings[parts[i].substr(0, eq)] = parts[i].substr(eq + 1);
  }
  return out;
}

}  // namespace ktune
