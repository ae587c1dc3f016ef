// A job stopped exactly where a test wants it: a device double that lets a
// number of evaluations through, then says so and blocks for good, and a
// child process that runs a job on it through the pipeline `ktune tune
// --local` uses. The test then kills the child (SIGKILL, as a crash would)
// at a known point, instead of racing a running job.
#ifndef KTUNE_TESTS_TESTING_LATCH_DEVICE_H_
#define KTUNE_TESTS_TESTING_LATCH_DEVICE_H_

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/runner/job_run.h"
#include "server/runner/runner.h"
#include "tuner/device/device.h"
#include "tuner/store/store.h"

namespace ktune::testing {

// Evaluates through `inner` until `open` evaluations are done; the next
// Evaluate writes one byte to `ready_fd` and never returns.
class LatchDevice final : public Device {
 public:
  LatchDevice(std::unique_ptr<Device> inner, int open, int ready_fd)
      : inner_(std::move(inner)), open_(open), ready_fd_(ready_fd) {}

  const DeviceInfo& info() const override { return inner_->info(); }
  bool replays_recorded_time() const override { return inner_->replays_recorded_time(); }
  absl::Status Bind(const JobBinding& job) override { return inner_->Bind(job); }
  absl::StatusOr<Measurement> Evaluate(const Config& config) override {
    if (done_++ == open_) {
      const char byte = 'x';
      if (write(ready_fd_, &byte, 1) != 1) _exit(3);
      for (;;) pause();
    }
    return inner_->Evaluate(config);
  }

 private:
  std::unique_ptr<Device> inner_;
  int open_;
  int ready_fd_;
  int done_ = 0;
};

// Forks a child that runs `spec` (relative paths from the current folder)
// on the device `locator`, storing into `db`, until `open` evaluations are
// stored; returns the child's pid once it has stopped there (-1 if it
// failed first). The caller kills and reaps it.
inline pid_t RunJobInAChildUntil(const v1::JobSpec& spec, const std::string& locator,
                                 const std::string& db, int open) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    auto fail = [](const absl::Status& s) {
      std::fprintf(stderr, "RunJobInAChildUntil: %s\n", std::string(s.message()).c_str());
      _exit(2);
    };
    absl::StatusOr<std::unique_ptr<Device>> device = OpenDevice(locator, OpenDeviceOptions{});
    if (!device.ok()) fail(device.status());
    const Device* recording = device->get();  // a spec without a kernel replays it
    LatchDevice latch(*std::move(device), open, ready[1]);
    absl::StatusOr<JobRun> run = JobRun::Plan(spec, ".", recording);
    if (!run.ok()) fail(run.status());
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, true);
    if (!store.ok()) fail(store.status());
    absl::StatusOr<JobRunResult> result = run->Run(latch, **store, SessionOptions{});
    fail(result.ok() ? absl::InternalError("the job ended before the latch") : result.status());
  }
  close(ready[1]);
  char byte = 0;
  const bool stopped = pid > 0 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  if (!stopped && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_LATCH_DEVICE_H_
