#include "tuner/session/job.h"

#include "tests/testing/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace ktune {
namespace {

using ::testing::HasSubstr;

constexpr char kSpec[] = R"json({
  "kernel": {"name": "saxpy", "code": "__global__ void saxpy() {}"},
  "parameters": [
    {"name": "block_size_x", "ints": [32, 64, 128, 256, 512, 1024]},
    {"name": "tile", "range": {"start": 1, "stop": 8}}
  ],
  "constraints": ["block_size_x * tile <= 2048"],
  "problem": {"N": 67108864},
  "launch": {"grid": ["ceil_div(N, block_size_x * tile)"]},
  "arguments": [
    {"name": "x", "type": "F32", "buffer": {"size": "N", "uniform": {"low": -1, "high": 1}}},
    {"name": "a", "type": "F32", "scalar": "2.5"}
  ],
  "strategy": {"name": "random", "seed": 3, "maxEvaluations": 10}
})json";

v1::JobSpec Parse(const std::string& text) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(text, "spec.json");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

TEST(JobSpecTest, ParsesAndResolves) {
  absl::StatusOr<Job> job = ResolveJob(Parse(kSpec), ".");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->kernel_name, "saxpy");
  EXPECT_EQ(job->space->num_params(), 2u);
  EXPECT_EQ(job->space->param(1).values.size(), 8u);
  // block 32..256 allow all 8 tiles, 512 allows 4, 1024 allows 2.
  EXPECT_EQ(static_cast<int>(job->space->Count().count), 4 * 8 + 4 + 2);
  EXPECT_EQ(job->strategy, "random");
  EXPECT_EQ(job->seed, 3u);
  EXPECT_EQ(job->max_evaluations, 10);
  EXPECT_EQ(job->batch_size, 1);
  EXPECT_EQ(job->problem.at("N"), 67108864);
  EXPECT_EQ(job->objective.id(), "time");
}

struct BadSpec {
  std::string text;
  const char* message;
};

std::string WithParams(const std::string& params, const std::string& rest = "") {
  return R"({"kernel": {"name": "k"}, "parameters": )" + params + rest + "}";
}

