// The daemon under load, on loopback: GetBest throughput and latency for 1,
// 8 and 32 concurrent clients (three runs each and their medians; the
// daemon and the load generator on separate halves of the cores, or
// sharing them with KTUNE_BENCH_SHARED_CORES=1); the in-process BestConfigs
// lookup time (client_bench); and
// a soak (32 clients submitting and watching jobs while 32 others query
// GetBest) in four rounds, with the daemon's resident memory after each.
//
//   daemon_bench [--postgres] [--dashboard] [SECONDS_PER_LOAD (2)] [SOAK_SECONDS (60)]
//
// --dashboard: GetBest at 32 clients with the HTTP endpoint idle and with
// it polled as open dashboards poll it (the jobs page, the devices page
// and a job's page, and a Prometheus scrape), alternating, in one run.
//
// --postgres: the GetBest loads again, side by side in the same run, on a
// ktuned whose store is PostgreSQL (a throwaway cluster, as the tests
// start one).
//
// From a bundle on another machine: KTUNE_SOURCE=<checkout>
// KTUNED_BIN=bundle/bin/ktuned KTUNE_CLIENT_BENCH=bundle/bin/client_bench
// bundle/run.sh daemon_bench
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/testing/http_client.h"
#include "tests/testing/postgres.h"
#include "tests/testing/process.h"

namespace {

using Clock = std::chrono::steady_clock;

// The build's paths, or $KTUNE_SOURCE, $KTUNED_BIN and $KTUNE_CLIENT_BENCH
// (a bundle run on another machine).
std::string FromEnv(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}
const std::string kSource = FromEnv("KTUNE_SOURCE", KTUNE_SOURCE_DIR);
const std::string kConv = "sim:" + kSource + "/kernels/recorded/convolution_milo_A100.json.gz";
const std::string kKtuned = FromEnv("KTUNED_BIN", KTUNED_PATH);
const std::string kClientBench = FromEnv("KTUNE_CLIENT_BENCH", CLIENT_BENCH_PATH);

long RssKiB(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

ktune::v1::JobSpec Budget(int evaluations, int seed) {
  ktune::v1::JobSpec spec;
  spec.mutable_strategy()->set_name("random");
  spec.mutable_strategy()->set_max_evaluations(evaluations);
  spec.mutable_strategy()->set_seed(static_cast<std::uint64_t>(seed));
  return spec;
}

// `clients` concurrent callers of GetBest for `seconds`, each on its own
// connection, a call at a time (the next issued when the previous one
// completes). The load generator is lean so that the daemon, not the
// generator, is measured: completion queues, one thread per two cores it
// may use (one on a 2-core machine).
struct LoadResult {
  double requests_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  long failures = 0;
};

LoadResult GetBestLoad(const std::string& address, int clients, double seconds) {
  // The request is serialized once and sent as bytes; each client parses
  // its first answer in full (and counts a wrong one as a failure), then
  // only checks status and size: the generator's work per call is gRPC's.
  struct Call {
    std::unique_ptr<grpc::GenericStub> stub;
    std::unique_ptr<grpc::ClientContext> ctx;
    grpc::ByteBuffer response;
    grpc::Status status;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> rpc;
    Clock::time_point t0;
    std::vector<double> latencies;
    long failures = 0;
    bool checked = false;
  };
  ktune::v1::GetBestRequest req;
  req.set_kernel("convolution_kernel");
  req.set_device("NVIDIA A100-PCIE-40GB");
  (*req.mutable_problem())["problem_size_x"] = 4096;
  (*req.mutable_problem())["problem_size_y"] = 4096;
  const std::string bytes = req.SerializeAsString();
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);

  std::vector<Call> calls(static_cast<std::size_t>(clients));
  for (int c = 0; c < clients; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("ktune.bench.client", c);  // distinct channels, distinct connections
    calls[static_cast<std::size_t>(c)].stub = std::make_unique<grpc::GenericStub>(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }
  cpu_set_t mine;
  CPU_ZERO(&mine);
  sched_getaffinity(0, sizeof(mine), &mine);
  const int threads = std::clamp(CPU_COUNT(&mine) / 2, 1, clients);
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues;
  queues.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) queues.push_back(std::make_unique<grpc::CompletionQueue>());
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  auto issue = [&](Call& call, grpc::CompletionQueue* cq) {
    call.ctx = std::make_unique<grpc::ClientContext>();
    call.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    call.t0 = Clock::now();
    call.rpc = call.stub->PrepareUnaryCall(call.ctx.get(), "/ktune.v1.Tuner/GetBest", request, cq);
    call.rpc->StartCall();
    call.rpc->Finish(&call.response, &call.status, &call);
  };
  std::vector<std::thread> pollers;
  pollers.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pollers.emplace_back([&, t] {
      grpc::CompletionQueue* cq = queues[static_cast<std::size_t>(t)].get();
      int live = 0;
      for (int c = t; c < clients; c += threads, ++live) {
        issue(calls[static_cast<std::size_t>(c)], cq);
      }
      void* tag = nullptr;
      bool ok = false;
      while (live > 0 && cq->Next(&tag, &ok)) {
        Call& call = *static_cast<Call*>(tag);
        const Clock::time_point now = Clock::now();
        call.latencies.push_back(std::chrono::duration<double, std::micro>(now - call.t0).count());
        if (!ok || !call.status.ok() || call.response.Length() == 0) {
          ++call.failures;
        } else if (!call.checked) {
          call.checked = true;
          grpc::Slice whole;
          ktune::v1::GetBestResponse parsed;
          if (!call.response.DumpToSingleSlice(&whole).ok() ||
              !parsed.ParseFromArray(whole.begin(), static_cast<int>(whole.size())) ||
              parsed.kernel() != "convolution_kernel" || !parsed.best().has_time_ms()) {
            ++call.failures;
          }
        }
        if (now >= end) {
          --live;
        } else {
          issue(call, cq);
        }
      }
    });
  }
  for (std::thread& t : pollers) t.join();
  for (auto& q : queues) {
    q->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (q->Next(&tag, &ok)) {
    }
  }
  std::vector<double> all;
  LoadResult r;
  for (const Call& call : calls) {
    all.insert(all.end(), call.latencies.begin(), call.latencies.end());
    r.failures += call.failures;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0
                       : all[static_cast<std::size_t>(p * static_cast<double>(all.size() - 1))];
  };
  r.requests_per_s = static_cast<double>(all.size()) / seconds;
  r.p50_us = pct(0.5);
  r.p99_us = pct(0.99);
  return r;
}

