// A fleet on loopback: one PostgreSQL (started by the test) and three
// ktuned sharing it, each replaying a recording. Two daemons serve one
// model, the third another; jobs go to any daemon and run on one of their
// model; a daemon killed mid-job has its job taken over and finished, and
// every daemon answers GetBest alike.
#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/testing/postgres.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/process.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;

const std::string kRecorded = std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/";
const std::string kConv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
const std::string kPnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";
constexpr int kLeaseSeconds = 2;

// One ktuned of the fleet.
struct Daemon {
  // How many times faster than recorded the daemon replays its device.
  std::string sim_speed = "40";
  pid_t pid = -1;
  std::string address;
  std::unique_ptr<v1::Tuner::Stub> stub;

  bool Start(const std::string& db, const std::string& device, const testing::TempDir& tmp,
             const std::string& name, const std::vector<std::string>& extra = {}) {
    int fd = -1;
    std::vector<std::string> args = {"--db",
                                     db,
                                     "--device",
                                     device,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--port-file",
                                     "/dev/fd/3",
                                     "--lease-seconds",
                                     std::to_string(kLeaseSeconds),
                                     "--sim-speed",
                                     sim_speed,
                                     "--max-running",
                                     "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = testing::SpawnWithPipe(KTUNED_PATH, args, tmp.File(name + ".out"),
                                 tmp.File(name + ".err"), &fd, /*die_with_parent=*/true);
    address = testing::ReadLine(fd);
    close(fd);
    if (address.empty()) return false;
    stub = v1::Tuner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    return true;
  }
  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    testing::WaitExit(pid);
    pid = -1;
  }
  ~Daemon() { Kill(); }
};

std::unique_ptr<grpc::ClientContext> Context(int seconds = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}

// Waits up to `limit` for `done`, polling.
template <typename F>
bool WaitFor(F done, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return done();
}

std::vector<JobRecord> Jobs(Store& store) {
  absl::StatusOr<std::vector<JobRecord>> jobs = store.ListJobs();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return jobs.ok() ? *std::move(jobs) : std::vector<JobRecord>();
}

pid_t RunnerPid(const JobRecord& j) {
  const std::optional<ProcessName> p = ProcessName::Decode(j.runner);
  return p ? p->pid : -1;
}

// A job `pid` runs with at least 2 of its `evals` evaluations stored and
// not all of them, or "".
std::string PartWay(const std::vector<JobRecord>& jobs, pid_t pid, int evals) {
  for (const JobRecord& j : jobs) {
    if (j.state == JobState::kRunning && RunnerPid(j) == pid && j.evaluations >= 2 &&
        j.evaluations < evals) {
      return j.id;
    }
  }
  return "";
}

// The jobs, once what the frozen daemon `pid` sent before it stopped has
// reached the store: read until two reads 100 ms apart agree on its jobs.
std::vector<JobRecord> Settled(Store& store, pid_t pid) {
  auto its = [pid](const std::vector<JobRecord>& jobs) {
    std::vector<std::tuple<std::string, JobState, std::int64_t>> out;
    for (const JobRecord& j : jobs) {
      if (RunnerPid(j) == pid) out.emplace_back(j.id, j.state, j.evaluations);
    }
    return out;
  };
  std::vector<JobRecord> jobs = Jobs(store);
  while (true) {
    std::this_thread::sleep_for(100ms);
    std::vector<JobRecord> again = Jobs(store);
    if (its(again) == its(jobs)) return again;
    jobs = std::move(again);
  }
}

// What a failure needs to be understood: every unfinished job and what
// each daemon said.
std::string Diagnosis(Store& store, const testing::TempDir& tmp) {
  std::string out = "jobs not succeeded:\n";
  for (const JobRecord& j : Jobs(store)) {
    if (j.state == JobState::kSucceeded) continue;
    out += StrCat("  ", j.id, " ", JobStateName(j.state), " runner pid ", RunnerPid(j), ", ",
                  j.evaluations, " evaluations, message '", j.message, "'\n");
  }
  for (const char* name : {"d0", "d1", "d2"}) {
    out += StrCat("--- ", name, ".err\n", testing::Slurp(tmp.File(StrCat(name, ".err"))));
  }
  return out;
}

