// The daemon over loopback: what it refuses, and how it says so (malformed
// requests, its limits, a second daemon, tokens and TLS).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ktune/v1/tuner.grpc.pb.h"
#include "tests/daemon/daemon_fixture.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(DaemonTest, MalformedRequestsGetClearErrors) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-evals", "100", "--max-space", "100000"}));
  auto submit_error = [&](const v1::JobSpec& spec, int priority = 0) {
    v1::SubmitJobResponse r;
    const grpc::Status s = Submit(spec, &r, priority);
    EXPECT_FALSE(s.ok());
    return std::make_pair(s.error_code(), s.error_message());
  };
  v1::JobSpec spec = Budget(10, 0, "genius");
  auto e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.name"));
  EXPECT_THAT(e.second, HasSubstr("genius"));
  spec = Budget(10, 0, "genetic");
  (*spec.mutable_strategy()->mutable_options())["population"] = "1e20";
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.options: strategy genetic: option population must be "
                                  "an integer from 2 to 100000, not '1e20'"));

  e = submit_error(Budget(500, 0));
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("strategy.max_evaluations"));
  EXPECT_THAT(e.second, HasSubstr("--max-evals"));

  spec = Budget(10, 0);
  spec.mutable_device()->add_devices("cuda:7");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("device.devices"));

  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_file("/etc/passwd");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("kernel.file"));

  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_code("__global__ void k() {}");
  v1::Parameter* p = spec.add_parameters();
  p->set_name("block_size_x");
  spec.add_constraints("block_size_x * < 4");
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);

  // A valid spec that the served recording cannot replay is refused at
  // once, not queued to fail.
  spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("k");
  spec.mutable_kernel()->set_code("__global__ void k() {}");
  p = spec.add_parameters();
  p->set_name("block_size_x");
  p->add_ints(32);
  e = submit_error(spec);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("records parameters other than the job's"));
  EXPECT_THAT(e.second, HasSubstr("use_shmem"));
  {
    grpc::ClientContext ctx;
    v1::ListJobsResponse listed;
    ASSERT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &listed).ok());
    EXPECT_EQ(listed.jobs_size(), 0) << "a refused job must not be stored";
  }

  e = submit_error(Budget(10, 0), 5000);
  EXPECT_EQ(e.first, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(e.second, HasSubstr("priority"));

  auto code_of = [&](auto call) { return call().error_code(); };
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::Job j;
              return stub_->GetJob(&ctx, v1::GetJobRequest(), &j);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetJobRequest r;
              r.set_job_id("ffffffffffffff");
              v1::Job j;
              return stub_->GetJob(&ctx, r, &j);
            }),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::ListJobsRequest r;
              r.set_page_token("'; DROP TABLE jobs; --");
              v1::ListJobsResponse l;
              return stub_->ListJobs(&ctx, r, &l);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::ListJobsRequest r;
              r.set_page_size(-3);
              v1::ListJobsResponse l;
              return stub_->ListJobs(&ctx, r, &l);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::CancelJobRequest r;
              r.set_job_id("0000000000");
              v1::Job j;
              return stub_->CancelJob(&ctx, r, &j);
            }),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, v1::GetBestRequest(), &r);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestRequest q;
              q.set_kernel("convolution_kernel");
              (*q.mutable_problem())["N"] = 0;
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, q, &r);
            }),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(code_of([&] {
              grpc::ClientContext ctx;
              v1::GetBestRequest q;
              q.set_kernel("never_tuned");
              v1::GetBestResponse r;
              return stub_->GetBest(&ctx, q, &r);
            }),
            grpc::StatusCode::NOT_FOUND);
  {
    // Bytes that are no GetBestRequest (GetBest is served on raw bytes).
    grpc::GenericStub generic(channel_);
    grpc::ClientContext ctx;
    Deadline(ctx);
    const std::string junk = "\xff\xff\xff\xff garbage";
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    generic.UnaryCall(&ctx, "/ktune.v1.Tuner/GetBest", grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = std::move(s);
                        done = true;
                        cv.notify_all();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("GetBestRequest"));
  }
  {
    grpc::ClientContext ctx;
    v1::WatchJobRequest r;
    r.set_job_id("abcdef0123");
    auto reader = stub_->WatchJob(&ctx, r);
    v1::JobEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // The daemon still works.
  v1::SubmitJobResponse ok;
  EXPECT_TRUE(Submit(Budget(5, 0), &ok).ok());
  EXPECT_EQ(Follow(ok.job_id()), v1::SUCCEEDED);
}

