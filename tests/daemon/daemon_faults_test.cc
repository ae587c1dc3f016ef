// The fault matrix's rows about the daemon (docs/reliability.md): a
// `ktune merge` into a daemon's store SIGKILLed part way, and clients that
// vanish in the middle of WatchJob. Nothing is lost; the daemon serves on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/daemon/daemon_fixture.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

// Every job of the store at `db` with its measurement count.
std::map<std::string, std::size_t> Counts(const std::string& db) {
  std::map<std::string, std::size_t> out;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, false);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return out;
  absl::StatusOr<std::vector<JobRecord>> jobs = (*store)->ListJobs();
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  if (!jobs.ok()) return out;
  for (const JobRecord& j : *jobs) {
    absl::StatusOr<std::vector<StoredMeasurement>> m = (*store)->LoadMeasurements(j.id);
    EXPECT_TRUE(m.ok()) << m.status();
    out[j.id] = m.ok() ? m->size() : 0;
  }
  return out;
}

// Fault matrix: `ktune merge` into a running daemon's store, SIGKILLed at
// moments spread over its run. Each time the target holds all of the
// source or none of it (one transaction), the source is untouched, and
// the daemon keeps answering; a last merge then completes although the
// daemon is SIGKILLed during it.
TEST_F(DaemonTest, AMergeKilledPartWayLeavesAllOrNothing) {
  const std::string source = File("node.db");
  for (const auto& [device, seed] : {std::pair{kConv, 1}, std::pair{kPnpoly, 2}}) {
    const std::string out = File("tune.out"), err = File("tune.err");
    ASSERT_EQ(Wait(Spawn(KTUNE_CLI_PATH,
                         {"tune", "--local", "--db", source, "--device", device, "--strategy",
                          "random", "--max-evals", "1200", "--seed", std::to_string(seed)},
                         out, err)),
              0)
        << Slurp(err);
  }
  const std::map<std::string, std::size_t> wanted = Counts(source);
  ASSERT_EQ(wanted.size(), 2u);
  const std::string source_bytes = Slurp(source);

  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  v1::SubmitJobResponse own;
  ASSERT_TRUE(Submit(Budget(10, 7), &own).ok());
  ASSERT_EQ(Follow(own.job_id()), v1::SUCCEEDED);

  const std::string tmpdir = File("tmp");
  mkdir(tmpdir.c_str(), 0755);
  setenv("TMPDIR", tmpdir.c_str(), 1);
  int killed = 0;
  for (int delay_ms : {0, 5, 10, 20, 40, 60, 80, 120, 160, 240, 320}) {
    const pid_t merge = Spawn(KTUNE_CLI_PATH, {"merge", source, "--db", Db()}, File("merge.out"),
                              File("merge.err"));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(merge, SIGKILL);
    if (Wait(merge) == 128 + SIGKILL) ++killed;
    const std::map<std::string, std::size_t> now = Counts(Db());
    int present = 0;
    for (const auto& [id, n] : wanted) {
      auto it = now.find(id);
      if (it == now.end()) continue;
      ++present;
      EXPECT_EQ(it->second, n) << "job " << id << " merged in part, after " << delay_ms << " ms";
    }
    EXPECT_TRUE(present == 0 || present == 2)
        << present << " of 2 jobs after " << delay_ms << " ms";
    EXPECT_EQ(now.at(own.job_id()), 10u);
    EXPECT_EQ(Get(own.job_id()).progress().evaluations(), 10);  // the daemon answers
  }
  unsetenv("TMPDIR");
  EXPECT_GT(killed, 0) << "every merge ended before its kill";
  const RunResult done = Cli({"jobs"});
  ASSERT_EQ(done.code, 0) << done.err;
  // The daemon itself SIGKILLed while the last merge runs: the merge
  // completes, and the daemon started again serves what it added.
  const pid_t last =
      Spawn(KTUNE_CLI_PATH, {"merge", source, "--db", Db()}, File("merge.out"), File("merge.err"));
  EXPECT_EQ(Stop(SIGKILL), 128 + SIGKILL);
  ASSERT_EQ(Wait(last), 0) << Slurp(File("merge.err"));
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  const std::map<std::string, std::size_t> merged = Counts(Db());
  for (const auto& [id, n] : wanted) EXPECT_EQ(merged.at(id), n) << id;
  EXPECT_EQ(Slurp(source), source_bytes);
  // The daemon sees what was merged.
  const RunResult jobs = Cli({"jobs"});
  ASSERT_EQ(jobs.code, 0) << jobs.err;
  for (const auto& [id, n] : wanted) EXPECT_THAT(jobs.out, HasSubstr(id));
}

