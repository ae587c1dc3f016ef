// NVRTC runs without a GPU, so compilation is tested everywhere the CUDA
// toolkit is installed (the tests skip where it is not).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_join.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/rng.h"
#include "tuner/compile/compile_pool.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/cuda/driver.h"
#include "tuner/cuda/fill.h"
#include "tuner/device/cuda_device.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/ipc/worker_protocol.h"
#include "tuner/measure/helper_kernels.h"
#include "tuner/measure/measure_worker.h"
#include "tuner/session/job.h"

// LeakSanitizer (clang 14) crashes as this program exits under ctest: its
// tracer reads a dynamic TLS entry that NVRTC, loaded with dlopen, leaves
// in glibc 2.36's thread vector ("DTLS 10 at 0x000000000acf-...", then
// "Tracer caught signal 11"), after every test passed. Not scanning TLS
// (use_tls=0) reports NVRTC's allocations held there as leaks, so under
// AddressSanitizer this program's leak check is off; its memory checks
// stay.
// NOLINTNEXTLINE(bugprone-reserved-identifier): the name AddressSanitizer looks up.
extern "C" const char* __asan_default_options();
// NOLINTNEXTLINE(bugprone-reserved-identifier)
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }

namespace ktune {
namespace {

using ::testing::HasSubstr;

// Every CUDA handle has exactly one move-only owner.
static_assert(std::is_nothrow_move_constructible_v<cuda::Module>);
static_assert(!std::is_copy_constructible_v<cuda::Module>);
static_assert(std::is_nothrow_move_constructible_v<cuda::Stream>);
static_assert(!std::is_copy_constructible_v<cuda::Stream>);
static_assert(std::is_nothrow_move_constructible_v<cuda::Event>);
static_assert(!std::is_copy_assignable_v<cuda::Event>);
static_assert(std::is_nothrow_move_constructible_v<cuda::DeviceMemory>);
static_assert(!std::is_copy_constructible_v<cuda::DeviceMemory>);
static_assert(std::is_nothrow_move_constructible_v<cuda::PinnedMemory>);
static_assert(!std::is_copy_constructible_v<cuda::PinnedMemory>);
static_assert(std::is_nothrow_move_constructible_v<cuda::Context>);
static_assert(!std::is_copy_constructible_v<cuda::Context>);
static_assert(!std::is_copy_constructible_v<CompilePool>);

const Nvrtc* NvrtcOrSkip() {
  absl::StatusOr<const Nvrtc*> n = Nvrtc::Get();
  return n.ok() ? *n : nullptr;
}

#define SKIP_WITHOUT_NVRTC()          \
  const Nvrtc* nvrtc = NvrtcOrSkip(); \
  if (nvrtc == nullptr) GTEST_SKIP() << "NVRTC is not installed"

v1::CompileRequest Saxpy(int block, int tile) {
  v1::CompileRequest r;
  r.set_source(
      "extern \"C\" __global__ void saxpy(float* y, const float* x, float a, int n) {\n"
      "  int i = blockIdx.x * (block_size_x * tile) + threadIdx.x;\n"
      "  for (int t = 0; t < tile; ++t, i += block_size_x) if (i < n) y[i] = a * x[i] + y[i];\n"
      "}\n");
  r.set_kernel_expression("saxpy");
  r.set_is_name_expression(true);
  r.set_architecture("sm_90");
  r.add_options("-Dblock_size_x=" + std::to_string(block));
  r.add_options("-Dtile=" + std::to_string(tile));
  return r;
}

TEST(NvrtcTest, CompilesToCubinForTheExactArchitecture) {
  SKIP_WITHOUT_NVRTC();
  const std::vector<int>& archs = nvrtc->supported_archs();
  ASSERT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
  const v1::CompileResult r = nvrtc->Compile(Saxpy(128, 4));
  ASSERT_TRUE(r.ok()) << r.log() << r.error();
  EXPECT_EQ(r.lowered_name(), "saxpy");
  // A CUBIN is an ELF image, not PTX text.
  ASSERT_GT(r.cubin().size(), 4u);
  EXPECT_EQ(r.cubin().substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_GT(r.compile_ms(), 0);
}

TEST(NvrtcTest, ACompileErrorIsAResultWithTheLog) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileRequest r = Saxpy(128, 4);
  r.set_source(r.source() + "\nthis is not CUDA;\n");
  const v1::CompileResult out = nvrtc->Compile(r);
  EXPECT_FALSE(out.ok());
  EXPECT_TRUE(out.error().empty());  // not an infrastructure failure
  EXPECT_THAT(out.log(), HasSubstr("error"));
  EXPECT_THAT(out.log(), HasSubstr("kernel.cu(6)"));
}

// A kernel that needs what -minimal leaves out (the runtime's texture
// types).
v1::CompileRequest Texture(int block) {
  v1::CompileRequest r;
  r.set_source(
      "extern \"C\" __global__ void fetch(cudaTextureObject_t t, float* y) {\n"
      "  y[threadIdx.x] = tex1Dfetch<float>(t, blockIdx.x * block + threadIdx.x);\n"
      "}\n");
  r.set_kernel_expression("fetch");
  r.set_architecture("sm_90");
  r.add_options("-Dblock=" + std::to_string(block));
  return r;
}

TEST(NvrtcTest, MinimalGivesTheSameImageAndFallsBackWhenTheSourceNeedsMore) {
  SKIP_WITHOUT_NVRTC();
  if (!nvrtc->has_minimal())
    GTEST_SKIP() << "NVRTC " << nvrtc->version_text() << " has no -minimal";
  v1::CompileRequest plain = Saxpy(128, 4);
  v1::CompileRequest minimal = plain;
  minimal.set_try_minimal(true);
  const v1::CompileResult a = nvrtc->Compile(plain);
  const v1::CompileResult b = nvrtc->Compile(minimal);
  ASSERT_TRUE(a.ok() && b.ok()) << a.log() << b.log();
  EXPECT_EQ(a.cubin(), b.cubin());
  EXPECT_FALSE(b.minimal_refused());

  v1::CompileRequest texture = Texture(64);
  texture.set_try_minimal(true);
  const v1::CompileResult t = nvrtc->Compile(texture);
  ASSERT_TRUE(t.ok()) << t.log();
  EXPECT_TRUE(t.minimal_refused());

  // A real error fails both ways and shows the full compiler's log.
  v1::CompileRequest broken = minimal;
  broken.set_source(broken.source() + "\nthis is not CUDA;\n");
  const v1::CompileResult e = nvrtc->Compile(broken);
  EXPECT_FALSE(e.ok());
  EXPECT_FALSE(e.minimal_refused());
  EXPECT_THAT(e.log(), HasSubstr("kernel.cu(6)"));
}

TEST(NvrtcTest, TemplatesThroughNameExpressions) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileRequest r;
  r.set_source(
      "template <int B, bool F> __global__ void k(float* y) { if (F) y[threadIdx.x] = B; }\n");
  r.set_kernel_expression("k<128, true>");
  r.set_is_name_expression(true);
  r.set_architecture("sm_90");
  const v1::CompileResult out = nvrtc->Compile(r);
  ASSERT_TRUE(out.ok()) << out.log();
  EXPECT_EQ(out.lowered_name().substr(0, 4), "_Z1k");
}

TEST(NvrtcTest, RefusesArchitecturesItCannotTarget) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileRequest r = Saxpy(64, 1);
  r.set_architecture("sm_10");
  const v1::CompileResult out = nvrtc->Compile(r);
  EXPECT_FALSE(out.ok());
  EXPECT_THAT(out.log(), HasSubstr("cannot produce CUBIN for 'sm_10'"));
  EXPECT_EQ(ParseArchitecture("sm_90"), 90);
  EXPECT_EQ(ParseArchitecture("compute_90"), -1);
}

