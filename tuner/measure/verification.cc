#include "tuner/measure/verification.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"

namespace ktune {

absl::Status Verifier::Init() {
  KTUNE_ASSIGN_OR_RETURN(host_small_, cuda::PinnedMemory::Allocate(gpu_.api, 2 * kGuardBytes));
  return absl::OkStatus();
}

absl::Status Verifier::Setup(const v1::WorkerSetup& setup) {
  setup_ = setup;
  setup_.clear_buffers();  // the buffers hold their own specs
  const std::size_t n = std::max<std::size_t>(1, static_cast<std::size_t>(setup.buffers_size()));
  KTUNE_ASSIGN_OR_RETURN(compare_results_, cuda::DeviceMemory::Allocate(gpu_.api, 16 * n));
  KTUNE_ASSIGN_OR_RETURN(checks_host_,
                         cuda::PinnedMemory::Allocate(gpu_.api, (2 * kGuardBytes + 16) * n));
  return absl::OkStatus();
}

absl::Status Verifier::EnqueueChecks(CUstream s, bool compare) {
  // Host layout: each buffer's two guard zones, then one 16-byte result
  // (differing count, first index) per buffer.
  const std::vector<ArgumentBuffer>& buffers = buffers_.buffers();
  auto* h = static_cast<unsigned char*>(checks_host_.get());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const ArgumentBuffer& b = buffers[i];
    unsigned char* at = h + 2 * kGuardBytes * i;
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyDtoHAsync(at, b.memory.get(), kGuardBytes, s), "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyDtoHAsync(at + kGuardBytes, b.data + b.bytes, kGuardBytes, s),
              "cuMemcpyDtoHAsync"));
  }
  if (!compare) return absl::OkStatus();
  bool any = false;
  for (int index : setup_.verified()) {
    const ArgumentBuffer& b = buffers[static_cast<std::size_t>(index)];
    if (!b.has_reference) continue;
    any = true;
    const CUdeviceptr slot = compare_results_.get() + 16 * static_cast<std::size_t>(index);
    KTUNE_RETURN_IF_ERROR(Check(gpu_.api.cuMemsetD8Async(slot, 0, 8, s), "cuMemsetD8Async"));
    KTUNE_RETURN_IF_ERROR(Check(gpu_.api.cuMemsetD8Async(slot + 8, 0xff, 8, s), "cuMemsetD8Async"));
    CUdeviceptr out = b.data, ref = b.reference.get(), result = slot;
    unsigned long long n = static_cast<unsigned long long>(b.spec.elements());
    double atol = setup_.settings().atol(), rtol = setup_.settings().rtol();
    void* args[] = {&out, &ref, &n, &atol, &rtol, &result};
    const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(
        (n + 255) / 256, static_cast<unsigned long long>(gpu_.multiprocessors) * 16));
    CUfunction f = helpers_.compare[static_cast<std::size_t>(b.spec.type())];
    KTUNE_RETURN_IF_ERROR(Check(
        gpu_.api.cuLaunchKernel(f, std::max(1u, blocks), 1, 1, 256, 1, 1, 0, s, args, nullptr),
        "cuLaunchKernel(compare)"));
  }
  if (!any) return absl::OkStatus();
  return Check(gpu_.api.cuMemcpyDtoHAsync(h + 2 * kGuardBytes * buffers.size(),
                                          compare_results_.get(), 16 * buffers.size(), s),
               "cuMemcpyDtoHAsync");
}

std::string Verifier::GuardMessage() const {
  const std::vector<ArgumentBuffer>& buffers = buffers_.buffers();
  const auto* h = static_cast<const unsigned char*>(checks_host_.get());
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    const unsigned char* at = h + 2 * kGuardBytes * k;
    for (std::size_t i = 0; i < 2 * kGuardBytes; ++i) {
      if (at[i] != kGuardByte) {
        return StrCat("the kernel wrote outside argument ", buffers[k].spec.name(), " (",
                      i < kGuardBytes ? StrCat(kGuardBytes - i, " bytes before its start")
                                      : StrCat(i - kGuardBytes, " bytes past its end"),
                      ")");
      }
    }
  }
  return std::string();
}

