// Looks up tuned configurations in a ktune database: consumer DB KERNEL
// DEVICE name=value...
#include <ktune/client.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: consumer DB KERNEL DEVICE [name=value ...]\n");
    return 2;
  }
  std::string error;
  std::unique_ptr<ktune::BestConfigs> best = ktune::BestConfigs::Open(argv[1], {argv[2]}, &error);
  if (best == nullptr) {
    std::fprintf(stderr, "consumer: %s\n", error.c_str());
    return 1;
  }
  ktune::ProblemSize problem;
  for (int i = 4; i < argc; ++i) {
    const std::string dim = argv[i];
    const std::size_t eq = dim.find('=');
    if (eq == std::string::npos) return 2;
    problem[dim.substr(0, eq)] = std::atoll(dim.c_str() + eq + 1);
  }
  const ktune::TunedConfig* c = best->Find(argv[2], argv[3], problem);
  if (c == nullptr) {
    std::printf("none\n");
    return 1;
  }
  std::printf("match=%s key=%s block_size_x=%lld time_ms=%g\n", c->match().c_str(),
              c->key().c_str(), static_cast<long long>(c->Int("block_size_x", -1)), c->time_ms());
  return 0;
}
