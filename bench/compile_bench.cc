// Prints what NVRTC's -minimal saves: configurations of the library
// kernels (a seeded sample of each space) compiled to CUBIN with the full
// front end and with -minimal, side by side (the order alternating per
// configuration), with the median compile time of each and whether the
// images are the same.
//
//   build/default/bench/compile_bench [--kernels DIR] [--configs N] [--arch sm_90]
//
// Needs NVRTC only, no GPU. One process, one thread: the pool's workers
// each compile this way. Now and then two compiles of one source give
// different images whatever the front end: NVRTC's code generation is not
// deterministic (docs/benchmarks.md#compilation).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "server/common/flags.h"
#include "tuner/base/rng.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/device/kernel_compile.h"
#include "tuner/session/job.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string kernels = KTUNE_SOURCE_DIR "/kernels";
  int configs = 12;
  std::string arch = "sm_90";
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One compile; its wall time in ms goes to `ms`. Exits on anything but a
// clean compile.
v1::CompileResult TimedCompile(const Nvrtc& nvrtc, const v1::CompileRequest& request,
                               std::vector<double>* ms) {
  const auto t0 = Clock::now();
  v1::CompileResult result = nvrtc.Compile(request);
  ms->push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  if (!result.ok() || !result.error().empty()) {
    std::fprintf(stderr, "%s: %s%s\n", request.source_name().c_str(), result.error().c_str(),
                 result.log().c_str());
    std::exit(1);
  }
  return result;
}

void BenchKernel(const Nvrtc& nvrtc, const Flags& f, const std::string& file) {
  const std::string path = f.kernels + "/" + file;
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  absl::StatusOr<Job> job =
      spec.ok() ? ResolveJob(*spec, f.kernels) : absl::StatusOr<Job>(spec.status());
  if (!job.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(job.status().message()).c_str());
    std::exit(1);
  }
  std::vector<double> full_ms, minimal_ms;
  int same = 0, refused = 0;
  // A seeded sample: the first configurations listed are a space's
  // smallest (one stage, no unrolling), which compile fastest.
  Rng rng(1);
  std::unordered_set<Config, ConfigHash> drawn;
  for (int attempt = 0; attempt < 100 * f.configs && static_cast<int>(drawn.size()) < f.configs;
       ++attempt) {
    std::optional<Config> c = job->space->Sample(rng);
    if (!c) break;
    drawn.insert(*std::move(c));
  }
  std::vector<Config> configs(drawn.begin(), drawn.end());
  std::sort(configs.begin(), configs.end(),
            [](const Config& a, const Config& b) { return a.index < b.index; });
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const Config& config = configs[i];
    v1::CompileRequest full =
        BuildCompileRequest(job->spec, job->source, job->base_dir, *job->space, config, f.arch);
    full.set_try_minimal(false);
    v1::CompileRequest minimal = full;
    minimal.set_try_minimal(true);
    v1::CompileResult a, b;
    if (i % 2 == 0) {
      a = TimedCompile(nvrtc, full, &full_ms);
      b = TimedCompile(nvrtc, minimal, &minimal_ms);
    } else {
      b = TimedCompile(nvrtc, minimal, &minimal_ms);
      a = TimedCompile(nvrtc, full, &full_ms);
    }
    same += a.cubin() == b.cubin() ? 1 : 0;
    refused += b.minimal_refused() ? 1 : 0;
  }
  const double full_median = Median(full_ms), minimal_median = Median(minimal_ms);
  std::printf("%-16s %2zu configs: full %7.1f ms, -minimal %7.1f ms (%.2fx), same image %d/%zu%s\n",
              job->kernel_name.c_str(), full_ms.size(), full_median, minimal_median,
              minimal_median / full_median, same, full_ms.size(),
              refused > 0 ? " (-minimal refused: compiled in full)" : "");
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  const ktune::flags::CommandSpec spec{
      "compile_bench",
      "compile_bench [--kernels DIR] [--configs N] [--arch sm_XX]",
      "Compile time of the library kernels with NVRTC's full front end and with -minimal.",
      {{"kernels", "DIR", "the kernel library (default: the source tree's kernels/)"},
       {"configs", "N", "configurations of each kernel (default 12)"},
       {"arch", "sm_XX", "the architecture to compile for (default sm_90)"}}};
  absl::StatusOr<ktune::flags::Args> args =
      ktune::flags::Parse(spec, std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::fprintf(stderr, "%s\n", std::string(args.status().message()).c_str());
    return 2;
  }
  if (args->help()) {
    std::printf("%s", ktune::flags::HelpText(spec).c_str());
    return 0;
  }
  ktune::Flags f;
  f.kernels = args->Get("kernels").value_or(f.kernels);
  f.arch = args->Get("arch").value_or(f.arch);
  absl::StatusOr<std::optional<std::int64_t>> configs = args->GetInt("configs", 1, 100000);
  if (!configs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(configs.status().message()).c_str());
    return 2;
  }
  f.configs = static_cast<int>(configs->value_or(f.configs));
  // Each configuration is compiled twice: on a machine with the driver,
  // NVRTC would answer the second from the driver's compute cache
  // (~/.nv/ComputeCache), which keeps the code generation's result.
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  absl::StatusOr<const ktune::Nvrtc*> nvrtc = ktune::Nvrtc::Get();
  if (!nvrtc.ok()) {
    std::fprintf(stderr, "%s\n", std::string(nvrtc.status().message()).c_str());
    return 1;
  }
  if (!(*nvrtc)->has_minimal()) {
    std::fprintf(stderr, "NVRTC %s has no -minimal\n", (*nvrtc)->version_text().c_str());
    return 1;
  }
  std::printf("NVRTC %s, %s, medians of one compile per configuration\n",
              (*nvrtc)->version_text().c_str(), f.arch.c_str());
  for (const char* file :
       {"saxpy.json", "sgemm.json", "sgemm_large.json", "reduction.json", "transpose.json"}) {
    ktune::BenchKernel(**nvrtc, f, file);
  }
  return 0;
}
