// Looks up tuned configurations as an application would, with the client
// library: from a database, or from a daemon.
//   consumer DB KERNEL DEVICE [name=value ...]
//   consumer --server ADDR [--tune-on-miss SPEC.json] [--wait-exact SECONDS]
//            KERNEL DEVICE [name=value ...]
// With --wait-exact it asks again (Refresh) every 0.1 s until the answer is
// exact, printing each new answer.
#include <ktune/client.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

void Print(const ktune::TunedConfig* c, const std::string& tuning) {
  if (c == nullptr) {
    std::printf("none tuning=%s\n", tuning.c_str());
    return;
  }
  std::printf("match=%s key=%s block_size_x=%lld time_ms=%g tuning=%s\n", c->match().c_str(),
              c->key().c_str(), static_cast<long long>(c->Int("block_size_x", -1)), c->time_ms(),
              tuning.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string server, spec_file;
  double wait_s = 0;
  while (args.size() >= 2 && args[0].rfind("--", 0) == 0) {
    if (args[0] == "--server") server = args[1];
    if (args[0] == "--tune-on-miss") spec_file = args[1];
    if (args[0] == "--wait-exact") wait_s = std::atof(args[1].c_str());
    args.erase(args.begin(), args.begin() + 2);
  }
  const std::size_t fixed = server.empty() ? 3 : 2;
  if (args.size() < fixed) {
    std::fprintf(stderr, "usage: consumer DB KERNEL DEVICE [name=value ...]\n");
    return 2;
  }
  const std::string kernel = args[fixed - 2], device = args[fixed - 1];
  ktune::ProblemSize problem;
  for (std::size_t i = fixed; i < args.size(); ++i) {
    const std::size_t eq = args[i].find('=');
    if (eq == std::string::npos) return 2;
    problem[args[i].substr(0, eq)] = std::atoll(args[i].c_str() + eq + 1);
  }
  std::string error;
  std::unique_ptr<ktune::BestConfigs> best;
  if (server.empty()) {
    best = ktune::BestConfigs::Open(args[0], {kernel}, &error);
  } else {
    ktune::BestRequest r;
    r.kernel = kernel;
    r.device = device;
    r.problem = problem;
    r.tune_on_miss = !spec_file.empty();
    if (!spec_file.empty()) {
      std::ifstream f(spec_file);
      r.spec_json.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    best = ktune::BestConfigs::Connect(server, {r}, ktune::ConnectOptions(), &error);
  }
  if (best == nullptr) {
    std::fprintf(stderr, "consumer: %s\n", error.c_str());
    return 1;
  }
  const ktune::TunedConfig* c = best->Find(kernel, device, problem);
  Print(c, best->TuningJob(kernel, device, problem));
  // Refresh until the exact answer arrives (the application's loop).
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while ((c == nullptr || c->match() != "exact") && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::unique_ptr<ktune::BestConfigs> next = best->Refresh(&error);
    if (next == nullptr) {
      std::fprintf(stderr, "consumer: %s\n", error.c_str());
      return 1;
    }
    const ktune::TunedConfig* n = next->Find(kernel, device, problem);
    if (n != nullptr && (c == nullptr || n->match() != c->match())) {
      Print(n, next->TuningJob(kernel, device, problem));
    }
    best = std::move(next);
    c = n;
  }
  return c == nullptr ? 1 : 0;
}