TEST(FleetTest, ThreeDaemonsShareOneQueueAndTakeOverADeadOnesJob) {
  absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
  ASSERT_TRUE(pg.ok()) << pg.status();
  absl::StatusOr<std::string> uri = (*pg)->CreateDatabase(StrCat("fleet", getpid()));
  ASSERT_TRUE(uri.ok()) << uri.status();
  testing::TempDir tmp;
  Daemon d[3];
  const std::string devices[3] = {kConv, kConv, kPnpoly};
  // Daemon 0 replays five times slower than the others, so that its jobs
  // spend a second or more part-way (at full speed a job of 8 evaluations
  // took under half a second: a loaded machine under ThreadSanitizer could
  // miss every one of them between two looks at the store).
  d[0].sim_speed = "8";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d[i].Start(*uri, devices[i], tmp, StrCat("d", i)))
        << testing::Slurp(tmp.File(StrCat("d", i, ".err")));
  }
  // 30 jobs, round-robin over the daemons, alternating the models: every
  // daemon is given jobs of the model it lacks.
  constexpr int kJobs = 30, kEvals = 8;
  std::map<std::string, std::string> model_of;  // job id -> its device
  for (int i = 0; i < kJobs; ++i) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_strategy()->set_name("random");
    req.mutable_spec()->mutable_strategy()->set_max_evaluations(kEvals);
    req.mutable_spec()->mutable_strategy()->set_seed(100 + i);
    const std::string& device = i % 2 == 0 ? kConv : kPnpoly;
    req.mutable_spec()->mutable_device()->add_devices(device);
    v1::SubmitJobResponse resp;
    const grpc::Status s = d[i % 3].stub->SubmitJob(Context().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << "job " << i << " on daemon " << i % 3 << ": " << s.error_message();
    ASSERT_EQ(model_of.count(resp.job_id()), 0u);
    model_of[resp.job_id()] = device;
  }
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(*uri, false);
  ASSERT_TRUE(store.ok()) << store.status();
  // Daemon 0 is killed while it runs a job part-way. It is frozen
  // (SIGSTOP) first and the job chosen from what the store then holds, so
  // that the job cannot finish between being chosen and the kill.
  std::string victim;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (PartWay(Jobs(**store), d[0].pid, kEvals).empty()) return false;
        kill(d[0].pid, SIGSTOP);
        victim = PartWay(Settled(**store, d[0].pid), d[0].pid, kEvals);
        if (victim.empty()) kill(d[0].pid, SIGCONT);  // it had just finished: again
        return !victim.empty();
      },
      60s))
      << "daemon 0 never ran a job part-way; " << Diagnosis(**store, tmp);
  const pid_t killed = d[0].pid;
  d[0].Kill();
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobRecord> j = (*store)->GetJob(victim);
        return j.ok() && j->state == JobState::kRunning && RunnerPid(*j) == d[1].pid;
      },
      60s))
      << "job " << victim << " was not taken over; " << Diagnosis(**store, tmp);
  const double takeover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(takeover_s, kLeaseSeconds + 5.0);
  std::printf("fleet: job %s of killed daemon (pid %d) taken over after %.2f s (lease %d s)\n",
              victim.c_str(), killed, takeover_s, kLeaseSeconds);

  // A daemon of the other model follows the job through the store.
  {
    v1::WatchJobRequest req;
    req.set_job_id(victim);
    req.set_from_start(true);
    auto ctx = Context(120);
    auto reader = d[2].stub->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
    std::set<std::int64_t> seen;
    while (reader->Read(&ev)) {
      if (ev.event_case() == v1::JobEvent::kState) last = ev.state();
      if (ev.event_case() == v1::JobEvent::kMeasurement) {
        EXPECT_TRUE(seen.insert(ev.measurement().sequence()).second) << "told twice";
      }
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(last, v1::SUCCEEDED);
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(kEvals));
  }

  ASSERT_TRUE(WaitFor(
      [&] {
        for (const JobRecord& j : Jobs(**store)) {
          if (j.state != JobState::kSucceeded) return false;
        }
        return true;
      },
      120s))
      << "not every job finished; " << Diagnosis(**store, tmp);
  // Each job ran on its model, every configuration once.
  std::set<std::string> kernels;
  for (const auto& [id, device] : model_of) {
    absl::StatusOr<JobRecord> j = (*store)->GetJob(id);
    ASSERT_TRUE(j.ok());
    kernels.insert(j->kernel_name);
    // The daemon that ran it last is one of its model.
    const std::set<pid_t> of_model =
        device == kConv ? std::set<pid_t>{killed, d[1].pid} : std::set<pid_t>{d[2].pid};
    EXPECT_EQ(of_model.count(RunnerPid(*j)), 1u) << id << " ran on pid " << RunnerPid(*j);
    absl::StatusOr<std::vector<StoredMeasurement>> ms = (*store)->LoadMeasurements(id);
    ASSERT_TRUE(ms.ok());
    EXPECT_EQ(ms->size(), static_cast<std::size_t>(kEvals)) << id;
    std::set<std::string> keys;
    for (std::size_t k = 0; k < ms->size(); ++k) {
      EXPECT_EQ((*ms)[k].sequence, static_cast<std::int64_t>(k)) << id;
      EXPECT_TRUE(keys.insert((*ms)[k].key).second)
          << id << " measured " << (*ms)[k].key << " twice";
    }
  }

  // Cancelled through a daemon that does not run it.
  {
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_strategy()->set_name("random");
    req.mutable_spec()->mutable_strategy()->set_max_evaluations(2000);
    req.mutable_spec()->mutable_device()->add_devices(kConv);
    v1::SubmitJobResponse resp;
    ASSERT_TRUE(d[2].stub->SubmitJob(Context().get(), req, &resp).ok());
    ASSERT_TRUE(WaitFor(
        [&] {
          absl::StatusOr<JobRecord> j = (*store)->GetJob(resp.job_id());
          return j.ok() && j->evaluations > 0;
        },
        60s));
    v1::CancelJobRequest cancel;
    cancel.set_job_id(resp.job_id());
    v1::Job job;
    ASSERT_TRUE(d[2].stub->CancelJob(Context().get(), cancel, &job).ok());
    EXPECT_EQ(job.state(), v1::CANCELLED);
  }

  // Every daemon (the killed one started again) gives the same answers.
  ASSERT_TRUE(d[0].Start(*uri, kConv, tmp, "d0-again"));
  for (const std::string& kernel : kernels) {
    std::optional<v1::GetBestResponse> first;
    for (Daemon& daemon : d) {
      v1::GetBestRequest req;
      req.set_kernel(kernel);
      v1::GetBestResponse resp;
      const grpc::Status s = daemon.stub->GetBest(Context().get(), req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      if (!first) first = resp;
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(resp, *first))
          << kernel << " on " << daemon.address << ":\n"
          << resp.DebugString() << "\nand\n"
          << first->DebugString();
      EXPECT_TRUE(resp.has_best());
    }
  }
}

