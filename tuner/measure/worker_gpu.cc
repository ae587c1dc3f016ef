#include "tuner/measure/worker_gpu.h"

#include <cstdio>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

std::string FormatUuid(const CUuuid& u) {
  char buf[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

}  // namespace

std::string DeviceUuid(const cuda::Api& api, CUdevice device) {
  CUuuid uuid;
  if (api.cuDeviceGetUuid(&uuid, device) != CUDA_SUCCESS) return "";
  return FormatUuid(uuid);
}

absl::Status WorkerGpu::Open(int index, std::string* name) {
  ordinal = index;
  KTUNE_ASSIGN_OR_RETURN(cuda::Context ctx, cuda::Context::Open(api, index));
  context.emplace(std::move(ctx));
  const CUdevice d = context->device();
  char buf[256] = {};
  api.cuDeviceGetName(buf, sizeof buf, d);
  *name = buf;
  int major = 0, minor = 0;
  api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
  api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
  api.cuDeviceGetAttribute(&multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
  api.cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, d);
  api.cuDeviceGetAttribute(&max_shared_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                           d);
  architecture = StrCat("sm_", major, minor);

  KTUNE_ASSIGN_OR_RETURN(stream, cuda::CreateStream(api));
  KTUNE_ASSIGN_OR_RETURN(copy_stream, cuda::CreateStream(api));
  starts.clear();
  ends.clear();
  for (int i = 0; i < SamplingPolicy::kChunk; ++i) {
    KTUNE_ASSIGN_OR_RETURN(cuda::Event a, cuda::CreateEvent(api));
    KTUNE_ASSIGN_OR_RETURN(cuda::Event b, cuda::CreateEvent(api));
    starts.push_back(std::move(a));
    ends.push_back(std::move(b));
  }
  KTUNE_ASSIGN_OR_RETURN(first_start, cuda::CreateEvent(api));
  KTUNE_ASSIGN_OR_RETURN(first_end, cuda::CreateEvent(api));
  return Check(api.cuCtxGetCurrent(&cu_context), "cuCtxGetCurrent");
}

absl::Status WorkerGpu::EnsureStreams(int n) {
  if (!fork) {
    KTUNE_ASSIGN_OR_RETURN(fork, cuda::CreateEvent(api));
  }
  while (static_cast<int>(side.size()) < n) {
    KTUNE_ASSIGN_OR_RETURN(cuda::Stream st, cuda::CreateStream(api));
    KTUNE_ASSIGN_OR_RETURN(cuda::Event e, cuda::CreateEvent(api));
    side.push_back(std::move(st));
    joins.push_back(std::move(e));
  }
  return absl::OkStatus();
}

CUresult WorkerGpu::Fork(CUevent at, int from, int to) const {
  for (int k = from; k < to; ++k) {
    if (CUresult rc = api.cuStreamWaitEvent(side[static_cast<std::size_t>(k)].get(), at, 0);
        rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

CUresult WorkerGpu::Join(CUstream into, int from, int to) const {
  for (int k = from; k < to; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    if (CUresult rc = api.cuEventRecord(joins[kk].get(), side[kk].get()); rc != CUDA_SUCCESS) {
      return rc;
    }
    if (CUresult rc = api.cuStreamWaitEvent(into, joins[kk].get(), 0); rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

SamplingSettings SamplingSettingsOf(const v1::WorkerSettings& s) {
  SamplingSettings out;
  out.min_samples = s.min_samples();
  out.max_samples = s.max_samples();
  out.target_relative_noise = s.target_relative_noise();
  out.time_cap = Millis(s.max_candidate_ms());
  out.racing_factor = s.racing_factor();
  out.racing_min_samples = s.racing_min_samples();
  out.short_kernel = Millis(s.short_kernel_ms());
  return out;
}

CandidateSampling CandidateSamplingOf(const v1::WorkerCandidate& c) {
  CandidateSampling out;
  out.best = Millis(c.best_ms());
  out.no_racing = c.no_racing();
  out.min_samples = c.min_samples();
  out.instances = c.instances();
  return out;
}

v1::WorkerMeasurement CandidateEnding::Finish() {
  out.set_wall_ms(std::chrono::duration<double, std::milli>(WorkerClock::now() - start).count());
  return out;
}

v1::WorkerMeasurement CandidateEnding::LaunchError(const std::string& message) {
  out.set_status(v1::LAUNCH_ERROR);
  out.set_message(message);
  return Finish();
}

v1::WorkerMeasurement CandidateEnding::Failed(CUresult rc, const char* call, bool launch) {
  const absl::Status st = cuda::Check(api, rc, call);
  if (cuda::IsStickyError(rc)) {
    out.set_status(v1::RUNTIME_FAULT);
    out.set_context_lost(true);
  } else {
    out.set_status(launch ? v1::LAUNCH_ERROR : v1::RUNTIME_FAULT);
  }
  out.set_message(std::string(st.message()));
  return Finish();
}

v1::WorkerMeasurement CandidateEnding::Infra(const absl::Status& status) {
  out.set_status(v1::RUNTIME_FAULT);
  out.set_message(std::string(status.message()));
  out.set_context_lost(true);
  return Finish();
}

}  // namespace ktune
