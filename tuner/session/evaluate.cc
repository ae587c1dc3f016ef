#include "tuner/session/evaluate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {

ScoreBaseline::ScoreBaseline(std::vector<double> valid_times, std::int64_t total)
    : sorted_(std::move(valid_times)), total_(total) {
  std::sort(sorted_.begin(), sorted_.end());
  if (sorted_.empty()) sorted_.push_back(0);
  const auto valid = static_cast<std::int64_t>(sorted_.size());
  const std::int64_t k = (4 * valid + 99) / 100;  // ceil(0.04 * valid)
  short_budget_ = (total_ + 1 + k) / (k + 1);     // ceil((N + 1) / (k + 1))
}

double ScoreBaseline::RandomBest(std::int64_t b) const {
  const std::int64_t n = total_;
  const auto v = static_cast<std::int64_t>(sorted_.size());
  if (b <= 0) return sorted_.back();
  if (b > n - 0) b = n;
  // q(m): the probability that b draws without replacement from n miss m
  // given items, C(n - m, b) / C(n, b), through log-gamma.
  const double log_cnb = std::lgamma(n + 1.0) - std::lgamma(n - b + 1.0);
  auto q = [&](std::int64_t m) {
    if (n - m < b) return 0.0;
    return std::exp(std::lgamma(static_cast<double>(n - m) + 1.0) -
                    std::lgamma(static_cast<double>(n - m - b) + 1.0) - log_cnb);
  };
  double expected = 0;
  double previous = 1.0;  // q(0)
  for (std::int64_t i = 1; i <= v; ++i) {
    const double current = q(i);
    expected += sorted_[static_cast<std::size_t>(i - 1)] * (previous - current);
    previous = current;
    if (previous == 0) break;
  }
  // No valid configuration among the draws: the worst valid time counts.
  expected += sorted_.back() * previous;
  return expected;
}

double ScoreBaseline::Score(const std::vector<double>& s, std::int64_t budget) const {
  const double optimum = sorted_.front();
  double sum = 0;
  for (std::int64_t b = 1; b <= budget; ++b) {
    const double r = RandomBest(b);
    const double sb =
        s.empty() ? sorted_.back()
                  : s[static_cast<std::size_t>(
                        std::min<std::int64_t>(b, static_cast<std::int64_t>(s.size())) - 1)];
    // R(b) = O up to rounding: the term counts 1.
    if (r - optimum <= 1e-12 * std::max(1.0, std::fabs(optimum))) {
      sum += 1;
    } else {
      sum += (r - sb) / (r - optimum);
    }
  }
  return budget > 0 ? sum / static_cast<double>(budget) : 0;
}

std::vector<std::pair<Config, Outcome>> PriorFrom(const RecordedSpace& source,
                                                  const Space& target) {
  std::vector<std::pair<Config, Outcome>> out;
  const std::vector<Parameter>& params = source.params();
  // Target parameter i takes source parameter from[i].
  std::vector<std::size_t> from(target.num_params(), params.size());
  for (std::size_t i = 0; i < target.num_params(); ++i) {
    for (std::size_t j = 0; j < params.size(); ++j) {
      if (params[j].name == target.param(i).name) from[i] = j;
    }
    if (from[i] == params.size()) return out;  // not the same kernel
  }
  for (const RecordedEntry& e : source.entries()) {
    std::string key;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (i > 0) key.push_back(',');
      key += FormatValue(params[from[i]].values[e.config.index[from[i]]]);
    }
    absl::StatusOr<Config> c = target.ParseKey(key);
    if (!c.ok() || !target.IsValid(*c)) continue;
    Outcome o;
    o.status = e.measurement.status;
    if (o.ok()) o.loss = e.measurement.time.count();
    out.emplace_back(*std::move(c), o);
  }
  return out;
}

ScoreBaseline BaselineOf(const RecordedSpace& recording) {
  std::vector<double> times;
  for (const RecordedEntry& e : recording.entries()) {
    if (e.measurement.ok()) times.push_back(e.measurement.time.count());
  }
  return ScoreBaseline(std::move(times), static_cast<std::int64_t>(recording.entries().size()));
}

