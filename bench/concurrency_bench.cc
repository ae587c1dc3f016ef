// Tuning under concurrency on real GPUs: load profiles, the copy/compute
// pipeline, and one job spread over two GPUs.
//
//   concurrency_bench [--ktune PATH] [--kernels DIR] [--only a|b|c|d] [--repeats N]
//
// (a) kernels/triad.json (STREAM triad, memory-bound) brute-forced
//     isolated and under a bandwidth load at 50 % of the GPU's copy
//     bandwidth; both winners, then both winners re-measured side by side
//     inside the loaded situation (and isolated), N rounds.
// (b) kernels/pipeline.json (streams 1..8, chunks 1..64 MiB, pinned or
//     pageable) tuned with its spec's strategy; the best throughput, the
//     one-stream pinned and pageable throughputs, the stages' times, the
//     ideal (the larger of total copy and total compute time) and the
//     overlap achieved.
// (c) the same brute-force job (kernels/sgemm.json) on one GPU and on two,
//     each with a cold CUBIN cache: configurations per second and ratio.
// (d) kernels/pipeline.json (pinned, 256 threads: streams x chunk sizes)
//     brute-forced isolated and under a load taking half the host link
//     each way; both winners, then side by side in both situations.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "server/runner/runner.h"
#include "strategies/registry.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/strings.h"
#include "tuner/device/cuda_device.h"
#include "tuner/device/device_group.h"
#include "tuner/session/job.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string ktune = KTUNE_CLI_PATH;
  std::string kernels = std::string(KTUNE_SOURCE_DIR) + "/kernels";
  std::string only;
  int repeats = 5;
};

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), std::string(s.message()).c_str());
  std::exit(1);
}

v1::JobSpec LoadSpec(const Flags& f, const std::string& name) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(f.kernels + "/" + name + ".json");
  if (!spec.ok()) Die(name, spec.status());
  return *std::move(spec);
}

Job Resolve(const Flags& f, const v1::JobSpec& spec) {
  absl::StatusOr<Job> job = ResolveJob(spec, f.kernels);
  if (!job.ok()) Die("resolving", job.status());
  return *std::move(job);
}

std::unique_ptr<Device> Open(const Flags& f, const std::string& locator) {
  OpenDeviceOptions o;
  o.worker_program = f.ktune;
  absl::StatusOr<std::unique_ptr<Device>> d = OpenDevice(locator, o);
  if (!d.ok()) Die("--device " + locator, d.status());
  return *std::move(d);
}

struct Run {
  SessionResult result;
  double wall_s = 0;
  std::vector<StoredMeasurement> measurements;
};

Run Tune(const Job& job, Device& device, const std::string& db) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(db, true);
  if (!store.ok()) Die(db, store.status());
  absl::StatusOr<BuiltStrategy> strategy = BuildStrategy(job, nullptr, "");
  if (!strategy.ok()) Die("strategy", strategy.status());
  Session session(job, device, *strategy->strategy, strategy->resolved);
  const auto t0 = Clock::now();
  if (absl::Status s = session.Prepare(); !s.ok()) Die(job.kernel_name, s);
  absl::StatusOr<SessionResult> r = session.Run(**store);
  Run out;
  out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r.ok()) Die(job.kernel_name, r.status());
  out.result = *std::move(r);
  out.measurements = *(*store)->LoadMeasurements(out.result.job.id);
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return 0.5 * (v[(v.size() - 1) / 2] + v[v.size() / 2]);
}

const StoredMeasurement* Find(const Run& r, const std::string& key) {
  for (const StoredMeasurement& m : r.measurements) {
    if (m.key == key) return &m;
  }
  return nullptr;
}

// One job tuned on GPU 0 isolated (a) and under `load` (b).
struct BothWays {
  Job iso, loaded;
  std::unique_ptr<Device> device;
  Run a, b;
};

BothWays TuneBothWays(const Flags& f, const testing::TempDir& tmp, const v1::JobSpec& iso_spec,
                      const v1::LoadProfile& load, const std::string& name) {
  v1::JobSpec load_spec = iso_spec;
  *load_spec.mutable_measurement()->mutable_load() = load;
  load_spec.mutable_measurement()->mutable_load()->set_kind(v1::LoadProfile::UNDER_LOAD);
  BothWays w{Resolve(f, iso_spec), Resolve(f, load_spec), Open(f, "0"), {}, {}};
  w.a = Tune(w.iso, *w.device, tmp.File(name + "-iso.db"));
  w.b = Tune(w.loaded, *w.device, tmp.File(name + "-load.db"));
  return w;
}

