// One tuning job: strategy <-> device <-> store.
#ifndef KTUNE_TUNER_SESSION_SESSION_H_
#define KTUNE_TUNER_SESSION_SESSION_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/base/clock.h"
#include "tuner/device/device.h"
#include "tuner/session/job.h"
#include "tuner/space/config.h"
#include "tuner/store/store.h"

namespace ktune {

// A snapshot of a running job, passed to the progress callback after each
// evaluation.
struct Progress {
  std::int64_t evaluations = 0;           // distinct configurations evaluated
  std::int64_t max_evaluations = 0;       // 0: no limit
  std::int64_t replayed = 0;              // of which taken from the store
  Millis elapsed{0};                      // charged against the time budget
  Millis max_time{0};                     // 0: no limit
  std::chrono::duration<double> wall{0};  // wall time of this run
  std::optional<double> best_time_ms;
  std::optional<double> best_objective;
  std::string best_key;
  std::array<std::int64_t, kNumCandidateStatuses> status_counts{};
};

struct SessionResult {
  JobRecord job;         // as stored at the end
  bool resumed = false;  // the job existed in the store
  Progress progress;     // final counts
  std::optional<StoredMeasurement> best;
  std::string resolved_strategy;  // what "auto" became, or the name
  // Why the run ended: "evaluation budget spent", "time budget spent",
  // "search space exhausted", "interrupted".
  std::string end_reason;
};

struct SessionOptions {
  // Polled between candidates; when it becomes true the run stops and the
  // job is left "interrupted", to resume when run again.
  const std::atomic<bool>* stop = nullptr;
  std::function<void(const Progress&)> on_progress;
  // Called after each measurement this run commits (not those replayed
  // from the store), and again for each final contender re-measured.
  std::function<void(const StoredMeasurement&)> on_measurement;
  // Called when the job's best so far changes (including replayed
  // measurements, and once after the final contenders' re-measurement).
  std::function<void(const StoredMeasurement&)> on_new_best;
  // Where time budgets and Progress::wall read the time; null: the real
  // clock. Must outlive the run.
  const Clock* clock = nullptr;
  // A store that cannot be reached (UNAVAILABLE: a fleet's database down
  // or cut off) is waited for: the measured candidate is kept and its
  // write tried again with growing pauses (0.1 s to 5 s) until it is
  // stored or the run is stopped. Off, the job ends interrupted at the
  // first failed write. `on_store_retry` hears each failed attempt.
  bool wait_for_store = false;
  std::function<void(const absl::Status& why, double retry_in_s)> on_store_retry;
};

// The store's record of `job` on `device` (state, counts and times unset).
JobRecord MakeJobRecord(const Job& job, const DeviceInfo& device);

// Runs one job. The job's identity decides whether it is new or resumes:
// a resumed job replays its stored measurements into a fresh strategy with
// the same seed (so the strategy takes the same path) and measures only
// what was never measured. Each measurement is committed as it completes.
// Not thread-safe; the references must outlive the session.
class Session {
 public:
  Session(const Job& job, Device& device, Strategy& strategy, std::string resolved_strategy);

  // Binds the job to the device (for a GPU: starts the worker, uploads the
  // arguments, makes the reference). Errors say why the device cannot run
  // the job; nothing is stored. Run calls it if it was not called.
  absl::Status Prepare();

  // Infrastructure failures (device or store) are errors; the job is then
  // marked failed when the store still works. Candidate failures are data.
  absl::StatusOr<SessionResult> Run(Store& store, const SessionOptions& options = {});

  const std::string& job_id() const { return job_id_; }
  // Runs the job under another id than its own on this device: a fleet's
  // job taken over on another GPU of its model keeps the id it was queued
  // under.
  void set_job_id(std::string id) { job_id_ = std::move(id); }

  // Replaces the strategy before Run (e.g. with one rebuilt around a warm
  // start read from the store); `strategy` must outlive the session.
  void set_strategy(Strategy& strategy, std::string resolved_strategy) {
    strategy_ = &strategy;
    resolved_strategy_ = std::move(resolved_strategy);
  }

 private:
  class Running;  // one Run's state and steps

  const Job& job_;
  Device& device_;
  Strategy* strategy_;
  bool prepared_ = false;
  std::string resolved_strategy_;
  std::string job_id_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_SESSION_H_
