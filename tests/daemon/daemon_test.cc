// The daemon over loopback: jobs submitted, watched, scheduled, cancelled,
// killed and resumed (requests it refuses are daemon_requests_test.cc's).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/daemon/daemon_fixture.h"
#include "tuner/base/json.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

TEST_F(DaemonTest, RemoteSessionSubmitWatchBestAndHeader) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  const RunResult tuned = Cli({"tune", "--max-evals", "40", "--seed", "3", "--wait",
                               "--emit-header", File("best.h"), "--emit-json", File("best.json")});
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  EXPECT_THAT(tuned.out, HasSubstr("evaluated 40"));
  const std::string header = Slurp(File("best.h"));
  EXPECT_THAT(header, HasSubstr("#define block_size_x "));
  EXPECT_THAT(header, HasSubstr("// Device: NVIDIA A100-PCIE-40GB"));
  EXPECT_THAT(header, HasSubstr("#ifndef KTUNE_TUNED_CONVOLUTION_KERNEL_H_"));
  absl::StatusOr<Json> result = ParseJson(Slurp(File("best.json")));
  ASSERT_TRUE(result.ok());
  const std::string id = result->Find("job_id")->as_string();
  const double best_ms = result->Find("best")->Find("time_ms")->as_double();

  // The same job run locally, with the same budget and seed, finds the same
  // best: the daemon runs the session the command line runs.
  const std::string local_out = File("local.out"), local_err = File("local.err");
  ASSERT_EQ(Wait(Spawn(KTUNE_CLI_PATH,
                       {"tune", "--local", "--device", kConv, "--max-evals", "40", "--seed", "3",
                        "--db", File("local.db"), "--json"},
                       local_out, local_err)),
            0)
      << Slurp(local_err);
  absl::StatusOr<Json> local = ParseJson(Slurp(local_out));
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->Find("best")->Dump(), result->Find("best")->Dump());
  EXPECT_EQ(local->Find("job_id")->as_string(), id);  // one identity, local or remote

  const RunResult best = Cli({"best", "--kernel", "convolution_kernel", "--json"});
  ASSERT_EQ(best.code, 0) << best.err;
  absl::StatusOr<Json> b = ParseJson(best.out);
  ASSERT_TRUE(b.ok()) << best.out;
  const Json& first = b->Find("results")->as_array()[0];
  EXPECT_EQ(first.Find("match")->as_string(), "exact");
  EXPECT_DOUBLE_EQ(first.Find("time_ms")->as_double(), best_ms);

  // A problem never tuned falls back to the nearest one, and says so.
  grpc::ClientContext ctx;
  Deadline(ctx);
  v1::GetBestRequest req;
  req.set_kernel("convolution_kernel");
  (*req.mutable_problem())["problem_size_x"] = 2048;
  (*req.mutable_problem())["problem_size_y"] = 2048;
  v1::GetBestResponse resp;
  ASSERT_TRUE(stub_->GetBest(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.match(), v1::GetBestResponse::NEAREST_PROBLEM);
  EXPECT_EQ(resp.problem().at("problem_size_x"), 4096);
  EXPECT_GT(resp.problem_distance(), 0);
  EXPECT_EQ(resp.job_id(), id);

  const RunResult jobs = Cli({"jobs", "--json"});
  ASSERT_EQ(jobs.code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr(id));
  const RunResult show = Cli({"show", id.substr(0, 6), "--json"});
  ASSERT_EQ(show.code, 0) << show.err;
  absl::StatusOr<Json> shown = ParseJson(show.out);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ(shown->Find("measurements")->as_array().size(), 40u);
  const RunResult devices = Cli({"devices"});
  EXPECT_THAT(devices.out, HasSubstr("NVIDIA A100-PCIE-40GB"));

  // Watching the finished job: its measurements, then its state, once.
  const RunResult watched = Cli({"watch", id, "--from-start"});
  EXPECT_EQ(watched.code, 0) << watched.err;
  EXPECT_EQ(std::count(watched.out.begin(), watched.out.end(), '\n'), 41) << watched.out;
  EXPECT_THAT(watched.out, ::testing::EndsWith("state     succeeded\n"));
  EXPECT_EQ(watched.out.find("state "), watched.out.rfind("state ")) << watched.out;

  // Submitting the same job again resumes it: nothing is measured twice.
  const RunResult again = Cli({"tune", "--max-evals", "40", "--seed", "3", "--wait", "--json"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("resumed"));
  EXPECT_EQ(Get(id, true).measurements_size(), 40);
}

// On a terminal, a job followed on the daemon draws the line a job run
// here draws: evaluations of the budget, the best so far, the rate, the
// time left.
TEST_F(DaemonTest, TheProgressLineIsTheSameHereAndOnTheDaemon) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--sim-speed", "100"}));
  int code = -1;
  const std::string remote = testing::RunInTerminal(
      KTUNE_CLI_PATH, {"--server", address_, "tune", "--max-evals", "60", "--seed", "5", "--wait"},
      &code);
  EXPECT_EQ(code, 0) << remote;
  const std::string local =
      testing::RunInTerminal(KTUNE_CLI_PATH,
                             {"tune", "--local", "--device", kConv, "--sim-speed", "100",
                              "--max-evals", "60", "--seed", "5", "--db", File("local.db")},
                             &code);
  EXPECT_EQ(code, 0) << local;
  const std::regex line(
      R"(\r\x1b\[K\d+/60 evaluations  best [0-9.]+ ms \([0-9,]+\)  \d+/s  ~\d+s left)");
  EXPECT_TRUE(std::regex_search(local, line)) << local;
  EXPECT_TRUE(std::regex_search(remote, line)) << remote;
}

