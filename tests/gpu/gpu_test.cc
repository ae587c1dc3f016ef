// Tests that need a CUDA GPU (ctest label `gpu`). They run the real engine:
// NVRTC workers, the measurement worker, the session and the store.
//
// The worker program is ktune itself: $KTUNE_BIN, else the build's ktune.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "server/runner/runner.h"
#include "strategies/registry.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/file.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"
#include "tuner/cuda/nvml.h"
#include "tuner/device/cuda_device.h"
#include "tuner/device/device_group.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/measure/sampling_policy.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

// The worker program as ktune starts it: ktune-worker beside ktune.
WorkerProgram Program() {
  const char* bin = std::getenv("KTUNE_BIN");
  return WorkerProgram{WorkerExecutable(bin != nullptr ? bin : KTUNE_CLI_PATH)};
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
    nvml_ = Nvml::ForUuid(gpu_.uuid()).available();
    CudaDeviceOptions o;
    o.program = Program();
    o.cache_dir = tmp_.File("cubin");
    absl::StatusOr<std::unique_ptr<CudaDevice>> d = CudaDevice::Open(gpu_, o);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
    store_ = *Store::Open(tmp_.File("gpu.db"), true);
  }

  Job LoadJob(const std::string& name, const std::map<std::string, std::int64_t>& problem = {},
              const std::function<void(v1::JobSpec&)>& edit = nullptr) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(KernelDir() + "/" + name + ".json");
    EXPECT_TRUE(spec.ok()) << spec.status();
    for (const auto& [k, v] : problem) (*spec->mutable_problem())[k] = v;
    if (edit) edit(*spec);
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
  bool nvml_ = false;  // NVML sees the GPU
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
    bool first_sampled = true;
    absl::StatusOr<std::vector<StoredMeasurement>> stored = store_->LoadMeasurements(r.job.id);
    ASSERT_TRUE(stored.ok()) << stored.status();
    for (const StoredMeasurement& m : *stored) {  // in evaluation order
      const std::string& key = m.key;
      EXPECT_NE(m.measurement.status, CandidateStatus::kWrongResult)
          << name << " " << key << ": " << m.measurement.message;
      if (m.measurement.ok()) {
        ++ok;
        EXPECT_GE(m.measurement.stats.samples, 3) << name << " " << key;
        EXPECT_GT(m.measurement.conditions.gpu_busy_ms(), 0) << name << " " << key;
        // The clocks are read (NVML comes with the driver), and the job's
        // first sampled candidate is warmed up (at most the default 50 ms,
        // less once the clock reads its highest): the reference's single
        // launch before it does not count as keeping the GPU busy.
        if (nvml_) {
          EXPECT_GT(m.measurement.conditions.sm_clock_mhz_before(), 0) << name << " " << key;
        }
        if (first_sampled && !m.measurement.conditions.final_round()) {  // not re-measured
          EXPECT_GE(m.measurement.conditions.warm_up_ms(), kWarmUpSliceMs) << name << " " << key;
          EXPECT_LE(m.measurement.conditions.warm_up_ms(), 50) << name << " " << key;
          if (!nvml_) {  // no clock to read: the whole warm-up
            EXPECT_EQ(m.measurement.conditions.warm_up_ms(), 50) << name << " " << key;
          }
          std::printf("%-10s first candidate warmed up for %.0f ms, SM clock %d MHz\n",
                      name.c_str(), m.measurement.conditions.warm_up_ms(),
                      m.measurement.conditions.sm_clock_mhz_before());
        }
        first_sampled = false;
      }
      // The toolchain is recorded with every candidate, whatever became of it.
      EXPECT_THAT(m.measurement.conditions.driver(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"))
          << name << " " << key;
      EXPECT_THAT(m.measurement.conditions.nvrtc(), ::testing::MatchesRegex("[0-9]+\\.[0-9]+"))
          << name << " " << key;
    }
    EXPECT_GE(ok, 6) << name;
    std::printf("%-10s best %-16s %.4f ms (%d of 12 ok)\n", name.c_str(), r.best->key.c_str(),
                r.best->measurement.time.count(), ok);
  }
}

