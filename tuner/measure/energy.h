// A candidate's energy, read through NVML while the candidate runs back to
// back: the average power over a window of at least `window_ms`, between
// two updates of the GPU's energy counter (so the counter's update period,
// not its timing, bounds the error), and over at least kEnergyUpdates of
// them; or, where the GPU has no energy counter, the mean of its power
// readings over the window. Read only: nothing is set on the GPU.
#ifndef KTUNE_TUNER_MEASURE_ENERGY_H_
#define KTUNE_TUNER_MEASURE_ENERGY_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/cuda/driver.h"
#include "tuner/cuda/nvml.h"

namespace ktune {

// Counter updates a window spans at the least: the first and last bound
// it, so a window of N updates is known to about 1/N of one update.
inline constexpr int kEnergyUpdates = 20;

struct EnergyReading {
  double power_w = 0;
  double window_ms = 0;
  int updates = 0;     // of the energy counter (0 with power samples)
  std::string method;  // "energy counter" or "power samples"
};

// Keeps the GPU busy with `enqueue_chunk` (a chunk of the candidate's
// launches on `s`, about 20 ms of work) two chunks deep, using events
// `ring[0]` and `ring[1]` to know when one is done, for the window, then
// waits for the chunks in flight. FAILED_PRECONDITION when NVML reads
// neither the energy nor the power of `nvml`'s GPU; a failed launch is
// the error of the call that failed.
absl::StatusOr<EnergyReading> MeasureEnergy(const cuda::Api& api, const Nvml& nvml, CUstream s,
                                            CUevent ring[2],
                                            const std::function<CUresult()>& enqueue_chunk,
                                            double window_ms);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_ENERGY_H_
