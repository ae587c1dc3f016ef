// Prints how fast search spaces are built, enumerated, counted and sampled,
// and how fast a recorded space replays through a session and the store.
//
//   build/default/bench/space_bench [REPO_DIR]
//
// Timings are medians over repeats measured in this one run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "strategies/registry.h"
#include "tuner/device/simulated_device.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double MedianMs(int repeats, const std::function<void()>& work) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    work();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Job LoadJob(const std::string& path) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    std::exit(1);
  }
  absl::StatusOr<Job> job = ResolveJob(*spec, ".");
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", std::string(job.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(job);
}

void EnumerateGemm(const std::string& repo) {
  const std::string path = repo + "/bench/spaces/gemm_clblast.json";
  const absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  std::size_t valid = 0;
  const double build_ms = MedianMs(20, [&] { (void)ResolveJob(*spec, "."); });
  const Job job = LoadJob(path);
  const double enum_ms = MedianMs(50, [&] {
    valid = 0;
    Space::Enumerator e = job.space->Enumerate();
    Config c;
    while (e.Next(&c)) ++valid;
  });
  std::printf("gemm (CLBlast Xgemm) space: %llu raw, %zu valid\n",
              static_cast<unsigned long long>(job.space->RawSize()), valid);
  std::printf("  parse + compile spec:    %8.3f ms (median of 20)\n", build_ms);
  std::printf("  enumerate all valid:     %8.3f ms (median of 50; goal < 10 ms)\n", enum_ms);
}

void CountAndSampleBillion(const std::string& repo) {
  const std::string path = repo + "/bench/spaces/tiled_gemm_1e9.json";
  const absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(path);
  SpaceCount count;
  const double ms = MedianMs(5, [&] {
    // A fresh space each time: the count is computed once per space.
    absl::StatusOr<Job> job = ResolveJob(*spec, ".");
    count = job->space->Count();
    Rng rng(7);
    for (int i = 0; i < 1000; ++i) {
      if (!job->space->Sample(rng)) std::abort();
    }
  });
  const Job job = LoadJob(path);
  Rng rng(7);
  const double sample_ms = MedianMs(5, [&] {
    for (int i = 0; i < 1000; ++i) (void)job.space->Sample(rng);
  });
  std::printf("tiled gemm space: %llu raw, %llu valid (%s)\n",
              static_cast<unsigned long long>(job.space->RawSize()),
              static_cast<unsigned long long>(count.count), count.exact ? "exact" : "estimate");
  std::printf("  build + count + 1000 samples: %8.3f ms (median of 5; goal < 1000 ms)\n", ms);
  std::printf("  1000 more samples:            %8.3f ms (median of 5)\n", sample_ms);
}

void ReplayThroughStore(const std::string& repo) {
  const std::string cache = repo + "/kernels/recorded/convolution_milo_A100.json.gz";
  absl::StatusOr<std::unique_ptr<SimulatedDevice>> device = SimulatedDevice::Open(cache);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    return;
  }
  char tmpl[] = "/tmp/ktune_bench_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return;
  const std::string dir = tmpl;
  std::vector<double> rates;
  for (int rep = 0; rep < 3; ++rep) {
    const std::string db = dir + "/r" + std::to_string(rep) + ".db";
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, true);
    v1::JobSpec overrides;
    overrides.mutable_strategy()->set_name("brute_force");
    absl::StatusOr<Job> job = JobForRecording((*device)->recording(), overrides);
    absl::StatusOr<std::unique_ptr<Strategy>> strategy =
        MakeStrategy("brute_force", *job->space, {});
    Session session(*job, **device, **strategy, "brute_force");
    const auto t0 = Clock::now();
    absl::StatusOr<SessionResult> r = session.Run(**store);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r.ok()) return;
    rates.push_back(static_cast<double>(r->progress.evaluations) / s);
  }
  std::sort(rates.begin(), rates.end());
  std::printf(
      "replay of convolution_milo_A100 (4362 configurations), brute force,\n"
      "  each measurement committed to SQLite: %.0f evaluations/s (median of 3)\n",
      rates[1]);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  const std::string repo = argc > 1 ? argv[1] : KTUNE_SOURCE_DIR;
  ktune::EnumerateGemm(repo);
  ktune::CountAndSampleBillion(repo);
  ktune::ReplayThroughStore(repo);
  return 0;
}
