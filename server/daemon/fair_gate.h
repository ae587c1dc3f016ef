// Fair turns on one GPU for several jobs: a job holds the gate for one
// candidate's timed evaluation at a time, so timed regions of different jobs
// never overlap, and each turn goes to the waiting job that has had the
// least service for its weight (stride scheduling), so no job starves.
// Between its candidates a job stores results and asks its strategy, so it
// is briefly not waiting; a job that releases the gate while still owed
// turns (its pass below every waiter's) keeps the gate for up to `hold`,
// so two busy jobs share the GPU by their weights instead of alternating.
// A job that does not come back within the hold loses nothing but that
// turn's priority; the gate idles at most `hold` for it.
#ifndef KTUNE_SERVER_DAEMON_FAIR_GATE_H_
#define KTUNE_SERVER_DAEMON_FAIR_GATE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "tuner/base/clock.h"
#include "tuner/device/device.h"

namespace ktune {

class FairGate {
 public:
  // One job's place at the gate. Not thread-safe (one session uses it).
  class Member {
   public:
    Member(FairGate& gate, double weight);
    ~Member();
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

  // `clock` must outlive the gate.
  explicit FairGate(std::chrono::microseconds hold = std::chrono::milliseconds(2),
                    const Clock& clock = Clock::Real())
      : hold_(hold), clock_(clock) {}
  FairGate(const FairGate&) = delete;
  FairGate& operator=(const FairGate&) = delete;

  // Members blocked in Acquire now.
  std::size_t waiting() const;
  // How long the gate has been held (a member's timed evaluation), in all,
  // by the gate's clock: its GPU's busy time.
  Clock::Duration busy_time() const;
  // Blocks until at least `n` members are blocked in Acquire (for tests
  // that drive members from threads).
  void AwaitWaiting(std::size_t n) const;

 private:
  static constexpr std::uint64_t kNobody = ~std::uint64_t{0};

  const std::chrono::microseconds hold_;
  const Clock& clock_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool busy_ = false;
  Clock::TimePoint busy_since_;           // while busy_
  Clock::Duration busy_total_{};          // of the turns that ended
  std::uint64_t reserved_for_ = kNobody;  // a member that is owed the next turn
  Clock::TimePoint reserved_until_;
  double virtual_time_ = 0;  // the pass of the latest turn granted
  std::uint64_t next_id_ = 0;
  std::set<std::pair<double, std::uint64_t>> waiting_;
};

// A job's weight at a gate for its priority: 2^priority, priorities
// beyond +-4 counting as +-4.
double GateWeight(int priority);

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
  std::int64_t worker_restarts() const override { return inner_->worker_restarts(); }
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override;

 private:
  std::unique_ptr<Device> inner_;
  FairGate::Member member_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_FAIR_GATE_H_