// Compile workers as ktune starts them: ktune-worker, installed beside it,
// told this build's worker protocol.
CompilePoolOptions PoolOptions(const std::string& cache) {
  CompilePoolOptions o;
  o.worker_argv = WorkerProgram{KTUNE_WORKER_PATH}.Argv("compile");
  o.workers = 2;
  o.cache_dir = cache;
  o.nvrtc_version = NvrtcOrSkip()->version_text();
  return o;
}

TEST(CompilePoolTest, WorkersCompileAndTheCacheAnswersRepeats) {
  SKIP_WITHOUT_NVRTC();
  const testing::TempDir tmp;
  {
    absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(PoolOptions(tmp.path()));
    ASSERT_TRUE(pool.ok()) << pool.status();
    std::vector<std::shared_future<v1::CompileResult>> futures;
    for (int block : {32, 64, 128, 256}) {
      for (int tile : {1, 2}) futures.push_back((*pool)->Submit(Saxpy(block, tile)));
    }
    futures.push_back((*pool)->Submit(Saxpy(32, 1)));  // in flight or cached: not compiled twice
    for (auto& f : futures) ASSERT_TRUE(f.get().ok()) << f.get().log() << f.get().error();
    EXPECT_EQ((*pool)->compiled(), 8);
    EXPECT_EQ((*pool)->cache_hits(), 1);
  }
  // A new pool over the same folder compiles nothing.
  absl::StatusOr<std::unique_ptr<CompilePool>> again = CompilePool::Start(PoolOptions(tmp.path()));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->Submit(Saxpy(128, 2)).get().ok());
  EXPECT_EQ((*again)->compiled(), 0);
  EXPECT_EQ((*again)->cache_hits(), 1);
}