namespace {

// What one seeded repeat leaves for the score.
struct RepeatResult {
  absl::Status status;
  std::vector<double> curve;  // best so far after each evaluation
  double best = 0;
  double strategy_ms = 0;  // wall time in the strategy (Ask, Tell, construction)
  std::int64_t proposals = 0;
  double recorded_ms = 0;  // recorded time the run spent
  // Under a time budget: (recorded ms spent when it was known, best time).
  std::vector<std::pair<double, double>> improved;
};

// What every repeat of one EvaluateStrategy shares, read only.
struct RepeatSetting {
  const std::string& name;
  const StrategyFactory& factory;
  const EvaluateOptions& options;
  const Space& space;
  const ScoreBaseline& baseline;
  const std::unordered_map<Config, const RecordedEntry*, ConfigHash>& outcome;
  std::size_t horizon;
  bool timed;
};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Repeat `r`: a fresh strategy seeded seed + r, run over the recording to
// the horizon or the time budget.
RepeatResult RunRepeat(const RepeatSetting& set, int r) {
  const EvaluateOptions& options = set.options;
  const auto batch = static_cast<std::size_t>(std::max(1, options.batch));
  const std::size_t ahead = std::max(batch, static_cast<std::size_t>(std::max(0, options.ahead)));
  const int workers = set.timed ? std::max(0, options.compile_workers) : 0;
  const double time_budget_ms = options.max_recorded_time.count();
  RepeatResult out;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<Strategy>> strategy =
      set.factory(set.space, options.seed + static_cast<std::uint64_t>(r));
  if (!strategy.ok()) {
    out.status = strategy.status();
    return out;
  }
  out.strategy_ms = MsSince(t0);
  out.curve.reserve(set.timed ? 1024 : set.horizon);
  double best = set.baseline.worst();
  // Recorded time: when the GPU finished the last candidate measured
  // (with one compile worker or none, the sum of the candidates' times).
  double spent_ms = 0;
  std::vector<double> worker_free(static_cast<std::size_t>(std::max(1, workers)), 0.0);
  // Asked, not yet measured, with when each is compiled.
  std::deque<std::pair<const RecordedEntry*, double>> waiting;
  std::size_t asked_total = 0;
  bool exhausted = false;
  while (out.curve.size() < set.horizon) {
    // As a job's time budget: checked before each candidate.
    if (set.timed && spent_ms >= time_budget_ms) break;
    while (!exhausted && waiting.size() + batch <= ahead && asked_total < set.horizon) {
      const std::size_t n = std::min(batch, set.horizon - asked_total);
      const auto a0 = std::chrono::steady_clock::now();
      const std::vector<Config> asked = (*strategy)->Ask(n);
      out.strategy_ms += MsSince(a0);
      if (asked.empty()) exhausted = true;
      if (asked.size() > n) {
        out.status =
            absl::InternalError(StrCat(set.name, " asked for ", n, " proposed ", asked.size()));
        return out;
      }
      for (const Config& c : asked) {
        auto it = set.outcome.find(c);
        if (it == set.outcome.end()) {
          out.status = absl::InternalError(
              StrCat(set.name, " proposed ", set.space.Key(c), ", which is not in the space"));
          return out;
        }
        double compiled_at = 0;
        if (workers > 0) {
          auto worker = std::min_element(worker_free.begin(), worker_free.end());
          *worker = std::max(*worker, spent_ms) + it->second->measurement.compile_time.count();
          compiled_at = *worker;
        }
        waiting.emplace_back(it->second, compiled_at);
      }
      asked_total += asked.size();
    }
    if (waiting.empty()) break;
    const auto [entry, compiled_at] = waiting.front();
    waiting.pop_front();
    const Measurement& m = entry->measurement;
    if (workers > 0) {
      spent_ms =
          std::max(spent_ms, compiled_at) + std::max(0.0, m.cost.count() - m.compile_time.count());
    } else {
      spent_ms += m.cost.count();
    }
    Outcome o;
    o.status = m.status;
    if (o.ok()) {
      o.loss = m.time.count();
      if (o.loss < best) out.improved.emplace_back(spent_ms, o.loss);
      best = std::min(best, o.loss);
    }
    const auto t1 = std::chrono::steady_clock::now();
    (*strategy)->Tell(entry->config, o);
    out.strategy_ms += MsSince(t1);
    out.curve.push_back(best);
    ++out.proposals;
  }
  out.best = best;
  out.recorded_ms = spent_ms;
  return out;
}

// The repeats' results added up, in seed order (so the sums, in floating
// point, are the same however many threads ran them).
class ScoreSum {
 public:
  explicit ScoreSum(const RepeatSetting& set) : set_(set), mean_(set.horizon, 0) {}

