// What the GPU's energy counter resolves: polls NVML's total energy every
// 0.1 ms for SECONDS (default 3) and prints how often it moved and by how
// much (the period and step of its updates), and the power they imply.
// The GPU may be idle or busy; run a job beside it to see it under load.
//
//   energy_probe GPU_UUID [SECONDS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tuner/cuda/nvml.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: energy_probe GPU_UUID [SECONDS]\n");
    return 2;
  }
  const double seconds = argc > 2 ? std::atof(argv[2]) : 3.0;
  const ktune::Nvml nvml = ktune::Nvml::ForUuid(argv[1]);
  if (!nvml.available() || !nvml.EnergyMillijoules()) {
    std::fprintf(stderr, "energy_probe: NVML has no energy counter for %s\n", argv[1]);
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::uint64_t last = *nvml.EnergyMillijoules();
  Clock::time_point last_at = start;
  std::vector<double> periods_ms, steps_mj;
  while (Clock::now() - start < std::chrono::duration<double>(seconds)) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    const std::uint64_t now = nvml.EnergyMillijoules().value_or(last);
    if (now != last) {
      const Clock::time_point at = Clock::now();
      if (last_at != start) {
        periods_ms.push_back(std::chrono::duration<double, std::milli>(at - last_at).count());
        steps_mj.push_back(static_cast<double>(now - last));
      }
      last = now;
      last_at = at;
    }
  }
  if (periods_ms.size() < 3) {
    std::printf("the counter moved %zu times in %.1f s\n", periods_ms.size(), seconds);
    return 1;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  double total_mj = 0, total_ms = 0;
  for (std::size_t i = 0; i < steps_mj.size(); ++i) {
    total_mj += steps_mj[i];
    total_ms += periods_ms[i];
  }
  std::printf(
      "energy counter: %zu updates in %.1f s; period median %.2f ms (min %.2f, max %.2f); step "
      "median %.0f mJ (min %.0f, max %.0f); %.1f W on average; power reading %.1f W\n",
      periods_ms.size(), seconds, median(periods_ms),
      *std::min_element(periods_ms.begin(), periods_ms.end()),
      *std::max_element(periods_ms.begin(), periods_ms.end()), median(steps_mj),
      *std::min_element(steps_mj.begin(), steps_mj.end()),
      *std::max_element(steps_mj.begin(), steps_mj.end()), total_mj / total_ms,
      nvml.PowerMilliwatts().value_or(0) / 1e3);
  return 0;
}
