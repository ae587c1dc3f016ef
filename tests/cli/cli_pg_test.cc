// The command line, the client library and the daemon with a PostgreSQL
// store (started by the test): every command that names a store takes a
// postgresql:// URI; headless SQLite stores merge in, SQLite snapshots
// come out, and a daemon's answers follow what others store.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/cli/cli_fixture.h"
#include "tests/testing/postgres.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/pg.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kConv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
const std::string kPnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";

class PgCliTest : public CliTest {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
    ASSERT_TRUE(pg.ok()) << pg.status();
    static int next = 0;
    absl::StatusOr<std::string> uri = (*pg)->CreateDatabase(StrCat("c", getpid(), "_", next++));
    ASSERT_TRUE(uri.ok()) << uri.status();
    uri_ = *uri;
  }
  std::string uri_;
};

TEST_F(PgCliTest, LibpqIsLoadedOnlyWhenAPostgresDatabaseIsOpened) {
  // The dynamic loader lists every library it loads (LD_DEBUG=libs, on
  // stderr): a command on a SQLite file never loads libpq; the same
  // command on a PostgreSQL database does.
  const std::string db = tmp_.File("k.db");
  for (const std::string& store : {db, uri_}) {
    RunJson({"tune", "--local", "--device", kConv, "--max-evals", "1", "--db", store, "--json"});
  }
  setenv("LD_DEBUG", "libs", 1);
  const RunResult sqlite = Run({"jobs", "--db", db});
  const RunResult pg = Run({"jobs", "--db", uri_});
  unsetenv("LD_DEBUG");
  EXPECT_EQ(sqlite.code, 0) << sqlite.err;
  EXPECT_THAT(sqlite.err, HasSubstr("libsqlite3.so"));  // the listing is there
  EXPECT_THAT(sqlite.err, Not(HasSubstr("libpq.so")));
  EXPECT_EQ(pg.code, 0) << pg.err;
  EXPECT_THAT(pg.err, HasSubstr("libpq.so.5"));
}

TEST_F(PgCliTest, EveryStoreCommandTakesAUriAndStoresMoveBetweenBackends) {
  // A headless job straight into PostgreSQL, and one on a node without
  // network access, into its SQLite file.
  const Json direct = RunJson({"tune", "--local", "--device", kConv, "--max-evals", "12", "--seed",
                               "3", "--db", uri_, "--json"});
  const Json node = RunJson({"tune", "--local", "--device", kPnpoly, "--max-evals", "9", "--db",
                             tmp_.File("node.db"), "--json"});
  const Json merged = RunJson({"merge", tmp_.File("node.db"), "--db", uri_, "--json"});
  const Json::Array& per_source = merged.Find("merged")->as_array();
  ASSERT_EQ(per_source.size(), 1u);
  EXPECT_EQ(per_source[0].Find("jobs_added")->as_int(), 1);
  EXPECT_EQ(per_source[0].Find("measurements")->as_int(), 9);
  EXPECT_EQ(RunJson({"merge", tmp_.File("node.db"), "--db", uri_, "--json"})
                .Find("merged")
                ->as_array()[0]
                .Find("measurements")
                ->as_int(),
            0);
  // best, jobs, show read it.
  const Json best = RunJson({"best", "--db", uri_, "--kernel", "cn_pnpoly", "--json"});
  EXPECT_EQ(best.Find("results")->as_array().at(0).Find("key")->as_string(),
            node.Find("best")->Find("key")->as_string());
  const RunResult jobs = Run({"jobs", "--db", uri_});
  EXPECT_EQ(jobs.code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr(direct.Find("job_id")->as_string().substr(0, 8)));
  const Json shown = RunJson({"show", direct.Find("job_id")->as_string(), "--db", uri_, "--json"});
  EXPECT_EQ(shown.Find("measurements")->as_array().size(), 12u);
  // The same job again resumes from PostgreSQL: nothing measured twice.
  const Json again = RunJson({"tune", "--local", "--device", kConv, "--max-evals", "12", "--seed",
                              "3", "--db", uri_, "--json"});
  EXPECT_EQ(again.Find("job_id")->as_string(), direct.Find("job_id")->as_string());
  EXPECT_EQ(RunJson({"show", direct.Find("job_id")->as_string(), "--db", uri_, "--json"})
                .Find("measurements")
                ->as_array()
                .size(),
            12u);

  // A SQLite snapshot for a machine without access, read there as usual.
  const Json exported = RunJson({"export", "--db", uri_, "--to", tmp_.File("snap.db"), "--json"});
  EXPECT_EQ(exported.Find("jobs")->as_int(), 2);
  const Json best_there =
      RunJson({"best", "--db", tmp_.File("snap.db"), "--kernel", "cn_pnpoly", "--json"});
  EXPECT_EQ(best_there.Find("results")->as_array().at(0).Find("key")->as_string(),
            node.Find("best")->Find("key")->as_string());
  const RunResult over = Run({"export", "--db", uri_, "--to", tmp_.File("snap.db")});
  EXPECT_EQ(over.code, 2);
  EXPECT_THAT(over.err, HasSubstr("exists"));

  // The client library opens the URI as it opens a file.
  RunResult client;
  client.code = testing::WaitExit(
      testing::Spawn(CLIENT_PROBE_PATH, {uri_, "cn_pnpoly", node.Find("device")->as_string()},
                     tmp_.File("client.out"), tmp_.File("client.err")));
  EXPECT_EQ(client.code, 0) << testing::Slurp(tmp_.File("client.err"));
  EXPECT_THAT(testing::Slurp(tmp_.File("client.out")),
              HasSubstr("key=" + node.Find("best")->Find("key")->as_string()));
}

