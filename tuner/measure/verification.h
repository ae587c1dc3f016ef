// Verification before timing: after the untimed first launch, the guard
// zones around every buffer are read back (a stray write shows there), and
// each verified output is compared with its reference on the GPU under the
// job's atol and rtol (NaN never equal). All of it is enqueued behind the
// launch, so one synchronisation reports a fault, a stray write and a
// wrong result together. A pipeline's output, on the host, is compared
// there.
//
// Not thread-safe (the worker's one thread).
#ifndef KTUNE_TUNER_MEASURE_VERIFICATION_H_
#define KTUNE_TUNER_MEASURE_VERIFICATION_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/measure/buffers.h"
#include "tuner/measure/helper_kernels.h"
#include "tuner/measure/worker_gpu.h"

namespace ktune {

class Verifier {
 public:
  Verifier(WorkerGpu& gpu, const HelperKernels& helpers, ArgumentBuffers& buffers)
      : gpu_(gpu), helpers_(helpers), buffers_(buffers) {}

  // Pinned memory for the first differing element, kept for every job.
  absl::Status Init();
  // A job's checks: which buffers are compared, under which tolerances.
  absl::Status Setup(const v1::WorkerSetup& setup);

  // Queues on `s` the copies of every buffer's guard zones and, with
  // `compare`, the comparison of each verified output with its reference.
  absl::Status EnqueueChecks(CUstream s, bool compare);
  // After `s` is synchronised: what is wrong, or "".
  std::string GuardMessage() const;
  absl::StatusOr<std::string> CompareMessage(CUstream s);
  // Keeps the verified outputs' contents (after a launch on `s`) as the
  // reference (enqueued; the caller synchronises).
  CUresult KeepAsReference(CUstream s);

 private:
  absl::Status Check(CUresult rc, const char* call) const { return gpu_.Check(rc, call); }

  WorkerGpu& gpu_;
  const HelperKernels& helpers_;
  ArgumentBuffers& buffers_;
  v1::WorkerSetup setup_;
  cuda::DeviceMemory compare_results_;  // 16 bytes per buffer
  cuda::PinnedMemory checks_host_;      // guard zones, then the results
  cuda::PinnedMemory host_small_;       // the first differing element
};

// Compares `n` elements of `type` at `out` (named `what` in the message)
// with `reference` on the host, with up to `threads` threads: "" when every
// element is within atol + rtol * |reference| (NaN never is), else how many
// differ and the first.
std::string CompareOnHost(const std::string& what, v1::ElementType type, const void* out,
                          const void* reference, std::size_t n, double atol, double rtol,
                          int threads);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_VERIFICATION_H_