TEST_F(DaemonTest, ConcurrentClientsSubmitWatchAndQuery) {
  ASSERT_TRUE(StartDaemon(
      {"--device", kConv, "--device", kPnpoly, "--max-running", "3", "--sim-speed", "20000"}));
  constexpr int kSubmitters = 8, kQueriers = 8;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::string> ids(kSubmitters);
  std::vector<std::thread> threads;
  threads.reserve(kSubmitters);
  for (int i = 0; i < kSubmitters; ++i) {
    threads.emplace_back([&, i] {
      v1::JobSpec spec = Budget(30, 100 + i, i % 2 == 0 ? "random" : "genetic");
      spec.mutable_device()->add_devices(i % 2 == 0 ? kConv : kPnpoly);
      v1::SubmitJobResponse resp;
      if (!Submit(spec, &resp, i % 3).ok()) {
        ++failures;
        return;
      }
      ids[i] = resp.job_id();
      std::vector<v1::JobEvent> events;
      if (Follow(resp.job_id(), &events, /*from_start=*/true) != v1::SUCCEEDED) ++failures;
      std::set<std::int64_t> seqs;
      for (const v1::JobEvent& e : events) {
        if (e.has_measurement() && !seqs.insert(e.measurement().sequence()).second) ++failures;
      }
      if (seqs.size() != 30u) ++failures;  // every measurement, once, in the stream
    });
  }
  for (int i = 0; i < kQueriers; ++i) {
    threads.emplace_back([&, i] {
      while (!done.load()) {
        grpc::ClientContext ctx;
        Deadline(ctx);
        v1::GetBestRequest req;
        req.set_kernel(i % 2 == 0 ? "convolution_kernel" : "cn_pnpoly");
        v1::GetBestResponse resp;
        const grpc::Status s = stub_->GetBest(&ctx, req, &resp);
        // Before the first result there is nothing to find.
        if (!s.ok() && s.error_code() != grpc::StatusCode::NOT_FOUND) ++failures;
      }
    });
  }
  for (int i = 0; i < kSubmitters; ++i) threads[static_cast<std::size_t>(i)].join();
  done.store(true);
  for (std::size_t i = kSubmitters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(failures.load(), 0);
  for (const std::string& id : ids) {
    const v1::Job job = Get(id, true);
    EXPECT_EQ(job.state(), v1::SUCCEEDED);
    std::set<std::string> keys;
    for (const auto& m : job.measurements()) keys.insert(m.config().key());
    EXPECT_EQ(keys.size(), 30u) << id;
  }
}

TEST_F(DaemonTest, EveryWatchEndsEvenAsTheJobEnds) {
  // Watchers open streams over and over while the job runs and ends; each
  // stream must close with the job's final state, including one opened in
  // the moment between the job's last event and its leaving the scheduler.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--sim-speed", "2000"}));
  constexpr int kWatchers = 4, kRounds = 30;
  std::atomic<int> hung{0}, ended_streams{0};
  for (int round = 0; round < kRounds; ++round) {
    v1::SubmitJobResponse job;
    ASSERT_TRUE(Submit(Budget(8, 500 + round), &job).ok());
    std::vector<std::thread> watchers;
    watchers.reserve(kWatchers);
    for (int i = 0; i < kWatchers; ++i) {
      watchers.emplace_back([&] {
        for (bool ended = false; !ended;) {
          grpc::ClientContext ctx;
          Deadline(ctx, 20);
          v1::WatchJobRequest req;
          req.set_job_id(job.job_id());
          auto reader = stub_->WatchJob(&ctx, req);
          v1::JobEvent ev;
          v1::JobState first = v1::JOB_STATE_UNSPECIFIED, last = first;
          while (reader->Read(&ev)) {
            if (ev.event_case() != v1::JobEvent::kState) continue;
            if (first == v1::JOB_STATE_UNSPECIFIED) first = ev.state();
            last = ev.state();
          }
          if (!reader->Finish().ok() || last != v1::SUCCEEDED) {
            ++hung;
            return;
          }
          ++ended_streams;
          ended = first == v1::SUCCEEDED;  // opened after the end
        }
      });
    }
    for (std::thread& t : watchers) t.join();
  }
  EXPECT_EQ(hung.load(), 0);
  EXPECT_GE(ended_streams.load(), kRounds * kWatchers);
}

TEST_F(DaemonTest, ARememberedBestGivesWayToABetterResult) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  v1::SubmitJobResponse small, large;
  ASSERT_TRUE(Submit(Budget(3, 7), &small).ok());
  ASSERT_EQ(Follow(small.job_id()), v1::SUCCEEDED);
  const double first = BestConvolutionMs();
  ASSERT_TRUE(Submit(Budget(300, 8), &large).ok());
  ASSERT_EQ(Follow(large.job_id()), v1::SUCCEEDED);
  const double later = BestConvolutionMs();
  EXPECT_LT(later, first);
  EXPECT_DOUBLE_EQ(later, Get(large.job_id()).best().time_ms());
}

