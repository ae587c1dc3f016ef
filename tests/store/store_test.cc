#include "tuner/store/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/process.h"
#include "tuner/base/strings.h"
#include "tuner/store/sqlite.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

static_assert(std::is_nothrow_move_constructible_v<Store>);
static_assert(!std::is_copy_constructible_v<Store>);
static_assert(std::is_nothrow_move_constructible_v<sqlite::Db>);
static_assert(!std::is_copy_constructible_v<sqlite::Db>);
static_assert(std::is_nothrow_move_constructible_v<sqlite::Statement>);
static_assert(!std::is_copy_constructible_v<sqlite::Statement>);
static_assert(!std::is_copy_constructible_v<sqlite::Transaction>);
// A merge source owns its temporary copy: moved, never copied (a copy's
// destructor would delete the file under the original).
static_assert(std::is_nothrow_move_constructible_v<MergeSource>);
static_assert(std::is_nothrow_move_assignable_v<MergeSource>);
static_assert(!std::is_copy_constructible_v<MergeSource>);
static_assert(!std::is_copy_assignable_v<MergeSource>);

class StoreTest : public ::testing::Test {
 protected:
  static JobRecord MakeJob(const std::string& id, const std::string& device_uuid = "GPU-1") {
    JobRecord j;
    j.id = id;
    j.kernel_name = "saxpy";
    j.source_hash = "abc123";
    j.parameters = {"block_size_x", "tile"};
    j.device.id = "cuda:0";
    j.device.name = "Test GPU";
    j.device.uuid = device_uuid;
    j.device.architecture = "sm_90";
    j.problem = {{"N", 1 << 20}};
    j.spec = std::string("\x01\x00\x02", 3);
    j.spec_json = "{}";
    j.strategy = "random";
    j.seed = 18446744073709551615ULL;
    return j;
  }

  static StoredMeasurement Ok(std::int64_t seq, const std::string& key, double ms) {
    StoredMeasurement m;
    m.sequence = seq;
    m.key = key;
    m.config_json = "{\"k\":\"" + key + "\"}";
    m.measurement.status = CandidateStatus::kOk;
    m.measurement.time = Millis(ms);
    m.measurement.stats = ComputeStats({ms * 0.9, ms, ms * 1.1});
    m.measurement.compile_time = Millis(12.5);
    m.measurement.cost = Millis(40);
    m.objective = ms;
    m.loss = ms;
    return m;
  }

  testing::TempDir tmp_;
  const std::string& dir_ = tmp_.path();
  const std::string path_ = tmp_.File("t.db");
};

TEST_F(StoreTest, CreatesAVersionedWalDatabase) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->schema_version(), SchemaMigrations().back().version);
  EXPECT_TRUE(s->CheckIntegrity().ok());
  absl::StatusOr<sqlite::Db> raw = sqlite::Db::Open(path_, false);
  ASSERT_TRUE(raw.ok());
  absl::StatusOr<sqlite::Statement> q = raw->Prepare("PRAGMA journal_mode");
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(*q->Step());
  EXPECT_EQ(q->Text(0), "wal");
}

