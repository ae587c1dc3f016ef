// The SQLite store's own behaviour: the file (WAL, schema versions,
// migrations, foreign files), SQLite's handles, and merge sources that are
// not ktune stores. It passes the store contract too (instantiated here).
#include "tuner/store/sqlite_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/store/store_contract.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/strings.h"
#include "tuner/store/merge.h"
#include "tuner/store/schema.h"
#include "tuner/store/sqlite.h"

namespace ktune {

INSTANTIATE_TEST_SUITE_P(
    Sqlite, StoreContractTest,
    ::testing::Values(StoreBackend{"sqlite",
                                   [](const testing::TempDir& dir, const std::string& name) {
                                     return dir.File(name + ".db");
                                   }}),
    [](const ::testing::TestParamInfo<StoreBackend>& p) { return p.param.name; });

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

static_assert(!std::is_copy_constructible_v<SqliteStore>);
static_assert(std::is_nothrow_move_constructible_v<sqlite::Db>);
static_assert(!std::is_copy_constructible_v<sqlite::Db>);
static_assert(std::is_nothrow_move_constructible_v<sqlite::Statement>);
static_assert(!std::is_copy_constructible_v<sqlite::Statement>);
static_assert(!std::is_copy_constructible_v<sqlite::Transaction>);
// A merge source owns its temporary copy: moved, never copied.
static_assert(std::is_nothrow_move_constructible_v<MergeSource>);
static_assert(std::is_nothrow_move_assignable_v<MergeSource>);
static_assert(!std::is_copy_constructible_v<MergeSource>);
static_assert(!std::is_copy_assignable_v<MergeSource>);

class StoreTest : public ::testing::Test {
 protected:
  static JobRecord MakeJob(const std::string& id) {
    JobRecord j;
    j.id = id;
    j.kernel_name = "saxpy";
    j.source_hash = "abc123";
    j.parameters = {"block_size_x"};
    j.device.name = "Test GPU";
    j.device.uuid = "GPU-1";
    j.spec_json = "{}";
    j.strategy = "random";
    return j;
  }

  testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
  const std::string path_ = tmp_.File("t.db");
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A store as the first release wrote it (schema 1): job 'old' in `state`,
// one measurement, its best record.
void WriteVersionOneStore(const std::string& path, const std::string& state) {
  int version = 0;
  absl::StatusOr<sqlite::Db> db = OpenMigrated(path, true, SchemaMigrations().first(1), &version);
  ASSERT_TRUE(db.ok()) << db.status();
  ASSERT_EQ(version, 1);
  ASSERT_TRUE(db->Exec(StrCat(R"sql(
INSERT INTO devices (uuid, name) VALUES ('GPU-9', 'Old GPU');
INSERT INTO kernels (name, source_hash, parameters) VALUES ('k', 'h', 'a');
INSERT INTO jobs (id, kernel_id, device_id, problem, spec, spec_json, strategy, seed, objective,
                  state, created_at, updated_at)
  VALUES ('old', 1, 1, '{}', x'', '{}', 'random', 0, 'time', ')sql",
                              state, R"sql(', 't', 't');
INSERT INTO measurements (job_id, seq, config_key, config, status, time_ms, loss, measured_at)
  VALUES ('old', 0, '1', '{"a":1}', 'ok', 2.5, 2.5, 't');
INSERT INTO best (kernel_id, device_id, problem, objective, job_id, config_key, config, time_ms,
                  loss, updated_at)
  VALUES (1, 1, '{}', 'time', 'old', '1', '{"a":1}', 2.5, 2.5, 't');
)sql"))
                  .ok());
}

TEST_F(StoreTest, CreatesAVersionedWalDatabase) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->schema_version(), SchemaMigrations().back().version);
  EXPECT_TRUE((*s)->CheckIntegrity().ok());
  absl::StatusOr<sqlite::Db> raw = sqlite::Db::Open(path_, false);
  ASSERT_TRUE(raw.ok());
  absl::StatusOr<sqlite::Statement> q = raw->Prepare("PRAGMA journal_mode");
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Text(0), "wal");
}

TEST_F(StoreTest, TransactionRollsBackUnlessCommitted) {
  absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, true);
  ASSERT_TRUE(db.ok());
  ASSERT_TRUE(db->Exec("CREATE TABLE t (x INTEGER)").ok());
  {
    absl::StatusOr<sqlite::Transaction> tx = sqlite::Transaction::Begin(*db);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (1)").ok());
  }  // destroyed without Commit
  {
    absl::StatusOr<sqlite::Transaction> tx = sqlite::Transaction::Begin(*db);
    ASSERT_TRUE(db->Exec("INSERT INTO t VALUES (2)").ok());
    ASSERT_TRUE(tx->Commit().ok());
    EXPECT_FALSE(tx->Commit().ok());
  }
  absl::StatusOr<sqlite::Statement> q = db->Prepare("SELECT group_concat(x) FROM t");
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Text(0), "2");
}