// No request makes the daemon read or write a path its client chose: every
// field of a job that names a file or folder (sources, headers, data files,
// NVRTC options that read or write) is refused, naming the field, before
// anything is opened; a file NVRTC would have written is not there.
TEST_F(DaemonTest, NoRequestReadsOrWritesAPathTheClientNames) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  const std::string secret = File("secret.h");
  std::ofstream(secret) << "#define SECRET 1\n";
  const std::string written = File("written.pch");
  auto base = [] {
    v1::JobSpec spec = Budget(5, 0);
    spec.mutable_kernel()->set_name("k");
    spec.mutable_kernel()->set_code("extern \"C\" __global__ void k() {}");
    return spec;
  };
  struct Case {
    std::function<void(v1::JobSpec&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[&](v1::JobSpec& s) { s.mutable_kernel()->set_file(secret); }, "kernel.file"},
      {[&](v1::JobSpec& s) { s.mutable_kernel()->add_include_paths(File("")); },
       "kernel.include_paths"},
      {[&](v1::JobSpec& s) { s.mutable_kernel()->add_compiler_options("-I" + File("")); },
       "kernel.compiler_options[0]"},
      {[&](v1::JobSpec& s) {
         s.mutable_kernel()->add_compiler_options("-include");
         s.mutable_kernel()->add_compiler_options(secret);
       },
       "kernel.compiler_options[0]"},
      {[&](v1::JobSpec& s) { s.mutable_kernel()->add_compiler_options("--pre-include=" + secret); },
       "kernel.compiler_options[0]"},
      {[&](v1::JobSpec& s) { s.mutable_kernel()->add_compiler_options("--create-pch=" + written); },
       "kernel.compiler_options[0]"},
      {[&](v1::JobSpec& s) { s.mutable_kernel()->add_compiler_options("--pch-dir=pch"); },
       "kernel.compiler_options[0]"},
      {[&](v1::JobSpec& s) {
         v1::Argument* a = s.add_arguments();
         a->set_name("x");
         a->set_type(v1::Argument::F32);
         a->mutable_buffer()->set_size("1");
         a->mutable_buffer()->set_file(secret);
       },
       "arguments[0].buffer.file"},
      {[&](v1::JobSpec& s) {
         (*s.mutable_verification()->mutable_expected_data()->mutable_files())["x"] = secret;
       },
       "verification.expected_data"},
      {[&](v1::JobSpec& s) {
         v1::Kernel* k = s.mutable_verification()->mutable_reference_kernel()->mutable_kernel();
         k->set_name("r");
         k->set_file(secret);
       },
       "verification.reference_kernel.kernel.file"},
      {[&](v1::JobSpec& s) {
         v1::Kernel* k =
             s.mutable_measurement()->mutable_load()->add_companions()->mutable_kernel();
         k->set_name("c");
         k->set_file(secret);
       },
       "measurement.load.companions[0].kernel.file"},
      {[&](v1::JobSpec& s) { s.mutable_device()->add_devices("sim:" + secret); }, "device.devices"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = base();
    c.set(spec);
    v1::SubmitJobResponse r;
    const grpc::Status st = Submit(spec, &r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(st.error_message(), HasSubstr(c.field)) << st.error_message();
  }
  EXPECT_NE(access(written.c_str(), F_OK), 0);
}

TEST_F(DaemonTest, ArgumentMemoryLimitIsChecked) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-argument-mib", "64"}));
  // The recorded convolution's kernel, with a 1 GiB input: too much here.
  v1::JobSpec spec = Budget(10, 0);
  spec.mutable_kernel()->set_name("convolution_kernel");
  spec.mutable_kernel()->set_code("__global__ void convolution_kernel(float* in) {}");
  (*spec.mutable_problem())["N"] = 1 << 28;
  v1::Argument* a = spec.add_arguments();
  a->set_name("in");
  a->set_type(v1::Argument::F32);
  a->mutable_buffer()->set_size("N");
  a->mutable_buffer()->mutable_uniform()->set_high(1);
  v1::Parameter* p = spec.add_parameters();
  p->set_name("block_size_x");
  p->add_ints(32);
  v1::SubmitJobResponse r;
  const grpc::Status s = Submit(spec, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1024 MiB"));
  EXPECT_THAT(s.error_message(), HasSubstr("--max-argument-mib"));
}

TEST_F(DaemonTest, ASecondDaemonOnOneStoreIsRefused) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  // Two daemons would both resume the store's unfinished jobs.
  const std::string err = File("second.err");
  const int code =
      Wait(Spawn(KTUNED_PATH, {"--db", Db(), "--listen", "127.0.0.1:0", "--device", kConv},
                 File("second.out"), err));
  EXPECT_NE(code, 0);
  EXPECT_THAT(Slurp(err), HasSubstr("another ktuned (pid " + std::to_string(pid_) + ")"));
  // The first serves on; once it has stopped, the store is free.
  v1::SubmitJobResponse r;
  EXPECT_TRUE(Submit(Budget(5, 1), &r).ok());
  EXPECT_EQ(Follow(r.job_id()), v1::SUCCEEDED);
  EXPECT_EQ(Stop(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(StartDaemon({"--device", kConv}));
}

// gRPC would let a second process listen on the same port (SO_REUSEPORT),
// and the kernel would split the calls between two daemons and two stores.
TEST_F(DaemonTest, ASecondDaemonOnOneAddressIsRefused) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Budget(5, 1), &r).ok());
  const std::string other_db = File("other.db");
  const std::string err = File("second.err");
  int port_fd = -1;
  const pid_t second = testing::SpawnWithPipe(
      KTUNED_PATH,
      {"--db", other_db, "--listen", address_, "--port-file", "/dev/fd/3", "--device", kConv},
      File("second.out"), err, &port_fd);
  // It says where it listens if it listens; the pipe ends if it exits.
  const std::string listening = testing::ReadLine(port_fd);
  close(port_fd);
  if (!listening.empty()) kill(second, SIGKILL);
  EXPECT_EQ(listening, "") << "a second daemon listens on " << listening;
  EXPECT_EQ(Wait(second), 2);
  EXPECT_THAT(Slurp(err), HasSubstr("--listen " + address_ + ": the address is in use"));
  // It opened nothing: no store, no lock beside it.
  EXPECT_NE(access(other_db.c_str(), F_OK), 0);
  EXPECT_NE(access((other_db + ".ktuned-lock").c_str(), F_OK), 0);
  // Every call still reaches the first daemon.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(Get(r.job_id()).id(), r.job_id());
}

