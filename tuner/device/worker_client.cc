#include "tuner/device/worker_client.h"

#include <chrono>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Millis m) { return m.count() / 1e3; }

}  // namespace

absl::Status WorkerClient::Start(std::optional<Subprocess> running) {
  if (running.has_value() && !running->Poll().has_value()) {
    worker_.emplace(*std::move(running));
  } else {
    KTUNE_ASSIGN_OR_RETURN(Subprocess started, Subprocess::Start(program_.Argv("measure")));
    worker_.emplace(std::move(started));
  }
  ready_ = false;
  outstanding_ = 0;
  if (bound_ && ++starts_ > 1) ++restarts_;
  v1::WorkerRequest req;
  req.set_init_device(ordinal_);
  if (absl::Status s = worker_->channel().Send(req); !s.ok()) {
    const std::string how = Drop();
    return absl::InternalError(
        StrCat("the measurement worker did not start (", how, "): ", s.message()));
  }
  ++outstanding_;
  return bound_ ? SendSetup() : absl::OkStatus();
}

absl::Status WorkerClient::SendSetup() {
  v1::WorkerRequest req;
  *req.mutable_setup() = setup_;
  if (absl::Status s = worker_->channel().Send(req); !s.ok()) {
    const std::string how = Drop();
    return absl::InternalError(StrCat("the measurement worker died (", how, "): ", s.message()));
  }
  ++outstanding_;
  return absl::OkStatus();
}

std::string WorkerClient::Drop() {
  std::string how = worker_ ? worker_->Kill() : "";
  worker_.reset();
  ready_ = false;
  outstanding_ = 0;
  return how;
}

absl::Status WorkerClient::Bind(const v1::WorkerSetup& setup, ReferenceSource reference) {
  setup_ = setup;
  reference_ = std::move(reference);
  bound_ = true;
  ready_ = false;
  starts_ = 0;
  if (worker_ && !worker_->Poll().has_value()) {
    starts_ = 1;  // this worker serves the job; a new one is a restart
    return SendSetup();
  }
  Drop();
  return Start();
}

absl::Status WorkerClient::AwaitOutstanding(const char* during) {
  while (outstanding_ > 0) {
    v1::WorkerResponse resp;
    absl::Status s = worker_->channel().Receive(&resp, Clock::now() + std::chrono::minutes(10));
    if (!s.ok()) {
      const std::string how = Drop();
      return absl::InternalError(
          StrCat("the measurement worker failed during ", during, " (", how, "): ", s.message()));
    }
    --outstanding_;
    if (!resp.error().empty()) {
      Drop();
      return absl::FailedPreconditionError(StrCat(
          bound_ ? "setting up the GPU failed: " : "opening the GPU failed: ", resp.error()));
    }
  }
  return absl::OkStatus();
}

absl::Status WorkerClient::WaitUntilOpen() {
  if (bound_) return EnsureReady();
  if (!worker_) return Start();
  return AwaitOutstanding("opening the GPU");
}

absl::Status WorkerClient::EnsureReady() {
  // States: no worker; a worker with answers to come (device opened, job
  // set up); a ready worker. A worker that died is replaced.
  const bool alive = worker_ && !worker_->Poll().has_value();
  if (alive && ready_) return absl::OkStatus();
  const auto wait_start = Clock::now();
  if (!alive) {
    Drop();
    KTUNE_RETURN_IF_ERROR(Start());
  }
  KTUNE_RETURN_IF_ERROR(AwaitOutstanding("set-up"));
  ready_ = true;
  KTUNE_ASSIGN_OR_RETURN(const std::optional<v1::WorkerCandidate> reference, reference_());
  if (!reference) {
    setup_wait_ += std::chrono::duration_cast<Millis>(Clock::now() - wait_start);
    return absl::OkStatus();
  }
  v1::WorkerRequest again;
  *again.mutable_candidate() = *reference;
  v1::WorkerResponse resp;
  absl::Status s = worker_->channel().Send(again);
  if (s.ok()) s = worker_->channel().Receive(&resp, Clock::now() + std::chrono::minutes(5));
  if (!s.ok() || !resp.has_measurement() || resp.measurement().status() != v1::OK) {
    const std::string why = !s.ok()                  ? std::string(s.message())
                            : resp.has_measurement() ? resp.measurement().message()
                                                     : resp.error();
    Drop();
    return absl::FailedPreconditionError(
        StrCat("verification: the reference failed to run: ", why));
  }
  setup_wait_ += std::chrono::duration_cast<Millis>(Clock::now() - wait_start);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::WorkerMeasurement>> WorkerClient::Run(
    const v1::WorkerCandidate& candidate, Millis budget, Millis per_launch, Measurement* failure) {
  KTUNE_RETURN_IF_ERROR(EnsureReady());
  v1::WorkerRequest req;
  *req.mutable_candidate() = candidate;
  v1::WorkerResponse resp;
  absl::Status s = worker_->channel().Send(req);
  if (s.ok()) {
    s = worker_->channel().Receive(
        &resp, Clock::now() + std::chrono::duration_cast<Clock::duration>(budget));
  }
  if (!s.ok()) {
    const std::string how = Drop();
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      failure->status = CandidateStatus::kTimeout;
      failure->message = StrCat("no result within ", Seconds(budget), " s (a launch may take ",
                                Seconds(per_launch),
                                " s): the kernel hung or ran too long; the measurement worker "
                                "was killed and restarted");
    } else {
      failure->status = CandidateStatus::kRuntimeFault;
      failure->message = StrCat("the measurement worker died (", how, ") running this candidate");
    }
    return std::optional<v1::WorkerMeasurement>();
  }
  if (!resp.error().empty()) {
    return absl::InternalError(StrCat("measurement worker: ", resp.error()));
  }
  if (!resp.has_measurement() || resp.measurement().id() != candidate.id()) {
    // Its answers no longer match its questions: a new worker is safer.
    const std::string what = resp.has_measurement()
                                 ? StrCat("the answer to candidate ", resp.measurement().id())
                                 : "no measurement";
    const std::string how = Drop();
    failure->status = CandidateStatus::kRuntimeFault;
    failure->message = StrCat("the measurement worker answered out of step (", what, " for ",
                              candidate.id(), "); it was killed (", how, ") and restarted");
    return std::optional<v1::WorkerMeasurement>();
  }
  if (resp.measurement().context_lost()) {
    // It exits by itself; reap it now so the next candidate gets a fresh one.
    Drop();
  }
  return std::optional<v1::WorkerMeasurement>(resp.measurement());
}

}  // namespace ktune
