// The PostgreSQL store against a real server the test starts itself
// (tests/testing/postgres.h): the store contract, and what is PostgreSQL's
// own (URIs, the schema `ktune`, migrations, a server that goes away).
#include "tuner/store/pg_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "tests/store/store_contract.h"
#include "tests/testing/postgres.h"
#include "tuner/base/strings.h"
#include "tuner/store/lease_keeper.h"
#include "tuner/store/libpq.h"
#include "tuner/store/pg.h"

namespace ktune {
namespace {

// A fresh database per (test folder, store name): the same store each time
// a test names it again.
std::string DatabaseFor(const testing::TempDir& dir, const std::string& name) {
  static std::map<std::string, std::string> made;
  const std::string key = dir.path() + "/" + name;
  if (auto it = made.find(key); it != made.end()) return it->second;
  absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
  if (!pg.ok()) {
    ADD_FAILURE() << pg.status();
    return "postgresql:///none?host=/nonexistent";
  }
  static std::atomic<int> next{0};
  absl::StatusOr<std::string> uri = (*pg)->CreateDatabase(StrCat("t", getpid(), "_", next++));
  if (!uri.ok()) {
    ADD_FAILURE() << uri.status();
    return "postgresql:///none?host=/nonexistent";
  }
  made[key] = *uri;
  return *uri;
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
                         ::testing::Values(StoreBackend{"postgres", DatabaseFor}),
                         [](const ::testing::TestParamInfo<StoreBackend>& p) {
                           return p.param.name;
                         });

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = *pg;
    uri_ = DatabaseFor(tmp_, "main");
  }
  testing::TempDir tmp_;
  testing::PostgresCluster* pg_ = nullptr;
  std::string uri_;
};

TEST(PgUriTest, PasswordsNeverReachMessages) {
  EXPECT_EQ(pg::Redact("postgresql://ann:s3cret@db.example/ktune"),
            "postgresql://ann:***@db.example/ktune");
  EXPECT_EQ(pg::Redact("postgresql://db/ktune?user=ann&password=s3cret&sslmode=require"),
            "postgresql://db/ktune?user=ann&password=***&sslmode=require");
  EXPECT_EQ(pg::Redact("postgresql://ann@db/ktune"), "postgresql://ann@db/ktune");
  EXPECT_TRUE(pg::IsUri("postgres://x/y"));
  EXPECT_TRUE(pg::IsUri("postgresql:///y"));
  EXPECT_FALSE(pg::IsUri("ktune.db"));
  EXPECT_FALSE(pg::IsUri("./postgresql:/x.db"));
}

TEST(PgUriTest, AnUnreachableServerOrABadUriIsNamedWithoutThePassword) {
  absl::StatusOr<std::unique_ptr<Store>> s =
      Store::Open("postgresql://ann:s3cret@/ktune?host=/nonexistent-socket-dir", false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("cannot reach the database"));
  EXPECT_THAT(s.status().message(), HasSubstr("ann:***@"));
  EXPECT_THAT(s.status().message(), Not(HasSubstr("s3cret")));
  s = Store::Open("postgresql://ann:s3cret@/ktune?nonsense=1", false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("nonsense"));
  EXPECT_THAT(s.status().message(), Not(HasSubstr("s3cret")));
}

TEST(PgLibraryTest, LoadedOnceWhenADatabaseIsOpened) {
  // Loaded on first use, not linked (PgCliTest.LibpqIsLoadedOnlyWhenAPostgresDatabaseIsOpened
  // shows a SQLite command never loads it); loaded once.
  absl::StatusOr<const pg::LibPq*> a = pg::LoadLibPq();
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<const pg::LibPq*> b = pg::LoadLibPq();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(&pg::Pq(), *a);
  EXPECT_NE((*a)->PQconnectdb, nullptr);
  EXPECT_NE((*a)->PQunescapeBytea, nullptr);
}

TEST(PgLibraryTest, AMissingLibraryIsNamedWithHowToInstallIt) {
  absl::StatusOr<const pg::LibPq*> api = pg::LoadLibPqFrom("libpq-not-installed.so.5");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition) << api.status();
  EXPECT_THAT(api.status().message(), HasSubstr("libpq-not-installed.so.5"));
  EXPECT_THAT(api.status().message(), HasSubstr("apt-get install libpq5"));
  // A library without libpq's functions (the C library) is refused by name.
  api = pg::LoadLibPqFrom("libc.so.6");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kFailedPrecondition) << api.status();
  EXPECT_THAT(api.status().message(), HasSubstr("has no PQclear"));
}

TEST_F(PgStoreTest, AMissingDatabaseIsNamed) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(pg_->Uri("no_such_db"), true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("no_such_db"));
}

TEST_F(PgStoreTest, CreatesItsSchemaOnceAndReadsTheVersion) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  const int latest = PgSchemaMigrations().back().version;
  EXPECT_EQ((*s)->schema_version(), latest);
  EXPECT_EQ((*s)->locator(), uri_);
  absl::StatusOr<std::unique_ptr<Store>> again = Store::Open(uri_, false);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->schema_version(), latest);
}

TEST_F(PgStoreTest, ASchemaKtuneOfOtherDataIsRefusedAndLeftAlone) {
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->Run("CREATE SCHEMA ktune; CREATE TABLE ktune.jobs (x int); "
                     "INSERT INTO ktune.jobs VALUES (42)")
                  .ok());
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("not a ktune store"));
  absl::StatusOr<pg::Result> r = c->Exec("SELECT x FROM ktune.jobs");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Int(0, 0), 42);
}

