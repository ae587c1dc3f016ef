// Several devices of one model as one device: a job spread over the GPUs of
// a node.
//
// The session sees one device. The configurations it asks ahead (Prefetch)
// are dealt to the members' queues, each member measured by a thread of its
// own (so one measurement worker per GPU), an idle member taking work from
// the longest queue; Evaluate hands back each configuration's measurement
// when the session asks for it, in the session's order. Every measurement
// names the member that took it (Conditions::device). Members must be the
// same model (name, architecture, memory, and for recordings the same
// recording): measurements of different models are never mixed in one job.
// The final contenders are re-measured on the first member only, side by
// side.
#ifndef KTUNE_TUNER_DEVICE_DEVICE_GROUP_H_
#define KTUNE_TUNER_DEVICE_DEVICE_GROUP_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/device/device.h"

namespace ktune {

class DeviceGroup final : public Device {
 public:
  // INVALID_ARGUMENT for fewer than two members or members of different
  // models (the message names both).
  static absl::StatusOr<std::unique_ptr<DeviceGroup>> Create(
      std::vector<std::unique_ptr<Device>> members);
  ~DeviceGroup() override;
  DeviceGroup(const DeviceGroup&) = delete;
  DeviceGroup& operator=(const DeviceGroup&) = delete;

  // The first member's identity (the store keeps the job under it); each
  // measurement's Conditions::device names the member that took it.
  const DeviceInfo& info() const override { return info_; }
  bool replays_recorded_time() const override;
  absl::Status Bind(const JobBinding& job) override;
  absl::StatusOr<Measurement> Evaluate(const Config& config) override;
  int pipeline_depth() const override;
  void Prefetch(const std::vector<Config>& configs) override;
  bool can_remeasure() const override;
  absl::StatusOr<std::vector<Measurement>> Remeasure(const std::vector<Config>& configs) override;
  void Forget(const std::vector<Config>& configs) override;
  std::int64_t worker_restarts() const override;
  bool Ready(const Config& config) override;

  std::size_t size() const { return members_.size(); }
  const Device& member(std::size_t i) const { return *members_[i]->device; }
  // Only while the group is idle (no job running on it).
  Device& member(std::size_t i) { return *members_[i]->device; }

 private:
  struct Member {
    std::unique_ptr<Device> device;
    std::deque<Config> queue;         // dealt to it, not started
    std::vector<Config> to_prefetch;  // dealt since its last look
    std::vector<Config> to_forget;    // taken by another member
    bool busy = false;
    std::thread thread;
  };
  DeviceGroup() = default;
  void Loop(std::size_t index);
  // Deals `config` to the member with the shortest queue. REQUIRES: mu_.
  void Deal(const Config& config);
  // Clears the queues and waits until no member is measuring.
  void Drain(std::unique_lock<std::mutex>& lock);

  DeviceInfo info_;
  std::vector<std::unique_ptr<Member>> members_;
  const Space* space_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::unordered_set<Config, ConfigHash> known_;  // dealt, measuring or done
  std::unordered_map<Config, absl::StatusOr<Measurement>, ConfigHash> done_;
  // The best time any member has measured, passed to the others (in their
  // own threads) so that racing works as on one device.
  Millis best_{0};
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_DEVICE_GROUP_H_
