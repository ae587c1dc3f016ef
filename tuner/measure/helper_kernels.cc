#include "tuner/measure/helper_kernels.h"

#include <optional>
#include <utility>

#include "ktune/v1/worker.pb.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/compile/compile_pool.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/cuda/fill.h"

namespace ktune {

extern const char kMeasureHelperSource[];  // generated from helpers.cu

const char* MeasureHelperSource() { return kMeasureHelperSource; }

absl::StatusOr<HelperKernels> LoadHelperKernels(const cuda::Api& api,
                                                const std::string& architecture) {
  KTUNE_ASSIGN_OR_RETURN(const Nvrtc* nvrtc, Nvrtc::Get());
  v1::CompileRequest req;
  req.set_source(kMeasureHelperSource);
  req.set_source_name("ktune_helpers.cu");
  req.set_kernel_expression("ktune_spin");
  req.set_architecture(architecture);
  req.add_options("-std=c++17");
  CompileCache cache(CompileCache::DefaultDir());
  const std::string key = CompileCache::Key(req, nvrtc->version_text());
  std::optional<v1::CompileResult> result = cache.Get(key);
  if (!result) {
    result = nvrtc->Compile(req);
    if (result->ok()) cache.Put(key, *result);
  }
  if (!result->ok()) {
    return absl::InternalError(
        StrCat("compiling ktune's helper kernels failed: ", result->error(), result->log()));
  }
  HelperKernels h;
  KTUNE_ASSIGN_OR_RETURN(h.module, cuda::LoadModule(api, result->cubin()));
  for (auto [fn, name] : {std::pair{&h.spin, "ktune_spin"}, std::pair{&h.canary, "ktune_canary"},
                          std::pair{&h.load_copy, "ktune_load_copy"},
                          std::pair{&h.load_fma, "ktune_load_fma"}, std::pair{&h.fill, "ktune_fill"}}) {
    KTUNE_RETURN_IF_ERROR(cuda::Check(api, api.cuModuleGetFunction(fn, h.module.get(), name),
                                      "cuModuleGetFunction"));
  }
  h.compare.assign(v1::ElementType_ARRAYSIZE, nullptr);
  for (int t = v1::ELEMENT_F16; t <= v1::ELEMENT_U64; ++t) {
    const std::string name = StrCat("ktune_compare_", ElementName(static_cast<v1::ElementType>(t)));
    KTUNE_RETURN_IF_ERROR(cuda::Check(
        api,
        api.cuModuleGetFunction(&h.compare[static_cast<std::size_t>(t)], h.module.get(),
                                name.c_str()),
        "cuModuleGetFunction"));
  }
  return h;
}

}  // namespace ktune
