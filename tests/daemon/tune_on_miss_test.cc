// GetBest's tune_on_miss against a daemon replaying a recording: a lookup
// that falls back on the nearest problem queues a job for the exact one,
// once, whoever asks; a refresh once it ran is exact. The client library
// does the same for an application (tests/consumer/main.cc).
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/daemon/daemon_fixture.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;

// A job file for the recorded pnpoly space (no source: the recording
// answers), its problem named `n`.
constexpr char kPnpolySpec[] = R"json({
  "kernel": {"name": "cn_pnpoly"},
  "parameters": [
    {"name": "between_method", "ints": [0, 1, 2, 3]},
    {"name": "block_size_x", "ints": [32, 64, 96, 128, 160, 192, 224, 256]},
    {"name": "tile_size", "ints": [1, 2, 4, 6, 8]},
    {"name": "use_method", "ints": [0, 1, 2]}
  ],
  "problem": {"n": 20000000},
  "strategy": {"name": "random", "seed": 5, "maxEvaluations": 12}
})json";

class TuneOnMissTest : public DaemonTest {
 protected:
  static v1::JobSpec Spec() {
    v1::JobSpec spec;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(kPnpolySpec, &spec).ok());
    return spec;
  }

  grpc::Status Best(std::int64_t n, bool tune, bool with_spec, const std::string& client,
                    v1::GetBestResponse* out, const std::string& kernel = "cn_pnpoly") {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetBestRequest req;
    req.set_kernel(kernel);
    (*req.mutable_problem())["n"] = n;
    req.set_tune_on_miss(tune);
    req.set_client(client);
    if (with_spec) {
      *req.mutable_spec() = Spec();
      req.mutable_spec()->mutable_kernel()->set_name(kernel);
    }
    return stub_->GetBest(&ctx, req, out);
  }

  int JobsOf(std::int64_t n) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::ListJobsResponse jobs;
    EXPECT_TRUE(stub_->ListJobs(&ctx, v1::ListJobsRequest(), &jobs).ok());
    int found = 0;
    for (const v1::Job& j : jobs.jobs()) found += j.problem().at("n") == n;
    return found;
  }
};

TEST_F(TuneOnMissTest, AMissQueuesTheExactProblemOnceAndARefreshIsExact) {
  // Replayed in real time (twice as fast as recorded): the job for the
  // miss is still running when the other clients ask.
  ASSERT_TRUE(StartDaemon({"--device", kPnpoly, "--sim-speed", "2"}));
  v1::SubmitJobResponse first;
  ASSERT_TRUE(Submit(Spec(), &first).ok());
  ASSERT_EQ(Follow(first.job_id()), v1::SUCCEEDED);

  // Without tune_on_miss a fallback is only a fallback.
  v1::GetBestResponse plain;
  ASSERT_TRUE(Best(10000000, false, false, "ann", &plain).ok());
  EXPECT_EQ(plain.match(), v1::GetBestResponse::NEAREST_PROBLEM);
  EXPECT_EQ(plain.tuning_job_id(), "");
  EXPECT_EQ(JobsOf(10000000), 0);

  // With it, the miss queues one job for the exact problem, whoever asks
  // and with or without a spec of their own.
  v1::GetBestResponse a, b, c;
  ASSERT_TRUE(Best(10000000, true, true, "ann", &a).ok());
  EXPECT_EQ(a.match(), v1::GetBestResponse::NEAREST_PROBLEM);
  ASSERT_FALSE(a.tuning_job_id().empty()) << a.tuning_note();
  ASSERT_TRUE(Best(10000000, true, true, "bob", &b).ok());
  ASSERT_TRUE(Best(10000000, true, false, "carl", &c).ok());
  EXPECT_EQ(b.tuning_job_id(), a.tuning_job_id());
  EXPECT_EQ(c.tuning_job_id(), a.tuning_job_id());
  EXPECT_EQ(Follow(a.tuning_job_id()), v1::SUCCEEDED);
  EXPECT_EQ(JobsOf(10000000), 1);
  EXPECT_EQ(Get(a.tuning_job_id()).client(), "ann");

  // The refresh: the exact answer, from that job.
  v1::GetBestResponse exact;
  ASSERT_TRUE(Best(10000000, true, false, "ann", &exact).ok());
  EXPECT_EQ(exact.match(), v1::GetBestResponse::EXACT);
  EXPECT_EQ(exact.job_id(), a.tuning_job_id());
  EXPECT_EQ(JobsOf(10000000), 1);

  // Without a spec, nothing stored of a kernel cannot be tuned...
  v1::GetBestResponse none;
  const grpc::Status unknown = Best(10000000, true, false, "ann", &none, "other");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.error_message(), HasSubstr("GetBestRequest.spec"));
  // ...and with one, there is no answer yet but a job is queued.
  const grpc::Status queued = Best(5000000, true, true, "ann", &none, "cn_pnpoly");
  ASSERT_TRUE(queued.ok()) << queued.error_message();
  EXPECT_EQ(none.match(), v1::GetBestResponse::NEAREST_PROBLEM);
  EXPECT_FALSE(none.tuning_job_id().empty());
}

