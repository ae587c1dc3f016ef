// Scoring search strategies on recorded spaces, the way results compare
// with other tuners.
//
// For one recorded space: N = all configurations (valid and failed), valid
// times t with optimum O, k = ceil(0.04 * valid), the short budget
// B = ceil((N + 1) / (k + 1)) (the expected number of uniform random draws
// to hit the best 4%), the long budget 10 B. R(b) is the exact expected
// best-so-far time of uniform random sampling without replacement after b
// evaluations (failed configurations never improve it); S(b) a strategy's
// best-so-far after b evaluations averaged over repeats. Before the first
// valid configuration the best-so-far is the worst valid time; a run that
// stops early keeps its last best. Score = mean over b = 1..budget of
// (R(b) - S(b)) / (R(b) - O), a term counting 1 where R(b) = O: 0 is random
// search, 1 the optimum at once, negative worse than random.
#ifndef KTUNE_TUNER_SESSION_EVALUATE_H_
#define KTUNE_TUNER_SESSION_EVALUATE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/device/recorded.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// The budgets and the random-search baseline of one recorded space.
class ScoreBaseline {
 public:
  // `valid_times`: the times of the valid configurations (any order);
  // `total`: all configurations, failed ones included.
  ScoreBaseline(std::vector<double> valid_times, std::int64_t total);

  std::int64_t short_budget() const { return short_budget_; }
  std::int64_t long_budget() const { return 10 * short_budget_; }
  double optimum() const { return sorted_.front(); }
  double worst() const { return sorted_.back(); }
  // R(b) for b >= 1 (b beyond the space size gives the optimum).
  double RandomBest(std::int64_t b) const;
  // The score of best-so-far curve `s` (s[b - 1] is S(b)) over b = 1..budget.
  double Score(const std::vector<double>& s, std::int64_t budget) const;

 private:
  std::vector<double> sorted_;
  std::int64_t total_;
  std::int64_t short_budget_;
};

// Makes a fresh strategy for one repeat of a run over `space`, seeded by
// `seed`. (The evaluator never includes the strategies: whoever calls it
// supplies this.)
using StrategyFactory = std::function<absl::StatusOr<std::unique_ptr<Strategy>>(
    const Space& space, std::uint64_t seed)>;

// One strategy on one recorded space.
struct StrategyScore {
  std::string strategy;
  double short_score = 0;
  double long_score = 0;
  // Mean of optimum / best-so-far after 20, 50, 100 and 200 evaluations.
  std::vector<double> fraction_of_optimum;
  // Mean wall time the strategy spent per proposed configuration
  // (Ask and Tell together).
  std::chrono::duration<double, std::milli> time_per_proposal{0};
  int repeats = 0;
  // Mean best-so-far curve over the budget run.
  std::vector<double> mean_curve;
  // Under the evaluation budgets: each repeat's best after the short
  // budget and after the long one (empty with short_only), in seed order
  // (the worst valid time for a repeat that found none).
  std::vector<double> best_at_short;
  std::vector<double> best_at_long;
  // Under a time budget (EvaluateOptions::max_recorded_time): each repeat's
  // best time at the end (the worst valid time if it found none), in seed
  // order, and its evaluations; the mean best so far against recorded
  // seconds, as (seconds, ms) points from 0 to the end of the longest run
  // (its last candidate, begun within the budget, may end past it).
  std::vector<double> final_best;
  std::vector<std::int64_t> final_evaluations;
  std::vector<std::pair<double, double>> time_curve;
};

struct EvaluateOptions {
  int repeats = 30;
  int batch = 1;           // configurations asked at once
  std::uint64_t seed = 0;  // repeat r uses seed + r
  // Runs stop at the short budget: the short score only (the same as a
  // full run's), at a tenth of the cost; long_score is NaN and the
  // fractions of the optimum past the short budget are NaN.
  bool short_only = false;
  // A time budget in recorded time instead of the evaluation budgets: each
  // repeat stops before its next candidate once its candidates' recorded
  // costs (compilation, verification and benchmarking) add up to this, as
  // a job's max_time stops it; scores are then NaN, and final_best and
  // time_curve say how far each repeat got. Zero: the evaluation budgets.
  Millis max_recorded_time{0};
  // Configurations kept asked ahead of the measurements, as a device with
  // a compile pipeline keeps them (a CUDA device: CudaDevice::kPipelineDepth):
  // the strategy is asked, `batch` at a time, whenever fewer than
  // `ahead - batch + 1` are waiting, and hears of each when it is measured.
  // At most `batch` (the default, 0): ask a batch, measure it, tell it.
  int ahead = 0;
  // With max_recorded_time: each candidate's recorded compilation runs on
  // the first of this many compile workers to be free, from when it is
  // asked, while the GPU measures earlier candidates; the rest of its
  // recorded time (verification, benchmarking) follows on the GPU, one
  // candidate after another. 0 (the default): every candidate's recorded
  // time is added one after another, as if compiling stopped the GPU.
  int compile_workers = 0;
  // Repeats run on this many threads, each repeat on one (its strategy is
  // never shared); the scores are the same for any number. The strategy's
  // time per proposal is measured on its thread, so more threads than
  // free cores inflate it.
  int threads = 1;
  // Called after each repeat with how many are done (for a progress line),
  // one call at a time, from the thread that ran it; may be empty.
  std::function<void(int done)> on_repeat;
};

// Runs `factory`'s strategy `options.repeats` times over the recording up
// to the long budget (the short one with `short_only`, or the space's end)
// and scores it.
absl::StatusOr<StrategyScore> EvaluateStrategy(const RecordedSpace& recording,
                                               const std::string& name,
                                               const StrategyFactory& factory,
                                               const EvaluateOptions& options);

// One strategy on one recording, as EvaluateStrategy takes them.
struct EvaluationTask {
  const RecordedSpace* recording = nullptr;
  std::string name;
  StrategyFactory factory;
  EvaluateOptions options;  // its `threads` unused
};

// Runs every task's repeats on `threads` threads from one queue (task by
// task, repeat by repeat), so that no thread idles while a task has
// repeats left; each task scores as EvaluateStrategy would score it alone.
// `on_done(i, score)` gets task i's score once it and every task before it
// are done: in task order, one call at a time, from whichever thread
// finished the last. Returns the first failure in that order: every
// repeat before it runs, none after it starts, so the tasks before the
// failing one are handed over whatever the threads. Each task's
// `on_repeat` is called as its repeats are added up, one call at a time.
absl::Status EvaluateMany(const std::vector<EvaluationTask>& tasks, int threads,
                          const std::function<void(std::size_t, StrategyScore)>& on_done);

// The baseline of a recording (all its configurations count).
ScoreBaseline BaselineOf(const RecordedSpace& recording);

// The outcomes of `source` (another device or problem, same parameter
// names) as configurations of `target`, for warm starts. Configurations of
// the source that `target` does not have are left out.
std::vector<std::pair<Config, Outcome>> PriorFrom(const RecordedSpace& source, const Space& target);

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_EVALUATE_H_
