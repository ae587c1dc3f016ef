// ktuned: the ktune daemon. Serves ktune.v1.Tuner over gRPC (with the
// standard health and reflection services), schedules tuning jobs on the
// devices it is given, keeps its state in the SQLite store, and resumes
// unfinished jobs when restarted.

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/common/flags.h"
#include "server/daemon/scheduler.h"
#include "server/daemon/service.h"
#include "server/runner/runner.h"
#include "tuner/base/file.h"
#include "tuner/base/strings.h"
#include "tuner/ipc/subprocess.h"
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
    "ktuned [--listen ADDR] [--db PATH] --device DEVICE [--device DEVICE ...] [flags]",
    "Serves ktune.v1.Tuner over gRPC: tuning jobs from clients (ktune --server ADDR ...),\n"
    "run on the given devices, every measurement kept in the SQLite store. Listens on\n"
    "127.0.0.1:7070 by default; any other address requires TLS and a token (or --insecure).\n"
    "A job is code that runs on the GPU: only let trusted clients reach the daemon.",
    {{"listen", "ADDR", "host:port to listen on (default 127.0.0.1:7070; port 0 picks one)"},
     {"db", "PATH", "the SQLite store (default: $KTUNE_DB, else ./ktune.db)"},
     {"device", "DEVICE",
      "a device to serve: 0, cuda:0, a GPU UUID or sim:FILE (repeatable; "
      "default: every GPU)",
      true},
     {"devices", "LIST", "devices to serve, comma-separated (0,1), or all: every GPU"},
     {"max-running", "N", "jobs running at once (default 4)"},
     {"max-queued", "N", "jobs waiting; more are refused with RESOURCE_EXHAUSTED (default 256)"},
     {"max-evals", "N", "evaluations per job (default: no limit)"},
     {"max-space", "N", "configurations in a job's space (default: no limit)"},
     {"max-wall-seconds", "S", "wall time per job (default: no limit)"},
     {"max-kernel-seconds", "S", "time per kernel launch (default: the job's own)"},
     {"max-argument-mib", "N", "GPU memory of a job's buffer arguments, MiB (default: no limit)"},
     {"tls-cert", "FILE", "PEM certificate chain: serve TLS"},
     {"tls-key", "FILE", "PEM private key of --tls-cert"},
     {"tls-client-ca", "FILE", "PEM CA: clients must present a certificate it signed (mutual TLS)"},
     {"token-file", "FILE",
      "every call must carry 'authorization: Bearer TOKEN' (this file's text)"},
     {"insecure", "", "allow a non-loopback address without TLS and token (not recommended)"},
     {"sim-speed", "X", "replay simulated devices in real time, X times faster than recorded"},
     {"compile-workers", "N", "NVRTC worker processes per GPU job (default: one per core)"},
     {"rpc-threads", "N", "threads answering calls that read the store (default 2)"}},
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
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & S_IROTH) != 0) {
    std::fprintf(stderr, "ktuned: warning: %s (--%s) is readable by every user\n", path.c_str(),
                 flag.c_str());
  }
  return *text;
}

