// cuBLAS's fp32 SGEMM (TF32 off) beside ktune's best configuration of a GEMM
// job, in one process on one GPU, alternating: the yardstick for the
// large SGEMM space (kernels/sgemm_large.json).
//
//   cublas_bench [--spec kernels/sgemm_large.json] [--db STORE] [--config KEY]
//                [--rounds 5] [--launches 20]
//
// The configuration is --config, else the best the store holds for the
// spec's kernel and problem. Both run on the same inputs (uniform in
// [-1, 1)); each round times --launches of each with CUDA events, one launch
// at a time, alternating which goes first; the medians of all launches and
// their ratio are printed, and the two results' relative difference
// (||C_ktune - C_cublas|| / ||C_cublas||). cuBLAS is linked here only, never
// in ktune; the CUDA driver too (ktune loads it at run time).
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "server/common/flags.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/device/job_plan.h"
#include "tuner/session/job.h"
#include "tuner/store/store.h"

namespace {

void Die(const std::string& what) {
  std::fprintf(stderr, "cublas_bench: %s\n", what.c_str());
  std::exit(1);
}

void CheckCu(CUresult rc, const char* call) {
  if (rc == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(rc, &name);
  Die(std::string(call) + ": " + (name != nullptr ? name : "?"));
}

void CheckRt(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) Die(std::string(call) + ": " + cudaGetErrorName(rc));
}

void CheckBlas(cublasStatus_t rc, const char* call) {
  if (rc != CUBLAS_STATUS_SUCCESS) Die(std::string(call) + ": cuBLAS status " + std::to_string(rc));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The GEMM job, the configuration timed, its launch and its image.
struct Subject {
  ktune::Job job;
  std::string key;
  ktune::v1::WorkerCandidate launch;
  ktune::v1::CompileResult image;
  std::int64_t M = 0, N = 0, K = 0;
};

Subject LoadSubject(const ktune::flags::Args& args, const cudaDeviceProp& prop) {
  const std::string spec_path =
      args.Get("spec").value_or(std::string(KTUNE_SOURCE_DIR) + "/kernels/sgemm_large.json");
  absl::StatusOr<ktune::v1::JobSpec> spec = ktune::LoadJobSpecFile(spec_path);
  if (!spec.ok()) Die(std::string(spec.status().message()));
  const std::string dir = spec_path.substr(0, spec_path.find_last_of('/') + 1);
  absl::StatusOr<ktune::Job> job = ktune::ResolveJob(*spec, dir.empty() ? "." : dir);
  if (!job.ok()) Die(std::string(job.status().message()));
  Subject out{*std::move(job), args.Get("config").value_or(""), {}, {}};
  out.M = out.job.problem.at("M");
  out.N = out.job.problem.at("N");
  out.K = out.job.problem.at("K");
  if (out.key.empty()) {
    if (!args.Has("db")) Die("give --db STORE (its best configuration) or --config KEY");
    absl::StatusOr<std::unique_ptr<ktune::Store>> store =
        ktune::Store::Open(*args.Get("db"), false);
    if (!store.ok()) Die(std::string(store.status().message()));
    absl::StatusOr<std::vector<ktune::BestRecord>> best =
        (*store)->FindBest(out.job.kernel_name, std::nullopt, out.job.problem, std::nullopt);
    if (!best.ok() || best->empty()) Die("the store holds no best configuration of the job");
    out.key = best->front().key;
  }
  absl::StatusOr<ktune::Config> config = out.job.space->ParseKey(out.key);
  if (!config.ok()) Die(std::string(config.status().message()));
  ktune::PlanTarget target;
  target.architecture = "sm_" + std::to_string(prop.major * 10 + prop.minor);
  target.memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
  target.multiprocessors = prop.multiProcessorCount;
  absl::StatusOr<ktune::JobPlan> plan = ktune::JobPlan::Make(ktune::BindingFor(out.job), target);
  if (!plan.ok()) Die(std::string(plan.status().message()));
  std::string why;
  if (absl::Status s = plan->LaunchFor(*config, &out.launch, &why); !s.ok() || !why.empty()) {
    Die("configuration " + out.key + " cannot launch: " + why + std::string(s.message()));
  }
  absl::StatusOr<const ktune::Nvrtc*> nvrtc = ktune::Nvrtc::Get();
  if (!nvrtc.ok()) Die(std::string(nvrtc.status().message()));
  out.image = (*nvrtc)->Compile(plan->CompileRequestFor(*config));
  if (!out.image.ok()) Die("configuration " + out.key + " does not compile:\n" + out.image.log());
  return out;
}

// The GEMM's device buffers, A and B uniform in [-1, 1), the same for both.
struct Buffers {
  float *A = nullptr, *B = nullptr, *C_ktune = nullptr, *C_blas = nullptr, *work = nullptr;
  unsigned* counters = nullptr;
};

Buffers MakeBuffers(std::int64_t M, std::int64_t N, std::int64_t K) {
  const std::size_t mk = static_cast<std::size_t>(M * K), kn = static_cast<std::size_t>(K * N),
                    mn = static_cast<std::size_t>(M * N);
  const std::size_t counter_bytes = static_cast<std::size_t>((M / 64) * (N / 64)) * 4;
  Buffers b;
  CheckRt(cudaMalloc(&b.A, mk * 4), "cudaMalloc");
  CheckRt(cudaMalloc(&b.B, kn * 4), "cudaMalloc");
  CheckRt(cudaMalloc(&b.C_ktune, mn * 4), "cudaMalloc");
  CheckRt(cudaMalloc(&b.C_blas, mn * 4), "cudaMalloc");
  CheckRt(cudaMalloc(&b.work, 4 * mn * 4), "cudaMalloc");
  CheckRt(cudaMalloc(&b.counters, counter_bytes), "cudaMalloc");
  CheckRt(cudaMemset(b.counters, 0, counter_bytes), "cudaMemset");
  std::vector<float> host(std::max(mk, kn));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::size_t i = 0; i < mk; ++i) host[i] = uniform(rng);
  CheckRt(cudaMemcpy(b.A, host.data(), mk * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  for (std::size_t i = 0; i < kn; ++i) host[i] = uniform(rng);
  CheckRt(cudaMemcpy(b.B, host.data(), kn * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  return b;
}

// ||a - b|| / ||b|| over `n` floats of device memory.
double RelativeDifference(const float* a_dev, const float* b_dev, std::size_t n) {
  std::vector<float> a(n), b(n);
  CheckRt(cudaMemcpy(a.data(), a_dev, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  CheckRt(cudaMemcpy(b.data(), b_dev, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace

int main(int argc, char** argv) {
  const ktune::flags::CommandSpec spec_flags{
      "cublas_bench",
      "cublas_bench [--spec FILE] [--db STORE] [--config KEY] [--rounds N] [--launches N]",
      "cuBLAS fp32 SGEMM (TF32 off) beside ktune's best configuration, alternating.",
      {{"spec", "FILE", "the GEMM job file (default: kernels/sgemm_large.json)"},
       {"db", "STORE", "the store whose best configuration is timed"},
       {"config", "KEY", "the configuration to time instead of the store's best"},
       {"rounds", "N", "rounds of alternation (default 5)"},
       {"launches", "N", "launches of each per round (default 20)"}}};
  absl::StatusOr<ktune::flags::Args> args =
      ktune::flags::Parse(spec_flags, std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) Die(std::string(args.status().message()));
  const int rounds = std::atoi(args->Get("rounds").value_or("5").c_str());
  const int launches = std::atoi(args->Get("launches").value_or("20").c_str());

  CheckRt(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop;
  CheckRt(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const Subject subject = LoadSubject(*args, prop);
  const ktune::v1::WorkerCandidate& launch = subject.launch;
  Buffers buf = MakeBuffers(subject.M, subject.N, subject.K);

  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  CheckCu(cuModuleLoadData(&module, subject.image.cubin().data()), "cuModuleLoadData");
  CheckCu(cuModuleGetFunction(&fn, module, subject.image.lowered_name().c_str()),
          "cuModuleGetFunction");
  int static_shared = 0;
  CheckCu(cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn),
          "cuFuncGetAttribute");
  if (launch.shared_memory_bytes() + static_cast<unsigned>(static_shared) > 48 * 1024) {
    CheckCu(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               static_cast<int>(launch.shared_memory_bytes())),
            "cuFuncSetAttribute");
  }
  int m32 = static_cast<int>(subject.M), n32 = static_cast<int>(subject.N),
      k32 = static_cast<int>(subject.K);
  void* params[] = {&buf.C_ktune, &buf.A, &buf.B, &buf.work, &buf.counters, &m32, &n32, &k32};
  cudaStream_t stream;
  CheckRt(cudaStreamCreate(&stream), "cudaStreamCreate");
  auto run_ktune = [&] {
    CheckCu(cuLaunchKernel(fn, launch.grid().x(), launch.grid().y(), launch.grid().z(),
                           launch.block().x(), launch.block().y(), launch.block().z(),
                           launch.shared_memory_bytes(), stream, params, nullptr),
            "cuLaunchKernel");
  };
  cublasHandle_t blas;
  CheckBlas(cublasCreate(&blas), "cublasCreate");
  CheckBlas(cublasSetStream(blas, stream), "cublasSetStream");
  // Default math: fp32 compute, no TF32 (CUBLAS_TF32_TENSOR_OP_MATH is not set).
  CheckBlas(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  const float one = 1.0f, zero = 0.0f;
  auto run_blas = [&] {
    // Row-major C = A B is column-major C^T = B^T A^T.
    CheckBlas(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n32, m32, k32, &one, buf.B, n32, buf.A,
                          k32, &zero, buf.C_blas, n32),
              "cublasSgemm");
  };
  cudaEvent_t start, end;
  CheckRt(cudaEventCreate(&start), "cudaEventCreate");
  CheckRt(cudaEventCreate(&end), "cudaEventCreate");
  auto time_one = [&](const auto& run) {
    CheckRt(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    CheckRt(cudaEventRecord(end, stream), "cudaEventRecord");
    CheckRt(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    CheckRt(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
    return static_cast<double>(ms);
  };
  for (int w = 0; w < 10; ++w) {  // warm-up: clocks, module, cuBLAS's choice
    run_ktune();
    run_blas();
  }
  CheckRt(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::vector<double> ktune_ms, blas_ms;
  for (int r = 0; r < rounds; ++r) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool do_ktune = (pass == 0) == (r % 2 == 0);  // alternating which goes first
      for (int l = 0; l < launches; ++l) {
        if (do_ktune) {
          ktune_ms.push_back(time_one(run_ktune));
        } else {
          blas_ms.push_back(time_one(run_blas));
        }
      }
    }
  }
  const double difference =
      RelativeDifference(buf.C_ktune, buf.C_blas, static_cast<std::size_t>(subject.M * subject.N));
  const double flop = 2.0 * static_cast<double>(subject.M) * static_cast<double>(subject.N) *
                      static_cast<double>(subject.K);
  const double kt = Median(ktune_ms), bl = Median(blas_ms);
  std::printf("%s on %s, %lldx%lldx%lld fp32, %d rounds of %d launches each, alternating\n",
              subject.job.kernel_name.c_str(), prop.name, static_cast<long long>(subject.M),
              static_cast<long long>(subject.N), static_cast<long long>(subject.K), rounds,
              launches);
  std::printf("cuBLAS sgemm (TF32 off): %.4f ms  %.2f TFLOP/s\n", bl, flop / bl / 1e9);
  std::printf("ktune %-24s %.4f ms  %.2f TFLOP/s\n", subject.key.c_str(), kt, flop / kt / 1e9);
  std::printf("ktune / cuBLAS throughput: %.3f; relative difference of the results %.2e\n", bl / kt,
              difference);
  cublasDestroy(blas);
  cuModuleUnload(module);
  return 0;
}
