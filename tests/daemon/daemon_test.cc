// The daemon over loopback: ktuned is started as a user would start it, on
// an ephemeral port, serving recorded spaces; clients are gRPC stubs and the
// ktune command line.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/json.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

const std::string kRecorded = std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/";
const std::string kConv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
const std::string kPnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

using testing::Slurp;
using testing::Spawn;
int Wait(pid_t pid) { return testing::WaitExit(pid); }

class DaemonTest : public ::testing::Test {
 protected:
  ~DaemonTest() override { Stop(SIGKILL); }

  // Starts ktuned; returns false (with its stderr in `failure`) if it exits.
  bool StartDaemon(std::vector<std::string> args, std::string* failure = nullptr) {
    args.insert(args.begin(), {"--db", Db()});
    if (std::find(args.begin(), args.end(), "--listen") == args.end()) {
      args.insert(args.begin(), {"--listen", "127.0.0.1:0"});
    }
    const std::string out = File("daemon.out"), err = File("daemon.err");
    unlink(out.c_str());  // not the address of an earlier daemon
    pid_ = Spawn(KTUNED_PATH, args, out, err);
    for (int i = 0; i < 3000; ++i) {
      const std::string text = Slurp(out);
      if (const std::size_t p = text.find("listening on ");
          p != std::string::npos && text.find('\n', p) != std::string::npos) {
        address_ = text.substr(p + 13, text.find('\n', p) - p - 13);
        channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
        stub_ = v1::Tuner::NewStub(channel_);
        return true;
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        if (failure != nullptr) *failure = Slurp(err);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  int Stop(int signo) {
    if (pid_ <= 0) return -1;
    stub_.reset();
    channel_.reset();
    kill(pid_, signo);
    const int code = Wait(pid_);
    pid_ = -1;
    return code;
  }

  RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", address_});
    const std::string out = File("cli.out"), err = File("cli.err");
    RunResult r;
    r.code = Wait(Spawn(KTUNE_CLI_PATH, args, out, err));
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  static void Deadline(grpc::ClientContext& ctx, int seconds = 30) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // GetBest's time for the recorded convolution kernel, any problem.
  double BestConvolutionMs() {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetBestRequest req;
    req.set_kernel("convolution_kernel");
    v1::GetBestResponse resp;
    const grpc::Status s = stub_->GetBest(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.best().time_ms();
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::SubmitJobResponse* out, int priority = 0) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_priority(priority);
    return stub_->SubmitJob(&ctx, req, out);
  }

  // Follows a job to its end; returns the last state.
  v1::JobState Follow(const std::string& id, std::vector<v1::JobEvent>* events = nullptr,
                      bool from_start = false) {
    grpc::ClientContext ctx;
    Deadline(ctx, 120);
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_from_start(from_start);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent ev;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&ev)) {
      if (ev.event_case() == v1::JobEvent::kState) state = ev.state();
      if (events != nullptr) events->push_back(ev);
    }
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state;
  }

  v1::Job Get(const std::string& id, bool measurements = false) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetJobRequest req;
    req.set_job_id(id);
    req.set_include_measurements(measurements);
    v1::Job job;
    const grpc::Status s = stub_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  static v1::JobSpec Budget(int evaluations, int seed, const std::string& strategy = "random") {
    v1::JobSpec spec;
    spec.mutable_strategy()->set_name(strategy);
    spec.mutable_strategy()->set_max_evaluations(evaluations);
    spec.mutable_strategy()->set_seed(static_cast<std::uint64_t>(seed));
    return spec;
  }

  std::string File(const std::string& name) const { return tmp_.File(name); }
  std::string Db() const { return File("k.db"); }

  testing::TempDir tmp_;
  pid_t pid_ = -1;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

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

  // Submitting the same job again resumes it: nothing is measured twice.
  const RunResult again = Cli({"tune", "--max-evals", "40", "--seed", "3", "--wait", "--json"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("resumed"));
  EXPECT_EQ(Get(id, true).measurements_size(), 40);
}

TEST_F(DaemonTest, ConcurrentClientsSubmitWatchAndQuery) {
  ASSERT_TRUE(StartDaemon(
      {"--device", kConv, "--device", kPnpoly, "--max-running", "3", "--sim-speed", "20000"}));
  constexpr int kSubmitters = 8, kQueriers = 8;
  std::atomic<int> failures{0};
  std::atomic<bool> done{false};
  std::vector<std::string> ids(kSubmitters);
  std::vector<std::thread> threads;
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
  EXPECT_EQ(BestConvolutionMs(), first);  // answered again, now from memory
  ASSERT_TRUE(Submit(Budget(300, 8), &large).ok());
  ASSERT_EQ(Follow(large.job_id()), v1::SUCCEEDED);
  const double later = BestConvolutionMs();
  EXPECT_LT(later, first);
  EXPECT_DOUBLE_EQ(later, Get(large.job_id()).best().time_ms());
}

TEST_F(DaemonTest, JobsOnOneDeviceTakeTurns) {
  // Two jobs at once on one simulated GPU, each candidate a few ms of
  // replayed time: their measurements interleave rather than run one job
  // after the other.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "2", "--sim-speed", "400"}));
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

TEST_F(DaemonTest, AJobOfHigherPriorityGetsMoreTurnsOnItsGpu) {
  // Two jobs at once on one simulated GPU, one at priority 2 (weight 4):
  // while both run, it is measured about four times as often.
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "2", "--sim-speed", "400"}));
  v1::SubmitJobResponse low, high;
  ASSERT_TRUE(Submit(Budget(60, 1), &low, 0).ok());
  ASSERT_TRUE(Submit(Budget(60, 2), &high, 2).ok());
  EXPECT_EQ(Follow(low.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Follow(high.job_id()), v1::SUCCEEDED);
  auto times = [&](const std::string& id) {
    std::vector<std::int64_t> t;
    const v1::Job job = Get(id, true);
    for (const auto& m : job.measurements()) {
      t.push_back(m.measured_at().seconds() * 1000000 + m.measured_at().nanos() / 1000);
    }
    std::sort(t.begin(), t.end());
    return t;
  };
  const std::vector<std::int64_t> lo = times(low.job_id()), hi = times(high.job_id());
  ASSERT_EQ(hi.size(), 60u);
  // While both ran (until the high-priority job's last measurement).
  const auto low_meanwhile = std::count_if(
      lo.begin(), lo.end(), [&](std::int64_t t) { return t >= hi.front() && t <= hi.back(); });
  EXPECT_LT(low_meanwhile * 2, 60);
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
  for (int i = 0; i < 2000 && Get(running.job_id()).progress().evaluations() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
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
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "3", "--sim-speed", "100"}));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::SubmitJobResponse r;
    ASSERT_TRUE(Submit(Budget(60, 10 + i), &r).ok());
    ids.push_back(r.job_id());
  }
  for (int i = 0; i < 4000; ++i) {
    bool all = true;
    for (const std::string& id : ids) all = all && Get(id).progress().evaluations() >= 5;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
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
  const std::vector<StoredMeasurement> ref_ms = *(*ref)->LoadMeasurements((*(*ref)->ListJobs())[0].id);
  for (const auto& m : ref_ms) want.push_back(m.key);
  const v1::Job first = Get(ids[0], true);
  for (const auto& m : first.measurements()) got.push_back(m.config().key());
  EXPECT_EQ(got, want);
}

