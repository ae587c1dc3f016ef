// The CUDA device's parent side against a fake measurement worker
// (tests/testing/fake_worker.cc): a worker that hangs, dies, loses its
// context or answers out of step costs its candidate and a restart, and
// the job goes on; real NVRTC compiles the candidates.
#include "tuner/device/cuda_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "strategies/registry.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using testing::Slurp;

using ::testing::HasSubstr;

constexpr char kSpec[] = R"json({
  "kernel": {"name": "fill", "code": "extern \"C\" __global__ void fill(float* y, int n) { int i = blockIdx.x * block_size_x + threadIdx.x; if (i < n) y[i] = 1.0f; }"},
  "parameters": [{"name": "block_size_x", "ints": [32, 64, 96, 128, 256, 512]}],
  "problem": {"N": 4096},
  "launch": {"grid": ["ceil_div(N, block_size_x)"]},
  "arguments": [
    {"name": "y", "type": "F32", "buffer": {"size": "N", "direction": "OUTPUT"}},
    {"name": "n", "type": "I32", "scalar": "N"}
  ],
  "measurement": {"kernelTimeout": "0.2s", "maxTimePerCandidate": "0.05s"},
  "strategy": {"name": "brute_force"}
})json";

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KTUNE_LOCK_DIR", tmp_.path().c_str(), 1);
    setenv("KTUNE_FAKE_WORKER", "64=hang,96=wrong,128=die,256=lose,512=fault", 1);
    OpenDevice();
  }
  void TearDown() override {
    unsetenv("KTUNE_FAKE_WORKER");
    unsetenv("KTUNE_FAKE_COMPILE");
    unsetenv("KTUNE_LOCK_DIR");
  }

  // With `adopt`, the worker that lists the GPUs goes on to open the one
  // chosen, as ktune tune --local does.
  void OpenDevice(std::chrono::milliseconds compile_timeout = std::chrono::seconds(120),
                  bool adopt = false) {
    device_.reset();
    const WorkerProgram fake{FAKE_WORKER_PATH};
    std::optional<Subprocess> lister;
    absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
        ListCudaDevices(fake, adopt ? &lister : nullptr);
    ASSERT_TRUE(gpus.ok()) << gpus.status();
    ASSERT_EQ(gpus->size(), 1u);
    CudaDeviceOptions o;
    o.program = fake;
    o.compile_workers = 2;
    o.compile_timeout = compile_timeout;
    o.cache_dir = tmp_.File("cubin");
    o.watchdog_slack = std::chrono::milliseconds(100);
    absl::StatusOr<std::unique_ptr<CudaDevice>> d =
        CudaDevice::Open((*gpus)[0], o, std::move(lister));
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
  }

  // Runs kSpec's job on the device; its measurements by configuration.
  std::map<std::string, Measurement> RunJob(const std::string& db = "s.db") {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(kSpec, "fake.json");
    EXPECT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<Job> job = ResolveJob(*spec, tmp_.path());
    EXPECT_TRUE(job.ok()) << job.status();
    StrategyOptions so;
    absl::StatusOr<std::unique_ptr<Strategy>> strategy =
        MakeStrategy("brute_force", *job->space, so);
    EXPECT_TRUE(strategy.ok());
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(tmp_.File(db), true);
    EXPECT_TRUE(store.ok()) << store.status();
    Session session(*job, *device_, **strategy, "brute_force");
    absl::StatusOr<SessionResult> result = session.Run(**store);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    EXPECT_EQ(result->job.state, JobState::kSucceeded);
    absl::StatusOr<std::vector<StoredMeasurement>> stored =
        (*store)->LoadMeasurements(result->job.id);
    EXPECT_TRUE(stored.ok()) << stored.status();
    std::map<std::string, Measurement> by_key;
    if (stored.ok()) {
      for (const StoredMeasurement& m : *stored) by_key[m.key] = m.measurement;
    }
    return by_key;
  }

  testing::TempDir tmp_;
  std::unique_ptr<CudaDevice> device_;
};