TEST_F(StoreTest, MigratesForwardAndKeepsData) {
  const Migration v1[] = {{1, "CREATE TABLE notes (text TEXT NOT NULL);"}};
  const Migration v2[] = {{1, "CREATE TABLE notes (text TEXT NOT NULL);"},
                          {2, "ALTER TABLE notes ADD COLUMN author TEXT NOT NULL DEFAULT 'anon';"}};
  int version = 0;
  {
    absl::StatusOr<sqlite::Db> s = OpenMigrated(path_, true, v1, &version);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(version, 1);
  }
  {
    absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, false);
    ASSERT_TRUE(db->Exec("INSERT INTO notes (text) VALUES ('kept')").ok());
  }
  {
    absl::StatusOr<sqlite::Db> s = OpenMigrated(path_, false, v2, &version);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(version, 2);
  }
  absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, false);
  absl::StatusOr<sqlite::Statement> q = db->Prepare("SELECT text, author FROM notes");
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Text(0), "kept");
  EXPECT_EQ(q->Text(1), "anon");

  // An older ktune refuses the newer schema and leaves it alone.
  absl::StatusOr<sqlite::Db> old = OpenMigrated(path_, false, v1, nullptr);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(old.status().message()), HasSubstr("schema version 2 is newer"));
}

TEST_F(StoreTest, AVersionOneDatabaseIsMigratedWithItsData) {
  // A database as the first release wrote it: schema 1 only.
  ASSERT_NO_FATAL_FAILURE(WriteVersionOneStore(path_, "succeeded"));
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path_, false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->schema_version(), SchemaMigrations().back().version);
  absl::StatusOr<std::vector<StoredMeasurement>> ms = (*s)->LoadMeasurements("old");
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 1u);
  EXPECT_DOUBLE_EQ((*ms)[0].measurement.time.count(), 2.5);
  EXPECT_FALSE((*ms)[0].measurement.conditions.final_round());  // the new columns' defaults
  EXPECT_TRUE((*ms)[0].measurement.samples_ms.empty());
  EXPECT_TRUE((*s)->CheckIntegrity().ok());
}

TEST_F(StoreTest, AFailedMigrationChangesNothing) {
  const Migration broken[] = {{1, "CREATE TABLE a (x INTEGER); THIS IS NOT SQL;"}};
  absl::StatusOr<sqlite::Db> s = OpenMigrated(path_, true, broken, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("migration to schema version 1"));
  absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, false);
  absl::StatusOr<sqlite::Statement> q =
      db->Prepare("SELECT count(*) FROM sqlite_schema WHERE name = 'a'");
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Int(0), 0);
}

TEST_F(StoreTest, ProcessesOpeningOneNewFileTogetherAllSucceed) {
  // A daemon and a CLI (or a test watching a run) may open a database that
  // another connection is creating right then: the migration must be applied
  // once, and nobody may fail on a table that already exists.
  for (int round = 0; round < 5; ++round) {
    const std::string path = tmp_.File("race" + std::to_string(round) + ".db");
    constexpr int kOpeners = 6;
    std::atomic<int> ready{0};
    std::vector<absl::Status> results(kOpeners);
    std::vector<std::thread> threads;
    threads.reserve(kOpeners);
    for (int i = 0; i < kOpeners; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kOpeners) std::this_thread::yield();
        absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path, true);
        results[i] = s.status();
        if (s.ok() && (*s)->schema_version() != SchemaMigrations().back().version) {
          results[i] = absl::InternalError("wrong schema version");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& r : results) EXPECT_TRUE(r.ok()) << r;
  }
}

