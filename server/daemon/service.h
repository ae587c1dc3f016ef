// The ktune.v1.Tuner service on gRPC's callback API. Handlers never block:
// work that touches the store or the scheduler runs on an Asio pool and
// finishes the call from there; a cached GetBest answer is sent at once.
// Every call must carry the bearer token when the daemon has one.
#ifndef KTUNE_SERVER_DAEMON_SERVICE_H_
#define KTUNE_SERVER_DAEMON_SERVICE_H_

#include <boost/asio/thread_pool.hpp>
#include <string>

#include "ktune/v1/tuner.grpc.pb.h"
#include "server/daemon/scheduler.h"

namespace ktune {

class TunerService final : public v1::Tuner::CallbackService {
 public:
  // `token`: the bearer token every call must present ("authorization:
  // Bearer TOKEN" metadata); empty: none asked.
  TunerService(Scheduler& scheduler, std::string token, int rpc_threads);
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
  grpc::ServerUnaryReactor* GetBest(grpc::CallbackServerContext* ctx,
                                    const v1::GetBestRequest* request,
                                    v1::GetBestResponse* response) override;
  grpc::ServerUnaryReactor* ListDevices(grpc::CallbackServerContext* ctx,
                                        const v1::ListDevicesRequest* request,
                                        v1::ListDevicesResponse* response) override;

  // Waits for the work in flight (after the server has shut down).
  void Drain();

 private:
  bool Authorized(grpc::CallbackServerContext* ctx) const;

  Scheduler& scheduler_;
  std::string token_;
  boost::asio::thread_pool pool_;
};

// absl and gRPC share the canonical status codes.
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_SERVICE_H_