TEST_F(DaemonTest, AListenAddressOfTheWrongFormIsNamed) {
  for (const std::string address :
       {"nonsense", "127.0.0.1:", "127.0.0.1:70000", "::1:7070", "127.0.0.1:7x", "unix:"}) {
    std::string failure;
    EXPECT_FALSE(StartDaemon({"--device", kConv, "--listen", address}, &failure)) << address;
    EXPECT_THAT(failure, HasSubstr("--listen " + address + ": ")) << address;
    EXPECT_THAT(failure, HasSubstr("HOST:PORT")) << address;
    EXPECT_THAT(failure, Not(HasSubstr("TLS"))) << address;
  }
  std::string failure;
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--listen", "192.0.2.1:0", "--insecure"}, &failure));
  EXPECT_THAT(failure, HasSubstr("192.0.2.1 is not an address of this machine"));
}

TEST_F(DaemonTest, AFlagForAnotherSetUpIsRefusedNotIgnored) {
  std::string failure;
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--lease-seconds", "5"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--lease-seconds is for a fleet's daemon"));
  EXPECT_THAT(failure, HasSubstr("is a SQLite file"));
  EXPECT_FALSE(StartDaemon({"--device", "0", "--sim-speed", "10"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--sim-speed sets how fast recorded spaces replay"));
}

// The soft and hard limits of `pid` on open files, from /proc.
std::pair<std::string, std::string> OpenFileLimits(pid_t pid) {
  for (const std::string& line : StrSplit(Slurp(StrCat("/proc/", pid, "/limits")), '\n')) {
    if (line.rfind("Max open files", 0) != 0) continue;
    std::vector<std::string> words;
    for (const std::string& w : StrSplit(line.substr(14), ' ')) {
      if (!w.empty()) words.push_back(w);
    }
    if (words.size() >= 2) return {words[0], words[1]};
  }
  return {};
}

TEST_F(DaemonTest, ItRaisesItsOpenFileLimitToTheHardOne) {
  rlimit mine{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &mine), 0);
  if (mine.rlim_max < 8192) GTEST_SKIP() << "a hard limit of " << mine.rlim_max << " here";
  // Started from a shell's 1024 (inherited), it serves with the hard limit.
  rlimit low = mine;
  low.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const bool started = StartDaemon({"--device", kConv});
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &mine), 0);
  ASSERT_TRUE(started);
  const auto [soft, hard] = OpenFileLimits(pid_);
  EXPECT_EQ(soft, hard);
  EXPECT_NE(soft, "1024");
  EXPECT_THAT(Slurp(File("daemon.err")), Not(HasSubstr("open files")));
  Stop(SIGTERM);

  // A hard limit too low for a crowd of clients is named, and it still serves.
  int port_fd = -1;
  const pid_t limited = testing::SpawnWithPipe(
      "/bin/sh",
      {"-c", "ulimit -n 1000 && exec \"$0\" \"$@\"", KTUNED_PATH, "--db", Db(), "--listen",
       "127.0.0.1:0", "--port-file", "/dev/fd/3", "--device", kConv},
      File("limited.out"), File("limited.err"), &port_fd);
  const std::string address = testing::ReadLine(port_fd);
  close(port_fd);
  EXPECT_NE(address, "") << Slurp(File("limited.err"));
  EXPECT_EQ(OpenFileLimits(limited), std::make_pair(std::string("1000"), std::string("1000")));
  kill(limited, SIGTERM);
  EXPECT_EQ(Wait(limited), 0);
  EXPECT_THAT(Slurp(File("limited.err")),
              HasSubstr("warning: at most 1000 open files (ulimit -n; the hard limit is 1000)"));
}