  void Add(RepeatResult run) {
    const int repeats = set_.options.repeats;
    strategy_ms_ += run.strategy_ms;
    proposals_ += run.proposals;
    if (set_.timed) {
      end_ms_ = std::max(end_ms_, run.recorded_ms);
      final_best_.push_back(run.best);
      final_evaluations_.push_back(static_cast<std::int64_t>(run.curve.size()));
      improvements_.push_back(std::move(run.improved));
    }
    // A run that stops early keeps its last best.
    std::vector<double>& curve = run.curve;
    const double last = curve.empty() ? set_.baseline.worst() : curve.back();
    curve.resize(set_.horizon, last);
    for (std::size_t b = 0; b < set_.horizon; ++b) mean_[b] += curve[b] / repeats;
    if (!set_.timed) {
      const auto short_budget = static_cast<std::size_t>(set_.baseline.short_budget());
      best_at_short_.push_back(curve[std::min(short_budget, set_.horizon) - 1]);
      if (!set_.options.short_only) best_at_long_.push_back(curve.back());
    }
    for (std::size_t m = 0; m < std::size(kMarks); ++m) {
      const auto at = std::min<std::size_t>(static_cast<std::size_t>(kMarks[m]), set_.horizon) - 1;
      fraction_[m] += set_.baseline.optimum() / curve[at] / repeats;
    }
  }

