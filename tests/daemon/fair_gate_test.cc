#include "server/daemon/fair_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tuner/device/device_group.h"

namespace ktune {
namespace {

// A GPU double that counts the evaluations inside it at once.
class CountingDevice final : public Device {
 public:
  CountingDevice(const std::string& id, std::atomic<int>* inside, std::atomic<int>* overlaps)
      : inside_(inside), overlaps_(overlaps) {
    info_.id = id;
    info_.name = "NVIDIA H200";
    info_.uuid = "uuid-" + id;
  }
  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override { return false; }
  absl::Status Bind(const JobBinding&) override { return absl::OkStatus(); }
  absl::StatusOr<Measurement> Evaluate(const Config&) override {
    if (inside_->fetch_add(1) != 0) ++*overlaps_;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    inside_->fetch_sub(1);
    Measurement m;
    m.time = Millis(1);
    return m;
  }

 private:
  DeviceInfo info_;
  std::atomic<int>* inside_;
  std::atomic<int>* overlaps_;
};

// Two jobs, each spread over both GPUs, and a third on one of them: on
// each GPU the gate lets one evaluation in at a time.
TEST(FairGateTest, JobsSpreadOverSeveralGpusNeverOverlapOnAny) {
  FairGate gate0, gate1;
  std::atomic<int> inside0{0}, inside1{0}, overlaps{0};
  auto group = [&] {
    std::vector<std::unique_ptr<Device>> members;
    members.push_back(std::make_unique<GatedDevice>(
        std::make_unique<CountingDevice>("cuda:0", &inside0, &overlaps), gate0, 1.0));
    members.push_back(std::make_unique<GatedDevice>(
        std::make_unique<CountingDevice>("cuda:1", &inside1, &overlaps), gate1, 1.0));
    absl::StatusOr<std::unique_ptr<DeviceGroup>> g = DeviceGroup::Create(std::move(members));
    EXPECT_TRUE(g.ok()) << g.status();
    return std::unique_ptr<Device>(*std::move(g));
  };
  std::unique_ptr<Device> a = group(), b = group();
  GatedDevice c(std::make_unique<CountingDevice>("cuda:1", &inside1, &overlaps), gate1, 1.0);
  auto job = [](Device& d) {
    std::vector<Config> configs;
    for (std::uint32_t i = 0; i < 60; ++i) configs.push_back(Config{{i}});
    d.Prefetch(configs);
    for (const Config& cfg : configs) EXPECT_TRUE(d.Evaluate(cfg).ok());
  };
  std::thread ta(job, std::ref(*a)), tb(job, std::ref(*b)), tc(job, std::ref(c));
  ta.join();
  tb.join();
  tc.join();
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(FairGateTest, OneHolderAtATime) {
  FairGate gate;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  auto run = [&](double weight) {
    FairGate::Member m(gate, weight);
    for (int i = 0; i < 200; ++i) {
      m.Acquire();
      if (inside.fetch_add(1) != 0) ++overlaps;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      inside.fetch_sub(1);
      m.Release();
    }
  };
  std::thread a(run, 1.0), b(run, 2.0), c(run, 1.0);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(overlaps.load(), 0);
}

TEST(FairGateTest, TheWaiterWithTheLeastServiceForItsWeightGoesFirst) {
  FairGate gate;
  FairGate::Member holder(gate, 1.0), light(gate, 1.0), heavy(gate, 2.0);
  // Two turns each: the light member has used 2 turns of its weight, the
  // heavy one 2 / 2.
  for (int i = 0; i < 2; ++i) {
    light.Acquire();
    light.Release();
    heavy.Acquire();
    heavy.Release();
  }
  holder.Acquire();
  std::mutex mu;
  std::vector<const char*> order;
  auto take = [&](FairGate::Member& m, const char* name) {
    m.Acquire();
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(name);
    }
    m.Release();
  };
  std::thread first(take, std::ref(light), "light");  // queues first
  while (gate.waiting() < 1) std::this_thread::yield();
  std::thread second(take, std::ref(heavy), "heavy");
  while (gate.waiting() < 2) std::this_thread::yield();
  holder.Release();
  first.join();
  second.join();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_STREQ(order[0], "heavy");
  EXPECT_STREQ(order[1], "light");
}

TEST(FairGateTest, TwoBusyJobsShareTheGateByTheirWeights) {
  // Each member does a little work of its own between turns, as a job
  // stores results and asks its strategy: without the hold they would
  // alternate whatever their weights.
  FairGate gate;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> heavy_turns{0}, light_turns{0};
  auto run = [&](double weight, std::atomic<std::int64_t>* turns) {
    FairGate::Member m(gate, weight);
    while (!stop.load()) {
      m.Acquire();
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // the timed region
      m.Release();
      ++*turns;
      if (turns == &heavy_turns && turns->load() == 400) stop.store(true);
      // Between candidates: CPU work (storing, asking), not a sleep.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    }
  };
  std::thread light(run, 1.0, &light_turns);
  std::thread heavy(run, 4.0, &heavy_turns);
  heavy.join();
  light.join();
  // 4 to 1 by weight; alternating would give 1 to 1.
  EXPECT_LT(light_turns.load() * 2, heavy_turns.load());
  EXPECT_GT(light_turns.load(), 0);  // and the light job is not starved
}

}  // namespace
}  // namespace ktune
