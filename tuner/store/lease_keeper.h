// Keeps a running job's lease (Store::RenewLease) alive from a thread of
// its own, so that a job run outside a daemon (`ktune tune --local`) on a
// store with leases (PostgreSQL) stays its process's for as long as the
// process lives, and reads as interrupted soon after it dies, on any host.
#ifndef KTUNE_TUNER_STORE_LEASE_KEEPER_H_
#define KTUNE_TUNER_STORE_LEASE_KEEPER_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "tuner/store/store.h"

namespace ktune {

// Not copyable. Renews the lease of job `job_id` in the store `locator`
// names, through a connection of its own, every third of `lease`, from
// construction until destruction. A renewal that fails for want of the
// job running here (not started yet, ended) is not an error; one that
// fails otherwise (the database unreachable) is said once on stderr and
// retried at the next period.
class LeaseKeeper {
 public:
  LeaseKeeper(std::string locator, std::string job_id, std::chrono::milliseconds lease = kRunLease);
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;
  ~LeaseKeeper();

  // Renewals made so far (for tests).
  int renewals() const;

 private:
  void Loop();
  // One renewal, opening the connection first when needed.
  void RenewOnce(std::unique_ptr<Store>& store, bool& complained);

  const std::string locator_;
  const std::string job_id_;
  const std::chrono::milliseconds lease_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int renewals_ = 0;
  std::thread thread_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_LEASE_KEEPER_H_