TEST_F(StoreTest, MissingDatabaseIsNotCreatedWhenReading) {
  absl::StatusOr<Store> s = Store::Open(path_, false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(access(path_.c_str(), F_OK), 0);
}

TEST_F(StoreTest, JobsStartOnceAndResume) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s.ok());
  bool resumed = true;
  absl::StatusOr<JobRecord> j = s->StartJob(MakeJob("aaaa1111"), &resumed);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(resumed);
  EXPECT_EQ(j->state, JobState::kRunning);
  EXPECT_EQ(j->seed, 18446744073709551615ULL);
  EXPECT_EQ(j->spec, std::string("\x01\x00\x02", 3));
  EXPECT_EQ(j->parameters, (std::vector<std::string>{"block_size_x", "tile"}));
  EXPECT_EQ(j->problem.at("N"), 1 << 20);
  EXPECT_EQ(j->device.architecture, "sm_90");
  ASSERT_TRUE(s->SetJobState("aaaa1111", JobState::kInterrupted, "stopped").ok());
  j = s->StartJob(MakeJob("aaaa1111"), &resumed);
  ASSERT_TRUE(j.ok());
  EXPECT_TRUE(resumed);
  EXPECT_EQ(j->state, JobState::kRunning);
  EXPECT_EQ(s->SetJobState("nope", JobState::kFailed, "").code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, MeasurementsRoundTripInOrder) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s->StartJob(MakeJob("job1"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("job1", Ok(0, "128,1", 2.5)).ok());
  StoredMeasurement failed;
  failed.sequence = 1;
  failed.key = "256,4";
  failed.config_json = "{}";
  failed.measurement.status = CandidateStatus::kCompileError;
  failed.measurement.message = "error: too many resources\nline 2";
  failed.measurement.cost = Millis(100);
  ASSERT_TRUE(s->AddMeasurement("job1", failed).ok());
  ASSERT_TRUE(s->AddMeasurement("job1", Ok(2, "64,2", 1.25)).ok());

  absl::StatusOr<std::vector<StoredMeasurement>> ms = s->LoadMeasurements("job1");
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 3u);
  EXPECT_EQ((*ms)[0].key, "128,1");
  EXPECT_EQ((*ms)[1].measurement.status, CandidateStatus::kCompileError);
  EXPECT_TRUE(std::isnan((*ms)[1].measurement.time.count()));
  EXPECT_EQ((*ms)[1].measurement.message, "error: too many resources\nline 2");
  EXPECT_FALSE((*ms)[1].loss.has_value());
  EXPECT_DOUBLE_EQ((*ms)[2].measurement.time.count(), 1.25);
  EXPECT_EQ((*ms)[2].measurement.stats.samples, 3);
  EXPECT_DOUBLE_EQ((*ms)[2].measurement.stats.median.count(), 1.25);
  EXPECT_DOUBLE_EQ((*ms)[2].measurement.compile_time.count(), 12.5);
  EXPECT_DOUBLE_EQ((*ms)[0].measurement.cost.count(), 40);
  EXPECT_EQ(s->GetJob("job1")->evaluations, 3);

  // A configuration is measured once per job.
  absl::Status dup = s->AddMeasurement("job1", Ok(3, "64,2", 0.5));
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s->GetJob("job1")->evaluations, 3);
  EXPECT_EQ(s->LoadMeasurements("job1")->size(), 3u);
}

