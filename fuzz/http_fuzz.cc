// The daemon's HTTP routes (the dashboard's pages and API, /metrics, the
// sign-in) handed hostile requests in process. The input is the request's
// method, target, Authorization and Cookie values, one per line; "{job}"
// in the target becomes the id of the one job the scheduler ran, so that
// the seeds reach a real job's page. A token guards the routes, so the
// token checks run on every input.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "ktune/v1/tuner.pb.h"
#include "server/daemon/http.h"
#include "server/daemon/metrics.h"
#include "server/daemon/scheduler.h"

namespace {

// The scheduler's folder, removed at exit (a plain array: strings are
// destroyed before the exit handler runs).
char folder[] = "/tmp/ktune_fuzz_http_XXXXXX";

struct Daemon {
  std::unique_ptr<ktune::Scheduler> scheduler;
  std::unique_ptr<ktune::DaemonMetrics> metrics;
  std::unique_ptr<ktune::HttpRoutes> routes;
  std::string job_id;
};

// A scheduler on the small recording that has run one job to its end.
Daemon& TheDaemon() {
  static Daemon* daemon = [] {
    if (mkdtemp(folder) == nullptr) std::abort();
    std::atexit([] {
      char command[64];
      std::snprintf(command, sizeof command, "rm -rf %s", folder);
      (void)std::system(command);
    });
    ktune::SchedulerOptions so;
    so.db_path = std::string(folder) + "/fuzz.db";
    so.devices = {"sim:" KTUNE_FUZZ_DIR "/corpus/recorded/small_cache.json"};
    auto* d = new Daemon;
    d->scheduler = std::make_unique<ktune::Scheduler>(so);
    if (!d->scheduler->Start().ok()) std::abort();
    ktune::v1::SubmitJobRequest submit;
    submit.mutable_spec()->mutable_strategy()->set_name("brute_force");
    absl::StatusOr<ktune::v1::SubmitJobResponse> job = d->scheduler->Submit(submit);
    if (!job.ok()) std::abort();
    d->job_id = job->job_id();
    ktune::v1::GetJobRequest get;
    get.set_job_id(d->job_id);
    for (int i = 0; i < 1000; ++i) {  // a few evaluations replayed: well under a second
      absl::StatusOr<ktune::v1::Job> j = d->scheduler->GetJob(get);
      if (!j.ok()) std::abort();
      if (j->state() == ktune::v1::SUCCEEDED) break;
      if (i == 999) std::abort();
      usleep(10000);
    }
    d->metrics = std::make_unique<ktune::DaemonMetrics>(ktune::BuildInfo{"fuzz", "", ""});
    d->routes = std::make_unique<ktune::HttpRoutes>(*d->scheduler, *d->metrics, "fuzz-token");
    return d;
  }();
  return *daemon;
}

// The next line of `rest` (without its newline), taken off it.
std::string TakeLine(std::string_view& rest) {
  const std::size_t end = rest.find('\n');
  const std::string line(rest.substr(0, end));
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  return line;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Daemon& daemon = TheDaemon();
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  ktune::HttpRequest request;
  request.method = TakeLine(rest);
  request.target = TakeLine(rest);
  request.authorization = TakeLine(rest);
  request.cookie = TakeLine(rest);
  request.tls = !rest.empty();
  if (const std::size_t at = request.target.find("{job}"); at != std::string::npos) {
    request.target.replace(at, 5, daemon.job_id);
  }
  const ktune::HttpResponse response = daemon.routes->Handle(request);
  if (response.status < 100 || response.status > 599) std::abort();
  return 0;
}