// Under a declared load the canary shows the contention, and the load's
// own rates are recorded with every measurement.
TEST_F(GpuTest, UnderLoadRecordsTheCanaryAndTheLoad) {
  const Job job = LoadJob("triad", {{"N", 1 << 24}}, [](v1::JobSpec& spec) {
    v1::LoadProfile* load = spec.mutable_measurement()->mutable_load();
    load->set_kind(v1::LoadProfile::UNDER_LOAD);
    load->set_bandwidth_fraction(0.5);
    load->set_compute_sms(8);
    load->set_h2d_fraction(0.25);
    load->set_d2h_fraction(0.25);
    v1::CompanionKernel* c = load->add_companions();
    c->mutable_kernel()->set_name("scale");
    c->mutable_kernel()->set_code(
        "extern \"C\" __global__ void scale(float* x, int n) {\n"
        "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)"
        " x[i] = x[i] * 0.5f + 1.0f;\n}\n");
    c->mutable_launch()->add_grid("64");
    c->mutable_launch()->add_block("256");
    v1::Argument* x = c->add_arguments();
    x->set_name("x");
    x->set_type(v1::Argument::F32);
    x->mutable_buffer()->set_size("N");
    x->mutable_buffer()->set_direction(v1::Buffer::INOUT);
    v1::Argument* n = c->add_arguments();
    n->set_name("n");
    n->set_type(v1::Argument::I32);
    n->set_scalar("N");
    c->set_intensity(0.5);
  });
  const SessionResult r = Tune(job, "random", 6);
  ASSERT_TRUE(r.best.has_value());
  int ok = 0;
  for (const auto& [key, m] : Measurements(r.job.id)) {
    if (!m.measurement.ok()) continue;
    ++ok;
    const Conditions& c = m.measurement.conditions;
    EXPECT_EQ(c.load(), v1::LoadProfile::UNDER_LOAD) << key;
    EXPECT_GT(c.canary_slowdown(), 1.0) << key;       // a bandwidth load slows a copy
    EXPECT_GT(c.link_canary_slowdown(), 0.0) << key;  // host copies in the load: measured
    EXPECT_GT(c.load_throughput(), 0.0) << key;
    for (const char* rate :
         {"bandwidth_gbs", "compute_tflops", "h2d_gbs", "d2h_gbs", "companion0_per_s"}) {
      ASSERT_EQ(c.load_rates().count(rate), 1u) << key << " " << rate;
      EXPECT_GT(c.load_rates().at(rate), 0.0) << key << " " << rate;
    }
    std::printf("under load %-10s %.4f ms  canary %.2fx  load %.0f%%  %.0f GB/s  %.1f TFLOP/s\n",
                key.c_str(), m.measurement.time.count(), c.canary_slowdown(),
                100 * c.load_throughput(), c.load_rates().at("bandwidth_gbs"),
                c.load_rates().at("compute_tflops"));
  }
  EXPECT_GE(ok, 4);
}

TEST_F(GpuTest, ConcurrentInstancesGiveAThroughput) {
  const Job job = LoadJob("saxpy", {{"N", 1 << 20}}, [](v1::JobSpec& spec) {
    v1::LoadProfile* load = spec.mutable_measurement()->mutable_load();
    load->set_kind(v1::LoadProfile::CONCURRENT);
    load->set_instances(8);
    load->set_streams(4);
  });
  const SessionResult r = Tune(job, "random", 6);
  ASSERT_TRUE(r.best.has_value());
  for (const auto& [key, m] : Measurements(r.job.id)) {
    if (!m.measurement.ok()) continue;
    const Conditions& c = m.measurement.conditions;
    EXPECT_EQ(c.load(), v1::LoadProfile::CONCURRENT);
    EXPECT_EQ(c.instances(), 8);
    EXPECT_EQ(c.streams(), 4);
    EXPECT_NEAR(c.throughput(), 1e3 / m.measurement.time.count(), 1e-6 * c.throughput());
  }
}

