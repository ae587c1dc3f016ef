// What a job asks of a GPU, worked out on the CPU: the worker's set-up,
// the reference, and each configuration's launch.
#include "tuner/device/job_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tuner/session/job.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

const std::string kKernels = std::string(KTUNE_SOURCE_DIR) + "/kernels";

PlanTarget H200() {
  PlanTarget t;
  t.ordinal = 0;
  t.architecture = "sm_90";
  t.memory_bytes = std::int64_t{141} << 30;
  t.multiprocessors = 132;
  return t;
}

Job Saxpy() {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(kKernels + "/saxpy.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<Job> job = ResolveJob(*spec, kKernels);
  EXPECT_TRUE(job.ok()) << job.status();
  return *std::move(job);
}

TEST(JobPlanTest, SaxpysSetUpLaunchesAndReference) {
  const Job job = Saxpy();
  absl::StatusOr<JobPlan> plan = JobPlan::Make(BindingFor(job), H200());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::WorkerSetup& setup = plan->setup();
  ASSERT_EQ(setup.buffers_size(), 2);
  EXPECT_EQ(setup.buffers(0).name(), "y");
  EXPECT_TRUE(setup.buffers(0).input() && setup.buffers(0).output());
  EXPECT_EQ(setup.buffers(0).elements(), 67108864);
  EXPECT_TRUE(setup.buffers(1).input() && !setup.buffers(1).output());
  // y, x, then two scalars.
  EXPECT_THAT(setup.argument_buffers(), ::testing::ElementsAre(0, 1, -1, -1));
  EXPECT_THAT(setup.verified(), ::testing::ElementsAre(0));
  EXPECT_EQ(setup.settings().min_samples(), 10);
  EXPECT_DOUBLE_EQ(setup.settings().atol(), 1e-6);  // the spec's
  ASSERT_TRUE(plan->reference_request().has_value());
  EXPECT_THAT(plan->reference_request()->source(), HasSubstr("#define block_size_x 32"));
  EXPECT_TRUE(plan->reference_template().make_reference());
  EXPECT_TRUE(plan->verifies());

  // 256 threads, 4 elements each: ceil(2^26 / 1024) blocks.
  absl::StatusOr<Config> config = job.space->ParseKey("256,4");
  ASSERT_TRUE(config.ok());
  v1::WorkerCandidate c;
  std::string why;
  ASSERT_TRUE(plan->LaunchFor(*config, &c, &why).ok());
  EXPECT_EQ(why, "");
  EXPECT_EQ(c.block().x(), 256u);
  EXPECT_EQ(c.grid().x(), 65536u);
  ASSERT_EQ(c.scalars_size(), 2);
  float a = 0;
  std::memcpy(&a, c.scalars(0).data(), sizeof a);
  EXPECT_FLOAT_EQ(a, 2.5f);
  const v1::CompileRequest req = plan->CompileRequestFor(*config);
  EXPECT_THAT(req.source(), HasSubstr("#define block_size_x 256\n#define tile_size_x 4\n"));
  EXPECT_EQ(req.architecture(), "sm_90");
}

// A constant argument is set up as a buffer the worker copies into the
// module's __constant__ variable of its name: no kernel parameter.
TEST(JobPlanTest, AConstantArgumentIsNoKernelParameter) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(kKernels + "/convolution_cmem.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<Job> job = ResolveJob(*spec, kKernels);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobPlan> plan = JobPlan::Make(BindingFor(*job), H200());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::WorkerSetup& setup = plan->setup();
  ASSERT_EQ(setup.buffers_size(), 3);
  EXPECT_EQ(setup.buffers(2).name(), "filter");
  EXPECT_TRUE(setup.buffers(2).constant_symbol());
  EXPECT_TRUE(setup.buffers(2).input() && !setup.buffers(2).output());
  EXPECT_EQ(setup.buffers(2).elements(), 17 * 17);
  EXPECT_TRUE(setup.buffers(2).has_uniform());
  EXPECT_FALSE(setup.buffers(0).constant_symbol());
  // out, in, w, h: the filter is not among the kernel's parameters.
  EXPECT_THAT(setup.argument_buffers(), ::testing::ElementsAre(0, 1, -1, -1));
  EXPECT_THAT(setup.verified(), ::testing::ElementsAre(0));
}

// Energy: the worker measures it, over the window asked, and races no
// candidate (a slower one may use less energy).
TEST(JobPlanTest, EnergyIsMeasuredWithoutRacing) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(kKernels + "/sgemm.json");
  ASSERT_TRUE(spec.ok());
  spec->mutable_objective()->set_expression("2.0 * M * N * K / energy_j / 1e9");
  absl::StatusOr<Job> job = ResolveJob(*spec, kKernels);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<JobPlan> plan = JobPlan::Make(BindingFor(*job), H200());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->setup().settings().measure_energy());
  EXPECT_DOUBLE_EQ(plan->setup().settings().energy_window_ms(), 1000);
  EXPECT_EQ(plan->setup().settings().racing_factor(), 0);
  const Job plain = Saxpy();
  absl::StatusOr<JobPlan> timed = JobPlan::Make(BindingFor(plain), H200());
  ASSERT_TRUE(timed.ok());
  EXPECT_FALSE(timed->setup().settings().measure_energy());
  EXPECT_GT(timed->setup().settings().racing_factor(), 1);
}

TEST(JobPlanTest, AConfigurationThatCannotLaunchSaysWhy) {
  Job job = Saxpy();
  v1::JobSpec spec = job.spec;
  spec.mutable_launch()->clear_block();
  spec.mutable_launch()->add_block("block_size_x * 64");
  absl::StatusOr<Job> resolved = ResolveJob(spec, kKernels);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  // The reference configuration itself cannot launch: the plan refuses.
  absl::StatusOr<JobPlan> plan = JobPlan::Make(BindingFor(*resolved), H200());
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("verification.reference_config: block dimension x"));
  spec.mutable_verification()->clear_reference_config();
  resolved = ResolveJob(spec, kKernels);
  ASSERT_TRUE(resolved.ok());
  plan = JobPlan::Make(BindingFor(*resolved), H200());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->verifies());
  v1::WorkerCandidate c;
  std::string why;
  ASSERT_TRUE(plan->LaunchFor(*resolved->space->ParseKey("64,1"), &c, &why).ok());
  EXPECT_EQ(why, "block dimension x is 4096 (1 to 1024 allowed)");
}

TEST(JobPlanTest, BuffersThatDoNotFitAreRefusedByName) {
  PlanTarget small = H200();
  small.memory_bytes = std::int64_t{256} << 20;
  absl::StatusOr<JobPlan> plan = JobPlan::Make(BindingFor(Saxpy()), small);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("arguments: 512 MiB of buffers do not fit"));
}

}  // namespace
}  // namespace ktune
