#include "tuner/session/session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "strategies/registry.h"
#include "tests/testing/parameters.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/strings.h"
#include "tuner/session/warm_start.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

// A device double: time = a function of the configuration; some
// configurations fail; every evaluation is counted by key.
class FakeDevice final : public Device {
 public:
  FakeDevice() {
    info_.id = "fake:0";
    info_.name = "Fake GPU";
    info_.uuid = "fake-uuid-1";
    info_.simulated = true;
  }
  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override { return true; }
  absl::Status Bind(const JobBinding& job) override {
    space_ = job.space;
    return absl::OkStatus();
  }
  absl::StatusOr<Measurement> Evaluate(const Config& config) override {
    const std::string key = space_->Key(config);
    ++calls[key];
    if (fail_device_after >= 0 && total_calls_++ >= fail_device_after) {
      return absl::UnavailableError("device fell off the bus");
    }
    Measurement m;
    const auto a = std::get<std::int64_t>(space_->ValueOf(config, 0));
    const auto b = std::get<std::int64_t>(space_->ValueOf(config, 1));
    if ((a + b) % 7 == 0) {
      m.status = CandidateStatus::kRuntimeFault;
      m.message = "illegal address";
    } else {
      m.time = Millis(1.0 + static_cast<double>((a - 5) * (a - 5) + (b - 3) * (b - 3)));
      m.stats = ComputeStats({m.time.count()});
    }
    m.cost = Millis(100);
    return m;
  }

  // Re-measurement: each call returns the configuration's time scaled by
  // `remeasure_factor` (per key), so a test can reorder the contenders.
  bool can_remeasure() const override { return remeasure; }
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override {
    std::vector<Measurement> out;
    for (const Config& c : configs) {
      remeasured.push_back(space_->Key(c));
      absl::StatusOr<Measurement> m = Evaluate(c);
      if (!m.ok()) return m.status();
      --calls[space_->Key(c)];
      auto it = remeasure_factor.find(space_->Key(c));
      if (it != remeasure_factor.end()) m->time = m->time * it->second;
      out.push_back(*m);
    }
    return out;
  }

  // Configurations asked ahead, and whether each measurement counts as
  // done ahead (as on a job spread over several GPUs).
  int pipeline_depth() const override { return depth; }
  bool Ready(const Config& config) override {
    return ready || ready_keys.count(space_->Key(config)) != 0;
  }

  std::map<std::string, int> calls;
  int depth = 1;
  bool ready = false;
  std::set<std::string> ready_keys;  // done ahead, one by one
  int fail_device_after = -1;
  bool remeasure = false;
  std::vector<std::string> remeasured;
  std::map<std::string, double> remeasure_factor;

 private:
  DeviceInfo info_;
  const Space* space_ = nullptr;
  int total_calls_ = 0;
};

using testing::Range;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override { store_ = *Store::Open(tmp_.File("s.db"), true); }

  static Job MakeJob(const std::string& strategy, std::uint64_t seed, std::int64_t max_evals,
                     double max_seconds = 0) {
    Job job;
    job.kernel_name = "fake";
    job.source_hash = "h";
    job.space = std::make_shared<const Space>(
        *Space::Product({Range("a", 0, 9), Range("b", 0, 9)}, {"a + b <= 15"}));
    job.strategy = strategy;
    job.seed = seed;
    job.max_evaluations = max_evals;
    job.max_time = Millis(max_seconds * 1e3);
    job.spec.mutable_kernel()->set_name("fake");
    job.spec.mutable_strategy()->set_name(strategy);
    job.spec.mutable_strategy()->set_seed(seed);
    job.spec.mutable_strategy()->set_max_evaluations(max_evals);
    return job;
  }

  // Runs `job` to its end (or until `stop_after` evaluations) and returns
  // the keys evaluated, in order.
  absl::StatusOr<SessionResult> RunJob(const Job& job, FakeDevice& device, int stop_after = -1) {
    StrategyOptions options;
    options.seed = job.seed;
    options.max_evaluations = job.max_evaluations;
    auto strategy = MakeStrategy(job.strategy, *job.space, options);
    EXPECT_TRUE(strategy.ok());
    Session session(job, device, **strategy, job.strategy);
    std::atomic<bool> stop{false};
    SessionOptions so;
    so.stop = &stop;
    so.on_progress = [&](const Progress& p) {
      if (stop_after >= 0 && p.evaluations >= stop_after) stop = true;
    };
    return session.Run(*store_, so);
  }

  std::vector<std::string> StoredKeys(const std::string& job_id) {
    std::vector<std::string> keys;
    absl::StatusOr<std::vector<StoredMeasurement>> ms = store_->LoadMeasurements(job_id);
    EXPECT_TRUE(ms.ok());
    if (!ms.ok()) return keys;
    for (const StoredMeasurement& m : *ms) keys.push_back(m.key);
    return keys;
  }

  testing::TempDir tmp_;
  std::unique_ptr<Store> store_;
};