TEST_F(GpuTest, PipelineJobsVerifyAndReportTheirStages) {
  const Job job = LoadJob("pipeline", {{"N", 1 << 24}});
  const SessionResult r = Tune(job, "random", 8);
  ASSERT_TRUE(r.best.has_value());
  int ok = 0;
  for (const auto& [key, m] : Measurements(r.job.id)) {
    EXPECT_NE(m.measurement.status, CandidateStatus::kWrongResult) << key << m.measurement.message;
    if (!m.measurement.ok()) continue;
    ++ok;
    const Conditions& c = m.measurement.conditions;
    EXPECT_GT(c.h2d_ms(), 0) << key;
    EXPECT_GT(c.kernel_ms(), 0) << key;
    EXPECT_GT(c.d2h_ms(), 0) << key;
    EXPECT_GT(c.overlap(), 0) << key;
    EXPECT_NEAR(c.throughput(), 2.0 * 4 * (1 << 24) / (m.measurement.time.count() * 1e-3),
                1e-6 * c.throughput());
    std::printf("pipeline %-12s %.3f ms  %.1f GB/s  overlap %.2fx\n", key.c_str(),
                m.measurement.time.count(), c.throughput() / 1e9, c.overlap());
  }
  EXPECT_GE(ok, 6);
  // A kernel that writes the wrong values is caught end to end.
  const Job wrong = LoadJob("pipeline", {{"N", 1 << 22}}, [](v1::JobSpec& spec) {
    // The kernel, wrong for one block size.
    absl::StatusOr<std::string> src = ReadFileContents(KernelDir() + "/pipeline.cu");
    ASSERT_TRUE(src.ok());
    const std::string good = "out[i] = v;";
    const std::size_t at = src->find(good);
    ASSERT_NE(at, std::string::npos);
    src->replace(at, good.size(), "out[i] = v + (block_size_x == 512 ? 0.5f : 0.0f);");
    spec.mutable_kernel()->set_code(*src);
    spec.add_constraints("streams == 1 && chunk_mib >= 32");  // the reference among them
  });
  const SessionResult w = Tune(wrong, "brute_force", 0);
  int bad = 0;
  for (const auto& [key, m] : Measurements(w.job.id)) {
    if (m.measurement.status == CandidateStatus::kWrongResult) {
      ++bad;
      EXPECT_THAT(m.measurement.message, HasSubstr("pipeline's output differ")) << key;
    }
  }
  EXPECT_GT(bad, 0);
}

// A pipeline measured UNDER_LOAD: host-link copy traffic of the load shares
// the copy engines and the link with the pipeline's own copies.
TEST_F(GpuTest, PipelineUnderLoadSharesTheLinkWithTheLoad) {
  auto pinned_only = [](v1::JobSpec& spec) { spec.add_constraints("pinned == 1"); };
  const Job isolated = LoadJob("pipeline", {{"N", 1 << 24}}, pinned_only);
  const Job loaded = LoadJob("pipeline", {{"N", 1 << 24}}, [&](v1::JobSpec& spec) {
    pinned_only(spec);
    v1::LoadProfile* load = spec.mutable_measurement()->mutable_load();
    load->set_kind(v1::LoadProfile::UNDER_LOAD);
    load->set_bandwidth_fraction(0.5);
    load->set_h2d_fraction(0.5);
    load->set_d2h_fraction(0.5);
  });
  const SessionResult a = Tune(isolated, "random", 6);
  const SessionResult b = Tune(loaded, "random", 6);  // the same seed: the same configurations
  ASSERT_TRUE(a.best.has_value());
  ASSERT_TRUE(b.best.has_value());
  std::map<std::string, double> alone;
  for (const auto& [key, m] : Measurements(a.job.id)) {
    if (m.measurement.ok()) alone[key] = m.measurement.time.count();
  }
  int compared = 0, slower = 0;
  for (const auto& [key, m] : Measurements(b.job.id)) {
    ASSERT_TRUE(m.measurement.ok()) << key << ": " << m.measurement.message;
    const Conditions& c = m.measurement.conditions;
    EXPECT_EQ(c.load(), v1::LoadProfile::UNDER_LOAD) << key;
    EXPECT_GT(c.canary_slowdown(), 1.0) << key;
    EXPECT_GT(c.link_canary_slowdown(), 1.0) << key;  // half the link taken each way
    EXPECT_GT(c.load_throughput(), 0.0) << key;
    for (const char* rate : {"bandwidth_gbs", "h2d_gbs", "d2h_gbs"}) {
      ASSERT_EQ(c.load_rates().count(rate), 1u) << key << " " << rate;
      EXPECT_GT(c.load_rates().at(rate), 0.0) << key << " " << rate;
    }
    EXPECT_GT(c.h2d_ms(), 0) << key;
    EXPECT_GT(c.overlap(), 0) << key;
    if (!alone.count(key)) continue;
    ++compared;
    slower += m.measurement.time.count() > alone[key];
    std::printf(
        "pipeline %-12s alone %.3f ms, under load %.3f ms (%.2fx)  canary %.2fx  link canary "
        "%.2fx  load %.0f%%  h2d %.1f GB/s  d2h %.1f GB/s\n",
        key.c_str(), alone[key], m.measurement.time.count(),
        m.measurement.time.count() / alone[key], c.canary_slowdown(), c.link_canary_slowdown(),
        100 * c.load_throughput(), c.load_rates().at("h2d_gbs"), c.load_rates().at("d2h_gbs"));
  }
  EXPECT_GE(compared, 4);
  EXPECT_EQ(slower, compared);  // half the link taken each way slows every pinned pipeline
}

