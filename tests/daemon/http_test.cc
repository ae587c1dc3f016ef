// ktuned's HTTP endpoint over loopback: /metrics in the Prometheus text
// format (checked by promtool) following what the daemon did, the
// dashboard's API and pages, and the token and TLS rules of the gRPC port.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/daemon/daemon_fixture.h"
#include "tests/testing/http_client.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

using ::testing::HasSubstr;
using testing::HttpAnswer;
using testing::HttpFetch;

class HttpTest : public DaemonTest {
 protected:
  // Starts ktuned with its HTTP endpoint on a free port of loopback.
  bool StartWithHttp(std::vector<std::string> args, std::string* failure = nullptr) {
    args.insert(args.end(), {"--http", "127.0.0.1:0", "--http-port-file", File("http")});
    if (!StartDaemon(args, failure)) return false;
    http_ = std::string(StripSpace(Slurp(File("http"))));  // written before the port file
    return !http_.empty();
  }

  HttpAnswer Get(const std::string& target,
                 const std::map<std::string, std::string>& headers = {}) {
    return HttpFetch(http_, target, headers);
  }

  // The value of the one series of `metrics` whose line starts with
  // `series` (name and labels); -1 when there is none.
  static double Value(const std::string& metrics, const std::string& series) {
    for (const std::string& line : StrSplit(metrics, '\n')) {
      if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    }
    return -1;
  }

  // `text` through promtool check metrics: its exit code and what it said.
  int Promtool(const std::string& text, std::string* said) {
    std::ofstream(File("metrics.txt")) << text;
    const std::string cmd = StrCat("promtool check metrics < ", File("metrics.txt"), " > ",
                                   File("promtool.out"), " 2>&1");
    const int rc = system(cmd.c_str());
    *said = Slurp(File("promtool.out"));
    return rc;
  }

  std::string http_;
};