void Print(int clients, const LoadResult& r, const char* what = "") {
  std::printf("GetBest, %2d clients%s: %8.0f requests/s, p50 %6.0f us, p99 %6.0f us, %ld failed\n",
              clients, what, r.requests_per_s, r.p50_us, r.p99_us, r.failures);
}

// The daemon gets the first half of this process's cores, the load
// generator the second half: neither steals the other's time (on a 2-core
// machine, one core each). KTUNE_BENCH_SHARED_CORES=1, or a single core,
// leaves all cores to both (`daemon` and `generator` empty).
struct CoreSplit {
  std::vector<int> daemon, generator;
  std::string description;
};

CoreSplit SplitCores() {
  cpu_set_t all;
  CPU_ZERO(&all);
  sched_getaffinity(0, sizeof(all), &all);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  }
  CoreSplit split;
  const char* shared = std::getenv("KTUNE_BENCH_SHARED_CORES");
  if (cpus.size() < 2 || (shared != nullptr && std::string(shared) == "1")) {
    split.description =
        std::to_string(cpus.size()) + " cores shared by the daemon and the load generator";
    return split;
  }
  const auto half = static_cast<std::ptrdiff_t>(cpus.size() / 2);
  split.daemon.assign(cpus.begin(), cpus.begin() + half);
  split.generator.assign(cpus.begin() + half, cpus.end());
  split.description = std::to_string(split.daemon.size()) + " cores for the daemon, " +
                      std::to_string(split.generator.size()) + " for the load generator";
  return split;
}

