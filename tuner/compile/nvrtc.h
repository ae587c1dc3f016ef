// NVRTC, loaded at run time: ktune starts (and everything but compilation
// works) on machines without the CUDA toolkit.
#ifndef KTUNE_TUNER_COMPILE_NVRTC_H_
#define KTUNE_TUNER_COMPILE_NVRTC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {

// The loaded library. Thread-compatible: calls are made from one thread
// per process (NVRTC scales across processes, not threads).
class Nvrtc {
 public:
  // Loads libnvrtc once per process ($KTUNE_NVRTC, else libnvrtc.so.13,
  // .so.12, .so). FAILED_PRECONDITION saying what was tried if none loads.
  static absl::StatusOr<const Nvrtc*> Get();

  // "13.0".
  std::string version_text() const;
  int version() const { return major_ * 1000 + minor_ * 10; }
  // Architectures this NVRTC can produce CUBIN for, e.g. {75, 80, 90}.
  const std::vector<int>& supported_archs() const { return archs_; }

  // Whether this NVRTC knows -minimal (12.4 and later).
  bool has_minimal() const;

  // Compiles `request` to CUBIN. A compile error is a result with ok false
  // and the log; only infrastructure failures set `error`. With
  // try_minimal (and an NVRTC that has it), -minimal first, then without
  // it if that fails (minimal_refused says the second one succeeded).
  v1::CompileResult Compile(const v1::CompileRequest& request) const;

  struct Api;

 private:
  Nvrtc() = default;
  v1::CompileResult CompileOnce(const v1::CompileRequest& request, bool minimal) const;
  const Api* api_ = nullptr;
  int major_ = 0;
  int minor_ = 0;
  std::vector<int> archs_;
};

// "sm_90" -> 90; -1 if malformed.
int ParseArchitecture(const std::string& arch);

}  // namespace ktune

#endif  // KTUNE_TUNER_COMPILE_NVRTC_H_