TEST_F(DaemonTest, SigtermInterruptsRunningJobsWhichResumeOnRestart) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "1", "--sim-speed", "100"}));
  v1::SubmitJobResponse a, b;
  ASSERT_TRUE(Submit(Budget(50, 1), &a).ok());
  ASSERT_TRUE(Submit(Budget(50, 2), &b).ok());
  for (int i = 0; i < 4000 && Get(a.job_id()).progress().evaluations() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
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

// Another process writing into the daemon's store (a headless job, a
// merge): GetBest's remembered answers notice it.
TEST_F(DaemonTest, GetBestSeesWhatAnotherProcessStores) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  const RunResult tuned = Cli({"tune", "--max-evals", "8", "--seed", "5", "--wait", "--json"});
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  const double before = BestConvolutionMs();
  EXPECT_EQ(BestConvolutionMs(), before);  // remembered
  // The whole space, measured by a local job into the daemon's store.
  const std::string out = File("local.out"), err = File("local.err");
  ASSERT_EQ(Wait(Spawn(KTUNE_CLI_PATH,
                       {"tune", "--local", "--device", kConv, "--strategy", "brute_force", "--db",
                        Db(), "--json"},
                       out, err)),
            0)
      << Slurp(err);
  const double optimum = 0.5536000076681375;  // the recording's
  ASSERT_GT(before, optimum);
  double after = before;
  for (int i = 0; i < 200 && after != optimum; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = BestConvolutionMs();
  }
  EXPECT_DOUBLE_EQ(after, optimum);
}

