// The fleet's queue in the PostgreSQL store (store/fleet.h), against a
// real server: claims, leases, cancellations and submissions between
// daemons, each daemon a connection of its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/postgres.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/process.h"
#include "tuner/base/strings.h"
#include "tuner/store/fleet.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class FleetQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::PostgresCluster*> pg = testing::SharedPostgres();
    ASSERT_TRUE(pg.ok()) << pg.status();
    static int next = 0;
    absl::StatusOr<std::string> uri = (*pg)->CreateDatabase(StrCat("f", getpid(), "_", next++));
    ASSERT_TRUE(uri.ok()) << uri.status();
    uri_ = *uri;
  }
  std::unique_ptr<Store> Open() {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri_, true);
    EXPECT_TRUE(s.ok()) << s.status();
    EXPECT_NE((*s)->fleet(), nullptr);
    return s.ok() ? *std::move(s) : nullptr;
  }
  static JobRecord Job(const std::string& id, int priority = 0) {
    JobRecord j;
    j.id = id;
    j.kernel_name = "saxpy";
    j.parameters = {"b"};
    j.device.uuid = "GPU-1";
    j.device.name = "Test GPU";
    j.spec_json = "{}";
    j.strategy = "random";
    j.origin = "daemon";
    j.priority = priority;
    return j;
  }
  std::string uri_;
};

TEST_F(FleetQueueTest, AJobIsClaimedOnceByADaemonOfItsModelHighestPriorityFirst) {
  std::unique_ptr<Store> a = Open(), b = Open();
  for (auto [id, prio] : std::vector<std::pair<std::string, int>>{{"low", 0}, {"high", 5}}) {
    ASSERT_TRUE(a->QueueJob(Job(id, prio), nullptr).ok());
    ASSERT_TRUE(a->fleet()->Offer(id, "M1").ok());
  }
  ASSERT_TRUE(a->QueueJob(Job("other"), nullptr).ok());
  ASSERT_TRUE(a->fleet()->Offer("other", "M2").ok());
  EXPECT_EQ(b->fleet()->Waiting().value(), 3);
  absl::StatusOr<std::optional<JobRecord>> first = b->fleet()->Claim("B", {"M1"}, 60s);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->id, "high");
  EXPECT_EQ((*first)->state, JobState::kRunning);
  EXPECT_EQ((*first)->runner, "B");
  absl::StatusOr<std::optional<JobRecord>> second = a->fleet()->Claim("A", {"M1"}, 60s);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->id, "low");
  EXPECT_FALSE(a->fleet()->Claim("A", {"M1"}, 60s)->has_value());  // M2's stays
  EXPECT_EQ(b->fleet()->Waiting().value(), 1);
  EXPECT_EQ(b->fleet()->Claim("B", {"M2", "M1"}, 60s).value()->id, "other");
}

// A client's unfinished jobs are counted over the fleet, whichever daemon
// queued or runs them; jobs that ended, local jobs and others' do not count.
TEST_F(FleetQueueTest, AClientsUnfinishedJobsAreCountedOverTheFleet) {
  std::unique_ptr<Store> a = Open(), b = Open();
  auto offer = [&](Store& s, const std::string& id, const std::string& client) {
    JobRecord j = Job(id);
    j.client = client;
    ASSERT_TRUE(s.QueueJob(j, nullptr).ok());
    ASSERT_TRUE(s.fleet()->Offer(id, "M").ok());
  };
  offer(*a, "a1", "ann");
  offer(*b, "a2", "ann");
  offer(*b, "a3", "ann");
  offer(*a, "b1", "bob");
  JobRecord local = Job("a-local");
  local.client = "ann";
  ASSERT_TRUE(a->QueueJob(local, nullptr).ok());  // not the fleet's
  EXPECT_EQ(a->fleet()->Unfinished("ann").value(), 3);
  EXPECT_EQ(b->fleet()->Unfinished("bob").value(), 1);
  EXPECT_EQ(b->fleet()->Unfinished("carl").value(), 0);
  EXPECT_EQ(b->GetJob("a2")->client, "ann");
  // Running counts; ended does not.
  ASSERT_EQ(a->fleet()->Claim("A", {"M"}, 60s).value()->id, "a1");
  EXPECT_EQ(b->fleet()->Unfinished("ann").value(), 3);
  ASSERT_TRUE(b->fleet()->RequestCancel("a2").value());
  ASSERT_TRUE(a->fleet()->RequestCancel("a3").value());
  EXPECT_EQ(b->fleet()->Unfinished("ann").value(), 1);
}

