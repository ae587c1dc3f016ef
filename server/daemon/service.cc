#include "server/daemon/service.h"

#include <array>
#include <boost/asio/post.hpp>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "server/daemon/token.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

constexpr char kUnauthenticated[] =
    "this daemon requires a bearer token (authorization: Bearer TOKEN; ktune --token-file)";

// Runs `work` on the pool and finishes the call with its status; the
// response pointer is filled on success.
template <typename Response, typename Work>
grpc::ServerUnaryReactor* Async(grpc::CallbackServerContext* ctx, boost::asio::thread_pool& pool,
                                Response* response, Work work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  boost::asio::post(pool, [reactor, response, work = std::move(work)]() mutable {
    auto result = work();
    const absl::Status status = result.status();
    if (status.ok()) *response = *std::move(result);
    reactor->Finish(ToGrpc(status));
  });
  return reactor;
}

// Streams one job's events; the scheduler delivers them from its threads.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobEvent>, public EventSink {
 public:
  // `metrics` (may be null) counts the stream from here until OnDone.
  WatchReactor(Scheduler& scheduler, DaemonMetrics* metrics)
      : scheduler_(scheduler), metrics_(metrics) {
    if (metrics_ != nullptr) metrics_->WatchOpened();
  }

  // Owned through shared_ptrs (self_ and the scheduler's subscriptions):
  // gRPC needs it until OnDone, a scheduler thread may still hold it a
  // moment longer; the last owner deletes it.
  void Deliver(const v1::JobEvent& event, bool last) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_.push_back(event);
    last_queued_ = last_queued_ || last;
    if (!writing_) WriteNext();
  }

  void FinishWith(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.pop_front();
    writing_ = false;
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke"));
      }
      return;
    }
    if (!finished_) WriteNext();
  }

  void OnCancel() override { FinishWith(grpc::Status::CANCELLED); }

  void OnDone() override {
    scheduler_.Unwatch(this);
    if (metrics_ != nullptr) metrics_->WatchClosed();
    // Unwatch removed the sink from live jobs; a scheduler thread that had
    // already taken it finds finished_ set (under mu_) and returns.
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = true;
    }
    if (self_ == nullptr) {
      delete this;
      return;
    }
    std::shared_ptr<WatchReactor> keep = std::move(self_);
    // `keep` may delete this on leaving; nothing touches a member after.
  }

  std::shared_ptr<EventSink> self() {
    self_ = std::shared_ptr<WatchReactor>(this);
    return self_;
  }

 private:
  std::shared_ptr<WatchReactor> self_;

  // REQUIRES: mu_ held, !writing_.
  void WriteNext() {
    if (pending_.empty()) {
      if (last_queued_ && !finished_) {
        finished_ = true;
        Finish(grpc::Status::OK);
      }
      return;
    }
    writing_ = true;
    StartWrite(&pending_.front());
  }

  Scheduler& scheduler_;
  DaemonMetrics* const metrics_;
  std::mutex mu_;
  std::deque<v1::JobEvent> pending_;
  bool writing_ = false;
  bool last_queued_ = false;
  bool finished_ = false;
};

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

TunerService::TunerService(Scheduler& scheduler, std::string token, int rpc_threads,
                           DaemonMetrics* metrics)
    : scheduler_(scheduler),
      token_(std::move(token)),
      metrics_(metrics),
      pool_(static_cast<std::size_t>(std::max(1, rpc_threads))) {}

TunerService::~TunerService() { Drain(); }

void TunerService::Drain() { pool_.join(); }

bool TunerService::Authorized(grpc::CallbackServerContext* ctx) const {
  if (token_.empty()) return true;
  const auto& md = ctx->client_metadata();
  auto range = md.equal_range("authorization");
  bool ok = false;
  for (auto it = range.first; it != range.second; ++it) {
    ok = BearerMatches(std::string_view(it->second.data(), it->second.size()), token_) || ok;
  }
  return ok;
}