// Both winners re-measured interleaved, f.repeats rounds, in each
// situation: the loaded one, then the isolated one.
void SideBySide(const Flags& f, Device& device, const Job& iso, const Job& loaded,
                const std::string& iso_winner, const std::string& load_winner) {
  const std::vector<Config> both = {*iso.space->ParseKey(iso_winner),
                                    *iso.space->ParseKey(load_winner)};
  for (const auto& [name, job] : {std::pair<const char*, const Job*>{"under load", &loaded},
                                  std::pair<const char*, const Job*>{"isolated", &iso}}) {
    if (absl::Status s = device.Bind(BindingFor(*job)); !s.ok()) Die("bind", s);
    std::printf("  side by side %s (ms, isolated winner / under-load winner):", name);
    std::vector<double> ratio;
    for (int round = 0; round < f.repeats; ++round) {
      absl::StatusOr<std::vector<Measurement>> ms = device.Remeasure(both);
      if (!ms.ok()) Die("remeasure", ms.status());
      std::printf(" %.4f/%.4f", (*ms)[0].time.count(), (*ms)[1].time.count());
      ratio.push_back((*ms)[0].time.count() / (*ms)[1].time.count());
    }
    std::printf("\n    median ratio isolated-winner / under-load-winner: %.3f\n", Median(ratio));
  }
}

// ------------------------------------------------------------------- (a)

void LoadProfiles(const Flags& f, const testing::TempDir& tmp) {
  std::printf("(a) triad, isolated and under a 50%% bandwidth load\n");
  v1::LoadProfile load;
  load.set_bandwidth_fraction(0.5);
  BothWays w = TuneBothWays(f, tmp, LoadSpec(f, "triad"), load, "a");
  const Run &a = w.a, &b = w.b;
  const StoredMeasurement& wi = *a.result.best;
  const StoredMeasurement& wl = *b.result.best;
  std::vector<double> canary, achieved, gbs;
  for (const StoredMeasurement& m : b.measurements) {
    if (!m.measurement.ok()) continue;
    canary.push_back(m.measurement.conditions.canary_slowdown());
    achieved.push_back(m.measurement.conditions.load_throughput());
    auto it = m.measurement.conditions.load_rates().find("bandwidth_gbs");
    if (it != m.measurement.conditions.load_rates().end()) gbs.push_back(it->second);
  }
  std::printf("  %zu configurations each, brute force (%.1f s isolated, %.1f s under load)\n",
              a.measurements.size(), a.wall_s, b.wall_s);
  std::printf("  isolated winner    %-12s %.4f ms  %.0f GB/s\n", wi.key.c_str(),
              wi.measurement.time.count(), wi.objective.value_or(0));
  std::printf(
      "  under-load winner  %-12s %.4f ms  %.0f GB/s (canary %.2fx, load got %.0f%% of its "
      "rate, %.0f GB/s)\n",
      wl.key.c_str(), wl.measurement.time.count(), wl.objective.value_or(0),
      wl.measurement.conditions.canary_slowdown(), 100 * wl.measurement.conditions.load_throughput(),
      wl.measurement.conditions.load_rates().count("bandwidth_gbs") != 0
          ? wl.measurement.conditions.load_rates().at("bandwidth_gbs")
          : 0.0);
  std::printf(
      "  over all candidates under load: median canary slowdown %.2fx, load achieved "
      "%.0f%% (%.0f GB/s), lowest %.0f%%\n",
      Median(canary), 100 * Median(achieved), Median(gbs),
      achieved.empty() ? 0.0 : 100 * *std::min_element(achieved.begin(), achieved.end()));
  if (const StoredMeasurement* x = Find(b, wi.key)) {
    std::printf("  the isolated winner as measured during the under-load search: %.4f ms\n",
                x->measurement.time.count());
  }
  if (const StoredMeasurement* x = Find(a, wl.key)) {
    std::printf("  the under-load winner as measured during the isolated search: %.4f ms\n",
                x->measurement.time.count());
  }
  if (wi.key == wl.key) std::printf("  the same winner in both situations\n");
  SideBySide(f, *w.device, w.iso, w.loaded, wi.key, wl.key);
}

// ------------------------------------------------------------------- (b)

