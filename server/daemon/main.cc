// ktuned: the ktune daemon. Serves ktune.v1.Tuner over gRPC (with the
// standard health and reflection services), schedules tuning jobs on the
// devices it is given, keeps its state in the store (a SQLite file; or a
// fleet's PostgreSQL, shared with other daemons), and resumes
// unfinished jobs when restarted.

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/common/flags.h"
#include "server/daemon/http.h"
#include "server/daemon/listen.h"
#include "server/daemon/metrics.h"
#include "server/daemon/scheduler.h"
#include "server/daemon/service.h"
#include "server/runner/runner.h"
#include "server/worker/dispatch.h"
#include "tuner/base/file.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/store/pg.h"
#include "tuner/store/sqlite.h"
#ifdef KTUNE_HAVE_CUDA
#include "tuner/device/cuda_device.h"
#endif

namespace ktune::daemon {
namespace {

using flags::Args;
using flags::CommandSpec;

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitInvalidInput = 2;

const CommandSpec kDaemonCommand{
    "ktuned",
    "ktuned [--listen ADDR] [--db STORE] --device DEVICE [--device DEVICE ...] [flags]",
    "Serves ktune.v1.Tuner over gRPC: tuning jobs from clients (ktune --server ADDR ...),\n"
    "run on the given devices, every measurement kept in the store. With a PostgreSQL\n"
    "store the daemon is one of a fleet: one queue, one set of answers. Listens on\n"
    "127.0.0.1:7070 by default; any other address requires TLS and a token (or --insecure).\n"
    "A job is code that runs on the GPU: only let trusted clients reach the daemon.",
    {{"listen", "ADDR", "host:port to listen on (default 127.0.0.1:7070; port 0 picks one)"},
     {"port-file", "PATH",
      "once listening, write the address (host:port) to PATH, replacing it atomically"},
     {"http", "ADDR",
      "serve the dashboard and Prometheus metrics at http://ADDR/ (host:port; off loopback "
      "the TLS and token rules of --listen apply; default: none)"},
     {"http-port-file", "PATH", "once the dashboard listens, write its host:port to PATH"},
     {"http-max-connections", "N",
      "connections the dashboard serves at once; more wait until one closes (default 256)"},
     {"db", "STORE",
      "a SQLite file, or a fleet's PostgreSQL: postgresql://USER@HOST/DB (password from "
      "PGPASSWORD or ~/.pgpass, never the command line; default: $KTUNE_DB, else ./ktune.db)"},
     {"lease-seconds", "S",
      "fleet: a claimed job's lease; another daemon takes a dead one's job over after it "
      "(default 15)"},
     {"device", "DEVICE",
      "a device to serve: 0, cuda:0, a GPU UUID or sim:FILE (repeatable; "
      "default: every GPU)",
      true},
     {"devices", "LIST", "devices to serve, comma-separated (0,1), or all: every GPU"},
     {"max-running", "N", "jobs running at once (default 4)"},
     {"max-queued", "N", "jobs waiting; more are refused with RESOURCE_EXHAUSTED (default 256)"},
     {"max-jobs-per-client", "N",
      "jobs one client may have queued or running (the whole fleet's, on PostgreSQL; "
      "default: no limit)"},
     {"max-miss-jobs-per-client", "N",
      "jobs GetBest's tune_on_miss may have queued or running for one client (default 4; 0: "
      "never tune on a miss)"},
     {"max-evals", "N", "evaluations per job (default: no limit)"},
     {"max-space", "N", "configurations in a job's space (default: no limit)"},
     {"max-wall-seconds", "S", "wall time per job (default: no limit)"},
     {"max-kernel-seconds", "S", "time per kernel launch (default: the job's own)"},
     {"max-argument-mib", "N", "GPU memory of a job's buffer arguments, MiB (default: no limit)"},
     {"max-request-mib", "N", "size of a SubmitJob request, MiB (default 16)"},
     {"tls-cert", "FILE", "PEM certificate chain: serve TLS"},
     {"tls-key", "FILE", "PEM private key of --tls-cert"},
     {"tls-client-ca", "FILE", "PEM CA: clients must present a certificate it signed (mutual TLS)"},
     {"token-file", "FILE",
      "every call must carry 'authorization: Bearer TOKEN' (this file's text)"},
     {"insecure", "", "allow a non-loopback address without TLS and token (not recommended)"},
     {"sim-speed", "X", "replay simulated devices in real time, X times faster than recorded"},
     {"compile-workers", "N", "NVRTC worker processes per GPU job (default: one per core)"},
     {"rpc-threads", "N", "threads answering calls that read the store (default 2)"},
     {"keepalive-seconds", "S",
      "ping a client connection after S seconds without traffic; one that does not answer "
      "within 20 s (or S, if shorter) is closed with its calls (default 60)"}},
    0};

bool IsLoopback(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address;
  if (const std::size_t colon = address.rfind(':'); colon != std::string::npos) {
    host = address.substr(0, colon);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

absl::StatusOr<std::string> ReadSecret(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileContents(path);
  if (!text.ok())
    return absl::InvalidArgumentError(StrCat("--", flag, ": ", text.status().message()));
  // Warned about rather than refused: secrets mounted by an orchestrator
  // are often group- or world-readable inside a container of one user.
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)) != 0) {
    std::fprintf(stderr,
                 "ktuned: warning: --%s %s is readable by other users (mode %03o); make it "
                 "readable by its owner only: chmod 600 %s\n",
                 flag.c_str(), path.c_str(), static_cast<unsigned>(st.st_mode & 0777),
                 path.c_str());
  }
  return *text;
}

// How callers reach the daemon and prove who they are.
struct Security {
  std::string listen;
  std::string token;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::string http;  // --http: empty, none
  int http_max_connections = 256;
  std::string tls_cert, tls_key;  // PEM, when TLS
  double keepalive_seconds = 60;  // clients that vanish without a word
};

absl::StatusOr<Security> SecurityFromArgs(const Args& args) {
  Security sec;
  sec.listen = args.Get("listen").value_or("127.0.0.1:7070");
  KTUNE_RETURN_IF_ERROR(CheckListenAddress(sec.listen));
  const bool tls = args.Has("tls-cert") || args.Has("tls-key");
  if (args.Has("tls-cert") != args.Has("tls-key")) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (args.Has("tls-client-ca") && !tls) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (auto f = args.Get("token-file")) {
    KTUNE_ASSIGN_OR_RETURN(const std::string t, ReadSecret("token-file", *f));
    sec.token = std::string(StripSpace(t));
    if (sec.token.empty())
      return absl::InvalidArgumentError(StrCat("--token-file: ", *f, " is empty"));
    if (sec.token.find_first_of(" \t\r\n") != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("--token-file: ", *f, ": the token must be one word"));
    }
  }
  sec.http = args.Get("http").value_or("");
  if (!sec.http.empty()) KTUNE_RETURN_IF_ERROR(CheckHttpAddress(sec.http));
  for (const char* flag : {"http-port-file", "http-max-connections"}) {
    if (sec.http.empty() && args.Has(flag)) {
      return absl::InvalidArgumentError(
          StrCat("--", flag, " is for the dashboard, which is off: add --http ADDR"));
    }
  }
  KTUNE_ASSIGN_OR_RETURN(const std::optional<std::int64_t> http_max,
                         args.GetInt("http-max-connections", 1, 65536));
  if (http_max) sec.http_max_connections = static_cast<int>(*http_max);
  KTUNE_ASSIGN_OR_RETURN(const std::optional<double> keepalive,
                         args.GetDouble("keepalive-seconds", 0.1));
  if (keepalive) sec.keepalive_seconds = *keepalive;
  if (!sec.http.empty() && !IsLoopback(sec.http) && !(tls && !sec.token.empty()) &&
      !args.Has("insecure")) {
    return absl::InvalidArgumentError(
        StrCat("--http ", sec.http,
               ": not a loopback address, so TLS (--tls-cert, --tls-key) and a token "
               "(--token-file) are required, as for --listen: the dashboard shows every job, "
               "and its API what they measured. --insecure overrides this (not recommended)."));
  }
  if (!IsLoopback(sec.listen) && !(tls && !sec.token.empty())) {
    if (!args.Has("insecure")) {
      return absl::InvalidArgumentError(
          StrCat("--listen ", sec.listen,
                 ": not a loopback address, so TLS (--tls-cert, --tls-key) and a token "
                 "(--token-file) are required: a job is code that runs on the GPU. --insecure "
                 "overrides this (not recommended)."));
    }
    std::fprintf(stderr,
                 "ktuned: WARNING: listening on %s without %s (--insecure): whoever reaches this "
                 "port can run code on these GPUs\n",
                 sec.listen.c_str(),
                 tls ? "a token" : (sec.token.empty() ? "TLS or a token" : "TLS"));
  }
  sec.credentials = grpc::InsecureServerCredentials();
  if (!tls) return sec;
  absl::StatusOr<std::string> cert = ReadFileContents(*args.Get("tls-cert"));
  if (!cert.ok())
    return absl::InvalidArgumentError(StrCat("--tls-cert: ", cert.status().message()));
  KTUNE_ASSIGN_OR_RETURN(const std::string key, ReadSecret("tls-key", *args.Get("tls-key")));
  sec.tls_cert = *cert;
  sec.tls_key = key;
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({key, *cert});
  if (auto ca = args.Get("tls-client-ca")) {
    absl::StatusOr<std::string> pem = ReadFileContents(*ca);
    if (!pem.ok()) {
      return absl::InvalidArgumentError(StrCat("--tls-client-ca: ", pem.status().message()));
    }
    ssl.pem_root_certs = *pem;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  sec.credentials = grpc::SslServerCredentials(ssl);
  return sec;
}

// The scheduler's options from the flags: the store, the devices (every
// GPU when none is named) and the daemon's limits.
absl::StatusOr<SchedulerOptions> SchedulerOptionsFromArgs(const Args& args, int* rpc_threads) {
  SchedulerOptions so;
  const char* env_db = std::getenv("KTUNE_DB");
  so.db_path = args.Get("db").value_or(env_db != nullptr && *env_db ? env_db : "ktune.db");
  so.devices = args.GetAll("device");
  if (auto list = args.Get("devices"); list && *list != "all") {
    for (const std::string& d : StrSplit(*list, ',')) {
      if (d.empty())
        return absl::InvalidArgumentError(StrCat("--devices ", *list, ": an empty entry"));
      so.devices.push_back(d);
    }
  }
  so.device_options.worker_program = WorkerExecutable();
  auto read_int = [&](const char* name, std::int64_t min, std::int64_t max,
                      std::int64_t* out) -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(const std::optional<std::int64_t> v, args.GetInt(name, min, max));
    if (v) *out = *v;
    return absl::OkStatus();
  };
  auto read_double = [&](const char* name, double* out) -> absl::Status {
    KTUNE_ASSIGN_OR_RETURN(const std::optional<double> v, args.GetDouble(name, 0));
    if (v) *out = *v;
    return absl::OkStatus();
  };
  std::int64_t running = 4, queued = 256, workers = 0, threads = 2, max_space = 0, argument_mib = 0,
               request_mib = 16, per_client = 0, miss_jobs = 4;
  KTUNE_RETURN_IF_ERROR(read_int("max-running", 1, 1024, &running));
  KTUNE_RETURN_IF_ERROR(read_int("max-jobs-per-client", 1, 1 << 20, &per_client));
  KTUNE_RETURN_IF_ERROR(read_int("max-miss-jobs-per-client", 0, 1 << 20, &miss_jobs));
  KTUNE_RETURN_IF_ERROR(read_int("max-queued", 0, 1 << 20, &queued));
  KTUNE_RETURN_IF_ERROR(read_int("max-evals", 1, INT64_MAX, &so.limits.max_evaluations));
  KTUNE_RETURN_IF_ERROR(read_int("max-space", 1, INT64_MAX, &max_space));
  KTUNE_RETURN_IF_ERROR(read_int("max-argument-mib", 1, INT64_C(1) << 30, &argument_mib));
  KTUNE_RETURN_IF_ERROR(read_int("max-request-mib", 1, 1024, &request_mib));
  KTUNE_RETURN_IF_ERROR(read_int("compile-workers", 1, 1024, &workers));
  KTUNE_RETURN_IF_ERROR(read_int("rpc-threads", 1, 256, &threads));
  KTUNE_RETURN_IF_ERROR(read_double("max-wall-seconds", &so.limits.max_wall_seconds));
  KTUNE_RETURN_IF_ERROR(read_double("max-kernel-seconds", &so.limits.max_kernel_seconds));
  KTUNE_RETURN_IF_ERROR(read_double("sim-speed", &so.device_options.sim_speed));
  double lease = 15;
  KTUNE_RETURN_IF_ERROR(read_double("lease-seconds", &lease));
  if (lease < 0.3) {
    return absl::InvalidArgumentError(
        StrCat("--lease-seconds: ", lease, " is too short (at least 0.3)"));
  }
  if (args.Has("lease-seconds") && !pg::IsUri(so.db_path)) {
    return absl::InvalidArgumentError(
        StrCat("--lease-seconds is for a fleet's daemon (--db postgresql://...); ", so.db_path,
               " is a SQLite file, whose jobs only this daemon runs"));
  }
  so.lease = std::chrono::milliseconds(static_cast<std::int64_t>(lease * 1000));
  so.limits.max_running = static_cast<int>(running);
  so.limits.max_queued = static_cast<int>(queued);
  so.limits.max_jobs_per_client = static_cast<int>(per_client);
  so.limits.max_miss_jobs_per_client = static_cast<int>(miss_jobs);
  so.limits.max_space = static_cast<double>(max_space);
  so.limits.max_argument_bytes = argument_mib << 20;
  so.limits.max_request_bytes = request_mib << 20;
  so.device_options.compile_workers = static_cast<int>(workers);
  *rpc_threads = static_cast<int>(threads);
  if (args.Has("sim-speed") &&
      std::none_of(so.devices.begin(), so.devices.end(),
                   [](const std::string& d) { return d.rfind("sim:", 0) == 0; })) {
    return absl::InvalidArgumentError(
        "--sim-speed sets how fast recorded spaces replay, and no --device sim:FILE is served");
  }
  if (so.devices.empty()) {
#ifdef KTUNE_HAVE_CUDA
    absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
        ListCudaDevices(WorkerProgram{WorkerExecutable()});
    if (!gpus.ok()) {
      return absl::InvalidArgumentError(
          StrCat("no --device given and no GPU found (", gpus.status().message(),
                 "); give --device sim:FILE to serve a recorded space"));
    }
    for (const v1::WorkerDeviceInfo& g : *gpus) so.devices.push_back(StrCat("cuda:", g.ordinal()));
#else
    return absl::InvalidArgumentError(
        "no --device given; this build has no CUDA: give --device sim:FILE");
#endif
  }
  return so;
}

