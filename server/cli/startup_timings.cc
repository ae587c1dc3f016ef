#include "server/cli/startup_timings.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace ktune::cli {

std::optional<double> MsSinceProcessStart() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: the fields
  // after it start past the last ')'. starttime is field 22, the 20th
  // after that parenthesis.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return std::nullopt;
    if (i == 22) start_ticks = std::stoull(field);
  }
  const long ticks_per_s = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (ticks_per_s <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return std::nullopt;
  const double now_ms = static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
  return now_ms - static_cast<double>(start_ticks) * 1e3 / static_cast<double>(ticks_per_s);
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