TEST(CompilePoolTest, KtuneRunsItsOwnWorkersWhereKtuneWorkerIsMissing) {
  SKIP_WITHOUT_NVRTC();
  CompilePoolOptions o = PoolOptions("");
  o.worker_argv = {KTUNE_CLI_PATH, "__worker", "compile"};
  o.workers = 1;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const v1::CompileResult out = (*pool)->Submit(Saxpy(64, 2)).get();
  EXPECT_TRUE(out.ok()) << out.log() << out.error();
  EXPECT_EQ((*pool)->compiled(), 1);
}

TEST(CompilePoolTest, KtuneWorkerFromAnotherBuildRefusesToRun) {
  // A parent naming another worker protocol: the worker exits with 3
  // before reading a request (this build's: every pool test here).
  absl::StatusOr<Subprocess> other = Subprocess::Start(
      {KTUNE_WORKER_PATH, "__worker", "compile", "--protocol", "0123456789abcdef"});
  ASSERT_TRUE(other.ok()) << other.status();
  v1::CompileResult ignored;
  EXPECT_EQ(other->channel()
                .Receive(&ignored, std::chrono::steady_clock::now() + std::chrono::seconds(30))
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(other->Kill(), "exit code 3");
}

TEST(KtuneWorkerTest, RunByHandItSaysWhatItIsFor) {
  // Installed beside ktune (or in libexec), the worker processes' program
  // answers someone who runs it by hand with a line saying what starts it,
  // rather than a worker waiting on a terminal.
  const testing::TempDir tmp;
  const std::string out = tmp.File("stdout"), err = tmp.File("stderr");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{}, {"tune", "sgemm.json"}, {"--help"}}) {
    EXPECT_EQ(testing::WaitExit(testing::Spawn(KTUNE_WORKER_PATH, args, out, err)), 2)
        << absl::StrJoin(args, " ");
    EXPECT_EQ(testing::Slurp(out), "");
    EXPECT_THAT(testing::Slurp(err),
                HasSubstr("ktune-worker: runs the worker processes of ktune and ktuned"))
        << absl::StrJoin(args, " ");
  }
  // A worker this build does not have is named.
  for (const char* kind : {"search", ""}) {
    EXPECT_EQ(testing::WaitExit(testing::Spawn(KTUNE_WORKER_PATH, {"__worker", kind}, out, err)),
              1);
    EXPECT_THAT(testing::Slurp(err),
                HasSubstr("ktune-worker: unknown worker \"" + std::string(kind) + "\""));
  }
}

TEST(CompilePoolTest, ASourceThatNeedsTheFullFrontEndGetsItForLaterVariants) {
  SKIP_WITHOUT_NVRTC();
  if (!nvrtc->has_minimal())
    GTEST_SKIP() << "NVRTC " << nvrtc->version_text() << " has no -minimal";
  CompilePoolOptions o = PoolOptions("");
  o.workers = 1;
  o.start_warm = true;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(o);
  ASSERT_TRUE(pool.ok());
  const v1::CompileResult first = (*pool)->Submit(Texture(32)).get();
  ASSERT_TRUE(first.ok()) << first.log() << first.error();
  EXPECT_TRUE(first.minimal_refused());
  // Remembered: the next variant goes straight to the full compile.
  const v1::CompileResult second = (*pool)->Submit(Texture(64)).get();
  ASSERT_TRUE(second.ok()) << second.log();
  EXPECT_FALSE(second.minimal_refused());
  EXPECT_TRUE((*pool)->Submit(Saxpy(64, 2)).get().ok());
}