void Pipeline(const Flags& f, const testing::TempDir& tmp) {
  std::printf("(b) copy/compute pipeline\n");
  const Job job = Resolve(f, LoadSpec(f, "pipeline"));
  std::unique_ptr<Device> device = Open(f, "0");
  const Run r = Tune(job, *device, tmp.File("b.db"));
  const StoredMeasurement& best = *r.result.best;
  std::printf("  %zu configurations tried (%s, %.1f s) of %.0f\n", r.measurements.size(),
              r.result.resolved_strategy.c_str(), r.wall_s,
              static_cast<double>(job.space->Count().count));
  // Two ideals: the larger of total copy and total compute time (copies
  // in and out one after another), and with the copies in and out on
  // separate copy engines, the largest stage.
  auto show = [&](const char* label, const Measurement& m, const std::string& key) {
    const Conditions& c = m.conditions;
    const double ideal = std::max(c.h2d_ms() + c.d2h_ms(), c.kernel_ms());
    const double engines = std::max({c.h2d_ms(), c.d2h_ms(), c.kernel_ms()});
    std::printf(
        "  %-20s %-11s %8.3f ms %6.1f GB/s  stages %.2f + %.2f + %.2f ms, ideal %.2f ms"
        " (%.2f ms with two copy engines), overlap %.2fx\n",
        label, key.c_str(), m.time.count(), c.throughput() / 1e9, c.h2d_ms(), c.kernel_ms(), c.d2h_ms(),
        ideal, engines, c.overlap());
  };
  show("best", best.measurement, best.key);
  // The baselines, measured now on the same bound device.
  const std::string block = best.key.substr(best.key.rfind(',') + 1);
  std::vector<std::pair<std::string, std::string>> baselines = {
      {"1 stream, pageable", StrCat("1,64,0,", block)},
      {"1 stream, pinned", StrCat("1,64,1,", block)},
      {"8 streams, pageable", StrCat("8,4,0,", block)},
  };
  double pageable_one = 0;
  for (const auto& [label, key] : baselines) {
    absl::StatusOr<Config> c = job.space->ParseKey(key);
    if (!c.ok()) Die(key, c.status());
    absl::StatusOr<Measurement> m = device->Evaluate(*c);
    if (!m.ok()) Die(key, m.status());
    if (!m->ok()) {
      std::printf("  %-22s %-14s failed: %s\n", label.c_str(), key.c_str(), m->message.c_str());
      continue;
    }
    show(label.c_str(), *m, key);
    if (pageable_one == 0) pageable_one = m->time.count();
  }
  const Conditions& c = best.measurement.conditions;
  const double ideal = std::max(c.h2d_ms() + c.d2h_ms(), c.kernel_ms());
  const double engines = std::max({c.h2d_ms(), c.d2h_ms(), c.kernel_ms()});
  if (pageable_one > 0) {
    std::printf(
        "  best / one-stream pageable: %.2fx the throughput; best time / ideal %.2f, / "
        "two-engine bound %.2f\n",
        pageable_one / best.measurement.time.count(), best.measurement.time.count() / ideal,
        best.measurement.time.count() / engines);
  }
}

// ------------------------------------------------------------------- (d)

void PipelineUnderLoad(const Flags& f, const testing::TempDir& tmp) {
  std::printf(
      "(d) the pipeline (pinned, 256 threads), isolated and with half the host link\n"
      "    taken each way by the load\n");
  v1::JobSpec iso_spec = LoadSpec(f, "pipeline");
  iso_spec.add_constraints("pinned == 1 && block_size_x == 256");
  iso_spec.mutable_strategy()->set_name("brute_force");
  iso_spec.mutable_strategy()->set_max_evaluations(0);
  v1::LoadProfile load;
  load.set_h2d_fraction(0.5);
  load.set_d2h_fraction(0.5);
  BothWays w = TuneBothWays(f, tmp, iso_spec, load, "d");
  const Run &a = w.a, &b = w.b;
  const StoredMeasurement& wi = *a.result.best;
  const StoredMeasurement& wl = *b.result.best;
  std::printf("  %zu configurations each, brute force (%.1f s isolated, %.1f s under load)\n",
              a.measurements.size(), a.wall_s, b.wall_s);
  auto rate = [](const Conditions& c, const char* name) {
    auto it = c.load_rates().find(name);
    return it == c.load_rates().end() ? 0.0 : it->second;
  };
  std::printf("  isolated winner    %-11s %.3f ms  %.1f GB/s, overlap %.2fx\n", wi.key.c_str(),
              wi.measurement.time.count(), wi.measurement.conditions.throughput() / 1e9,
              wi.measurement.conditions.overlap());
  const Conditions& lc = wl.measurement.conditions;
  std::printf(
      "  under-load winner  %-11s %.3f ms  %.1f GB/s, overlap %.2fx (canary %.2fx, link canary "
      "%.2fx; the load got %.0f%% of its rate: %.1f GB/s in, %.1f GB/s out)\n",
      wl.key.c_str(), wl.measurement.time.count(), lc.throughput() / 1e9, lc.overlap(),
      lc.canary_slowdown(), lc.link_canary_slowdown(), 100 * lc.load_throughput(), rate(lc, "h2d_gbs"),
      rate(lc, "d2h_gbs"));
  if (const StoredMeasurement* x = Find(b, wi.key)) {
    std::printf("  the isolated winner as measured during the under-load search: %.3f ms\n",
                x->measurement.time.count());
  }
  if (wi.key == wl.key) std::printf("  the same winner in both situations\n");
  SideBySide(f, *w.device, w.iso, w.loaded, wi.key, wl.key);
}