TEST_F(SessionTest, BruteForceFindsTheOptimumAndStoresEverything) {
  FakeDevice device;
  const Job job = MakeJob("brute_force", 0, 0);
  absl::StatusOr<SessionResult> r = RunJob(job, device);
  ASSERT_TRUE(r.ok()) << r.status();
  const int valid = static_cast<int>(job.space->Count().count);
  EXPECT_EQ(r->progress.evaluations, valid);
  EXPECT_EQ(r->end_reason, "search space exhausted");
  EXPECT_EQ(r->job.state, JobState::kSucceeded);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(r->best->key, "5,3");
  EXPECT_DOUBLE_EQ(r->best->measurement.time.count(), 1.0);
  EXPECT_GT(r->progress.status_counts[static_cast<int>(CandidateStatus::kRuntimeFault)], 0);
  EXPECT_EQ(static_cast<int>(StoredKeys(r->job.id).size()), valid);
  auto best = store_->FindBest("fake", std::nullopt, std::nullopt, std::nullopt);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ((*best)[0].key, "5,3");
}

TEST_F(SessionTest, SameSeedSameRunOtherSeedDiffers) {
  FakeDevice d1, d2, d3;
  absl::StatusOr<SessionResult> a = RunJob(MakeJob("random", 11, 20), d1);
  ASSERT_TRUE(a.ok());
  const std::vector<std::string> first = StoredKeys(a->job.id);
  // Same job again: nothing is measured again, the result is identical.
  absl::StatusOr<SessionResult> again = RunJob(MakeJob("random", 11, 20), d2);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->resumed);
  EXPECT_TRUE(d2.calls.empty());
  EXPECT_EQ(again->progress.replayed, 20);
  EXPECT_EQ(again->best->key, a->best->key);
  absl::StatusOr<SessionResult> other = RunJob(MakeJob("random", 12, 20), d3);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->job.id, a->job.id);
  EXPECT_NE(StoredKeys(other->job.id), first);
  EXPECT_EQ(first.size(), 20u);
}

TEST_F(SessionTest, InterruptedRunResumesWithoutMeasuringTwice) {
  // The reference: one uninterrupted run.
  FakeDevice ref_device;
  Job ref_job = MakeJob("random", 5, 40);
  ref_job.kernel_name = "reference";  // a separate job id
  ref_job.spec.mutable_kernel()->set_name("reference");
  absl::StatusOr<SessionResult> ref = RunJob(ref_job, ref_device);
  ASSERT_TRUE(ref.ok());

  FakeDevice device;
  const Job job = MakeJob("random", 5, 40);
  absl::StatusOr<SessionResult> first = RunJob(job, device, 13);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->end_reason, "interrupted");
  EXPECT_EQ(first->job.state, JobState::kInterrupted);
  EXPECT_EQ(first->progress.evaluations, 13);
  absl::StatusOr<SessionResult> second = RunJob(job, device);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->resumed);
  EXPECT_EQ(second->progress.evaluations, 40);
  EXPECT_EQ(second->progress.replayed, 13);
  EXPECT_EQ(second->job.state, JobState::kSucceeded);
  EXPECT_EQ(second->job.evaluations, 40);
  for (const auto& [key, n] : device.calls) EXPECT_EQ(n, 1) << key;
  EXPECT_EQ(device.calls.size(), 40u);
  EXPECT_EQ(StoredKeys(second->job.id), StoredKeys(ref->job.id));
  EXPECT_EQ(second->best->key, ref->best->key);
}

