// How many samples a candidate gets, and how many launches make a sample:
// the benchmark protocol's decisions, apart from the GPU work that takes
// the samples, so they are tested on any machine.
//
// A candidate is sampled in chunks (several samples enqueued before one
// synchronisation). After each chunk the policy takes the chunk's times
// and says whether to go on. It drops samples taken while the GPU was
// throttled, decides short kernels' batching (several launches a sample),
// and asks its stopping rule whether the estimate is good enough: by
// default, a time cap, racing against the best so far, or a noise target.
// The rule is pluggable: a StoppingRule sees the samples so far and says
// whether, and why, to stop.
//
// Pure: no clocks (the caller says how long the candidate has taken), no
// GPU. Not thread-safe; one policy per candidate.
#ifndef KTUNE_TUNER_MEASURE_SAMPLING_POLICY_H_
#define KTUNE_TUNER_MEASURE_SAMPLING_POLICY_H_

#include <memory>
#include <span>
#include <vector>

#include "tuner/space/measurement.h"

namespace ktune {

// The job's sampling settings (WorkerSettings, in their units).
struct SamplingSettings {
  int min_samples = 10;
  int max_samples = 1000;
  double target_relative_noise = 0.01;  // standard error of the mean / mean
  Millis time_cap{1000};                // per candidate; 0: none
  double racing_factor = 1.05;          // 0: no racing
  int racing_min_samples = 3;
  // Below this a kernel gets several launches a sample; 0: never.
  Millis short_kernel{0.02};
};

// What this candidate brings to its sampling.
struct CandidateSampling {
  Millis best{0};                // best median so far; 0: none (no racing)
  bool no_racing = false;        // final contenders are never raced
  int min_samples = 0;           // overrides the settings' when > 0
  int instances = 0;             // CONCURRENT: a sample covers this many instances
  bool batching = true;          // several launches a sample allowed (kernels, not pipelines)
  int time_cap_min_samples = 1;  // the time cap stops only after this many
};

// Why sampling stopped.
enum class StopReason {
  kContinue,    // not stopped
  kMaxSamples,  // the settings' maximum was reached
  kTimeCap,     // the candidate's time cap was spent
  kRaced,       // clearly slower than the best so far
  kStable,      // the mean is as stable as asked
  kThrottled,   // the GPU was throttled throughout: too many samples dropped
  kRule,        // a plugged-in rule's own reason
};
const char* StopReasonName(StopReason reason);

// What a stopping rule sees.
struct SampleState {
  std::span<const double> samples_ms;  // per launch, kept samples, in order
  Millis elapsed{0};                   // the candidate's time so far
};

// Decides when a candidate has samples enough. Implementations are pure.
class StoppingRule {
 public:
  virtual ~StoppingRule() = default;
  // kContinue, or why to stop now.
  virtual StopReason Check(const SampleState& state) const = 0;
};

// The standard rule: the time cap once `time_cap_min_samples` are in, then
// racing (the first quartile over racing_factor times the best, once
// racing_min_samples are in), then the noise target once min_samples are in.
std::unique_ptr<StoppingRule> StandardStoppingRule(const SamplingSettings& settings,
                                                   const CandidateSampling& candidate);

// The fewest samples a candidate gets (unless a cap or racing stops it):
// the candidate's override, else the settings', at least 1.
int MinSamplesOf(const SamplingSettings& settings, const CandidateSampling& candidate);

// Launches a sample for a kernel of `ms` below the short-kernel limit:
// enough for a sample of about five times that limit (1 to 1000).
int LaunchesPerSample(Millis short_kernel, float ms);

// The busy warm-up before samples, in slices: how long the next slice
// spins after `spun_ms` of at most `limit_ms`, 0 when the warm-up is done.
// It is done once `limit_ms` is spun, or after at least one slice once the
// SM clock reads its maximum (`clock_mhz` >= `max_clock_mhz`, both known:
// not 0), since then the GPU is no longer clocking up.
inline constexpr double kWarmUpSliceMs = 5;
double NextWarmUpSliceMs(double spun_ms, double limit_ms, int clock_mhz, int max_clock_mhz);

class SamplingPolicy {
 public:
  // What to do after a chunk.
  enum class Next {
    kMore,     // take another chunk
    kRestart,  // the batching changed: earlier samples were dropped, take them again
    kDone,     // stop; see reason()
  };

  // Samples enqueued before one synchronisation.
  static constexpr int kChunk = 4;

  // `rule` null: StandardStoppingRule.
  SamplingPolicy(const SamplingSettings& settings, const CandidateSampling& candidate,
                 std::unique_ptr<StoppingRule> rule = nullptr);

  // Called with the untimed first launch's time: decides the launches per
  // sample (a kernel that looks short on a cold first launch is decided on
  // by its first chunk instead). Returns launches_per_sample().
  int Begin(Millis first_launch);

  // Samples to enqueue now (0: done). The first chunk stops where racing
  // can first decide.
  int NextChunk() const;

  // The chunk's times, one per sample as timed (covering
  // launches_per_sample() launches and all instances), and whether the GPU
  // was throttled while it ran; `elapsed` is the candidate's time so far.
  Next Add(std::span<const double> chunk_ms, bool throttled, Millis elapsed);

  int launches_per_sample() const { return per_sample_; }
  int min_samples() const { return min_samples_; }
  int max_samples() const { return max_samples_; }
  bool racing() const { return racing_; }
  // Kept samples, per launch (per instance when concurrent).
  const std::vector<double>& samples() const { return samples_; }
  int discarded() const { return discarded_; }
  StopReason reason() const { return reason_; }
  bool raced() const { return reason_ == StopReason::kRaced; }

 private:
  SamplingSettings settings_;
  CandidateSampling candidate_;
  std::unique_ptr<StoppingRule> rule_;
  int min_samples_;
  int max_samples_;
  bool racing_;
  bool undecided_ = false;  // batching decided by the first chunk
  int per_sample_ = 1;
  std::vector<double> samples_;
  int discarded_ = 0;
  StopReason reason_ = StopReason::kContinue;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_SAMPLING_POLICY_H_
