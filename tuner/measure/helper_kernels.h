// The measurement worker's own kernels (tuner/measure/helpers.cu, embedded
// at build time): compiled by NVRTC for the GPU's architecture when the
// worker opens it, cached on disk like any image, and loaded once.
#ifndef KTUNE_TUNER_MEASURE_HELPER_KERNELS_H_
#define KTUNE_TUNER_MEASURE_HELPER_KERNELS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/cuda/driver.h"

namespace ktune {

// The CUDA source of the helper kernels.
const char* MeasureHelperSource();

// Move-only (the module owns the functions).
struct HelperKernels {
  cuda::Module module;
  CUfunction spin = nullptr;       // busy warm-up for a number of ns
  CUfunction canary = nullptr;     // the contention canary
  CUfunction fill = nullptr;       // seeded fills, as FillRange makes them
  CUfunction load_copy = nullptr;  // the bandwidth load
  CUfunction load_fma = nullptr;   // the compute load
  std::vector<CUfunction> compare;  // by ElementType: output against reference
};

// Compiles (or finds in the cache) and loads the helpers for `architecture`
// ("sm_90"). INTERNAL with NVRTC's log if they do not compile.
absl::StatusOr<HelperKernels> LoadHelperKernels(const cuda::Api& api,
                                                const std::string& architecture);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_HELPER_KERNELS_H_