// Seeded noise, constants and sequences are made on the GPU: a kernel that
// copies such an input to an output matches, with no tolerance, the bytes
// FillRange makes on the host for the same argument.
TEST_F(GpuTest, ArgumentsFilledOnTheGpuHoldTheHostsValues) {
  constexpr std::int64_t kElements = 100003;
  const std::pair<const char*, v1::ElementType> types[] = {
      {"F16", v1::ELEMENT_F16}, {"BF16", v1::ELEMENT_BF16}, {"F32", v1::ELEMENT_F32},
      {"F64", v1::ELEMENT_F64}, {"I8", v1::ELEMENT_I8},     {"I16", v1::ELEMENT_I16},
      {"I32", v1::ELEMENT_I32}, {"I64", v1::ELEMENT_I64},   {"U8", v1::ELEMENT_U8},
      {"U16", v1::ELEMENT_U16}, {"U32", v1::ELEMENT_U32},   {"U64", v1::ELEMENT_U64}};
  int checked = 0;
  for (const auto& [type_name, type] : types) {
    const bool is_unsigned = type_name[0] == 'U';
    const double low = is_unsigned ? 0 : -100;
    for (int mode = 0; mode < 3; ++mode) {
      v1::WorkerBuffer host;
      host.set_name("x");
      host.set_type(type);
      host.set_elements(kElements);
      std::string init;
      if (mode == 0) {
        host.mutable_uniform()->set_low(low);
        host.mutable_uniform()->set_high(low + 200);
        host.mutable_uniform()->set_seed(11);
        init = StrCat("\"uniform\": {\"low\": ", low, ", \"high\": ", low + 200, ", \"seed\": 11}");
      } else if (mode == 1) {
        host.set_constant(2.75);
        init = "\"constant\": 2.75";
      } else {
        host.mutable_iota()->set_start(low);
        host.mutable_iota()->set_step(0.00199);
        init = StrCat("\"iota\": {\"start\": ", low, ", \"step\": 0.00199}");
      }
      std::string bytes(static_cast<std::size_t>(kElements) * ElementBytes(type), '\0');
      ASSERT_TRUE(FillRange(host, 0, kElements, bytes.data(), 1).ok());
      const std::string expected = tmp_.File(StrCat("expected_", type_name, mode));
      ASSERT_TRUE(WriteFileAtomically(expected, bytes).ok());
      const std::string json =
          StrCat(R"j({
        "kernel": {"name": "copy", "code": "extern \"C\" __global__ void copy(const unsigned char* x, unsigned char* y, long long n) { for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) y[i] = x[i]; }"},
        "parameters": [{"name": "block_size_x", "ints": [128, 256]}],
        "problem": {"N": )j",
                 kElements, R"j(},
        "launch": {"grid": ["ceil_div(N, block_size_x)"]},
        "arguments": [
          {"name": "x", "type": ")j",
                 type_name, R"j(", "buffer": {"size": "N", )j", init, R"j(}},
          {"name": "y", "type": ")j",
                 type_name, R"j(", "buffer": {"size": "N", "direction": "OUTPUT"}},
          {"name": "n", "type": "I64", "scalar": ")j",
                 bytes.size(), R"j("}
        ],
        "verification": {"expectedData": {"files": {"y": ")j",
                 expected, R"j("}}, "atol": 0, "rtol": 0}
      })j");
      absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(json, "fill.json");
      ASSERT_TRUE(spec.ok()) << spec.status();
      absl::StatusOr<Job> job = ResolveJob(*spec, tmp_.path());
      ASSERT_TRUE(job.ok()) << job.status();
      const SessionResult r = Tune(*job, "brute_force");
      for (const auto& [key, m] : Measurements(r.job.id)) {
        EXPECT_EQ(m.measurement.status, CandidateStatus::kOk)
            << type_name << " mode " << mode << " " << key << ": " << m.measurement.message;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12 * 3 * 2);
}

// A 2D convolution whose filter is a `constant` argument, in constant
// memory: it tunes and verifies against a reference kernel that reads the
// same __constant__ array.
TEST_F(GpuTest, AConstantMemoryFilterTunesAndVerifies) {
  const Job job = LoadJob("convolution_cmem", {{"W", 1024}, {"H", 1024}});
  const SessionResult r = Tune(job, "random", 12);
  EXPECT_EQ(r.progress.evaluations, 12);
  int ok = 0;
  for (const auto& [key, m] : Measurements(r.job.id)) {
    EXPECT_TRUE(m.measurement.ok() || m.measurement.status == CandidateStatus::kLaunchError)
        << key << ": " << CandidateStatusName(m.measurement.status) << " " << m.measurement.message;
    ok += m.measurement.ok() ? 1 : 0;
  }
  EXPECT_GE(ok, 10);
  ASSERT_TRUE(r.best.has_value());
  std::printf("convolution_cmem 1024^2, 17x17: best %s %.4f ms (%d of 12 ok)\n",
              r.best->key.c_str(), r.best->measurement.time.count(), ok);
}

// Regression (the H200's five-minute run of sgemm_large, 108 launch
// errors): a configuration asking for exactly 48 KiB of dynamic shared
// memory, in a kernel with a static shared variable too (split-K's flag),
// needs the opt-in past 48 KiB in all; it launches and verifies.
TEST_F(GpuTest, FortyEightKiBOfDynamicSharedMemoryBesideStaticLaunches) {
  const Job job =
      LoadJob("sgemm_large", {{"M", 1024}, {"N", 1024}, {"K", 1024}}, [](v1::JobSpec& spec) {
        const std::map<std::string, std::int64_t> one = {
            {"BM", 256}, {"BN", 64}, {"BK", 16},    {"WM", 128}, {"WN", 32},    {"WNITER", 1},
            {"TM", 4},   {"TN", 4},  {"STAGES", 2}, {"VEC", 4},  {"SPLITK", 4}, {"UNROLL", 8}};
        for (v1::Parameter& p : *spec.mutable_parameters()) {
          p.mutable_ints()->Clear();
          p.mutable_ints()->Add(one.at(p.name()));
        }
      });
  const SessionResult r = Tune(job, "brute_force");
  ASSERT_EQ(r.progress.evaluations, 1);
  for (const auto& [key, m] : Measurements(r.job.id)) {
    EXPECT_TRUE(m.measurement.ok())
        << key << ": " << CandidateStatusName(m.measurement.status) << " " << m.measurement.message;
    EXPECT_GT(m.measurement.conditions.static_shared_bytes(), 0);
  }
}

// The constant's contents reach the kernel (a job whose expected output
// the host computed: an unfilled __constant__ reads zeros), and a constant
// of another size than the kernel's variable is a launch error naming it.
TEST_F(GpuTest, ConstantArgumentsReachTheKernelOrSayWhyNot) {
  constexpr int kW = 40, kH = 24, kF = 5;
  constexpr std::size_t kInW = kW + kF - 1, kInH = kH + kF - 1;
  std::vector<float> in(kInW * kInH);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);
  std::vector<float> expected(std::size_t{kW} * kH);
  for (std::size_t y = 0; y < kH; ++y) {
    for (std::size_t x = 0; x < kW; ++x) {
      float sum = 0;
      for (std::size_t j = 0; j < kF; ++j) {
        for (std::size_t i = 0; i < kF; ++i) sum += in[(y + j) * kInW + x + i] * 0.25f;
      }
      expected[y * kW + x] = sum;
    }
  }
  const std::string in_file = tmp_.File("in.f32"), out_file = tmp_.File("out.f32");
  ASSERT_TRUE(WriteFileAtomically(in_file, std::string(reinterpret_cast<const char*>(in.data()),
                                                       in.size() * sizeof(float)))
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomically(out_file, std::string(reinterpret_cast<const char*>(expected.data()),
                                                expected.size() * sizeof(float)))
          .ok());
  auto edit = [&](const std::string& filter_size) {
    return [&, filter_size](v1::JobSpec& spec) {
      (*spec.mutable_kernel()->mutable_defines())["FW"] = std::to_string(kF);
      (*spec.mutable_kernel()->mutable_defines())["FH"] = std::to_string(kF);
      (*spec.mutable_problem())["FW"] = kF;
      (*spec.mutable_problem())["FH"] = kF;
      spec.mutable_arguments(1)->mutable_buffer()->set_file(in_file);
      v1::Buffer* filter = spec.mutable_arguments(2)->mutable_constant();
      filter->set_constant(0.25);
      filter->set_size(filter_size);
      spec.mutable_verification()->clear_reference_kernel();
      (*spec.mutable_verification()->mutable_expected_data()->mutable_files())["out"] = out_file;
    };
  };
  const Job job = LoadJob("convolution_cmem", {{"W", kW}, {"H", kH}}, edit("FW * FH"));
  const SessionResult r = Tune(job, "random", 6);
  for (const auto& [key, m] : Measurements(r.job.id)) {
    EXPECT_TRUE(m.measurement.ok())
        << key << ": " << CandidateStatusName(m.measurement.status) << " " << m.measurement.message;
  }
  const Job wrong = LoadJob("convolution_cmem", {{"W", kW}, {"H", kH}}, edit("FW * FH + 1"));
  const SessionResult w = Tune(wrong, "random", 3);
  for (const auto& [key, m] : Measurements(w.job.id)) {
    EXPECT_EQ(m.measurement.status, CandidateStatus::kLaunchError) << key;
    EXPECT_THAT(m.measurement.message,
                HasSubstr("the kernel's __constant__ 'filter' holds 100 bytes; the argument "
                          "gives 104"))
        << key;
  }
}

