// The scheduler driven from many threads at once, in this process and
// without gRPC, so ThreadSanitizer (the tsan preset) sees every access of
// the daemon's own threads: submits, watches, cancels and queries racing
// the jobs that run.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/daemon/scheduler.h"
#include "tests/testing/temp_dir.h"

namespace ktune {
namespace {

const std::string kConv =
    "sim:" + std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/convolution_milo_A100.json.gz";

// Collects a job's events until its last.
class Collector : public EventSink {
 public:
  void Deliver(const v1::JobEvent& event, bool last) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (event.has_measurement()) ++measurements_;
    if (event.has_state()) state_ = event.state();
    if (last) {
      done_ = true;
      cv_.notify_all();
    }
  }
  v1::JobState WaitForEnd() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return state_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int measurements_ = 0;
  v1::JobState state_ = v1::JOB_STATE_UNSPECIFIED;
};

v1::SubmitJobRequest Request(int evaluations, int seed) {
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_strategy()->set_name("random");
  req.mutable_spec()->mutable_strategy()->set_max_evaluations(evaluations);
  req.mutable_spec()->mutable_strategy()->set_seed(static_cast<std::uint64_t>(seed));
  return req;
}

TEST(SchedulerThreadsTest, SubmitWatchCancelAndQueryFromManyThreads) {
  const testing::TempDir tmp;
  SchedulerOptions so;
  so.db_path = tmp.File("k.db");
  so.devices = {kConv};
  so.limits.max_running = 2;
  Scheduler scheduler(so);
  ASSERT_TRUE(scheduler.Start().ok());
  std::atomic<int> succeeded{0};
  std::atomic<bool> failed{false};
  constexpr int kClients = 4;
  constexpr int kJobsEach = 3;  // the last of them cancelled
  std::vector<std::thread> clients;
  clients.reserve(kClients);
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int j = 0; j < kJobsEach; ++j) {
        absl::StatusOr<v1::SubmitJobResponse> job = scheduler.Submit(Request(20, 10 * t + j));
        if (!job.ok()) {
          failed = true;
          return;
        }
        auto sink = std::make_shared<Collector>();
        v1::WatchJobRequest w;
        w.set_job_id(job->job_id());
        w.set_from_start(j == 0);
        if (!scheduler.Watch(w, sink).ok()) failed = true;
        if (j == kJobsEach - 1) {
          v1::CancelJobRequest cancel;
          cancel.set_job_id(job->job_id());
          (void)scheduler.Cancel(cancel);  // it may have ended already
        }
        v1::GetJobRequest get;
        get.set_job_id(job->job_id());
        (void)scheduler.GetJob(get);
        (void)scheduler.ListJobs(v1::ListJobsRequest());
        v1::GetBestRequest best;
        best.set_kernel("convolution_kernel");
        (void)scheduler.GetBest(best);
        const v1::JobState end = sink->WaitForEnd();
        if (end == v1::SUCCEEDED) ++succeeded;
        if (end != v1::SUCCEEDED && !(j == kJobsEach - 1 && end == v1::CANCELLED)) failed = true;
      }
    });
  }
  for (std::thread& c : clients) c.join();
  scheduler.Shutdown();
  EXPECT_FALSE(failed);
  EXPECT_GE(succeeded.load(), kClients * (kJobsEach - 1));  // every job not cancelled
}

}  // namespace
}  // namespace ktune
