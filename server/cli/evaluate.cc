// ktune evaluate: scores search strategies on recorded spaces.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <algorithm>
#include <cmath>
#include <map>
#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

#include "strategies/registry.h"
#include "tuner/device/recorded.h"
#include "tuner/session/evaluate.h"
#include "tuner/session/warm_start.h"

namespace ktune::cli {
namespace {

const CommandSpec kEvaluateCommand{
    "evaluate",
    "ktune evaluate --device sim:FILE [--device sim:FILE ...] --strategy a,b,c [flags]",
    "Scores search strategies on recorded spaces: per space and strategy, the score at\n"
    "the short and the long budget (0 = random search, 1 = the optimum at once; see\n"
    "README), the mean fraction of the optimum after 20, 50, 100 and 200\n"
    "evaluations, and the strategy's time per proposal; then the averages.",
    {{"device", "sim:FILE", "a recorded space (repeatable)", true},
     {"strategy", "NAMES",
      "comma-separated strategies, each optionally name:key=value:... (default: auto)"},
     {"repeats", "N", "seeded repeats per space and strategy (default 30)"},
     {"batch", "N", "configurations asked at once (default 1)"},
     {"seed", "N", "first seed (default 0)"},
     {"short-only", "",
      "stop each run at the short budget: the short score only, ten times faster"},
     {"warm-from", "sim:FILE",
      "warm-start every run from this recording of the same kernel (another GPU)"},
     kJsonFlag},
    0};

// A score or fraction right-aligned in `width` with three decimals; "-"
// where there is none (NaN: not run that far).
std::string Figure(double v, int width) {
  char buf[32];
  if (std::isnan(v)) {
    std::snprintf(buf, sizeof buf, "%*s", width, "-");
  } else {
    std::snprintf(buf, sizeof buf, "%*.3f", width, v);
  }
  return buf;
}

// What evaluate runs: the recordings, the strategies with their settings,
// the options, and a recording to warm-start from.
struct EvaluatePlan {
  std::vector<std::string> devices;
  std::vector<std::string> strategies;
  std::map<std::string, StrategyFlag> parsed;
  EvaluateOptions options;
  std::vector<RecordedSpace> recordings;
  std::optional<RecordedSpace> warm;
};

std::optional<Failure> PlanEvaluate(const Args& args, EvaluatePlan& plan) {
  const std::vector<std::string> devices = args.GetAll("device");
  plan.devices = devices;
  if (devices.empty()) {
    return Failure{kExitInvalidInput, "give at least one --device sim:FILE"};
  }
  std::vector<std::string>& strategies = plan.strategies;
  strategies = StrSplit(args.Get("strategy").value_or("auto"), ',');
  const std::vector<std::string> known = StrategyNames();
  // A strategy may carry options: name:key=value:key=value.
  std::map<std::string, StrategyFlag>& parsed = plan.parsed;
  for (const std::string& s : strategies) {
    absl::StatusOr<StrategyFlag> flag = ParseStrategyFlag(s);
    if (!flag.ok()) return InvalidInput(flag.status());
    if (std::find(known.begin(), known.end(), flag->name) == known.end()) {
      return Failure{kExitInvalidInput, StrCat("--strategy: unknown strategy '", flag->name,
                                               "'; known: ", StrJoin(known, ", "))};
    }
    parsed[s] = *std::move(flag);
  }
  absl::StatusOr<std::optional<std::int64_t>> repeats = args.GetInt("repeats", 1, 100000);
  if (!repeats.ok()) return InvalidInput(repeats.status());
  absl::StatusOr<std::optional<std::int64_t>> batch = args.GetInt("batch", 1, 4096);
  if (!batch.ok()) return InvalidInput(batch.status());
  absl::StatusOr<std::optional<std::uint64_t>> seed = args.GetUint("seed");
  if (!seed.ok()) return InvalidInput(seed.status());
  EvaluateOptions& options = plan.options;
  options.repeats = static_cast<int>(repeats->value_or(30));
  options.batch = static_cast<int>(batch->value_or(1));
  options.seed = seed->value_or(0);
  options.short_only = args.Has("short-only");

  std::vector<RecordedSpace>& recordings = plan.recordings;
  for (const std::string& d : devices) {
    if (d.rfind("sim:", 0) != 0) {
      return Failure{kExitInvalidInput, StrCat("--device ", d, ": give sim:FILE")};
    }
    absl::StatusOr<RecordedSpace> rs = RecordedSpace::Load(d.substr(4));
    if (!rs.ok())
      return Failure{kExitInvalidInput, StrCat("--device ", d, ": ", rs.status().message())};
    recordings.push_back(*std::move(rs));
  }
  // The strategies' settings are checked before anything runs.
  {
    absl::StatusOr<Space> first = recordings.front().ToSpace();
    if (!first.ok()) return Error(first.status());
    for (const auto& [text, flag] : parsed) {
      StrategyOptions so;
      so.settings = flag.options;
      if (auto s = MakeStrategy(flag.name, *first, so); !s.ok()) {
        return Failure{kExitInvalidInput, StrCat("--strategy: ", s.status().message())};
      }
    }
  }
  std::optional<RecordedSpace>& warm = plan.warm;
  if (auto w = args.Get("warm-from")) {
    if (w->rfind("sim:", 0) != 0) {
      return Failure{kExitInvalidInput, StrCat("--warm-from ", *w, ": give sim:FILE")};
    }
    absl::StatusOr<RecordedSpace> rs = RecordedSpace::Load(w->substr(4));
    if (!rs.ok())
      return Failure{kExitInvalidInput, StrCat("--warm-from ", *w, ": ", rs.status().message())};
    warm = *std::move(rs);
  }
  return std::nullopt;
}

std::optional<Failure> RunEvaluate(const Args& args, int* exit_code) {
  EvaluatePlan plan;
  if (auto f = PlanEvaluate(args, plan)) return f;
  const std::vector<std::string>& devices = plan.devices;
  const std::vector<std::string>& strategies = plan.strategies;
  const std::map<std::string, StrategyFlag>& parsed = plan.parsed;
  const EvaluateOptions& options = plan.options;
  const std::vector<RecordedSpace>& recordings = plan.recordings;
  const std::optional<RecordedSpace>& warm = plan.warm;
  Json out = Json::MakeObject();
  Json spaces = Json::MakeArray();
  std::map<std::string, std::vector<double>> short_scores, long_scores;
  const bool json = args.Has("json");
  if (!json) {
    std::printf("%-44s %-12s %7s %7s %6s %6s %6s %6s %9s\n", "SPACE (short/long budget)",
                "STRATEGY", "SHORT", "LONG", "@20", "@50", "@100", "@200", "MS/PROP");
  }
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    const RecordedSpace& rs = recordings[i];
    const ScoreBaseline baseline = BaselineOf(rs);
    std::string label = devices[i].substr(devices[i].find_last_of('/') + 1);
    Json space = Json::MakeObject();
    space.Set("space", devices[i]);
    space.Set("short_budget", baseline.short_budget());
    space.Set("long_budget", baseline.long_budget());
    Json results = Json::MakeArray();
    std::vector<std::pair<Config, Outcome>> prior;
    if (warm) {
      absl::StatusOr<Space> target = rs.ToSpace();
      if (!target.ok()) return Error(target.status());
      prior = PriorFrom(*warm, *target);
      if (prior.empty()) {
        return Failure{kExitInvalidInput, StrCat("--warm-from: ", warm->path(),
                                                 " shares no configurations with ", devices[i])};
      }
    }
    for (const std::string& name : strategies) {
      StrategyFactory factory = [&](const Space& sp, std::uint64_t s) {
        StrategyOptions so;
        so.prior = prior;
        so.seed = s;
        so.max_evaluations = baseline.long_budget();
        so.settings = parsed.at(name).options;
        return MakeStrategy(parsed.at(name).name, sp, so);
      };
      absl::StatusOr<StrategyScore> sc = EvaluateStrategy(rs, name, factory, options);
      if (!sc.ok()) return Error(sc.status());
      short_scores[name].push_back(sc->short_score);
      long_scores[name].push_back(sc->long_score);
      if (json) {
        Json r = Json::MakeObject();
        r.Set("strategy", name);
        r.Set("short_score", sc->short_score);
        r.Set("long_score", sc->long_score);
        Json f = Json::MakeArray();
        for (double v : sc->fraction_of_optimum) f.Push(v);
        r.Set("fraction_of_optimum_at_20_50_100_200", std::move(f));
        r.Set("ms_per_proposal", sc->time_per_proposal.count());
        results.Push(std::move(r));
        // Long runs: say how far they got.
        std::fprintf(stderr, "ktune evaluate: %s %s: %.3f / %.3f\n", label.c_str(), name.c_str(),
                     sc->short_score, sc->long_score);
      } else {
        std::printf("%-44s %-12s %7.3f %7s %6s %6s %6s %6s %9.3f\n",
                    StrCat(label.substr(0, 34), " (", baseline.short_budget(), "/",
                           baseline.long_budget(), ")")
                        .c_str(),
                    name.c_str(), sc->short_score, Figure(sc->long_score, 7).c_str(),
                    Figure(sc->fraction_of_optimum[0], 6).c_str(),
                    Figure(sc->fraction_of_optimum[1], 6).c_str(),
                    Figure(sc->fraction_of_optimum[2], 6).c_str(),
                    Figure(sc->fraction_of_optimum[3], 6).c_str(), sc->time_per_proposal.count());
        std::fflush(stdout);
      }
    }
    space.Set("results", std::move(results));
    spaces.Push(std::move(space));
  }
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  Json averages = Json::MakeArray();
  for (const std::string& name : strategies) {
    const double lo_short = *std::min_element(short_scores[name].begin(), short_scores[name].end());
    const double lo_long = *std::min_element(long_scores[name].begin(), long_scores[name].end());
    if (json) {
      Json a = Json::MakeObject();
      a.Set("strategy", name);
      a.Set("short_score", mean(short_scores[name]));
      a.Set("long_score", mean(long_scores[name]));
      a.Set("lowest_short_score", lo_short);
      a.Set("lowest_long_score", lo_long);
      averages.Push(std::move(a));
    } else {
      std::printf("%-44s %-12s %7.3f %7s   (lowest %.3f / %s; %d repeats, batch %d%s)\n",
                  StrCat("average over ", recordings.size(), " spaces").c_str(), name.c_str(),
                  mean(short_scores[name]), Figure(mean(long_scores[name]), 7).c_str(), lo_short,
                  Figure(lo_long, 0).c_str(), options.repeats, options.batch,
                  options.short_only ? ", short budget only" : "");
    }
  }
  if (json) {
    out.Set("spaces", std::move(spaces));
    out.Set("averages", std::move(averages));
    out.Set("repeats", options.repeats);
    out.Set("batch", options.batch);
    std::cout << out.Dump() << "\n";
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

const Command kEvaluate{&kEvaluateCommand, RunEvaluate, nullptr};

}  // namespace ktune::cli
