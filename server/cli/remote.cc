// ktune --server ADDR COMMAND: the same commands against a ktuned daemon,
// with the same flags and output as the local ones.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "ktune/v1/tuner.grpc.pb.h"
#include "server/cli/common.h"
#include "server/common/convert.h"
#include "server/runner/runner.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/session/job.h"

namespace ktune::cli {
namespace {

constexpr double kDefaultTimeoutS = 30;

constexpr double kStreamTimeoutS = 24 * 3600;

struct Connection {
  std::string address;
  std::unique_ptr<v1::Tuner::Stub> stub;
  std::string token;
  double timeout_s = kDefaultTimeoutS;
};

absl::StatusOr<Connection> Connect(const Args& args) {
  Connection c;
  c.address = *args.Get("server");
  if (c.address.empty()) return absl::InvalidArgumentError("--server: empty address");
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

void Setup(grpc::ClientContext& ctx, const Connection& c, double seconds) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(static_cast<std::int64_t>(seconds * 1e6)));
  if (!c.token.empty()) ctx.AddMetadata("authorization", "Bearer " + c.token);
}

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
  const bool tty = isatty(2) != 0;
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
    } else if (tty && ev.event_case() == v1::JobEvent::kProgress) {
      std::fprintf(stderr, "\r\033[Kktune: %lld",
                   static_cast<long long>(ev.progress().evaluations()));
      if (ev.progress().max_evaluations() > 0) {
        std::fprintf(stderr, " / %lld", static_cast<long long>(ev.progress().max_evaluations()));
      }
      std::fprintf(stderr, " evaluations");
    }
  }
  if (tty && !print) std::fputs("\r\033[K", stderr);
  *rpc = reader->Finish();
  if (!rpc->ok()) return absl::UnknownError("rpc");
  return state;
}

std::optional<Failure> RemoteTune(const Connection& c, const Args& args, int* exit_code) {
  v1::JobSpec spec;
  if (!args.positional().empty()) {
    const std::string& path = args.positional()[0];
    absl::StatusOr<v1::JobSpec> loaded = LoadJobSpecFile(path);
    if (!loaded.ok()) return InvalidInput(loaded.status());
    spec = *std::move(loaded);
    // The daemon cannot read this machine's files: the sources go inline.
    if (absl::Status st = InlineFiles(spec, DirOf(path)); !st.ok()) {
      return Failure{kExitInvalidInput, StrCat(path, ": ", st.message())};
    }
  }
  if (auto f = ApplyTuneFlags(args, spec)) return f;
  if (auto d = args.Get("device")) {
    spec.mutable_device()->clear_devices();
    spec.mutable_device()->add_devices(*d);
  }
  absl::StatusOr<std::optional<std::int64_t>> priority = args.GetInt("priority", -1000, 1000);
  if (!priority.ok()) return InvalidInput(priority.status());

  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_priority(static_cast<std::int32_t>(priority->value_or(0)));
  v1::SubmitJobResponse resp;
  {
    grpc::ClientContext ctx;
    Setup(ctx, c, c.timeout_s);
    grpc::Status s = c.stub->SubmitJob(&ctx, req, &resp);
    if (!s.ok()) return RpcFailure(c, s);
  }
  std::fprintf(stderr, "ktune: job %s %s on %s (%s)\n", resp.job_id().c_str(),
               resp.resumed() ? "resumed" : "queued", c.address.c_str(),
               resp.job().device().name().c_str());
  const bool wait = args.Has("wait") || args.Has("emit-header") || args.Has("emit-json");
  if (!wait) {
    if (args.Has("json")) {
      Json out = Json::MakeObject();
      out.Set("job_id", resp.job_id());
      out.Set("state", JobStateName(JobStateFromProto(resp.job().state())));
      out.Set("resumed", resp.resumed());
      std::cout << out.Dump() << "\n";
    } else {
      std::cout << resp.job_id() << "\n";
    }
    *exit_code = kExitOk;
    return std::nullopt;
  }
  grpc::Status rpc;
  absl::StatusOr<v1::JobState> last = Follow(c, resp.job_id(), false, false, false, &rpc);
  if (!last.ok()) return RpcFailure(c, rpc);
  absl::StatusOr<v1::Job> job = FetchJob(c, resp.job_id(), false, &rpc);
  if (!job.ok()) return RpcFailure(c, rpc);
  const TuneSummary summary = SummaryOf(*job);
  std::fprintf(stderr, "ktune: job %s %s after %lld evaluations%s%s\n", job->id().c_str(),
               JobStateName(summary.state), static_cast<long long>(summary.evaluations),
               job->message().empty() ? "" : ": ", job->message().c_str());
  PrintTuneSummary(summary, args.Has("json"));
  if (summary.state != JobState::kSucceeded) {
    *exit_code = kExitError;
    return std::nullopt;
  }
  if (auto f = EmitResults(args, summary)) return f;
  *exit_code = kExitOk;
  return std::nullopt;
}