  StrategyScore Score() && {
    const ScoreBaseline& baseline = set_.baseline;
    const EvaluateOptions& options = set_.options;
    StrategyScore score;
    score.strategy = set_.name;
    score.repeats = options.repeats;
    if (set_.timed) {
      // The mean best so far at 200 evenly spaced moments, to the end of
      // the last candidate of the longest run (a candidate begun within
      // the budget ends past it).
      constexpr int kSteps = 200;
      for (int k = 0; k <= kSteps; ++k) {
        const double t = end_ms_ * k / kSteps;
        double sum = 0;
        for (const auto& run : improvements_) {
          double b = baseline.worst();
          for (const auto& [at, value] : run) {
            if (at > t) break;
            b = value;
          }
          sum += b;
        }
        score.time_curve.emplace_back(t / 1e3, sum / static_cast<double>(improvements_.size()));
      }
      score.final_best = std::move(final_best_);
      score.final_evaluations = std::move(final_evaluations_);
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const auto budget = static_cast<std::int64_t>(set_.horizon);
    score.short_score = set_.timed ? nan : baseline.Score(mean_, baseline.short_budget());
    score.long_score = options.short_only || set_.timed ? nan : baseline.Score(mean_, budget);
    if (options.short_only) {
      for (std::size_t m = 0; m < std::size(kMarks); ++m) {
        if (kMarks[m] > budget) fraction_[m] = nan;
      }
    }
    score.fraction_of_optimum.assign(std::begin(fraction_), std::end(fraction_));
    score.time_per_proposal = std::chrono::duration<double, std::milli>(
        proposals_ > 0 ? strategy_ms_ / static_cast<double>(proposals_) : 0);
    score.mean_curve = std::move(mean_);
    score.best_at_short = std::move(best_at_short_);
    score.best_at_long = std::move(best_at_long_);
    return score;
  }

 private:
  static constexpr int kMarks[] = {20, 50, 100, 200};
  const RepeatSetting& set_;
  std::vector<double> mean_;
  double fraction_[std::size(kMarks)] = {};
  double strategy_ms_ = 0;
  std::int64_t proposals_ = 0;
  double end_ms_ = set_.options.max_recorded_time.count();
  std::vector<double> final_best_;
  std::vector<std::int64_t> final_evaluations_;
  std::vector<double> best_at_short_;
  std::vector<double> best_at_long_;
  std::vector<std::vector<std::pair<double, double>>> improvements_;
};

// What every task over one recording shares: its space, baseline and
// outcomes by configuration.
struct PreparedRecording {
  Space space;
  ScoreBaseline baseline;
  std::unordered_map<Config, const RecordedEntry*, ConfigHash> outcome;
};

// One task's state while its repeats run.
struct TaskState {
  std::unique_ptr<RepeatSetting> setting;
  std::unique_ptr<ScoreSum> sum;
  std::map<int, RepeatResult> waiting;  // finished, before their turn
  int added = 0;
};

}  // namespace

absl::Status EvaluateMany(const std::vector<EvaluationTask>& tasks, int threads,
                          const std::function<void(std::size_t, StrategyScore)>& on_done) {
  std::map<const RecordedSpace*, std::unique_ptr<PreparedRecording>> prepared;
  std::vector<TaskState> state(tasks.size());
  std::vector<std::pair<std::size_t, int>> units;  // (task, repeat), in order
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const EvaluationTask& task = tasks[i];
    std::unique_ptr<PreparedRecording>& p = prepared[task.recording];
    if (p == nullptr) {
      KTUNE_ASSIGN_OR_RETURN(Space space, task.recording->ToSpace());
      p = std::make_unique<PreparedRecording>(
          PreparedRecording{std::move(space), BaselineOf(*task.recording), {}});
      for (const RecordedEntry& e : task.recording->entries()) p->outcome.emplace(e.config, &e);
    }
    const EvaluateOptions& options = task.options;
    const bool timed = options.max_recorded_time.count() > 0;
    const std::int64_t budget =
        timed ? static_cast<std::int64_t>(task.recording->entries().size())
              : (options.short_only ? p->baseline.short_budget() : p->baseline.long_budget());
    state[i].setting.reset(new RepeatSetting{task.name, task.factory, options, p->space,
                                             p->baseline, p->outcome,
                                             static_cast<std::size_t>(budget), timed});
    state[i].sum = std::make_unique<ScoreSum>(*state[i].setting);
    for (int r = 0; r < options.repeats; ++r) units.emplace_back(i, r);
  }
  std::mutex mu;
  std::size_t emitted = 0;  // tasks handed to on_done
  absl::Status failure;     // of the first unit (in order) that failed
  // That unit: units after it are not started, those before it all run, so
  // the failure returned and the tasks handed over do not depend on the
  // threads.
  std::atomic<std::size_t> failed_at{units.size()};
  std::atomic<std::size_t> next{0};
  // Under mu: hands every finished task whose predecessors are handed to
  // on_done.
  auto emit = [&] {
    while (emitted < tasks.size() && state[emitted].added == tasks[emitted].options.repeats) {
      if (on_done) on_done(emitted, std::move(*state[emitted].sum).Score());
      state[emitted].sum.reset();
      ++emitted;
    }
  };
  // Under mu: adds what is ready of task i, then emits.
  auto fold = [&](std::size_t i) {
    TaskState& t = state[i];
    for (auto it = t.waiting.begin(); it != t.waiting.end() && it->first == t.added;
         it = t.waiting.erase(it)) {
      t.sum->Add(std::move(it->second));
      ++t.added;
      if (tasks[i].options.on_repeat) tasks[i].options.on_repeat(t.added);
    }
    emit();
  };
  auto work = [&] {
    for (std::size_t u = next++; u < units.size() && u < failed_at; u = next++) {
      const auto [i, r] = units[u];
      RepeatResult result = RunRepeat(*state[i].setting, r);
      const std::lock_guard<std::mutex> lock(mu);
      if (!result.status.ok()) {
        if (u < failed_at) {
          failed_at = u;
          failure = result.status;
        }
        continue;
      }
      state[i].waiting.emplace(r, std::move(result));
      fold(i);
    }
  };
  {
    const std::lock_guard<std::mutex> lock(mu);
    emit();  // tasks of no repeats are done at once
  }
  const auto n = static_cast<int>(std::min<std::size_t>(
      static_cast<std::size_t>(std::max(1, threads)), std::max<std::size_t>(1, units.size())));
  if (n == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(n));
    for (int t = 0; t < n; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }
  return failure;
}

absl::StatusOr<StrategyScore> EvaluateStrategy(const RecordedSpace& recording,
                                               const std::string& name,
                                               const StrategyFactory& factory,
                                               const EvaluateOptions& options) {
  std::optional<StrategyScore> score;
  KTUNE_RETURN_IF_ERROR(EvaluateMany({EvaluationTask{&recording, name, factory, options}},
                                     options.threads,
                                     [&](std::size_t, StrategyScore s) { score = std::move(s); }));
  return *std::move(score);
}

}  // namespace ktune