TEST_F(SessionTest, AStopStillRecordsMeasurementsAlreadyDone) {
  FakeDevice device;
  device.depth = 8;
  device.ready = true;
  const Job job = MakeJob("random", 5, 40);
  absl::StatusOr<SessionResult> first = RunJob(job, device, 5);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->job.state, JobState::kInterrupted);
  // Five, then the seven still queued (done already), in order; nothing
  // more is asked.
  EXPECT_EQ(first->progress.evaluations, 12);
  EXPECT_EQ(StoredKeys(first->job.id).size(), 12u);
  device.ready = false;
  absl::StatusOr<SessionResult> second = RunJob(job, device);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->progress.replayed, 12);
  for (const auto& [key, n] : device.calls) EXPECT_EQ(n, 1) << key;
}

TEST_F(SessionTest, AStopRecordsMeasurementsDoneOutOfOrder) {
  // On a job spread over GPUs a later candidate can finish before an
  // earlier one: on a stop every finished one is kept, none measured twice.
  const Job job = MakeJob("random", 7, 40);
  // The order the strategy asks in, from an uninterrupted run elsewhere.
  std::vector<std::string> order;
  {
    std::unique_ptr<Store> main = std::move(store_);
    store_ = *Store::Open(tmp_.File("probe.db"), true);
    FakeDevice probe;
    absl::StatusOr<SessionResult> all = RunJob(job, probe);
    ASSERT_TRUE(all.ok());
    order = StoredKeys(all->job.id);
    store_ = std::move(main);
  }
  ASSERT_GE(order.size(), 13u);
  FakeDevice device;
  device.depth = 8;
  // After the fifth, the queue holds the 6th to 13th: the 7th, 9th and 11th
  // are done, the others not.
  device.ready_keys = {order[6], order[8], order[10]};
  absl::StatusOr<SessionResult> first = RunJob(job, device, 5);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->job.state, JobState::kInterrupted);
  const std::vector<std::string> stored = StoredKeys(first->job.id);
  const std::set<std::string> kept(stored.begin(), stored.end());
  EXPECT_EQ(kept.size(), 8u);
  for (int i : {6, 8, 10}) EXPECT_EQ(kept.count(order[static_cast<std::size_t>(i)]), 1u) << i;
  EXPECT_EQ(kept.count(order[5]), 0u);
  device.ready_keys.clear();
  absl::StatusOr<SessionResult> second = RunJob(job, device);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->progress.replayed, 8);
  for (const auto& [key, n] : device.calls) EXPECT_EQ(n, 1) << key;
}

TEST_F(SessionTest, TimeBudgetChargesRecordedCost) {
  FakeDevice device;
  // Each candidate costs 100 ms of recorded time: 1.05 s allows 11.
  absl::StatusOr<SessionResult> r = RunJob(MakeJob("random", 1, 0, 1.05), device);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->end_reason, "time budget spent");
  EXPECT_EQ(r->progress.evaluations, 11);
  EXPECT_NEAR(r->progress.elapsed.count(), 1100, 1e-9);
}

TEST_F(SessionTest, FinalContendersAreRemeasuredOnceAndDecideTheBest) {
  FakeDevice device;
  device.remeasure = true;
  // The leader by a first measurement turns out slower when re-measured.
  device.remeasure_factor["5,3"] = 3.0;  // 1 ms -> 3 ms
  const Job job = MakeJob("brute_force", 0, 0);
  absl::StatusOr<SessionResult> r = RunJob(job, device);
  ASSERT_TRUE(r.ok()) << r.status();
  // The three best by their first measurement: 5,3 (1 ms) and two of 2 ms.
  ASSERT_EQ(device.remeasured.size(), 3u);
  EXPECT_EQ(device.remeasured[0], "5,3");
  ASSERT_TRUE(r->best.has_value());
  EXPECT_NE(r->best->key, "5,3");
  EXPECT_DOUBLE_EQ(r->best->measurement.time.count(), 2.0);
  EXPECT_TRUE(r->best->measurement.conditions.final_round());
  // The store agrees: the measurement was replaced and the best recomputed.
  auto best = store_->FindBest("fake", std::nullopt, std::nullopt, std::nullopt);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ((*best)[0].key, r->best->key);
  absl::StatusOr<std::vector<StoredMeasurement>> ms = store_->LoadMeasurements(r->job.id);
  for (const StoredMeasurement& m : *ms) {
    if (m.key == "5,3") {
      EXPECT_DOUBLE_EQ(m.measurement.time.count(), 3.0);
      EXPECT_TRUE(m.measurement.conditions.final_round());
    }
  }
  // Running the job again replays everything and re-measures nothing.
  FakeDevice again;
  again.remeasure = true;
  absl::StatusOr<SessionResult> r2 = RunJob(job, again);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(again.remeasured.empty());
  EXPECT_TRUE(again.calls.empty());
  EXPECT_EQ(r2->best->key, r->best->key);
}

