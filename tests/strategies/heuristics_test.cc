// Properties every strategy must have, and each one's behaviour on small
// synthetic spaces.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "strategies/common.h"
#include "strategies/encoding.h"
#include "strategies/gp.h"
#include "strategies/registry.h"
#include "tests/testing/parameters.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using testing::Range;

std::int64_t At(const Space& s, const Config& c, std::size_t i) {
  return std::get<std::int64_t>(s.ValueOf(c, i));
}

using LossFn = std::function<Outcome(const Space&, const Config&)>;
using Settings = std::map<std::string, std::string>;

struct RunResult {
  std::vector<std::string> keys;  // in proposal order
  double best = std::numeric_limits<double>::infinity();
  int evaluations_to_best = 0;
};

// Drives `strategy` for up to `budget` evaluations, asking `batch` at a time,
// checking the ask/tell contract as it goes.
RunResult Drive(const std::string& name, const Space& space, const LossFn& loss, int budget,
                std::size_t batch, std::uint64_t seed, const Settings& settings = {}) {
  StrategyOptions o;
  o.seed = seed;
  o.max_evaluations = budget;
  o.settings = settings;
  auto strategy = MakeStrategy(name, space, o);
  EXPECT_TRUE(strategy.ok()) << strategy.status();
  RunResult run;
  std::set<std::string> seen;
  while (static_cast<int>(run.keys.size()) < budget) {
    const std::size_t n = std::min<std::size_t>(batch, budget - run.keys.size());
    const std::vector<Config> asked = (*strategy)->Ask(n);
    EXPECT_LE(asked.size(), n) << name;
    if (asked.empty()) break;
    for (const Config& c : asked) {
      const std::string key = space.Key(c);
      EXPECT_TRUE(space.IsValid(c)) << name << " proposed invalid " << key;
      EXPECT_TRUE(seen.insert(key).second) << name << " proposed " << key << " twice";
      run.keys.push_back(key);
      const Outcome out = loss(space, c);
      if (out.ok() && out.loss < run.best) {
        run.best = out.loss;
        run.evaluations_to_best = static_cast<int>(run.keys.size());
      }
      (*strategy)->Tell(c, out);
    }
  }
  return run;
}

Outcome Ok(double loss) {
  Outcome o;
  o.loss = loss;
  return o;
}

Outcome Failed() {
  Outcome o;
  o.status = CandidateStatus::kRuntimeFault;
  return o;
}

const std::vector<std::string>& Searchers() {
  static const std::vector<std::string> names = {"annealing", "auto",  "bayes",
                                                 "genetic",   "local", "random"};
  return names;
}

// A bowl: 1 + (a - 13)^2 + (b - 7)^2 over a, b in 0..19 with a + b <= 35.
Space Bowl() { return *Space::Product({Range("a", 0, 19), Range("b", 0, 19)}, {"a + b <= 35"}); }
Outcome BowlLoss(const Space& s, const Config& c) {
  const double a = static_cast<double>(At(s, c, 0)), b = static_cast<double>(At(s, c, 1));
  return Ok(1 + (a - 13) * (a - 13) + (b - 7) * (b - 7));
}

TEST(StrategiesTest, FindTheOptimumOfAConvexFunctionQuickly) {
  // Random search needs about 190 of the 394 configurations on average to
  // hit the optimum; these must do much better, for each of five seeds.
  const Space space = Bowl();
  const std::map<std::string, int> within = {
      {"bayes", 40}, {"auto", 40}, {"local", 60}, {"annealing", 100}, {"genetic", 120}};
  for (const auto& [name, limit] : within) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const RunResult run = Drive(name, space, BowlLoss, limit, 1, seed);
      EXPECT_EQ(run.best, 1.0) << name << " seed " << seed << " best " << run.best;
    }
  }
}

TEST(StrategiesTest, AMaximisedObjectiveIsSearchedAsWellAsATime) {
  // A maximised objective reaches the strategies negated (GB/s as -GB/s):
  // every loss negative. The bowl as a throughput, -1000 / bowl, and as a
  // score whose values take both signs, bowl - 50: the same optimum within
  // the same budgets as the time. (The model-based strategies once took a
  // negative loss for a failure and searched blind.)
  const Space space = Bowl();
  const LossFn throughput = [](const Space& s, const Config& c) {
    return Ok(-1000 / BowlLoss(s, c).loss);
  };
  const LossFn both_signs = [](const Space& s, const Config& c) {
    return Ok(BowlLoss(s, c).loss - 50);
  };
  const std::map<std::string, int> within = {
      {"bayes", 40}, {"auto", 40}, {"local", 60}, {"annealing", 100}, {"genetic", 120}};
  for (const auto& [name, limit] : within) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const RunResult maximised = Drive(name, space, throughput, limit, 1, seed);
      EXPECT_EQ(maximised.best, -1000.0) << name << " seed " << seed << " best " << maximised.best;
      const RunResult mixed = Drive(name, space, both_signs, limit, 1, seed);
      EXPECT_EQ(mixed.best, -49.0) << name << " seed " << seed << " best " << mixed.best;
    }
  }
}