std::optional<Failure> RemoteBest(const Connection& c, const Args& args, int* exit_code) {
  std::optional<std::string> kernel = args.Get("kernel");
  if (!kernel || kernel->empty()) {
    return Failure{kExitInvalidInput, "ktune best: --kernel NAME is required"};
  }
  v1::GetBestRequest req;
  req.set_kernel(*kernel);
  if (auto d = args.Get("device")) req.set_device(*d);
  if (auto h = args.Get("source-hash")) req.set_source_hash(*h);
  if (auto p = args.Get("problem")) {
    absl::StatusOr<Problem> parsed = ParseProblem(*p);
    if (!parsed.ok()) return InvalidInput(parsed.status());
    for (const auto& [name, v] : *parsed) (*req.mutable_problem())[name] = v;
  }
  if (args.Has("objective")) {
    return Failure{kExitInvalidInput,
                   "--objective: not available with --server (the daemon "
                   "answers the time objective, or the only one stored)"};
  }
  req.set_exact_only(args.Has("exact"));
  v1::GetBestResponse resp;
  grpc::ClientContext ctx;
  Setup(ctx, c, c.timeout_s);
  grpc::Status s = c.stub->GetBest(&ctx, req, &resp);
  if (!s.ok()) return RpcFailure(c, s);
  BestMatchNote note;
  switch (resp.match()) {
    case v1::GetBestResponse::NEAREST_PROBLEM: note.match = "nearest_problem"; break;
    case v1::GetBestResponse::SAME_ARCHITECTURE: note.match = "same_architecture"; break;
    default: note.match = "exact"; break;
  }
  note.source_differs = resp.source_differs();
  note.distance = resp.problem_distance();
  const std::vector<BestMatchNote> notes = {note};
  const BestRecord best = BestFromProto(resp);
  PrintBest(*kernel, {best}, &notes, args.Has("json"));
  if (args.Has("emit-header") || args.Has("emit-json")) {
    TuneSummary summary;
    summary.job_id = best.job_id;
    summary.kernel = best.kernel_name;
    summary.device = best.device;
    summary.problem = best.problem;
    StoredMeasurement m;
    m.key = best.key;
    m.config_json = best.config_json;
    m.measurement.time = Millis(best.time_ms);
    m.objective = best.objective_value;
    summary.best = m;
    summary.objective_id = best.objective;
    if (auto f = EmitResults(args, summary, note.match)) return f;
  }
  *exit_code = kExitOk;
  return std::nullopt;
}

}  // namespace

std::optional<Failure> RunRemote(const std::string& command, const Args& args, int* exit_code) {
  absl::StatusOr<Connection> connected = Connect(args);
  if (!connected.ok()) return InvalidInput(connected.status());
  const Connection& c = *connected;
  const bool json = args.Has("json");
  grpc::Status rpc;
  if (command == "tune") return RemoteTune(c, args, exit_code);
  if (command == "best") return RemoteBest(c, args, exit_code);
  if (command == "jobs") {
    std::vector<JobRecord> jobs;
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    do {
      grpc::ClientContext ctx;
      Setup(ctx, c, c.timeout_s);
      v1::ListJobsResponse resp;
      rpc = c.stub->ListJobs(&ctx, req, &resp);
      if (!rpc.ok()) return RpcFailure(c, rpc);
      for (const v1::Job& j : resp.jobs()) jobs.push_back(JobFromProto(j));
      req.set_page_token(resp.next_page_token());
    } while (!req.page_token().empty());
    PrintJobs(jobs, json);
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (command == "show" || command == "watch" || command == "cancel") {
    if (args.positional().empty()) {
      return Failure{kExitInvalidInput,
                     StrCat("ktune ", command, ": give a JOB id (see ktune jobs)")};
    }
    const std::string& id = args.positional()[0];
    if (command == "show") {
      absl::StatusOr<v1::Job> job = FetchJob(c, id, true, &rpc);
      if (!job.ok()) return RpcFailure(c, rpc);
      std::vector<StoredMeasurement> ms;
      for (const v1::MeasurementRecord& m : job->measurements())
        ms.push_back(MeasurementFromProto(m));
      PrintShow(JobFromProto(*job), ms, json);
      *exit_code = kExitOk;
      return std::nullopt;
    }
    if (command == "watch") {
      absl::StatusOr<v1::JobState> last = Follow(c, id, args.Has("from-start"), true, json, &rpc);
      if (!last.ok()) return RpcFailure(c, rpc);
      *exit_code = *last == v1::SUCCEEDED ? kExitOk : kExitError;
      return std::nullopt;
    }
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    grpc::ClientContext ctx;
    Setup(ctx, c, c.timeout_s);
    rpc = c.stub->CancelJob(&ctx, req, &job);
    if (!rpc.ok()) return RpcFailure(c, rpc);
    if (json) {
      std::cout << JobToJson(JobFromProto(job)).Dump() << "\n";
    } else {
      std::cout << job.id() << " " << JobStateName(JobStateFromProto(job.state())) << "\n";
    }
    *exit_code = kExitOk;
    return std::nullopt;
  }
  if (command == "devices") {
    v1::ListDevicesResponse resp;
    grpc::ClientContext ctx;
    Setup(ctx, c, c.timeout_s);
    rpc = c.stub->ListDevices(&ctx, v1::ListDevicesRequest(), &resp);
    if (!rpc.ok()) return RpcFailure(c, rpc);
    if (json) {
      Json out = Json::MakeObject();
      Json list = Json::MakeArray();
      for (const v1::DeviceInfo& d : resp.devices()) list.Push(DeviceToJson(DeviceFromProto(d)));
      out.Set("devices", std::move(list));
      std::cout << out.Dump() << "\n";
    } else {
      std::printf("%-40s  %-28s  %-6s  %10s  %4s  %s\n", "ID", "NAME", "ARCH", "MEMORY", "SMS",
                  "UUID");
      for (const v1::DeviceInfo& d : resp.devices()) {
        std::printf("%-40s  %-28s  %-6s  %7lld MiB  %4d  %s\n", d.id().c_str(), d.name().c_str(),
                    d.architecture().c_str(), static_cast<long long>(d.memory_bytes() >> 20),
                    d.multiprocessors(), d.uuid().c_str());
      }
    }
    *exit_code = kExitOk;
    return std::nullopt;
  }
  return Failure{kExitInvalidInput, StrCat("ktune ", command, ": not available with --server")};
}

}  // namespace ktune::cli
