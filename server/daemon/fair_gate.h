// Fair turns on one GPU for several jobs: a job holds the gate for one
// candidate's timed evaluation at a time, so timed regions of different jobs
// never overlap, and each turn goes to the waiting job that has had the
// least service for its weight (stride scheduling), so no job starves. The
// gate never idles for a job that is not asking: between its candidates a
// job stores results and asks its strategy, so two busy jobs on one GPU in
// practice alternate, whatever their weights.
#ifndef KTUNE_SERVER_DAEMON_FAIR_GATE_H_
#define KTUNE_SERVER_DAEMON_FAIR_GATE_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "tuner/device/device.h"

namespace ktune {

class FairGate {
 public:
  // One job's place at the gate. Not thread-safe (one session uses it).
  class Member {
   public:
    Member(FairGate& gate, double weight);
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

    void Acquire();
    void Release();
    std::int64_t turns() const { return turns_; }

   private:
    FairGate& gate_;
    double stride_;
    double pass_;
    std::uint64_t id_;
    std::int64_t turns_ = 0;
  };

  FairGate() = default;
  FairGate(const FairGate&) = delete;
  FairGate& operator=(const FairGate&) = delete;

  // Members blocked in Acquire now.
  std::size_t waiting() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;
  double virtual_time_ = 0;  // the pass of the latest turn granted
  std::uint64_t next_id_ = 0;
  std::set<std::pair<double, std::uint64_t>> waiting_;
};

// A device whose evaluations take turns at a gate; everything else (binding,
// prefetching, compiling) runs freely.
class GatedDevice final : public Device {
 public:
  GatedDevice(std::unique_ptr<Device> inner, FairGate& gate, double weight)
      : inner_(std::move(inner)), member_(gate, weight) {}

  const DeviceInfo& info() const override { return inner_->info(); }
  bool replays_recorded_time() const override { return inner_->replays_recorded_time(); }
  absl::Status Bind(const JobBinding& job) override { return inner_->Bind(job); }
  absl::StatusOr<Measurement> Evaluate(const Config& config) override;
  int pipeline_depth() const override { return inner_->pipeline_depth(); }
  void Prefetch(const std::vector<Config>& configs) override { inner_->Prefetch(configs); }
  void Forget(const std::vector<Config>& configs) override { inner_->Forget(configs); }
  void NoteBest(Millis time) override { inner_->NoteBest(time); }
  bool Ready(const Config& config) override { return inner_->Ready(config); }
  bool can_remeasure() const override { return inner_->can_remeasure(); }
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override;

 private:
  std::unique_ptr<Device> inner_;
  FairGate::Member member_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_FAIR_GATE_H_
