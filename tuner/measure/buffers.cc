#include "tuner/measure/buffers.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"
#include "tuner/space/measurement.h"

namespace ktune {
namespace {

constexpr std::size_t kStagingBytes = std::size_t{64} << 20;  // a multiple of 8

int HostThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

absl::Status ArgumentBuffers::Init() {
  for (int k = 0; k < 2; ++k) {
    KTUNE_ASSIGN_OR_RETURN(staged_[k], cuda::CreateEvent(gpu_.api));
  }
  return absl::OkStatus();
}

absl::Status ArgumentBuffers::Setup(const v1::WorkerSetup& setup) {
  buffers_.clear();
  for (const v1::WorkerBuffer& spec : setup.buffers()) {
    ArgumentBuffer b;
    b.spec = spec;
    b.bytes = static_cast<std::size_t>(spec.elements()) * ElementBytes(spec.type());
    absl::StatusOr<cuda::DeviceMemory> m =
        cuda::DeviceMemory::Allocate(gpu_.api, b.bytes + 2 * kGuardBytes);
    if (!m.ok()) {
      return absl::ResourceExhaustedError(
          StrCat("argument ", spec.name(), ": ", m.status().message()));
    }
    b.memory = *std::move(m);
    b.data = b.memory.get() + kGuardBytes;
    if (spec.input() && spec.output()) {
      KTUNE_ASSIGN_OR_RETURN(b.pristine, cuda::DeviceMemory::Allocate(gpu_.api, b.bytes));
    }
    if (spec.output()) {
      KTUNE_ASSIGN_OR_RETURN(b.reference, cuda::DeviceMemory::Allocate(gpu_.api, b.bytes));
    }
    buffers_.push_back(std::move(b));
  }
  for (ArgumentBuffer& b : buffers_) KTUNE_RETURN_IF_ERROR(Upload(b));
  return SetUpRotation(setup.settings().rotate_inputs());
}

bool ArgumentBuffers::restores() const {
  return std::any_of(buffers_.begin(), buffers_.end(),
                     [](const ArgumentBuffer& b) { return b.pristine.get() != 0; });
}

void ArgumentBuffers::Rotate(std::vector<CUdeviceptr>& pointers) {
  const auto copy = static_cast<std::size_t>(rotation_++ % static_cast<std::uint64_t>(rotations_));
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (!buffers_[b].copies.empty()) {
      pointers[b] = copy == 0 ? buffers_[b].data : buffers_[b].copies[copy - 1].get();
    }
  }
}

absl::Status ArgumentBuffers::Stage(
    CUdeviceptr dst, std::size_t bytes,
    const std::function<absl::Status(std::size_t, std::size_t, void*)>& fill) {
  // Double-buffered: chunk k+1 is filled on the host while chunk k copies.
  // The staging buffers are pinned on first use: arguments made on the GPU
  // never need them, and pinning them takes tens of milliseconds.
  for (cuda::PinnedMemory& staging : staging_) {
    if (staging.get() == nullptr) {
      KTUNE_ASSIGN_OR_RETURN(staging, cuda::PinnedMemory::Allocate(gpu_.api, kStagingBytes));
    }
  }
  CUstream cs = gpu_.copy_stream.get();
  const std::size_t chunk = staging_[0].size_bytes();
  for (std::size_t offset = 0, k = 0; offset < bytes; offset += chunk, ++k) {
    const std::size_t len = std::min(chunk, bytes - offset);
    const std::size_t slot = k % 2;
    if (k >= 2) {
      KTUNE_RETURN_IF_ERROR(
          Check(gpu_.api.cuEventSynchronize(staged_[slot].get()), "cuEventSynchronize"));
    }
    KTUNE_RETURN_IF_ERROR(fill(offset, len, staging_[slot].get()));
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyHtoDAsync(dst + offset, staging_[slot].get(), len, cs),
              "cuMemcpyHtoDAsync"));
    KTUNE_RETURN_IF_ERROR(Check(gpu_.api.cuEventRecord(staged_[slot].get(), cs), "cuEventRecord"));
  }
  return Check(gpu_.api.cuStreamSynchronize(cs), "cuStreamSynchronize");
}