// Writes the address to --port-file: a regular file is replaced atomically
// (a reader never sees half of it); anything else (a pipe) is written to.
absl::Status WritePortFile(const std::string& flag, const std::string& path,
                           const std::string& address) {
  struct stat st;
  const bool regular = stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode);
  const std::string target = regular ? StrCat(path, ".tmp") : path;
  {
    std::ofstream out(target, std::ios::trunc);
    out << address << "\n";
    if (!out.flush()) return absl::InternalError(StrCat("--", flag, ": cannot write ", target));
  }
  if (regular && std::rename(target.c_str(), path.c_str()) != 0) {
    return absl::InternalError(StrCat("--", flag, ": cannot replace ", path));
  }
  return absl::OkStatus();
}

// What /metrics says the daemon was built with and runs on.
BuildInfo BuildInfoOf(const Scheduler& scheduler) {
  BuildInfo b;
  b.version = KTUNE_VERSION;
  const v1::ListDevicesResponse devices = scheduler.ListDevices();
  for (const v1::DeviceInfo& d : devices.devices()) {
    if (!d.simulated() && !d.driver().empty()) {
      b.cuda_driver = d.driver();
      break;
    }
  }
  b.nvrtc = NvrtcVersion();
  return b;
}

// Every client connection holds a file descriptor, and so do each job's
// workers and the store; a shell's soft limit (often 1024) would let a crowd
// of clients starve a running job of descriptors. The soft limit is raised
// to the hard one, which is the administrator's to set (LimitNOFILE= in the
// systemd unit); a low hard limit is named.
void RaiseOpenFileLimit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    // An unlimited hard limit is still bounded by the kernel (fs.nr_open).
    for (const rlim_t want : {rl.rlim_max, static_cast<rlim_t>(1) << 20}) {
      rlimit raised = rl;
      raised.rlim_cur = std::min(want, rl.rlim_max);
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
        rl = raised;
        break;
      }
    }
  }
  if (constexpr rlim_t kLow = 4096; rl.rlim_cur < kLow) {
    std::fprintf(stderr,
                 "ktuned: warning: at most %llu open files (ulimit -n; the hard limit is %llu): "
                 "each client connection and each worker holds some; raise the hard limit "
                 "(LimitNOFILE= in a systemd unit) to %llu or more\n",
                 static_cast<unsigned long long>(rl.rlim_cur),
                 static_cast<unsigned long long>(rl.rlim_max),
                 static_cast<unsigned long long>(kLow));
  }
}

