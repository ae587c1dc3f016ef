#include "server/cli/progress_line.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "server/cli/output.h"
#include "tuner/base/strings.h"

namespace ktune::cli {

std::string ProgressText(const Progress& p, std::uint64_t space_size) {
  const double wall = p.wall.count();
  const std::int64_t fresh = std::max<std::int64_t>(0, p.evaluations - p.replayed);
  const double rate = wall > 0 ? static_cast<double>(fresh) / wall : 0;
  std::string line = StrCat(p.evaluations);
  if (p.max_evaluations > 0) line += StrCat("/", p.max_evaluations);
  line += " evaluations";
  if (p.best_time_ms) line += StrCat("  best ", FormatMs(*p.best_time_ms), " (", p.best_key, ")");
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %.0f/s", rate);
  line += buf;
  // Time left: by the evaluation budget, the space size, or the time budget.
  std::optional<double> left;
  std::uint64_t target = space_size;
  if (p.max_evaluations > 0 && static_cast<std::uint64_t>(p.max_evaluations) < target) {
    target = static_cast<std::uint64_t>(p.max_evaluations);
  }
  if (rate > 0 && target != UINT64_MAX && target > static_cast<std::uint64_t>(p.evaluations)) {
    left = static_cast<double>(target - static_cast<std::uint64_t>(p.evaluations)) / rate;
  }
  if (p.max_time.count() > 0 && p.elapsed.count() > 0 && wall > 0) {
    const double by_time =
        (p.max_time - p.elapsed).count() / 1e3 * (wall / (p.elapsed.count() / 1e3));
    left = left ? std::min(*left, std::max(0.0, by_time)) : std::max(0.0, by_time);
  }
  if (left) {
    std::snprintf(buf, sizeof buf, "  ~%.0fs left", *left);
    line += buf;
  }
  return line;
}

ProgressLine::ProgressLine(std::uint64_t space_size)
    : tty_(isatty(STDERR_FILENO) == 1), space_size_(space_size) {}

void ProgressLine::Update(const Progress& p) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && p.evaluations > 1) return;
  last_ = now;
  std::fputs(StrCat("\r\033[K", ProgressText(p, space_size_)).c_str(), stderr);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::Finish() {
  if (shown_) std::fputs("\r\033[K", stderr);
}

}  // namespace ktune::cli