TEST(StrategiesTest, LossScaleIsALogarithmInTheLossesOrder) {
  LossScale times;
  times.Note(2.0);
  times.Note(8.0);
  EXPECT_DOUBLE_EQ(times(8.0) - times(2.0), std::log(4.0));
  LossScale throughputs;  // -GB/s
  throughputs.Note(-400.0);
  throughputs.Note(-100.0);
  EXPECT_LT(throughputs(-400.0), throughputs(-100.0));
  EXPECT_DOUBLE_EQ(throughputs(-100.0) - throughputs(-400.0), std::log(4.0));
  // Both signs: no logarithm keeps the order, the losses are compared as
  // they are, from then on.
  throughputs.Note(3.0);
  EXPECT_DOUBLE_EQ(throughputs(3.0), 3.0);
  throughputs.Note(-1.0);
  EXPECT_DOUBLE_EQ(throughputs(-400.0), -400.0);
  LossScale zero;
  zero.Note(0.0);
  EXPECT_DOUBLE_EQ(zero(-2.0), -2.0);
  LossScale zero_later;
  zero_later.Note(5.0);
  zero_later.Note(0.0);
  EXPECT_DOUBLE_EQ(zero_later(5.0), 5.0);
}

TEST(StrategiesTest, LearnWhereMostConfigurationsFail) {
  // 85% of the space fails; the optimum is among the rest.
  const Space space = *Space::Product({Range("a", 0, 29), Range("b", 0, 29)}, {});
  auto loss = [](const Space& s, const Config& c) {
    const std::int64_t a = At(s, c, 0), b = At(s, c, 1);
    if (a < 15 && b < 12) return Ok(1 + static_cast<double>((a - 9) * (a - 9) + (b - 4) * (b - 4)));
    return Failed();
  };
  for (const std::string& name : Searchers()) {
    const RunResult run = Drive(name, space, loss, 150, 4, 7);
    EXPECT_EQ(run.keys.size(), 150u) << name;  // never gives up
    EXPECT_LT(run.best, 10.0) << name;
  }
  // The model-based strategy finds the optimum despite the failures, and
  // meets fewer of them than the 80% that random search meets.
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    int failures = 0;
    const RunResult run = Drive("bayes", space, loss, 60, 1, seed);
    for (const std::string& key : run.keys) {
      failures += loss(space, *space.ParseKey(key)).ok() ? 0 : 1;
    }
    EXPECT_EQ(run.best, 1.0) << "seed " << seed;
    EXPECT_LT(failures, 42) << "seed " << seed << ": " << failures << " failures of 60";
  }
}

// The fastest configurations border a region that fails (as large tiles
// with large blocks run out of resources): failures taught to the time
// model as slow make the fast side look slow; the success model alone
// keeps the search near the boundary, where the optimum is.
TEST(StrategiesTest, FailuresBesideTheOptimumDoNotHideIt) {
  const Space space = *Space::Product({Range("tile", 1, 30), Range("block", 1, 30)}, {});
  auto loss = [](const Space& s, const Config& c) {
    const std::int64_t tile = At(s, c, 0), block = At(s, c, 1);
    if (tile * block > 200) return Failed();
    return Ok(10.0 / static_cast<double>(tile) + 0.05 * std::abs(static_cast<double>(block - 6)));
  };
  double sum[2] = {0, 0};
  constexpr int kSeeds = 100;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    for (int with = 0; with < 2; ++with) {
      const RunResult run =
          Drive("bayes", space, loss, 15, 1, seed, {{"failures_in_objective", with ? "1" : "0"}});
      sum[with] += run.best;
    }
  }
  std::printf("mean best after 15: %.3f without failures in the time model, %.3f with\n",
              sum[0] / kSeeds, sum[1] / kSeeds);
  EXPECT_LT(sum[0], sum[1]);
}

