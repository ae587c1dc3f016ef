#include "server/cli/startup_timings.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tuner/base/process.h"

namespace ktune::cli {

std::optional<double> MsSinceProcessStart() {
  const std::optional<ProcessName> self = ThisProcess();
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (!self || ticks_per_s <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
  // The kernel counts a process's start in ticks after boot.
  const double now_ms =
      static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
  return now_ms - static_cast<double>(self->start_ticks) * 1e3 / static_cast<double>(ticks_per_s);
}

void StartupTimings::Mark(const std::string& step) const {
  if (!on_) return;
  const std::optional<double> ms = MsSinceProcessStart();
  if (ms) {
    std::fprintf(stderr, "ktune: timings: %s at %.0f ms after the process started\n", step.c_str(),
                 *ms);
  } else {
    std::fprintf(stderr, "ktune: timings: %s (the process's start is unknown here)\n",
                 step.c_str());
  }
}

}  // namespace ktune::cli