TEST(JobSpecTest, MalformedJobFilesNameTheProblem) {
  const BadSpec parse_errors[] = {
      {"{\"kernel\": {\"name\": \"k\"},\n \"parameters\": [}",
       "spec.json: not valid JSON: line 2, column 17"},
      {"[]", "a job file is a JSON object, not array"},
      {R"({"kernal": {}})", "kernal: no field of that name in JobSpec; did you mean kernel?"},
      {R"({"paramters": []})",
       "paramters: no field of that name in JobSpec; did you mean parameters?"},
      {R"({"parameters": [{"name": "a", "ints": [1]}, {"name": "b", "intz": [1]}]})",
       "parameters[1].intz: no field of that name in Parameter; did you mean ints?"},
      {R"({"max_evaluations": 5})",
       "max_evaluations: no field of that name in JobSpec (its fields: kernel, parameters,"},
      {R"({"arguments": [{"name": "x", "type": "F32", "buffer": {"direction": "INOUTT"}}]})",
       "arguments[0].buffer.direction: \"INOUTT\" is not one of INPUT, OUTPUT, INOUT; did you "
       "mean INOUT?"},
      {R"({"arguments": [{"name": "x", "type": "FLOAT32"}]})",
       "arguments[0].type: \"FLOAT32\" is not one of"},
      {R"({"strategy": {"maxEvaluations": 5, "Seed": 1}})",
       "strategy.Seed: no field of that name in StrategySpec; did you mean seed?"},
      {R"({"parameters": [{"name": "a", "ints": ["x"]}]})", "parameters[0].ints[0]"},
      {R"({"strategy": {"maxTime": "ten"}})", "strategy.max_time"},
  };
  for (const BadSpec& c : parse_errors) {
    absl::StatusOr<v1::JobSpec> s = ParseJobSpecJson(c.text, "spec.json");
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.message)) << c.text;
  }
  const BadSpec resolve_errors[] = {
      {R"({"parameters": [{"name": "a", "ints": [1]}]})", "kernel.name: required"},
      {WithParams(R"([{"name": "a"}])"), "parameters[0] (a): empty value list"},
      {WithParams(R"([{"name": "a", "ints": [1], "floats": [2.0]}])"), "give only one of"},
      {WithParams(R"([{"name": "a", "ints": [1]}, {"name": "a", "ints": [2]}])"),
       "parameters[1].name: duplicate parameter 'a'"},
      {WithParams(R"([{"name": "a", "ints": [1, 1]}])"), "duplicate value 1"},
      {WithParams(R"([{"name": "a", "range": {"start": 5, "stop": 1}}])"),
       "stop (1) is below start (5)"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "constraints": ["a <="])"),
       "constraints[0]: unexpected end of expression at column 5"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "constraints": ["a * b < 4"])"),
       "constraints[0]: unknown name 'b' at column 5\n  a * b < 4\n      ^"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "problem": {"a": 3})"),
       "problem.a: the name is also a parameter"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "launch": {"grid": ["N / a"]})"),
       "launch.grid[0]: unknown name 'N'"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "launch": {"block": ["a / 2.0"]})"),
       "launch.block[0]: expected an int expression, got a float"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "arguments": [{"name": "x", "buffer": {"size": "4"}}])"),
       "arguments[0] (x).type: required"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "arguments": [{"name": "x", "type": "F32"}])"),
       "arguments[0] (x): give buffer, scalar or constant"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "objective": {"expression": "1 / zz"})"),
       "objective.expression: unknown name 'zz'"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "strategy": {"maxEvaluations": -1})"),
       "strategy.max_evaluations: must not be negative"},
      {WithParams(R"([{"name": "a", "ints": [1, 2]}])", R"(, "constraints": ["a > 1"],
         "verification": {"referenceConfig": "1"})"),
       "verification.reference_config: the configuration violates the constraints"},
      {WithParams(R"([{"name": "a", "ints": [1, 2]}])",
                  R"(, "verification": {"referenceConfig": "3"})"),
       "verification.reference_config: key '3': value '3' at position 1"},
      {R"({"kernel": {"name": "k", "file": "/nonexistent/k.cu"}, "parameters": [{"name": "a", "ints": [1]}]})",
       "kernel.file: /nonexistent/k.cu: no such file"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "measurement": {"load": {"kind": "UNDER_LOAD"}})"),
       "measurement.load: UNDER_LOAD needs a load"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "measurement": {"load": {"kind": "UNDER_LOAD", "bandwidthFraction": 1.5}})"),
       "measurement.load.bandwidth_fraction: 1.5 is not in [0, 1]"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "measurement": {"load": {"bandwidthFraction": 0.5}})"),
       "a background load is declared but kind is KIND_UNSPECIFIED"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "measurement": {"load": {"kind": "UNDER_LOAD", "companions": )"
                  R"([{"intensity": -0.5}]}})"),
       "measurement.load.companions[0].intensity: -0.5 is not in [0, 1]"},
      {WithParams(R"([{"name": "a", "ints": [1]}])", R"(, "pipeline": {"elements": "1024"})"),
       "pipeline.chunk_elements: required"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "pipeline": {"elements": "1024", "chunkElements": "a", "streams": "a"},)"
                  R"( "arguments": [{"name": "x", "type": "F32", "scalar": "1"}])"),
       "arguments: a pipeline job's kernel takes (const T* in, T* out, unsigned long long n)"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "pipeline": {"elements": "1024", "chunkElements": "a", "streams": "a"},)"
                  R"( "measurement": {"load": {"kind": "CONCURRENT"}})"),
       "measure it ISOLATED or UNDER_LOAD, not CONCURRENT"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "pipeline": {"elements": "1024", "chunkElements": "a", "streams": "a"},)"
                  R"( "measurement": {"rotateInputs": true})"),
       "measurement.rotate_inputs: a pipeline job's input comes from the host"},
      {WithParams(R"([{"name": "a", "ints": [1]}])",
                  R"(, "measurement": {"rotateInputs": true, "load": {"kind": "CONCURRENT"}})"),
       "measurement.rotate_inputs: not with CONCURRENT instances"},
  };
  for (const BadSpec& c : resolve_errors) {
    absl::StatusOr<Job> job = ResolveJob(Parse(c.text), ".");
    ASSERT_FALSE(job.ok()) << c.text;
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.message)) << c.text;
  }
}

