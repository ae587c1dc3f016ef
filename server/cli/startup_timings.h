// ktune tune --timings: when each step of a local job's start was done,
// in milliseconds since the process started (exec), printed on stderr as
// the steps finish. The process's start is the kernel's record of it
// (/proc/self/stat), in clock ticks: the figures are good to one tick
// (10 ms on Linux's usual 100 Hz).
//
// Not thread-safe: the command's thread marks the steps.
#ifndef KTUNE_SERVER_CLI_STARTUP_TIMINGS_H_
#define KTUNE_SERVER_CLI_STARTUP_TIMINGS_H_

#include <optional>
#include <string>

namespace ktune::cli {

// Milliseconds since this process started, or nullopt where the system
// does not say when that was.
std::optional<double> MsSinceProcessStart();

class StartupTimings {
 public:
  // Off: Mark does nothing.
  explicit StartupTimings(bool on) : on_(on) {}
  // Prints "ktune: timings: STEP at N ms after the process started".
  void Mark(const std::string& step) const;

 private:
  bool on_;
};

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_STARTUP_TIMINGS_H_