TEST_F(DaemonTest, JobsOnOneDeviceTakeTurns) {
  // Two jobs at once on one simulated GPU, each candidate about 25 ms of
  // replayed time: their measurements interleave rather than run one job
  // after the other.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "2", "--sim-speed", "40"}));
  v1::SubmitJobResponse a, b;
  ASSERT_TRUE(Submit(Budget(25, 1), &a).ok());
  ASSERT_TRUE(Submit(Budget(25, 2), &b).ok());
  EXPECT_EQ(Follow(a.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Follow(b.job_id()), v1::SUCCEEDED);
  auto range = [&](const std::string& id) {
    std::int64_t lo = INT64_MAX, hi = 0;
    const v1::Job job = Get(id, true);
    for (const auto& m : job.measurements()) {
      const std::int64_t t = m.measured_at().seconds() * 1000 + m.measured_at().nanos() / 1000000;
      lo = std::min(lo, t);
      hi = std::max(hi, t);
    }
    return std::make_pair(lo, hi);
  };
  ASSERT_EQ(Get(a.job_id(), true).measurements_size(), 25);
  const auto ra = range(a.job_id()), rb = range(b.job_id());
  EXPECT_LT(rb.first, ra.second);
  EXPECT_LT(ra.first, rb.second);
}

TEST_F(DaemonTest, AJobsPriorityIsKeptAndBothJobsRun) {
  // Two jobs at once on one simulated GPU, one at priority 2: it weighs 4
  // at the GPU's gate (how turns follow weights is the fair gate's test).
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "2", "--sim-speed", "400"}));
  v1::SubmitJobResponse low, high;
  ASSERT_TRUE(Submit(Budget(30, 1), &low, 0).ok());
  ASSERT_TRUE(Submit(Budget(30, 2), &high, 2).ok());
  EXPECT_EQ(Follow(low.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Follow(high.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Get(high.job_id()).priority(), 2);
  EXPECT_EQ(Get(low.job_id()).priority(), 0);
  EXPECT_EQ(Get(high.job_id(), true).measurements_size(), 30);
}

TEST_F(DaemonTest, SeveralDevices) {
  // Two devices of one model (two copies of a recording) and another model.
  const std::string copy = File("conv_copy.json.gz");
  {
    std::ifstream in(kRecorded + "convolution_milo_A100.json.gz", std::ios::binary);
    std::ofstream(copy, std::ios::binary) << in.rdbuf();
  }
  ASSERT_TRUE(StartDaemon({"--devices", kConv + ",sim:" + copy, "--device", kPnpoly,
                           "--max-running", "4", "--sim-speed", "400"}));
  // A job over both devices of the model: each measurement names the one
  // that took it, and both took some.
  v1::JobSpec spread = Budget(40, 3);
  spread.mutable_device()->add_devices(kConv);
  spread.mutable_device()->add_devices("sim:" + copy);
  v1::SubmitJobResponse s;
  ASSERT_TRUE(Submit(spread, &s).ok());
  EXPECT_EQ(Follow(s.job_id()), v1::SUCCEEDED);
  std::map<std::string, int> by_device;
  const v1::Job job = Get(s.job_id(), true);
  EXPECT_EQ(job.measurements_size(), 40);
  for (const auto& m : job.measurements()) ++by_device[m.conditions().device()];
  EXPECT_GT(by_device[kConv], 0);
  EXPECT_GT(by_device["sim:" + copy], 0);
  // Two models never make one job.
  v1::JobSpec mixed = Budget(10, 1);
  mixed.mutable_device()->add_devices(kConv);
  mixed.mutable_device()->add_devices(kPnpoly);
  v1::SubmitJobResponse m;
  const grpc::Status refused = Submit(mixed, &m);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("are not the same model"));
  // Jobs that name no device go to the least busy one.
  std::set<std::string> placed;
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::JobSpec spec = Budget(200, 10 + i);
    v1::SubmitJobResponse r;
    ASSERT_TRUE(Submit(spec, &r).ok());
    ids.push_back(r.job_id());
    placed.insert(Get(r.job_id()).spec().device().devices(0));
  }
  EXPECT_EQ(placed.size(), 3u);
  for (const std::string& id : ids) Follow(id);

  // The devices' table: every column starts where its heading does, with
  // ids (recordings' paths) longer than any fixed width.
  const RunResult devices = Cli({"devices"});
  ASSERT_EQ(devices.code, 0) << devices.err;
  std::istringstream lines(devices.out);
  std::string header, line;
  std::getline(lines, header);
  const std::size_t name_at = header.find("NAME"), uuid_at = header.find("UUID");
  int rows = 0;
  while (std::getline(lines, line)) {
    ++rows;
    EXPECT_EQ(line.find("NVIDIA"), name_at) << devices.out;
    EXPECT_EQ(line.find("sim-"), uuid_at) << devices.out;
  }
  EXPECT_EQ(rows, 3) << devices.out;
}