// Every job file shipped in kernels/ parses and resolves.
TEST(JobSpecTest, ShippedKernelSpecsResolve) {
  for (const char* name :
       {"saxpy", "sgemm", "reduction", "transpose", "faults", "triad", "pipeline"}) {
    const std::string dir = std::string(KTUNE_SOURCE_DIR) + "/kernels";
    absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(dir + "/" + name + ".json");
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status();
    absl::StatusOr<Job> job = ResolveJob(*spec, dir);
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    if (std::string(name) == "pipeline") {
      // No arguments, but chunk buffers: bounded by four times the array.
      EXPECT_EQ(*ArgumentBytes(*job), std::int64_t{4} * 4 * job->problem.at("N"));
    }
  }
}

TEST(JobSpecTest, RotatedInputsCountTheirCopies) {
  // One read-only input of N floats: its copies take at most 63 more, and
  // never more than kMaxRotationBytes beyond one more.
  for (const std::int64_t n :
       {std::int64_t{1} << 16, std::int64_t{1} << 24, std::int64_t{1} << 27}) {
    v1::JobSpec spec = Parse(kSpec);
    (*spec.mutable_problem())["N"] = n;
    absl::StatusOr<Job> plain = ResolveJob(spec, ".");
    ASSERT_TRUE(plain.ok()) << plain.status();
    spec.mutable_measurement()->set_rotate_inputs(true);
    absl::StatusOr<Job> rotated = ResolveJob(spec, ".");
    ASSERT_TRUE(rotated.ok()) << rotated.status();
    const std::int64_t bytes = 4 * n;
    EXPECT_EQ(*ArgumentBytes(*plain), bytes);
    const std::int64_t extra =
        bytes >= kMaxRotationBytes ? 0 : std::min(63 * bytes, kMaxRotationBytes + bytes);
    EXPECT_EQ(*ArgumentBytes(*rotated), bytes + extra) << n;
  }
}

TEST(JobSpecTest, ObjectivesRankByLoss) {
  v1::JobSpec spec = Parse(kSpec);
  spec.mutable_objective()->set_expression("2.0 * N / time_s / 1e9");
  spec.mutable_objective()->set_direction(v1::Objective::MAXIMIZE);
  spec.mutable_objective()->set_name("GFLOP/s");
  absl::StatusOr<Job> job = ResolveJob(spec, ".");
  ASSERT_TRUE(job.ok()) << job.status();
  const Config c = *job->space->ParseKey("32,1");
  const double gflops = 2.0 * 67108864 / 1e-3 / 1e9;
  EXPECT_DOUBLE_EQ(*job->objective.Compute(c, 1.0), gflops);
  EXPECT_DOUBLE_EQ(*job->objective.Loss(c, 1.0), -gflops);
  EXPECT_EQ(job->objective.id(), "2.0 * N / time_s / 1e9");
  EXPECT_FALSE(job->objective.Compute(c, 0.0).has_value());  // division by zero
}

// An objective over the energy (GFLOP/J) reads energy_j; the job then
// measures energy, and a candidate without it has no objective.
TEST(JobSpecTest, AnEnergyObjectiveMeasuresEnergy) {
  v1::JobSpec spec = Parse(kSpec);
  spec.mutable_objective()->set_expression("2.0 * N / energy_j / 1e9");
  spec.mutable_objective()->set_direction(v1::Objective::MAXIMIZE);
  absl::StatusOr<Job> job = ResolveJob(spec, ".");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->objective.reads_energy());
  EXPECT_TRUE(job->spec.measurement().energy());
  const Config c = *job->space->ParseKey("32,1");
  EXPECT_DOUBLE_EQ(*job->objective.Compute(c, 1.0, 0.5, 500.0), 2.0 * 67108864 / 0.5 / 1e9);
  EXPECT_FALSE(job->objective.Compute(c, 1.0).has_value());  // not measured
  spec.mutable_objective()->set_expression("power_w");
  spec.mutable_objective()->set_direction(v1::Objective::MINIMIZE);
  job = ResolveJob(spec, ".");
  ASSERT_TRUE(job.ok());
  EXPECT_DOUBLE_EQ(*job->objective.Compute(c, 1.0, 0.5, 321.0), 321.0);
  // Time alone needs no energy.
  spec.mutable_objective()->set_expression("2.0 * N / time_s");
  job = ResolveJob(spec, ".");
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(job->objective.reads_energy());
  EXPECT_FALSE(job->spec.measurement().energy());
  // The energy counter would count a load's work too.
  spec.mutable_measurement()->set_energy(true);
  spec.mutable_measurement()->mutable_load()->set_kind(v1::LoadProfile::UNDER_LOAD);
  spec.mutable_measurement()->mutable_load()->set_bandwidth_fraction(0.5);
  job = ResolveJob(spec, ".");
  EXPECT_THAT(job.status().message(), HasSubstr("measurement.energy: not with an UNDER_LOAD"));
}