absl::StatusOr<std::string> Verifier::CompareMessage(CUstream s) {
  const std::vector<ArgumentBuffer>& buffers = buffers_.buffers();
  const auto* results = reinterpret_cast<const unsigned long long*>(
      static_cast<const unsigned char*>(checks_host_.get()) + 2 * kGuardBytes * buffers.size());
  for (int index : setup_.verified()) {
    const ArgumentBuffer& b = buffers[static_cast<std::size_t>(index)];
    if (!b.has_reference) continue;
    const auto at = 2 * static_cast<std::size_t>(index);
    const unsigned long long bad = results[at], first = results[at + 1];
    if (bad == 0) continue;
    // The first differing element, for the message.
    const std::size_t eb = ElementBytes(b.spec.type());
    char* h = static_cast<char*>(host_small_.get());
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyDtoHAsync(h, b.data + first * eb, eb, s), "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyDtoHAsync(h + 16, b.reference.get() + first * eb, eb, s),
              "cuMemcpyDtoHAsync"));
    KTUNE_RETURN_IF_ERROR(Check(gpu_.api.cuStreamSynchronize(s), "cuStreamSynchronize"));
    return StrCat(bad, " of ", b.spec.elements(), " elements of ", b.spec.name(),
                  " differ from the reference (atol ", setup_.settings().atol(), ", rtol ",
                  setup_.settings().rtol(), "); the first at index ", first, ": ",
                  ElementAsDouble(b.spec.type(), h, 0), " instead of ",
                  ElementAsDouble(b.spec.type(), h + 16, 0));
  }
  return std::string();
}

CUresult Verifier::KeepAsReference(CUstream s) {
  std::vector<ArgumentBuffer>& buffers = buffers_.buffers();
  for (int index : setup_.verified()) {
    ArgumentBuffer& b = buffers[static_cast<std::size_t>(index)];
    if (CUresult rc = gpu_.api.cuMemcpyDtoDAsync(b.reference.get(), b.data, b.bytes, s);
        rc != CUDA_SUCCESS) {
      return rc;
    }
    b.has_reference = true;
  }
  return CUDA_SUCCESS;
}

std::string CompareOnHost(const std::string& what, v1::ElementType type, const void* out,
                          const void* reference, std::size_t n, double atol, double rtol,
                          int threads) {
  const auto t_count = static_cast<std::size_t>(std::max(1, threads));
  std::vector<std::size_t> bad(t_count, 0);
  std::vector<std::size_t> first_bad(t_count, n);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < t_count; ++t) {
    pool.emplace_back([&, t] {
      const std::size_t lo = n * t / t_count;
      const std::size_t hi = n * (t + 1) / t_count;
      for (std::size_t i = lo; i < hi; ++i) {
        const double a = ElementAsDouble(type, out, i);
        const double r = ElementAsDouble(type, reference, i);
        if (std::isnan(a) || std::isnan(r) || !(std::fabs(a - r) <= atol + rtol * std::fabs(r))) {
          if (bad[t]++ == 0) first_bad[t] = i;
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  std::size_t total_bad = 0, first = n;
  for (std::size_t t = 0; t < t_count; ++t) {
    total_bad += bad[t];
    first = std::min(first, first_bad[t]);
  }
  if (total_bad == 0) return std::string();
  return StrCat(total_bad, " of ", n, " elements of ", what, " differ from the reference (atol ",
                atol, ", rtol ", rtol, "); the first at index ", first, ": ",
                ElementAsDouble(type, out, first), " instead of ",
                ElementAsDouble(type, reference, first));
}

}  // namespace ktune