// Serves until SIGTERM or SIGINT. Returns the exit code.
int Serve(const Security& sec, const Args& args, Scheduler& scheduler, TunerService& service,
          DaemonMetrics& metrics, const SchedulerOptions& so) {
  const std::size_t devices = so.devices.size();
  const std::string& db = so.db_path;
  // Caught from here on, before anything says the daemon is up: a SIGTERM
  // that follows --port-file at once is a clean stop, not a kill.
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // One daemon per address: without this, gRPC lets a second process
  // listen on the same port and the kernel splits the calls between them.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A client whose host vanished (no FIN, no RST) would hold its connection,
  // and a WatchJob stream's events, until TCP gives up, hours later: every
  // connection is pinged after --keepalive-seconds of quiet, with or without
  // calls, however often, and closed if the ping is not answered.
  const auto keepalive_ms = static_cast<int>(std::min(sec.keepalive_seconds * 1000, 1e9));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, std::min(keepalive_ms, 20000));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Requests up to twice --max-request-mib reach the service, which names
  // the limit and the flag; larger ones gRPC refuses on its own.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<std::int64_t>(2 * so.limits.max_request_bytes, INT32_MAX)));
  int port = 0;
  builder.AddListeningPort(sec.listen, sec.credentials, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (port == 0 && sec.listen.rfind("unix:", 0) != 0)) {
    // Taken since the look before opening the store, or refused for a
    // reason the look does not see.
    const absl::Status why = ProbeListenAddress(sec.listen);
    std::cerr << "ktuned: "
              << (why.ok() ? StrCat("--listen ", sec.listen, ": cannot listen there")
                           : std::string(why.message()))
              << "\n";
    scheduler.Shutdown();
    return kExitInvalidInput;
  }
  // A fleet's daemon whose database does not answer says so in its health
  // status (grpc.health.v1) until it answers again.
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
    scheduler.OnStoreHealth([health](bool reachable) {
      health->SetServingStatus(reachable);
      std::fprintf(stderr, "ktuned: health: %s\n",
                   reachable ? "serving (the store answers again)"
                             : "not serving (the store does not answer)");
    });
  }
  std::unique_ptr<HttpServer> http;
  if (!sec.http.empty()) {
    HttpOptions ho;
    ho.listen = sec.http;
    ho.token = sec.token;
    ho.tls_cert = sec.tls_cert;
    ho.tls_key = sec.tls_key;
    ho.max_connections = sec.http_max_connections;
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(ho, scheduler, metrics);
    if (!started.ok()) {
      std::cerr << "ktuned: " << started.status().message() << "\n";
      server->Shutdown();
      scheduler.Shutdown();
      return started.status().code() == absl::StatusCode::kInternal ? kExitError
                                                                    : kExitInvalidInput;
    }
    http = *std::move(started);
    // Before the jobs resume (one that cannot serve leaves them as they
    // were) and before --port-file is written (once it is, all answers).
    std::fprintf(stderr, "ktuned: dashboard and metrics on %s://%s/\n",
                 sec.tls_cert.empty() ? "http" : "https", http->address().c_str());
    if (auto path = args.Get("http-port-file")) {
      if (absl::Status s = WritePortFile("http-port-file", *path, http->address()); !s.ok()) {
        std::cerr << "ktuned: " << s.message() << "\n";
      }
    }
  }

  if (absl::Status s = scheduler.Resume(); !s.ok()) {
    std::cerr << "ktuned: " << s.message() << "\n";
    server->Shutdown();
    scheduler.Shutdown();
    return kExitError;
  }
  std::string shown = sec.listen;
  if (const std::size_t colon = sec.listen.rfind(':');
      colon != std::string::npos && sec.listen.rfind("unix:", 0) != 0) {
    shown = StrCat(sec.listen.substr(0, colon), ":", port);
  }
  std::printf("ktuned: listening on %s\n", shown.c_str());
  std::fflush(stdout);
  if (auto path = args.Get("port-file")) {
    if (absl::Status s = WritePortFile("port-file", *path, shown); !s.ok()) {
      std::cerr << "ktuned: " << s.message() << "\n";
    }
  }
  std::fprintf(stderr, "ktuned: serving %zu device(s), store %s\n", devices,
               pg::Redact(db).c_str());
  // The main thread waits for SIGTERM or SIGINT (caught since Serve began).
  signals.async_wait([&](const boost::system::error_code&, int signo) {
    std::fprintf(stderr, "ktuned: %s: finishing the candidates in flight, then stopping\n",
                 signo == SIGTERM ? "SIGTERM" : "SIGINT");
  });
  io.run();

  http.reset();          // the dashboard goes first: it reads the scheduler
  scheduler.Shutdown();  // running jobs stop after their candidate; state kept
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  service.Drain();
  server->Wait();
  std::fprintf(stderr, "ktuned: stopped\n");
  return kExitOk;
}

