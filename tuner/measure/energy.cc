#include "tuner/measure/energy.h"

#include <chrono>
#include <deque>
#include <optional>
#include <thread>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Two chunks of launches in flight at all times: the GPU never waits for
// the host between them.
class Feeder {
 public:
  Feeder(const cuda::Api& api, CUstream s, CUevent ring[2],
         const std::function<CUresult()>& enqueue)
      : api_(api), s_(s), ring_(ring), enqueue_(enqueue) {}

  absl::Status Feed() {
    while (!pending_.empty()) {
      const CUresult q = api_.cuEventQuery(ring_[pending_.front()]);
      if (q == CUDA_ERROR_NOT_READY) break;
      KTUNE_RETURN_IF_ERROR(cuda::Check(api_, q, "running the kernel"));
      pending_.pop_front();
    }
    while (pending_.size() < 2) {
      const int next = pending_.empty() ? 0 : 1 - pending_.back();
      KTUNE_RETURN_IF_ERROR(cuda::Check(api_, enqueue_(), "cuLaunchKernel"));
      KTUNE_RETURN_IF_ERROR(
          cuda::Check(api_, api_.cuEventRecord(ring_[next], s_), "cuEventRecord"));
      pending_.push_back(next);
    }
    return absl::OkStatus();
  }
  absl::Status Drain() {
    return cuda::Check(api_, api_.cuStreamSynchronize(s_), "running the kernel");
  }

 private:
  const cuda::Api& api_;
  CUstream s_;
  CUevent* ring_;
  const std::function<CUresult()>& enqueue_;
  std::deque<int> pending_;
};

constexpr auto kPoll = std::chrono::microseconds(200);

}  // namespace

absl::StatusOr<EnergyReading> MeasureEnergy(const cuda::Api& api, const Nvml& nvml, CUstream s,
                                            CUevent ring[2],
                                            const std::function<CUresult()>& enqueue_chunk,
                                            double window_ms) {
  const bool counter = nvml.EnergyMillijoules().has_value();
  if (!counter && !nvml.PowerMilliwatts()) {
    return absl::FailedPreconditionError(
        "measurement.energy: NVML reads neither this GPU's energy counter nor its power");
  }
  Feeder feeder(api, s, ring, enqueue_chunk);
  KTUNE_RETURN_IF_ERROR(feeder.Feed());
  EnergyReading out;
  const Clock::time_point begin = Clock::now();
  const auto overtime = std::chrono::duration<double, std::milli>(kEnergyOvertime).count();
  if (counter) {
    out.method = "energy counter";
    // The window opens at an update of the counter, with the GPU busy.
    std::uint64_t first = *nvml.EnergyMillijoules(), last = first;
    Clock::time_point t0 = Clock::now(), t_last = t0;
    bool open = false;
    for (;;) {
      KTUNE_RETURN_IF_ERROR(feeder.Feed());
      std::this_thread::sleep_for(kPoll);
      const std::optional<std::uint64_t> now_mj = nvml.EnergyMillijoules();
      const Clock::time_point now = Clock::now();
      if (now_mj && *now_mj != last) {
        last = *now_mj;
        t_last = now;
        if (!open) {
          open = true;
          first = last;
          t0 = now;
        } else {
          ++out.updates;
        }
      }
      const bool enough =
          open && out.updates >= kEnergyUpdates && MsBetween(t0, t_last) >= window_ms;
      if (enough || MsBetween(begin, now) > window_ms + overtime) break;
    }
    KTUNE_RETURN_IF_ERROR(feeder.Drain());
    out.window_ms = MsBetween(t0, t_last);
    if (out.updates == 0 || out.window_ms <= 0) {
      return absl::FailedPreconditionError(
          StrCat("measurement.energy: the GPU's energy counter did not move within ",
                 static_cast<int>(window_ms + overtime), " ms"));
    }
    out.power_w = static_cast<double>(last - first) / out.window_ms;  // mJ / ms = W
    return out;
  }
  out.method = "power samples";
  double sum_mw = 0;
  int samples = 0;
  while (MsBetween(begin, Clock::now()) < window_ms) {
    KTUNE_RETURN_IF_ERROR(feeder.Feed());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (const std::optional<unsigned> mw = nvml.PowerMilliwatts()) {
      sum_mw += *mw;
      ++samples;
    }
  }
  KTUNE_RETURN_IF_ERROR(feeder.Drain());
  if (samples == 0) {
    return absl::FailedPreconditionError("measurement.energy: NVML gave no power reading");
  }
  out.window_ms = MsBetween(begin, Clock::now());
  out.power_w = sum_mw / samples / 1e3;
  return out;
}

}  // namespace ktune
