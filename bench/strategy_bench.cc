// Prints what the search strategies cost: the strategy time per proposal,
// amortised and at the end of a long run, with 500 observations on a
// 20,000-configuration space (a smooth loss with a failing region).
//
//   build/default/bench/strategy_bench [OBSERVATIONS [NAME,NAME,...]]
//
// Each NAME may carry settings as on the command line of ktune:
// bayes:input_warp=0:candidates=800.
//
// Each strategy runs ask/tell to OBSERVATIONS (default 500) at batch 1 and
// batch 8; times are medians of three seeded runs measured in this one run.
// The quality of the strategies is `ktune evaluate`'s business.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "strategies/registry.h"
#include "tuner/base/strings.h"
#include "tuner/space/space.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

Parameter Powers(const std::string& name, int count) {
  Parameter p;
  p.name = name;
  for (int i = 0; i < count; ++i) p.values.emplace_back(std::int64_t{1} << i);
  return p;
}

// 10 x 10 x 8 x 5 x 5 = 20,000 configurations.
Space MakeSpace() {
  absl::StatusOr<Space> s = Space::Product(
      {Powers("a", 10), Powers("b", 10), Powers("c", 8), Powers("d", 5), Powers("e", 5)}, {});
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(s);
}

// A smooth bowl in the value indices with a ripple; about 15% fail (a
// corner where a * b is large, as with too many threads per block).
Outcome Evaluate(const Space& space, const Config& c) {
  double idx[5];
  for (std::size_t i = 0; i < 5; ++i) {
    idx[i] = std::log2(static_cast<double>(std::get<std::int64_t>(space.ValueOf(c, i))));
  }
  Outcome o;
  if (idx[0] + idx[1] > 14) {
    o.status = CandidateStatus::kLaunchError;
    return o;
  }
  const double centre[5] = {5, 3, 4, 1, 2};
  double sum = 0;
  for (int i = 0; i < 5; ++i) sum += (idx[i] - centre[i]) * (idx[i] - centre[i]);
  o.loss = 1.0 + 0.1 * sum + 0.05 * std::sin(3 * idx[0] + idx[2]);
  return o;
}

struct Cost {
  double mean_ms = 0;  // per proposal, whole run
  double tail_ms = 0;  // per proposal, last fifth of the run
};

Cost Run(const Space& space, const StrategyChoice& choice, std::uint64_t seed, std::size_t batch,
         std::size_t observations) {
  StrategyOptions options;
  options.seed = seed;
  options.max_evaluations = static_cast<std::int64_t>(observations);
  options.settings = choice.settings;
  absl::StatusOr<std::unique_ptr<Strategy>> s = MakeStrategy(choice.name, space, options);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    std::exit(1);
  }
  double total = 0;
  double tail = 0;
  std::size_t told = 0;
  std::size_t tail_count = 0;
  const std::size_t tail_from = observations - observations / 5;
  while (told < observations) {
    const std::size_t n = std::min(batch, observations - told);
    const auto t0 = Clock::now();
    std::vector<Config> asked = (*s)->Ask(n);
    std::vector<Outcome> outcomes;
    outcomes.reserve(asked.size());
    for (const Config& c : asked) outcomes.push_back(Evaluate(space, c));
    const auto t1 = Clock::now();
    for (std::size_t i = 0; i < asked.size(); ++i) (*s)->Tell(asked[i], outcomes[i]);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count() +
                      std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (asked.empty()) break;
    total += ms;
    if (told >= tail_from) {
      tail += ms;
      tail_count += asked.size();
    }
    told += asked.size();
  }
  Cost c;
  c.mean_ms = told > 0 ? total / static_cast<double>(told) : 0;
  c.tail_ms = tail_count > 0 ? tail / static_cast<double>(tail_count) : 0;
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  using namespace ktune;
  const std::size_t observations = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 500;
  if (observations < 5) {
    std::fprintf(stderr, "usage: strategy_bench [OBSERVATIONS >= 5 [NAME,NAME,...]]\n");
    return 2;
  }
  const std::vector<std::string> names =
      argc > 2 ? StrSplit(argv[2], ',')
               : std::vector<std::string>{"random", "genetic", "annealing", "local", "bayes"};
  const Space space = MakeSpace();
  // Every name and setting checked before anything is timed.
  std::vector<StrategyChoice> choices;
  for (const std::string& name : names) {
    absl::StatusOr<StrategyChoice> choice = ParseStrategyChoice(name);
    absl::Status made = choice.status();
    if (choice.ok()) {
      StrategyOptions options;
      options.settings = choice->settings;
      made = MakeStrategy(choice->name, space, options).status();
    }
    if (!made.ok()) {
      std::fprintf(stderr, "strategy_bench: %s\n", std::string(made.message()).c_str());
      return 2;
    }
    choices.push_back(*std::move(choice));
  }
  std::printf("space: 20000 configurations, 5 parameters; %zu observations\n", observations);
  std::printf("%-24s %6s %16s %22s\n", "strategy", "batch", "ms/proposal",
              "ms/proposal (last 20%)");
  for (std::size_t i = 0; i < choices.size(); ++i) {
    for (std::size_t batch : {std::size_t{1}, std::size_t{8}}) {
      std::vector<double> mean, tail;
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        const Cost c = Run(space, choices[i], seed, batch, observations);
        mean.push_back(c.mean_ms);
        tail.push_back(c.tail_ms);
      }
      std::printf("%-24s %6zu %16.3f %22.3f\n", names[i].c_str(), batch, Median(mean),
                  Median(tail));
      std::fflush(stdout);
    }
  }
  return 0;
}