// Fault matrix: clients vanish in the middle of WatchJob (watch processes
// SIGKILLed, a call's channel dropped). The job runs on to its budget,
// every measurement stored; the daemon serves new watchers and stops
// cleanly.
TEST_F(DaemonTest, ClientsVanishingMidWatchCostNothing) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--sim-speed", "200"}));
  v1::SubmitJobResponse job;
  ASSERT_TRUE(Submit(Budget(300, 3), &job).ok());
  std::vector<pid_t> watchers;
  for (int i = 0; i < 6; ++i) {
    const std::string out = File("watch" + std::to_string(i) + ".out");
    watchers.push_back(Spawn(
        KTUNE_CLI_PATH, {"--server", address_, "watch", job.job_id(), "--from-start", "--json"},
        out, File("watch.err")));
  }
  // A watcher in this process whose channel goes away mid-stream.
  {
    auto channel = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    auto stub = v1::Tuner::NewStub(channel);
    auto ctx = std::make_unique<grpc::ClientContext>();
    v1::WatchJobRequest req;
    req.set_job_id(job.job_id());
    req.set_from_start(true);
    auto reader = stub->WatchJob(ctx.get(), req);
    v1::JobEvent ev;
    ASSERT_TRUE(reader->Read(&ev));
    ctx->TryCancel();
    (void)reader->Finish();
  }
  WaitForEvaluations(job.job_id(), 20);
  for (pid_t w : watchers) {
    kill(w, SIGKILL);
    EXPECT_EQ(Wait(w), 128 + SIGKILL);
  }
  std::vector<v1::JobEvent> events;
  EXPECT_EQ(Follow(job.job_id(), &events, /*from_start=*/true), v1::SUCCEEDED);
  int measurements = 0;
  for (const v1::JobEvent& e : events) measurements += e.has_measurement() ? 1 : 0;
  EXPECT_EQ(measurements, 300);
  EXPECT_EQ(Get(job.job_id()).progress().evaluations(), 300);
  EXPECT_EQ(Stop(SIGTERM), 0) << Slurp(File("daemon.err"));
}

// Limits on what a client sends: each refusal names the limit and, where a
// flag sets it, the flag; the same spec run locally gets the same words.
TEST_F(DaemonTest, EveryLimitIsNamedWithHowToRaiseIt) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-request-mib", "1", "--max-space", "1000"}));
  auto refused = [&](const v1::JobSpec& spec) {
    v1::SubmitJobResponse r;
    const grpc::Status s = Submit(spec, &r);
    EXPECT_FALSE(s.ok());
    return std::make_pair(s.error_code(), s.error_message());
  };
  v1::JobSpec big = Budget(10, 1);
  big.mutable_kernel()->set_name("k");
  big.mutable_kernel()->set_code(std::string(1536 << 10, ' '));
  auto e = refused(big);
  EXPECT_EQ(e.first, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(e.second, HasSubstr("this daemon takes up to 1 MiB (ktuned --max-request-mib)"));

  v1::JobSpec many = Budget(10, 1);
  many.mutable_kernel()->set_name("k");
  many.mutable_kernel()->set_code("__global__ void k() {}");
  for (int i = 0; i < 300; ++i) {
    v1::Parameter* p = many.add_parameters();
    p->set_name("p" + std::to_string(i));
    p->add_ints(1);
  }
  e = refused(many);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("parameters: 300 entries; the limit is 256 (a fixed limit of "
                                  "ktune's job files)"));

  v1::JobSpec named = Budget(10, 1);
  named.mutable_kernel()->set_name(std::string(5000, 'k'));
  e = refused(named);
  EXPECT_THAT(e.second, HasSubstr("kernel.name: 5000 characters; the limit is 4096"));

  v1::JobSpec chained = Budget(10, 1);
  chained.mutable_kernel()->set_name("k");
  chained.mutable_kernel()->set_code("__global__ void k() {}");
  v1::Parameter* p = chained.add_parameters();
  p->set_name("a");
  p->add_ints(1);
  std::string chain = "a";
  for (int i = 0; i < 300; ++i) chain += " + 1";
  chained.add_constraints(chain + " > 0");
  e = refused(chained);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("constraints[0]: expression nested too deeply"));

  // The space of the recording (4,362 configurations) against --max-space.
  e = refused(Budget(10, 1));
  EXPECT_THAT(e.second, HasSubstr("(--max-space)"));

  // Locally, the same words for the same spec.
  const std::string job = File("many.json");
  std::string json =
      R"({"kernel": {"name": "k", "code": "__global__ void k() {}"}, "parameters": [)";
  for (int i = 0; i < 300; ++i) {
    json +=
        (i ? ", " : "") + std::string(R"({"name": "p)") + std::to_string(i) + R"(", "ints": [1]})";
  }
  std::ofstream(job) << json << "]}";
  const std::string out = File("local.out"), err = File("local.err");
  EXPECT_EQ(
      Wait(Spawn(KTUNE_CLI_PATH,
                 {"tune", "--local", job, "--device", kConv, "--db", File("local.db")}, out, err)),
      2);
  EXPECT_THAT(Slurp(err), HasSubstr("parameters: 300 entries; the limit is 256 (a fixed limit of "
                                    "ktune's job files)"));
}

}  // namespace
}  // namespace ktune
