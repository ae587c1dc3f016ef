// Time as ktune reads it for budgets, turns and limits: the steady clock,
// behind an interface, so tests drive time by hand (FakeClock) instead of
// sleeping and hoping.
#ifndef KTUNE_TUNER_BASE_CLOCK_H_
#define KTUNE_TUNER_BASE_CLOCK_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace ktune {

// Implementations are thread-safe.
class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;

  virtual TimePoint Now() const = 0;

  // Waits on `cv` (`lock` held, as for condition_variable::wait_until)
  // until notified or until this clock reads `deadline`. Returns false when
  // the deadline has passed. Like any wait it may return early: callers
  // re-check their condition.
  virtual bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         TimePoint deadline) const = 0;

  // The steady clock of the machine.
  static const Clock& Real();
};

// A clock that moves only when told. Waiters at a deadline are woken when
// Advance passes it (and by their condition variable's own notifications).
class FakeClock final : public Clock {
 public:
  FakeClock() = default;
  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  TimePoint Now() const override;
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 TimePoint deadline) const override;

  void Advance(Duration d);
  // Threads in WaitUntil now.
  int waiters() const;
  // Blocks until at least `n` threads wait on this clock: a test's way to
  // know the threads it drives have reached their wait.
  void AwaitWaiters(int n) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;  // waiters come and go
  TimePoint now_{std::chrono::hours(1)};
  mutable std::vector<std::pair<std::condition_variable*, std::mutex*>> waiting_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_CLOCK_H_