#define KTUNE_CHECK_AUTH(ctx)                                                       \
  do {                                                                              \
    if (!Authorized(ctx)) {                                                         \
      grpc::ServerUnaryReactor* r = (ctx)->DefaultReactor();                        \
      r->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticated)); \
      return r;                                                                     \
    }                                                                               \
  } while (false)

namespace {

// Who a call is from, for the per-client limits: a verified client
// certificate's name cannot be claimed by another, so it wins over the
// name a client gives itself; a client that gives none is its peer's
// address, without the port (a new port each connection).
struct ClientIdentity {
  std::string verified;
  std::string peer;

  explicit ClientIdentity(const grpc::CallbackServerContext& ctx) {
    const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      for (const grpc::string_ref& name : auth->FindPropertyValues("x509_common_name")) {
        verified.assign(name.data(), name.size());
        break;
      }
    }
    peer = ctx.peer();
    if (peer.rfind("unix:", 0) == 0) {
      peer = "unix";
    } else if (const std::size_t colon = peer.rfind(':'); colon != std::string::npos) {
      peer.resize(colon);
    }
  }
  std::string Name(const std::string& declared) const {
    if (!verified.empty()) return verified;
    return declared.empty() ? peer : declared;
  }
};

}  // namespace

grpc::ServerUnaryReactor* TunerService::SubmitJob(grpc::CallbackServerContext* ctx,
                                                  const v1::SubmitJobRequest* request,
                                                  v1::SubmitJobResponse* response) {
  KTUNE_CHECK_AUTH(ctx);
  std::string client = ClientIdentity(*ctx).Name(request->client());
  return Async(ctx, pool_, response, [this, request, client = std::move(client)] {
    if (client == request->client()) return scheduler_.Submit(*request);
    v1::SubmitJobRequest named = *request;
    named.set_client(client);
    return scheduler_.Submit(named);
  });
}

grpc::ServerUnaryReactor* TunerService::GetJob(grpc::CallbackServerContext* ctx,
                                               const v1::GetJobRequest* request,
                                               v1::Job* response) {
  KTUNE_CHECK_AUTH(ctx);
  return Async(ctx, pool_, response, [this, request] { return scheduler_.GetJob(*request); });
}

grpc::ServerUnaryReactor* TunerService::ListJobs(grpc::CallbackServerContext* ctx,
                                                 const v1::ListJobsRequest* request,
                                                 v1::ListJobsResponse* response) {
  KTUNE_CHECK_AUTH(ctx);
  return Async(ctx, pool_, response, [this, request] { return scheduler_.ListJobs(*request); });
}

grpc::ServerUnaryReactor* TunerService::CancelJob(grpc::CallbackServerContext* ctx,
                                                  const v1::CancelJobRequest* request,
                                                  v1::Job* response) {
  KTUNE_CHECK_AUTH(ctx);
  return Async(ctx, pool_, response, [this, request] { return scheduler_.Cancel(*request); });
}

