#include "server/cli/remote.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "server/cli/progress_line.h"
#include "server/common/address.h"
#include "server/common/convert.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"

namespace ktune::cli {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED: return "cancelled";
    case grpc::StatusCode::INVALID_ARGUMENT: return "invalid argument";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "deadline exceeded";
    case grpc::StatusCode::NOT_FOUND: return "not found";
    case grpc::StatusCode::ALREADY_EXISTS: return "already exists";
    case grpc::StatusCode::PERMISSION_DENIED: return "permission denied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "resource exhausted";
    case grpc::StatusCode::FAILED_PRECONDITION: return "failed precondition";
    case grpc::StatusCode::UNAVAILABLE: return "unavailable";
    case grpc::StatusCode::UNAUTHENTICATED: return "unauthenticated";
    default: return "error";
  }
}

}  // namespace

absl::StatusOr<Connection> Connect(const Args& args) {
  Connection c;
  c.address = *args.Get("server");
  if (absl::Status s = CheckServerAddress(c.address); !s.ok()) {
    return absl::InvalidArgumentError(StrCat("--server: ", s.message()));
  }
  absl::StatusOr<std::optional<double>> timeout = args.GetDouble("timeout", 0.001);
  if (!timeout.ok()) return timeout.status();
  if (*timeout) c.timeout_s = **timeout;
  if (auto f = args.Get("token-file")) {
    absl::StatusOr<std::string> t = ReadFileContents(*f);
    if (!t.ok()) return absl::InvalidArgumentError(StrCat("--token-file: ", t.status().message()));
    c.token = std::string(StripSpace(*t));
    if (c.token.empty())
      return absl::InvalidArgumentError(StrCat("--token-file: ", *f, " is empty"));
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (args.Has("tls-ca") || args.Has("tls-cert")) {
    grpc::SslCredentialsOptions ssl;
    auto read = [&](const char* flag, std::string* out) -> absl::Status {
      if (auto f = args.Get(flag)) {
        absl::StatusOr<std::string> pem = ReadFileContents(*f);
        if (!pem.ok())
          return absl::InvalidArgumentError(StrCat("--", flag, ": ", pem.status().message()));
        *out = *pem;
      }
      return absl::OkStatus();
    };
    if (absl::Status s = read("tls-ca", &ssl.pem_root_certs); !s.ok()) return s;
    if (absl::Status s = read("tls-cert", &ssl.pem_cert_chain); !s.ok()) return s;
    if (absl::Status s = read("tls-key", &ssl.pem_private_key); !s.ok()) return s;
    if (args.Has("tls-cert") != args.Has("tls-key")) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
    }
    creds = grpc::SslCredentials(ssl);
  }
  c.stub = v1::Tuner::NewStub(grpc::CreateChannel(c.address, creds));
  return c;
}

std::string DefaultClientName() {
  std::string user;
  if (const char* u = std::getenv("USER"); u != nullptr && *u != '\0') {
    user = u;
  } else if (const passwd* pw = getpwuid(getuid()); pw != nullptr) {
    user = pw->pw_name;
  } else {
    user = std::to_string(getuid());
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return StrCat(user, "@", host);
}

void Setup(grpc::ClientContext& ctx, const Connection& c, double seconds) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<std::int64_t>(seconds * 1e6)));
  if (!c.token.empty()) ctx.AddMetadata("authorization", "Bearer " + c.token);
}

Failure RpcFailure(const Connection& c, const grpc::Status& s) {
  const int code =
      s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ? kExitInvalidInput : kExitError;
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    return Failure{code, StrCat("cannot reach ktuned at ", c.address, ": ", s.error_message())};
  }
  return Failure{code, StrCat(c.address, ": ", CodeName(s.error_code()), ": ", s.error_message())};
}

TuneSummary SummaryOf(const v1::Job& job) {
  TuneSummary s;
  s.job_id = job.id();
  s.kernel = job.kernel();
  s.device = DeviceFromProto(job.device());
  for (const auto& [name, v] : job.problem()) s.problem[name] = v;
  s.strategy = job.strategy();
  s.evaluations = job.progress().evaluations();
  for (const auto& [name, n] : job.progress().status_counts()) {
    if (std::optional<CandidateStatus> st = ParseCandidateStatus(name)) {
      s.status_counts[static_cast<std::size_t>(*st)] = n;
    }
  }
  if (job.has_best() && job.best().has_time_ms()) s.best = MeasurementFromProto(job.best());
  if (!job.spec().objective().expression().empty()) {
    s.objective_id = job.spec().objective().expression();
    s.objective_name =
        job.spec().objective().name().empty() ? s.objective_id : job.spec().objective().name();
  }
  s.state = JobStateFromProto(job.state());
  s.end_reason = job.message();
  return s;
}

