#include "tuner/base/clock.h"

#include <algorithm>

namespace ktune {
namespace {

class RealClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) const override {
    return cv.wait_until(lock, deadline) == std::cv_status::no_timeout;
  }
};

}  // namespace

const Clock& Clock::Real() {
  static const RealClock clock;
  return clock;
}

Clock::TimePoint FakeClock::Now() const {
  std::lock_guard<std::mutex> g(mu_);
  return now_;
}

bool FakeClock::WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          TimePoint deadline) const {
  const std::pair<std::condition_variable*, std::mutex*> me{&cv, lock.mutex()};
  {
    std::lock_guard<std::mutex> g(mu_);
    if (now_ >= deadline) return false;
    waiting_.push_back(me);
  }
  changed_.notify_all();
  // Advance takes the waiter's mutex before notifying, so a deadline passed
  // between the check above and this wait is not missed.
  cv.wait(lock);
  std::lock_guard<std::mutex> g(mu_);
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), me));
  changed_.notify_all();
  return now_ < deadline;
}

void FakeClock::Advance(Duration d) {
  std::vector<std::pair<std::condition_variable*, std::mutex*>> wake;
  {
    std::lock_guard<std::mutex> g(mu_);
    now_ += d;
    wake = waiting_;
  }
  for (auto& [cv, mu] : wake) {
    { std::lock_guard<std::mutex> held(*mu); }
    cv->notify_all();
  }
}

int FakeClock::waiters() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<int>(waiting_.size());
}

void FakeClock::AwaitWaiters(int n) const {
  std::unique_lock<std::mutex> g(mu_);
  changed_.wait(g, [&] { return static_cast<int>(waiting_.size()) >= n; });
}

}  // namespace ktune
