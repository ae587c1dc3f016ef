// ktune evaluate: scores search strategies on recorded spaces.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <thread>
#include "absl/status/status.h"
#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/common/convert.h"
#include "server/web/assets.h"
#include "tuner/base/file.h"
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
     {"ahead", "N",
      "keep N configurations asked ahead of the measurements, as a GPU's compile pipeline does "
      "(ktune tune on a CUDA device: 64); the strategy hears of each when it is measured "
      "(default: the batch)"},
     {"compile-workers", "N",
      "with --max-seconds: spend the recorded compilation times on N workers in parallel, "
      "overlapping the measurements, as ktune tune with N NVRTC workers does (default 0: each "
      "candidate's recorded time added one after another)"},
     {"seed", "N", "first seed (default 0)"},
     {"threads", "N",
      "run the repeats on N threads (default: one per core); the scores are the same for any "
      "N, the strategy's time per proposal (MS/PROP) is its own only with N no more than the "
      "free cores"},
     {"short-only", "",
      "stop each run at the short budget: the short score only, ten times faster"},
     {"warm-from", "sim:FILE",
      "warm-start every run from this recording of the same kernel (another GPU)"},
     {"max-seconds", "S",
      "compare under a time budget instead: each run stops once its candidates' recorded "
      "time (compilation included) reaches S seconds; prints each strategy's median, best and "
      "worst final time over the repeats and, seed by seed, which of two strategies ended "
      "faster"},
     {"html", "FILE",
      "also write the comparison as one HTML file: the scores and, per space, each "
      "strategy's mean best-so-far curve beside random search's"},
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

// The live line on a terminal: spaces and repeats done, time left (from
// the pace so far; every repeat of every strategy counted alike).
class EvaluateProgress {
 public:
  EvaluateProgress(std::size_t spaces, std::size_t strategies, int repeats)
      : tty_(isatty(STDERR_FILENO) == 1),
        spaces_(spaces),
        total_(static_cast<double>(spaces * strategies) * repeats),
        repeats_(repeats),
        start_(std::chrono::steady_clock::now()) {}