// ------------------------------------------------------------------- (c)

void TwoGpus(const Flags& f, const testing::TempDir& tmp) {
  std::printf("(c) one brute-force job on one GPU and on two\n");
  absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus = ListCudaDevices(WorkerProgram{f.ktune});
  if (!gpus.ok()) Die("devices", gpus.status());
  if (gpus->size() < 2) {
    std::printf("  skipped: this machine has %zu GPU(s)\n", gpus->size());
    return;
  }
  for (const char* name : {"sgemm", "saxpy"}) {
    const Job job = Resolve(f, LoadSpec(f, name));
    double rate[2] = {0, 0};
    // Each cold (a fresh CUBIN cache: both compile everything), then warm
    // (the images cached: measurement only).
    for (int pass = 0; pass < 4; ++pass) {
      const int n = pass % 2 + 1;
      const bool warm = pass >= 2;
      const std::string cache = tmp.File(StrCat("cubin-", name, "-", n));
      setenv("KTUNE_CACHE_DIR", cache.c_str(), 1);
      std::unique_ptr<Device> device = Open(f, n == 1 ? "0" : "0,1");
      if (auto* cuda = dynamic_cast<CudaDevice*>(device.get())) (void)cuda->WaitUntilOpen();
      if (auto* group = dynamic_cast<DeviceGroup*>(device.get())) {
        for (std::size_t i = 0; i < group->size(); ++i) {
          if (auto* cuda = dynamic_cast<CudaDevice*>(&group->member(i))) {
            (void)cuda->WaitUntilOpen();
          }
        }
      }
      const Run r = Tune(job, *device, tmp.File(StrCat("c-", name, "-", pass, ".db")));
      std::map<std::string, int> per_device;
      for (const StoredMeasurement& m : r.measurements)
        ++per_device[m.measurement.conditions.device()];
      rate[n - 1] = static_cast<double>(r.measurements.size()) / r.wall_s;
      std::printf(
          "  %-6s %s %d GPU(s): %zu configurations in %.2f s = %.1f configs/s, best %s "
          "%.4f ms",
          name, warm ? "warm" : "cold", n, r.measurements.size(), r.wall_s, rate[n - 1],
          r.result.best ? r.result.best->key.c_str() : "-",
          r.result.best ? r.result.best->measurement.time.count() : 0.0);
      if (n == 2) {
        std::printf(" (");
        for (const auto& [d, count] : per_device) std::printf(" %s: %d", d.c_str(), count);
        std::printf(" )");
      }
      std::printf("\n");
      if (n == 2) {
        std::printf("  %-6s %s two GPUs / one: %.2fx the configurations per second\n", name,
                    warm ? "warm" : "cold", rate[1] / rate[0]);
      }
    }
  }
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  ktune::Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--ktune") {
      f.ktune = v;
    } else if (k == "--kernels") {
      f.kernels = v;
    } else if (k == "--only") {
      f.only = v;
    } else if (k == "--repeats") {
      f.repeats = std::max(1, std::atoi(v.c_str()));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  // (c)'s cold runs compile everything: NVRTC must not answer from the
  // driver's compute cache, filled by the run before.
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  ktune::testing::TempDir tmp;
  if (f.only.empty() || f.only == "a") ktune::LoadProfiles(f, tmp);
  if (f.only.empty() || f.only == "b") ktune::Pipeline(f, tmp);
  if (f.only.empty() || f.only == "c") ktune::TwoGpus(f, tmp);
  if (f.only.empty() || f.only == "d") ktune::PipelineUnderLoad(f, tmp);
  return 0;
}