// Polishing: once `polish` evaluations bring no new best, bayes's picks
// are unmeasured configurations within polish_radius parameter changes of
// the best so far until none is left; with polish_limit, at most that many
// such picks per best, then the global search again.
TEST(StrategiesTest, BayesPolishesTheNeighbourhoodOfTheBestWhenItStalls) {
  const Space space = Bowl();
  // The bowl without ties, so that "the best" is one configuration.
  auto loss_of = [](const Space& s, const Config& c) {
    return Ok(BowlLoss(s, c).loss + 1e-3 * static_cast<double>(At(s, c, 0)) +
              1e-5 * static_cast<double>(At(s, c, 1)));
  };
  auto neighbours = [&](const std::string& key) {
    std::set<std::string> out;
    for (const Config& nb :
         space.Neighbours(*space.ParseKey(key), Space::Neighbourhood::kHamming)) {
      out.insert(space.Key(nb));
    }
    return out;
  };
  for (const auto& [limit, radius] : {std::pair{0, 1}, std::pair{2, 1}, std::pair{4, 2}}) {
    SCOPED_TRACE(StrCat("polish_limit ", limit, ", polish_radius ", radius));
    const RunResult run = Drive("bayes", space, loss_of, 80, 1, 3,
                                {{"initial", "4"},
                                 {"polish", "3"},
                                 {"polish_limit", StrCat(limit)},
                                 {"polish_radius", StrCat(radius)}});
    std::vector<std::pair<double, std::string>> measured;  // (loss, key)
    std::set<std::string> seen;
    std::size_t improved_at = 0, polished = 0, polish_picks = 0;
    double best = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < run.keys.size(); ++i) {
      std::sort(measured.begin(), measured.end());
      // What `radius` changes reach from the best so far, unmeasured.
      std::set<std::string> open;
      if (!measured.empty()) {
        const std::string& best_key = measured.front().second;
        for (const std::string& nb : neighbours(best_key)) {
          if (seen.count(nb) == 0) open.insert(nb);
          for (const std::string& nb2 : radius == 2 ? neighbours(nb) : std::set<std::string>()) {
            if (nb2 != best_key && seen.count(nb2) == 0) open.insert(nb2);
          }
        }
      }
      const bool stalled = !measured.empty() && i >= improved_at + 3 && i >= 4;
      const bool due =
          stalled && !open.empty() && (limit == 0 || polished < static_cast<std::size_t>(limit));
      if (due) {
        EXPECT_EQ(open.count(run.keys[i]), 1u) << "pick " << i << " " << run.keys[i];
        ++polished;
        ++polish_picks;
      }
      const double loss = loss_of(space, *space.ParseKey(run.keys[i])).loss;
      measured.emplace_back(loss, run.keys[i]);
      seen.insert(run.keys[i]);
      if (loss < best) {
        best = loss;
        improved_at = i + 1;
        polished = 0;
      }
    }
    EXPECT_GT(polish_picks, 0u);
    EXPECT_EQ(run.keys.size(), 80u);
    EXPECT_LT(best, 1.1);  // the bowl's bottom, 13,7
  }
}