// A `constant` argument is read-only, sized by an expression like a
// buffer's, and counted in the job's memory.
TEST(JobSpecTest, ConstantArgumentsAreCheckedLikeBuffers) {
  v1::JobSpec spec = Parse(kSpec);
  v1::Argument* k = spec.add_arguments();
  k->set_name("coefficients");
  k->set_type(v1::Argument::F32);
  k->mutable_constant()->set_size("16");
  absl::StatusOr<Job> job = ResolveJob(spec, ".");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::int64_t with = *ArgumentBytes(*job);
  EXPECT_EQ(with, *ArgumentBytes(*ResolveJob(Parse(kSpec), ".")) + 64);
  k->mutable_constant()->set_direction(v1::Buffer::OUTPUT);
  job = ResolveJob(spec, ".");
  EXPECT_THAT(job.status().message(),
              HasSubstr("arguments[2] (coefficients).constant.direction: constant memory is "
                        "read-only to kernels"));
  k->mutable_constant()->set_direction(v1::Buffer::INPUT);
  k->mutable_constant()->set_size("N +");
  job = ResolveJob(spec, ".");
  EXPECT_THAT(job.status().message(), HasSubstr("arguments[2] (coefficients).constant.size"));
}

TEST(JobIdTest, DerivedFromKernelSpecDeviceAndProblem) {
  const Job base = *ResolveJob(Parse(kSpec), ".");
  DeviceInfo gpu;
  gpu.uuid = "GPU-1";
  const std::string id = ComputeJobId(base, gpu);
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(ComputeJobId(*ResolveJob(Parse(kSpec), "."), gpu), id);

  auto changed = [&](auto mutate) {
    v1::JobSpec spec = Parse(kSpec);
    mutate(spec);
    return ComputeJobId(*ResolveJob(spec, "."), gpu);
  };
  EXPECT_NE(changed([](v1::JobSpec& s) { s.mutable_strategy()->set_seed(4); }), id);
  EXPECT_NE(changed([](v1::JobSpec& s) { s.mutable_strategy()->set_max_evaluations(11); }), id);
  EXPECT_NE(changed([](v1::JobSpec& s) { (*s.mutable_problem())["N"] = 1024; }), id);
  EXPECT_NE(changed([](v1::JobSpec& s) { s.mutable_kernel()->set_code("// other"); }), id);
  // How the device was named does not matter; which device it is does.
  EXPECT_EQ(changed([](v1::JobSpec& s) { s.mutable_device()->add_devices("cuda:0"); }), id);
  DeviceInfo other;
  other.uuid = "GPU-2";
  EXPECT_NE(ComputeJobId(base, other), id);
}

TEST(JobIdTest, KernelFileContentNotItsPath) {
  const testing::TempDir tmp;
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/a.cu") << "__global__ void saxpy() {}";
  std::ofstream(dir + "/b.cu") << "__global__ void saxpy() {}";
  v1::JobSpec spec = Parse(kSpec);
  spec.mutable_kernel()->set_file("a.cu");
  const Job a = *ResolveJob(spec, dir);
  spec.mutable_kernel()->set_file("b.cu");
  const Job b = *ResolveJob(spec, dir);
  DeviceInfo gpu;
  gpu.uuid = "GPU-1";
  EXPECT_EQ(a.source, "__global__ void saxpy() {}");
  EXPECT_EQ(ComputeJobId(a, gpu), ComputeJobId(b, gpu));
}

}  // namespace
}  // namespace ktune