// Energy through NVML: every candidate of a GFLOP/J objective has its
// energy per launch and power, read from the energy counter over a window
// of at least 20 of its updates, and the objective is computed from them.
TEST_F(GpuTest, EnergyIsMeasuredForEachCandidate) {
  const Job job = LoadJob("sgemm", {{"M", 2048}, {"N", 2048}, {"K", 2048}}, [](v1::JobSpec& spec) {
    spec.mutable_objective()->set_expression("2.0 * M * N * K / energy_j / 1e9");
    spec.mutable_objective()->set_name("GFLOP/J");
    spec.mutable_measurement()->mutable_energy_window()->set_nanos(300000000);
  });
  ASSERT_TRUE(job.spec.measurement().energy());
  const SessionResult r = Tune(job, "random", 4);
  int ok = 0;
  for (const auto& [key, m] : Measurements(r.job.id)) {
    if (!m.measurement.ok()) continue;
    ++ok;
    const v1::Conditions& c = m.measurement.conditions;
    EXPECT_GT(c.power_w(), 20) << key;
    EXPECT_LT(c.power_w(), 2000) << key;
    EXPECT_NEAR(c.energy_j(), c.power_w() * m.measurement.stats.median.count() / 1e3,
                1e-9 + 0.02 * c.energy_j())
        << key;
    EXPECT_GE(c.energy_window_ms(), 300) << key;
    if (c.energy_method() == "energy counter") {
      EXPECT_GE(c.energy_updates(), 20) << key;
    }
    ASSERT_TRUE(m.objective.has_value()) << key;
    EXPECT_NEAR(*m.objective, 2.0 * 2048 * 2048 * 2048 / c.energy_j() / 1e9, 1e-6 * *m.objective)
        << key;
    std::printf(
        "sgemm 2048^3 %-12s %.3f ms, %.1f W, %.4f J, %.1f GFLOP/J (%s, %d updates in %.0f ms)\n",
        key.c_str(), m.measurement.time.count(), c.power_w(), c.energy_j(), *m.objective,
        c.energy_method().c_str(), c.energy_updates(), c.energy_window_ms());
  }
  EXPECT_GE(ok, 3);
}

