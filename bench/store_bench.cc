// The store's backends side by side in one run: SQLite (a file here) and
// PostgreSQL (a throwaway cluster on a Unix socket, fsync on, as a
// production server has it), on this machine.
//   - measurements stored per second (one connection, one transaction per
//     candidate, as a job stores them);
//   - the time from SubmitJob to the job running, through a ktuned on each
//     backend (the fleet's claim for PostgreSQL; median of 20);
//   - claiming 10,000 queued jobs from the fleet's queue (PostgreSQL only:
//     SQLite has no shared queue), by 1 and by 4 daemons' connections.
// GetBest throughput and p99 on both backends: daemon_bench --postgres.
//
//   store_bench [MEASUREMENTS (2000)] [JOBS (10000)]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/testing/postgres.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"
#include "tuner/store/fleet.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kConv =
    std::string("sim:") + KTUNE_SOURCE_DIR + "/kernels/recorded/convolution_milo_A100.json.gz";

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

JobRecord MakeJob(const std::string& id) {
  JobRecord j;
  j.id = id;
  j.kernel_name = "bench";
  j.source_hash = "h";
  j.parameters = {"a", "b"};
  j.device.uuid = "GPU-bench";
  j.device.name = "Bench GPU";
  j.device.architecture = "sm_90";
  j.problem = {{"N", 1 << 20}};
  j.spec = "spec";
  j.spec_json = "{}";
  j.strategy = "random";
  j.origin = "daemon";
  return j;
}

StoredMeasurement Measured(std::int64_t seq) {
  StoredMeasurement m;
  m.sequence = seq;
  m.key = StrCat(seq, ",", seq % 7);
  m.config_json = StrCat("{\"a\":", seq, ",\"b\":", seq % 7, "}");
  m.measurement.status = CandidateStatus::kOk;
  const double ms = 1.0 + static_cast<double>((seq * 7919) % 1000) / 1000.0;
  m.measurement.time = Millis(ms);
  std::vector<double> samples;
  samples.reserve(30);
  for (int i = 0; i < 30; ++i) samples.push_back(ms * (1 + 0.001 * i));
  m.measurement.stats = ComputeStats(samples);
  m.measurement.samples_ms = samples;
  m.objective = ms;
  m.loss = ms;
  return m;
}

void MeasurementsPerSecond(const std::string& label, const std::string& locator, int n) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(locator, true);
  if (!store.ok()) {
    std::printf("%-10s cannot open: %s\n", label.c_str(),
                std::string(store.status().message()).c_str());
    return;
  }
  if (!(*store)->StartJob(MakeJob("measure"), nullptr).ok()) return;
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (absl::Status s = (*store)->AddMeasurement("measure", Measured(i)); !s.ok()) {
      std::printf("%-10s failed: %s\n", label.c_str(), std::string(s.message()).c_str());
      return;
    }
  }
  const double s = Seconds(start);
  std::printf("%-10s measurements stored: %d in %.2f s, %.0f/s (%.2f ms each)\n", label.c_str(), n,
              s, n / s, 1000 * s / n);
}