// Fault matrix: a measurement worker killed mid-sample (and one that hangs,
// answers out of step, loses its context) costs its candidate and a
// restart; every other candidate is measured and stored.
TEST_F(CudaDeviceTest, AWorkerThatFailsCostsItsCandidateAndTheJobGoesOn) {
  std::map<std::string, Measurement> by_key = RunJob();
  ASSERT_EQ(by_key.size(), 6u);
  EXPECT_TRUE(by_key["32"].ok());
  EXPECT_DOUBLE_EQ(by_key["32"].time.count(), 0.32);
  EXPECT_EQ(by_key["64"].status, CandidateStatus::kTimeout);
  EXPECT_THAT(by_key["64"].message, HasSubstr("hung or ran too long"));
  EXPECT_EQ(by_key["96"].status, CandidateStatus::kRuntimeFault);
  EXPECT_THAT(by_key["96"].message, HasSubstr("answered out of step"));
  EXPECT_EQ(by_key["128"].status, CandidateStatus::kRuntimeFault);
  EXPECT_THAT(by_key["128"].message, HasSubstr("the measurement worker died (killed by signal 9"));
  EXPECT_EQ(by_key["256"].status, CandidateStatus::kRuntimeFault);
  EXPECT_THAT(by_key["256"].message, HasSubstr("ILLEGAL_ADDRESS"));
  EXPECT_EQ(by_key["512"].status, CandidateStatus::kRuntimeFault);
  EXPECT_THAT(by_key["512"].message, HasSubstr("a fault of the kernel"));
  // A fresh worker after the hang, the answer out of step, the death and
  // the lost context (each had a candidate after it); an ordinary fault
  // keeps its worker.
  EXPECT_EQ(device_->stats().worker_restarts, 4);
}

// Fault matrix: a compile worker killed mid-compile, and a compile that
// hangs past its time limit, each cost their own candidate (a compile
// error saying what happened); the pool starts a fresh compiler and the
// job measures every other candidate.
TEST_F(CudaDeviceTest, ACompilerKilledOrHungMidCompileCostsOnlyItsCandidate) {
  device_.reset();  // the fixture's device, and its compilers, stop first
  setenv("KTUNE_FAKE_WORKER", "", 1);
  setenv("KTUNE_FAKE_COMPILE", "64=die,128=hang", 1);
  OpenDevice(std::chrono::seconds(20));  // ample for a real compile on a loaded machine
  std::map<std::string, Measurement> by_key = RunJob();
  ASSERT_EQ(by_key.size(), 6u);
  EXPECT_EQ(by_key["64"].status, CandidateStatus::kCompileError);
  EXPECT_THAT(by_key["64"].message, HasSubstr("the compiler process died (killed by signal 9"));
  EXPECT_EQ(by_key["128"].status, CandidateStatus::kCompileError);
  EXPECT_THAT(by_key["128"].message, HasSubstr("compilation stopped after its time limit of 20 s"));
  for (const char* ok : {"32", "96", "256", "512"}) {
    EXPECT_TRUE(by_key[ok].ok()) << ok << ": " << by_key[ok].message;
  }
  // Nothing cached from the failures (they may pass another time): a new
  // job compiles them again, and now they pass.
  device_.reset();  // its compilers stopped before the environment changes
  unsetenv("KTUNE_FAKE_COMPILE");
  OpenDevice();
  by_key = RunJob("again.db");
  EXPECT_TRUE(by_key["64"].ok()) << by_key["64"].message;
  EXPECT_TRUE(by_key["128"].ok()) << by_key["128"].message;
}

// The worker that listed the GPUs opens the one chosen and measures on it:
// one process start (and one driver initialisation) fewer before the first
// measurement. Without it, the lister ends and a second worker opens the GPU.
TEST_F(CudaDeviceTest, TheWorkerThatListsTheGpusGoesOnToMeasure) {
  // The environment changes only while no device's threads start processes.
  device_.reset();
  unsetenv("KTUNE_FAKE_WORKER");  // every candidate ok: no worker restarts
  for (const bool adopt : {true, false}) {
    SCOPED_TRACE(adopt ? "adopted" : "not adopted");
    const std::string log = tmp_.File(adopt ? "adopted.log" : "fresh.log");
    setenv("KTUNE_FAKE_WORKER_LOG", log.c_str(), 1);
    OpenDevice(std::chrono::seconds(120), adopt);
    const std::map<std::string, Measurement> by_key = RunJob(adopt ? "a.db" : "b.db");
    device_.reset();
    unsetenv("KTUNE_FAKE_WORKER_LOG");
    ASSERT_TRUE(by_key.at("32").ok()) << by_key.at("32").message;
    std::map<std::string, std::set<std::string>> pids;  // request -> processes
    std::istringstream lines(Slurp(log));
    std::string pid, kind;
    while (lines >> pid >> kind) pids[kind].insert(pid);
    ASSERT_EQ(pids["list"].size(), 1u);
    ASSERT_EQ(pids["candidate"].size(), 1u);
    EXPECT_EQ(pids["list"] == pids["candidate"], adopt);
  }
}

TEST_F(CudaDeviceTest, TheFakeGpuIsListedAndSelected) {
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
      ListCudaDevices(WorkerProgram{FAKE_WORKER_PATH});
  ASSERT_TRUE(gpus.ok());
  EXPECT_TRUE(SelectCudaDevice(*gpus, "0").ok());
  EXPECT_TRUE(SelectCudaDevice(*gpus, "GPU-00000000").ok());
  EXPECT_FALSE(SelectCudaDevice(*gpus, "cuda:3").ok());
  EXPECT_EQ(device_->info().architecture, "sm_90");
}

}  // namespace
}  // namespace ktune
