#include "tuner/device/device_group.h"

#include <algorithm>
#include <utility>

#include "tuner/base/strings.h"

namespace ktune {

absl::StatusOr<std::unique_ptr<DeviceGroup>> DeviceGroup::Create(
    std::vector<std::unique_ptr<Device>> members) {
  if (members.size() < 2) {
    return absl::InvalidArgumentError("a device group needs at least two devices");
  }
  const DeviceInfo& first = members.front()->info();
  for (std::size_t i = 0; i < members.size(); ++i) {
    const DeviceInfo& d = members[i]->info();
    if (d.simulated != first.simulated || d.name != first.name ||
        d.architecture != first.architecture || d.memory_bytes != first.memory_bytes ||
        (d.simulated && d.uuid != first.uuid)) {
      return absl::InvalidArgumentError(
          StrCat("devices ", first.id, " (", first.name, ") and ", d.id, " (", d.name,
                 ") are not the same model", d.simulated ? " and recording" : "",
                 ": one job's measurements never mix models; run a job per model"));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (!d.simulated && members[j]->info().uuid == d.uuid) {
        return absl::InvalidArgumentError(
            StrCat("devices ", members[j]->info().id, " and ", d.id, " are the same GPU"));
      }
    }
  }
  std::unique_ptr<DeviceGroup> g(new DeviceGroup());
  g->info_ = first;
  for (auto& d : members) {
    auto m = std::make_unique<Member>();
    m->device = std::move(d);
    g->members_.push_back(std::move(m));
  }
  for (std::size_t i = 0; i < g->members_.size(); ++i) {
    g->members_[i]->thread = std::thread([raw = g.get(), i] { raw->Loop(i); });
  }
  return g;
}

DeviceGroup::~DeviceGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& m : members_) {
    if (m->thread.joinable()) m->thread.join();
  }
}

bool DeviceGroup::replays_recorded_time() const {
  return members_.front()->device->replays_recorded_time();
}

int DeviceGroup::pipeline_depth() const {
  // Enough asked ahead that no member waits for the session.
  const int one = members_.front()->device->pipeline_depth();
  return std::max(one, 4 * static_cast<int>(members_.size()));
}

bool DeviceGroup::can_remeasure() const { return members_.front()->device->can_remeasure(); }