int Main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  if (std::optional<int> code = RunIfWorker(all, "ktuned")) return *code;
  absl::StatusOr<Args> args = flags::Parse(kDaemonCommand, all);
  if (!args.ok()) {
    std::cerr << "ktuned: " << args.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (args->help()) {
    std::cout << flags::HelpText(kDaemonCommand);
    return kExitOk;
  }
  auto invalid = [](const std::string& message) {
    std::cerr << "ktuned: " << message << "\n";
    return kExitInvalidInput;
  };

  // Where to listen, and how callers prove who they are.
  const std::string listen = args->Get("listen").value_or("127.0.0.1:7070");
  const bool tls = args->Has("tls-cert") || args->Has("tls-key");
  if (args->Has("tls-cert") != args->Has("tls-key")) {
    return invalid("--tls-cert and --tls-key go together");
  }
  if (args->Has("tls-client-ca") && !tls)
    return invalid("--tls-client-ca needs --tls-cert and --tls-key");
  std::string token;
  if (auto f = args->Get("token-file")) {
    absl::StatusOr<std::string> t = ReadSecret("token-file", *f);
    if (!t.ok()) return invalid(std::string(t.status().message()));
    token = std::string(StripSpace(*t));
    if (token.empty()) return invalid(StrCat("--token-file: ", *f, " is empty"));
    if (token.find_first_of(" \t\r\n") != std::string::npos) {
      return invalid(StrCat("--token-file: ", *f, ": the token must be one word"));
    }
  }
  const bool loopback = IsLoopback(listen);
  if (!loopback && !(tls && !token.empty())) {
    if (!args->Has("insecure")) {
      return invalid(StrCat("--listen ", listen,
                            ": not a loopback address, so TLS (--tls-cert, --tls-key) and a "
                            "token (--token-file) are required: a job is code that runs on the "
                            "GPU. --insecure overrides this (not recommended)."));
    }
    std::fprintf(stderr,
                 "ktuned: WARNING: listening on %s without %s (--insecure): whoever reaches this "
                 "port can run code on these GPUs\n",
                 listen.c_str(), tls ? "a token" : (token.empty() ? "TLS or a token" : "TLS"));
  }
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (tls) {
    absl::StatusOr<std::string> cert = ReadFileContents(*args->Get("tls-cert"));
    if (!cert.ok()) return invalid(StrCat("--tls-cert: ", cert.status().message()));
    absl::StatusOr<std::string> key = ReadSecret("tls-key", *args->Get("tls-key"));
    if (!key.ok()) return invalid(std::string(key.status().message()));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (auto ca = args->Get("tls-client-ca")) {
      absl::StatusOr<std::string> pem = ReadFileContents(*ca);
      if (!pem.ok()) return invalid(StrCat("--tls-client-ca: ", pem.status().message()));
      ssl.pem_root_certs = *pem;
      ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    creds = grpc::SslServerCredentials(ssl);
  }

  // The scheduler and its devices.
  SchedulerOptions so;
  const char* env_db = std::getenv("KTUNE_DB");
  so.db_path = args->Get("db").value_or(env_db != nullptr && *env_db ? env_db : "ktune.db");
  so.devices = args->GetAll("device");
  if (auto list = args->Get("devices"); list && *list != "all") {
    for (const std::string& d : StrSplit(*list, ',')) {
      if (d.empty()) return invalid(StrCat("--devices ", *list, ": an empty entry"));
      so.devices.push_back(d);
    }
  }
  so.device_options.worker_program = SelfExecutable();
  auto read_int = [&](const char* name, std::int64_t min, std::int64_t max,
                      std::int64_t* out) -> bool {
    absl::StatusOr<std::optional<std::int64_t>> v = args->GetInt(name, min, max);
    if (!v.ok()) {
      std::cerr << "ktuned: " << v.status().message() << "\n";
      return false;
    }
    if (*v) *out = **v;
    return true;
  };
  auto read_double = [&](const char* name, double* out) -> bool {
    absl::StatusOr<std::optional<double>> v = args->GetDouble(name, 0);
    if (!v.ok()) {
      std::cerr << "ktuned: " << v.status().message() << "\n";
      return false;
    }
    if (*v) *out = **v;
    return true;
  };
  std::int64_t running = 4, queued = 256, workers = 0, rpc_threads = 2, max_space = 0,
               argument_mib = 0;
  if (!read_int("max-running", 1, 1024, &running) || !read_int("max-queued", 0, 1 << 20, &queued) ||
      !read_int("max-evals", 1, INT64_MAX, &so.limits.max_evaluations) ||
      !read_int("max-space", 1, INT64_MAX, &max_space) ||
      !read_int("max-argument-mib", 1, INT64_C(1) << 30, &argument_mib) ||
      !read_int("compile-workers", 1, 1024, &workers) ||
      !read_int("rpc-threads", 1, 256, &rpc_threads) ||
      !read_double("max-wall-seconds", &so.limits.max_wall_seconds) ||
      !read_double("max-kernel-seconds", &so.limits.max_kernel_seconds) ||
      !read_double("sim-speed", &so.device_options.sim_speed)) {
    return kExitInvalidInput;
  }
  so.limits.max_running = static_cast<int>(running);
  so.limits.max_queued = static_cast<int>(queued);
  so.limits.max_space = static_cast<double>(max_space);
  so.limits.max_argument_bytes = argument_mib << 20;
  so.device_options.compile_workers = static_cast<int>(workers);
  if (so.devices.empty()) {
#ifdef KTUNE_HAVE_CUDA
    absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> gpus =
        ListCudaDevices(WorkerProgram{SelfExecutable()});
    if (!gpus.ok()) {
      return invalid(StrCat("no --device given and no GPU found (", gpus.status().message(),
                            "); give --device sim:FILE to serve a recorded space"));
    }
    for (const v1::WorkerDeviceInfo& g : *gpus) so.devices.push_back(StrCat("cuda:", g.ordinal()));
#else
    return invalid("no --device given; this build has no CUDA: give --device sim:FILE");
#endif
  }

  Scheduler scheduler(so);
  if (absl::Status s = scheduler.Start(); !s.ok()) {
    std::cerr << "ktuned: " << s.message() << "\n";
    return s.code() == absl::StatusCode::kInvalidArgument ||
                   s.code() == absl::StatusCode::kFailedPrecondition
               ? kExitInvalidInput
               : kExitError;
  }
  TunerService service(scheduler, token, static_cast<int>(rpc_threads));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, creds, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (port == 0 && listen.rfind("unix:", 0) != 0)) {
    std::cerr << "ktuned: cannot listen on " << listen << " (in use, or not an address)\n";
    scheduler.Shutdown();
    return kExitError;
  }
  std::string shown = listen;
  if (const std::size_t colon = listen.rfind(':');
      colon != std::string::npos && listen.rfind("unix:", 0) != 0) {
    shown = StrCat(listen.substr(0, colon), ":", port);
  }
  std::printf("ktuned: listening on %s\n", shown.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "ktuned: serving %zu device(s), store %s\n", so.devices.size(),
               so.db_path.c_str());

  // The main thread waits for SIGTERM or SIGINT.
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int signo) {
    std::fprintf(stderr, "ktuned: %s: finishing the candidates in flight, then stopping\n",
                 signo == SIGTERM ? "SIGTERM" : "SIGINT");
  });
  io.run();

  scheduler.Shutdown();  // running jobs stop after their candidate; state kept
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  service.Drain();
  server->Wait();
  std::fprintf(stderr, "ktuned: stopped\n");
  return kExitOk;
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