TEST_F(DaemonTest, ACleanStopLeavesNoLockFile) {
  ASSERT_TRUE(StartDaemon({"--device", kConv}));
  const std::string lock = Db() + ".ktuned-lock";
  EXPECT_EQ(access(lock.c_str(), F_OK), 0);
  EXPECT_EQ(Stop(SIGTERM), 0);
  EXPECT_NE(access(lock.c_str(), F_OK), 0);
  ASSERT_TRUE(StartDaemon({"--device", kConv}));  // and the store is free again
}

TEST_F(DaemonTest, QueueLimitIsResourceExhausted) {
  ASSERT_TRUE(StartDaemon(
      {"--device", kConv, "--max-running", "1", "--max-queued", "1", "--sim-speed", "20"}));
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Budget(500, 1), &r).ok());  // runs
  ASSERT_TRUE(Submit(Budget(500, 2), &r).ok());  // waits
  const grpc::Status s = Submit(Budget(500, 3), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-queued"));
}

// A client's queued and running jobs are limited; the limit counts each
// client apart, resubmitting a job it has is no new job, and a job's end
// makes room.
TEST_F(DaemonTest, EachClientsJobsAreLimited) {
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--max-running", "1", "--max-jobs-per-client", "2",
                           "--sim-speed", "20"}));
  auto submit = [&](int seed, const std::string& client, v1::SubmitJobResponse* r) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Budget(500, seed);
    req.set_client(client);
    return stub_->SubmitJob(&ctx, req, r);
  };
  v1::SubmitJobResponse first, second, r;
  ASSERT_TRUE(submit(1, "ann@h1", &first).ok());   // runs
  ASSERT_TRUE(submit(2, "ann@h1", &second).ok());  // waits
  EXPECT_EQ(first.job().client(), "ann@h1");
  const grpc::Status over = submit(3, "ann@h1", &r);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(over.error_message(),
            "client 'ann@h1' has 2 jobs queued or running, this daemon's limit per client "
            "(--max-jobs-per-client); submit again once one ends");
  EXPECT_TRUE(submit(2, "ann@h1", &r).ok());  // the same job again
  EXPECT_TRUE(r.resumed());
  ASSERT_TRUE(submit(3, "bob@h2", &r).ok());
  ASSERT_TRUE(submit(4, "bob@h2", &r).ok());
  // A client that names none is its address.
  ASSERT_TRUE(submit(5, "", &r).ok());
  EXPECT_EQ(r.job().client(), "ipv4:127.0.0.1");
  // The command line names itself, or as told.
  const RunResult cli = Cli({"tune", "--max-evals", "500", "--seed", "6", "--client", "ann@h1"});
  EXPECT_EQ(cli.code, 1);
  EXPECT_THAT(cli.err, HasSubstr("client 'ann@h1' has 2 jobs queued or running"));
  EXPECT_EQ(Cli({"tune", "--max-evals", "500", "--seed", "7", "--client", "x\ty"}).code, 2);
  // Once one of ann's jobs ends, she may submit another.
  {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::CancelJobRequest req;
    req.set_job_id(second.job_id());
    v1::Job cancelled;
    ASSERT_TRUE(stub_->CancelJob(&ctx, req, &cancelled).ok());
  }
  EXPECT_TRUE(submit(3, "ann@h1", &r).ok());
}

