// The daemon's Prometheus metrics (served at /metrics by the HTTP
// endpoint, server/daemon/http.h): jobs by state, queue depth and busy time
// per device, evaluations by status, worker restarts, the compile pool,
// the canary under load, GetBest requests and their latency, WatchJob
// streams, the HTTP endpoint's connections, the store's size and what the
// daemon was built with. Names and labels follow Prometheus's conventions:
// base units (seconds, bytes), counters end in _total, one `device` label
// per device (its locator, as --device gave it). Built on prometheus-cpp's
// registry and text serialiser.
//
// Thread-safe.
#ifndef KTUNE_SERVER_DAEMON_METRICS_H_
#define KTUNE_SERVER_DAEMON_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/daemon/scheduler.h"

namespace ktune {

struct BuildInfo {
  std::string version;      // ktune's
  std::string cuda_driver;  // the driver the GPUs report ("580.95"); empty: none
  std::string nvrtc;        // "13.0"; empty: none
};

class DaemonMetrics {
 public:
  explicit DaemonMetrics(const BuildInfo& build);
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // How a GetBest call was answered, and how long it took from its arrival
  // to its answer.
  enum class BestAnswer { kMemory, kStore, kError };
  void GetBestServed(BestAnswer answer, std::chrono::steady_clock::duration took);

  // The HTTP endpoint's connections: one opened, one closed, and the
  // endpoint holding its limit (new connections wait until one closes).
  void HttpConnectionOpened();
  void HttpConnectionClosed();
  void HttpConnectionLimitReached();

  // A WatchJob stream opened, and one ended (finished, cancelled, or its
  // connection closed).
  void WatchOpened();
  void WatchClosed();

  // The text exposition format of every metric, with the gauges and
  // totals of `activity` (read just before).
  std::string Render(const SchedulerActivity& activity);

 private:
  // Families are registered once; their series are added (Family::Add
  // returns the series of labels it has) as devices, states and statuses
  // appear. Moves a counter up to `total`, a running total kept elsewhere.
  void CountTo(prometheus::Family<prometheus::Counter>& family, const prometheus::Labels& labels,
               double total);

  std::mutex render_mu_;  // one Render at a time: totals move once
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Family<prometheus::Gauge>& start_time_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& running_;
  prometheus::Family<prometheus::Gauge>& fleet_waiting_;
  prometheus::Family<prometheus::Counter>& evaluations_;
  prometheus::Family<prometheus::Counter>& worker_restarts_;
  prometheus::Family<prometheus::Counter>& busy_seconds_;
  prometheus::Family<prometheus::Gauge>& canary_;
  prometheus::Family<prometheus::Gauge>& compile_workers_;
  prometheus::Family<prometheus::Gauge>& compile_busy_;
  prometheus::Family<prometheus::Gauge>& compile_backlog_;
  prometheus::Family<prometheus::Counter>& compile_busy_seconds_;
  prometheus::Family<prometheus::Counter>& compiles_;
  prometheus::Family<prometheus::Counter>& compile_cache_hits_;
  prometheus::Family<prometheus::Gauge>& store_bytes_;
  prometheus::Family<prometheus::Counter>& best_requests_;
  prometheus::Histogram& best_seconds_;
  prometheus::Gauge& http_connections_;
  prometheus::Counter& http_limit_reached_;
  prometheus::Gauge& watch_streams_;
  prometheus::Counter* best_by_answer_[3];
};

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_METRICS_H_