absl::Status ArgumentBuffers::FillOnDevice(const ArgumentBuffer& b, CUstream s) {
  const v1::WorkerBuffer& spec = b.spec;
  if (spec.init_case() == v1::WorkerBuffer::kZeros ||
      spec.init_case() == v1::WorkerBuffer::INIT_NOT_SET) {
    return Check(gpu_.api.cuMemsetD8Async(b.data, 0, b.bytes, s), "cuMemsetD8Async");
  }
  int mode = 0;
  double a = 0, span = 0;
  unsigned long long seed = 0;
  switch (spec.init_case()) {
    case v1::WorkerBuffer::kUniform:
      a = spec.uniform().low();
      span = spec.uniform().high() - a;
      seed = spec.uniform().seed();
      break;
    case v1::WorkerBuffer::kConstant:
      mode = 1;
      a = spec.constant();
      break;
    default:  // kIota
      mode = 2;
      a = spec.iota().start();
      span = spec.iota().step();
      break;
  }
  CUdeviceptr out = b.data;
  unsigned long long n = static_cast<unsigned long long>(spec.elements()), first = 0;
  int type = spec.type();
  void* args[] = {&out, &n, &first, &type, &mode, &a, &span, &seed};
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(
      (n + 255) / 256, static_cast<unsigned long long>(gpu_.multiprocessors) * 32));
  return Check(gpu_.api.cuLaunchKernel(helpers_.fill, std::max(1u, blocks), 1, 1, 256, 1, 1, 0, s,
                                       args, nullptr),
               "cuLaunchKernel(fill)");
}

absl::Status ArgumentBuffers::Upload(ArgumentBuffer& b) {
  if (b.bytes == 0) return absl::OkStatus();
  const std::size_t eb = ElementBytes(b.spec.type());
  // Seeded noise, constants and sequences are made on the GPU (the values
  // FillRange makes, without host work or copies); normal noise and files
  // go through the staging buffers.
  const bool on_device = b.spec.init_case() != v1::WorkerBuffer::kNormal &&
                         b.spec.init_case() != v1::WorkerBuffer::kData;
  if (on_device) {
    KTUNE_RETURN_IF_ERROR(FillOnDevice(b, gpu_.copy_stream.get()));
  } else {
    KTUNE_RETURN_IF_ERROR(
        Stage(b.data, b.bytes, [&](std::size_t offset, std::size_t len, void* out) {
          return FillRange(b.spec, static_cast<std::int64_t>(offset / eb),
                           static_cast<std::int64_t>(len / eb), out, HostThreads());
        }));
  }
  if (b.pristine.get() != 0) {
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemcpyDtoDAsync(b.pristine.get(), b.data, b.bytes, gpu_.copy_stream.get()),
              "cuMemcpyDtoDAsync"));
  }
  if (!b.spec.expected().empty()) {
    if (b.spec.expected().size() != b.bytes) {
      return absl::InvalidArgumentError(StrCat("argument ", b.spec.name(),
                                               ": the expected data has ", b.spec.expected().size(),
                                               " bytes, the buffer ", b.bytes));
    }
    KTUNE_RETURN_IF_ERROR(
        Stage(b.reference.get(), b.bytes, [&](std::size_t offset, std::size_t len, void* out) {
          std::memcpy(out, b.spec.expected().data() + offset, len);
          return absl::OkStatus();
        }));
    b.has_reference = true;
  }
  return Check(gpu_.api.cuStreamSynchronize(gpu_.copy_stream.get()), "cuStreamSynchronize");
}

