#include "server/daemon/http.h"

#include <google/protobuf/util/json_util.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "server/common/address.h"
#include "server/daemon/token.h"
#include "server/web/assets.h"
#include "tuner/base/json.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr char kCookie[] = "ktune_token";

HttpResponse Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse Asset(const char* content_type, const char* body) {
  HttpResponse r;
  r.content_type = content_type;
  r.body = body;
  // The daemon's own files change only with the daemon: a restart is a
  // new version, and an hour of caching spares the polling page reloads.
  r.headers.emplace_back("Cache-Control", "max-age=3600");
  return r;
}

HttpResponse JsonResponse(std::string body) {
  HttpResponse r;
  r.content_type = "application/json";
  r.body = std::move(body);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

// An error the API answers with: its status, as JSON the page shows.
HttpResponse ApiError(const absl::Status& s) {
  int status = 500;
  switch (s.code()) {
    case absl::StatusCode::kNotFound: status = 404; break;
    case absl::StatusCode::kInvalidArgument: status = 400; break;
    case absl::StatusCode::kUnavailable: status = 503; break;
    default: break;
  }
  Json j = Json::MakeObject();
  j.Set("error", std::string(s.message()));
  HttpResponse r = JsonResponse(j.Dump());
  r.status = status;
  return r;
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out);
  return out;
}

// The value of `name` in a query string (a=1&b=2), undecoded; empty if
// absent.
std::string QueryValue(const std::string& query, const std::string& name) {
  for (const std::string& part : StrSplit(query, '&')) {
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
  }
  return "";
}

// The value of cookie `name` in a Cookie header.
std::string CookieValue(const std::string& header, const std::string& name) {
  for (std::string part : StrSplit(header, ';')) {
    part = std::string(StripSpace(part));
    if (part.rfind(name + "=", 0) == 0) return part.substr(name.size() + 1);
  }
  return "";
}

// Where a sign-in sends the browser: the page it asked for, as a path of
// this daemon. Anything else ("//host/...", a backslash, an absolute-form
// target) would send the new cookie's owner to another site: "/" instead.
std::string SignInTarget(const std::string& path) {
  const bool own_path =
      path.rfind('/', 0) == 0 && path.rfind("//", 0) != 0 && path.find('\\') == std::string::npos;
  return own_path ? path : "/";
}

// What the page needs of a job's spec: the kernel's code can be large, and
// is not shown.
void StripSource(v1::Job& job) {
  if (job.spec().kernel().source_case() == v1::Kernel::kCode) {
    job.mutable_spec()->mutable_kernel()->clear_code();
  }
}

}  // namespace

bool HttpRoutes::Authorized(const HttpRequest& request) const {
  if (token_.empty()) return true;
  if (BearerMatches(request.authorization, token_)) return true;
  const std::string cookie = CookieValue(request.cookie, kCookie);
  return !cookie.empty() && TokenMatches(cookie, token_);
}

HttpResponse HttpRoutes::Handle(const HttpRequest& request) const {
  if (request.method != "GET" && request.method != "HEAD") {
    HttpResponse r = Text(405, "only GET (and HEAD) is served here\n");
    r.headers.emplace_back("Allow", "GET, HEAD");
    return r;
  }
  const std::size_t q = request.target.find('?');
  const std::string path = request.target.substr(0, q);
  const std::string query = q == std::string::npos ? "" : request.target.substr(q + 1);
  // A browser signs in once: /?token=TOKEN becomes a cookie.
  if (const std::string t = QueryValue(query, "token"); !t.empty() && !token_.empty()) {
    if (!TokenMatches(t, token_)) return Text(401, "wrong token\n");
    HttpResponse r = Text(303, "");
    r.headers.emplace_back("Location", SignInTarget(path));
    r.headers.emplace_back("Set-Cookie",
                           StrCat(kCookie, "=", t, "; Path=/; HttpOnly; SameSite=Strict",
                                  request.tls ? "; Secure" : ""));
    return r;
  }
  if (!Authorized(request)) {
    return Text(401,
                "this daemon requires its token: send 'Authorization: Bearer TOKEN', or open "
                "/?token=TOKEN once in a browser\n");
  }
  if (path == "/metrics") return Metrics();
  if (path == "/api/jobs") return Jobs();
  if (path.rfind("/api/jobs/", 0) == 0) return Job(path.substr(10), query);
  if (path == "/api/devices") return Devices();
  if (path == "/healthz") return Text(200, "ok\n");
  if (path == "/static/dashboard.js") {
    return Asset("text/javascript; charset=utf-8", kWebDashboardJs);
  }
  if (path == "/static/dashboard.css") return Asset("text/css; charset=utf-8", kWebDashboardCss);
  if (path == "/static/chart.js") return Asset("text/javascript; charset=utf-8", kWebChartJs);
  // The page's own routes: one document, which reads its path.
  if (path == "/" || path == "/devices" || path.rfind("/jobs/", 0) == 0) {
    HttpResponse r;
    r.content_type = "text/html; charset=utf-8";
    r.body = DashboardPage();
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }
  return Text(404, StrCat("nothing at ", path, "\n"));
}