// The trust region: bayes's global picks lie within a radius of parameter
// changes from the best so far that starts at trust_start, grows by one with
// each new best, shrinks by one after each `trust` evaluations without one,
// and below one change starts again at the whole space.
TEST(StrategiesTest, BayesKeepsItsGlobalPicksInATrustRegionThatNarrowsAsItStalls) {
  const Space space =
      *Space::Product({Range("a", 0, 5), Range("b", 0, 5), Range("c", 0, 5), Range("d", 0, 5)}, {});
  // A bowl with a second, narrower one far from it, and no ties.
  auto loss_of = [](const Space& s, const Config& c) {
    double v[4];
    for (std::size_t i = 0; i < 4; ++i) v[i] = static_cast<double>(At(s, c, i));
    const double main = std::pow(v[0] - 4, 2) + std::pow(v[1] - 1, 2) + std::pow(v[2] - 3, 2) +
                        std::pow(v[3] - 2, 2);
    const double other = 4 * (std::pow(v[0] - 0, 2) + std::pow(v[1] - 5, 2) +
                              std::pow(v[2] - 0, 2) + std::pow(v[3] - 5, 2)) +
                         0.5;
    return Ok(1 + std::min(main, other) + 1e-3 * v[0] + 1e-4 * v[1] + 1e-5 * v[2]);
  };
  constexpr int kParams = 4, kInitial = 4;
  for (const auto& [trust, start] : {std::pair{3, 2}, std::pair{4, 3}}) {
    SCOPED_TRACE(StrCat("trust ", trust, ", trust_start ", start));
    const RunResult run = Drive("bayes", space, loss_of, 90, 1, 5,
                                {{"initial", StrCat(kInitial)},
                                 {"polish", "0"},
                                 {"trust", StrCat(trust)},
                                 {"trust_start", StrCat(start)}});
    ASSERT_EQ(run.keys.size(), 90u);
    std::vector<Config> measured;
    std::optional<Config> best;
    double best_loss = std::numeric_limits<double>::infinity();
    int radius = start, constrained = 0, restarts = 0;
    std::size_t since = 0;
    auto changes = [](const Config& x, const Config& y) {
      int d = 0;
      for (std::size_t i = 0; i < x.index.size(); ++i) d += x.index[i] != y.index[i];
      return d;
    };
    for (std::size_t i = 0; i < run.keys.size(); ++i) {
      const Config pick = *space.ParseKey(run.keys[i]);
      if (i >= static_cast<std::size_t>(kInitial) && best) {
        radius = std::min(radius, kParams);
        if (i >= since + static_cast<std::size_t>(trust)) {
          since = i;
          if (--radius < 1) {
            radius = kParams;
            ++restarts;
          }
        }
        bool open = false;  // an unmeasured configuration within the radius
        Space::Enumerator e = space.Enumerate();
        for (Config c; !open && e.Next(&c);) {
          open = changes(c, *best) <= radius &&
                 std::find(measured.begin(), measured.end(), c) == measured.end();
        }
        if (radius < kParams && open) {
          EXPECT_LE(changes(pick, *best), radius) << "pick " << i << " " << run.keys[i];
          ++constrained;
        }
      }
      measured.push_back(pick);
      const double loss = loss_of(space, pick).loss;
      if (loss < best_loss) {
        best_loss = loss;
        best = pick;
        since = i + 1;
        ++radius;
      }
    }
    EXPECT_GT(constrained, 20);
    EXPECT_GT(restarts, 0);
    EXPECT_LT(best_loss, 1.01);  // the main bowl's bottom, 4,1,3,2
  }
}

TEST(StrategiesTest, OneAndTwoValueParametersAndExhaustion) {
  Parameter fixed{"fixed", ValueType::kInt, {Value(std::int64_t{5})}};
  Parameter flag{"flag", ValueType::kBool, {Value(false), Value(true)}};
  Parameter mode{"mode", ValueType::kString, {Value(std::string("x")), Value(std::string("y"))}};
  const Space space = *Space::Product({fixed, flag, mode, Range("n", 0, 9)}, {});
  auto loss = [](const Space& s, const Config& c) {
    return Ok(1.0 + static_cast<double>(std::abs(At(s, c, 3) - 4)) + c.index[1] + c.index[2]);
  };
  for (const std::string& name : Searchers()) {
    for (std::size_t batch : {1u, 3u, 8u}) {
      const RunResult run = Drive(name, space, loss, 100, batch, 11);
      // Every configuration, each once, then nothing more.
      EXPECT_EQ(run.keys.size(), 40u) << name << " batch " << batch;
      EXPECT_EQ(run.best, 1.0) << name;
    }
  }
}

TEST(StrategiesTest, DeterministicPerSeed) {
  const Space space = Bowl();
  for (const std::string& name : Searchers()) {
    const RunResult a = Drive(name, space, BowlLoss, 50, 2, 21);
    const RunResult b = Drive(name, space, BowlLoss, 50, 2, 21);
    const RunResult c = Drive(name, space, BowlLoss, 50, 2, 22);
    EXPECT_EQ(a.keys, b.keys) << name;
    EXPECT_NE(a.keys, c.keys) << name;
  }
}

TEST(StrategiesTest, WarmStartTriesTheBestKnownFirst) {
  const Space space = Bowl();
  StrategyOptions o;
  o.seed = 1;
  o.prior = {{*space.ParseKey("12,7"), Ok(2.0)},
             {*space.ParseKey("0,0"), Ok(219.0)},
             {*space.ParseKey("13,8"), Ok(2.0)},
             {*space.ParseKey("5,5"), Failed()}};
  for (const char* name : {"bayes", "genetic", "annealing", "local"}) {
    auto s = MakeStrategy(name, space, o);
    ASSERT_TRUE(s.ok());
    const std::vector<Config> first = (*s)->Ask(2);
    ASSERT_EQ(first.size(), 2u);
    EXPECT_EQ(space.Key(first[0]), "12,7") << name;
    EXPECT_EQ(space.Key(first[1]), "13,8") << name;
  }
}