TEST_F(DaemonTest, MalformedRequestsGetClearErrors) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-evals", "100", "--max-space", "100000"}));
  auto submit_error = [&](const v1::JobSpec& spec, int priority = 0) {
    v1::SubmitJobResponse r;
    const grpc::Status s = Submit(spec, &r, priority);
    EXPECT_FALSE(s.ok());
    return std::make_pair(s.error_code(), s.error_message());
  };
  v1::JobSpec spec = Budget(10, 0, "genius");
  auto e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.name"));
  EXPECT_THAT(e.second, HasSubstr("genius"));
  spec = Budget(10, 0, "genetic");
  (*spec.mutable_strategy()->mutable_options())["population"] = "1e20";
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.options: strategy genetic: option population must be "
                                  "an integer from 2 to 100000, not '1e20'"));

  e = submit_error(Budget(500, 0));
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.max_evaluations"));
  EXPECT_THAT(e.second, HasSubstr("--max-evals"));

  spec = Budget(10, 0);
  spec.mutable_device()->add_devices("cuda:7");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("device.devices"));

  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_file("/etc/passwd");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("kernel.file"));

  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_code("__global__ void k() {}");
  v1::Parameter* p = spec.add_parameters();
  p->set_name("block_size_x");
  spec.add_constraints("block_size_x * < 4");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);

  // A valid spec that the served recording cannot replay is refused at
  // once, not queued to fail.
  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_code("__global__ void k() {}");
  p = spec.add_parameters();
  p->set_name("block_size_x");
  p->add_ints(32);
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("records parameters other than the job's"));
  EXPECT_THAT(e.second, HasSubstr("use_shmem"));
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse listed;
    ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &listed).ok());
    EXPECT_EQ(listed.jobs_size(), 0) << "a refused job must not be stored";
  }

  e = submit_error(Budget(10, 0), 5000);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("priority"));

  auto code_of = [&](auto call) { return call().error_code(); };
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::Job j;
              return stub_->GetJob(&ctx, v1::GetJobRequest(), &j);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetJobRequest r;
              r.set_job_id("ffffffffffffff");
              v1::Job j;
              return stub_->GetJob(&ctx, r, &j);
            }),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::ListJobsRequest r;
              r.set_page_token("'; DROP TABLE jobs; --");
              v1::ListJobsResponse l;
              return stub_->ListJobs(&ctx, r, &l);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::ListJobsRequest r;
              r.set_page_size(-3);
              v1::ListJobsResponse l;
              return stub_->ListJobs(&ctx, r, &l);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::CancelJobRequest r;
              r.set_job_id("0000000000");
              v1::Job j;
              return stub_->CancelJob(&ctx, r, &j);
            }),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, v1::GetBestRequest(), &r);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestRequest q;
              q.set_kernel("convolution_kernel");
              (*q.mutable_problem())["N"] = 0;
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, q, &r);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestRequest q;
              q.set_kernel("never_tuned");
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, q, &r);
            }),
            grpc::StatusCode::NOT_FOUND);
  {
    // Bytes that are no GetBestRequest (GetBest is served on raw bytes).
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    Deadline(ctx);
    const std::string junk = "\xff\xff\xff\xff garbage";
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    generic.UnaryCall(&ctx, "/ktune.v1.Tuner/GetBest", grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = s;
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("GetBestRequest"));
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest r;
    r.set_job_id("abcdef0123");
    auto reader = stub_->WatchJob(&ctx, r);
    v1::JobEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // The daemon still works.
  v1::SubmitJobResponse ok;
  EXPECT_TRUE(Submit(Budget(5, 0), &ok).ok());
  EXPECT_EQ(Follow(ok.job_id()), v1::SUCCEEDED);
}

