// ktuned's HTTP endpoint (--http ADDR), on Boost.Beast: Prometheus
// metrics at /metrics, the live dashboard at / (the jobs, the devices, a
// page per job), and the JSON the dashboard reads under /api/. Only GET.
//
// The same rules as the gRPC port: loopback unless TLS (the daemon's
// certificate) and the bearer token guard it. With a token, a request must
// carry "Authorization: Bearer TOKEN" (what Prometheus's scrape
// `authorization` setting sends) or the cookie a browser gets by opening
// /?token=TOKEN once.
#ifndef KTUNE_SERVER_DAEMON_HTTP_H_
#define KTUNE_SERVER_DAEMON_HTTP_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/daemon/metrics.h"
#include "server/daemon/scheduler.h"

namespace ktune {

struct HttpOptions {
  std::string listen;  // HOST:PORT ([V6]:PORT); port 0 picks one
  std::string token;   // empty: none asked
  // PEM certificate chain and key; both empty: plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  int threads = 2;
  // Connections served at once; more wait in the listen queue until one
  // closes, so that clients cannot take the descriptors the jobs need.
  int max_connections = 256;
};

// One request, as the routes see it (independent of the transport).
struct HttpRequest {
  std::string method;
  std::string target;         // path and query
  std::string authorization;  // the header's value
  std::string cookie;         // the header's value
  bool tls = false;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// What each path answers. Thread-safe (the scheduler and metrics are).
class HttpRoutes {
 public:
  HttpRoutes(Scheduler& scheduler, DaemonMetrics& metrics, std::string token)
      : scheduler_(scheduler), metrics_(metrics), token_(std::move(token)) {}
  HttpResponse Handle(const HttpRequest& request) const;

 private:
  bool Authorized(const HttpRequest& request) const;
  HttpResponse Metrics() const;
  HttpResponse Jobs() const;
  HttpResponse Job(const std::string& id, const std::string& query) const;
  HttpResponse Devices() const;

  Scheduler& scheduler_;
  DaemonMetrics& metrics_;
  std::string token_;
};

// INVALID_ARGUMENT naming --http unless `address` is HOST:PORT or
// [V6]:PORT with a port in [0, 65535].
absl::Status CheckHttpAddress(const std::string& address);

class HttpServer {
 public:
  // Listens on options.listen and serves from its own threads until
  // destroyed. INVALID_ARGUMENT naming --http for an address of the wrong
  // form, one not of this machine, or a privileged port;
  // FAILED_PRECONDITION when it is in use.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           Scheduler& scheduler,
                                                           DaemonMetrics& metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The address it listens on, with the port it got.
  const std::string& address() const { return address_; }

 private:
  struct Impl;
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string address_;
};

}  // namespace ktune

#endif  // KTUNE_SERVER_DAEMON_HTTP_H_
