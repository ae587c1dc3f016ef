#include "server/daemon/fair_gate.h"

#include <algorithm>
#include <cmath>

namespace ktune {

FairGate::Member::Member(FairGate& gate, double weight)
    : gate_(gate), stride_(1.0 / std::max(weight, 1e-6)) {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  pass_ = gate_.virtual_time_;
  id_ = gate_.next_id_++;
}

FairGate::Member::~Member() {
  {
    std::lock_guard<std::mutex> lock(gate_.mu_);
    if (gate_.reserved_for_ != id_) return;
    gate_.reserved_for_ = kNobody;
  }
  gate_.cv_.notify_all();
}

std::size_t FairGate::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_.size();
}

void FairGate::AwaitWaiting(std::size_t n) const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return waiting_.size() >= n; });
}

void FairGate::Member::Acquire() {
  std::unique_lock<std::mutex> lock(gate_.mu_);
  // A job back from a pause (compiling, queued) does not get to spend the
  // turns it missed all at once.
  pass_ = std::max(pass_, gate_.virtual_time_);
  const std::pair<double, std::uint64_t> me{pass_, id_};
  gate_.waiting_.insert(me);
  gate_.cv_.notify_all();  // AwaitWaiting
  for (;;) {
    if (gate_.busy_ || *gate_.waiting_.begin() != me) {
      gate_.cv_.wait(lock);
    } else if (gate_.reserved_for_ != kNobody && gate_.reserved_for_ != id_ &&
               gate_.clock_.Now() < gate_.reserved_until_) {
      gate_.clock_.WaitUntil(gate_.cv_, lock, gate_.reserved_until_);  // held for a job owed turns
    } else {
      break;
    }
  }
  gate_.waiting_.erase(gate_.waiting_.begin());
  gate_.reserved_for_ = kNobody;
  gate_.busy_ = true;
  gate_.busy_since_ = gate_.clock_.Now();
  gate_.virtual_time_ = pass_;
  ++turns_;
}

void FairGate::Member::Release() {
  {
    std::lock_guard<std::mutex> lock(gate_.mu_);
    gate_.busy_ = false;
    gate_.busy_total_ += gate_.clock_.Now() - gate_.busy_since_;
    pass_ += stride_;
    // Still owed turns: the gate waits a moment for this member's next
    // candidate rather than going to a waiter with more service.
    if (!gate_.waiting_.empty() && gate_.waiting_.begin()->first > pass_) {
      gate_.reserved_for_ = id_;
      gate_.reserved_until_ = gate_.clock_.Now() + gate_.hold_;
    }
  }
  gate_.cv_.notify_all();
}

Clock::Duration FairGate::busy_time() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_total_ + (busy_ ? clock_.Now() - busy_since_ : Clock::Duration{});
}

double GateWeight(int priority) { return std::pow(2.0, std::clamp(priority, -4, 4)); }

namespace {

// Holds a member's turn for a scope.
class Turn {
 public:
  explicit Turn(FairGate::Member& m) : m_(m) { m_.Acquire(); }
  ~Turn() { m_.Release(); }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

 private:
  FairGate::Member& m_;
};

}  // namespace

absl::StatusOr<Measurement> GatedDevice::Evaluate(const Config& config) {
  Turn turn(member_);
  return inner_->Evaluate(config);
}

absl::StatusOr<std::vector<Measurement>> GatedDevice::Remeasure(
    const std::vector<Config>& configs) {
  Turn turn(member_);
  return inner_->Remeasure(configs);
}

}  // namespace ktune