// rotateInputs: a read-only input smaller than the L2 gets copies taken in
// turn, so no launch reads it warm from the launch before; results still
// verify, and the measurement says how many copies there were.
TEST_F(GpuTest, RotatedInputsVerifyAndSayHowManyCopies) {
  const std::string json = R"j({
    "kernel": {"name": "scale", "code": "extern \"C\" __global__ void scale(const float* x, float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }"},
    "parameters": [{"name": "block_size_x", "ints": [128, 256, 512]}],
    "problem": {"N": 2097152},
    "launch": {"grid": ["ceil_div(N, block_size_x)"]},
    "arguments": [
      {"name": "x", "type": "F32", "buffer": {"size": "N"}},
      {"name": "y", "type": "F32", "buffer": {"size": "N", "direction": "OUTPUT"}},
      {"name": "n", "type": "I32", "scalar": "N"}
    ],
    "verification": {"referenceConfig": "128"}
  })j";
  double median[2] = {0, 0};
  for (int rotate = 0; rotate < 2; ++rotate) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(json, "scale.json");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->mutable_measurement()->set_rotate_inputs(rotate == 1);
    absl::StatusOr<Job> job = ResolveJob(*spec, tmp_.path());
    ASSERT_TRUE(job.ok()) << job.status();
    const SessionResult r = Tune(*job, "brute_force");
    ASSERT_TRUE(r.best.has_value());
    for (const auto& [key, m] : Measurements(r.job.id)) {
      EXPECT_EQ(m.measurement.status, CandidateStatus::kOk) << key << ": " << m.measurement.message;
      // 8 MiB of input: copies until the others span twice the L2.
      if (rotate == 1) {
        EXPECT_GT(m.measurement.conditions.input_copies(), 1) << key;
      } else {
        EXPECT_LE(m.measurement.conditions.input_copies(), 1) << key;
      }
    }
    median[rotate] = r.best->measurement.time.count();
  }
  std::printf(
      "scale, 8 MiB in and out: best %.4f ms reading warm inputs, %.4f ms rotated (%.2fx)\n",
      median[0], median[1], median[1] / median[0]);
  // Rotated, the input comes from memory, not from the L2 the launch before
  // filled (1.46x slower on the H200; a GPU-time ratio, taken side by side):
  // without rotation the two would be the same.
  EXPECT_GT(median[1], 1.1 * median[0]);
}

TEST_F(GpuTest, AJobSpreadsOverTwoGpus) {
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(Program());
  ASSERT_TRUE(gpus.ok());
  if (gpus->size() < 2) GTEST_SKIP() << "one GPU";
  OpenDeviceOptions o;
  o.worker_program = Program().path;
  absl::StatusOr<std::unique_ptr<Device>> group = OpenDevice("0,1", o);
  ASSERT_TRUE(group.ok()) << group.status();
  const Job job = LoadJob("saxpy", {{"N", 1 << 22}});
  StrategyOptions so;
  auto s = MakeStrategy("brute_force", *job.space, so);
  ASSERT_TRUE(s.ok());
  Session session(job, **group, **s, "brute_force");
  absl::StatusOr<SessionResult> r = session.Run(*store_);
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<std::string, int> per_device;
  for (const auto& [key, m] : Measurements(r->job.id)) {
    EXPECT_NE(m.measurement.status, CandidateStatus::kWrongResult) << key;
    ++per_device[m.measurement.conditions.device()];
  }
  EXPECT_GT(per_device["cuda:0"], 0);
  EXPECT_GT(per_device["cuda:1"], 0);
}

}  // namespace
}  // namespace ktune
