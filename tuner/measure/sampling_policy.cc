#include "tuner/measure/sampling_policy.h"

#include <algorithm>
#include <cmath>

namespace ktune {
namespace {

bool Racing(const SamplingSettings& settings, const CandidateSampling& candidate) {
  return !candidate.no_racing && settings.racing_factor > 0 && candidate.best.count() > 0;
}

class StandardRule final : public StoppingRule {
 public:
  StandardRule(const SamplingSettings& settings, const CandidateSampling& candidate)
      : settings_(settings),
        best_(candidate.best),
        racing_(Racing(settings, candidate)),
        min_samples_(MinSamplesOf(settings, candidate)),
        cap_min_samples_(candidate.time_cap_min_samples) {}

  StopReason Check(const SampleState& state) const override {
    const int count = static_cast<int>(state.samples_ms.size());
    if (settings_.time_cap.count() > 0 && state.elapsed > settings_.time_cap &&
        count >= cap_min_samples_) {
      return StopReason::kTimeCap;
    }
    if (racing_ && count >= std::max(1, settings_.racing_min_samples)) {
      std::vector<double> sorted(state.samples_ms.begin(), state.samples_ms.end());
      std::sort(sorted.begin(), sorted.end());
      if (Quantile(sorted, 0.25) > settings_.racing_factor * best_.count()) {
        return StopReason::kRaced;
      }
    }
    if (count >= min_samples_ &&
        RelativeStandardError(state.samples_ms) < settings_.target_relative_noise) {
      return StopReason::kStable;
    }
    return StopReason::kContinue;
  }

 private:
  SamplingSettings settings_;
  Millis best_;
  bool racing_;
  int min_samples_;
  int cap_min_samples_;
};

}  // namespace

int MinSamplesOf(const SamplingSettings& settings, const CandidateSampling& candidate) {
  return std::max(1, candidate.min_samples > 0 ? candidate.min_samples : settings.min_samples);
}

const char* StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kContinue: return "continue";
    case StopReason::kMaxSamples: return "max_samples";
    case StopReason::kTimeCap: return "time_cap";
    case StopReason::kRaced: return "raced";
    case StopReason::kStable: return "stable";
    case StopReason::kThrottled: return "throttled";
    case StopReason::kRule: return "rule";
  }
  return "?";
}

std::unique_ptr<StoppingRule> StandardStoppingRule(const SamplingSettings& settings,
                                                   const CandidateSampling& candidate) {
  return std::make_unique<StandardRule>(settings, candidate);
}

double NextWarmUpSliceMs(double spun_ms, double limit_ms, int clock_mhz, int max_clock_mhz) {
  if (!(limit_ms > spun_ms)) return 0;  // NaN limits too
  if (spun_ms > 0 && max_clock_mhz > 0 && clock_mhz >= max_clock_mhz) return 0;
  return std::min(kWarmUpSliceMs, limit_ms - spun_ms);
}

int LaunchesPerSample(Millis short_kernel, float ms) {
  const int n = static_cast<int>(std::ceil(5 * short_kernel.count() / std::max(ms, 1e-4f)));
  return std::clamp(n, 1, 1000);
}

SamplingPolicy::SamplingPolicy(const SamplingSettings& settings, const CandidateSampling& candidate,
                               std::unique_ptr<StoppingRule> rule)
    : settings_(settings),
      candidate_(candidate),
      rule_(rule != nullptr ? std::move(rule) : StandardStoppingRule(settings, candidate)),
      min_samples_(MinSamplesOf(settings, candidate)),
      max_samples_(std::max(min_samples_, settings.max_samples)),
      racing_(Racing(settings, candidate)) {}

int SamplingPolicy::Begin(Millis first_launch) {
  const auto first_ms = static_cast<float>(first_launch.count());
  const bool batching =
      candidate_.batching && candidate_.instances <= 0 && settings_.short_kernel.count() > 0;
  // The first launch after loading carries one-time costs: a kernel that
  // looks short is decided on by its first chunk of samples instead.
  undecided_ = batching && first_ms < 0.25f;
  per_sample_ = 1;
  if (batching && !undecided_ && first_ms < settings_.short_kernel.count()) {
    per_sample_ = LaunchesPerSample(settings_.short_kernel, first_ms);
  }
  return per_sample_;
}

int SamplingPolicy::NextChunk() const {
  if (reason_ != StopReason::kContinue) return 0;
  const int chunk =
      samples_.empty() && racing_ ? std::clamp(settings_.racing_min_samples, 1, kChunk) : kChunk;
  return std::max(0, std::min(chunk, max_samples_ - static_cast<int>(samples_.size())));
}

SamplingPolicy::Next SamplingPolicy::Add(std::span<const double> chunk_ms, bool throttled,
                                         Millis elapsed) {
  const int instances = candidate_.instances > 0 ? candidate_.instances : 1;
  if (throttled) {
    discarded_ += static_cast<int>(chunk_ms.size());
  } else {
    for (double ms : chunk_ms) samples_.push_back(ms / per_sample_ / instances);
  }
  if (discarded_ > 4 * max_samples_) {
    reason_ = StopReason::kThrottled;
    return Next::kDone;
  }
  if (undecided_ && !samples_.empty()) {
    undecided_ = false;
    std::vector<double> first(samples_);
    std::nth_element(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(first.size() / 2),
                     first.end());
    const double median = first[first.size() / 2];
    if (median < settings_.short_kernel.count()) {
      per_sample_ = LaunchesPerSample(settings_.short_kernel, static_cast<float>(median));
      samples_.clear();
      return Next::kRestart;
    }
  }
  if (static_cast<int>(samples_.size()) >= max_samples_) {
    reason_ = StopReason::kMaxSamples;
    return Next::kDone;
  }
  const StopReason r = rule_->Check(SampleState{samples_, elapsed});
  if (r != StopReason::kContinue) {
    reason_ = r;
    return Next::kDone;
  }
  return Next::kMore;
}

}  // namespace ktune
