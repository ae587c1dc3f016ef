// The NVRTC requests a job's kernels are compiled with: the tuned kernel
// (one per configuration), a reference kernel and the load's companion
// kernels all go through one builder, so each gets the same options,
// include paths and defines.
#ifndef KTUNE_TUNER_DEVICE_KERNEL_COMPILE_H_
#define KTUNE_TUNER_DEVICE_KERNEL_COMPILE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// A kernel's source: its code, or its file read relative to `base_dir`.
// INVALID_ARGUMENT naming `field` (e.g. "kernel") when the file cannot be
// read or there is no source.
absl::StatusOr<std::string> KernelSource(const v1::Kernel& kernel, const std::string& base_dir,
                                         const std::string& field);

// The request that compiles `expression` (a kernel name, or a name
// expression such as "gemm<128, 4>") of `source` for `arch`: the kernel's
// compiler options (C++17 unless they name a standard) and include paths
// (relative to `base_dir`), and its defines then `macros` as #defines at
// the top of the source (not -D options: NVRTC's built-in headers come
// before the source, and a parameter named like an identifier in them
// would break them; #line keeps messages on the user's lines).
v1::CompileRequest KernelCompileRequest(
    const v1::Kernel& kernel, const std::string& source, const std::string& source_name,
    const std::string& base_dir, const std::vector<std::pair<std::string, std::string>>& macros,
    const std::string& expression, const std::string& arch);

// The request that compiles `config` of a job: parameters as macros (bools
// as 1/0), or substituted into the name expression of a templated kernel
// (`{name}` becomes the value).
v1::CompileRequest BuildCompileRequest(const v1::JobSpec& spec, const std::string& source,
                                       const std::string& base_dir, const Space& space,
                                       const Config& config, const std::string& arch);

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_KERNEL_COMPILE_H_
