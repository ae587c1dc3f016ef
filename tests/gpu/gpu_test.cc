// Tests that need a CUDA GPU (ctest label `gpu`). They run the real engine:
// NVRTC workers, the measurement worker, the session and the store.
//
// The worker program is ktune itself: $KTUNE_BIN, else the build's ktune.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "strategies/registry.h"
#include "tests/testing/temp_dir.h"
#include "tuner/device/cuda_device.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

WorkerProgram Program() {
  const char* bin = std::getenv("KTUNE_BIN");
  return WorkerProgram{bin != nullptr ? bin : KTUNE_CLI_PATH};
}

std::string KernelDir() {
  const char* dir = std::getenv("KTUNE_KERNELS");
  return dir != nullptr ? dir : std::string(KTUNE_SOURCE_DIR) + "/kernels";
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(Program());
    if (!gpus.ok() || gpus->empty()) GTEST_SKIP() << "no GPU: " << gpus.status();
    gpu_ = (*gpus)[0];
    CudaDeviceOptions o;
    o.program = Program();
    o.cache_dir = tmp_.File("cubin");
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = CudaDevice::Open(gpu_, o);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
    store_ = std::make_unique<Store>(*Store::Open(tmp_.File("gpu.db"), true));
  }

  Job LoadJob(const std::string& name, const std::map<std::string, std::int64_t>& problem = {}) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(KernelDir() + "/" + name + ".json");
    EXPECT_TRUE(spec.ok()) << spec.status();
    for (const auto& [k, v] : problem) (*spec->mutable_problem())[k] = v;
    absl::StatusOr<Job> job = ResolveJob(*spec, KernelDir());
    EXPECT_TRUE(job.ok()) << job.status();
    return *std::move(job);
  }

  SessionResult Tune(const Job& job, const std::string& strategy, std::int64_t evals = 0) {
    StrategyOptions so;
    so.seed = 1;
    so.max_evaluations = evals;
    Job j = job;
    j.max_evaluations = evals;
    auto s = MakeStrategy(strategy, *j.space, so);
    EXPECT_TRUE(s.ok());
    Session session(j, *device_, **s, strategy);
    absl::StatusOr<SessionResult> r = session.Run(*store_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : SessionResult();
  }

  std::map<std::string, StoredMeasurement> Measurements(const std::string& job_id) {
    std::map<std::string, StoredMeasurement> out;
    absl::StatusOr<std::vector<StoredMeasurement>> ms = store_->LoadMeasurements(job_id);
    EXPECT_TRUE(ms.ok());
    if (ms.ok()) {
      for (StoredMeasurement& m : *ms) out.emplace(m.key, std::move(m));
    }
    return out;
  }

  testing::TempDir tmp_;
  v1::WorkerDeviceInfo gpu_;
  std::unique_ptr<CudaDevice> device_;
  std::unique_ptr<Store> store_;
};

TEST_F(GpuTest, DevicesHaveAnArchitecture) {
  EXPECT_FALSE(gpu_.name().empty());
  EXPECT_GE(gpu_.major(), 7);
  EXPECT_EQ(gpu_.uuid().rfind("GPU-", 0), 0u);
  EXPECT_EQ(device_->info().architecture, "sm_" + std::to_string(gpu_.major() * 10 + gpu_.minor()));
}

// One space with every kind of failure alongside valid configurations: the
// job finishes, each bad candidate has the right status and message, the
// best is valid, and the worker restarts are counted.
TEST_F(GpuTest, FaultMatrixJobFinishes) {
  const Job job = LoadJob("faults");
  const SessionResult r = Tune(job, "brute_force");
  EXPECT_EQ(r.job.state, JobState::kSucceeded);
  EXPECT_EQ(r.progress.evaluations, 16);
  const auto ms = Measurements(r.job.id);
  ASSERT_EQ(ms.size(), 16u);
  const std::map<char, CandidateStatus> expected = {
      {'0', CandidateStatus::kOk},           {'1', CandidateStatus::kOk},
      {'2', CandidateStatus::kRuntimeFault}, {'3', CandidateStatus::kTimeout},
      {'4', CandidateStatus::kCompileError}, {'5', CandidateStatus::kLaunchError},
      {'6', CandidateStatus::kWrongResult},  {'7', CandidateStatus::kWrongResult}};
  for (const auto& [key, m] : ms) {
    EXPECT_EQ(m.measurement.status, expected.at(key[0]))
        << key << ": " << CandidateStatusName(m.measurement.status) << " " << m.measurement.message;
    const std::string& msg = m.measurement.message;
    switch (key[0]) {
      case '2': EXPECT_THAT(msg, HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS")) << key; break;
      case '3': EXPECT_THAT(msg, HasSubstr("killed and restarted")) << key; break;
      case '4': EXPECT_THAT(msg, HasSubstr("error")) << key; break;
      case '5': EXPECT_THAT(msg, HasSubstr("shared memory")) << key; break;
      case '6': EXPECT_THAT(msg, HasSubstr("differ from the reference")) << key; break;
      case '7': EXPECT_THAT(msg, HasSubstr("past its end")) << key; break;
      default: break;
    }
  }
  ASSERT_TRUE(r.best.has_value());
  EXPECT_TRUE(r.best->key[0] == '0' || r.best->key[0] == '1') << r.best->key;
  // Two illegal addresses and two hangs: four fresh workers.
  EXPECT_GE(device_->stats().worker_restarts, 4);
  std::printf("fault matrix: %lld worker restarts\n",
              static_cast<long long>(device_->stats().worker_restarts));
}

TEST_F(GpuTest, LibraryKernelsTuneAndVerify) {
  const std::map<std::string, std::map<std::string, std::int64_t>> kernels = {
      {"saxpy", {{"N", 1 << 22}}},
      {"sgemm", {{"M", 1024}, {"N", 1024}, {"K", 1024}}},
      {"reduction", {{"N", 1 << 22}}},
      {"transpose", {{"ROWS", 2048}, {"COLS", 2048}}},
  };
  for (const auto& [name, problem] : kernels) {
    const Job job = LoadJob(name, problem);
    const SessionResult r = Tune(job, "random", 12);
    EXPECT_EQ(r.progress.evaluations, 12) << name;
    ASSERT_TRUE(r.best.has_value()) << name;
    int ok = 0;
    for (const auto& [key, m] : Measurements(r.job.id)) {
      EXPECT_NE(m.measurement.status, CandidateStatus::kWrongResult)
          << name << " " << key << ": " << m.measurement.message;
      if (m.measurement.ok()) {
        ++ok;
        EXPECT_GE(m.measurement.stats.samples, 3) << name << " " << key;
        EXPECT_GT(m.measurement.conditions.gpu_busy.count(), 0) << name << " " << key;
      }
    }
    EXPECT_GE(ok, 6) << name;
    std::printf("%-10s best %-16s %.4f ms (%d of 12 ok)\n", name.c_str(), r.best->key.c_str(),
                r.best->measurement.time.count(), ok);
  }
}

}  // namespace
}  // namespace ktune
