#include "server/daemon/metrics.h"

#include <prometheus/text_serializer.h>

#include <chrono>

namespace ktune {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// GetBest answers from memory in microseconds and from the store in
// milliseconds: buckets from 25 us to 1 s.
prometheus::Histogram::BucketBoundaries BestBuckets() {
  return {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 0.1, 1.0};
}

}  // namespace

DaemonMetrics::DaemonMetrics(const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()),
      build_info_(BuildGauge()
                      .Name("ktune_build_info")
                      .Help("What this ktuned was built with and runs on (always 1)")
                      .Register(*registry_)),
      start_time_(BuildGauge()
                      .Name("process_start_time_seconds")
                      .Help("When the daemon started, in seconds since the Unix epoch")
                      .Register(*registry_)),
      jobs_(BuildGauge()
                .Name("ktune_jobs")
                .Help("Jobs in the store by state (a fleet's: every daemon's)")
                .Register(*registry_)),
      queue_depth_(BuildGauge()
                       .Name("ktune_queue_depth")
                       .Help("This daemon's jobs waiting for the device")
                       .Register(*registry_)),
      running_(BuildGauge()
                   .Name("ktune_running_jobs")
                   .Help("Jobs running on the device")
                   .Register(*registry_)),
      fleet_waiting_(BuildGauge()
                         .Name("ktune_fleet_waiting_jobs")
                         .Help("Jobs waiting in the fleet's queue to be claimed, any model")
                         .Register(*registry_)),
      evaluations_(BuildCounter()
                       .Name("ktune_evaluations_total")
                       .Help("Candidates evaluated on the device, by status")
                       .Register(*registry_)),
      worker_restarts_(BuildCounter()
                           .Name("ktune_worker_restarts_total")
                           .Help("Measurement worker processes restarted after a candidate "
                                 "crashed or hung them")
                           .Register(*registry_)),
      busy_seconds_(BuildCounter()
                        .Name("ktune_device_busy_seconds_total")
                        .Help("Time the device spent on timed evaluations; its rate is the "
                              "device's busy fraction")
                        .Register(*registry_)),
      canary_(BuildGauge()
                  .Name("ktune_canary_slowdown_ratio")
                  .Help("The canary kernel's slowdown during the last candidate measured "
                        "under a load (1: no contention)")
                  .Register(*registry_)),
      compile_workers_(BuildGauge()
                           .Name("ktune_compile_workers")
                           .Help("NVRTC worker processes of the GPU jobs' compile pool")
                           .Register(*registry_)),
      compile_busy_(BuildGauge()
                        .Name("ktune_compile_workers_busy")
                        .Help("Compile workers compiling now")
                        .Register(*registry_)),
      compile_backlog_(BuildGauge()
                           .Name("ktune_compile_backlog")
                           .Help("Compiles waiting for a worker")
                           .Register(*registry_)),
      compile_busy_seconds_(BuildCounter()
                                .Name("ktune_compile_busy_seconds_total")
                                .Help("Worker time spent compiling; over ktune_compile_workers, "
                                      "its rate is the pool's utilisation")
                                .Register(*registry_)),
      compiles_(BuildCounter()
                    .Name("ktune_compiles_total")
                    .Help("Kernels compiled by the pool (cache misses)")
                    .Register(*registry_)),
      compile_cache_hits_(BuildCounter()
                              .Name("ktune_compile_cache_hits_total")
                              .Help("Compiles answered by the CUBIN cache")
                              .Register(*registry_)),
      store_bytes_(BuildGauge()
                       .Name("ktune_store_size_bytes")
                       .Help("Bytes the store takes (SQLite: file and log; PostgreSQL: the "
                             "ktune schema's tables)")
                       .Register(*registry_)),
      best_requests_(BuildCounter()
                         .Name("ktune_getbest_requests_total")
                         .Help("GetBest calls, by how they were answered")
                         .Register(*registry_)),
      best_seconds_(BuildHistogram()
                        .Name("ktune_getbest_duration_seconds")
                        .Help("GetBest calls' time from arrival to answer")
                        .Register(*registry_)
                        .Add({}, BestBuckets())),
      http_connections_(BuildGauge()
                            .Name("ktune_http_connections")
                            .Help("Connections open to the HTTP endpoint (this one included)")
                            .Register(*registry_)
                            .Add({})),
      http_limit_reached_(BuildCounter()
                              .Name("ktune_http_connection_limit_reached_total")
                              .Help("Times the HTTP endpoint held --http-max-connections and "
                                    "left new connections waiting until one closed")
                              .Register(*registry_)
                              .Add({})),
      watch_streams_(BuildGauge()
                         .Name("ktune_watch_streams")
                         .Help("WatchJob streams open (clients following a job)")
                         .Register(*registry_)
                         .Add({})) {
  build_info_
      .Add({{"version", build.version}, {"cuda_driver", build.cuda_driver}, {"nvrtc", build.nvrtc}})
      .Set(1);
  start_time_.Add({}).Set(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  best_by_answer_[0] = &best_requests_.Add({{"answer", "memory"}});
  best_by_answer_[1] = &best_requests_.Add({{"answer", "store"}});
  best_by_answer_[2] = &best_requests_.Add({{"answer", "error"}});
}

void DaemonMetrics::GetBestServed(BestAnswer answer, std::chrono::steady_clock::duration took) {
  best_by_answer_[static_cast<int>(answer)]->Increment();
  best_seconds_.Observe(std::chrono::duration<double>(took).count());
}

void DaemonMetrics::HttpConnectionOpened() { http_connections_.Increment(); }

void DaemonMetrics::HttpConnectionClosed() { http_connections_.Decrement(); }

void DaemonMetrics::HttpConnectionLimitReached() { http_limit_reached_.Increment(); }

void DaemonMetrics::WatchOpened() { watch_streams_.Increment(); }

void DaemonMetrics::WatchClosed() { watch_streams_.Decrement(); }

void DaemonMetrics::CountTo(prometheus::Family<prometheus::Counter>& family,
                            const prometheus::Labels& labels, double total) {
  prometheus::Counter& c = family.Add(labels);
  if (total > c.Value()) c.Increment(total - c.Value());
}

std::string DaemonMetrics::Render(const SchedulerActivity& activity) {
  std::lock_guard<std::mutex> lock(render_mu_);
  for (int s = 0; s <= static_cast<int>(JobState::kInterrupted); ++s) {
    const auto state = static_cast<JobState>(s);
    const auto it = activity.jobs.find(state);
    jobs_.Add({{"state", JobStateName(state)}})
        .Set(it == activity.jobs.end() ? 0.0 : static_cast<double>(it->second));
  }
  for (const DeviceActivity& d : activity.devices) {
    const prometheus::Labels device = {{"device", d.locator}, {"model", d.info.name}};
    queue_depth_.Add(device).Set(d.queued);
    running_.Add(device).Set(d.running);
    CountTo(busy_seconds_, device, d.busy_seconds);
    CountTo(worker_restarts_, device, static_cast<double>(d.worker_restarts));
    for (int s = 0; s < kNumCandidateStatuses; ++s) {
      prometheus::Labels by_status = device;
      by_status["status"] = CandidateStatusName(static_cast<CandidateStatus>(s));
      CountTo(evaluations_, by_status,
              static_cast<double>(d.evaluations[static_cast<std::size_t>(s)]));
    }
    if (d.canary_slowdown) canary_.Add(device).Set(*d.canary_slowdown);
  }
  if (activity.fleet_waiting >= 0) {
    fleet_waiting_.Add({}).Set(static_cast<double>(activity.fleet_waiting));
  }
  if (const std::optional<CompileActivity>& c = activity.compile) {
    compile_workers_.Add({}).Set(c->workers);
    compile_busy_.Add({}).Set(c->busy);
    compile_backlog_.Add({}).Set(static_cast<double>(c->backlog));
    CountTo(compile_busy_seconds_, {}, c->busy_seconds);
    CountTo(compiles_, {}, static_cast<double>(c->compiled));
    CountTo(compile_cache_hits_, {}, static_cast<double>(c->cache_hits));
  }
  store_bytes_.Add({}).Set(static_cast<double>(activity.store_bytes));
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace ktune
