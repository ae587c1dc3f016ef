// The fault matrix's rows about the store (docs/reliability.md), with the
// ktune binary run as a user runs it: a full disk, a read-only store,
// another process holding the store's lock, and the wall clock stepping
// backwards. Each ends with a message that says what to do, and nothing
// stored before is lost.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process.h"
#include "tests/testing/small_disk.h"
#include "tests/testing/temp_dir.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kConv =
    "sim:" + std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/convolution_milo_A100.json.gz";

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

class StoreFaultTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (mounted_) testing::UnmountSmallDisk(disk_);
  }

  pid_t Start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    const std::string out = tmp_.File("stdout"), err = tmp_.File("stderr");
    if (env.empty()) return testing::Spawn(KTUNE_CLI_PATH, args, out, err);
    const pid_t pid = fork();
    if (pid == 0) {
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      testing::ExecWithOutput(KTUNE_CLI_PATH, args, out, err);
    }
    return pid;
  }
  RunResult Finish(pid_t pid) {
    RunResult r;
    r.code = testing::WaitExit(pid);
    r.out = testing::Slurp(tmp_.File("stdout"));
    r.err = testing::Slurp(tmp_.File("stderr"));
    return r;
  }
  RunResult Run(const std::vector<std::string>& args) { return Finish(Start(args)); }

  RunResult Tune(const std::string& db, int evaluations, int seed) {
    return Run({"tune", "--local", "--db", db, "--device", kConv, "--max-evals",
                std::to_string(evaluations), "--seed", std::to_string(seed)});
  }

  // Every job in the store at `db`, read directly.
  std::vector<JobRecord> Jobs(const std::string& db) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, false);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return {};
    absl::StatusOr<std::vector<JobRecord>> jobs = (*store)->ListJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? *jobs : std::vector<JobRecord>{};
  }
  std::size_t Measurements(const std::string& db, const std::string& job) {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, false);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return 0;
    absl::StatusOr<std::vector<StoredMeasurement>> m = (*store)->LoadMeasurements(job);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->size() : 0;
  }

  // A refusal a user can act on: a failing exit, the message, and none of
  // SQLite's internals (no SQL, no rollback noise).
  static void ExpectRefused(const RunResult& r, const std::string& message) {
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.err, Not(HasSubstr("rollback")));
    EXPECT_THAT(r.err, Not(HasSubstr("`")));
  }

  testing::TempDir tmp_;
  std::string disk_;
  bool mounted_ = false;
};

#define MOUNT_OR_SKIP(bytes)                                                     \
  do {                                                                           \
    std::string why;                                                             \
    disk_ = tmp_.File("disk");                                                   \
    mkdir(disk_.c_str(), 0755);                                                  \
    mounted_ = testing::MountSmallDisk(disk_, (bytes), &why);                    \
    if (!mounted_) GTEST_SKIP() << "this machine allows no test mount: " << why; \
  } while (0)

// Fault matrix: the store's disk fills up mid-job. The job stops with a
// message saying the disk is full and what to do; it is left interrupted,
// every measurement stored before is there, and the same command resumes
// it to its whole budget once space is freed.
TEST_F(StoreFaultTest, AFullDiskStopsTheJobAndKeepsWhatWasStored) {
  MOUNT_OR_SKIP(8 << 20);
  const std::string db = disk_ + "/k.db";
  const RunResult first = Tune(db, 5, 1);
  ASSERT_EQ(first.code, 0) << first.err;
  ASSERT_TRUE(testing::FillDisk(disk_ + "/filler", 256 << 10));

  ExpectRefused(Tune(db, 600, 2), db + ": the disk holding the store is full. What was stored "
                                       "before is kept; free some space and run the command "
                                       "again (a job resumes where it stopped)");

  std::vector<JobRecord> jobs = Jobs(db);
  ASSERT_EQ(jobs.size(), 2u);
  const JobRecord& stopped = jobs[0].evaluations == 5 ? jobs[1] : jobs[0];
  const JobRecord& earlier = jobs[0].evaluations == 5 ? jobs[0] : jobs[1];
  EXPECT_EQ(earlier.evaluations, 5);
  EXPECT_EQ(Measurements(db, earlier.id), 5u);
  EXPECT_EQ(stopped.state, JobState::kInterrupted) << stopped.message;
  EXPECT_GT(stopped.evaluations, 0);
  EXPECT_LT(stopped.evaluations, 600);
  EXPECT_EQ(Measurements(db, stopped.id), static_cast<std::size_t>(stopped.evaluations));

  ASSERT_EQ(unlink((disk_ + "/filler").c_str()), 0);
  const RunResult resumed = Tune(db, 600, 2);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_THAT(resumed.err,
              HasSubstr("(" + std::to_string(stopped.evaluations) + " from the store, resumed)"));
  EXPECT_EQ(Measurements(db, stopped.id), 600u);
}

