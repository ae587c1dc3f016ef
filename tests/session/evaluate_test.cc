#include "tuner/session/evaluate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "strategies/random_search.h"
#include "strategies/registry.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

// A recording of 30 x 12 configurations: time (a - 3)^2 + b + 1, except
// that two configurations failed to compile. (Large enough that the long
// budget does not reach the end of the space.)
// With `cost_ms`, each configuration also took that long to compile and
// as long again to benchmark.
RecordedSpace SmallRecording(int cost_ms = 0) {
  std::string cache;
  std::string a_values, b_values;
  for (int a = 1; a <= 30; ++a) a_values += StrCat(a == 1 ? "" : ", ", a);
  for (int b = 1; b <= 12; ++b) b_values += StrCat(b == 1 ? "" : ", ", b);
  for (int a = 1; a <= 30; ++a) {
    for (int b = 1; b <= 12; ++b) {
      const bool failed = (a == 30 && b >= 11);
      if (!cache.empty()) cache += ",\n";
      cache += StrCat(
          "\"", a, ",", b, "\": {\"a\": ", a, ", \"b\": ", b, ", \"time\": ",
          failed ? std::string("\"CompilationFailedConfig\"") : StrCat((a - 3) * (a - 3) + b + 1),
          cost_ms > 0 ? StrCat(", \"compile_time\": ", cost_ms, ", \"benchmark_time\": ", cost_ms)
                      : std::string(),
          "}");
    }
  }
  const std::string text =
      StrCat(R"({"device_name": "Test GPU", "kernel_name": "k", "problem_size": [64],
"tune_params_keys": ["a", "b"], "tune_params": {"a": [)",
             a_values, R"(], "b": [)", b_values, R"(]}, "cache": {)", cache, "}}");
  absl::StatusOr<RecordedSpace> rs = RecordedSpace::Parse("small.json", text);
  EXPECT_TRUE(rs.ok()) << rs.status();
  return *std::move(rs);
}

// Proposes the recording's configurations in a fixed order.
class Scripted final : public Strategy {
 public:
  explicit Scripted(std::vector<Config> order) : order_(std::move(order)) {}
  std::vector<Config> Ask(std::size_t n) override {
    std::vector<Config> out;
    while (out.size() < n && next_ < order_.size()) out.push_back(order_[next_++]);
    return out;
  }
  void Tell(const Config&, const Outcome&) override {}

 private:
  std::vector<Config> order_;
  std::size_t next_ = 0;
};

// The configurations sorted by recorded time, fastest first (failures last).
std::vector<Config> FastestFirst(const RecordedSpace& rs) {
  std::vector<const RecordedEntry*> entries;
  for (const RecordedEntry& e : rs.entries()) entries.push_back(&e);
  auto time = [](const RecordedEntry* e) {
    return e->measurement.ok() ? e->measurement.time.count() : 1e300;
  };
  std::stable_sort(
      entries.begin(), entries.end(),
      [&](const RecordedEntry* x, const RecordedEntry* y) { return time(x) < time(y); });
  std::vector<Config> out;
  out.reserve(entries.size());
  for (const RecordedEntry* e : entries) out.push_back(e->config);
  return out;
}

TEST(ScoreBaselineTest, BudgetsFollowTheDefinition) {
  // 358 valid of 360: k = ceil(0.04 * 358) = 15, B = ceil(361 / 16) = 23.
  const ScoreBaseline baseline = BaselineOf(SmallRecording());
  EXPECT_EQ(baseline.short_budget(), 23);
  EXPECT_EQ(baseline.long_budget(), 230);
  EXPECT_DOUBLE_EQ(baseline.optimum(), 2.0);
  EXPECT_DOUBLE_EQ(baseline.worst(), 27 * 27 + 10 + 1);
}

TEST(ScoreBaselineTest, RandomBestIsTheExactExpectationOverAllDraws) {
  // Times 1..5 and two failures: every subset of size b, counted out.
  const std::vector<double> valid = {4, 1, 5, 2, 3};
  const int total = 7;
  const ScoreBaseline baseline(valid, total);
  for (int b = 1; b <= total; ++b) {
    double sum = 0;
    int subsets = 0;
    for (unsigned mask = 0; mask < (1u << total); ++mask) {
      if (__builtin_popcount(mask) != b) continue;
      double best = 5;  // no valid one drawn: the worst valid time
      for (int i = 0; i < 5; ++i) {
        if (mask & (1u << i)) best = std::min(best, valid[static_cast<std::size_t>(i)]);
      }
      sum += best;
      ++subsets;
    }
    EXPECT_NEAR(baseline.RandomBest(b), sum / subsets, 1e-9) << "b = " << b;
  }
  EXPECT_DOUBLE_EQ(baseline.RandomBest(100), 1.0);
}

TEST(EvaluateTest, RandomSearchScoresAboutZeroAndTheOracleOne) {
  const RecordedSpace rs = SmallRecording();
  EvaluateOptions options;
  options.repeats = 3000;
  absl::StatusOr<StrategyScore> random = EvaluateStrategy(
      rs, "random",
      [](const Space& space, std::uint64_t seed) -> absl::StatusOr<std::unique_ptr<Strategy>> {
        return std::make_unique<RandomSearch>(space, seed);
      },
      options);
  ASSERT_TRUE(random.ok()) << random.status();
  EXPECT_NEAR(random->short_score, 0.0, 0.05);
  EXPECT_NEAR(random->long_score, 0.0, 0.05);

  options.repeats = 1;
  auto scripted = [&](const std::vector<Config>& order) {
    return EvaluateStrategy(
        rs, "scripted",
        [order](const Space&, std::uint64_t) -> absl::StatusOr<std::unique_ptr<Strategy>> {
          return std::make_unique<Scripted>(order);
        },
        options);
  };
  std::vector<Config> order = FastestFirst(rs);
  absl::StatusOr<StrategyScore> oracle = scripted(order);
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  EXPECT_DOUBLE_EQ(oracle->short_score, 1.0);
  EXPECT_DOUBLE_EQ(oracle->long_score, 1.0);
  EXPECT_EQ(oracle->best_at_short, std::vector<double>{2.0});
  EXPECT_EQ(oracle->best_at_long, std::vector<double>{2.0});
  std::reverse(order.begin(), order.end());
  absl::StatusOr<StrategyScore> worst = scripted(order);
  ASSERT_TRUE(worst.ok()) << worst.status();
  EXPECT_LT(worst->short_score, -1.0);
  // Slowest first: the two failures, then the 21 slowest of a = 30 and 29
  // (a = 30: 27^2 + b + 1 for b = 10..1; a = 29: 26^2 + b + 1 for b = 12..2,
  // the 23rd 26^2 + 2 + 1); after 230, a = 30 down to 12 and a = 11's
  // b = 12 and 11 (8^2 + 11 + 1).
  EXPECT_EQ(worst->best_at_short, std::vector<double>{26 * 26 + 3});
  EXPECT_EQ(worst->best_at_long, std::vector<double>{8 * 8 + 12});
}

TEST(EvaluateTest, ShortOnlyGivesTheFullRunsShortScore) {
  const RecordedSpace rs = SmallRecording();
  StrategyFactory factory = [](const Space& space,
                               std::uint64_t seed) -> absl::StatusOr<std::unique_ptr<Strategy>> {
    return std::make_unique<RandomSearch>(space, seed);
  };
  EvaluateOptions options;
  options.repeats = 20;
  options.seed = 5;
  absl::StatusOr<StrategyScore> full = EvaluateStrategy(rs, "random", factory, options);
  options.short_only = true;
  absl::StatusOr<StrategyScore> short_only = EvaluateStrategy(rs, "random", factory, options);
  ASSERT_TRUE(full.ok() && short_only.ok());
  EXPECT_DOUBLE_EQ(short_only->short_score, full->short_score);
  EXPECT_TRUE(std::isnan(short_only->long_score));
  EXPECT_FALSE(std::isnan(full->long_score));
  EXPECT_EQ(short_only->mean_curve.size(), 23u);
  // Marks past the short budget are not reached: 20 is, 50 is not.
  EXPECT_FALSE(std::isnan(short_only->fraction_of_optimum[0]));
  EXPECT_DOUBLE_EQ(short_only->fraction_of_optimum[0], full->fraction_of_optimum[0]);
  EXPECT_TRUE(std::isnan(short_only->fraction_of_optimum[1]));
}

// Repeats on several threads score exactly as on one: each repeat has its
// own strategy and seed, and the results are added up in seed order.
TEST(EvaluateTest, ThreadsScoreExactlyAsOne) {
  const RecordedSpace rs = SmallRecording(/*cost_ms=*/20);
  for (const char* name : {"genetic", "auto"}) {
    StrategyFactory factory = [name](const Space& space, std::uint64_t seed) {
      StrategyOptions so;
      so.seed = seed;
      so.max_evaluations = 230;
      return MakeStrategy(name, space, so);
    };
    for (const bool timed : {false, true}) {
      EvaluateOptions options;
      options.repeats = 9;
      options.seed = 11;
      options.short_only = std::string(name) == "auto";  // bayes is slow under sanitizers
      if (timed) {
        options.short_only = false;
        options.max_recorded_time = Millis(600);
      }
      std::vector<StrategyScore> scores;
      for (const int threads : {1, 4}) {
        options.threads = threads;
        std::vector<int> reported;
        options.on_repeat = [&](int done) { reported.push_back(done); };
        absl::StatusOr<StrategyScore> sc = EvaluateStrategy(rs, name, factory, options);
        ASSERT_TRUE(sc.ok()) << sc.status();
        // Every repeat reported once, counting up.
        EXPECT_EQ(reported, std::vector<int>({1, 2, 3, 4, 5, 6, 7, 8, 9})) << name;
        scores.push_back(*std::move(sc));
      }
      const StrategyScore& one = scores[0];
      const StrategyScore& four = scores[1];
      const std::string what = StrCat(name, timed ? " timed" : "");
      EXPECT_EQ(one.mean_curve, four.mean_curve) << what;
      EXPECT_EQ(one.final_best, four.final_best) << what;
      EXPECT_EQ(one.final_evaluations, four.final_evaluations) << what;
      EXPECT_EQ(one.time_curve, four.time_curve) << what;
      EXPECT_FALSE(one.mean_curve.empty()) << what;
      EXPECT_EQ(one.final_best.size(), timed ? 9u : 0u) << what;
      if (!timed) {
        EXPECT_EQ(one.short_score, four.short_score) << what;
        EXPECT_EQ(one.fraction_of_optimum[0], four.fraction_of_optimum[0]) << what;
      }
    }
  }
}

// Several comparisons on one queue of threads: each scores as it does
// alone, they are handed over in order, and a failing one stops the rest.
TEST(EvaluateTest, ManyTasksOnOneQueueScoreAsEachAlone) {
  const RecordedSpace small = SmallRecording();
  const RecordedSpace costly = SmallRecording(/*cost_ms=*/20);
  auto named = [](const std::string& name) -> StrategyFactory {
    return [name](const Space& space, std::uint64_t seed) {
      StrategyOptions so;
      so.seed = seed;
      so.max_evaluations = 230;
      return MakeStrategy(name, space, so);
    };
  };
  std::vector<EvaluationTask> tasks;
  for (const RecordedSpace* rs : {&small, &costly}) {
    for (const char* name : {"random", "genetic", "local"}) {
      EvaluationTask t{rs, name, named(name), EvaluateOptions{}};
      t.options.repeats = 5 + static_cast<int>(tasks.size());
      t.options.seed = 3;
      if (rs == &costly) t.options.max_recorded_time = Millis(500);
      tasks.push_back(std::move(t));
    }
  }
  std::vector<std::size_t> order;
  std::vector<StrategyScore> scores;
  ASSERT_TRUE(EvaluateMany(tasks, 4, [&](std::size_t i, StrategyScore sc) {
                order.push_back(i);
                scores.push_back(std::move(sc));
              }).ok());
  EXPECT_EQ(order, std::vector<std::size_t>({0, 1, 2, 3, 4, 5}));
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    absl::StatusOr<StrategyScore> alone =
        EvaluateStrategy(*tasks[i].recording, tasks[i].name, tasks[i].factory, tasks[i].options);
    ASSERT_TRUE(alone.ok()) << alone.status();
    EXPECT_EQ(scores[i].strategy, tasks[i].name);
    EXPECT_EQ(scores[i].repeats, tasks[i].options.repeats);
    EXPECT_EQ(scores[i].mean_curve, alone->mean_curve) << i;
    EXPECT_EQ(scores[i].final_best, alone->final_best) << i;
    EXPECT_EQ(scores[i].time_curve, alone->time_curve) << i;
  }

  // The fourth task's strategy cannot be made for seed 3 + 2: the first
  // three are handed over, the failure is returned.
  tasks[3].factory = [](const Space& space,
                        std::uint64_t seed) -> absl::StatusOr<std::unique_ptr<Strategy>> {
    if (seed == 5) return absl::InvalidArgumentError("no strategy for seed 5");
    return std::make_unique<RandomSearch>(space, seed);
  };
  order.clear();
  const absl::Status failed =
      EvaluateMany(tasks, 4, [&](std::size_t i, const StrategyScore&) { order.push_back(i); });
  EXPECT_EQ(failed.message(), "no strategy for seed 5");
  EXPECT_EQ(order, std::vector<std::size_t>({0, 1, 2}));
}

