// The few NVML calls ktune needs (SM clock, clock-event reasons, the energy
// counter and power), loaded at run time from libnvidia-ml.so.1. Optional:
// without NVML, clocks read 0 and energy cannot be measured. Read only:
// ktune never sets clocks, power limits or modes.
#ifndef KTUNE_TUNER_CUDA_NVML_H_
#define KTUNE_TUNER_CUDA_NVML_H_

#include <chrono>
#include <cstdint>
#include <optional>
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
  // The highest SM clock the GPU runs at (its boost clock) in MHz, or 0.
  int MaxSmClockMhz() const;
  // True if the clocks are held down by heat or a hardware slowdown now
  // (not by an ordinary power cap).
  bool Throttled() const;
  // The GPU's energy counter (since the driver loaded), in millijoules;
  // nullopt where the GPU has none.
  std::optional<std::uint64_t> EnergyMillijoules() const;
  // The board's power draw as NVML reports it, in milliwatts; nullopt
  // where it cannot.
  std::optional<unsigned> PowerMilliwatts() const;

 private:
  void* device_ = nullptr;
};

// How long a candidate's energy measurement may wait past its window for
// the energy counter's updates before it settles for those it saw.
inline constexpr std::chrono::milliseconds kEnergyOvertime{10000};

}  // namespace ktune

#endif  // KTUNE_TUNER_CUDA_NVML_H_