TEST_F(PgCliTest, ABadUriOrAnUnreachableServerIsSaidWithoutThePassword) {
  const RunResult r =
      Run({"jobs", "--db", "postgresql://ann:s3cret@/ktune?host=/nonexistent-socket-dir"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the database"));
  EXPECT_THAT(r.err, Not(HasSubstr("s3cret")));
  const RunResult none = Run({"jobs", "--db", uri_});  // an empty database: no store yet
  EXPECT_EQ(none.code, 2) << none.err;
  EXPECT_THAT(none.err, HasSubstr("no ktune store in this database"));
}

TEST_F(PgCliTest, ADaemonsAnswersFollowWhatOthersStore) {
  int fd = -1;
  const pid_t daemon = testing::SpawnWithPipe(
      KTUNED_PATH,
      {"--db", uri_, "--device", kPnpoly, "--listen", "127.0.0.1:0", "--port-file", "/dev/fd/3"},
      tmp_.File("d.out"), tmp_.File("d.err"), &fd);
  const std::string address = testing::ReadLine(fd);
  close(fd);
  ASSERT_FALSE(address.empty()) << testing::Slurp(tmp_.File("d.err"));
  auto stub = v1::Tuner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto best_ms = [&]() -> double {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::GetBestRequest req;
    req.set_kernel("cn_pnpoly");
    v1::GetBestResponse resp;
    const grpc::Status s = stub->GetBest(&ctx, req, &resp);
    return s.ok() ? resp.best().time_ms() : -1;
  };
  EXPECT_EQ(best_ms(), -1);  // nothing stored yet
  // Another node stores a result (here a headless job on the same store).
  const Json tuned = RunJson(
      {"tune", "--local", "--device", kPnpoly, "--max-evals", "10", "--db", uri_, "--json"});
  const double want = tuned.Find("best")->Find("time_ms")->as_double();
  // The daemon's answers, served from memory, notice within its poll.
  const auto end = std::chrono::steady_clock::now() + 10s;
  double got = best_ms();
  while (got != want && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);
    got = best_ms();
  }
  EXPECT_DOUBLE_EQ(got, want);
  kill(daemon, SIGTERM);
  EXPECT_EQ(testing::WaitExit(daemon), 0) << testing::Slurp(tmp_.File("d.err"));
}

// A headless job keeps its lease while it runs, so a process of another
// host sees it running (and may not start it) until the lease lapses.
TEST_F(PgCliTest, AHeadlessJobRenewsItsLeaseWhileItRuns) {
  ASSERT_EQ(Run({"jobs", "--db", uri_}).code, 2);  // no store yet
  const pid_t tune = testing::Spawn(KTUNE_CLI_PATH,
                                    {"tune", "--local", "--device", kConv, "--sim-speed", "1",
                                     "--max-evals", "100000", "--db", uri_},
                                    tmp_.File("t.out"), tmp_.File("t.err"));
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok()) << c.status();
  // The lease as stored, once the job runs; then a renewal moves it
  // (bounded waits: a minute each).
  auto lease = [&]() -> std::string {
    absl::StatusOr<pg::Result> r = c->Exec(
        "SELECT lease_until::text FROM ktune.jobs WHERE state = 'running' "
        "AND lease_until > now()");
    return r.ok() && r->rows() == 1 ? r->Text(0, 0) : std::string();
  };
  std::string first;
  for (int i = 0; i < 600 && first.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    first = lease();
  }
  ASSERT_FALSE(first.empty()) << testing::Slurp(tmp_.File("t.err"));
  std::string later = first;
  for (int i = 0; i < 600 && later == first; ++i) {
    std::this_thread::sleep_for(100ms);
    later = lease();
  }
  EXPECT_FALSE(later.empty());
  EXPECT_NE(later, first);
  kill(tune, SIGTERM);  // ends as interrupted: resumable
  EXPECT_EQ(testing::WaitExit(tune), 1) << testing::Slurp(tmp_.File("t.err"));
  const Json jobs = RunJson({"jobs", "--db", uri_, "--json"});
  ASSERT_EQ(jobs.Find("jobs")->as_array().size(), 1u);
  EXPECT_EQ(jobs.Find("jobs")->as_array()[0].Find("state")->as_string(), "interrupted");
}