  void Repeat(std::size_t space, const std::string& strategy, int done) {
    ++units_;
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ || (done < repeats_ && now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double left = elapsed / units_ * (total_ - units_);
    std::fprintf(stderr, "\r\033[Kevaluate: space %zu/%zu, %s, repeat %d/%d; %s left", space + 1,
                 spaces_, strategy.c_str(), done, repeats_, Left(left).c_str());
    shown_ = true;
  }
  void Finish() {
    if (shown_) std::fprintf(stderr, "\r\033[K");
    shown_ = false;
  }

 private:
  static std::string Left(double s) {
    if (s < 60) return StrCat(std::lround(s), " s");
    if (s < 3600) return StrCat(static_cast<int>(s / 60), " min ", static_cast<int>(s) % 60, " s");
    return StrCat(static_cast<int>(s / 3600), " h ", static_cast<int>(s / 60) % 60, " min");
  }
  bool tty_;
  std::size_t spaces_;
  double total_;
  int repeats_;
  double units_ = 0;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

// A best-so-far curve for a chart: at most about 400 points, spaced evenly
// on a log scale of evaluations (the charts' axis), first and last kept.
Json CurvePoints(const std::vector<double>& curve) {
  Json out = Json::MakeArray();
  const auto n = static_cast<double>(curve.size());
  std::int64_t last = 0;
  for (int i = 0; i <= 400 && n > 0; ++i) {
    const auto b = static_cast<std::int64_t>(std::round(std::pow(n, i / 400.0)));
    if (b <= last) continue;
    last = b;
    Json p = Json::MakeArray();
    p.Push(b);
    p.Push(curve[static_cast<std::size_t>(b - 1)]);
    out.Push(std::move(p));
  }
  return out;
}

// A time curve, (seconds, ms) points, as [[s, ms], ...].
Json TimeCurveJson(const std::vector<std::pair<double, double>>& curve) {
  Json out = Json::MakeArray();
  for (const auto& [t, v] : curve) {
    Json p = Json::MakeArray();
    p.Push(t);
    p.Push(v);
    out.Push(std::move(p));
  }
  return out;
}

template <typename T>
Json ArrayJson(const std::vector<T>& values) {
  Json out = Json::MakeArray();
  for (const T& v : values) out.Push(v);
  return out;
}

// The comparison as ktune evaluate --html writes it: the dashboard's
// strategy page, its data inside.
class EvaluationPage {
 public:
  void AddSpace(const std::string& name, const ScoreBaseline& baseline) {
    Json space = Json::MakeObject();
    space.Set("name", name);
    space.Set("optimum", baseline.optimum());
    space.Set("shortBudget", baseline.short_budget());
    space.Set("longBudget", baseline.long_budget());
    space.Set("results", Json::MakeArray());
    spaces_.Push(std::move(space));
    baseline_ = &baseline;
  }
  void AddResult(const StrategyScore& sc) {
    Json& space = spaces_.as_array().back();
    if (space.Find("random") == nullptr) {
      std::vector<double> random;
      for (std::size_t b = 1; b <= sc.mean_curve.size(); ++b) {
        random.push_back(baseline_->RandomBest(static_cast<std::int64_t>(b)));
      }
      space.Set("random", CurvePoints(random));
    }
    Json r = Json::MakeObject();
    r.Set("strategy", sc.strategy);
    r.Set("shortScore", sc.short_score);
    r.Set("longScore", sc.long_score);  // NaN (short runs only) is written as null
    r.Set("curve", CurvePoints(sc.mean_curve));
    if (!sc.time_curve.empty()) {
      r.Set("timeCurve", TimeCurveJson(sc.time_curve));
      r.Set("finalBest", ArrayJson(sc.final_best));
    }
    for (auto& [key, value] : space.as_object()) {
      if (key == "results") {
        value.Push(std::move(r));
        break;
      }
    }
  }
  // `time_budget_s` > 0: the runs had that budget of recorded time.
  std::optional<Failure> Write(const std::string& path, const std::vector<std::string>& strategies,
                               Json averages, int repeats, double time_budget_s = 0) {
    Json data = Json::MakeObject();
    data.Set("kind", "evaluation");
    if (time_budget_s > 0) data.Set("timeBudget", time_budget_s);
    Json names = Json::MakeArray();
    for (const std::string& s : strategies) names.Push(s);
    data.Set("strategies", std::move(names));
    data.Set("spaces", std::move(spaces_));
    data.Set("averages", std::move(averages));
    data.Set("repeats", repeats);
    const std::string page = SelfContainedPage("ktune: strategies compared", data.Dump());
    if (absl::Status st = WriteFileAtomically(path, page); !st.ok()) {
      return Failure{kExitError, StrCat("--html: ", st.message())};
    }
    std::fprintf(stderr, "ktune evaluate: wrote %s\n", path.c_str());
    return std::nullopt;
  }

 private:
  Json spaces_ = Json::MakeArray();
  const ScoreBaseline* baseline_ = nullptr;
};

double MedianOf(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One space's comparison under a time budget: a row per strategy (median,
// best and worst final time over the repeats, the median fraction of the
// optimum and of evaluations), then each pair of strategies seed by seed.
void PrintTimedSpace(const std::string& label, const ScoreBaseline& baseline, double seconds,
                     const std::vector<StrategyScore>& scores) {
  std::printf("%s: optimum %.4f ms, %g s of recorded time per run\n", label.c_str(),
              baseline.optimum(), seconds);
  std::printf("  %-12s %11s %11s %11s %9s %9s %9s\n", "STRATEGY", "MEDIAN MS", "BEST MS",
              "WORST MS", "OPTIMUM/", "EVALS", "MS/PROP");
  for (const StrategyScore& sc : scores) {
    std::vector<double> evals(sc.final_evaluations.begin(), sc.final_evaluations.end());
    const double median = MedianOf(sc.final_best);
    std::printf("  %-12s %11.4f %11.4f %11.4f %9.3f %9.0f %9.3f\n", sc.strategy.c_str(), median,
                *std::min_element(sc.final_best.begin(), sc.final_best.end()),
                *std::max_element(sc.final_best.begin(), sc.final_best.end()),
                baseline.optimum() / median, MedianOf(evals), sc.time_per_proposal.count());
  }
  for (std::size_t a = 0; a < scores.size(); ++a) {
    for (std::size_t b = a + 1; b < scores.size(); ++b) {
      int faster = 0, slower = 0;
      for (std::size_t r = 0; r < scores[a].final_best.size(); ++r) {
        faster += scores[a].final_best[r] < scores[b].final_best[r];
        slower += scores[a].final_best[r] > scores[b].final_best[r];
      }
      const auto n = static_cast<int>(scores[a].final_best.size());
      std::printf("  %s against %s, seed by seed: faster in %d, slower in %d, equal in %d of %d\n",
                  scores[a].strategy.c_str(), scores[b].strategy.c_str(), faster, slower,
                  n - faster - slower, n);
    }
  }
  std::fflush(stdout);
}

// A time-budget result in --json: the per-repeat figures and the curve.
Json TimedResultJson(const StrategyScore& sc) {
  Json r = Json::MakeObject();
  r.Set("strategy", sc.strategy);
  r.Set("median_final_ms", MedianOf(sc.final_best));
  r.Set("final_best_ms", ArrayJson(sc.final_best));
  r.Set("final_evaluations", ArrayJson(sc.final_evaluations));
  r.Set("time_curve", TimeCurveJson(sc.time_curve));
  r.Set("ms_per_proposal", sc.time_per_proposal.count());
  return r;
}

// A score in --json: the scores, the fractions of the optimum, each
// repeat's best at the two budgets (seed order; the long one absent with
// --short-only), the strategy's time per proposal.
Json ScoreJson(const StrategyScore& sc) {
  Json r = Json::MakeObject();
  r.Set("strategy", sc.strategy);
  r.Set("short_score", sc.short_score);
  r.Set("long_score", sc.long_score);
  r.Set("fraction_of_optimum_at_20_50_100_200", ArrayJson(sc.fraction_of_optimum));
  r.Set("best_ms_at_short_budget", ArrayJson(sc.best_at_short));
  if (!sc.best_at_long.empty()) r.Set("best_ms_at_long_budget", ArrayJson(sc.best_at_long));
  r.Set("ms_per_proposal", sc.time_per_proposal.count());
  return r;
}

// A score's row in the table.
void PrintScoreRow(const std::string& label, const ScoreBaseline& baseline,
                   const StrategyScore& sc) {
  std::printf(
      "%-44s %-12s %7.3f %7s %6s %6s %6s %6s %9.3f\n",
      StrCat(label.substr(0, 34), " (", baseline.short_budget(), "/", baseline.long_budget(), ")")
          .c_str(),
      sc.strategy.c_str(), sc.short_score, Figure(sc.long_score, 7).c_str(),
      Figure(sc.fraction_of_optimum[0], 6).c_str(), Figure(sc.fraction_of_optimum[1], 6).c_str(),
      Figure(sc.fraction_of_optimum[2], 6).c_str(), Figure(sc.fraction_of_optimum[3], 6).c_str(),
      sc.time_per_proposal.count());
  std::fflush(stdout);
}

// What evaluate runs: the recordings, the strategies with their settings,
// the options, and a recording to warm-start from.
struct EvaluatePlan {
  std::vector<std::string> devices;
  std::vector<std::string> strategies;
  std::map<std::string, StrategyChoice> parsed;
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
  std::map<std::string, StrategyChoice>& parsed = plan.parsed;
  for (const std::string& s : strategies) {
    absl::StatusOr<StrategyChoice> flag = ParseStrategyFlag(s);
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
  absl::StatusOr<std::optional<std::int64_t>> ahead = args.GetInt("ahead", 1, 4096);
  if (!ahead.ok()) return InvalidInput(ahead.status());
  options.ahead = static_cast<int>(ahead->value_or(0));
  absl::StatusOr<std::optional<std::int64_t>> workers = args.GetInt("compile-workers", 1, 1024);
  if (!workers.ok()) return InvalidInput(workers.status());
  options.compile_workers = static_cast<int>(workers->value_or(0));
  options.seed = seed->value_or(0);
  absl::StatusOr<std::optional<std::int64_t>> threads = args.GetInt("threads", 1, 1024);
  if (!threads.ok()) return InvalidInput(threads.status());
  options.threads = static_cast<int>(
      threads->value_or(std::max<unsigned>(1, std::thread::hardware_concurrency())));
  options.short_only = args.Has("short-only");
  absl::StatusOr<std::optional<double>> seconds = args.GetDouble("max-seconds", 1e-3);
  if (!seconds.ok()) return InvalidInput(seconds.status());
  if (seconds->has_value()) {
    if (options.short_only) {
      return Failure{kExitInvalidInput, "--max-seconds and --short-only: give one budget"};
    }
    options.max_recorded_time = Millis(**seconds * 1e3);
  } else if (options.compile_workers > 0) {
    return Failure{kExitInvalidInput,
                   "--compile-workers: give --max-seconds too (it changes what time is spent, "
                   "not which configurations are measured)"};
  }

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
      so.settings = flag.settings;
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

// The score comparison's last lines: each strategy's average over the
// spaces (and its lowest), in the table, in --json and on the --html page.
std::optional<Failure> ReportAverages(const Args& args, const EvaluatePlan& plan,
                                      std::map<std::string, std::vector<double>>& short_scores,
                                      std::map<std::string, std::vector<double>>& long_scores,
                                      EvaluationPage& page, Json spaces) {
  const std::vector<std::string>& strategies = plan.strategies;
  const EvaluateOptions& options = plan.options;
  const bool json = args.Has("json");
  Json out = Json::MakeObject();
  auto mean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  Json averages = Json::MakeArray();
  Json page_averages = Json::MakeArray();
  for (const std::string& name : strategies) {
    Json pa = Json::MakeObject();
    pa.Set("strategy", name);
    pa.Set("shortScore", mean(short_scores[name]));
    pa.Set("longScore", mean(long_scores[name]));
    page_averages.Push(std::move(pa));
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
                  StrCat("average over ", plan.recordings.size(), " spaces").c_str(), name.c_str(),
                  mean(short_scores[name]), Figure(mean(long_scores[name]), 7).c_str(), lo_short,
                  Figure(lo_long, 0).c_str(), options.repeats, options.batch,
                  options.short_only ? ", short budget only" : "");
    }
  }
  if (auto html = args.Get("html")) {
    if (auto f = page.Write(*html, strategies, std::move(page_averages), options.repeats)) return f;
  }
  if (json) {
    out.Set("spaces", std::move(spaces));
    out.Set("averages", std::move(averages));
    out.Set("repeats", options.repeats);
    out.Set("batch", options.batch);
    out.Set("ahead", std::max(options.batch, options.ahead));
    std::cout << out.Dump() << "\n";
  }
  return std::nullopt;
}

std::optional<Failure> RunEvaluate(const Args& args, int* exit_code) {
  EvaluatePlan plan;
  if (auto f = PlanEvaluate(args, plan)) return f;
  const std::vector<std::string>& devices = plan.devices;
  const std::vector<std::string>& strategies = plan.strategies;
  const std::map<std::string, StrategyChoice>& parsed = plan.parsed;
  const EvaluateOptions& options = plan.options;
  const std::vector<RecordedSpace>& recordings = plan.recordings;
  const std::optional<RecordedSpace>& warm = plan.warm;
  Json out = Json::MakeObject();
  Json spaces = Json::MakeArray();
  std::map<std::string, std::vector<double>> short_scores, long_scores;
  const bool json = args.Has("json");
  EvaluateProgress progress(recordings.size(), strategies.size(), options.repeats);
  EvaluationPage page;
  const bool timed = options.max_recorded_time.count() > 0;
  const double seconds = options.max_recorded_time.count() / 1e3;
  if (!json && !timed) {
    std::printf("%-44s %-12s %7s %7s %6s %6s %6s %6s %9s\n", "SPACE (short/long budget)",
                "STRATEGY", "SHORT", "LONG", "@20", "@50", "@100", "@200", "MS/PROP");
  }
  // Each space's baseline, name and warm start, then every (space,
  // strategy) pair as one task on one queue of threads.
  struct SpacePlan {
    ScoreBaseline baseline;
    std::string label;
    std::vector<std::pair<Config, Outcome>> prior;
  };
  std::vector<SpacePlan> plans;
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    const RecordedSpace& rs = recordings[i];
    SpacePlan sp{BaselineOf(rs), devices[i].substr(devices[i].find_last_of('/') + 1), {}};
    if (warm) {
      absl::StatusOr<Space> target = rs.ToSpace();
      if (!target.ok()) return Error(target.status());
      sp.prior = PriorFrom(*warm, *target);
      if (sp.prior.empty()) {
        return Failure{kExitInvalidInput, StrCat("--warm-from: ", warm->path(),
                                                 " shares no configurations with ", devices[i])};
      }
    }
    plans.push_back(std::move(sp));
  }
  std::vector<EvaluationTask> tasks;
  for (std::size_t i = 0; i < recordings.size(); ++i) {
    for (const std::string& name : strategies) {
      const SpacePlan& sp = plans[i];
      const StrategyChoice& choice = parsed.at(name);
      EvaluationTask task{&recordings[i], name,
                          [&sp, &choice, timed](const Space& space, std::uint64_t s) {
                            StrategyOptions so;
                            so.prior = sp.prior;
                            so.seed = s;
                            if (timed) {
                              so.time_limited = true;
                            } else {
                              so.max_evaluations = sp.baseline.long_budget();
                            }
                            so.settings = choice.settings;
                            return MakeStrategy(choice.name, space, so);
                          },
                          options};
      task.options.on_repeat = [&progress, i, name](int done) { progress.Repeat(i, name, done); };
      tasks.push_back(std::move(task));
    }
  }
  // Handed over in order: each space's strategies, then the next space.
  Json space, results;
  std::vector<StrategyScore> timed_scores;
  auto done = [&](std::size_t k, StrategyScore sc) {
    progress.Finish();
    const std::size_t i = k / strategies.size();
    const SpacePlan& sp = plans[i];
    const ScoreBaseline& baseline = sp.baseline;
    const std::string& label = sp.label;
    const std::string name = sc.strategy;
    if (k % strategies.size() == 0) {
      page.AddSpace(label, baseline);
      space = Json::MakeObject();
      space.Set("space", devices[i]);
      space.Set("short_budget", baseline.short_budget());
      space.Set("long_budget", baseline.long_budget());
      results = Json::MakeArray();
      timed_scores.clear();
    }
    page.AddResult(sc);
    if (timed) {
      if (json) results.Push(TimedResultJson(sc));
      timed_scores.push_back(std::move(sc));
    } else {
      short_scores[name].push_back(sc.short_score);
      long_scores[name].push_back(sc.long_score);
      if (json) {
        results.Push(ScoreJson(sc));
        // Long runs: say how far they got.
        std::fprintf(stderr, "ktune evaluate: %s %s: %.3f / %.3f\n", label.c_str(), name.c_str(),
                     sc.short_score, sc.long_score);
      } else {
        PrintScoreRow(label, baseline, sc);
      }
    }
    if (k % strategies.size() == strategies.size() - 1) {
      if (timed && !json) PrintTimedSpace(label, baseline, seconds, timed_scores);
      space.Set("results", std::move(results));
      spaces.Push(std::move(space));
    }
  };
  const absl::Status ran = EvaluateMany(tasks, options.threads, done);
  progress.Finish();
  if (!ran.ok()) return Error(ran);
  if (timed) {
    if (auto html = args.Get("html")) {
      if (auto f = page.Write(*html, strategies, Json::MakeArray(), options.repeats, seconds)) {
        return f;
      }
    }
    if (json) {
      out.Set("spaces", std::move(spaces));
      out.Set("repeats", options.repeats);
      out.Set("max_seconds", seconds);
      out.Set("batch", options.batch);
      out.Set("ahead", std::max(options.batch, options.ahead));
      out.Set("compile_workers", options.compile_workers);
      std::cout << out.Dump() << "\n";
    }
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (auto f = ReportAverages(args, plan, short_scores, long_scores, page, std::move(spaces))) {
    return f;
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

const Command kEvaluate{&kEvaluateCommand, RunEvaluate, nullptr};

}  // namespace ktune::cli