// Under a time budget each run stops before the candidate after its
// recorded time ran out (as a job's max_time does), whatever the
// evaluation budgets; the curve against time is each run's best so far,
// averaged.
TEST(EvaluateTest, ATimeBudgetStopsEachRunWhenItsRecordedTimeRunsOut) {
  const RecordedSpace rs = SmallRecording(/*cost_ms=*/75);  // 150 ms a candidate
  std::vector<Config> slowest_first = FastestFirst(rs);
  std::reverse(slowest_first.begin(), slowest_first.end());
  StrategyFactory factory = [&](const Space&,
                                std::uint64_t) -> absl::StatusOr<std::unique_ptr<Strategy>> {
    return std::make_unique<Scripted>(slowest_first);
  };
  EvaluateOptions options;
  options.repeats = 3;
  options.max_recorded_time = Millis(1000);
  absl::StatusOr<StrategyScore> sc = EvaluateStrategy(rs, "scripted", factory, options);
  ASSERT_TRUE(sc.ok()) << sc.status();
  // 900 ms spent after six candidates, so a seventh starts and ends at 1050.
  ASSERT_EQ(sc->final_evaluations, std::vector<std::int64_t>(3, 7));
  // The two failures come first (slowest first), then the five slowest.
  double best = 1e300;
  for (std::size_t i = 0; i < 7; ++i) {
    for (const RecordedEntry& e : rs.entries()) {
      if (e.config == slowest_first[i] && e.measurement.ok()) {
        best = std::min(best, e.measurement.time.count());
      }
    }
  }
  EXPECT_EQ(sc->final_best, std::vector<double>(3, best));
  EXPECT_TRUE(std::isnan(sc->short_score));
  EXPECT_TRUE(std::isnan(sc->long_score));
  ASSERT_EQ(sc->time_curve.size(), 201u);
  EXPECT_DOUBLE_EQ(sc->time_curve.front().first, 0.0);
  EXPECT_DOUBLE_EQ(sc->time_curve.back().first, 1.05);  // the seventh ends at 1050 ms
  EXPECT_DOUBLE_EQ(sc->time_curve.back().second, best);
  // Nothing is known before the first successful candidate ends (at 450 ms:
  // two failures first): the worst valid time until then.
  const double worst = BaselineOf(rs).worst();
  for (const auto& [t, v] : sc->time_curve) {
    if (t < 0.45) {
      EXPECT_DOUBLE_EQ(v, worst) << t;
    }
  }
  for (std::size_t k = 1; k < sc->time_curve.size(); ++k) {
    EXPECT_LE(sc->time_curve[k].second, sc->time_curve[k - 1].second);
  }
  EXPECT_LT(sc->time_curve.back().second, worst);
}

