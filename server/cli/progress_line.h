// The live progress line of `ktune tune` on a terminal, the same for a job
// run here and one followed on a daemon: evaluations (of the budget), the
// best so far, the rate of this run and the time left.
#ifndef KTUNE_SERVER_CLI_PROGRESS_LINE_H_
#define KTUNE_SERVER_CLI_PROGRESS_LINE_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "tuner/session/session.h"

namespace ktune::cli {

// The line's text for `p` (without the carriage return), for a space of
// `space_size` configurations (UINT64_MAX when unknown). The rate counts
// this run's evaluations: p.evaluations less p.replayed, over p.wall.
std::string ProgressText(const Progress& p, std::uint64_t space_size);

// Draws ProgressText on stderr, at most ten times a second, when stderr is
// a terminal. Not thread-safe.
class ProgressLine {
 public:
  explicit ProgressLine(std::uint64_t space_size);
  void Update(const Progress& p);
  // Clears the line, if one was drawn.
  void Finish();

 private:
  bool tty_;
  std::uint64_t space_size_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_PROGRESS_LINE_H_