int Main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  if (std::optional<int> code = RunIfWorker(all, "ktuned")) return *code;
  sqlite::SetLockWaitNotice([](const std::string& m) { std::cerr << "ktuned: " << m << "\n"; });
  absl::StatusOr<Args> args = flags::Parse(kDaemonCommand, all);
  if (!args.ok()) {
    std::cerr << "ktuned: " << args.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (args->help()) {
    std::cout << flags::HelpText(kDaemonCommand);
    return kExitOk;
  }
  absl::StatusOr<Security> sec = SecurityFromArgs(*args);
  int rpc_threads = 2;
  absl::StatusOr<SchedulerOptions> so =
      sec.ok() ? SchedulerOptionsFromArgs(*args, &rpc_threads) : sec.status();
  if (!so.ok()) {
    std::cerr << "ktuned: " << so.status().message() << "\n";
    return kExitInvalidInput;
  }
  RaiseOpenFileLimit();
  // The address first: a daemon that cannot listen opens nothing.
  if (absl::Status s = ProbeListenAddress(sec->listen); !s.ok()) {
    std::cerr << "ktuned: " << s.message() << "\n";
    return kExitInvalidInput;
  }
  Scheduler scheduler(*so);
  if (absl::Status s = scheduler.Open(); !s.ok()) {
    std::cerr << "ktuned: " << s.message() << "\n";
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kFailedPrecondition
               ? kExitInvalidInput
               : kExitError;
  }
  DaemonMetrics metrics(BuildInfoOf(scheduler));
  TunerService service(scheduler, sec->token, rpc_threads, &metrics);
  return Serve(*sec, *args, scheduler, service, metrics, *so);
}

}  // namespace
}  // namespace ktune::daemon

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  // A long-running server with many short-lived threads' allocations: few
  // malloc arenas keep its memory from creeping through fragmentation
  // (measured with bench/daemon_bench's soak).
  mallopt(M_ARENA_MAX, 2);
  // gRPC's locks are absl::Mutex; Debian builds abseil with its debug-mode
  // lock-order graph on, which costs every lock and unlock (8 % of the
  // daemon's time serving GetBest); the graph guards gRPC's own lock order,
  // which gRPC's release builds do not check either.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return ktune::daemon::Main(argc, argv);
}
