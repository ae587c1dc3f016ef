// The few NVML calls ktune needs (SM clock, clock-event reasons), loaded at
// run time from libnvidia-ml.so.1. Optional: without NVML, clocks read 0.
#ifndef KTUNE_TUNER_CUDA_NVML_H_
#define KTUNE_TUNER_CUDA_NVML_H_

#include <cstdint>
#include <string>

namespace ktune {

// One GPU's NVML handle. Not thread-safe; cheap to copy.
class Nvml {
 public:
  // Opens the GPU with this UUID ("GPU-..."); unavailable() if NVML or the
  // GPU cannot be found.
  static Nvml ForUuid(const std::string& uuid);

  bool available() const { return device_ != nullptr; }
  // Current SM clock in MHz, or 0.
  int SmClockMhz() const;
  // True if the clocks are held down by heat or a hardware slowdown now
  // (not by an ordinary power cap).
  bool Throttled() const;

 private:
  void* device_ = nullptr;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_CUDA_NVML_H_