// A compile pool: the compilations of the candidates asked ahead run side
// by side, each measurement waits for its own; asked ahead without a pool,
// the GPU still measures while the next one compiles. Without either, the
// recorded times add up (the test above).
TEST(EvaluateTest, CompileWorkersOverlapTheCompilationsOfCandidatesAskedAhead) {
  const RecordedSpace rs = SmallRecording(/*cost_ms=*/75);  // compile 75 ms, benchmark 75 ms
  StrategyFactory factory = [&](const Space&,
                                std::uint64_t) -> absl::StatusOr<std::unique_ptr<Strategy>> {
    return std::make_unique<Scripted>(FastestFirst(rs));
  };
  auto final_evaluations = [&](int ahead, int workers) {
    EvaluateOptions options;
    options.repeats = 1;
    options.max_recorded_time = Millis(400);
    options.ahead = ahead;
    options.compile_workers = workers;
    absl::StatusOr<StrategyScore> sc = EvaluateStrategy(rs, "scripted", factory, options);
    EXPECT_TRUE(sc.ok()) << sc.status();
    return sc.ok() ? sc->final_evaluations.front() : -1;
  };
  // One after another: candidates begin at 0, 150, 300 ms.
  EXPECT_EQ(final_evaluations(0, 0), 3);
  EXPECT_EQ(final_evaluations(4, 0), 3);  // asking ahead alone changes no time
  // Four asked ahead, four workers: all four compiled at 75 ms, measured
  // by 150, 225, 300, 375; the fifth (asked at 150, compiled at 225)
  // begins at 375 < 400 and ends at 450.
  EXPECT_EQ(final_evaluations(4, 4), 5);
  // Four ahead, one worker: compiled at 75, 150, 225, 300; measured by 150,
  // 225, 300, 375; the fifth (asked at 150, compiled at 375) begins at 375.
  EXPECT_EQ(final_evaluations(4, 1), 5);
  // Nothing ahead, one worker: the compilation waits for the ask, as
  // without a pool.
  EXPECT_EQ(final_evaluations(0, 1), 3);
}

