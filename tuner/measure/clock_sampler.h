// The GPU's SM clock and throttling, polled through NVML from a thread of
// its own, so the sampling loop reads them without calling NVML (whose
// calls can take a millisecond). Without NVML the clock reads 0 and the
// GPU never reads as throttled.
#ifndef KTUNE_TUNER_MEASURE_CLOCK_SAMPLER_H_
#define KTUNE_TUNER_MEASURE_CLOCK_SAMPLER_H_

#include <atomic>
#include <cstdint>
#include <thread>

#include "tuner/cuda/nvml.h"

namespace ktune {

// Start and Stop from one thread; the readers from any.
class ClockSampler {
 public:
  ClockSampler() = default;
  ~ClockSampler() { Stop(); }
  ClockSampler(const ClockSampler&) = delete;
  ClockSampler& operator=(const ClockSampler&) = delete;

  // Polls `nvml`'s GPU every 5 ms until Stop (a no-op if it is unavailable).
  void Start(Nvml nvml);
  void Stop();

  // The SM clock at the last poll, in MHz (0: unknown).
  int clock_mhz() const { return clock_mhz_.load(); }
  // Whether the last poll saw the GPU held down by heat or a slowdown.
  bool throttled_now() const { return throttled_now_.load(); }
  // Polls that saw the GPU throttled, since the start.
  std::uint64_t throttle_polls() const { return throttle_polls_.load(); }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{true};
  std::atomic<int> clock_mhz_{0};
  std::atomic<bool> throttled_now_{false};
  std::atomic<std::uint64_t> throttle_polls_{0};
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_CLOCK_SAMPLER_H_
