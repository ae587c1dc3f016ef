// The ktune.v1.Tuner service on gRPC's callback API. Handlers never block:
// work that touches the store or the scheduler runs on an Asio pool and
// finishes the call from there. GetBest, the hot path of applications, is
// served on the raw bytes: a request seen before gets the serialized answer
// it got then, at once, while no stored best has changed (no parsing, no
// copying of messages). Every call must carry the bearer token when the
// daemon has one.
#ifndef KTUNE_SERVER_DAEMON_SERVICE_H_
#define KTUNE_SERVER_DAEMON_SERVICE_H_

#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "server/daemon/metrics.h"
#include "server/daemon/scheduler.h"

namespace ktune {

// A GetBest call waiting for its answer.
struct BestWaiter {
  grpc::ServerUnaryReactor* reactor = nullptr;
  grpc::ByteBuffer* response = nullptr;
  std::chrono::steady_clock::time_point arrived;
};

// GetBest's answers as sent, by the request's bytes; each valid while the
// scheduler's best generation is the one it was read at. Calls that miss
// together share one read of the store. Thread-safe.
class BestAnswers {
 public:
  // Requests longer than this are answered but not remembered (nor
  // shared), and the table is emptied when full: a hostile client cannot
  // grow it.
  static constexpr std::size_t kMaxRequestBytes = 4096;
  static constexpr std::size_t kMaxEntries = 4096;

  bool Find(const std::string& request, std::uint64_t generation, grpc::ByteBuffer* out);
  // Requests answered by Find: from memory, without reading the store.
  std::uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  void Put(const std::string& request, std::uint64_t generation, const grpc::ByteBuffer& answer);

  // Joins the read of `request`'s answer under way for `generation`, or
  // starts one: true when the caller is to read it and then Complete it.
  bool Join(const std::string& request, std::uint64_t generation, BestWaiter waiter);
  // Ends the read Join started: remembers `answer` (if any) as read at
  // `read_generation`, and returns every waiter, the reader first.
  std::vector<BestWaiter> Complete(const std::string& request, std::uint64_t generation,
                                   const grpc::ByteBuffer* answer, std::uint64_t read_generation);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::pair<std::uint64_t, grpc::ByteBuffer>> answers_;
  std::map<std::pair<std::string, std::uint64_t>, std::vector<BestWaiter>> reading_;
  std::atomic<std::uint64_t> hits_{0};
};

class TunerService final
    : public v1::Tuner::WithRawCallbackMethod_GetBest<v1::Tuner::CallbackService> {
 public:
  // `token`: the bearer token every call must present ("authorization:
  // Bearer TOKEN" metadata); empty: none asked. `metrics`, when given,
  // counts GetBest's calls and times them; it must outlive the service.
  TunerService(Scheduler& scheduler, std::string token, int rpc_threads,
               DaemonMetrics* metrics = nullptr);
  ~TunerService() override;

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* request,
                                      v1::SubmitJobResponse* response) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchJobRequest* request) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  // A serialized GetBestRequest in, a serialized GetBestResponse out.
  grpc::ServerUnaryReactor* GetBest(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;

  // Waits for the work in flight (after the server has shut down).
  void Drain();

  // GetBest calls answered from memory.
  std::uint64_t best_answers_remembered() const { return best_answers_.hits(); }

 private:
  bool Authorized(grpc::CallbackServerContext* ctx) const;
  void Served(DaemonMetrics::BestAnswer answer, std::chrono::steady_clock::time_point arrived) {
    if (metrics_ != nullptr) {
      metrics_->GetBestServed(answer, std::chrono::steady_clock::now() - arrived);
    }
  }

  Scheduler& scheduler_;
  std::string token_;
  BestAnswers best_answers_;
  DaemonMetrics* metrics_;
  boost::asio::thread_pool pool_;
};

// absl and gRPC share the canonical status codes.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_SERVICE_H_
