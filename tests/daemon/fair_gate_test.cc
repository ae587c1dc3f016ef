#include "server/daemon/fair_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace ktune {
namespace {

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

}  // namespace
}  // namespace ktune