TEST_F(DaemonTest, CancelQueuedAndRunningJobs) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "1", "--sim-speed", "50"}));
  v1::SubmitJobResponse running, queued;
  ASSERT_TRUE(Submit(Budget(2000, 1), &running).ok());
  ASSERT_TRUE(Submit(Budget(2000, 2), &queued).ok());
  EXPECT_EQ(Get(queued.job_id()).state(), v1::QUEUED);
  const RunResult c1 = Cli({"cancel", queued.job_id()});
  ASSERT_EQ(c1.code, 0) << c1.err;
  EXPECT_THAT(c1.out, HasSubstr("cancelled"));
  WaitForEvaluations(running.job_id(), 3);
  const RunResult c2 = Cli({"cancel", running.job_id(), "--json"});
  ASSERT_EQ(c2.code, 0) << c2.err;
  const v1::Job job = Get(running.job_id());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  EXPECT_GE(job.progress().evaluations(), 3);
  EXPECT_LT(job.progress().evaluations(), 2000);
  EXPECT_EQ(Get(queued.job_id()).progress().evaluations(), 0);
  const RunResult again = Cli({"cancel", running.job_id()});
  EXPECT_EQ(again.code, 1);
  EXPECT_THAT(again.err, HasSubstr("already ended"));
}

TEST_F(DaemonTest, SigkillMidJobsThenRestartFinishesEachOnce) {
  // About 100 ms a candidate: the jobs are far from done when killed.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "3", "--sim-speed", "10"}));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::SubmitJobResponse r;
    ASSERT_TRUE(Submit(Budget(60, 10 + i), &r).ok());
    ids.push_back(r.job_id());
  }
  for (const std::string& id : ids) WaitForEvaluations(id, 5);
  EXPECT_EQ(Stop(SIGKILL), 128 + SIGKILL);
  std::vector<std::int64_t> before;
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE((*s)->CheckIntegrity().ok());
    for (const std::string& id : ids) {
      const JobRecord j = *(*s)->GetJob(id);
      EXPECT_GE(j.evaluations, 5);
      EXPECT_LT(j.evaluations, 60);
      // Its process is gone: not running any more, and the store says so.
      EXPECT_EQ(j.state, JobState::kInterrupted);
      EXPECT_THAT(j.message, HasSubstr("ktuned resumes it when it starts again"));
      before.push_back(j.evaluations);
    }
  }
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "3"}));
  EXPECT_THAT(Slurp(File("daemon.err")), HasSubstr("resuming job"));
  for (const std::string& id : ids) {
    std::vector<v1::JobEvent> events;
    EXPECT_EQ(Follow(id, &events, /*from_start=*/true), v1::SUCCEEDED);
    const v1::Job job = Get(id, true);
    ASSERT_EQ(job.measurements_size(), 60);
    std::set<std::string> keys;
    for (const auto& m : job.measurements()) keys.insert(m.config().key());
    EXPECT_EQ(keys.size(), 60u);
  }
  // Each job's keys are the ones an uninterrupted run measures.
  const std::string out = File("ref.out"), err = File("ref.err");
  ASSERT_EQ(Wait(Spawn(KTUNE_CLI_PATH,
                       {"tune", "--local", "--device", kConv, "--strategy", "random", "--seed",
                        "10", "--max-evals", "60", "--db", File("ref.db"), "--json"},
                       out, err)),
            0);
  absl::StatusOr<std::unique_ptr<Store>> ref = Store::Open(File("ref.db"), false);
  std::vector<std::string> want, got;
  ASSERT_TRUE(ref.ok());
  const std::vector<StoredMeasurement> ref_ms =
      *(*ref)->LoadMeasurements((*(*ref)->ListJobs())[0].id);
  for (const auto& m : ref_ms) want.push_back(m.key);
  const v1::Job first = Get(ids[0], true);
  for (const auto& m : first.measurements()) got.push_back(m.config().key());
  EXPECT_EQ(got, want);
}

TEST_F(DaemonTest, SigtermInterruptsRunningJobsWhichResumeOnRestart) {
  // About 100 ms a candidate: the first job is far from done at SIGTERM.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "1", "--sim-speed", "10"}));
  v1::SubmitJobResponse a, b;
  ASSERT_TRUE(Submit(Budget(50, 1), &a).ok());
  ASSERT_TRUE(Submit(Budget(50, 2), &b).ok());
  WaitForEvaluations(a.job_id(), 3);
  EXPECT_EQ(Stop(SIGTERM), 0);
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Db(), false);
    EXPECT_EQ((*s)->GetJob(a.job_id())->state, JobState::kInterrupted);
    EXPECT_EQ((*s)->GetJob(b.job_id())->state, JobState::kQueued);
  }
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  EXPECT_EQ(Follow(a.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Follow(b.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Get(a.job_id(), true).measurements_size(), 50);
  EXPECT_EQ(Get(b.job_id(), true).measurements_size(), 50);
}

}  // namespace
}  // namespace ktune