TEST_F(StoreTest, RefusesForeignFilesWithoutTouchingThem) {
  {
    absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, true);
    ASSERT_TRUE(db->Exec("CREATE TABLE mine (x); INSERT INTO mine VALUES (7);").ok());
  }
  const std::string before = Slurp(path_);
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path_, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("not a ktune database"));
  EXPECT_EQ(Slurp(path_), before);

  const std::string text = dir_ + "/notes.txt";
  std::ofstream(text) << "these are my notes, not a database\n";
  const std::string text_before = Slurp(text);
  absl::StatusOr<std::unique_ptr<Store>> t = Store::Open(text, true);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t.status().message(),
            text + ": not a SQLite database, so not a ktune store; nothing was changed");
  EXPECT_EQ(Slurp(text), text_before);
}

TEST_F(StoreTest, MergeRefusesSourcesThatAreNotKtuneStoresOrAreDamaged) {
  const std::string text = dir_ + "/notes.txt";
  std::ofstream(text) << "these are my notes, not a database\n";
  absl::StatusOr<MergeSource> bad = MergeSource::Prepare(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bad.status().message(),
            text + ": not a SQLite database, so not a ktune store; nothing was changed");
  const std::string foreign = dir_ + "/foreign.db";
  {
    absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(foreign, true);
    ASSERT_TRUE(db->Exec("CREATE TABLE mine (x); INSERT INTO mine VALUES (7);").ok());
  }
  bad = MergeSource::Prepare(foreign);
  ASSERT_FALSE(bad.ok());
  // The message names the file given, not the temporary copy.
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(foreign + ": not a ktune database"));
  EXPECT_THAT(std::string(bad.status().message()), Not(HasSubstr("ktune-merge-")));
  EXPECT_EQ(MergeSource::Prepare(dir_ + "/none.db").status().code(), absl::StatusCode::kNotFound);
  // A forged row would leave the target unreadable: the source is refused.
  const std::string forged = dir_ + "/forged.db";
  {
    absl::StatusOr<std::unique_ptr<Store>> f = Store::Open(forged, true);
    ASSERT_TRUE((*f)->StartJob(MakeJob("jobF"), nullptr).ok());
  }
  {
    absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(forged, false);
    ASSERT_TRUE(db->Exec("UPDATE jobs SET problem = '[[['").ok());
  }
  bad = MergeSource::Prepare(forged);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      std::string(bad.status().message()),
      HasSubstr(forged + ": a damaged ktune database (stored problem is not a JSON object"));
}

TEST_F(StoreTest, MergeMigratesAnOldSourcesCopyOnly) {
  // A quote in the name, which the merge's message carries into SQL.
  const std::string source_path = tmp_.File("node's old.db");
  ASSERT_NO_FATAL_FAILURE(WriteVersionOneStore(source_path, "running"));
  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path_, true);
  absl::StatusOr<MergeStats> stats = (*s)->Merge(*source);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs_added, 1);
  absl::StatusOr<JobRecord> old = (*s)->GetJob("old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state, JobState::kInterrupted);
  EXPECT_THAT(old->message, HasSubstr("merged from " + source_path + " while it ran there"));
  EXPECT_EQ(old->runner, "");
  EXPECT_EQ((*s)->FindBest("k", std::nullopt, std::nullopt, std::nullopt)->size(), 1u);
  // The source itself is still at schema 1.
  absl::StatusOr<sqlite::Db> raw = sqlite::Db::Open(source_path, false);
  absl::StatusOr<sqlite::Statement> q =
      raw->Prepare("SELECT user_version FROM pragma_user_version");
  ASSERT_TRUE(q->Step().ok());
  EXPECT_EQ(q->Int(0), 1);
}

}  // namespace
}  // namespace ktune