TEST_F(DaemonTest, ArgumentMemoryLimitIsChecked) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-argument-mib", "64"}));
  // The recorded convolution's kernel, with a 1 GiB input: too much here.
  v1::JobSpec spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("convolution_kernel");
  spec.mutable_kernel()->set_code("__global__ void convolution_kernel(float* in) {}");
  (*spec.mutable_problem())["N"] = 1 << 28;
  v1::Argument* a = spec.add_arguments();
  a->set_name("in");
  a->set_type(v1::Argument::F32);
  a->mutable_buffer()->set_size("N");
  a->mutable_buffer()->mutable_uniform()->set_high(1);
  v1::Parameter* p = spec.add_parameters();
  p->set_name("block_size_x");
  p->add_ints(32);
  v1::SubmitJobResponse r;
  const grpc::Status s = Submit(spec, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1024 MiB"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max-argument-mib"));
}

TEST_F(DaemonTest, ASecondDaemonOnOneStoreIsRefused) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  // Two daemons would both resume the store's unfinished jobs.
  const std::string err = File("second.err");
  const int code =
      Wait(Spawn(KTUNED_PATH, {"--db", Db(), "--listen", "127.0.0.1:0", "--device", kConv},
                 File("second.out"), err));
  EXPECT_NE(code, 0);
  EXPECT_THAT(Slurp(err), HasSubstr("another ktuned (pid " + std::to_string(pid_) + ")"));
  // The first serves on; once it has stopped, the store is free.
  v1::SubmitJobResponse r;
  EXPECT_TRUE(Submit(Budget(5, 1), &r).ok());
  EXPECT_EQ(Follow(r.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Stop(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(StartDaemon({"--device", kConv}));
}

TEST_F(DaemonTest, QueueLimitIsResourceExhausted) {
  ASSERT_TRUE(StartDaemon(
      {"--device", kConv, "--max-running", "1", "--max-queued", "1", "--sim-speed", "20"}));
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Budget(500, 1), &r).ok());  // runs
  ASSERT_TRUE(Submit(Budget(500, 2), &r).ok());  // waits
  const grpc::Status s = Submit(Budget(500, 3), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-queued"));
}

TEST_F(DaemonTest, TokensAndAddresses) {
  std::string failure;
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--listen", "0.0.0.0:0"}, &failure));
  EXPECT_THAT(failure, HasSubstr("TLS"));
  EXPECT_THAT(failure, HasSubstr("--token-file"));

  std::ofstream(File("token")) << "s3cret-token\n";
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--token-file", File("token")}));
  grpc::ClientContext ctx;
  v1::ListDevicesResponse devices;
  EXPECT_EQ(stub_->ListDevices(&ctx, v1::ListDevicesRequest(), &devices).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext wrong;
  wrong.AddMetadata("authorization", "Bearer s3cret-tokem");
  EXPECT_EQ(stub_->ListDevices(&wrong, v1::ListDevicesRequest(), &devices).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const RunResult anonymous = Cli({"jobs"});
  EXPECT_EQ(anonymous.code, 1);
  EXPECT_THAT(anonymous.err, HasSubstr("unauthenticated"));
  const RunResult with_token = Cli({"devices", "--token-file", File("token")});
  EXPECT_EQ(with_token.code, 0) << with_token.err;
  EXPECT_THAT(with_token.out, HasSubstr("A100"));
  Stop(SIGTERM);

  ASSERT_TRUE(StartDaemon({"--device", kConv, "--listen", "0.0.0.0:0", "--insecure"}));
  EXPECT_THAT(Slurp(File("daemon.err")), HasSubstr("WARNING"));
}

TEST_F(DaemonTest, TlsWithAToken) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
      File("key.pem") + " -out " + File("cert.pem") + " 2>/dev/null";
  ASSERT_EQ(system(cmd.c_str()), 0);
  std::ofstream(File("token")) << "tls-token";
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(
      StartDaemon({"--device", kConv, "--listen", "localhost:0", "--tls-cert", File("cert.pem"),
                   "--tls-key", File("key.pem"), "--token-file", File("token")}));
  const RunResult secured =
      Cli({"devices", "--tls-ca", File("cert.pem"), "--token-file", File("token"), "--json"});
  EXPECT_EQ(secured.code, 0) << secured.err;
  EXPECT_THAT(secured.out, HasSubstr("A100"));
  const RunResult plain = Cli({"devices", "--token-file", File("token"), "--timeout", "3"});
  EXPECT_EQ(plain.code, 1);
}

}  // namespace
}  // namespace ktune