HttpResponse HttpRoutes::Metrics() const {
  absl::StatusOr<SchedulerActivity> activity = scheduler_.Activity();
  if (!activity.ok()) {
    return Text(503, StrCat("the store does not answer: ", activity.status().message(), "\n"));
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_.Render(*activity);
  return r;
}

HttpResponse HttpRoutes::Jobs() const {
  v1::ListJobsRequest req;
  req.set_page_size(200);
  req.set_include_best(true);
  absl::StatusOr<v1::ListJobsResponse> jobs = scheduler_.ListJobs(req);
  if (!jobs.ok()) return ApiError(jobs.status());
  return JsonResponse(ToJson(*jobs));
}

HttpResponse HttpRoutes::Job(const std::string& id, const std::string& query) const {
  v1::GetJobRequest req;
  req.set_job_id(id);
  req.set_include_measurements(true);
  const std::string from = QueryValue(query, "from");
  if (!from.empty()) {
    if (from.size() > 12 || from.find_first_not_of("0123456789") != std::string::npos) {
      return ApiError(absl::InvalidArgumentError(
          StrCat("from: '", from.substr(0, 16), "' is not a measurement's sequence")));
    }
    req.set_measurements_from(std::stoll(from));
  }
  absl::StatusOr<v1::Job> job = scheduler_.GetJob(req);
  if (!job.ok()) return ApiError(job.status());
  StripSource(*job);
  return JsonResponse(ToJson(*job));
}

HttpResponse HttpRoutes::Devices() const {
  absl::StatusOr<SchedulerActivity> activity = scheduler_.Activity();
  if (!activity.ok()) return ApiError(activity.status());
  Json out = Json::MakeObject();
  out.Set(
      "at",
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  Json devices = Json::MakeArray();
  for (const DeviceActivity& d : activity->devices) {
    Json j = Json::MakeObject();
    j.Set("locator", d.locator);
    j.Set("name", d.info.name);
    j.Set("architecture", d.info.architecture);
    j.Set("memoryBytes", d.info.memory_bytes);
    j.Set("driver", d.info.driver);
    j.Set("simulated", d.info.simulated);
    j.Set("queued", d.queued);
    j.Set("running", d.running);
    j.Set("busySeconds", d.busy_seconds);
    Json evaluations = Json::MakeObject();
    for (int s = 0; s < kNumCandidateStatuses; ++s) {
      if (const std::int64_t n = d.evaluations[static_cast<std::size_t>(s)]; n > 0) {
        evaluations.Set(CandidateStatusName(static_cast<CandidateStatus>(s)), n);
      }
    }
    j.Set("evaluations", std::move(evaluations));
    j.Set("workerRestarts", d.worker_restarts);
    if (d.canary_slowdown) j.Set("canarySlowdown", *d.canary_slowdown);
    devices.Push(std::move(j));
  }
  out.Set("devices", std::move(devices));
  if (const std::optional<CompileActivity>& c = activity->compile) {
    Json j = Json::MakeObject();
    j.Set("workers", c->workers);
    j.Set("busy", c->busy);
    j.Set("backlog", c->backlog);
    j.Set("compiled", c->compiled);
    j.Set("cacheHits", c->cache_hits);
    j.Set("busySeconds", c->busy_seconds);
    out.Set("compile", std::move(j));
  }
  Json jobs = Json::MakeObject();
  for (const auto& [state, n] : activity->jobs) jobs.Set(JobStateName(state), n);
  out.Set("jobs", std::move(jobs));
  out.Set("storeBytes", activity->store_bytes);
  if (activity->fleet_waiting >= 0) out.Set("fleetWaiting", activity->fleet_waiting);
  return JsonResponse(out.Dump());
}

namespace {

HttpRequest RequestOf(const http::request<http::string_body>& r, bool tls) {
  HttpRequest out;
  out.method = std::string(r.method_string());
  out.target = std::string(r.target());
  if (auto it = r.find(http::field::authorization); it != r.end()) {
    out.authorization = std::string(it->value());
  }
  if (auto it = r.find(http::field::cookie); it != r.end()) out.cookie = std::string(it->value());
  out.tls = tls;
  return out;
}

http::response<http::string_body> ResponseOf(HttpResponse r, unsigned version, bool keep_alive,
                                             bool head) {
  http::response<http::string_body> out{static_cast<http::status>(r.status), version};
  out.set(http::field::server, "ktuned");
  out.set(http::field::content_type, r.content_type);
  out.set("X-Content-Type-Options", "nosniff");
  out.set("Content-Security-Policy",
          "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'");
  for (const auto& [name, value] : r.headers) out.set(name, value);
  out.keep_alive(keep_alive);
  out.body() = std::move(r.body);
  out.prepare_payload();
  if (head) out.body().clear();  // the length stays the GET's
  return out;
}

// One connection: requests in, answers out, until the client closes or
// idles for 30 s; `on_end` runs as it is destroyed. `Stream` is a
// beast::tcp_stream or its TLS wrapper.
template <typename Stream>
class HttpSession : public std::enable_shared_from_this<HttpSession<Stream>> {
 public:
  HttpSession(Stream stream, const HttpRoutes& routes, bool tls, std::function<void()> on_end)
      : stream_(std::move(stream)), routes_(routes), tls_(tls), on_end_(std::move(on_end)) {}
  ~HttpSession() { on_end_(); }
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  void Start() {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      Read();
    } else {
      beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(30));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->Read();
                              });
    }
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->body_limit(4096);  // GET only: a body is never needed
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(30));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, std::size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec) return Close();
    const http::request<http::string_body>& req = parser_->get();
    response_ = ResponseOf(routes_.Handle(RequestOf(req, tls_)), req.version(), req.keep_alive(),
                           req.method() == http::verb::head);
    http::async_write(stream_, response_,
                      [self = this->shared_from_this()](beast::error_code wec, std::size_t) {
                        if (wec || !self->response_.keep_alive()) return self->Close();
                        self->Read();
                      });
  }

  void Close() {
    beast::error_code ignored;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    } else {
      beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  Stream stream_;
  const HttpRoutes& routes_;
  const bool tls_;
  std::function<void()> on_end_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
};