// The daemon's standard health status (grpc.health.v1, called by name
// with hand-encoded messages): 1 SERVING, 2 NOT_SERVING, -1 no answer.
int Health(const std::string& address) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](const grpc::Status& s) { done.set_value(s); });
  if (!done.get_future().get().ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  // HealthCheckResponse{status: N}: field 1, varint.
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : -1;
}

// --max-jobs-per-client holds over the fleet: a client's jobs queued or
// running on any daemon, handed over ones too, count against it.
TEST(FleetTest, AClientsLimitHoldsOverTheWholeFleet) {
  absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
  ASSERT_TRUE(pg.ok()) << pg.status();
  absl::StatusOr<std::string> uri = (*pg)->CreateDatabase(StrCat("clients", getpid()));
  ASSERT_TRUE(uri.ok()) << uri.status();
  testing::TempDir tmp;
  Daemon d[3];
  const std::string devices[3] = {kConv, kConv, kPnpoly};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(d[i].Start(*uri, devices[i], tmp, StrCat("d", i), {"--max-jobs-per-client", "3"}))
        << testing::Slurp(tmp.File(StrCat("d", i, ".err")));
  }
  auto submit = [&](Daemon& to, int seed, const std::string& client, v1::SubmitJobResponse* resp) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_strategy()->set_name("random");
    req.mutable_spec()->mutable_strategy()->set_max_evaluations(4000);
    req.mutable_spec()->mutable_strategy()->set_seed(static_cast<std::uint64_t>(seed));
    req.mutable_spec()->mutable_device()->add_devices(kConv);
    req.set_client(client);
    return to.stub->SubmitJob(Context().get(), req, resp);
  };
  v1::SubmitJobResponse r;
  ASSERT_TRUE(submit(d[0], 1, "ann", &r).ok());
  ASSERT_TRUE(submit(d[1], 2, "ann", &r).ok());
  const grpc::Status handed = submit(d[2], 3, "ann", &r);  // to a daemon of the model
  ASSERT_TRUE(handed.ok()) << handed.error_message();
  const std::string handed_id = r.job_id();
  for (Daemon* to : {&d[0], &d[2]}) {
    const grpc::Status over = submit(*to, 4, "ann", &r);
    EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(over.error_message(),
                ::testing::HasSubstr("client 'ann' has 3 jobs queued or running in the fleet"));
  }
  EXPECT_TRUE(submit(d[1], 5, "bob", &r).ok());
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(*uri, false);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->GetJob(handed_id)->client, "ann");
  // Ann's job ended (cancelled from any daemon) makes room for another.
  v1::CancelJobRequest cancel;
  cancel.set_job_id(handed_id);
  v1::Job cancelled;
  ASSERT_TRUE(d[2].stub->CancelJob(Context().get(), cancel, &cancelled).ok());
  ASSERT_TRUE(
      WaitFor([&] { return (*store)->GetJob(handed_id)->state == JobState::kCancelled; }, 30s));
  const grpc::Status again = submit(d[0], 4, "ann", &r);
  EXPECT_TRUE(again.ok()) << again.error_message();
}