TEST(StrategiesTest, UnknownOptionsAreErrors) {
  const Space space = Bowl();
  StrategyOptions o;
  o.settings["populaton"] = "10";
  auto s = MakeStrategy("genetic", space, o);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr("unknown option 'populaton'"));
  o.settings = {{"population", "ten"}};
  EXPECT_FALSE(MakeStrategy("genetic", space, o).ok());
}

TEST(StrategiesTest, OptionsOutsideTheirRangeAreErrors) {
  const Space space = Bowl();
  const struct {
    const char* strategy;
    const char* key;
    const char* value;
    const char* message;
  } cases[] = {
      {"genetic", "population", "1e20", "option population must be an integer from 2 to 100000"},
      {"genetic", "population", "1",
       "option population must be an integer from 2 to 100000, not '1'"},
      {"genetic", "mutation", "-0.5", "option mutation must be a number from 0 to 1"},
      {"genetic", "tournament", "0", "option tournament must be an integer from 1 to 1000"},
      {"annealing", "cooling", "2", "option cooling must be a number from 0.001 to 1"},
      {"annealing", "temperature", "0", "option temperature must be a number from 1e-06"},
      {"annealing", "patience", "3.5", "option patience must be an integer"},
      {"local", "perturbation", "-5", "option perturbation must be an integer from 1 to 1000"},
      {"bayes", "acquisitions", "0", "option acquisitions must be an integer from 1 to 7"},
      {"bayes", "initial", "-1", "option initial must be an integer from 1 to 100000"},
      {"bayes", "candidates", "0", "option candidates must be an integer from 1 to 1000000"},
      {"bayes", "warp", "2", "option warp must be an integer from 0 to 1"},
  };
  for (const auto& c : cases) {
    StrategyOptions o;
    o.settings[c.key] = c.value;
    auto s = MakeStrategy(c.strategy, space, o);
    ASSERT_FALSE(s.ok()) << c.strategy << " " << c.key << "=" << c.value;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()),
                ::testing::HasSubstr(StrCat("strategy ", c.strategy, ": ", c.message)));
  }
  // The edges of each range are accepted.
  for (const auto& [strategy, key, value] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"genetic", "population", "2"},
           {"genetic", "mutation", "1"},
           {"annealing", "cooling", "1"},
           {"bayes", "acquisitions", "7"},
           {"bayes", "random_every", "0"},
           {"local", "perturbation", "1000"}}) {
    StrategyOptions o;
    o.settings[key] = value;
    EXPECT_TRUE(MakeStrategy(strategy, space, o).ok()) << strategy << " " << key << "=" << value;
  }
}

TEST(GaussianProcessTest, InterpolatesAndIsUncertainFarAway) {
  GaussianProcess gp(1);
  Eigen::MatrixXd x(5, 1);
  Eigen::VectorXd y(5);
  for (int i = 0; i < 5; ++i) {
    x(i, 0) = 0.1 + 0.2 * i;
    y(i) = std::sin(6 * x(i, 0));
  }
  gp.Fit(x, y, 80);
  Eigen::MatrixXd q(2, 1);
  q << 0.3, 3.0;
  Eigen::VectorXd mean, var;
  gp.Predict(q, &mean, &var);
  EXPECT_NEAR(mean(0), std::sin(1.8), 0.05);
  EXPECT_LT(var(0), 0.01);
  EXPECT_GT(var(1), 0.5 * gp.signal_variance());
  // The mean alone is the same mean.
  Eigen::VectorXd mean_only;
  gp.Predict(q, &mean_only, nullptr);
  EXPECT_EQ(mean_only, mean);
  // A fantasy observation pins the prediction there.
  Eigen::VectorXd at(1);
  at << 3.0;
  gp.Add(at, 2.0);
  gp.Predict(q, &mean, &var);
  EXPECT_NEAR(mean(1), 2.0, 0.05);
}

