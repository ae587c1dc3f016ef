// The store contract (see store_contract.h): what every backend does with
// jobs, measurements, best records, the fallback chain, warm-start priors,
// merges of headless stores and other processes' jobs.
#include "tests/store/store_contract.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "server/common/convert.h"
#include "tests/testing/process.h"
#include "tests/testing/reflection.h"
#include "tuner/base/process.h"
#include "tuner/store/merge.h"

namespace ktune {

std::unique_ptr<Store> StoreContractTest::Open(bool create, const std::string& name) const {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Locator(name), create);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

JobRecord StoreContractTest::MakeJob(const std::string& id, const std::string& device_uuid) {
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

StoredMeasurement StoreContractTest::Ok(std::int64_t seq, const std::string& key, double ms) {
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

namespace {

using ::testing::HasSubstr;

// A headless job's store: always a SQLite file.
std::unique_ptr<Store> OpenSqlite(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(path, true);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A child process that starts `job` in the store `locator`, says so on
// `ready` and then waits to be killed (it never records the job's end).
pid_t StartJobInAChild(const std::string& locator, const JobRecord& job) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(locator, true);
    bool resumed = false;
    const char ok = s.ok() && (*s)->StartJob(job, &resumed).ok() ? 'y' : 'n';
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

TEST_P(StoreContractTest, JobsStartOnceAndResume) {
  std::unique_ptr<Store> s = Open();
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

TEST_P(StoreContractTest, MeasurementsRoundTripInOrder) {
  std::unique_ptr<Store> s = Open();
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

TEST_P(StoreContractTest, BestKeepsTheLowestLossAcrossJobs) {
  std::unique_ptr<Store> s = Open();
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

TEST_P(StoreContractTest, BestMatchFallsBackToTheNearestProblemThenTheArchitecture) {
  std::unique_ptr<Store> s = Open();
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

TEST_P(StoreContractTest, QueuedJobsKeepTheirOriginAndPriority) {
  std::unique_ptr<Store> s = Open();
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

// Jobs counted by state as they read; a job whose process died counts as
// interrupted, as it reads. The store's size grows with what it holds.
TEST_P(StoreContractTest, JobsAreCountedByStateAndTheStoreKnowsItsSize) {
  std::unique_ptr<Store> s = Open();
  EXPECT_TRUE(s->CountJobs()->empty());
  const std::int64_t empty = s->SizeBytes().value();
  EXPECT_GT(empty, 0);
  bool existed = false;
  ASSERT_TRUE(s->QueueJob(MakeJob("c1"), &existed).ok());
  ASSERT_TRUE(s->QueueJob(MakeJob("c2"), &existed).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("c3"), &existed).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("c4"), &existed).ok());
  ASSERT_TRUE(s->SetJobState("c4", JobState::kSucceeded, "").ok());
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(s->AddMeasurement("c4", Ok(i, "k" + std::to_string(i), 1.0 + i)).ok());
  }
  // A job started by a process that died reads as interrupted.
  const pid_t child = StartJobInAChild(Locator(), MakeJob("c5"));
  ASSERT_GT(child, 0);
  kill(child, SIGKILL);
  testing::WaitExit(child);
  const std::map<JobState, std::int64_t> want = {{JobState::kQueued, 2},
                                                 {JobState::kRunning, 1},
                                                 {JobState::kSucceeded, 1},
                                                 {JobState::kInterrupted, 1}};
  EXPECT_EQ(s->CountJobs().value(), want);
  EXPECT_GT(s->SizeBytes().value(), empty);
}

// Each job's best is its lowest-loss ok measurement (the first of equals);
// a job with none, or unknown, is absent.
TEST_P(StoreContractTest, TheBestOfEachJobIsItsLowestLoss) {
  std::unique_ptr<Store> s = Open();
  bool existed = false;
  for (const char* id : {"b1", "b2", "b3"}) ASSERT_TRUE(s->StartJob(MakeJob(id), &existed).ok());
  ASSERT_TRUE(s->AddMeasurement("b1", Ok(0, "a", 3.0)).ok());
  ASSERT_TRUE(s->AddMeasurement("b1", Ok(1, "b", 1.5)).ok());
  ASSERT_TRUE(s->AddMeasurement("b1", Ok(2, "c", 1.5)).ok());
  ASSERT_TRUE(s->AddMeasurement("b2", Ok(0, "a", 9.0)).ok());
  StoredMeasurement failed = Ok(0, "z", 1.0);
  failed.measurement.status = CandidateStatus::kCompileError;
  failed.loss.reset();
  failed.objective.reset();
  ASSERT_TRUE(s->AddMeasurement("b3", failed).ok());
  absl::StatusOr<std::map<std::string, StoredMeasurement>> best =
      s->LoadBestOfJobs({"b1", "b2", "b3", "nope"});
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), 2u);
  EXPECT_EQ(best->at("b1").key, "b");
  EXPECT_EQ(best->at("b1").sequence, 1);
  EXPECT_DOUBLE_EQ(best->at("b1").measurement.time.count(), 1.5);
  EXPECT_EQ(best->at("b2").key, "a");
  EXPECT_TRUE(s->LoadBestOfJobs({})->empty());
}

// Queued as "auto", a job runs as what auto became: the store says which.
TEST_P(StoreContractTest, AJobRunsUnderTheStrategyItStartsWith) {
  std::unique_ptr<Store> s = Open();
  JobRecord j = MakeJob("q2");
  j.strategy = "auto";
  bool existed = false;
  ASSERT_TRUE(s->QueueJob(j, &existed).ok());
  EXPECT_EQ(s->GetJob("q2")->strategy, "auto");
  j.strategy = "auto (bayes)";
  absl::StatusOr<JobRecord> r = s->StartJob(j, &existed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->strategy, "auto (bayes)");
  JobRecord again = MakeJob("q2");
  again.strategy = "auto";  // queued again (a daemon restarted): what it ran as stays
  ASSERT_TRUE(s->QueueJob(again, &existed).ok());
  EXPECT_EQ(s->GetJob("q2")->strategy, "auto (bayes)");
}

TEST_P(StoreContractTest, AJobRunByALiveProcessIsNotRunTwiceNorWrittenAndADeadOnesIsTakenOver) {
  const pid_t child = StartJobInAChild(Locator(), MakeJob("job1"));
  ASSERT_GT(child, 0);
  testing::KilledAtExit reaper(child);
  std::unique_ptr<Store> s = Open(false);
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kRunning);
  EXPECT_TRUE(RunByAnotherProcess(s->GetJob("job1")->runner));

  bool resumed = false;
  absl::StatusOr<JobRecord> twice = s->StartJob(MakeJob("job1"), &resumed);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(twice.status().message(), HasSubstr("already running (pid " + std::to_string(child)));
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kRunning);
  // Its writes are that process's: ours are refused, and change nothing.
  const absl::Status add = s->AddMeasurement("job1", Ok(0, "128,1", 2.5));
  EXPECT_EQ(add.code(), absl::StatusCode::kFailedPrecondition) << add;
  EXPECT_THAT(add.message(), HasSubstr("already running (pid " + std::to_string(child)));
  EXPECT_EQ(s->SetJobState("job1", JobState::kFailed, "").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->UpdateMeasurement("job1", Ok(0, "128,1", 2.5)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kRunning);
  EXPECT_EQ(s->GetJob("job1")->evaluations, 0);
  EXPECT_TRUE(s->LoadMeasurements("job1")->empty());
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
  ASSERT_TRUE(s->AddMeasurement("job1", Ok(0, "128,1", 2.5)).ok());
  ASSERT_TRUE(s->SetJobState("job1", JobState::kSucceeded, "").ok());
  EXPECT_EQ(s->GetJob("job1")->state, JobState::kSucceeded);
}

TEST_P(StoreContractTest, JobIdPrefixes) {
  std::unique_ptr<Store> s = Open();
  ASSERT_TRUE(s->StartJob(MakeJob("abc123"), nullptr).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("abd456"), nullptr).ok());
  EXPECT_EQ(s->GetJob("abc")->id, "abc123");
  EXPECT_EQ(s->GetJob("ab").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->GetJob("zz").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->GetJob("%").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->ListJobs()->size(), 2u);
}

TEST_P(StoreContractTest, MergeAddsWhatTheTargetLacksOnceAndLeavesTheSourceAlone) {
  const std::string source_path = tmp_.File("node7.db");
  {
    std::unique_ptr<Store> src = OpenSqlite(source_path);
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
  std::unique_ptr<Store> s = Open();
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

TEST_P(StoreContractTest, MissingStoreIsNotCreatedWhenReading) {
  absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(Locator("absent"), false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreContractTest, SamplesRoundTripAndAnUpdateReplacesTheValues) {
  std::unique_ptr<Store> s = Open();
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
  // An ok measurement needs a time.
  StoredMeasurement no_time = Ok(1, "b", 1.0);
  no_time.measurement.time = Millis(std::nan(""));
  EXPECT_EQ(s->AddMeasurement("job1", no_time).code(), absl::StatusCode::kInvalidArgument);
}

// Every field of the API's measurement, filled by reflection, survives the
// store and the conversions (a field added later is covered too).
TEST_P(StoreContractTest, EveryFieldOfAMeasurementSurvives) {
  std::unique_ptr<Store> s = Open();
  ASSERT_TRUE(s->StartJob(MakeJob("job"), nullptr).ok());
  v1::MeasurementRecord sent;
  testing::FillEveryField(sent);
  sent.set_status(v1::OK);  // so its time and objective are kept
  v1::Configuration& config = *sent.mutable_config();
  config.clear_names();  // the names of its values, in their order
  const std::map<std::string, v1::ParameterValue> sorted(config.values().begin(),
                                                         config.values().end());
  for (const auto& [name, value] : sorted) config.add_names(name);

  StoredMeasurement in = MeasurementFromProto(sent);
  in.loss = in.objective;
  ASSERT_TRUE(s->AddMeasurement("job", in).ok());
  absl::StatusOr<std::vector<StoredMeasurement>> back = s->LoadMeasurements("job");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  v1::MeasurementRecord received;
  MeasurementToProto((*back)[0], &received);
  google::protobuf::util::MessageDifferencer differ;
  std::string differences;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(sent, received)) << differences;
}

TEST_P(StoreContractTest, PriorMeasurementsAreOtherJobsOfTheKernelNewestFirst) {
  std::unique_ptr<Store> s = Open();
  ASSERT_TRUE(s->StartJob(MakeJob("old"), nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("old", Ok(0, "a", 2.0)).ok());
  StoredMeasurement excluded;
  excluded.sequence = 1;
  excluded.key = "x";
  excluded.config_json = "{}";
  excluded.measurement.status = CandidateStatus::kInvalidByConstraint;
  ASSERT_TRUE(s->AddMeasurement("old", excluded).ok());
  StoredMeasurement failed = excluded;
  failed.key = "f";
  failed.sequence = 2;
  failed.measurement.status = CandidateStatus::kCompileError;
  ASSERT_TRUE(s->AddMeasurement("old", failed).ok());
  JobRecord other = MakeJob("other");
  other.parameters = {"block_size_x"};  // another space: not a prior
  ASSERT_TRUE(s->StartJob(other, nullptr).ok());
  ASSERT_TRUE(s->AddMeasurement("other", Ok(0, "z", 1.0)).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("new"), nullptr).ok());

  absl::StatusOr<std::vector<PriorMeasurement>> prior =
      s->LoadPriorMeasurements("saxpy", {"block_size_x", "tile"}, "time", "new", 100);
  ASSERT_TRUE(prior.ok()) << prior.status();
  ASSERT_EQ(prior->size(), 2u);  // a and the failure; not the exclusion
  EXPECT_EQ((*prior)[0].key, "a");
  EXPECT_DOUBLE_EQ(*(*prior)[0].loss, 2.0);
  EXPECT_EQ((*prior)[1].status, CandidateStatus::kCompileError);
  EXPECT_FALSE((*prior)[1].loss.has_value());
  EXPECT_EQ(s->LoadPriorMeasurements("saxpy", {"block_size_x", "tile"}, "time", "new", 1)->size(),
            1u);
  EXPECT_TRUE(
      s->LoadPriorMeasurements("saxpy", {"block_size_x", "tile"}, "time", "old", 100)->empty());
  EXPECT_TRUE(
      s->LoadPriorMeasurements("saxpy", {"block_size_x", "tile"}, "GB/s", "new", 100)->empty());
  EXPECT_TRUE(s->LoadPriorMeasurements("saxpy", {"block_size_x", "tile"}, "time", "new", 100,
                                       "2000-01-01T00:00:00.000Z")
                  ->empty());
}

TEST_P(StoreContractTest, TheChangeCountMovesWhenAnotherConnectionCommits) {
  std::unique_ptr<Store> reader = Open();
  std::unique_ptr<Store> writer = Open(false);
  absl::StatusOr<std::int64_t> before = reader->ChangeCount();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*reader->ChangeCount(), *before);  // nothing happened
  ASSERT_TRUE(writer->StartJob(MakeJob("job1"), nullptr).ok());
  ASSERT_TRUE(writer->AddMeasurement("job1", Ok(0, "a", 1.0)).ok());
  EXPECT_NE(*reader->ChangeCount(), *before);
}

TEST_P(StoreContractTest, MergeInterruptsAJobThatRanThere) {
  const std::string source_path = tmp_.File("node's.db");  // a quote in the name
  {
    std::unique_ptr<Store> src = OpenSqlite(source_path);
    ASSERT_TRUE(src->StartJob(MakeJob("ran"), nullptr).ok());  // never ended there
    ASSERT_TRUE(src->AddMeasurement("ran", Ok(0, "a", 1.0)).ok());
  }
  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  std::unique_ptr<Store> s = Open();
  absl::StatusOr<MergeStats> stats = s->Merge(*source);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->jobs_added, 1);
  absl::StatusOr<JobRecord> ran = s->GetJob("ran");
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(ran->state, JobState::kInterrupted);
  EXPECT_THAT(ran->message, HasSubstr("merged from " + source_path + " while it ran there"));
  EXPECT_EQ(ran->runner, "");
  EXPECT_EQ(s->FindBest("saxpy", std::nullopt, std::nullopt, std::nullopt)->size(), 1u);
}

TEST_P(StoreContractTest, MergeRefusesAJobRunningHereAndChangesNothing) {
  const std::string source_path = tmp_.File("src.db");
  {
    std::unique_ptr<Store> src = OpenSqlite(source_path);
    ASSERT_TRUE(src->StartJob(MakeJob("job1"), nullptr).ok());
    ASSERT_TRUE(src->AddMeasurement("job1", Ok(0, "a", 1.0)).ok());
    ASSERT_TRUE(src->StartJob(MakeJob("job2"), nullptr).ok());
  }
  const pid_t child = StartJobInAChild(Locator(), MakeJob("job1"));
  ASSERT_GT(child, 0);
  testing::KilledAtExit reaper(child);
  absl::StatusOr<MergeSource> source = MergeSource::Prepare(source_path);
  ASSERT_TRUE(source.ok()) << source.status();
  std::unique_ptr<Store> s = Open(false);
  absl::StatusOr<MergeStats> stats = s->Merge(*source);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(stats.status().message()),
              HasSubstr("job job1 is running here (pid " + std::to_string(child)));
  EXPECT_THAT(std::string(stats.status().message()), HasSubstr("nothing was changed"));
  EXPECT_TRUE(s->LoadMeasurements("job1")->empty());
  EXPECT_FALSE(s->GetJob("job2").ok());
}

}  // namespace
}  // namespace ktune