// The fleet's database goes away in the middle of a job and comes back:
// the daemon keeps what it measured, says so in its log and health
// status, and the job ends with every evaluation stored once.
TEST(FleetTest, ADaemonWaitsOutItsDatabaseAndLosesNothing) {
  absl::StatusOr<std::unique_ptr<testing::PostgresCluster>> pg = testing::PostgresCluster::Start();
  ASSERT_TRUE(pg.ok()) << pg.status();
  absl::StatusOr<std::string> uri = (*pg)->CreateDatabase("outage");
  ASSERT_TRUE(uri.ok()) << uri.status();
  testing::TempDir tmp;
  Daemon d;
  ASSERT_TRUE(d.Start(*uri, kConv, tmp, "d0")) << testing::Slurp(tmp.File("d0.err"));
  EXPECT_EQ(Health(d.address), 1);
  constexpr int kEvals = 30;
  v1::SubmitJobRequest req;
  req.mutable_spec()->mutable_strategy()->set_name("random");
  req.mutable_spec()->mutable_strategy()->set_max_evaluations(kEvals);
  req.mutable_spec()->mutable_device()->add_devices(kConv);
  v1::SubmitJobResponse resp;
  ASSERT_TRUE(d.stub->SubmitJob(Context().get(), req, &resp).ok());
  const std::string id = resp.job_id();
  auto evaluations = [&]() -> std::int64_t {
    v1::GetJobRequest g;
    g.set_job_id(id);
    v1::Job job;
    return d.stub->GetJob(Context(5).get(), g, &job).ok() ? job.progress().evaluations() : -1;
  };
  ASSERT_TRUE(WaitFor([&] { return evaluations() >= 3; }, 60s))
      << testing::Slurp(tmp.File("d0.err"));

  // Away for longer than the lease.
  ASSERT_TRUE((*pg)->StopServer().ok());
  EXPECT_TRUE(WaitFor([&] { return Health(d.address) == 2; }, 30s))
      << testing::Slurp(tmp.File("d0.err"));
  std::this_thread::sleep_for(std::chrono::seconds(kLeaseSeconds + 1));
  ASSERT_TRUE((*pg)->StartServer().ok());
  EXPECT_TRUE(WaitFor([&] { return Health(d.address) == 1; }, 30s))
      << testing::Slurp(tmp.File("d0.err"));

  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(*uri, false);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<JobRecord> j = (*store)->GetJob(id);
        return j.ok() && j->state != JobState::kRunning && j->state != JobState::kQueued;
      },
      120s))
      << Diagnosis(**store, tmp);
  const JobRecord job = (*store)->GetJob(id).value();
  EXPECT_EQ(job.state, JobState::kSucceeded) << job.message;
  EXPECT_EQ(job.evaluations, kEvals);
  absl::StatusOr<std::vector<StoredMeasurement>> ms = (*store)->LoadMeasurements(id);
  ASSERT_TRUE(ms.ok());
  ASSERT_EQ(ms->size(), static_cast<std::size_t>(kEvals));
  std::set<std::string> keys;
  for (std::size_t k = 0; k < ms->size(); ++k) {
    EXPECT_EQ((*ms)[k].sequence, static_cast<std::int64_t>(k));
    EXPECT_TRUE(keys.insert((*ms)[k].key).second) << (*ms)[k].key << " stored twice";
  }
  const std::string log = testing::Slurp(tmp.File("d0.err"));
  EXPECT_THAT(log, ::testing::HasSubstr("the store does not answer"));
  EXPECT_THAT(log, ::testing::HasSubstr("the store answers again"));
  std::printf("outage log:\n%s", log.c_str());
}

}  // namespace
}  // namespace ktune