TEST_F(SessionTest, ALeaderMeasuredOnceAfterTheFinalRoundGetsARoundOfItsOwn) {
  FakeDevice device;
  device.remeasure = true;
  // The three best by a first measurement (5,3 at 1 ms, 6,3 and 5,4 at 2)
  // all re-measure slower than the four at 3 ms, which were measured once;
  // of those, 4,4 re-measures faster still.
  device.remeasure_factor["5,3"] = 3.5;
  device.remeasure_factor["6,3"] = 2.0;
  device.remeasure_factor["5,4"] = 2.0;
  device.remeasure_factor["4,4"] = 0.9;
  const Job job = MakeJob("brute_force", 0, 0);
  absl::StatusOr<SessionResult> r = RunJob(job, device);
  ASSERT_TRUE(r.ok()) << r.status();
  // A second round: three of the four at 3 ms (6,4 comes last in either
  // order of the brute force, so it stays out).
  ASSERT_EQ(device.remeasured.size(), 6u);
  const std::set<std::string> second(device.remeasured.begin() + 3, device.remeasured.end());
  EXPECT_EQ(second.count("4,4"), 1u);
  EXPECT_EQ(second.count("6,4"), 0u);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(r->best->key, "4,4");
  EXPECT_DOUBLE_EQ(r->best->measurement.time.count(), 2.7);
  EXPECT_TRUE(r->best->measurement.conditions.final_round());
  EXPECT_EQ(r->progress.best_key, "4,4");
  // Each re-measured one says what it measured before.
  absl::StatusOr<std::vector<StoredMeasurement>> ms = store_->LoadMeasurements(r->job.id);
  ASSERT_TRUE(ms.ok()) << ms.status();
  std::map<std::string, std::string> messages;
  for (const StoredMeasurement& m : *ms) messages[m.key] = m.measurement.message;
  EXPECT_THAT(messages["5,3"], ::testing::HasSubstr("1.0000 ms before"));
  EXPECT_THAT(messages["4,4"], ::testing::HasSubstr("3.0000 ms before"));
  auto best = store_->FindBest("fake", std::nullopt, std::nullopt, std::nullopt);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ((*best)[0].key, "4,4");
}

TEST_F(SessionTest, FinalRoundsStopAtTheirBoundAndTheJobStillAgreesWithTheStore) {
  FakeDevice device;
  device.remeasure = true;
  // Every configuration re-measures ten times slower: each round's
  // contenders fall behind the next ones, measured once.
  for (int a = 0; a <= 9; ++a) {
    for (int b = 0; b <= 9; ++b) device.remeasure_factor[StrCat(a, ",", b)] = 10.0;
  }
  const Job job = MakeJob("brute_force", 0, 0);
  absl::StatusOr<SessionResult> r = RunJob(job, device);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(device.remeasured.size(), 9u);  // three rounds of three
  ASSERT_TRUE(r->best.has_value());
  EXPECT_FALSE(r->best->measurement.conditions.final_round());
  auto best = store_->FindBest("fake", std::nullopt, std::nullopt, std::nullopt);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_EQ(best->size(), 1u);
  EXPECT_EQ((*best)[0].key, r->best->key);
  EXPECT_DOUBLE_EQ((*best)[0].time_ms, r->best->measurement.time.count());
}