// SubmitJob to the job's first state other than queued, through a ktuned
// serving `db`: the median of `n` jobs.
void SubmissionToClaim(const std::string& label, const std::string& db, const testing::TempDir& tmp,
                       int n) {
  int fd = -1;
  const pid_t daemon = testing::SpawnWithPipe(
      KTUNED_PATH,
      {"--db", db, "--device", kConv, "--listen", "127.0.0.1:0", "--port-file", "/dev/fd/3",
       "--sim-speed", "1000", "--max-running", "1"},
      tmp.File(label + ".out"), tmp.File(label + ".err"), &fd);
  const std::string address = testing::ReadLine(fd);
  close(fd);
  if (address.empty()) {
    std::printf("%-10s ktuned did not start: %s\n", label.c_str(),
                testing::Slurp(tmp.File(label + ".err")).c_str());
    return;
  }
  auto stub = v1::Tuner::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_strategy()->set_name("random");
    req.mutable_spec()->mutable_strategy()->set_max_evaluations(3);
    req.mutable_spec()->mutable_strategy()->set_seed(5000 + static_cast<std::uint64_t>(i));
    const auto start = Clock::now();
    v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    if (!stub->SubmitJob(&ctx, req, &resp).ok()) break;
    for (;;) {
      grpc::ClientContext g;
      v1::GetJobRequest get;
      get.set_job_id(resp.job_id());
      v1::Job job;
      if (!stub->GetJob(&g, get, &job).ok()) break;
      if (job.state() != v1::QUEUED) break;
      std::this_thread::sleep_for(200us);
    }
    ms.push_back(1000 * Seconds(start));
    // The next job waits for none before it.
    for (;;) {
      grpc::ClientContext g;
      v1::GetJobRequest get;
      get.set_job_id(resp.job_id());
      v1::Job job;
      if (!stub->GetJob(&g, get, &job).ok() || job.state() != v1::RUNNING) break;
      std::this_thread::sleep_for(1ms);
    }
  }
  kill(daemon, SIGTERM);
  testing::WaitExit(daemon);
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  std::printf("%-10s submission to running: median %.1f ms, max %.1f ms (%zu jobs)\n",
              label.c_str(), ms[ms.size() / 2], ms.back(), ms.size());
}

void ClaimQueue(const std::string& uri, int jobs, int claimers) {
  const std::string prefix = StrCat("claim", claimers, "-");
  {
    absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri, true);
    if (!s.ok()) return;
    for (int i = 0; i < jobs; ++i) {
      const std::string id = StrCat(prefix, i);
      if (!(*s)->QueueJob(MakeJob(id), nullptr).ok()) return;
      if (!(*s)->fleet()->Offer(id, prefix).ok()) return;
    }
  }
  std::atomic<int> claimed{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(claimers));
  const auto start = Clock::now();
  for (int c = 0; c < claimers; ++c) {
    threads.emplace_back([&, c] {
      absl::StatusOr<std::unique_ptr<Store>> s = Store::Open(uri, false);
      if (!s.ok()) return;
      const std::string me = StrCat("daemon-", c);
      for (;;) {
        absl::StatusOr<std::optional<JobRecord>> j = (*s)->fleet()->Claim(me, {prefix}, 24h);
        if (!j.ok() || !j->has_value()) return;
        claimed.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double s = Seconds(start);
  std::printf(
      "postgres   claiming %d queued jobs with %d connection(s): %d claimed in %.2f s, "
      "%.0f claims/s\n",
      jobs, claimers, claimed.load(), s, claimed.load() / s);
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  using namespace ktune;
  signal(SIGPIPE, SIG_IGN);
  const int measurements = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int jobs = argc > 2 ? std::atoi(argv[2]) : 10000;
  testing::TempDir tmp;
  testing::PostgresCluster::Options durable;
  durable.durable = true;
  absl::StatusOr<std::unique_ptr<testing::PostgresCluster>> pg =
      testing::PostgresCluster::Start(durable);
  if (!pg.ok()) {
    std::fprintf(stderr, "store_bench: %s\n", std::string(pg.status().message()).c_str());
    return 1;
  }
  std::printf("store_bench: SQLite in %s, PostgreSQL in %s (fsync on); %u cores\n",
              tmp.path().c_str(), (*pg)->dir().c_str(), std::thread::hardware_concurrency());
  absl::StatusOr<std::string> a = (*pg)->CreateDatabase("measure");
  absl::StatusOr<std::string> b = (*pg)->CreateDatabase("submit");
  absl::StatusOr<std::string> c = (*pg)->CreateDatabase("claim");
  if (!a.ok() || !b.ok() || !c.ok()) return 1;
  MeasurementsPerSecond("sqlite", tmp.File("measure.db"), measurements);
  MeasurementsPerSecond("postgres", *a, measurements);
  SubmissionToClaim("sqlite", tmp.File("submit.db"), tmp, 20);
  SubmissionToClaim("postgres", *b, tmp, 20);
  ClaimQueue(*c, jobs, 1);
  ClaimQueue(*c, jobs, 4);
  return 0;
}
