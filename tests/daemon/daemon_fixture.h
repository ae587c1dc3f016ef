// The daemon over loopback, for its tests: ktuned is started as a user
// would start it, on an ephemeral port, serving recorded spaces; clients are
// gRPC stubs and the ktune command line.
#ifndef KTUNE_TESTS_DAEMON_DAEMON_FIXTURE_H_
#define KTUNE_TESTS_DAEMON_DAEMON_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"

namespace ktune {

inline const std::string kRecorded = std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/";
inline const std::string kConv = "sim:" + kRecorded + "convolution_milo_A100.json.gz";
inline const std::string kPnpoly = "sim:" + kRecorded + "pnpoly_kttvalues_RTX_2080_Ti.json.gz";

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

using testing::Slurp;
using testing::Spawn;
inline int Wait(pid_t pid) { return testing::WaitExit(pid); }

class DaemonTest : public ::testing::Test {
 protected:
  ~DaemonTest() override { Stop(SIGKILL); }

  // Starts ktuned; returns false (with its stderr in `failure`) if it exits.
  // The daemon says where it listens on a pipe (--port-file /dev/fd/3):
  // the test reads it as soon as it is written, or the end of the pipe when
  // the daemon dies first.
  bool StartDaemon(std::vector<std::string> args, std::string* failure = nullptr) {
    args.insert(args.begin(), {"--db", Db(), "--port-file", "/dev/fd/3"});
    if (std::find(args.begin(), args.end(), "--listen") == args.end()) {
      args.insert(args.begin(), {"--listen", "127.0.0.1:0"});
    }
    const std::string err = File("daemon.err");
    int port_fd = -1;
    pid_ = testing::SpawnWithPipe(KTUNED_PATH, args, File("daemon.out"), err, &port_fd);
    address_ = testing::ReadLine(port_fd);
    close(port_fd);
    if (address_.empty()) {
      Wait(pid_);
      pid_ = -1;
      if (failure != nullptr) *failure = Slurp(err);
      return false;
    }
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    stub_ = v1::Tuner::NewStub(channel_);
    return true;
  }

  int Stop(int signo) {
    if (pid_ <= 0) return -1;
    stub_.reset();
    channel_.reset();
    kill(pid_, signo);
    const int code = Wait(pid_);
    pid_ = -1;
    return code;
  }

  RunResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {"--server", address_});
    const std::string out = File("cli.out"), err = File("cli.err");
    RunResult r;
    r.code = Wait(Spawn(KTUNE_CLI_PATH, args, out, err));
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  static void Deadline(grpc::ClientContext& ctx, int seconds = 30) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // GetBest's time for the recorded convolution kernel, any problem.
  double BestConvolutionMs() {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetBestRequest req;
    req.set_kernel("convolution_kernel");
    v1::GetBestResponse resp;
    const grpc::Status s = stub_->GetBest(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.best().time_ms();
  }

  grpc::Status Submit(const v1::JobSpec& spec, v1::SubmitJobResponse* out, int priority = 0) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_priority(priority);
    return stub_->SubmitJob(&ctx, req, out);
  }

  // Follows a job to its end; returns the last state.
  v1::JobState Follow(const std::string& id, std::vector<v1::JobEvent>* events = nullptr,
                      bool from_start = false) {
    grpc::ClientContext ctx;
    Deadline(ctx, 120);
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_from_start(from_start);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent ev;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&ev)) {
      if (ev.event_case() == v1::JobEvent::kState) state = ev.state();
      if (events != nullptr) events->push_back(ev);
    }
    const grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state;
  }

  // Follows job `id` until it has `n` measurements (or ends): no polling,
  // the job's own event stream.
  void WaitForEvaluations(const std::string& id, int n) {
    grpc::ClientContext ctx;
    Deadline(ctx, 120);
    v1::WatchJobRequest req;
    req.set_job_id(id);
    req.set_from_start(true);
    auto reader = stub_->WatchJob(&ctx, req);
    v1::JobEvent ev;
    int seen = 0;
    while (seen < n && reader->Read(&ev)) {
      if (ev.event_case() == v1::JobEvent::kMeasurement) ++seen;
    }
    ctx.TryCancel();
    (void)reader->Finish();
    ASSERT_GE(seen, n) << "job " << id << " ended first";
  }

  v1::Job Get(const std::string& id, bool measurements = false) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetJobRequest req;
    req.set_job_id(id);
    req.set_include_measurements(measurements);
    v1::Job job;
    const grpc::Status s = stub_->GetJob(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  static v1::JobSpec Budget(int evaluations, int seed, const std::string& strategy = "random") {
    v1::JobSpec spec;
    spec.mutable_strategy()->set_name(strategy);
    spec.mutable_strategy()->set_max_evaluations(evaluations);
    spec.mutable_strategy()->set_seed(static_cast<std::uint64_t>(seed));
    return spec;
  }

  // A self-signed certificate for `subject` (its common name) valid for
  // localhost and 127.0.0.1: File(name + ".pem") and File(name +
  // "-key.pem"). False without openssl.
  bool MakeCertificate(const std::string& name, const std::string& subject) const {
    const std::string cmd =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + subject +
        " -addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " + File(name + "-key.pem") +
        " -out " + File(name + ".pem") + " 2>/dev/null";
    return system(cmd.c_str()) == 0;
  }

  std::string File(const std::string& name) const { return tmp_.File(name); }
  std::string Db() const { return File("k.db"); }

  testing::TempDir tmp_;
  pid_t pid_ = -1;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

}  // namespace ktune

#endif  // KTUNE_TESTS_DAEMON_DAEMON_FIXTURE_H_