TEST_F(PgStoreTest, ANewerSchemaIsRefusedAndLeftAlone) {
  ASSERT_TRUE(Store::Open(uri_, true).ok());
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->Run("UPDATE ktune.meta SET value = '999' WHERE key = 'schema_version'").ok());
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("schema version 999 is newer"));
  EXPECT_EQ(c->Exec("SELECT value FROM ktune.meta WHERE key = 'schema_version'")->Text(0, 0),
            "999");
}

TEST_F(PgStoreTest, ProcessesCreatingOneStoreTogetherAllSucceed) {
  constexpr int kProcesses = 6;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
      _exit(s.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, false);
  ASSERT_TRUE(s.ok()) << s.status();
}

JobRecord TestJob(const std::string& id) {
  JobRecord job;
  job.id = id;
  job.kernel_name = "saxpy";
  job.parameters = {"b"};
  job.device.uuid = "GPU-1";
  job.device.name = "Test GPU";
  job.spec_json = "{}";
  job.strategy = "random";
  job.origin = "cli";
  return job;
}

TEST_F(PgStoreTest, AServerThatWentAwayIsSaidAndTheStoreWorksOnceItIsBack) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->StartJob(TestJob("job1"), nullptr).ok());
  ASSERT_TRUE(pg_->StopServer().ok());
  absl::StatusOr<JobRecord> gone = (*s)->GetJob("job1");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kUnavailable) << gone.status();
  ASSERT_TRUE(pg_->StartServer().ok());
  // A call may still meet the old connection's end; the next connects again.
  absl::StatusOr<JobRecord> back = (*s)->GetJob("job1");
  if (!back.ok()) back = (*s)->GetJob("job1");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state, JobState::kRunning);
}

// A job run outside a daemon holds a lease too: while it is live, a
// process of another host (whose liveness no one here can read) may not
// start the job; once it lapses the job reads as interrupted, in every
// reader, and may be resumed anywhere.
TEST_F(PgStoreTest, AJobsLeaseKeepsOtherHostsOutUntilItLapses) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  const JobRecord job = TestJob("h");
  ASSERT_TRUE((*s)->StartJob(job, nullptr).ok());
  EXPECT_TRUE((*s)->RenewLease("h", std::chrono::seconds(60)).ok());
  EXPECT_EQ((*s)->RenewLease("nothing", std::chrono::seconds(60)).code(),
            absl::StatusCode::kFailedPrecondition);
  // The job's process, as another host would have named it.
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->Run("UPDATE ktune.jobs SET runner = 'elsewhere|b|pid:[1]|4242|99'").ok());
  absl::StatusOr<JobRecord> refused = (*s)->StartJob(job, nullptr);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("pid 4242 on elsewhere, which holds its lease"));
  EXPECT_EQ((*s)->RenewLease("h", std::chrono::seconds(60)).code(),
            absl::StatusCode::kFailedPrecondition);  // not this process's
  EXPECT_EQ((*s)->GetJob("h")->state, JobState::kRunning);

  ASSERT_TRUE(c->Run("UPDATE ktune.jobs SET lease_until = now() - interval '1 second'").ok());
  absl::StatusOr<JobRecord> lapsed = (*s)->GetJob("h");
  ASSERT_TRUE(lapsed.ok()) << lapsed.status();
  EXPECT_EQ(lapsed->state, JobState::kInterrupted);
  EXPECT_THAT(lapsed->message, HasSubstr("its lease lapsed at 20"));
  EXPECT_THAT(lapsed->message, HasSubstr("pid 4242 on elsewhere stopped renewing it"));
  EXPECT_THAT(lapsed->message, HasSubstr("run the same job again to resume it"));
  EXPECT_EQ((*s)->ListJobs()->at(0).state, JobState::kInterrupted);
  const std::map<JobState, std::int64_t> counts = (*s)->CountJobs().value();
  EXPECT_EQ(counts.count(JobState::kRunning), 0u);
  EXPECT_EQ(counts.at(JobState::kInterrupted), 1);
  bool resumed = false;
  ASSERT_TRUE((*s)->StartJob(job, &resumed).ok());
  EXPECT_TRUE(resumed);
  EXPECT_EQ((*s)->GetJob("h")->state, JobState::kRunning);
  EXPECT_TRUE((*s)->RenewLease("h", std::chrono::seconds(60)).ok());
  absl::StatusOr<pg::Result> live = c->Exec("SELECT lease_until > now() FROM ktune.jobs");
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->Text(0, 0), "t");
}

// The keeper renews from a connection of its own for as long as it lives.
TEST_F(PgStoreTest, ALeaseKeeperRenewsTheLeaseWhileItLives) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->StartJob(TestJob("k"), nullptr).ok());
  absl::StatusOr<pg::Conn> c = pg::Conn::Connect(uri_);
  ASSERT_TRUE(c.ok()) << c.status();
  auto lease_until = [&] {
    absl::StatusOr<pg::Result> r = c->Exec("SELECT lease_until::text FROM ktune.jobs");
    return r.ok() ? r->Text(0, 0) : std::string();
  };
  std::string last;
  {
    LeaseKeeper keeper(uri_, "k", std::chrono::milliseconds(900));
    // Three renewals, a third of the lease apart (bounded: a minute).
    for (int i = 0; i < 600 && keeper.renewals() < 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_GE(keeper.renewals(), 3);
    absl::StatusOr<pg::Result> live = c->Exec("SELECT lease_until > now() FROM ktune.jobs");
    ASSERT_TRUE(live.ok());
    EXPECT_EQ(live->Text(0, 0), "t");
  }
  last = lease_until();
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // two periods
  EXPECT_EQ(lease_until(), last);                               // no renewal after it is gone
}

}  // namespace
}  // namespace ktune