absl::Status ArgumentBuffers::SetUpRotation(bool rotate) {
  rotations_ = 1;
  if (!rotate) return absl::OkStatus();
  std::int64_t inputs = 0;
  for (const ArgumentBuffer& b : buffers_) {
    if (b.spec.input() && !b.spec.output() && !b.spec.constant_symbol()) {
      inputs += static_cast<std::int64_t>(b.bytes);
    }
  }
  const std::int64_t span = 2 * static_cast<std::int64_t>(gpu_.l2_bytes);
  if (inputs == 0 || inputs >= span || inputs >= kMaxRotationBytes) return absl::OkStatus();
  // Enough copies that the other copies together exceed twice the L2: a
  // copy's lines are gone by the time it is read again.
  int copies = static_cast<int>((span + inputs - 1) / inputs) + 1;
  copies = std::min<int>(copies, kMaxRotationCopies);
  copies = std::min<int>(copies, static_cast<int>(1 + (kMaxRotationBytes + inputs) / inputs));
  for (ArgumentBuffer& b : buffers_) {
    // A constant's contents are copied into each module: never a kernel's
    // input from global memory.
    if (!b.spec.input() || b.spec.output() || b.spec.constant_symbol()) continue;
    for (int k = 1; k < copies; ++k) {
      absl::StatusOr<cuda::DeviceMemory> m = cuda::DeviceMemory::Allocate(gpu_.api, b.bytes);
      if (!m.ok()) {
        return absl::ResourceExhaustedError(StrCat("measurement.rotate_inputs: copy ", k, " of ",
                                                   b.spec.name(), ": ", m.status().message()));
      }
      KTUNE_RETURN_IF_ERROR(
          Check(gpu_.api.cuMemcpyDtoDAsync(m->get(), b.data, b.bytes, gpu_.copy_stream.get()),
                "cuMemcpyDtoDAsync"));
      b.copies.push_back(*std::move(m));
    }
  }
  KTUNE_RETURN_IF_ERROR(
      Check(gpu_.api.cuStreamSynchronize(gpu_.copy_stream.get()), "cuStreamSynchronize"));
  rotations_ = copies;
  return absl::OkStatus();
}

absl::Status ArgumentBuffers::FillConstants(CUmodule module, CUstream s) const {
  for (const ArgumentBuffer& b : buffers_) {
    if (!b.spec.constant_symbol()) continue;
    KTUNE_RETURN_IF_ERROR(cuda::CopyToSymbol(gpu_.api, module, b.spec.name(), b.data, b.bytes, s));
  }
  return absl::OkStatus();
}

absl::Status ArgumentBuffers::ResetGuards(CUstream s) {
  for (const ArgumentBuffer& b : buffers_) {
    KTUNE_RETURN_IF_ERROR(Check(
        gpu_.api.cuMemsetD8Async(b.memory.get(), kGuardByte, kGuardBytes, s), "cuMemsetD8Async"));
    KTUNE_RETURN_IF_ERROR(Check(
        gpu_.api.cuMemsetD8Async(b.data + b.bytes, kGuardByte, kGuardBytes, s), "cuMemsetD8Async"));
  }
  return absl::OkStatus();
}

absl::Status ArgumentBuffers::RestoreInputs(CUstream s) {
  for (const ArgumentBuffer& b : buffers_) {
    if (b.pristine.get() == 0) continue;
    KTUNE_RETURN_IF_ERROR(Check(gpu_.api.cuMemcpyDtoDAsync(b.data, b.pristine.get(), b.bytes, s),
                                "cuMemcpyDtoDAsync"));
  }
  return absl::OkStatus();
}

absl::Status ArgumentBuffers::PoisonOutputs(CUstream s) {
  for (const ArgumentBuffer& b : buffers_) {
    if (!b.spec.output() || b.spec.input()) continue;
    KTUNE_RETURN_IF_ERROR(
        Check(gpu_.api.cuMemsetD8Async(b.data, kPoisonByte, b.bytes, s), "cuMemsetD8Async"));
  }
  return absl::OkStatus();
}

}  // namespace ktune