TEST(GaussianProcessTest, ExtendingTheFactorMatchesRefactorising) {
  // Two models with the same hyperparameters: one extends its factor with
  // new rows, the other (whose first row differs) factorises from scratch.
  Eigen::MatrixXd x(12, 2);
  Eigen::VectorXd y(12);
  for (int i = 0; i < 12; ++i) {
    x(i, 0) = 0.08 * i;
    x(i, 1) = std::fmod(0.37 * i, 1.0);
    y(i) = std::sin(5 * x(i, 0)) + x(i, 1);
  }
  GaussianProcess extended(2);
  extended.Fit(x.topRows(8), y.head(8), 40);
  GaussianProcess fresh = extended;
  Eigen::MatrixXd other = x.topRows(8);
  other(0, 0) = 0.99;
  fresh.Fit(other, y.head(8), 0);
  extended.Fit(x, y, 0);
  fresh.Fit(x, y, 0);
  Eigen::MatrixXd q(3, 2);
  q << 0.15, 0.2, 0.5, 0.9, 1.5, 0.1;
  Eigen::VectorXd m1, v1, m2, v2;
  extended.Predict(q, &m1, &v1);
  fresh.Predict(q, &m2, &v2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(m1(i), m2(i), 1e-9);
    EXPECT_NEAR(v1(i), v2(i), 1e-9);
  }
  EXPECT_NEAR(extended.log_likelihood(), fresh.log_likelihood(), 1e-8);
}

TEST(GaussianProcessTest, WarpedInputsFollowAnEffectConcentratedAtOneEnd) {
  // Flat over most of the axis, steep near 1 (as a time that only the
  // largest tiles change): one length scale cannot fit both parts, a warp
  // that stretches the end can.
  auto f = [](double x) { return std::exp(6 * (x - 1)) * 4; };
  Eigen::MatrixXd x(9, 1);
  Eigen::VectorXd y(9);
  for (int i = 0; i < 9; ++i) {
    x(i, 0) = i / 8.0;
    y(i) = f(x(i, 0));
  }
  const double shift = y.mean();  // taken off the targets
  y = (y.array() - shift).matrix();
  GaussianProcess plain(1), warped(1);
  warped.WarpInputs({0});
  plain.Fit(x, y, 200);
  warped.Fit(x, y, 200);
  EXPECT_GT(warped.log_likelihood(), plain.log_likelihood());
  // Held-out points between the measured ones, near the steep end.
  Eigen::MatrixXd q(4, 1);
  q << 0.6875, 0.8125, 0.9375, 0.5625;
  Eigen::VectorXd m_plain, m_warped;
  plain.Predict(q, &m_plain, nullptr);
  warped.Predict(q, &m_warped, nullptr);
  double e_plain = 0, e_warped = 0;
  for (int i = 0; i < 4; ++i) {
    const double truth = f(q(i, 0)) - shift;
    e_plain += (m_plain(i) - truth) * (m_plain(i) - truth);
    e_warped += (m_warped(i) - truth) * (m_warped(i) - truth);
  }
  EXPECT_LT(e_warped, 0.5 * e_plain) << "plain " << e_plain << ", warped " << e_warped;
}

TEST(GaussianProcessTest, AFloorKeepsFewPointsFromFittingAShortLengthScale) {
  // Five points along the first axis with a step between the middle two:
  // fitted freely, that axis gets a scale far below the cube's side; with
  // a floor of 0.5 every axis keeps at least that.
  Eigen::MatrixXd x(5, 2);
  Eigen::VectorXd y(5);
  const double xs[5] = {0.0, 0.2, 0.45, 0.55, 1.0};
  for (int i = 0; i < 5; ++i) {
    x(i, 0) = xs[i];
    x(i, 1) = 0.5;
    y(i) = xs[i] < 0.5 ? -1.0 : 1.0;
  }
  GaussianProcess free_fit(2), floored(2);
  floored.set_min_length_scale(0.5);
  free_fit.Fit(x, y, 200);
  floored.Fit(x, y, 200);
  EXPECT_LT(free_fit.length_scales()(0), 0.4);
  EXPECT_GE(floored.length_scales()(0), 0.5 - 1e-12);
  EXPECT_GE(floored.length_scales()(1), 0.5 - 1e-12);
  // Below the GP's own bound a floor is that bound.
  GaussianProcess tiny(2);
  tiny.set_min_length_scale(0);
  tiny.Fit(x, y, 200);
  EXPECT_GE(tiny.length_scales().minCoeff(), GaussianProcess::kMinLengthScale - 1e-12);
}