// This thread, and the threads and processes it starts from now on, run on
// `cpus` (none: unchanged).
void RunOn(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// A ktuned serving `db` (a file or a PostgreSQL URI), started on the
// daemon's cores, its first job run. pid -1 when it failed.
struct Daemon {
  pid_t pid = -1;
  std::string address;
};

Daemon StartDaemon(const std::string& db, const std::string& dir, const CoreSplit& cores) {
  const std::string out = dir + "/out", err = dir + "/err";
  RunOn(cores.daemon);  // inherited by the daemon
  Daemon d;
  d.pid = ktune::testing::Spawn(
      kKtuned,
      {"--listen", "127.0.0.1:0", "--db", db, "--device", kConv, "--max-running", "4", "--http",
       "127.0.0.1:0", "--http-port-file", dir + "/http"},
      out, err);
  RunOn(cores.generator);
  for (int i = 0; i < 2000 && d.address.empty(); ++i) {
    const std::string text = ktune::testing::Slurp(out);
    if (const std::size_t p = text.find("listening on ");
        p != std::string::npos && text.find('\n', p) != std::string::npos) {
      d.address = text.substr(p + 13, text.find('\n', p) - p - 13);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (d.address.empty()) {
    std::fprintf(stderr, "daemon_bench: ktuned did not start: %s\n",
                 ktune::testing::Slurp(err).c_str());
    kill(d.pid, SIGKILL);
    ktune::testing::WaitExit(d.pid);
    d.pid = -1;
  }
  return d;
}

bool RunJob(ktune::v1::Tuner::Stub& stub, const ktune::v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  ktune::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  ktune::v1::SubmitJobResponse resp;
  if (!stub.SubmitJob(&ctx, req, &resp).ok()) return false;
  grpc::ClientContext wctx;
  ktune::v1::WatchJobRequest w;
  w.set_job_id(resp.job_id());
  auto reader = stub.WatchJob(&wctx, w);
  ktune::v1::JobEvent ev;
  ktune::v1::JobState state = ktune::v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&ev)) {
    if (ev.has_state()) state = ev.state();
  }
  return reader->Finish().ok() && state == ktune::v1::SUCCEEDED;
}

// What open dashboards ask of the HTTP endpoint while it runs: the jobs
// page and the devices page every 2 s, a job's page every second (its new
// measurements), and a Prometheus scrape every 15 s; `speedup` times as
// often.
class DashboardPoller {
 public:
  DashboardPoller(std::string http, std::string job, double speedup)
      : http_(std::move(http)), job_(std::move(job)), speedup_(speedup) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~DashboardPoller() {
    stop_ = true;
    thread_.join();
  }
  long requests() const { return requests_; }
  long failures() const { return failures_; }

 private:
  void Loop() {
    const auto start = Clock::now();
    std::vector<std::pair<std::string, double>> pages = {{"/api/jobs", 2.0},
                                                         {"/api/devices", 2.0},
                                                         {"/api/jobs/" + job_ + "?from=100", 1.0},
                                                         {"/metrics", 15.0}};
    std::vector<Clock::time_point> next(pages.size(), start);
    while (!stop_) {
      for (std::size_t i = 0; i < pages.size(); ++i) {
        if (Clock::now() < next[i]) continue;
        next[i] += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(pages[i].second / speedup_));
        const ktune::testing::HttpAnswer a = ktune::testing::HttpFetch(http_, pages[i].first);
        ++requests_;
        if (a.status != 200) ++failures_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::string http_, job_;
  double speedup_;
  std::atomic<bool> stop_{false};
  std::atomic<long> requests_{0}, failures_{0};
  std::thread thread_;
};

// GetBest at 32 clients, the dashboard closed and open in turn, five
// rounds; then each side's medians.
void DashboardLoads(const std::string& address, const std::string& http, const std::string& job,
                    double per_load) {
  for (double speedup : {1.0, 10.0}) {
    std::vector<LoadResult> closed, open;
    long requests = 0, failed = 0;
    for (int round = 0; round < 5; ++round) {
      closed.push_back(GetBestLoad(address, 32, per_load));
      {
        DashboardPoller poller(http, job, speedup);
        open.push_back(GetBestLoad(address, 32, per_load));
        requests += poller.requests();
        failed += poller.failures();
      }
    }
    auto median = [](std::vector<LoadResult> runs, double LoadResult::*field) {
      std::sort(runs.begin(), runs.end(),
                [&](const LoadResult& a, const LoadResult& b) { return a.*field < b.*field; });
      return runs[runs.size() / 2].*field;
    };
    for (const auto& [what, runs] : {std::pair{"closed", &closed}, std::pair{"open", &open}}) {
      LoadResult m;
      m.requests_per_s = median(*runs, &LoadResult::requests_per_s);
      m.p50_us = median(*runs, &LoadResult::p50_us);
      m.p99_us = median(*runs, &LoadResult::p99_us);
      for (const LoadResult& r : *runs) m.failures += r.failures;
      const std::string tag = std::string(", dashboard ") + what +
                              (speedup > 1 ? " (polled 10x as often)" : "") + ", median of 5";
      Print(32, m, tag.c_str());
    }
    std::printf("  dashboard requests answered while open: %ld (%ld failed)\n", requests, failed);
  }
}

// Three runs of each load, then their medians: these machines are noisy.
void Loads(const std::string& address, double per_load, const std::string& backend) {
  const std::string tag = " [" + backend + "]";
  for (int clients : {1, 8, 32}) {
    std::vector<LoadResult> runs;
    for (int run = 0; run < 3; ++run) {
      runs.push_back(GetBestLoad(address, clients, per_load));
      Print(clients, runs.back(), tag.c_str());
    }
    auto median = [&](double LoadResult::*field) {
      std::vector<double> v;
      v.reserve(runs.size());
      for (const LoadResult& r : runs) v.push_back(r.*field);
      std::sort(v.begin(), v.end());
      return v[1];
    };
    LoadResult m;
    m.requests_per_s = median(&LoadResult::requests_per_s);
    m.p50_us = median(&LoadResult::p50_us);
    m.p99_us = median(&LoadResult::p99_us);
    for (const LoadResult& r : runs) m.failures += r.failures;
    Print(clients, m, (tag + ", median of 3").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);  // as ktuned does
  std::vector<std::string> args(argv + 1, argv + argc);
  const bool postgres = std::erase(args, std::string("--postgres")) > 0;
  const bool dashboard = std::erase(args, std::string("--dashboard")) > 0;
  const double per_load = args.size() > 0 ? std::atof(args[0].c_str()) : 2.0;
  const double soak = args.size() > 1 ? std::atof(args[1].c_str()) : 60.0;
  char dir_template[] = "/tmp/ktune_daemon_bench.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string db = dir + "/k.db";
  const CoreSplit cores = SplitCores();
  const Daemon first = StartDaemon(db, dir, cores);
  if (first.pid < 0) return 1;
  const pid_t daemon = first.pid;
  const std::string address = first.address;
  auto stub =
      ktune::v1::Tuner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto run_job = [&](const ktune::v1::JobSpec& spec) { return RunJob(*stub, spec); };
  if (!run_job(Budget(100, 1))) {
    std::fprintf(stderr, "daemon_bench: the first job failed\n");
    return 1;
  }
  std::printf("ktuned on %s; %s\n", address.c_str(), cores.description.c_str());
  if (dashboard) {
    ktune::v1::ListJobsRequest lr;
    ktune::v1::ListJobsResponse jobs;
    grpc::ClientContext lctx;
    if (!stub->ListJobs(&lctx, lr, &jobs).ok() || jobs.jobs_size() == 0) return 1;
    std::string http = ktune::testing::Slurp(dir + "/http");
    while (!http.empty() && std::isspace(static_cast<unsigned char>(http.back()))) http.pop_back();
    DashboardLoads(address, http, jobs.jobs(0).id(), per_load);
    kill(daemon, SIGTERM);
    ktune::testing::WaitExit(daemon);
    return std::system(("rm -rf " + dir).c_str()) == 0 ? 0 : 1;
  }
  Loads(address, per_load, "sqlite");
  if (postgres) {
    // The same, side by side, with a PostgreSQL store (a throwaway
    // cluster on a Unix socket, fsync on).
    ktune::testing::PostgresCluster::Options durable;
    durable.durable = true;
    // The server on the daemon's cores (in a fleet it has a machine of its
    // own): its work never lands on the load generator's clock.
    RunOn(cores.daemon);
    absl::StatusOr<std::unique_ptr<ktune::testing::PostgresCluster>> pg =
        ktune::testing::PostgresCluster::Start(durable);
    RunOn(cores.generator);
    absl::StatusOr<std::string> uri =
        pg.ok() ? (*pg)->CreateDatabase("bench") : absl::StatusOr<std::string>(pg.status());
    if (!uri.ok()) {
      std::fprintf(stderr, "daemon_bench: %s\n", std::string(uri.status().message()).c_str());
      return 1;
    }
    const std::string pg_dir = dir + "/pg";
    mkdir(pg_dir.c_str(), 0755);
    const Daemon on_pg = StartDaemon(*uri, pg_dir, cores);
    if (on_pg.pid < 0) return 1;
    auto pg_stub = ktune::v1::Tuner::NewStub(
        grpc::CreateChannel(on_pg.address, grpc::InsecureChannelCredentials()));
    if (!RunJob(*pg_stub, Budget(100, 1))) {
      std::fprintf(stderr, "daemon_bench: the first job on PostgreSQL failed\n");
      return 1;
    }
    Loads(on_pg.address, per_load, "postgres");
    kill(on_pg.pid, SIGTERM);
    ktune::testing::WaitExit(on_pg.pid);
  }

  // In process: the client library, from the database file (its own
  // program: the library carries its own copy of the protocol).
  {
    const std::string cout_path = dir + "/client.out";
    const int code = ktune::testing::WaitExit(
        ktune::testing::Spawn(kClientBench, {db}, cout_path, dir + "/client.err"));
    std::fputs(ktune::testing::Slurp(cout_path).c_str(), stdout);
    if (code != 0) std::fputs(ktune::testing::Slurp(dir + "/client.err").c_str(), stderr);
  }

  // Soak: jobs and queries together; the daemon's memory after each half.
  if (soak > 0) {
    const long rss0 = RssKiB(daemon);
    std::atomic<long> jobs_ok{0}, jobs_failed{0};
    std::atomic<int> seed{1000};
    auto round_of = [&](double seconds) {
      const auto end = Clock::now() + std::chrono::duration<double>(seconds);
      std::vector<std::thread> threads;
      threads.reserve(32);
      for (int c = 0; c < 32; ++c) {
        threads.emplace_back([&] {
          while (Clock::now() < end) {
            (run_job(Budget(20, seed.fetch_add(1))) ? jobs_ok : jobs_failed)++;
          }
        });
      }
      Print(32, GetBestLoad(address, 32, seconds), " during the soak");
      for (auto& t : threads) t.join();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return RssKiB(daemon);
    };
    // Four rounds: memory that grows round after round is a leak; memory
    // that settles after the first is the daemon's working set.
    std::vector<long> rss;
    rss.reserve(4);
    for (int round = 0; round < 4; ++round) rss.push_back(round_of(soak / 4));
    std::printf(
        "soak %.0f s: %ld jobs succeeded, %ld failed; daemon RSS %ld KiB at start, "
        "after each quarter %ld, %ld, %ld, %ld KiB\n",
        soak, jobs_ok.load(), jobs_failed.load(), rss0, rss[0], rss[1], rss[2], rss[3]);
  }
  kill(daemon, SIGTERM);
  const int code = ktune::testing::WaitExit(daemon);
  std::printf("ktuned stopped with exit code %d\n", code);
  std::string cleanup = "rm -rf " + dir;
  return std::system(cleanup.c_str()) == 0 ? 0 : 1;
}