TEST_F(SessionTest, DeviceFailureFailsTheJobButKeepsWhatWasMeasured) {
  FakeDevice device;
  device.fail_device_after = 5;
  const Job job = MakeJob("brute_force", 0, 0);
  absl::StatusOr<SessionResult> r = RunJob(job, device);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("fell off the bus"));
  const std::string id = ComputeJobId(job, device.info());
  absl::StatusOr<JobRecord> stored = store_->GetJob(id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state, JobState::kFailed);
  EXPECT_THAT(stored->message, HasSubstr("fell off the bus"));
  EXPECT_EQ(StoredKeys(id).size(), 5u);
  EXPECT_TRUE(store_->CheckIntegrity().ok());
}

TEST_F(SessionTest, WarmStartRanksWhatOtherJobsOfTheKernelMeasured) {
  FakeDevice device;
  const Job full = MakeJob("brute_force", 0, 0);
  ASSERT_TRUE(RunJob(full, device).ok());
  const Job part = MakeJob("random", 4, 10);
  ASSERT_TRUE(RunJob(part, device).ok());
  const std::string full_id = ComputeJobId(full, device.info());
  const std::string part_id = ComputeJobId(part, device.info());

  // A new job sees both earlier jobs, each configuration once.
  const Job next = MakeJob("random", 9, 5);
  absl::StatusOr<WarmStart> w = LoadWarmStart(*store_, next, ComputeJobId(next, device.info()));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->jobs, 2);
  EXPECT_EQ(w->skipped, 0);
  EXPECT_EQ(w->prior.size(), StoredKeys(full_id).size());
  const Space& space = *next.space;
  int firsts = 0;
  for (const auto& [config, outcome] : w->prior) {
    const auto a = std::get<std::int64_t>(space.ValueOf(config, 0));
    const auto b = std::get<std::int64_t>(space.ValueOf(config, 1));
    if ((a + b) % 7 == 0) {
      EXPECT_EQ(outcome.status, CandidateStatus::kRuntimeFault) << space.Key(config);
      continue;
    }
    ASSERT_TRUE(outcome.ok()) << space.Key(config);
    EXPECT_GE(outcome.loss, 0.0);
    EXPECT_LE(outcome.loss, 1.0);
    // The optimum (5,3) ranks first in the complete job; otherwise only
    // the partial job's best ranks first there.
    if (outcome.loss == 0.0) ++firsts;
    if (a == 5 && b == 3) {
      EXPECT_EQ(outcome.loss, 0.0);
    }
  }

  EXPECT_GE(firsts, 1);
  EXPECT_LE(firsts, 2);

  // A job never warm-starts from itself.
  absl::StatusOr<WarmStart> own = LoadWarmStart(*store_, part, part_id);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->jobs, 1);
}

TEST_F(SessionTest, WarmStartNeedsTheSameKernelAndParameters) {
  FakeDevice device;
  ASSERT_TRUE(RunJob(MakeJob("brute_force", 0, 0), device).ok());

  Job renamed = MakeJob("random", 1, 5);
  renamed.kernel_name = "other";
  absl::StatusOr<WarmStart> w = LoadWarmStart(*store_, renamed, "x");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->prior.empty());

  Job reparameterised = MakeJob("random", 1, 5);
  reparameterised.space =
      std::make_shared<const Space>(*Space::Product({Range("a", 0, 9), Range("c", 0, 9)}, {}));
  w = LoadWarmStart(*store_, reparameterised, "x");
  ASSERT_TRUE(w.ok());
  EXPECT_TRUE(w->prior.empty());

  // Same parameters, smaller domains: what lies outside is skipped.
  Job narrower = MakeJob("random", 1, 5);
  narrower.space =
      std::make_shared<const Space>(*Space::Product({Range("a", 0, 4), Range("b", 0, 9)}, {}));
  w = LoadWarmStart(*store_, narrower, "x");
  ASSERT_TRUE(w.ok());
  EXPECT_GT(w->skipped, 0);
  for (const auto& [config, outcome] : w->prior) {
    EXPECT_LE(std::get<std::int64_t>(narrower.space->ValueOf(config, 0)), 4);
  }
  EXPECT_FALSE(w->prior.empty());
}

}  // namespace
}  // namespace ktune