// The floor reaches both of bayes's models only while they are small:
// with no model ever below `length_floor_below` rows (0) the search is the
// one without a floor (`length_floor=0`), pick for pick, and the default
// (0.5 below 25) searches differently in some seed. A sharp step in `a`,
// which a free fit models with a short scale, and a failing corner, which
// the success model learns.
TEST(StrategiesTest, BayesLengthFloorHoldsWhileTheModelsAreSmall) {
  const Space space = *Space::Product({Range("a", 0, 15), Range("b", 0, 15), Range("c", 0, 7)}, {});
  auto loss = [](const Space& s, const Config& c) {
    const double a = static_cast<double>(At(s, c, 0)), b = static_cast<double>(At(s, c, 1)),
                 cc = static_cast<double>(At(s, c, 2));
    if (a + b > 26) return Failed();
    return Ok((a == 6 || a == 7 ? 1.0 : 5.0) + 0.1 * std::abs(b - 9) + 0.2 * std::abs(cc - 2));
  };
  int differing = 0;
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    const RunResult none = Drive("bayes", space, loss, 30, 1, seed, {{"length_floor", "0"}});
    const RunResult never = Drive("bayes", space, loss, 30, 1, seed, {{"length_floor_below", "0"}});
    const RunResult floored = Drive("bayes", space, loss, 30, 1, seed);
    EXPECT_EQ(never.keys, none.keys) << "seed " << seed;
    differing += floored.keys != none.keys ? 1 : 0;
  }
  EXPECT_GT(differing, 0);
}

TEST(StrategiesTest, BayesSearchesSpacesTooLargeToList) {
  // 40^4 = 2.56 million configurations: candidates are sampled and picks
  // refined by hill-climbing; a smooth bowl is still found fast.
  const Space space = *Space::Product(
      {Range("a", 0, 39), Range("b", 0, 39), Range("c", 0, 39), Range("d", 0, 39)}, {});
  auto loss = [](const Space& s, const Config& c) {
    double sum = 0;
    const double centre[4] = {31, 6, 17, 22};
    for (std::size_t i = 0; i < 4; ++i) {
      const double v = static_cast<double>(At(s, c, i)) - centre[i];
      sum += v * v;
    }
    return Ok(1 + sum);
  };
  const RunResult bayes = Drive("bayes", space, loss, 60, 1, 1);
  // Random search expects a best loss near 300 after 60 draws.
  EXPECT_LT(bayes.best, 30.0);
}

TEST(StrategiesTest, BayesSpreadsItsInitialPicksApart) {
  // A first batch of 8 is measured without feedback, and the first picks
  // asked one at a time before the model can say anything: each should be
  // far from the picks before it. Measured by the closest pair of the 8
  // (squared distance, each parameter's range scaled to 1), summed over 20
  // seeds.
  const Space space =
      *Space::Product({Range("a", 0, 7), Range("b", 0, 7), Range("c", 0, 7), Range("d", 0, 7)}, {});
  auto flat = [](const Space&, const Config&) { return Ok(1.0); };
  auto closest = [&](const std::string& name, std::uint64_t seed, std::size_t batch) {
    const RunResult r = Drive(name, space, flat, 8, batch, seed,
                              name == "bayes" ? Settings{{"initial", "8"}} : Settings{});
    std::vector<std::vector<double>> points;
    for (const std::string& key : r.keys) {
      std::vector<double> p;
      for (const std::string& part : StrSplit(key, ',')) p.push_back(std::stod(part) / 7.0);
      points.push_back(std::move(p));
    }
    EXPECT_EQ(points.size(), 8u);
    double nearest = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < points.size(); ++i) {
      for (std::size_t j = i + 1; j < points.size(); ++j) {
        double d2 = 0;
        for (std::size_t k = 0; k < 4; ++k) {
          d2 += (points[i][k] - points[j][k]) * (points[i][k] - points[j][k]);
        }
        nearest = std::min(nearest, d2);
      }
    }
    return nearest;
  };
  for (std::size_t batch : {8u, 1u}) {
    double bayes = 0, random = 0;
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      bayes += closest("bayes", seed, batch);
      random += closest("random", seed, batch);
    }
    std::printf("batch %zu: closest pair of 8 picks, mean of 20 seeds: bayes %.3f, random %.3f\n",
                batch, bayes / 20, random / 20);
    EXPECT_GT(bayes, 3 * random) << "batch " << batch;
  }
}