// Fault matrix: a store on a read-only file system is read as it is (jobs,
// show, best), and a command that must write it says it cannot be
// written; nothing in it changes.
TEST_F(StoreFaultTest, AReadOnlyStoreIsReadAndAWriteIsRefusedByName) {
  MOUNT_OR_SKIP(4 << 20);
  const std::string db = disk_ + "/k.db";
  ASSERT_EQ(Tune(db, 8, 1).code, 0);
  const std::string before = testing::Slurp(db);
  ASSERT_TRUE(testing::RemountReadOnly(disk_, true));

  const RunResult jobs = Run({"jobs", "--db", db});
  EXPECT_EQ(jobs.code, 0) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("succeeded"));
  const RunResult best = Run({"best", "--db", db, "--kernel", "convolution_kernel"});
  EXPECT_EQ(best.code, 0) << best.err;
  ASSERT_EQ(Jobs(db).size(), 1u);
  EXPECT_EQ(Measurements(db, Jobs(db)[0].id), 8u);

  ExpectRefused(Tune(db, 20, 2), db + ": the store cannot be written (a read-only file system, "
                                      "or no permission to write the file or its folder); "
                                      "nothing was changed");
  ASSERT_TRUE(testing::RemountReadOnly(disk_, false));
  EXPECT_EQ(testing::Slurp(db), before);
}

// Fault matrix: another process holds the store's write lock for 10 s.
// The tuner says it waits, waits, and then measures its whole budget.
TEST_F(StoreFaultTest, AWriterWaitsForAnotherProcesssLockAndSaysSo) {
  const std::string db = tmp_.File("k.db");
  ASSERT_EQ(Tune(db, 5, 1).code, 0);
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  const pid_t tuner =
      Start({"tune", "--local", "--db", db, "--device", kConv, "--max-evals", "30", "--seed", "2"});
  std::this_thread::sleep_for(std::chrono::seconds(10));
  EXPECT_EQ(sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(holder);
  const RunResult r = Finish(tuner);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(db + ": another process holds the store's lock; waiting for it"));
  std::vector<JobRecord> jobs = Jobs(db);
  ASSERT_EQ(jobs.size(), 2u);
  for (const JobRecord& j : jobs) {
    EXPECT_EQ(j.state, JobState::kSucceeded);
    EXPECT_EQ(Measurements(db, j.id), static_cast<std::size_t>(j.evaluations));
  }
}

// Fault matrix: the wall clock steps back an hour mid-job (libfaketime
// moves it for the tuner only). Budgets and order read the steady clock
// and sequence numbers: the job measures its whole budget once, in order;
// only the timestamps show the step.
TEST_F(StoreFaultTest, TheWallClockSteppingBackwardsChangesOnlyTimestamps) {
  const char* lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
  if (access(lib, R_OK) != 0) GTEST_SKIP() << "libfaketime is not installed (scripts/setup.sh)";
  const std::string db = tmp_.File("k.db");
  const std::string offset = tmp_.File("faketime");
  std::ofstream(offset) << "+0\n";
  const pid_t tuner = Start({"tune", "--local", "--db", db, "--device", kConv, "--strategy",
                             "random", "--max-evals", "1500", "--seed", "3"},
                            {std::string("LD_PRELOAD=") + lib, "FAKETIME_TIMESTAMP_FILE=" + offset,
                             "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"});
  // Once the job has measurements, the tuner's clock goes back an hour.
  bool stepped = false;
  while (!stepped) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    int status = 0;
    if (waitpid(tuner, &status, WNOHANG) == tuner) {
      FAIL() << "the tuner ended before its clock was stepped:\n"
             << testing::Slurp(tmp_.File("stderr"));
    }
    sqlite3* db_handle = nullptr;
    if (sqlite3_open_v2(db.c_str(), &db_handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_stmt* q = nullptr;
      if (sqlite3_prepare_v2(db_handle, "SELECT count(*) FROM measurements", -1, &q, nullptr) ==
              SQLITE_OK &&
          sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0) >= 20) {
        std::ofstream(offset) << "-1h\n";
        stepped = true;
      }
      sqlite3_finalize(q);
    }
    sqlite3_close(db_handle);
  }
  const RunResult r = Finish(tuner);
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<JobRecord> jobs = Jobs(db);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].state, JobState::kSucceeded);
  EXPECT_EQ(jobs[0].evaluations, 1500);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, false);
  ASSERT_TRUE(store.ok());
  absl::StatusOr<std::vector<StoredMeasurement>> m = (*store)->LoadMeasurements(jobs[0].id);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 1500u);
  // In evaluation order, and the step shows in the timestamps.
  bool went_back = false;
  for (std::size_t i = 1; i < m->size(); ++i) {
    EXPECT_EQ((*m)[i].sequence, (*m)[i - 1].sequence + 1);
    if ((*m)[i].measured_at < (*m)[i - 1].measured_at) went_back = true;
  }
  EXPECT_TRUE(went_back) << "the clock never stepped back in the tuner";
}

}  // namespace
}  // namespace ktune
