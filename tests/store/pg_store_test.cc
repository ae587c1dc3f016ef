// The PostgreSQL store against a real server the test starts itself
// (tests/testing/postgres.h): the store contract, and what is PostgreSQL's
// own (URIs, the schema `ktune`, migrations, a server that goes away).
#include "tuner/store/pg_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>

#include "tests/store/store_contract.h"
#include "tests/testing/postgres.h"
#include "tuner/base/strings.h"
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

TEST_F(PgStoreTest, AServerThatWentAwayIsSaidAndTheStoreWorksOnceItIsBack) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  JobRecord job;
  job.id = "job1";
  job.kernel_name = "saxpy";
  job.parameters = {"b"};
  job.device.uuid = "GPU-1";
  job.device.name = "Test GPU";
  job.spec_json = "{}";
  job.strategy = "random";
  ASSERT_TRUE((*s)->StartJob(job, nullptr).ok());
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

}  // namespace
}  // namespace ktune