namespace ktune {
namespace {

TEST_P(StoreContractTest, ASnapshotIsASqliteStoreHoldingEverything) {
  std::unique_ptr<Store> s = Open();
  JobRecord a = MakeJob("jobA");
  a.spec = std::string("\x00\xff\x01\n\t\\", 6);  // any bytes survive
  a.priority = 7;
  ASSERT_TRUE(s->StartJob(a, nullptr).ok());
  ASSERT_TRUE(s->StartJob(MakeJob("jobB", "GPU-2"), nullptr).ok());
  StoredMeasurement odd = Ok(0, "128,1", 2.5);
  odd.measurement.message = "tab\there\nnewline \\ backslash";
  odd.measurement.samples_ms = {2.25, 2.5, 2.75};
  ASSERT_TRUE(s->AddMeasurement("jobA", odd).ok());
  StoredMeasurement failed;
  failed.sequence = 1;
  failed.key = "256,4";
  failed.config_json = "{}";
  failed.measurement.status = CandidateStatus::kTimeout;
  ASSERT_TRUE(s->AddMeasurement("jobA", failed).ok());
  ASSERT_TRUE(s->AddMeasurement("jobB", Ok(0, "64,2", 9.0)).ok());
  ASSERT_TRUE(s->SetJobState("jobA", JobState::kSucceeded, "done").ok());

  const std::string path = tmp_.File("snapshot.db");
  ASSERT_TRUE(s->Snapshot(path).ok());
  std::unique_ptr<Store> copy = OpenSqlite(path);
  ASSERT_NE(copy, nullptr);
  ASSERT_TRUE(copy->CheckIntegrity().ok());
  ASSERT_EQ(copy->ListJobs()->size(), 2u);
  for (const char* id : {"jobA", "jobB"}) {
    absl::StatusOr<JobRecord> want = s->GetJob(id);
    absl::StatusOr<JobRecord> got = copy->GetJob(id);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->spec, want->spec);
    EXPECT_EQ(got->state, want->state);
    EXPECT_EQ(got->message, want->message);
    EXPECT_EQ(got->priority, want->priority);
    EXPECT_EQ(got->created_at, want->created_at);
    EXPECT_EQ(got->evaluations, want->evaluations);
    EXPECT_EQ(got->device.uuid, want->device.uuid);
    std::vector<StoredMeasurement> wm = *s->LoadMeasurements(id);
    std::vector<StoredMeasurement> gm = *copy->LoadMeasurements(id);
    ASSERT_EQ(gm.size(), wm.size());
    for (std::size_t i = 0; i < gm.size(); ++i) {
      EXPECT_EQ(gm[i].key, wm[i].key);
      EXPECT_EQ(gm[i].measurement.status, wm[i].measurement.status);
      EXPECT_EQ(gm[i].measurement.message, wm[i].measurement.message);
      EXPECT_EQ(gm[i].measurement.samples_ms, wm[i].measurement.samples_ms);
      EXPECT_EQ(gm[i].loss, wm[i].loss);
    }
  }
  ASSERT_EQ(copy->FindBest("saxpy", std::nullopt, std::nullopt, std::nullopt)->size(), 2u);
  // An existing file is never overwritten.
  absl::Status again = s->Snapshot(path);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(copy->ListJobs()->size(), 2u);
}

}  // namespace
}  // namespace ktune