// The first pick, before anything is known, is the configuration nearest
// the centre of the encoding (block sizes on a log scale), ties at random;
// `centre=0` makes it a uniform draw. In a space too large to list it is
// the nearest of many draws.
TEST(StrategiesTest, BayesFirstPickIsTheConfigurationNearestTheCentre) {
  Parameter block{"block", ValueType::kInt, {}};
  for (std::int64_t b = 1; b <= 64; b *= 2) block.values.emplace_back(b);
  // The centre, 8,3, is excluded: of its neighbours 4,3 and 16,3 are
  // nearest (a sixth of the log axis away), with either value of `pad`.
  const Space space =
      *Space::Product({block, Range("tile", 1, 5), Range("pad", 0, 1)}, {"block * tile != 24"});
  const std::set<std::string> nearest = {"4,3,0", "4,3,1", "16,3,0", "16,3,1"};
  auto flat = [](const Space&, const Config&) { return Ok(1.0); };
  std::set<std::string> centred, uniform;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const std::string first = Drive("bayes", space, flat, 1, 1, seed).keys.at(0);
    EXPECT_EQ(nearest.count(first), 1u) << "seed " << seed << ": " << first;
    centred.insert(first);
    uniform.insert(Drive("bayes", space, flat, 1, 1, seed, {{"centre", "0"}}).keys.at(0));
  }
  EXPECT_GT(centred.size(), 1u);  // the ties are broken by the seed
  EXPECT_GT(uniform.size(), 8u);

  // 10^8 configurations: not listed.
  std::vector<Parameter> params;
  for (const char* name : {"a", "b", "c", "d", "e", "f", "g", "h"}) {
    params.push_back(Range(name, 0, 9));
  }
  const Space large = *Space::Product(params, {});
  auto off_centre = [](const std::string& key) {
    double d2 = 0;
    for (const std::string& part : StrSplit(key, ',')) {
      const double u = std::stod(part) / 9.0 - 0.5;
      d2 += u * u;
    }
    return d2;
  };
  double centred_d2 = 0, uniform_d2 = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    centred_d2 += off_centre(Drive("bayes", large, flat, 1, 1, seed).keys.at(0));
    uniform_d2 += off_centre(Drive("bayes", large, flat, 1, 1, seed, {{"centre", "0"}}).keys.at(0));
  }
  std::printf("squared distance from the centre, mean of 20 seeds: centred %.3f, uniform %.3f\n",
              centred_d2 / 20, uniform_d2 / 20);
  EXPECT_LT(centred_d2, uniform_d2 / 3);
}

// A job on a GPU asks ahead of its measurements (32 configurations on a
// CUDA device), one at a time: before anything is told, those picks are
// the ones a whole batch would get, spread apart, not one uniform draw
// after another.
TEST(StrategiesTest, BayesPicksAskedAheadSpreadAsABatchsDo) {
  const Space space =
      *Space::Product({Range("a", 0, 7), Range("b", 0, 7), Range("c", 0, 7), Range("d", 0, 7)}, {});
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    StrategyOptions options;
    options.seed = seed;
    absl::StatusOr<std::unique_ptr<Strategy>> batch = MakeStrategy("bayes", space, options);
    absl::StatusOr<std::unique_ptr<Strategy>> ahead = MakeStrategy("bayes", space, options);
    ASSERT_TRUE(batch.ok() && ahead.ok());
    const std::vector<Config> together = (*batch)->Ask(12);
    std::vector<Config> one_by_one;
    for (int i = 0; i < 12; ++i) {
      const std::vector<Config> got = (*ahead)->Ask(1);
      ASSERT_EQ(got.size(), 1u);
      one_by_one.push_back(got[0]);
    }
    EXPECT_EQ(one_by_one, together) << "seed " << seed;
  }
}

TEST(EncoderTest, LogScalesPowersAndOneHotsCategories) {
  Parameter bs{"bs",
               ValueType::kInt,
               {Value(std::int64_t{16}), Value(std::int64_t{32}), Value(std::int64_t{64}),
                Value(std::int64_t{128})}};
  Parameter one{"one", ValueType::kInt, {Value(std::int64_t{3})}};
  Parameter s{"s",
              ValueType::kString,
              {Value(std::string("a")), Value(std::string("b")), Value(std::string("c"))}};
  const Space space = *Space::Product({bs, one, s}, {});
  const Encoder e(space);
  EXPECT_EQ(e.dims(), 4u);  // 1 (bs) + 0 (one) + 3 (s)
  const std::vector<double> v = e.Encode(*space.ParseKey("32,3,c"));
  EXPECT_NEAR(v[0], 1.0 / 3.0, 1e-12);  // log2: 4, 5, 6, 7
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[3], 1.0);
}

}  // namespace
}  // namespace ktune