absl::Status DeviceGroup::Bind(const JobBinding& job) {
  std::unique_lock<std::mutex> lock(mu_);
  Drain(lock);
  known_.clear();
  done_.clear();
  best_ = Millis(0);
  space_ = job.space;
  // Idle members: binding from this thread is safe.
  for (auto& m : members_) {
    m->to_prefetch.clear();
    m->to_forget.clear();
    if (absl::Status s = m->device->Bind(job); !s.ok()) {
      return absl::Status(s.code(), StrCat(m->device->info().id, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

void DeviceGroup::Deal(const Config& config) {
  Member* target = members_.front().get();
  for (auto& m : members_) {
    if (m->queue.size() + (m->busy ? 1 : 0) < target->queue.size() + (target->busy ? 1 : 0)) {
      target = m.get();
    }
  }
  target->queue.push_back(config);
  target->to_prefetch.push_back(config);
  known_.insert(config);
}

void DeviceGroup::Prefetch(const std::vector<Config>& configs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Config& c : configs) {
      if (known_.count(c) != 0) continue;
      // Configurations the session will not evaluate (outside the
      // constraints) are never measured.
      if (space_ != nullptr && (space_->FirstViolated(c) >= 0 || !space_->IsValid(c))) continue;
      Deal(c);
    }
  }
  cv_.notify_all();
}

std::int64_t DeviceGroup::worker_restarts() const {
  std::int64_t n = 0;
  for (const auto& m : members_) n += m->device->worker_restarts();
  return n;
}

void DeviceGroup::Forget(const std::vector<Config>& configs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Config& c : configs) {
    for (auto& m : members_) {
      auto it = std::find(m->queue.begin(), m->queue.end(), c);
      if (it != m->queue.end()) {
        m->queue.erase(it);
        m->to_forget.push_back(c);
        known_.erase(c);
      }
    }
    if (done_.erase(c) > 0) known_.erase(c);
  }
}

bool DeviceGroup::Ready(const Config& config) {
  std::lock_guard<std::mutex> lock(mu_);
  return done_.count(config) != 0;
}

absl::StatusOr<Measurement> DeviceGroup::Evaluate(const Config& config) {
  std::unique_lock<std::mutex> lock(mu_);
  if (known_.count(config) == 0) {
    Deal(config);
    cv_.notify_all();
  } else {
    // Asked for now: move it to the front of its queue.
    for (auto& m : members_) {
      auto it = std::find(m->queue.begin(), m->queue.end(), config);
      if (it != m->queue.end()) {
        m->queue.erase(it);
        m->queue.push_front(config);
        break;
      }
    }
  }
  cv_.wait(lock, [&] { return done_.count(config) != 0 || stop_; });
  if (stop_) return absl::CancelledError("the device group is closing");
  auto it = done_.find(config);
  absl::StatusOr<Measurement> out = std::move(it->second);
  done_.erase(it);
  known_.erase(config);
  return out;
}

void DeviceGroup::Loop(std::size_t index) {
  Member& me = *members_[index];
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Work of its own, else the back of the longest other queue (the part
    // its owner reaches last).
    Member* victim = nullptr;
    cv_.wait(lock, [&] {
      if (stop_ || !me.queue.empty() || !me.to_prefetch.empty() || !me.to_forget.empty()) {
        return true;
      }
      victim = nullptr;
      for (auto& m : members_) {
        if (m.get() != &me && m->queue.size() >= 2 &&
            (victim == nullptr || m->queue.size() > victim->queue.size())) {
          victim = m.get();
        }
      }
      return victim != nullptr;
    });
    if (stop_) return;
    if (!me.to_prefetch.empty() || !me.to_forget.empty()) {
      std::vector<Config> prefetch = std::move(me.to_prefetch);
      std::vector<Config> forget = std::move(me.to_forget);
      me.to_prefetch.clear();
      me.to_forget.clear();
      lock.unlock();
      if (!forget.empty()) me.device->Forget(forget);
      if (!prefetch.empty()) me.device->Prefetch(prefetch);
      lock.lock();
      continue;
    }
    Config config;
    if (!me.queue.empty()) {
      config = std::move(me.queue.front());
      me.queue.pop_front();
    } else if (victim != nullptr && !victim->queue.empty()) {
      config = std::move(victim->queue.back());
      victim->queue.pop_back();
      victim->to_forget.push_back(config);
    } else {
      continue;
    }
    me.busy = true;
    const Millis best = best_;
    lock.unlock();
    if (best.count() > 0) me.device->NoteBest(best);
    absl::StatusOr<Measurement> m = me.device->Evaluate(config);
    if (m.ok()) m->conditions.set_device(me.device->info().id);
    lock.lock();
    me.busy = false;
    if (m.ok() && m->ok() && (best_.count() == 0 || m->time < best_)) best_ = m->time;
    if (known_.count(config) != 0) done_.insert_or_assign(config, std::move(m));
    cv_.notify_all();
  }
}

void DeviceGroup::Drain(std::unique_lock<std::mutex>& lock) {
  for (auto& m : members_) {
    for (Config& c : m->queue) {
      m->to_forget.push_back(c);
      known_.erase(c);
    }
    m->queue.clear();
  }
  cv_.notify_all();
  cv_.wait(lock, [&] {
    return std::none_of(members_.begin(), members_.end(), [](const auto& m) {
      return m->busy || !m->to_forget.empty() || !m->to_prefetch.empty();
    });
  });
}

absl::StatusOr<std::vector<Measurement>> DeviceGroup::Remeasure(
    const std::vector<Config>& configs) {
  std::unique_lock<std::mutex> lock(mu_);
  Drain(lock);
  // The members are idle (and stay so: nothing is queued), so the first
  // one can be driven from this thread.
  Device& first = *members_.front()->device;
  lock.unlock();
  absl::StatusOr<std::vector<Measurement>> out = first.Remeasure(configs);
  if (out.ok()) {
    for (Measurement& m : *out) m.conditions.set_device(first.info().id);
  }
  return out;
}

}  // namespace ktune
