// The in-process lookup of the client library: client_bench DB (a store
// holding convolution_kernel tuned on the recorded A100 space).
#include <ktune/client.h>

#include <chrono>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: client_bench DB\n");
    return 2;
  }
  std::string error;
  auto best = ktune::BestConfigs::Open(argv[1], {"convolution_kernel"}, &error);
  if (best == nullptr) {
    std::fprintf(stderr, "client_bench: %s\n", error.c_str());
    return 1;
  }
  const ktune::ProblemSize exact = {{"problem_size_x", 4096}, {"problem_size_y", 4096}};
  const ktune::ProblemSize other = {{"problem_size_x", 2048}, {"problem_size_y", 1024}};
  for (const auto* problem : {&exact, &other}) {
    constexpr int kLookups = 1000000;
    long sum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLookups; ++i) {
      const ktune::TunedConfig* c =
          best->Find("convolution_kernel", "NVIDIA A100-PCIE-40GB", *problem);
      if (c == nullptr) return 1;
      sum += c->Int("block_size_x", 0);
    }
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        kLookups;
    std::printf("BestConfigs::Find (%s) + one value: %.0f ns per lookup (checksum %ld)\n",
                problem == &exact ? "exact" : "nearest problem, remembered", ns, sum);
  }
  return 0;
}
