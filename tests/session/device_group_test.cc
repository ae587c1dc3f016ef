#include "tuner/device/device_group.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "strategies/registry.h"
#include "tests/testing/parameters.h"
#include "tests/testing/temp_dir.h"
#include "tuner/session/session.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

// What one GPU saw: evaluations in flight at once (never more than one in
// an isolated timed region) and how many it took.
struct GpuLog {
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  std::atomic<int> evaluations{0};
};

// A device double; time is a function of the configuration. With a
// `rendezvous`, its first evaluation waits until every device sharing the
// rendezvous has begun one: a group that left a member idle never gets
// past it.
class SlowDevice final : public Device {
 public:
  SlowDevice(std::string id, std::string name, GpuLog* log, std::latch* rendezvous = nullptr)
      : log_(log), rendezvous_(rendezvous) {
    info_.id = std::move(id);
    info_.name = std::move(name);
    info_.architecture = "sm_90";
    info_.uuid = "uuid-" + info_.id;
    info_.memory_bytes = 1 << 30;
  }
  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override { return false; }
  absl::Status Bind(const JobBinding& job) override {
    space_ = job.space;
    return absl::OkStatus();
  }
  absl::StatusOr<Measurement> Evaluate(const Config& config) override {
    const int now = log_->inside.fetch_add(1) + 1;
    int seen = log_->most_inside.load();
    while (now > seen && !log_->most_inside.compare_exchange_weak(seen, now)) {
    }
    if (rendezvous_ != nullptr && !met_) {
      met_ = true;
      rendezvous_->arrive_and_wait();
    }
    for (int i = 0; i < 20; ++i) std::this_thread::yield();  // a while inside
    log_->inside.fetch_sub(1);
    log_->evaluations.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    if (!remeasuring_) evaluated.push_back(space_->Key(config));
    Measurement m;
    const auto a = std::get<std::int64_t>(space_->ValueOf(config, 0));
    const auto b = std::get<std::int64_t>(space_->ValueOf(config, 1));
    m.time = Millis(1.0 + static_cast<double>((a - 6) * (a - 6) + (b - 2) * (b - 2)));
    m.stats = ComputeStats({m.time.count()});
    m.cost = m.time;
    return m;
  }
  bool can_remeasure() const override { return true; }
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override {
    std::vector<Measurement> out;
    remeasuring_ = true;
    for (const Config& c : configs) {
      absl::StatusOr<Measurement> m = Evaluate(c);
      if (!m.ok()) return m.status();
      out.push_back(*m);
      ++remeasured;
    }
    remeasuring_ = false;
    return out;
  }

  std::vector<std::string> evaluated;
  int remeasured = 0;

 private:
  DeviceInfo info_;
  GpuLog* log_;
  std::latch* rendezvous_;
  bool met_ = false;
  const Space* space_ = nullptr;
  std::mutex mu_;
  bool remeasuring_ = false;
};

using testing::Range;

Job MakeJob() {
  Job job;
  job.kernel_name = "fake";
  job.source_hash = "h";
  job.space = std::make_shared<const Space>(
      *Space::Product({Range("a", 0, 9), Range("b", 0, 9)}, {"a + b <= 15"}));
  job.strategy = "brute_force";
  job.spec.mutable_kernel()->set_name("fake");
  job.spec.mutable_strategy()->set_name("brute_force");
  return job;
}

TEST(DeviceGroupTest, DevicesOfDifferentModelsAreNeverGrouped) {
  GpuLog a, b;
  std::vector<std::unique_ptr<Device>> members;
  members.push_back(std::make_unique<SlowDevice>("cuda:0", "NVIDIA H200", &a));
  members.push_back(std::make_unique<SlowDevice>("cuda:1", "NVIDIA A100-SXM4-80GB", &b));
  absl::StatusOr<std::unique_ptr<DeviceGroup>> g = DeviceGroup::Create(std::move(members));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("are not the same model"));

  std::vector<std::unique_ptr<Device>> one;
  one.push_back(std::make_unique<SlowDevice>("cuda:0", "NVIDIA H200", &a));
  EXPECT_FALSE(DeviceGroup::Create(std::move(one)).ok());
}

TEST(DeviceGroupTest, AJobSpreadsOverBothDevicesAndMeasuresEachConfigurationOnce) {
  GpuLog log0, log1;
  std::latch both_measuring(2);
  std::vector<std::unique_ptr<Device>> members;
  auto d0 = std::make_unique<SlowDevice>("cuda:0", "NVIDIA H200", &log0, &both_measuring);
  auto d1 = std::make_unique<SlowDevice>("cuda:1", "NVIDIA H200", &log1, &both_measuring);
  SlowDevice* first = d0.get();
  SlowDevice* second = d1.get();
  members.push_back(std::move(d0));
  members.push_back(std::move(d1));
  absl::StatusOr<std::unique_ptr<DeviceGroup>> group = DeviceGroup::Create(std::move(members));
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->info().id, "cuda:0");
  EXPECT_EQ((*group)->info().uuid, "uuid-cuda:0");

  testing::TempDir tmp;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(tmp.File("g.db"), true);
  ASSERT_TRUE(store.ok());
  const Job job = MakeJob();
  auto strategy = MakeStrategy("brute_force", *job.space, {});
  ASSERT_TRUE(strategy.ok());
  Session session(job, **group, **strategy, "brute_force");
  absl::StatusOr<SessionResult> r = session.Run(**store);
  ASSERT_TRUE(r.ok()) << r.status();

  const auto valid = static_cast<std::size_t>(job.space->Count().count);
  ASSERT_TRUE(r->best.has_value());
  EXPECT_EQ(r->best->key, "6,2");
  // Every valid configuration measured once, on one GPU or the other.
  std::set<std::string> seen;
  for (const auto* d : {first, second}) {
    for (const std::string& k : d->evaluated) EXPECT_TRUE(seen.insert(k).second) << k;
  }
  // The final contenders were re-measured on the first GPU only.
  EXPECT_GT(first->remeasured, 0);
  EXPECT_EQ(second->remeasured, 0);
  EXPECT_EQ(seen.size(), valid);
  EXPECT_GT(log0.evaluations.load(), 0);
  EXPECT_GT(log1.evaluations.load(), 0);
  // Never two evaluations at once on one GPU.
  EXPECT_EQ(log0.most_inside.load(), 1);
  EXPECT_EQ(log1.most_inside.load(), 1);
  // Each stored measurement names the GPU that took it.
  absl::StatusOr<std::vector<StoredMeasurement>> stored = (*store)->LoadMeasurements(r->job.id);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), valid);
  std::map<std::string, int> by_device;
  for (const StoredMeasurement& m : *stored) ++by_device[m.measurement.conditions.device()];
  EXPECT_EQ(by_device.size(), 2u);
  EXPECT_GT(by_device["cuda:0"], 0);
  EXPECT_GT(by_device["cuda:1"], 0);
}

}  // namespace
}  // namespace ktune