TEST_F(FleetQueueTest, ALapsedLeaseLetsAnotherDaemonTakeTheJobAndTheFirstLearnsItLostIt) {
  std::unique_ptr<Store> a = Open(), b = Open();
  ASSERT_TRUE(a->QueueJob(Job("j"), nullptr).ok());
  ASSERT_TRUE(a->fleet()->Offer("j", "M").ok());
  ASSERT_TRUE(a->fleet()->Claim("A", {"M"}, 300ms).value().has_value());
  EXPECT_FALSE(b->fleet()->Claim("B", {"M"}, 60s).value().has_value());  // leased
  // A heartbeat renews the lease...
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(150ms);
    ASSERT_TRUE(a->fleet()->Heartbeat("A", {}, {"j"}, 300ms).ok());
    EXPECT_FALSE(b->fleet()->Claim("B", {"M"}, 60s).value().has_value());
  }
  // ...and without one it lapses.
  std::this_thread::sleep_for(400ms);
  absl::StatusOr<std::optional<JobRecord>> taken = b->fleet()->Claim("B", {"M"}, 60s);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->runner, "B");
  absl::StatusOr<FleetBeat> beat = a->fleet()->Heartbeat("A", {}, {"j"}, 300ms);
  ASSERT_TRUE(beat.ok());
  EXPECT_THAT(beat->lost, ElementsAre("j"));
  // While B's lease is live, the job's writes are B's alone.
  StoredMeasurement m;
  m.sequence = 0;
  m.key = "k";
  m.config_json = "{}";
  m.measurement.status = CandidateStatus::kCompileError;
  EXPECT_EQ(a->AddMeasurement("j", m).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->SetJobState("j", JobState::kInterrupted, "").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->StartJob(Job("j"), nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->GetJob("j")->state, JobState::kRunning);
  EXPECT_EQ(b->GetJob("j")->evaluations, 0);
}

TEST_F(FleetQueueTest, CancellingAQueuedJobIsImmediateARunningOnesIsToldToItsDaemon) {
  std::unique_ptr<Store> a = Open(), b = Open();
  for (const char* id : {"q", "r"}) {
    ASSERT_TRUE(a->QueueJob(Job(id), nullptr).ok());
    ASSERT_TRUE(a->fleet()->Offer(id, "M").ok());
  }
  ASSERT_EQ(a->fleet()->Claim("A", {"M"}, 60s).value()->id, "q");
  EXPECT_EQ(b->fleet()->RequestCancel("r").value(), true);
  EXPECT_EQ(b->GetJob("r")->state, JobState::kCancelled);
  EXPECT_EQ(b->fleet()->RequestCancel("q").value(), false);
  absl::StatusOr<FleetBeat> beat = a->fleet()->Heartbeat("A", {}, {"q"}, 60s);
  ASSERT_TRUE(beat.ok());
  EXPECT_THAT(beat->cancel, ElementsAre("q"));
  absl::StatusOr<bool> ended = b->fleet()->RequestCancel("r");
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->fleet()->RequestCancel("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FleetQueueTest, ASubmissionReachesADaemonOfItsModelAndItsAnswerComesBack) {
  std::unique_ptr<Store> a = Open(), b = Open();
  FleetDevice d;
  d.model = "recording X";
  d.info.name = "A100";
  d.info.uuid = "SIM-X";
  d.locator = "sim:/x.json.gz";
  ASSERT_TRUE(b->fleet()->Heartbeat("B", {d}, {}, 60s).ok());
  EXPECT_EQ(a->fleet()->ResolveModel("A100", 10s).value(), "recording X");
  EXPECT_EQ(a->fleet()->ResolveModel("SIM-X", 10s).value(), "recording X");
  absl::StatusOr<std::string> none = a->fleet()->ResolveModel("H200", 10s);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("not served by any live daemon"));

  const std::int64_t ok =
      a->fleet()->Hand(std::string("\x01\x00\x02", 3), 3, "recording X", "ann@h1").value();
  const std::int64_t bad = a->fleet()->Hand("zz", 0, "recording X", "").value();
  EXPECT_FALSE(a->fleet()->AnswerOf(ok).value().has_value());
  EXPECT_FALSE(b->fleet()->TakeSubmission({"other"}).value().has_value());
  absl::StatusOr<std::optional<FleetSubmission>> s = b->fleet()->TakeSubmission({"recording X"});
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->id, ok);
  EXPECT_EQ((*s)->spec, std::string("\x01\x00\x02", 3));
  EXPECT_EQ((*s)->priority, 3);
  EXPECT_EQ((*s)->client, "ann@h1");
  ASSERT_TRUE(b->fleet()->Answer(ok, "job-1", 0, "").ok());
  EXPECT_EQ(a->fleet()->AnswerOf(ok).value(), std::optional<std::string>("job-1"));
  ASSERT_EQ(b->fleet()->TakeSubmission({"recording X"}).value()->id, bad);
  ASSERT_TRUE(b->fleet()
                  ->Answer(bad, "", static_cast<int>(absl::StatusCode::kInvalidArgument),
                           "strategy.name: no such strategy")
                  .ok());
  absl::StatusOr<std::optional<std::string>> refused = a->fleet()->AnswerOf(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("no such strategy"));
}

