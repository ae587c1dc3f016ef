// The benchmark protocol's decisions, on the CPU: how many samples a
// candidate gets, how many launches make a sample, what is dropped, and
// why sampling stops. Each row drives the policy as the worker does
// (chunks of samples, their times, whether the GPU was throttled, the time
// spent) and checks where it ends.
#include "tuner/measure/sampling_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace ktune {
namespace {

struct Row {
  std::string name;
  SamplingSettings settings;
  CandidateSampling candidate;
  double first_launch_ms;
  // The kernel's time per launch; sample k of the run is this times
  // (1 + jitter[k % jitter.size()]).
  double launch_ms;
  std::vector<double> jitter = {0};
  int throttled_chunks = 0;    // the first chunks were taken while throttled
  double ms_per_chunk = 0.01;  // how the candidate's time grows
  // Expected.
  StopReason reason;
  int kept;
  int launches_per_sample;
  int discarded = 0;
  int restarts = 0;
  bool one_at_a_time = false;  // as a pipeline is sampled: a pass, a look
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

struct Outcome {
  StopReason reason = StopReason::kContinue;
  int kept = 0;
  int launches_per_sample = 0;
  int discarded = 0;
  int restarts = 0;
  std::vector<int> chunks;
  std::vector<double> samples;
};

// Drives `policy` as the worker's sampling loop does.
Outcome Drive(SamplingPolicy& policy, const Row& row) {
  Outcome o;
  policy.Begin(Millis(row.first_launch_ms));
  int sample = 0, chunk_index = 0;
  double elapsed = 0;
  for (int n = policy.NextChunk(); n > 0 && chunk_index < 100000; n = policy.NextChunk()) {
    if (row.one_at_a_time) n = 1;
    o.chunks.push_back(n);
    std::vector<double> times;
    const int instances = row.candidate.instances > 0 ? row.candidate.instances : 1;
    for (int i = 0; i < n; ++i, ++sample) {
      const double j = row.jitter[static_cast<std::size_t>(sample) % row.jitter.size()];
      times.push_back(row.launch_ms * policy.launches_per_sample() * instances * (1 + j));
    }
    elapsed += row.ms_per_chunk;
    const bool throttled = chunk_index++ < row.throttled_chunks;
    const SamplingPolicy::Next next = policy.Add(times, throttled, Millis(elapsed));
    if (next == SamplingPolicy::Next::kRestart) ++o.restarts;
    if (next == SamplingPolicy::Next::kDone) break;
  }
  o.reason = policy.reason();
  o.kept = static_cast<int>(policy.samples().size());
  o.launches_per_sample = policy.launches_per_sample();
  o.discarded = policy.discarded();
  o.samples = policy.samples();
  return o;
}

SamplingSettings Defaults() { return SamplingSettings{}; }

SamplingSettings With(int min_samples, int max_samples, double noise, double cap_ms = 1000) {
  SamplingSettings s;
  s.min_samples = min_samples;
  s.max_samples = max_samples;
  s.target_relative_noise = noise;
  s.time_cap = Millis(cap_ms);
  return s;
}

CandidateSampling Best(double ms) {
  CandidateSampling c;
  c.best = Millis(ms);
  return c;
}

// The rows keep one line per case; clang-format would put every field on its own.
// clang-format off
std::vector<Row> Rows() {
  std::vector<Row> rows;
  // A steady kernel: the minimum, rounded up to whole chunks, is enough.
  rows.push_back({"steady_kernel_stops_when_stable", Defaults(), {}, 1.0, 1.0, {0}, 0, 0.01,
                  StopReason::kStable, 12, 1});
  // A noisy one runs to the maximum.
  rows.push_back({"noisy_kernel_runs_to_the_maximum", With(10, 20, 0.0001), {}, 1.0, 1.0,
                  {0, 0.5, -0.4, 0.3}, 0, 0.01, StopReason::kMaxSamples, 20, 1});
  // The time cap: past it, the first chunk is all there is.
  rows.push_back({"time_cap_ends_a_slow_candidate", With(10, 1000, 0.0001, 50), {}, 30.0, 30.0,
                  {0, 0.5}, 0, 120, StopReason::kTimeCap, 4, 1});
  // Racing: clearly slower than the best after racing_min_samples (the
  // first chunk stops there).
  rows.push_back({"a_clearly_slower_candidate_is_raced", Defaults(), Best(1.0), 2.0, 2.0, {0}, 0,
                  0.01, StopReason::kRaced, 3, 1});
  // Not raced when close to the best.
  rows.push_back({"a_close_candidate_is_not_raced", Defaults(), Best(1.0), 1.02, 1.02, {0}, 0,
                  0.01, StopReason::kStable, 11, 1});
  // Final contenders are never raced, and their minimum can be overridden.
  {
    CandidateSampling final_round = Best(1.0);
    final_round.no_racing = true;
    final_round.min_samples = 4;
    rows.push_back({"final_contenders_are_not_raced", Defaults(), final_round, 2.0, 2.0, {0}, 0,
                    0.01, StopReason::kStable, 4, 1});
  }
  // A short kernel that looked long cold: decided by its first chunk,
  // which is dropped, then sampled with ceil(5 * 0.02 / 2^-7) = 13 launches.
  rows.push_back({"a_short_kernel_is_batched_after_its_first_chunk", Defaults(), {}, 0.1,
                  0.0078125, {0}, 0, 0.01, StopReason::kStable, 12, 13, 0, 1});
  // One known to be short from the first launch (a higher limit).
  {
    SamplingSettings s = Defaults();
    s.short_kernel = Millis(1.0);
    rows.push_back({"a_short_first_launch_batches_at_once", s, {}, 0.5, 0.5, {0}, 0, 0.01,
                    StopReason::kStable, 12, 10});
  }
  // Throttled throughout: everything dropped, then give up.
  rows.push_back({"throttled_throughout_gives_up", With(10, 20, 0.01), {}, 1.0, 1.0, {0}, 1000,
                  0.01, StopReason::kThrottled, 0, 1, 84});
  // Throttled at first: those samples are dropped, the rest kept.
  rows.push_back({"throttled_samples_are_dropped", Defaults(), {}, 1.0, 1.0, {0}, 2, 0.01,
                  StopReason::kStable, 12, 1, 8});
  // Concurrent instances: a sample covers all of them; never batched.
  {
    CandidateSampling c;
    c.instances = 8;
    rows.push_back({"concurrent_samples_are_per_instance", Defaults(), c, 0.004, 0.004, {0}, 0,
                    0.01, StopReason::kStable, 12, 1});
  }
  // A pipeline: no batching, and the time cap waits for three passes.
  {
    CandidateSampling c;
    c.batching = false;
    c.time_cap_min_samples = 3;
    Row pipeline{"a_pipeline_waits_three_passes_for_the_cap", With(10, 1000, 0.0001, 5), c, 0.01,
                 0.01, {0, 0.5}, 0, 100, StopReason::kTimeCap, 3, 1};
    pipeline.one_at_a_time = true;
    rows.push_back(pipeline);
  }
  return rows;
}
// clang-format on

class SamplingPolicyTest : public ::testing::TestWithParam<Row> {};

TEST_P(SamplingPolicyTest, EndsAsTheProtocolSays) {
  const Row& row = GetParam();
  SamplingPolicy policy(row.settings, row.candidate);
  const Outcome o = Drive(policy, row);
  EXPECT_EQ(StopReasonName(o.reason), std::string(StopReasonName(row.reason)));
  EXPECT_EQ(o.kept, row.kept);
  EXPECT_EQ(o.launches_per_sample, row.launches_per_sample);
  EXPECT_EQ(o.discarded, row.discarded);
  EXPECT_EQ(o.restarts, row.restarts);
  EXPECT_EQ(policy.raced(), row.reason == StopReason::kRaced);
  for (int n : o.chunks) {
    EXPECT_GE(n, 1);
    EXPECT_LE(n, SamplingPolicy::kChunk);
  }
  // Kept samples are per launch and per instance.
  for (double v : o.samples) {
    EXPECT_GE(v, row.launch_ms * 0.5);
    EXPECT_LE(v, row.launch_ms * 1.5);
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, SamplingPolicyTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& row) { return row.param.name; });

TEST(SamplingPolicyTest, RacingTakesOnlyWhatItNeedsInTheFirstChunk) {
  SamplingPolicy racing(Defaults(), Best(1.0));
  racing.Begin(Millis(2));
  EXPECT_EQ(racing.NextChunk(), 3);  // racing_min_samples
  SamplingPolicy plain(Defaults(), {});
  plain.Begin(Millis(2));
  EXPECT_EQ(plain.NextChunk(), SamplingPolicy::kChunk);
}

// A rule of one's own: stop once five samples are in.
class FiveSamples final : public StoppingRule {
 public:
  StopReason Check(const SampleState& state) const override {
    return state.samples_ms.size() >= 5 ? StopReason::kRule : StopReason::kContinue;
  }
};

TEST(SamplingPolicyTest, TheStoppingRuleIsPluggable) {
  Row row{"five", With(100, 1000, 1e-9), {}, 1.0, 1.0, {0, 0.5}, 0, 0.01, StopReason::kRule, 8, 1};
  SamplingPolicy policy(row.settings, row.candidate, std::make_unique<FiveSamples>());
  const Outcome o = Drive(policy, row);
  EXPECT_EQ(o.reason, StopReason::kRule);
  EXPECT_EQ(o.kept, 8);  // two chunks of four: the rule looks after each
}

TEST(SamplingPolicyTest, LaunchesPerSampleFillAboutFiveTimesTheShortLimit) {
  EXPECT_EQ(LaunchesPerSample(Millis(0.02), 0.0078125f), 13);
  EXPECT_EQ(LaunchesPerSample(Millis(1.0), 0.5f), 10);
  EXPECT_EQ(LaunchesPerSample(Millis(0.02), 0.1f), 1);
  EXPECT_EQ(LaunchesPerSample(Millis(0.02), 0.0f), 1000);  // clamped
}

// The warm-up spun slice by slice, the clock read after each, as the
// worker does; returns the milliseconds spun.
double SpinWarmUp(double limit_ms, int max_clock_mhz, const std::vector<int>& clock_per_slice) {
  double spun = 0;
  for (std::size_t i = 0;; ++i) {
    const int clock = clock_per_slice[std::min(i, clock_per_slice.size() - 1)];
    const double slice = NextWarmUpSliceMs(spun, limit_ms, clock, max_clock_mhz);
    if (slice <= 0) return spun;
    spun += slice;
  }
}

TEST(SamplingPolicyTest, TheWarmUpEndsAtTheHighestClockOrItsLimit) {
  // A GPU clocking up reaches its highest clock after the third slice.
  EXPECT_EQ(SpinWarmUp(50, 1980, {345, 900, 1500, 1980}), 15);
  // Already at it (the reference just ran): one slice, never none.
  EXPECT_EQ(SpinWarmUp(50, 1980, {1980}), kWarmUpSliceMs);
  // Never at it (a power cap, application clocks): the whole limit.
  EXPECT_EQ(SpinWarmUp(50, 1980, {1755}), 50);
  // Without NVML nothing is known: the whole limit, the last slice short.
  EXPECT_EQ(SpinWarmUp(12, 0, {0}), 12);
  EXPECT_EQ(SpinWarmUp(50, 0, {1980}), 50);
  EXPECT_EQ(SpinWarmUp(50, 1980, {0}), 50);
  // No warm-up asked for.
  EXPECT_EQ(SpinWarmUp(0, 1980, {345}), 0);
  EXPECT_EQ(SpinWarmUp(-1, 1980, {345}), 0);
  EXPECT_EQ(SpinWarmUp(std::nan(""), 1980, {345}), 0);
}

}  // namespace
}  // namespace ktune