TEST_F(TuneOnMissTest, NothingStoredYetButAJobQueuedIsNoAnswerWithItsJob) {
  ASSERT_TRUE(StartDaemon({"--device", kPnpoly}));
  v1::GetBestResponse r;
  const grpc::Status s = Best(20000000, true, true, "ann", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.match(), v1::GetBestResponse::MATCH_KIND_UNSPECIFIED);
  EXPECT_FALSE(r.has_best());
  ASSERT_FALSE(r.tuning_job_id().empty());
  EXPECT_EQ(Follow(r.tuning_job_id()), v1::SUCCEEDED);
  v1::GetBestResponse exact;
  ASSERT_TRUE(Best(20000000, false, false, "ann", &exact).ok());
  EXPECT_EQ(exact.match(), v1::GetBestResponse::EXACT);
  // A spec of another kernel is refused, by its field.
  grpc::ClientContext ctx;
  Deadline(ctx);
  v1::GetBestRequest wrong;
  wrong.set_kernel("cn_pnpoly");
  (*wrong.mutable_problem())["n"] = 7;
  wrong.set_tune_on_miss(true);
  *wrong.mutable_spec() = Spec();
  wrong.mutable_spec()->mutable_kernel()->set_name("saxpy");
  v1::GetBestResponse answer;
  ASSERT_TRUE(stub_->GetBest(&ctx, wrong, &answer).ok());
  EXPECT_EQ(answer.tuning_job_id(), "");
  EXPECT_THAT(answer.tuning_note(), HasSubstr("spec.kernel.name: 'saxpy' is not the kernel"));
}

TEST_F(TuneOnMissTest, EachClientStartsAFewAtMost) {
  ASSERT_TRUE(StartDaemon({"--device", kPnpoly, "--sim-speed", "0.05", "--max-running", "1",
                           "--max-miss-jobs-per-client", "1"}));
  v1::GetBestResponse r;
  ASSERT_TRUE(Best(1000, true, true, "ann", &r).ok());
  ASSERT_FALSE(r.tuning_job_id().empty()) << r.tuning_note();
  // Over the limit nothing is queued: with no answer yet that is a
  // NOT_FOUND saying why, with one a note beside it.
  r.Clear();
  const grpc::Status over = Best(2000, true, true, "ann", &r);
  EXPECT_EQ(r.tuning_job_id(), "");
  EXPECT_THAT(over.ok() ? r.tuning_note() : over.error_message(),
              HasSubstr("client 'ann' has 1 jobs queued or running from misses, this daemon's "
                        "limit (--max-miss-jobs-per-client)"));
  ASSERT_TRUE(Best(2000, true, true, "bob", &r).ok());
  EXPECT_FALSE(r.tuning_job_id().empty()) << r.tuning_note();
}

TEST_F(TuneOnMissTest, AnApplicationKeepsItsFallbackUntilARefreshIsExact) {
  ASSERT_TRUE(StartDaemon({"--device", kPnpoly, "--sim-speed", "20"}));
  v1::SubmitJobResponse first;
  ASSERT_TRUE(Submit(Spec(), &first).ok());
  ASSERT_EQ(Follow(first.job_id()), v1::SUCCEEDED);
  std::ofstream(File("spec.json")) << kPnpolySpec;
  const std::string out = File("probe.out"), err = File("probe.err");
  const int code = Wait(Spawn(CLIENT_PROBE_PATH,
                              {"--server", address_, "--tune-on-miss", File("spec.json"),
                               "--wait-exact", "60", "cn_pnpoly", "", "n=3000000"},
                              out, err));
  EXPECT_EQ(code, 0) << Slurp(err);
  const std::string lines = Slurp(out);
  EXPECT_THAT(lines,
              ::testing::MatchesRegex("match=nearest_problem key=[0-9,]+ .* tuning=[0-9a-f]+\n"
                                      "match=exact key=[0-9,]+ .*\n"))
      << lines;
}

}  // namespace
}  // namespace ktune
