// The daemon's service in this process, on a fake clock: GetBest answers
// from memory while no stored best can have changed, and notices what other
// processes store once its look comes due (every 200 ms of the clock).
#include "server/daemon/service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "ktune/v1/tuner.grpc.pb.h"
#include "server/daemon/scheduler.h"
#include "tests/testing/process.h"
#include "tests/testing/temp_dir.h"
#include "tuner/base/clock.h"

namespace ktune {
namespace {

const std::string kConv =
    "sim:" + std::string(KTUNE_SOURCE_DIR) + "/kernels/recorded/convolution_milo_A100.json.gz";

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerOptions so;
    so.db_path = tmp_.File("k.db");
    so.devices = {kConv};
    so.clock = &clock_;
    scheduler_ = std::make_unique<Scheduler>(so);
    ASSERT_TRUE(scheduler_->Start().ok());
    service_ = std::make_unique<TunerService>(*scheduler_, "", 2);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Tuner::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                   grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    scheduler_->Shutdown();
    if (server_ != nullptr) server_->Shutdown();
    service_->Drain();
  }

  // Runs a job to its end (following its events).
  void Tune(int evaluations, std::uint64_t seed) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->mutable_strategy()->set_name("random");
    req.mutable_spec()->mutable_strategy()->set_max_evaluations(evaluations);
    req.mutable_spec()->mutable_strategy()->set_seed(seed);
    v1::SubmitJobResponse resp;
    grpc::ClientContext submit;
    ASSERT_TRUE(stub_->SubmitJob(&submit, req, &resp).ok());
    grpc::ClientContext watch;
    v1::WatchJobRequest w;
    w.set_job_id(resp.job_id());
    auto reader = stub_->WatchJob(&watch, w);
    v1::JobEvent ev;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&ev)) {
      if (ev.has_state()) state = ev.state();
    }
    ASSERT_TRUE(reader->Finish().ok());
    ASSERT_EQ(state, v1::SUCCEEDED);
  }

  double Best() {
    grpc::ClientContext ctx;
    v1::GetBestRequest req;
    req.set_kernel("convolution_kernel");
    v1::GetBestResponse resp;
    const grpc::Status s = stub_->GetBest(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.best().time_ms();
  }

  testing::TempDir tmp_;
  FakeClock clock_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<TunerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Tuner::Stub> stub_;
};

TEST_F(ServiceTest, ARepeatedQueryIsAnsweredFromMemoryUntilABestChanges) {
  Tune(3, 7);
  const double first = Best();
  EXPECT_EQ(service_->best_answers_remembered(), 0u);
  EXPECT_EQ(Best(), first);
  EXPECT_EQ(service_->best_answers_remembered(), 1u);  // the store was not read
  Tune(300, 8);  // a better result: the remembered answer gives way
  const double later = Best();
  EXPECT_LT(later, first);
  EXPECT_EQ(service_->best_answers_remembered(), 1u);
  EXPECT_EQ(Best(), later);
  EXPECT_EQ(service_->best_answers_remembered(), 2u);
}

TEST_F(ServiceTest, AnotherProcessesWriteIsNoticedWhenTheLookComesDue) {
  Tune(8, 5);
  const double before = Best();
  // The whole space, measured by a headless job into the daemon's store.
  const std::string out = tmp_.File("local.out"), err = tmp_.File("local.err");
  ASSERT_EQ(testing::WaitExit(testing::Spawn(KTUNE_CLI_PATH,
                                             {"tune", "--local", "--device", kConv, "--strategy",
                                              "brute_force", "--db", tmp_.File("k.db"), "--json"},
                                             out, err)),
            0)
      << testing::Slurp(err);
  const double optimum = 0.5536000076681375;  // the recording's
  ASSERT_GT(before, optimum);
  const std::uint64_t remembered = service_->best_answers_remembered();
  EXPECT_EQ(Best(), before);  // not looked yet: still the remembered answer
  EXPECT_EQ(service_->best_answers_remembered(), remembered + 1);
  clock_.Advance(std::chrono::milliseconds(199));
  EXPECT_EQ(Best(), before);
  clock_.Advance(std::chrono::milliseconds(1));  // the look is due
  EXPECT_DOUBLE_EQ(Best(), optimum);
  EXPECT_EQ(service_->best_answers_remembered(), remembered + 2);
}

}  // namespace
}  // namespace ktune