absl::StatusOr<v1::Job> FetchJob(const Connection& c, const std::string& id, bool measurements,
                                 grpc::Status* rpc) {
  grpc::ClientContext ctx;
  Setup(ctx, c, c.timeout_s);
  v1::GetJobRequest req;
  req.set_job_id(id);
  req.set_include_measurements(measurements);
  v1::Job job;
  *rpc = c.stub->GetJob(&ctx, req, &job);
  if (!rpc->ok()) return absl::UnknownError("rpc");
  return job;
}

namespace {

// What the job's events say of its progress, as a local run's Progress:
// evaluations and budgets from progress events, the best from new bests,
// and the rate over the evaluations made since the follow began.
void FollowProgress(const v1::JobEvent& ev, std::chrono::steady_clock::time_point start,
                    Progress* p, bool* seen) {
  if (ev.event_case() == v1::JobEvent::kNewBest) {
    const StoredMeasurement best = MeasurementFromProto(ev.new_best());
    p->best_time_ms = best.measurement.time.count();
    p->best_key = best.key;
    return;
  }
  if (ev.event_case() != v1::JobEvent::kProgress) return;
  const v1::Progress& in = ev.progress();
  if (!*seen) p->replayed = in.evaluations();  // made before the follow
  *seen = true;
  p->evaluations = in.evaluations();
  p->max_evaluations = in.max_evaluations();
  p->elapsed = Millis(in.elapsed_s() * 1e3);
  p->max_time = Millis(in.max_time_s() * 1e3);
  p->wall = std::chrono::steady_clock::now() - start;
}

}  // namespace

// Follows a job's events to the end. With `print`, each event is a line
// (JSON with --json). Returns the last state seen.
absl::StatusOr<v1::JobState> Follow(const Connection& c, const std::string& id, bool from_start,
                                    bool print, bool json, grpc::Status* rpc) {
  grpc::ClientContext ctx;
  Setup(ctx, c, kStreamTimeoutS);
  v1::WatchJobRequest req;
  req.set_job_id(id);
  req.set_from_start(from_start);
  std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader = c.stub->WatchJob(&ctx, req);
  v1::JobEvent ev;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  // Unprinted, the job's progress is the local run's line, from its events.
  ProgressLine line(UINT64_MAX);
  Progress progress;
  bool seen_progress = false;
  const auto start = std::chrono::steady_clock::now();
  while (reader->Read(&ev)) {
    if (ev.event_case() == v1::JobEvent::kState) state = ev.state();
    if (print && json) {
      Json j = Json::MakeObject();
      j.Set("job_id", ev.job_id());
      switch (ev.event_case()) {
        case v1::JobEvent::kState:
          j.Set("state", JobStateName(JobStateFromProto(ev.state())));
          break;
        case v1::JobEvent::kMeasurement:
          j.Set("measurement", MeasurementToJson(MeasurementFromProto(ev.measurement())));
          break;
        case v1::JobEvent::kNewBest:
          j.Set("new_best", MeasurementToJson(MeasurementFromProto(ev.new_best())));
          break;
        case v1::JobEvent::kProgress: {
          Json p = Json::MakeObject();
          p.Set("evaluations", static_cast<std::int64_t>(ev.progress().evaluations()));
          p.Set("max_evaluations", static_cast<std::int64_t>(ev.progress().max_evaluations()));
          j.Set("progress", std::move(p));
          break;
        }
        default: continue;
      }
      std::cout << j.Dump() << "\n" << std::flush;
    } else if (print) {
      switch (ev.event_case()) {
        case v1::JobEvent::kState:
          std::cout << "state     " << JobStateName(JobStateFromProto(ev.state())) << "\n";
          break;
        case v1::JobEvent::kMeasurement: {
          const StoredMeasurement m = MeasurementFromProto(ev.measurement());
          std::printf("%6lld  %-32s  %-22s  %s\n", static_cast<long long>(m.sequence),
                      m.key.c_str(), CandidateStatusName(m.measurement.status),
                      m.measurement.ok() ? FormatMs(m.measurement.time.count()).c_str() : "-");
          break;
        }
        case v1::JobEvent::kNewBest: {
          const StoredMeasurement m = MeasurementFromProto(ev.new_best());
          std::cout << "new best  " << m.key << "  " << FormatMs(m.measurement.time.count())
                    << "\n";
          break;
        }
        default: break;
      }
      std::cout << std::flush;
    } else {
      FollowProgress(ev, start, &progress, &seen_progress);
      if (ev.event_case() == v1::JobEvent::kProgress) line.Update(progress);
    }
  }
  line.Finish();
  *rpc = reader->Finish();
  if (!rpc->ok()) return absl::UnknownError("rpc");
  return state;
}

}  // namespace ktune::cli