bool BestAnswers::Find(const std::string& request, std::uint64_t generation,
                       grpc::ByteBuffer* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = answers_.find(request);
  if (it == answers_.end() || it->second.first != generation) return false;
  *out = it->second.second;  // shares the slices
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void BestAnswers::Put(const std::string& request, std::uint64_t generation,
                      const grpc::ByteBuffer& answer) {
  if (request.size() > kMaxRequestBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (answers_.size() >= kMaxEntries) answers_.clear();
  answers_.insert_or_assign(request, std::make_pair(generation, answer));
}

bool BestAnswers::Join(const std::string& request, std::uint64_t generation, BestWaiter waiter) {
  if (request.size() > kMaxRequestBytes) return true;  // read alone
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<BestWaiter>& waiters = reading_[{request, generation}];
  waiters.push_back(waiter);
  return waiters.size() == 1;
}

std::vector<BestWaiter> BestAnswers::Complete(const std::string& request, std::uint64_t generation,
                                              const grpc::ByteBuffer* answer,
                                              std::uint64_t read_generation) {
  if (answer != nullptr) Put(request, read_generation, *answer);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reading_.find({request, generation});
  if (it == reading_.end()) return {};
  std::vector<BestWaiter> waiters = std::move(it->second);
  reading_.erase(it);
  return waiters;
}

grpc::ServerUnaryReactor* TunerService::GetBest(grpc::CallbackServerContext* ctx,
                                                const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  KTUNE_CHECK_AUTH(ctx);
  const auto arrived = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string bytes;
  std::vector<grpc::Slice> slices;
  if (const grpc::Status dumped = request->Dump(&slices); !dumped.ok()) {
    reactor->Finish(dumped);
    return reactor;
  }
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  scheduler_.NoticeOutsideWrites();
  const std::uint64_t generation = scheduler_.best_generation();
  if (best_answers_.Find(bytes, generation, response)) {
    reactor->Finish(grpc::Status::OK);
    Served(DaemonMetrics::BestAnswer::kMemory, arrived);
    return reactor;
  }
  const BestWaiter self{reactor, response, arrived};
  ClientIdentity identity(*ctx);  // for tune_on_miss
  // While jobs find new bests every answer goes stale at once: the calls
  // that miss together wait for one read of the store.
  if (!best_answers_.Join(bytes, generation, self)) return reactor;
  boost::asio::post(pool_, [this, self, generation, bytes = std::move(bytes),
                            identity = std::move(identity)] {
    grpc::Status status;
    std::optional<grpc::ByteBuffer> buffer;
    std::uint64_t read_generation = 0;
    v1::GetBestRequest parsed;
    if (!parsed.ParseFromString(bytes)) {
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "GetBestRequest: the request is not a valid message");
    } else if (absl::StatusOr<v1::GetBestResponse> answer =
                   scheduler_.GetBest(parsed, &read_generation, identity.Name(parsed.client()));
               !answer.ok()) {
      status = ToGrpc(answer.status());
    } else {
      const std::string out = answer->SerializeAsString();
      grpc::Slice slice(out);
      buffer.emplace(&slice, 1);
    }
    std::vector<BestWaiter> waiters =
        best_answers_.Complete(bytes, generation, buffer ? &*buffer : nullptr, read_generation);
    if (waiters.empty()) waiters.push_back(self);  // a long request, read alone
    for (const BestWaiter& w : waiters) {
      if (buffer) *w.response = *buffer;  // shares the slices
      w.reactor->Finish(status);
      Served(status.ok() ? DaemonMetrics::BestAnswer::kStore : DaemonMetrics::BestAnswer::kError,
             w.arrived);
    }
  });
  return reactor;
}

grpc::ServerUnaryReactor* TunerService::ListDevices(grpc::CallbackServerContext* ctx,
                                                    const v1::ListDevicesRequest* /*request*/,
                                                    v1::ListDevicesResponse* response) {
  KTUNE_CHECK_AUTH(ctx);
  *response = scheduler_.ListDevices();  // in memory
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(grpc::Status::OK);
  return r;
}

grpc::ServerWriteReactor<v1::JobEvent>* TunerService::WatchJob(grpc::CallbackServerContext* ctx,
                                                               const v1::WatchJobRequest* request) {
  auto* reactor = new WatchReactor(scheduler_, metrics_);
  if (!Authorized(ctx)) {
    reactor->FinishWith(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticated));
    return reactor;
  }
  std::shared_ptr<EventSink> sink = reactor->self();
  // The request is copied: a client that cancels before the pool gets to
  // this finishes the call (OnCancel), and gRPC frees the request with it.
  boost::asio::post(pool_, [this, reactor, request = *request, sink] {
    absl::Status s = scheduler_.Watch(request, sink);
    if (!s.ok()) reactor->FinishWith(ToGrpc(s));
  });
  return reactor;
}

}  // namespace ktune