// A heartbeat renews only the jobs its daemon says it runs: one left
// running in its name but not run lapses like a dead daemon's.
TEST_F(FleetQueueTest, AJobItsDaemonDoesNotRunLapsesThoughItsHeartbeatGoesOn) {
  std::unique_ptr<Store> a = Open(), b = Open();
  ASSERT_TRUE(a->QueueJob(Job("j"), nullptr).ok());
  ASSERT_TRUE(a->fleet()->Offer("j", "M").ok());
  ASSERT_TRUE(a->fleet()->Claim("A", {"M"}, 300ms).value().has_value());
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(150ms);
    ASSERT_TRUE(a->fleet()->Heartbeat("A", {}, {}, 300ms).ok());
  }
  absl::StatusOr<std::optional<JobRecord>> taken = b->fleet()->Claim("B", {"M"}, 60s);
  ASSERT_TRUE(taken.ok() && taken->has_value());
  EXPECT_EQ((*taken)->runner, "B");
}

// The change counter moves once for each transaction that changes what
// others read, and not for a heartbeat's renewed lease.
TEST_F(FleetQueueTest, TheChangeCounterMovesOncePerWriteAndNotForAHeartbeat) {
  std::unique_ptr<Store> a = Open();
  const std::string self = ThisProcess()->Encode();
  ASSERT_TRUE(a->QueueJob(Job("j"), nullptr).ok());
  ASSERT_TRUE(a->fleet()->Offer("j", "M").ok());
  const std::int64_t queued = a->ChangeCount().value();
  ASSERT_TRUE(a->fleet()->Claim(self, {"M"}, 60s).value().has_value());
  const std::int64_t claimed = a->ChangeCount().value();
  EXPECT_EQ(claimed, queued + 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->fleet()->Heartbeat(self, {}, {"j"}, 60s).ok());
  EXPECT_EQ(a->ChangeCount().value(), claimed);
  // One measurement writes three tables in one transaction: one change.
  StoredMeasurement m;
  m.sequence = 0;
  m.key = "k";
  m.config_json = "{}";
  m.measurement.status = CandidateStatus::kOk;
  m.measurement.time = Millis(1.0);
  m.objective = 1.0;
  m.loss = 1.0;
  ASSERT_TRUE(a->AddMeasurement("j", m).ok());
  EXPECT_EQ(a->ChangeCount().value(), claimed + 1);
}

// A daemon's heartbeat renews the leases of all its jobs while their
// measurements are stored on other connections: neither waits on the
// other in a circle (PostgreSQL would abort one as a deadlock), and every
// measurement is stored once.
TEST_F(FleetQueueTest, HeartbeatsAndMeasurementsOfManyJobsNeverDeadlock) {
  std::unique_ptr<Store> beats = Open();
  const std::string self = ThisProcess()->Encode();
  constexpr int kJobs = 4, kEach = 60;
  std::vector<std::string> ids;
  for (int j = 0; j < kJobs; ++j) {
    ids.push_back(StrCat("job", j));
    ASSERT_TRUE(beats->QueueJob(Job(ids.back()), nullptr).ok());
    ASSERT_TRUE(beats->fleet()->Offer(ids.back(), "M").ok());
    ASSERT_TRUE(beats->fleet()->Claim(self, {"M"}, 60s).value().has_value());
  }
  std::atomic<bool> done{false};
  std::thread heart([&] {
    while (!done.load()) {
      absl::StatusOr<FleetBeat> b = beats->fleet()->Heartbeat(self, {}, ids, 60s);
      EXPECT_TRUE(b.ok()) << b.status();
    }
  });
  std::vector<std::thread> writers;
  writers.reserve(kJobs);
  for (int j = 0; j < kJobs; ++j) {
    writers.emplace_back([&, j] {
      std::unique_ptr<Store> s = Open();
      for (int k = 0; k < kEach; ++k) {
        StoredMeasurement m;
        m.sequence = k;
        m.key = StrCat("c", k);
        m.config_json = "{}";
        m.measurement.status = CandidateStatus::kOk;
        m.measurement.time = Millis(1.0 + k);
        m.objective = 1.0 + k;
        m.loss = 1.0 + k;
        const absl::Status st = s->AddMeasurement(ids[j], m);
        EXPECT_TRUE(st.ok()) << st;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  done.store(true);
  heart.join();
  for (const std::string& id : ids) {
    EXPECT_EQ(beats->GetJob(id)->evaluations, kEach) << id;
    EXPECT_EQ(beats->LoadMeasurements(id)->size(), static_cast<std::size_t>(kEach)) << id;
  }
}

}  // namespace
}  // namespace ktune
