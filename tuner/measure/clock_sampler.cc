#include "tuner/measure/clock_sampler.h"

#include <chrono>

namespace ktune {

void ClockSampler::Start(Nvml nvml) {
  Stop();
  if (!nvml.available()) return;
  stop_ = false;
  thread_ = std::thread([this, nvml] {
    while (!stop_.load()) {
      clock_mhz_.store(nvml.SmClockMhz());
      const bool t = nvml.Throttled();
      throttled_now_.store(t);
      if (t) throttle_polls_.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
}

void ClockSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

}  // namespace ktune
