// A job's kernel arguments on the GPU: each buffer between guard zones
// (stray writes show there), inputs the kernel also writes kept pristine
// to restore before every launch, outputs poisoned before the verification
// run with room for the reference, read-only inputs in several copies
// taken in turn (measurement.rotate_inputs). Contents are made on the GPU
// where they can be (seeded noise, constants, sequences: the values the
// host's FillRange makes) and otherwise staged through two pinned buffers
// on the copy stream, the next chunk filled while the last one copies.
//
// Not thread-safe (the worker's one thread).
#ifndef KTUNE_TUNER_MEASURE_BUFFERS_H_
#define KTUNE_TUNER_MEASURE_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/cuda/driver.h"
#include "tuner/measure/helper_kernels.h"
#include "tuner/measure/worker_gpu.h"

namespace ktune {

inline constexpr std::size_t kGuardBytes = 4096;
inline constexpr unsigned char kGuardByte = 0xa5;
inline constexpr unsigned char kPoisonByte = 0xff;  // NaN for floats, -1 for ints

struct ArgumentBuffer {
  v1::WorkerBuffer spec;
  std::size_t bytes = 0;
  cuda::DeviceMemory memory;  // guard | data | guard
  CUdeviceptr data = 0;
  cuda::DeviceMemory pristine;   // inputs the kernel also writes
  cuda::DeviceMemory reference;  // verified outputs' expected contents
  bool has_reference = false;
  // rotate_inputs: copies 1, 2, ... of a read-only input (copy 0 is data).
  std::vector<cuda::DeviceMemory> copies;
};

class ArgumentBuffers {
 public:
  ArgumentBuffers(WorkerGpu& gpu, const HelperKernels& helpers) : gpu_(gpu), helpers_(helpers) {}

  // The staging buffers' events; the buffers themselves are pinned when
  // first needed and kept for every job after.
  absl::Status Init();
  // Replaces the previous job's buffers with `setup`'s: allocated, filled,
  // expected contents uploaded, rotation copies made.
  absl::Status Setup(const v1::WorkerSetup& setup);

  std::vector<ArgumentBuffer>& buffers() { return buffers_; }
  const std::vector<ArgumentBuffer>& buffers() const { return buffers_; }
  // Whether any input must be restored before each launch.
  bool restores() const;
  // Copies of the read-only inputs taken in turn (1: no rotation).
  int rotations() const { return rotations_; }
  // Points `pointers` (one per buffer) at the next copy of each rotated
  // input.
  void Rotate(std::vector<CUdeviceptr>& pointers);

  // Enqueued on `s`: the constant arguments copied into `module`'s
  // __constant__ variables of their names. NOT_FOUND or INVALID_ARGUMENT
  // (see cuda::CopyToSymbol) when the module cannot take one.
  absl::Status FillConstants(CUmodule module, CUstream s) const;
  // Enqueued on `s`: the guard zones reset, inputs the kernel writes
  // restored, outputs poisoned.
  absl::Status ResetGuards(CUstream s);
  absl::Status RestoreInputs(CUstream s);
  absl::Status PoisonOutputs(CUstream s);

 private:
  absl::Status Check(CUresult rc, const char* call) const { return gpu_.Check(rc, call); }
  absl::Status Upload(ArgumentBuffer& b);
  // Fills `b` on the GPU on stream `s` (seeded uniform, constant, iota,
  // zeros): the values FillRange would make.
  absl::Status FillOnDevice(const ArgumentBuffer& b, CUstream s);
  // Copies `bytes` produced chunk by chunk by `fill(offset, len, host)` to
  // `dst`, through the pinned staging buffers on the copy stream.
  absl::Status Stage(CUdeviceptr dst, std::size_t bytes,
                     const std::function<absl::Status(std::size_t, std::size_t, void*)>& fill);
  absl::Status SetUpRotation(bool rotate);

  WorkerGpu& gpu_;
  const HelperKernels& helpers_;
  std::vector<ArgumentBuffer> buffers_;
  cuda::PinnedMemory staging_[2];
  cuda::Event staged_[2];
  int rotations_ = 1;
  std::uint64_t rotation_ = 0;  // launches made on rotated inputs
};

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_BUFFERS_H_