TEST(CompilePoolTest, ACompileOverItsTimeLimitIsAFailedCandidate) {
  SKIP_WITHOUT_NVRTC();
  CompilePoolOptions o = PoolOptions("");
  o.timeout = std::chrono::milliseconds(1);
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(o);
  ASSERT_TRUE(pool.ok());
  const v1::CompileResult r = (*pool)->Submit(Saxpy(128, 4)).get();
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.error().empty());
  EXPECT_THAT(r.log(), HasSubstr("time limit"));
}

// Every shipped kernel compiles the way the CUDA device asks for it (the
// fault kernel's mode 4 is meant to fail).
TEST(KernelLibraryTest, EveryConfigurationCompiles) {
  SKIP_WITHOUT_NVRTC();
  const std::string dir = std::string(KTUNE_SOURCE_DIR) + "/kernels";
  const testing::TempDir tmp;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(PoolOptions(tmp.path()));
  ASSERT_TRUE(pool.ok());
  int checked = 0;
  for (const char* name : {"saxpy", "sgemm", "reduction", "transpose", "faults"}) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(dir + "/" + name + ".json");
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<Job> job = ResolveJob(*spec, dir);
    ASSERT_TRUE(job.ok()) << job.status();
    std::vector<std::pair<std::string, std::shared_future<v1::CompileResult>>> futures;
    Space::Enumerator e = job->space->Enumerate();
    Config c;
    int n = 0;
    while (e.Next(&c)) {
      // Every 7th configuration keeps the test short on two cores.
      if (n++ % 7 != 0 && std::string(name) != "faults") continue;
      futures.emplace_back(job->space->Key(c),
                           (*pool)->Submit(BuildCompileRequest(job->spec, job->source, dir,
                                                               *job->space, c, "sm_90")));
    }
    for (auto& [key, f] : futures) {
      const v1::CompileResult& r = f.get();
      ASSERT_TRUE(r.error().empty()) << r.error();
      const bool should_fail = std::string(name) == "faults" && key.rfind("4,", 0) == 0;
      EXPECT_EQ(r.ok(), !should_fail) << name << " " << key << "\n" << r.log();
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

// The large SGEMM space is sampled (it has 159,516 configurations): every
// sampled one compiles, among them every pipeline depth, vector width and
// split; the other kernels of the library are above.
TEST(KernelLibraryTest, SampledConfigurationsOfTheLargeSgemmCompile) {
  SKIP_WITHOUT_NVRTC();
  const std::string dir = std::string(KTUNE_SOURCE_DIR) + "/kernels";
  const testing::TempDir tmp;
  absl::StatusOr<std::unique_ptr<CompilePool>> pool = CompilePool::Start(PoolOptions(tmp.path()));
  ASSERT_TRUE(pool.ok());
  for (const char* name : {"sgemm_large", "convolution_cmem"}) {
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(dir + "/" + name + ".json");
    ASSERT_TRUE(spec.ok()) << spec.status();
    absl::StatusOr<Job> job = ResolveJob(*spec, dir);
    ASSERT_TRUE(job.ok()) << job.status();
    if (std::string(name) == "sgemm_large") {
      const SpaceCount count = job->space->Count();
      EXPECT_TRUE(count.exact);
      EXPECT_EQ(static_cast<std::uint64_t>(count.count), 159516u);
    }
    Rng rng(7);
    std::set<std::string> seen;
    std::vector<std::pair<std::string, std::shared_future<v1::CompileResult>>> futures;
    while (futures.size() < 10) {
      std::optional<Config> c = job->space->Sample(rng);
      ASSERT_TRUE(c.has_value());
      if (!seen.insert(job->space->Key(*c)).second) continue;
      futures.emplace_back(job->space->Key(*c),
                           (*pool)->Submit(BuildCompileRequest(job->spec, job->source, dir,
                                                               *job->space, *c, "sm_90")));
    }
    for (auto& [key, f] : futures) {
      const v1::CompileResult& r = f.get();
      ASSERT_TRUE(r.error().empty()) << r.error();
      EXPECT_TRUE(r.ok()) << name << " " << key << "\n" << r.log();
    }
  }
}

TEST(NvrtcTest, TheMeasurementWorkersOwnKernelsCompile) {
  SKIP_WITHOUT_NVRTC();
  v1::CompileRequest r;
  r.set_source(MeasureHelperSource());
  r.set_kernel_expression("ktune_spin");
  r.set_architecture("sm_90");
  r.add_options("-std=c++17");
  const v1::CompileResult out = nvrtc->Compile(r);
  EXPECT_TRUE(out.ok()) << out.log();
}

TEST(BuildCompileRequestTest, ParametersBecomeMacrosOrTemplateArguments) {
  v1::JobSpec spec;
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->add_compiler_options("-use_fast_math");
  spec.mutable_kernel()->add_include_paths("include");
  (*spec.mutable_kernel()->mutable_defines())["EXTRA"] = "7";
  Parameter b{"bs", ValueType::kInt, {Value(std::int64_t{64})}};
  Parameter f{"flag", ValueType::kBool, {Value(true)}};
  Parameter s{"T", ValueType::kString, {Value(std::string("float"))}};
  absl::StatusOr<Space> space = Space::Product({b, f, s}, {});
  ASSERT_TRUE(space.ok());
  const Config c{{0, 0, 0}};
  v1::CompileRequest r = BuildCompileRequest(spec, "src", "/jobs", *space, c, "sm_90");
  EXPECT_EQ(r.kernel_expression(), "k");
  const std::vector<std::string> options(r.options().begin(), r.options().end());
  EXPECT_EQ(options,
            (std::vector<std::string>{"-use_fast_math", "--std=c++17", "-I/jobs/include"}));
  EXPECT_EQ(r.source(),
            "#define EXTRA 7\n#define bs 64\n#define flag 1\n#define T float\n"
            "#line 1 \"kernel.cu\"\nsrc");
  spec.mutable_kernel()->set_parameter_passing(v1::Kernel::TEMPLATE);
  spec.mutable_kernel()->set_name_expression("k<{bs}, {flag}, {T}>");
  r = BuildCompileRequest(spec, "src", "/jobs", *space, c, "sm_90");
  EXPECT_EQ(r.kernel_expression(), "k<64, true, float>");
  EXPECT_EQ(r.source(), "#define EXTRA 7\n#line 1 \"kernel.cu\"\nsrc");
  EXPECT_TRUE(r.is_name_expression());
}

TEST(FillTest, NarrowFloatsRoundToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);                // overflow to inf
  EXPECT_EQ(FloatToHalf(5.9604645e-8f), 0x0001);       // smallest subnormal
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // tie to even
  EXPECT_FLOAT_EQ(HalfToFloat(0x3555), 0.33325195f);
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(Bfloat16ToFloat(0x4049), 3.140625f);
  for (float v : {0.5f, -3.25f, 1000.0f, 1e-3f}) {
    EXPECT_NEAR(HalfToFloat(FloatToHalf(v)), v, std::abs(v) * 1e-3f);
  }
}

TEST(FillTest, FillsAreSeededAndTyped) {
  v1::WorkerBuffer b;
  b.set_type(v1::ELEMENT_F32);
  b.set_elements(1000);
  b.mutable_uniform()->set_low(-1);
  b.mutable_uniform()->set_high(1);
  b.mutable_uniform()->set_seed(5);
  std::vector<float> x(1000), y(1000);
  ASSERT_TRUE(FillBuffer(b, x.data()).ok());
  ASSERT_TRUE(FillBuffer(b, y.data()).ok());
  EXPECT_EQ(x, y);
  std::set<float> distinct(x.begin(), x.end());
  EXPECT_GT(distinct.size(), 990u);  // never all zeros
  for (float v : x) EXPECT_TRUE(v >= -1 && v < 1);
  b.mutable_iota()->set_start(3);
  b.mutable_iota()->set_step(2);
  b.set_type(v1::ELEMENT_I32);
  std::vector<std::int32_t> ints(1000);
  ASSERT_TRUE(FillBuffer(b, ints.data()).ok());
  EXPECT_EQ(ints[0], 3);
  EXPECT_EQ(ints[999], 2001);
  b.set_data("abc");
  EXPECT_FALSE(FillBuffer(b, ints.data()).ok());
  EXPECT_EQ(ElementBytes(v1::ELEMENT_BF16), 2u);
}

}  // namespace
}  // namespace ktune