// Asked ahead, a strategy proposes before hearing of what it proposed
// earlier: with 3 ahead, the first three are asked before any is told.
TEST(EvaluateTest, AheadAsksBeforeTelling) {
  const RecordedSpace rs = SmallRecording();
  class Logging final : public Strategy {
   public:
    Logging(std::vector<Config> order, std::vector<std::string>* log)
        : order_(std::move(order)), log_(log) {}
    std::vector<Config> Ask(std::size_t n) override {
      std::vector<Config> out;
      while (out.size() < n && next_ < order_.size()) out.push_back(order_[next_++]);
      log_->push_back(StrCat("ask ", out.size()));
      return out;
    }
    void Tell(const Config&, const Outcome&) override { log_->push_back("tell"); }

   private:
    std::vector<Config> order_;
    std::size_t next_ = 0;
    std::vector<std::string>* log_;
  };
  std::vector<std::string> log;
  StrategyFactory factory = [&](const Space&,
                                std::uint64_t) -> absl::StatusOr<std::unique_ptr<Strategy>> {
    return std::make_unique<Logging>(FastestFirst(rs), &log);
  };
  EvaluateOptions options;
  options.repeats = 1;
  options.short_only = true;
  options.ahead = 3;
  ASSERT_TRUE(EvaluateStrategy(rs, "logging", factory, options).ok());
  ASSERT_GE(log.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(log.begin(), log.begin() + 6),
            (std::vector<std::string>{"ask 1", "ask 1", "ask 1", "tell", "ask 1", "tell"}));
}

}  // namespace
}  // namespace ktune
