#include "server/daemon/fair_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tuner/base/clock.h"
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
    for (int i = 0; i < 50; ++i) std::this_thread::yield();  // a while inside
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
      for (int k = 0; k < 20; ++k) std::this_thread::yield();  // a while inside
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
  gate.AwaitWaiting(1);
  std::thread second(take, std::ref(heavy), "heavy");
  gate.AwaitWaiting(2);
  holder.Release();
  first.join();
  second.join();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_STREQ(order[0], "heavy");
  EXPECT_STREQ(order[1], "light");
}

// A job that releases the gate while still owed turns keeps it for the
// hold: a job of weight 4 takes four turns for every turn of a job of
// weight 1 waiting beside it, instead of alternating. Time is a fake
// clock's: the hold never runs out unless the test says so.
TEST(FairGateTest, AJobOwedTurnsKeepsTheGateForItsHold) {
  FakeClock clock;
  FairGate gate(std::chrono::milliseconds(2), clock);
  FairGate::Member heavy(gate, 4.0), light(gate, 1.0);
  light.Acquire();  // the light job is one turn ahead
  light.Release();
  heavy.Acquire();
  std::atomic<bool> light_turn{false};
  std::thread waiter([&] {
    light.Acquire();
    light_turn.store(true);
    light.Release();
  });
  gate.AwaitWaiting(1);
  for (int turn = 2; turn <= 4; ++turn) {
    heavy.Release();
    // Still owed turns: the gate is held for the heavy job, and the light
    // one waits on the clock (were it not held, it would take the gate and
    // this wait would never end).
    clock.AwaitWaiters(1);
    EXPECT_FALSE(light_turn.load()) << "turn " << turn;
    heavy.Acquire();
  }
  heavy.Release();  // four turns for one: now the light job is due
  waiter.join();
  EXPECT_TRUE(light_turn.load());
  EXPECT_EQ(heavy.turns(), 4);  // weight 4 to 1
  EXPECT_EQ(light.turns(), 2);
}

TEST(FairGateTest, AHoldRunsOutWhenItsJobDoesNotComeBack) {
  FakeClock clock;
  FairGate gate(std::chrono::milliseconds(2), clock);
  FairGate::Member heavy(gate, 4.0), light(gate, 1.0);
  light.Acquire();
  light.Release();
  heavy.Acquire();
  std::atomic<bool> light_turn{false};
  std::thread waiter([&] {
    light.Acquire();
    light_turn.store(true);
    light.Release();
  });
  gate.AwaitWaiting(1);
  heavy.Release();        // owed turns: the gate is held for it...
  clock.AwaitWaiters(1);  // ...and the light job waits out the hold
  EXPECT_FALSE(light_turn.load());
  clock.Advance(std::chrono::milliseconds(1));
  clock.AwaitWaiters(1);  // not yet
  EXPECT_FALSE(light_turn.load());
  clock.Advance(std::chrono::milliseconds(1));  // the hold is over
  waiter.join();
  EXPECT_TRUE(light_turn.load());
}

// The gate's busy time (its GPU's, for the daemon's metrics) is the time
// members held it, the turn under way included, and not the time between.
TEST(FairGateTest, BusyTimeIsTheTimeTurnsHeldTheGate) {
  FakeClock clock;
  FairGate gate(std::chrono::milliseconds(0), clock);
  FairGate::Member a(gate, 1.0);
  EXPECT_EQ(gate.busy_time(), Clock::Duration{});
  a.Acquire();
  clock.Advance(std::chrono::milliseconds(30));
  a.Release();
  clock.Advance(std::chrono::milliseconds(100));  // idle
  a.Acquire();
  clock.Advance(std::chrono::milliseconds(5));
  EXPECT_EQ(gate.busy_time(), std::chrono::milliseconds(35));  // under way
  a.Release();
  clock.Advance(std::chrono::milliseconds(7));
  EXPECT_EQ(gate.busy_time(), std::chrono::milliseconds(35));
}

TEST(FairGateTest, APrioritysWeightDoublesPerStep) {
  EXPECT_DOUBLE_EQ(GateWeight(0), 1.0);
  EXPECT_DOUBLE_EQ(GateWeight(2), 4.0);
  EXPECT_DOUBLE_EQ(GateWeight(-1), 0.5);
  EXPECT_DOUBLE_EQ(GateWeight(1000), 16.0);
  EXPECT_DOUBLE_EQ(GateWeight(-1000), 1.0 / 16);
}

}  // namespace
}  // namespace ktune