// A headless job on PostgreSQL waits for a database that went away,
// keeping what it measured, and goes on once it is back: nothing lost,
// nothing measured twice.
TEST_F(PgCliTest, AHeadlessJobWaitsForTheDatabaseAndLosesNothing) {
  absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
  ASSERT_TRUE(pg.ok()) << pg.status();
  ASSERT_EQ(Run({"tune", "--local", "--device", kPnpoly, "--max-evals", "1", "--db", uri_}).code,
            0);  // the store exists: the job below stores from its first candidate
  const pid_t tune = testing::Spawn(KTUNE_CLI_PATH,
                                    {"tune", "--local", "--device", kConv, "--sim-speed", "20",
                                     "--max-evals", "40", "--strategy", "random", "--db", uri_},
                                    tmp_.File("w.out"), tmp_.File("w.err"));
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok()) << c.status();
  auto stored = [&]() -> std::int64_t {
    absl::StatusOr<pg::Result> r = c->Exec(
        "SELECT count(*) FROM ktune.measurements m JOIN ktune.jobs j ON j.id = m.job_id "
        "WHERE j.strategy = 'random'");
    return r.ok() ? r->Int(0, 0) : -1;
  };
  for (int i = 0; i < 600 && stored() < 3; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_GE(stored(), 3) << testing::Slurp(tmp_.File("w.err"));
  ASSERT_TRUE((*pg)->StopServer().ok());
  // Down until the job has tried to store and said it waits (a minute at most).
  for (int i = 0; i < 600; ++i) {
    if (testing::Slurp(tmp_.File("w.err")).find("cannot store its measurement") !=
        std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE((*pg)->StartServer().ok());
  EXPECT_EQ(testing::WaitExit(tune), 0) << testing::Slurp(tmp_.File("w.err"));
  const std::string err = testing::Slurp(tmp_.File("w.err"));
  EXPECT_THAT(err, HasSubstr("keeping it and trying again"));
  absl::StatusOr<pg::Conn> again = pg::Conn::Connect(uri_);
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<pg::Result> r = again->Exec(
      "SELECT count(*), count(DISTINCT m.config_key), max(j.state), max(j.evaluations) "
      "FROM ktune.measurements m JOIN ktune.jobs j ON j.id = m.job_id "
      "WHERE j.strategy = 'random'");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Int(0, 0), 40);
  EXPECT_EQ(r->Int(0, 1), 40);
  EXPECT_EQ(r->Text(0, 2), "succeeded");
  EXPECT_EQ(r->Int(0, 3), 40);
}

}  // namespace
}  // namespace ktune
