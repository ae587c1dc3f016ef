// The daemon under load, on loopback: GetBest throughput and latency for 1,
// 8 and 32 concurrent clients; the in-process BestConfigs lookup time
// (client_bench); and
// a soak (32 clients submitting and watching jobs while 32 others query
// GetBest) in four rounds, with the daemon's resident memory after each.
//
//   daemon_bench [SECONDS_PER_LOAD (2)] [SOAK_SECONDS (60)]
//
// From a bundle on another machine: KTUNE_SOURCE=<checkout>
// KTUNED_BIN=bundle/bin/ktuned KTUNE_CLIENT_BENCH=bundle/bin/client_bench
// bundle/run.sh daemon_bench
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
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

// One logical client: a call at a time, the next issued from the previous
// one's completion (gRPC's callback API, so the load generator needs few
// threads and leaves the cores to the daemon).
class LoadClient {
 public:
  LoadClient(ktune::v1::Tuner::Stub* stub, Clock::time_point end) : stub_(stub), end_(end) {
    req_.set_kernel("convolution_kernel");
    req_.set_device("NVIDIA A100-PCIE-40GB");
    (*req_.mutable_problem())["problem_size_x"] = 4096;
    (*req_.mutable_problem())["problem_size_y"] = 4096;
  }

  void Start() { Next(); }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  std::vector<double>& latencies() { return latencies_; }
  long failures() const { return failures_; }

 private:
  void Next() {
    if (Clock::now() >= end_) {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
      return;
    }
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    t0_ = Clock::now();
    stub_->async()->GetBest(ctx_.get(), &req_, &resp_, [this](grpc::Status s) {
      latencies_.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0_).count());
      if (!s.ok()) ++failures_;
      Next();
    });
  }

  ktune::v1::Tuner::Stub* stub_;
  Clock::time_point end_;
  ktune::v1::GetBestRequest req_;
  ktune::v1::GetBestResponse resp_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  Clock::time_point t0_;
  std::vector<double> latencies_;
  long failures_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

// `clients` concurrent callers of GetBest for `seconds`, over four
// connections; prints throughput and latency.
void GetBestLoad(const std::string& address, int clients, double seconds) {
  std::vector<std::unique_ptr<ktune::v1::Tuner::Stub>> stubs;
  for (int i = 0; i < 4; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("ktune.bench.channel", i);  // distinct channels, distinct connections
    stubs.push_back(ktune::v1::Tuner::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args)));
  }
  const Clock::time_point end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  std::vector<std::unique_ptr<LoadClient>> all_clients;
  for (int c = 0; c < clients; ++c) {
    all_clients.push_back(
        std::make_unique<LoadClient>(stubs[static_cast<std::size_t>(c) % 4].get(), end));
  }
  for (auto& c : all_clients) c->Start();
  std::vector<double> all;
  long failures = 0;
  for (auto& c : all_clients) {
    c->Wait();
    all.insert(all.end(), c->latencies().begin(), c->latencies().end());
    failures += c->failures();
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty() ? 0.0
                       : all[static_cast<std::size_t>(p * static_cast<double>(all.size() - 1))];
  };
  std::printf("GetBest, %2d clients: %8.0f requests/s, p50 %6.0f us, p99 %6.0f us, %ld failed\n",
              clients, static_cast<double>(all.size()) / seconds, pct(0.5), pct(0.99), failures);
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  const double per_load = argc > 1 ? std::atof(argv[1]) : 2.0;
  const double soak = argc > 2 ? std::atof(argv[2]) : 60.0;
  char dir_template[] = "/tmp/ktune_daemon_bench.XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  const std::string db = dir + "/k.db", out = dir + "/out", err = dir + "/err";
  const pid_t daemon = ktune::testing::Spawn(
      kKtuned, {"--listen", "127.0.0.1:0", "--db", db, "--device", kConv, "--max-running", "4"},
      out, err);
  std::string address;
  for (int i = 0; i < 2000 && address.empty(); ++i) {
    const std::string text = ktune::testing::Slurp(out);
    if (const std::size_t p = text.find("listening on ");
        p != std::string::npos && text.find('\n', p) != std::string::npos) {
      address = text.substr(p + 13, text.find('\n', p) - p - 13);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (address.empty()) {
    std::fprintf(stderr, "daemon_bench: ktuned did not start: %s\n",
                 ktune::testing::Slurp(err).c_str());
    return 1;
  }
  auto stub =
      ktune::v1::Tuner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  auto run_job = [&](const ktune::v1::JobSpec& spec) {
    grpc::ClientContext ctx;
    ktune::v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    ktune::v1::SubmitJobResponse resp;
    if (!stub->SubmitJob(&ctx, req, &resp).ok()) return false;
    grpc::ClientContext wctx;
    ktune::v1::WatchJobRequest w;
    w.set_job_id(resp.job_id());
    auto reader = stub->WatchJob(&wctx, w);
    ktune::v1::JobEvent ev;
    ktune::v1::JobState state = ktune::v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&ev)) {
      if (ev.has_state()) state = ev.state();
    }
    return reader->Finish().ok() && state == ktune::v1::SUCCEEDED;
  };
  if (!run_job(Budget(100, 1))) {
    std::fprintf(stderr, "daemon_bench: the first job failed\n");
    return 1;
  }
  std::printf("ktuned on %s, %u hardware threads here\n", address.c_str(),
              std::thread::hardware_concurrency());
  for (int clients : {1, 8, 32}) GetBestLoad(address, clients, per_load);

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
      for (int c = 0; c < 32; ++c) {
        threads.emplace_back([&] {
          while (Clock::now() < end) {
            (run_job(Budget(20, seed.fetch_add(1))) ? jobs_ok : jobs_failed)++;
          }
        });
      }
      GetBestLoad(address, 32, seconds);
      for (auto& t : threads) t.join();
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return RssKiB(daemon);
    };
    // Four rounds: memory that grows round after round is a leak; memory
    // that settles after the first is the daemon's working set.
    std::vector<long> rss;
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