// HOST:PORT or [V6]:PORT.
absl::StatusOr<HostPort> SplitAddress(const std::string& address) {
  const absl::StatusOr<HostPort> hp = SplitHostPort(address);
  if (!hp.ok() || hp->port.size() > 5 || !PortNumber(hp->port)) {
    return absl::InvalidArgumentError(
        StrCat("--http ", address, ": ",
               hp.ok() ? "the port must be a number in [0, 65535]" : hp.status().message(),
               "; give HOST:PORT (127.0.0.1:9090, [::1]:9090, 0.0.0.0:9090; port 0 picks one)"));
  }
  return *hp;
}

}  // namespace

absl::Status CheckHttpAddress(const std::string& address) { return SplitAddress(address).status(); }

struct HttpServer::Impl {
  Impl(Scheduler& scheduler, DaemonMetrics& daemon_metrics, const HttpOptions& o)
      : routes(scheduler, daemon_metrics, o.token),
        metrics(daemon_metrics),
        max_connections(std::max(1, o.max_connections)),
        acceptor(io),
        retry(io),
        ssl(asio::ssl::context::tls_server) {}

  // One accept is pending at a time: the next is asked for when a
  // connection is taken, unless that reaches the limit, then when one ends.
  void Accept() {
    acceptor.async_accept(asio::make_strand(io), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (EMFILE), say: asking again at once would spin.
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](beast::error_code wec) {
          if (!wec) Accept();
        });
        return;
      }
      bool more = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        more = ++open < max_connections;
        paused = !more;
      }
      metrics.HttpConnectionOpened();
      if (!more) metrics.HttpConnectionLimitReached();
      beast::tcp_stream stream(std::move(s));
      auto on_end = [this] { Ended(); };
      if (tls) {
        std::make_shared<HttpSession<beast::ssl_stream<beast::tcp_stream>>>(
            beast::ssl_stream<beast::tcp_stream>(std::move(stream), ssl), routes, true, on_end)
            ->Start();
      } else {
        std::make_shared<HttpSession<beast::tcp_stream>>(std::move(stream), routes, false, on_end)
            ->Start();
      }
      if (more) Accept();
    });
  }

  void Ended() {
    metrics.HttpConnectionClosed();
    bool resume = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      --open;
      resume = paused && !stopping;
      if (resume) paused = false;
    }
    if (resume) Accept();
  }

  HttpRoutes routes;
  DaemonMetrics& metrics;
  const int max_connections;
  // Declared before io: sessions end (and count here) as io is destroyed.
  std::mutex mu;
  int open = 0;         // guarded by mu
  bool paused = false;  // guarded by mu: the limit reached, no accept pending
  bool stopping = false;
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  asio::ssl::context ssl;
  bool tls = false;
  std::vector<std::thread> threads;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              Scheduler& scheduler,
                                                              DaemonMetrics& metrics) {
  KTUNE_ASSIGN_OR_RETURN(auto host_port, SplitAddress(options.listen));
  auto impl = std::make_unique<Impl>(scheduler, metrics, options);
  if (!options.tls_cert.empty()) {
    beast::error_code ec;
    impl->ssl.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                          asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                          asio::ssl::context::no_tlsv1_1);
    impl->ssl.use_certificate_chain(asio::buffer(options.tls_cert), ec);
    if (!ec) impl->ssl.use_private_key(asio::buffer(options.tls_key), asio::ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          StrCat("--http: the TLS certificate or key is not usable: ", ec.message()));
    }
    impl->tls = true;
  }
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto found = resolver.resolve(host_port.host, host_port.port,
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty()) {
    return absl::InvalidArgumentError(StrCat("--http ", options.listen, ": cannot resolve ",
                                             host_port.host, " (", ec.message(), ")"));
  }
  const tcp::endpoint at = found.begin()->endpoint();
  impl->acceptor.open(at.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(at, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec == boost::system::errc::address_in_use) {
    return absl::FailedPreconditionError(
        StrCat("--http ", options.listen, ": the address is in use"));
  }
  if (ec == boost::system::errc::address_not_available) {
    return absl::InvalidArgumentError(StrCat("--http ", options.listen, ": ", host_port.host,
                                             " is not an address of this machine"));
  }
  if (ec == boost::system::errc::permission_denied) {
    return absl::InvalidArgumentError(StrCat("--http ", options.listen, ": port ", host_port.port,
                                             " needs privileges; use a port of 1024 or above"));
  }
  if (ec) {
    return absl::InvalidArgumentError(StrCat("--http ", options.listen, ": ", ec.message()));
  }
  const tcp::endpoint bound = impl->acceptor.local_endpoint();
  std::string shown = bound.address().to_string();
  if (bound.address().is_v6()) shown = StrCat("[", shown, "]");
  impl->Accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(impl)));
  server->address_ = StrCat(shown, ":", bound.port());
  return server;
}

}  // namespace ktune