TEST_F(DaemonTest, TokensAndAddresses) {
  std::string failure;
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--listen", "0.0.0.0:0"}, &failure));
  EXPECT_THAT(failure, HasSubstr("TLS"));
  EXPECT_THAT(failure, HasSubstr("--token-file"));

  std::ofstream(File("token")) << "s3cret-token\n";
  chmod(File("token").c_str(), 0640);  // readable by the group: warned about
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--token-file", File("token")}));
  EXPECT_THAT(Slurp(File("daemon.err")),
              HasSubstr("--token-file " + File("token") +
                        " is readable by other users (mode 640); make it readable by its owner "
                        "only: chmod 600"));
  Stop(SIGTERM);
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(StartDaemon({"--device", kConv, "--token-file", File("token")}));
  EXPECT_THAT(Slurp(File("daemon.err")), Not(HasSubstr("readable by other users")));
  grpc::ClientContext ctx;
  v1::ListDevicesResponse devices;
  EXPECT_EQ(stub_->ListDevices(&ctx, v1::ListDevicesRequest(), &devices).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext wrong;
  wrong.AddMetadata("authorization", "Bearer s3cret-tokem");
  EXPECT_EQ(stub_->ListDevices(&wrong, v1::ListDevicesRequest(), &devices).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const RunResult anonymous = Cli({"jobs"});
  EXPECT_EQ(anonymous.code, 1);
  EXPECT_THAT(anonymous.err, HasSubstr("unauthenticated"));
  const RunResult with_token = Cli({"devices", "--token-file", File("token")});
  EXPECT_EQ(with_token.code, 0) << with_token.err;
  EXPECT_THAT(with_token.out, HasSubstr("A100"));
  Stop(SIGTERM);

  ASSERT_TRUE(StartDaemon({"--device", kConv, "--listen", "0.0.0.0:0", "--insecure"}));
  EXPECT_THAT(Slurp(File("daemon.err")), HasSubstr("WARNING"));
}

TEST_F(DaemonTest, TlsWithAToken) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  ASSERT_TRUE(MakeCertificate("cert", "localhost"));
  std::ofstream(File("token")) << "tls-token";
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(
      StartDaemon({"--device", kConv, "--listen", "localhost:0", "--tls-cert", File("cert.pem"),
                   "--tls-key", File("cert-key.pem"), "--token-file", File("token")}));
  const RunResult secured =
      Cli({"devices", "--tls-ca", File("cert.pem"), "--token-file", File("token"), "--json"});
  EXPECT_EQ(secured.code, 0) << secured.err;
  EXPECT_THAT(secured.out, HasSubstr("A100"));
  const RunResult plain = Cli({"devices", "--token-file", File("token"), "--timeout", "3"});
  EXPECT_EQ(plain.code, 1);

  // TLS 1.2 is the least the daemon speaks: a client offering only 1.1
  // (allowed on its side) gets no session.
  auto handshake = [&](const char* version) {
    const std::string out = File(StrCat("s_client_", version));
    const std::string c = StrCat("openssl s_client -connect ", address_, " -", version,
                                 " -cipher DEFAULT@SECLEVEL=0 </dev/null >", out, " 2>&1");
    (void)system(c.c_str());
    return Slurp(out);
  };
  EXPECT_THAT(handshake("tls1_1"), HasSubstr("Cipher is (NONE)"));
  EXPECT_THAT(handshake("tls1_2"), HasSubstr("New, TLSv1.2, Cipher is "));
}

// With mutual TLS a client is the name its certificate gives, whatever
// name it claims: the per-client limits cannot be dodged by renaming.
TEST_F(DaemonTest, AClientCertificateNamesTheClient) {
  if (system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  ASSERT_TRUE(MakeCertificate("server", "localhost"));
  ASSERT_TRUE(MakeCertificate("ann", "ann"));
  ASSERT_TRUE(
      StartDaemon({"--device", kConv, "--listen", "localhost:0", "--tls-cert", File("server.pem"),
                   "--tls-key", File("server-key.pem"), "--tls-client-ca", File("ann.pem")}));
  const std::vector<std::string> tls = {"--tls-ca",      File("server.pem"), "--tls-cert",
                                        File("ann.pem"), "--tls-key",        File("ann-key.pem")};
  std::vector<std::string> tune = {"tune", "--max-evals", "3", "--client", "mallory", "--json"};
  tune.insert(tune.end(), tls.begin(), tls.end());
  const RunResult queued = Cli(tune);
  ASSERT_EQ(queued.code, 0) << queued.err;
  const std::size_t at = queued.out.find("\"job_id\":\"") + 10;
  const std::string id = queued.out.substr(at, queued.out.find('"', at) - at);
  std::vector<std::string> show = {"show", id, "--json"};
  show.insert(show.end(), tls.begin(), tls.end());
  const RunResult shown = Cli(show);
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_THAT(shown.out, HasSubstr("\"client\":\"ann\""));
}

}  // namespace
}  // namespace ktune