TEST_F(HttpTest, MetricsFollowTheDaemonAndPassPromtool) {
  ASSERT_TRUE(StartWithHttp({"--device", kConv}));
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Budget(12, 1), &r).ok());
  ASSERT_EQ(Follow(r.job_id()), v1::SUCCEEDED);
  BestConvolutionMs();  // read from the store
  BestConvolutionMs();  // answered from memory
  const HttpAnswer m = Get("/metrics");
  ASSERT_EQ(m.status, 200) << m.error << m.body;
  EXPECT_EQ(m.headers.at("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  std::string said;
  EXPECT_EQ(Promtool(m.body, &said), 0) << said << "\n" << m.body;
  EXPECT_EQ(said, "") << "promtool found something to say about the names";

  const std::string device = StrCat("device=\"", kConv, "\",model=\"NVIDIA A100-PCIE-40GB\"");
  EXPECT_EQ(Value(m.body, StrCat("ktune_evaluations_total{", device, ",status=\"ok\"}")), 12);
  EXPECT_EQ(Value(m.body, StrCat("ktune_evaluations_total{", device, ",status=\"timeout\"}")), 0);
  EXPECT_EQ(Value(m.body, "ktune_jobs{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Value(m.body, "ktune_jobs{state=\"running\"}"), 0);
  EXPECT_EQ(Value(m.body, StrCat("ktune_queue_depth{", device, "}")), 0);
  EXPECT_EQ(Value(m.body, StrCat("ktune_worker_restarts_total{", device, "}")), 0);
  EXPECT_GT(Value(m.body, StrCat("ktune_device_busy_seconds_total{", device, "}")), 0);
  EXPECT_EQ(Value(m.body, "ktune_getbest_requests_total{answer=\"store\"}"), 1);
  EXPECT_EQ(Value(m.body, "ktune_getbest_requests_total{answer=\"memory\"}"), 1);
  EXPECT_EQ(Value(m.body, "ktune_getbest_duration_seconds_count"), 2);
  EXPECT_EQ(Value(m.body, "ktune_getbest_duration_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_GT(Value(m.body, "ktune_store_size_bytes"), 0);
  EXPECT_EQ(Value(m.body, "ktune_http_connections"), 1);  // the scrape's own
  EXPECT_EQ(Value(m.body, "ktune_http_connection_limit_reached_total"), 0);
  EXPECT_THAT(m.body, HasSubstr("ktune_build_info{cuda_driver=\"\",nvrtc=\""));
  EXPECT_THAT(m.body, HasSubstr(",version=\"0.1.0\"} 1"));

  // Counters only grow: a second job adds its evaluations.
  ASSERT_TRUE(Submit(Budget(5, 2), &r).ok());
  ASSERT_EQ(Follow(r.job_id()), v1::SUCCEEDED);
  const HttpAnswer again = Get("/metrics");
  EXPECT_EQ(Value(again.body, StrCat("ktune_evaluations_total{", device, ",status=\"ok\"}")), 17);
  EXPECT_EQ(Value(again.body, "ktune_jobs{state=\"succeeded\"}"), 2);
}

TEST_F(HttpTest, TheDashboardsApiAndPagesAnswer) {
  ASSERT_TRUE(StartWithHttp({"--device", kConv}));
  v1::SubmitJobResponse r;
  ASSERT_TRUE(Submit(Budget(10, 3), &r).ok());
  ASSERT_EQ(Follow(r.job_id()), v1::SUCCEEDED);
  const std::string id = r.job_id();

  const HttpAnswer jobs = Get("/api/jobs");
  ASSERT_EQ(jobs.status, 200) << jobs.body;
  EXPECT_EQ(jobs.headers.at("content-type"), "application/json");
  absl::StatusOr<Json> list = ParseJson(jobs.body);
  ASSERT_TRUE(list.ok()) << jobs.body;
  const Json& first = list->Find("jobs")->as_array()[0];
  EXPECT_EQ(first.Find("id")->as_string(), id);
  EXPECT_EQ(first.Find("state")->as_string(), "SUCCEEDED");
  EXPECT_NE(first.Find("best"), nullptr) << "a job's best so far is listed";
  EXPECT_EQ(first.Find("progress")->Find("maxEvaluations")->as_string(), "10");

  const HttpAnswer job = Get("/api/jobs/" + id);
  ASSERT_EQ(job.status, 200) << job.body;
  absl::StatusOr<Json> all = ParseJson(job.body);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->Find("measurements")->as_array().size(), 10u);
  const HttpAnswer page = Get("/api/jobs/" + id + "?from=7");
  absl::StatusOr<Json> tail = ParseJson(page.body);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->Find("measurements")->as_array().size(), 3u);
  EXPECT_EQ(tail->Find("measurements")->as_array()[0].Find("sequence")->as_string(), "7");
  EXPECT_EQ(tail->Find("progress")->Find("evaluations")->as_string(), "10");

  const HttpAnswer missing = Get("/api/jobs/ffffffffffffffff");
  EXPECT_EQ(missing.status, 404);
  EXPECT_THAT(missing.body, HasSubstr("\"error\""));
  EXPECT_EQ(Get("/api/jobs/" + id + "?from=x").status, 400);
  const HttpAnswer devices = Get("/api/devices");
  ASSERT_EQ(devices.status, 200);
  absl::StatusOr<Json> d = ParseJson(devices.body);
  ASSERT_TRUE(d.ok()) << devices.body;
  std::int64_t evaluated = 0;
  for (const auto& [status, n] :
       d->Find("devices")->as_array()[0].Find("evaluations")->as_object()) {
    evaluated += n.as_int();
  }
  EXPECT_EQ(evaluated, 10) << devices.body;

  for (const char* path : {"/", "/devices", "/jobs/abc"}) {
    const HttpAnswer html = Get(path);
    EXPECT_EQ(html.status, 200) << path;
    EXPECT_EQ(html.headers.at("content-type"), "text/html; charset=utf-8");
    EXPECT_THAT(html.body, HasSubstr("/static/dashboard.js"));
  }
  const HttpAnswer chart = Get("/static/chart.js");
  EXPECT_EQ(chart.status, 200);
  EXPECT_THAT(chart.body, HasSubstr("Chart.js v4"));
  EXPECT_THAT(chart.headers.at("content-security-policy"), HasSubstr("default-src 'self'"));
  EXPECT_EQ(Get("/nothing").status, 404);
  EXPECT_EQ(HttpFetch(http_, "/metrics", {}, false, "POST").status, 405);
  const HttpAnswer head = HttpFetch(http_, "/metrics", {}, false, "HEAD");
  EXPECT_EQ(head.status, 200) << head.error;
}

TEST_F(HttpTest, ConnectionsBeyondTheLimitWaitForOneToClose) {
  ASSERT_TRUE(StartWithHttp({"--device", kConv, "--http-max-connections", "3"}));
  namespace asio = boost::asio;
  asio::io_context io;
  const std::size_t colon = http_.rfind(':');
  const auto at =
      asio::ip::tcp::resolver(io).resolve(http_.substr(0, colon), http_.substr(colon + 1));
  // Three idle connections hold the limit; the kernel queues the next
  // ones in arrival order, so a fourth is taken only when one of the
  // three closes.
  std::vector<asio::ip::tcp::socket> held;
  for (int i = 0; i < 3; ++i) {
    held.emplace_back(io);
    asio::connect(held.back(), at);
  }
  std::future<HttpAnswer> fourth = std::async(std::launch::async, [&] { return Get("/healthz"); });
  EXPECT_EQ(fourth.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "answered while the limit was held";
  held[0].close();
  const HttpAnswer answered = fourth.get();
  EXPECT_EQ(answered.status, 200) << answered.error;
  // Taken as the fourth ended: the two held, and the scrape.
  const HttpAnswer m = Get("/metrics");
  EXPECT_EQ(Value(m.body, "ktune_http_connections"), 3);
  EXPECT_EQ(Value(m.body, "ktune_http_connection_limit_reached_total"), 3);
  std::string failure;
  EXPECT_FALSE(StartDaemon(
      {"--device", kConv, "--http", "127.0.0.1:0", "--http-max-connections", "0"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--http-max-connections: 0 is out of range [1, 65536]"));
  // Without --http there is no dashboard to limit: said, not ignored.
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--http-max-connections", "8"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--http-max-connections is for the dashboard, which is off"));
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--http-port-file", File("none")}, &failure));
  EXPECT_THAT(failure, HasSubstr("--http-port-file is for the dashboard, which is off"));
}

// A client whose host vanishes answers nothing, not even with a reset:
// stopped, a `ktune watch` process is one. The daemon's keepalive closes
// its connection and its stream; a watcher still there keeps its own.
TEST_F(HttpTest, AWatcherThatStopsAnsweringIsClosedByTheKeepalive) {
  ASSERT_TRUE(StartWithHttp({"--device", kConv, "--sim-speed", "1", "--keepalive-seconds", "2"}));
  v1::SubmitJobResponse job;
  ASSERT_TRUE(Submit(Budget(4000, 1), &job).ok());
  auto watch = [&](const std::string& name) {
    return Spawn(KTUNE_CLI_PATH, {"--server", address_, "watch", job.job_id()}, File(name + ".out"),
                 File(name + ".err"));
  };
  // The number of streams open once it is `want`, or its last value after
  // a minute.
  auto streams_become = [&](double want) {
    double now = -1;
    for (int i = 0; i < 600 && now != want; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      now = Value(Get("/metrics").body, "ktune_watch_streams");
    }
    return now;
  };
  const pid_t gone = watch("gone");
  ASSERT_EQ(streams_become(1), 1);
  const pid_t live = watch("live");
  ASSERT_EQ(streams_become(2), 2);
  kill(gone, SIGSTOP);
  EXPECT_EQ(streams_become(1), 1) << "the stopped watcher's stream is still open";
  // Through a few more pings, the live watcher's stream stays.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_EQ(Value(Get("/metrics").body, "ktune_watch_streams"), 1);
  for (const pid_t w : {gone, live}) {
    kill(w, SIGKILL);
    Wait(w);
  }
  EXPECT_EQ(streams_become(0), 0);
}

TEST_F(HttpTest, ATokenGuardsTheEndpoint) {
  std::ofstream(File("token")) << "web-token\n";
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(StartWithHttp({"--device", kConv, "--token-file", File("token")}));
  const HttpAnswer anonymous = Get("/metrics");
  EXPECT_EQ(anonymous.status, 401);
  EXPECT_THAT(anonymous.body, HasSubstr("Authorization: Bearer TOKEN"));
  EXPECT_EQ(Get("/api/jobs", {{"Authorization", "Bearer web-tokem"}}).status, 401);
  EXPECT_EQ(Get("/metrics", {{"Authorization", "Bearer web-token"}}).status, 200);
  // A browser signs in once and holds a cookie.
  EXPECT_EQ(Get("/?token=wrong").status, 401);
  const HttpAnswer signin = Get("/?token=web-token");
  EXPECT_EQ(signin.status, 303);
  EXPECT_EQ(signin.headers.at("location"), "/");
  EXPECT_EQ(signin.headers.at("set-cookie"),
            "ktune_token=web-token; Path=/; HttpOnly; SameSite=Strict");
  // To the page asked for, never to another site.
  EXPECT_EQ(Get("/jobs/0123abcd?token=web-token").headers.at("location"), "/jobs/0123abcd");
  EXPECT_EQ(Get("//elsewhere.example/?token=web-token").headers.at("location"), "/");
  EXPECT_EQ(Get("/\\elsewhere.example?token=web-token").headers.at("location"), "/");
  EXPECT_EQ(Get("http://elsewhere.example/?token=web-token").headers.at("location"), "/");
  EXPECT_EQ(Get("/api/jobs", {{"Cookie", "theme=dark; ktune_token=web-token"}}).status, 200);
  EXPECT_EQ(Get("/api/jobs", {{"Cookie", "ktune_token=web"}}).status, 401);
}

TEST_F(HttpTest, OffLoopbackTheEndpointNeedsTlsAndAToken) {
  std::string failure;
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--http", "0.0.0.0:0"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--http 0.0.0.0:0: not a loopback address, so TLS"));
  EXPECT_FALSE(StartDaemon({"--device", kConv, "--http", "nonsense"}, &failure));
  EXPECT_THAT(failure, HasSubstr("--http nonsense: no port; give HOST:PORT"));

  if (system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl";
  ASSERT_TRUE(MakeCertificate("cert", "localhost"));
  std::ofstream(File("token")) << "tls-token";
  chmod(File("token").c_str(), 0600);
  ASSERT_TRUE(
      StartDaemon({"--device", kConv, "--listen", "127.0.0.1:0", "--tls-cert", File("cert.pem"),
                   "--tls-key", File("cert-key.pem"), "--token-file", File("token"), "--http",
                   "0.0.0.0:0", "--http-port-file", File("http")}));
  const std::string address = std::string(StripSpace(Slurp(File("http"))));
  const std::string port = address.substr(address.rfind(':') + 1);
  const std::string at = "127.0.0.1:" + port;
  const HttpAnswer secured =
      HttpFetch(at, "/metrics", {{"Authorization", "Bearer tls-token"}}, /*tls=*/true);
  EXPECT_EQ(secured.status, 200) << secured.error;
  EXPECT_THAT(secured.body, HasSubstr("ktune_build_info"));
  const HttpAnswer plain = HttpFetch(at, "/metrics", {{"Authorization", "Bearer tls-token"}});
  EXPECT_EQ(plain.status, 0) << "plain HTTP is not served where TLS is";
  const HttpAnswer signin = HttpFetch(at, "/?token=tls-token", {}, /*tls=*/true);
  EXPECT_THAT(signin.headers.at("set-cookie"), HasSubstr("; Secure"));
}

}  // namespace
}  // namespace ktune