TEST_F(StoreTest, BestKeepsTheLowestLossAcrossJobs) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s->StartJob(MakeJob("jobA"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("jobB"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("jobC", "GPU-2"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("jobA", Ok(0, "a", 3.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("jobA", Ok(1, "b", 2.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("jobB", Ok(0, "c", 2.5)).ok());  // worse: ignored
  ASSERT_TRUE(s->AddMeasurement("jobC", Ok(0, "d", 9.0)).ok());  // other device
  absl::StatusOr<std::vector<BestRecord>> all =
      s->FindBest("saxpy", std::nullopt, std::nullopt, std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  absl::StatusOr<std::vector<BestRecord>> one =
      s->FindBest("saxpy", std::string("GPU-1"), Problem{{"N", 1 << 20}}, std::string("time"));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].key, "b");
  EXPECT_EQ((*one)[0].job_id, "jobA");
  EXPECT_DOUBLE_EQ((*one)[0].time_ms, 2.0);
  ASSERT_TRUE(s->AddMeasurement("jobB", Ok(1, "e", 1.0)).ok());  // better: replaces
  one = s->FindBest("saxpy", std::string("Test GPU"), Problem{{"N", 1 << 20}}, std::nullopt);
  ASSERT_EQ(one->size(), 2u);  // both devices share the name
  EXPECT_TRUE(s->FindBest("saxpy", std::nullopt, Problem{{"N", 5}}, std::nullopt)->empty());
  EXPECT_TRUE(s->FindBest("other", std::nullopt, std::nullopt, std::nullopt)->empty());
}

TEST_F(StoreTest, BestMatchFallsBackToTheNearestProblemThenTheArchitecture) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s.ok());
  auto job = [&](const std::string& id, const std::string& uuid, const std::string& name,
                 const std::string& arch, std::int64_t n, const std::string& hash) {
    JobRecord j = MakeJob(id, uuid);
    j.device.name = name;
    j.device.architecture = arch;
    j.problem = {{"N", n}};
    j.source_hash = hash;
    return j;
  };
  ASSERT_TRUE(s->StartJob(job("small", "GPU-1", "H200", "sm_90", 1 << 10, "h1"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(job("large", "GPU-1", "H200", "sm_90", 1 << 24, "h1"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(job("a100", "GPU-3", "A100", "sm_80", 1 << 20, "h1"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("small", Ok(0, "s", 1.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("large", Ok(0, "l", 5.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("a100", Ok(0, "a", 2.0)).ok());

  BestQuery q;
  q.kernel = "saxpy";
  q.device = "H200";
  q.problem = {{"N", 1 << 24}};
  absl::StatusOr<BestMatch> m = s->FindBestMatch(q);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, BestMatchKind::kExact);
  EXPECT_EQ(m->best.key, "l");
  EXPECT_FALSE(m->source_differs);

  q.problem = {{"N", 1 << 20}};  // 2^20 is nearer 2^24 than 2^10 on a log scale
  m = s->FindBestMatch(q);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->kind, BestMatchKind::kNearestProblem);
  EXPECT_EQ(m->best.key, "l");
  EXPECT_NEAR(m->distance, 4 * std::log(2.0), 1e-9);

  q.exact_only = true;
  m = s->FindBestMatch(q);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("exact match asked"));
  q.exact_only = false;

  // Another device of the A100's architecture, known by its architecture.
  q.device = "A30";
  q.architecture = "sm_80";
  m = s->FindBestMatch(q);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->kind, BestMatchKind::kSameArchitecture);
  EXPECT_EQ(m->best.key, "a");
  EXPECT_EQ(m->best.device.name, "A100");

  // Nothing of architecture sm_75: NOT_FOUND saying what is held.
  q.architecture = "sm_75";
  m = s->FindBestMatch(q);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("A100 {\"N\":1048576}"));

  // Another source under the same name is reported, not hidden.
  q.device = "H200";
  q.architecture.clear();
  q.problem = {{"N", 1 << 24}};
  q.source_hash = "h2";
  m = s->FindBestMatch(q);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->source_differs);
  q.source_hash = "h1";
  EXPECT_FALSE(s->FindBestMatch(q)->source_differs);

  q.kernel = "nothing";
  EXPECT_EQ(s->FindBestMatch(q).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StoreTest, QueuedJobsKeepTheirOriginAndPriority) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  JobRecord j = MakeJob("q1");
  j.origin = "daemon";
  j.priority = 3;
  bool existed = true;
  absl::StatusOr<JobRecord> r = s->QueueJob(j, &existed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(existed);
  EXPECT_EQ(r->state, JobState::kQueued);
  EXPECT_EQ(r->origin, "daemon");
  EXPECT_EQ(r->priority, 3);
  r = s->StartJob(MakeJob("q1"), &existed);  // a session starts it
  EXPECT_TRUE(existed);
  EXPECT_EQ(r->state, JobState::kRunning);
  EXPECT_EQ(r->origin, "daemon");
}

// A child process that starts job `id` in the store at `path`, says so on
// `ready` and then waits to be killed (it never records the job's end).
pid_t StartJobInAChild(const std::string& path, const JobRecord& job) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    absl::StatusOr<Store> s = Store::Open(path, true);
    bool resumed = false;
    const char ok = s.ok() && s->StartJob(job, &resumed).ok() ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(ready[1]);
  char ok = 'n';
  if (pid < 0 || read(ready[0], &ok, 1) != 1 || ok != 'y') {
    if (pid > 0) kill(pid, SIGKILL);
    close(ready[0]);
    return -1;
  }
  close(ready[0]);
  return pid;
}

TEST_F(StoreTest, AJobRunByALiveProcessIsNotRunTwiceAndADeadOnesReadsInterrupted) {
  const pid_t child = StartJobInAChild(path_, MakeJob("job1"));
  ASSERT_GT(child, 0);
  testing::KilledAtExit reaper(child);
  absl::StatusOr<Store> s = Store::Open(path_, false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kRunning);
  EXPECT_TRUE(RunByAnotherProcess(s->GetJob("job1")->runner));

  bool resumed = false;
  absl::StatusOr<JobRecord> twice = s->StartJob(MakeJob("job1"), &resumed);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(), HasSubstr("already running (pid " + std::to_string(child)));
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kRunning);
  // Another job of the store is free to run.
  EXPECT_TRUE(s->StartJob(MakeJob("job2"), &resumed).ok());

  kill(child, SIGKILL);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  reaper.Release();
  absl::StatusOr<JobRecord> left = s->GetJob("job1");
  EXPECT_EQ(left->state, JobState::kInterrupted);
  EXPECT_THAT(left->message, HasSubstr("pid " + std::to_string(child)));
  EXPECT_THAT(left->message, HasSubstr("run the same job again to resume it"));
  EXPECT_FALSE(RunByAnotherProcess(left->runner));
  // Ours (job2) still reads running; the dead one's job is taken over.
  EXPECT_EQ(s->GetJob("job2")->state, JobState::kRunning);
  absl::StatusOr<JobRecord> taken = s->StartJob(MakeJob("job1"), &resumed);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(resumed);
  EXPECT_EQ(taken->state, JobState::kRunning);
  EXPECT_EQ(taken->runner, ThisProcess()->Encode());
  ASSERT_TRUE(s->SetJobState("job1", JobState::kSucceeded, "").ok());
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kSucceeded);
}

TEST_F(StoreTest, JobIdPrefixes) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s->StartJob(MakeJob("abc123"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("abd456"), nullptr).ok());
  EXPECT_EQ(s->GetJob("abc")->id, "abc123");
  EXPECT_EQ(s->GetJob("ab").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->GetJob("zz").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->GetJob("%").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->ListJobs()->size(), 2u);
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

TEST_F(StoreTest, AVersionOneDatabaseIsMigratedWithItsData) {
  // A database as the first release wrote it: schema 1 only.
  ASSERT_NO_FATAL_FAILURE(WriteVersionOneStore(path_, "succeeded"));
  absl::StatusOr<Store> s = Store::Open(path_, false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->schema_version(), SchemaMigrations().back().version);
  absl::StatusOr<std::vector<StoredMeasurement>> ms = s->LoadMeasurements("old");
  ASSERT_TRUE(ms.ok()) << ms.status();
  ASSERT_EQ(ms->size(), 1u);
  EXPECT_DOUBLE_EQ((*ms)[0].measurement.time.count(), 2.5);
  EXPECT_FALSE((*ms)[0].measurement.conditions.final_round());  // the new columns' defaults
  EXPECT_TRUE((*ms)[0].measurement.samples_ms.empty());
  EXPECT_TRUE(s->CheckIntegrity().ok());
}

TEST_F(StoreTest, SamplesRoundTripAndAnUpdateReplacesTheValues) {
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s->StartJob(MakeJob("job1"), nullptr).ok());
  StoredMeasurement m = Ok(0, "a", 1.5);
  m.measurement.samples_ms = {1.4, 1.5, 1.6};
  m.measurement.conditions.set_raced(true);
  ASSERT_TRUE(s->AddMeasurement("job1", m).ok());
  const StoredMeasurement back = (*s->LoadMeasurements("job1"))[0];
  EXPECT_EQ(back.measurement.samples_ms, m.measurement.samples_ms);
  EXPECT_TRUE(back.measurement.conditions.raced());
  // Updating keeps the sequence and replaces the values.
  m.measurement.time = Millis(9.0);
  m.loss = 9.0;
  m.measurement.conditions.set_final_round(true);
  ASSERT_TRUE(s->UpdateMeasurement("job1", m).ok());
  ASSERT_TRUE(s->RefreshBest("job1").ok());
  const StoredMeasurement updated = (*s->LoadMeasurements("job1"))[0];
  EXPECT_DOUBLE_EQ(updated.measurement.time.count(), 9.0);
  EXPECT_TRUE(updated.measurement.conditions.final_round());
  EXPECT_DOUBLE_EQ((*s->FindBest("saxpy", std::nullopt, std::nullopt, std::nullopt))[0].time_ms,
                   9.0);
  StoredMeasurement missing = m;
  missing.key = "zz";
  EXPECT_EQ(s->UpdateMeasurement("job1", missing).code(), absl::StatusCode::kNotFound);
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
    for (int i = 0; i < kOpeners; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kOpeners) std::this_thread::yield();
        absl::StatusOr<Store> s = Store::Open(path, true);
        results[i] = s.status();
        if (s.ok() && s->schema_version() != SchemaMigrations().back().version) {
          results[i] = absl::InternalError("wrong schema version");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const absl::Status& r : results) EXPECT_TRUE(r.ok()) << r;
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST_F(StoreTest, RefusesForeignFilesWithoutTouchingThem) {
  {
    absl::StatusOr<sqlite::Db> db = sqlite::Db::Open(path_, true);
    ASSERT_TRUE(db->Exec("CREATE TABLE mine (x); INSERT INTO mine VALUES (7);").ok());
  }
  const std::string before = Slurp(path_);
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("not a ktune database"));
  EXPECT_EQ(Slurp(path_), before);

  const std::string text = dir_ + "/notes.txt";
  std::ofstream(text) << "these are my notes, not a database\n";
  const std::string text_before = Slurp(text);
  absl::StatusOr<Store> t = Store::Open(text, true);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("not a SQLite database"));
  EXPECT_EQ(Slurp(text), text_before);
}

TEST_F(StoreTest, MergeAddsWhatTheTargetLacksOnceAndLeavesTheSourceAlone) {
  const std::string source_path = tmp_.File("node7.db");
  {
    absl::StatusOr<Store> src = Store::Open(source_path, true);
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_TRUE(src->StartJob(MakeJob("jobA"), nullptr).ok());
    ASSERT_TRUE(src->AddMeasurement("jobA", Ok(0, "a", 3.0)).ok());
    ASSERT_TRUE(src->AddMeasurement("jobA", Ok(1, "b", 2.0)).ok());
    ASSERT_TRUE(src->AddMeasurement("jobA", Ok(2, "x", 1.5)).ok());
    ASSERT_TRUE(src->SetJobState("jobA", JobState::kSucceeded, "budget spent").ok());
    ASSERT_TRUE(src->StartJob(MakeJob("jobC", "GPU-2"), nullptr).ok());
    ASSERT_TRUE(src->AddMeasurement("jobC", Ok(0, "d", 9.0)).ok());
    ASSERT_TRUE(src->SetJobState("jobC", JobState::kSucceeded, "").ok());
  }
  const std::string source_before = Slurp(source_path);
  absl::StatusOr<Store> s = Store::Open(path_, true);
  ASSERT_TRUE(s.ok()) << s.status();
  // Here: jobA cut short after a and y; jobB measured c on the same GPU.
  ASSERT_TRUE(s->StartJob(MakeJob("jobA"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("jobA", Ok(0, "a", 3.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("jobA", Ok(1, "y", 4.0)).ok());
  ASSERT_TRUE(s->SetJobState("jobA", JobState::kInterrupted, "").ok());
  ASSERT_TRUE(s->StartJob(MakeJob("jobB"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("jobB", Ok(0, "c", 2.5)).ok());
  ASSERT_TRUE(s->SetJobState("jobB", JobState::kSucceeded, "").ok());

  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<MergeStats> stats = s->Merge(*source);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->devices, 1);  // GPU-2
  EXPECT_EQ(stats->kernels, 0);
  EXPECT_EQ(stats->jobs_added, 1);     // jobC
  EXPECT_EQ(stats->jobs_extended, 1);  // jobA
  EXPECT_EQ(stats->measurements, 3);   // b, x, d
  EXPECT_EQ(stats->best, 2);           // GPU-1 improved, GPU-2 new

  // jobA: its own measurements first, then those only the source had, in
  // the source's order; it succeeded there.
  absl::StatusOr<std::vector<StoredMeasurement>> a = s->LoadMeasurements("jobA");
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<std::string> keys;
  for (const StoredMeasurement& m : *a) keys.push_back(m.key + "@" + std::to_string(m.sequence));
  EXPECT_EQ(keys, (std::vector<std::string>{"a@0", "y@1", "b@2", "x@3"}));
  EXPECT_DOUBLE_EQ((*a)[3].measurement.time.count(), 1.5);
  EXPECT_EQ((*a)[3].measurement.stats.samples, 3);
  EXPECT_EQ(s->GetJob("jobA")->state, JobState::kSucceeded);
  EXPECT_EQ(s->GetJob("jobA")->message, "budget spent");
  EXPECT_EQ(s->GetJob("jobA")->evaluations, 4);
  EXPECT_EQ(s->GetJob("jobC")->device.uuid, "GPU-2");
  EXPECT_EQ(s->GetJob("jobC")->evaluations, 1);
  EXPECT_EQ(s->GetJob("jobB")->evaluations, 1);
  absl::StatusOr<std::vector<BestRecord>> best =
      s->FindBest("saxpy", std::string("GPU-1"), std::nullopt, std::nullopt);
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ((*best)[0].key, "x");
  EXPECT_EQ((*best)[0].job_id, "jobA");
  EXPECT_EQ(s->FindBest("saxpy", std::string("GPU-2"), std::nullopt, std::nullopt)->size(), 1u);
  EXPECT_TRUE(s->CheckIntegrity().ok());

  // Again: nothing to add.
  stats = s->Merge(*source);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->devices + stats->kernels + stats->jobs_added + stats->jobs_extended +
                stats->measurements + stats->best,
            0);
  EXPECT_EQ(s->LoadMeasurements("jobA")->size(), 4u);
  EXPECT_EQ(Slurp(source_path), source_before);
  // The temporary copy goes with the source object.
  const std::string copy = source->copy_path();
  EXPECT_EQ(access(copy.c_str(), F_OK), 0);
  { MergeSource gone = *std::move(source); }
  EXPECT_NE(access(copy.c_str(), F_OK), 0);
}

TEST_F(StoreTest, MergeInterruptsAJobThatRanThereAndMigratesAnOldSourceCopyOnly) {
  // A quote in the name, which the merge's message carries into SQL.
  const std::string source_path = tmp_.File("node's old.db");
  ASSERT_NO_FATAL_FAILURE(WriteVersionOneStore(source_path, "running"));
  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<Store> s = Store::Open(path_, true);
  absl::StatusOr<MergeStats> stats = s->Merge(*source);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs_added, 1);
  absl::StatusOr<JobRecord> old = s->GetJob("old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state, JobState::kInterrupted);
  EXPECT_THAT(old->message, HasSubstr("merged from " + source_path + " while it ran there"));
  EXPECT_EQ(old->runner, "");
  EXPECT_EQ(s->FindBest("k", std::nullopt, std::nullopt, std::nullopt)->size(), 1u);
  // The source itself is still at schema 1.
  absl::StatusOr<sqlite::Db> raw = sqlite::Db::Open(source_path, false);
  absl::StatusOr<sqlite::Statement> q =
      raw->Prepare("SELECT user_version FROM pragma_user_version");
  ASSERT_TRUE(q->Step().ok());
  EXPECT_EQ(q->Int(0), 1);
}

TEST_F(StoreTest, MergeRefusesBadSourcesAndJobsRunningHereAndChangesNothing) {
  const std::string text = dir_ + "/notes.txt";
  std::ofstream(text) << "these are my notes, not a database\n";
  absl::StatusOr<MergeSource> bad = MergeSource::Prepare(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(text + ": not a SQLite database"));
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
    absl::StatusOr<Store> f = Store::Open(forged, true);
    ASSERT_TRUE(f->StartJob(MakeJob("jobF"), nullptr).ok());
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

  // A job held by both that a live process runs here.
  const std::string source_path = tmp_.File("src.db");
  {
    absl::StatusOr<Store> src = Store::Open(source_path, true);
    ASSERT_TRUE(src->StartJob(MakeJob("job1"), nullptr).ok());
    ASSERT_TRUE(src->AddMeasurement("job1", Ok(0, "a", 1.0)).ok());
    ASSERT_TRUE(src->StartJob(MakeJob("job2"), nullptr).ok());
  }
  const pid_t child = StartJobInAChild(path_, MakeJob("job1"));
  ASSERT_GT(child, 0);
  testing::KilledAtExit reaper(child);
  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<Store> s = Store::Open(path_, false);
  absl::StatusOr<MergeStats> stats = s->Merge(*source);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stats.status().message()),
              HasSubstr("job job1 is running here (pid " + std::to_string(child)));
  EXPECT_THAT(std::string(stats.status().message()), HasSubstr("nothing was changed"));
  EXPECT_TRUE(s->LoadMeasurements("job1")->empty());
  EXPECT_FALSE(s->GetJob("job2").ok());
}

TEST(ProblemTest, CanonicalJsonSortsNames) {
  EXPECT_EQ(ProblemToJson({{"N", 3}, {"M", 2}}), R"({"M":2,"N":3})");
  EXPECT_EQ(ProblemToJson({}), "{}");
}

}  // namespace
}  // namespace ktune
