#include "tuner/store/lease_keeper.h"

#include <cstdio>
#include <utility>

namespace ktune {

LeaseKeeper::LeaseKeeper(std::string locator, std::string job_id, std::chrono::milliseconds lease)
    : locator_(std::move(locator)), job_id_(std::move(job_id)), lease_(lease) {
  thread_ = std::thread([this] { Loop(); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int LeaseKeeper::renewals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return renewals_;
}

void LeaseKeeper::Loop() {
  std::unique_ptr<Store> store;
  bool complained = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    RenewOnce(store, complained);
    lock.lock();
    cv_.wait_for(lock, lease_ / 3, [this] { return stop_; });
  }
}

void LeaseKeeper::RenewOnce(std::unique_ptr<Store>& store, bool& complained) {
  absl::Status s;
  if (store == nullptr) {
    absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(locator_, /*create=*/false);
    if (opened.ok()) {
      store = *std::move(opened);
    } else {
      s = opened.status();
    }
  }
  if (store != nullptr) s = store->RenewLease(job_id_, lease_);
  if (s.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++renewals_;
    }
    if (complained) {
      std::fprintf(stderr, "ktune: job %s: its lease is renewed again\n", job_id_.c_str());
    }
    complained = false;
    return;
  }
  if (s.code() == absl::StatusCode::kFailedPrecondition) return;  // not running here (yet)
  if (!complained) {
    std::fprintf(stderr, "ktune: job %s: its lease could not be renewed (%s); retrying\n",
                 job_id_.c_str(), std::string(s.message()).c_str());
  }
  complained = true;
  store.reset();  // a fresh connection next time
}

}  // namespace ktune
