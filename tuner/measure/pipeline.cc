#include "tuner/measure/pipeline.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"
#include "tuner/measure/buffers.h"
#include "tuner/measure/sampling_policy.h"
#include "tuner/measure/verification.h"

namespace ktune {
namespace {

int HostThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace

absl::Status PipelineRunner::Setup(const v1::WorkerPipeline& p) {
  reference_.clear();
  spec_ = p;
  const std::size_t bytes = static_cast<std::size_t>(p.elements()) * ElementBytes(p.type());
  if (bytes != bytes_) {
    pinned_in_ = cuda::PinnedMemory();
    pinned_out_ = cuda::PinnedMemory();
    pageable_in_.reset();
    pageable_out_.reset();
    bytes_ = 0;
    KTUNE_ASSIGN_OR_RETURN(pinned_in_, cuda::PinnedMemory::Allocate(gpu_.api, bytes));
    KTUNE_ASSIGN_OR_RETURN(pinned_out_, cuda::PinnedMemory::Allocate(gpu_.api, bytes));
    pageable_in_.reset(new char[bytes]);
    pageable_out_.reset(new char[bytes]);
    std::memset(pageable_out_.get(), 0, bytes);  // pages present, as an application's are
    bytes_ = bytes;
  }
  v1::WorkerBuffer input;
  input.set_name("pipeline input");
  input.set_type(p.type());
  input.set_elements(p.elements());
  *input.mutable_uniform() = p.input();
  KTUNE_RETURN_IF_ERROR(FillRange(input, 0, p.elements(), pinned_in_.get(), HostThreads()));
  std::memcpy(pageable_in_.get(), pinned_in_.get(), bytes);
  return absl::OkStatus();
}

CUresult PipelineRunner::Run(CUfunction f, const v1::WorkerCandidate& c, unsigned shared, int stage,
                             CUevent begin, CUevent end) const {
  const cuda::Api& api = gpu_.api;
  const int streams = stage < 0 ? c.streams() : 1;
  const std::size_t eb = ElementBytes(spec_.type());
  const auto total = static_cast<std::size_t>(spec_.elements());
  const std::size_t chunk = std::min(total, static_cast<std::size_t>(c.chunk_elements()));
  const char* in = static_cast<const char*>(c.pinned() ? pinned_in_.get() : pageable_in_.get());
  char* out = static_cast<char*>(c.pinned() ? pinned_out_.get() : pageable_out_.get());
  CUstream first = gpu_.side[0].get();
  if (CUresult rc = api.cuEventRecord(begin, first); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = gpu_.Fork(begin, 1, streams); rc != CUDA_SUCCESS) return rc;
  std::size_t i = 0;
  for (std::size_t offset = 0; offset < total; offset += chunk, ++i) {
    const std::size_t n = std::min(chunk, total - offset);
    const std::size_t k = i % static_cast<std::size_t>(streams);
    CUstream st = gpu_.side[k].get();
    CUdeviceptr din = device_.get() + 2 * k * chunk * eb;
    CUdeviceptr dout = din + chunk * eb;
    if (stage < 0 || stage == 0) {
      if (CUresult rc = api.cuMemcpyHtoDAsync(din, in + offset * eb, n * eb, st);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
    if (stage < 0 || stage == 1) {
      unsigned long long count = n;
      void* args[] = {&din, &dout, &count};
      if (CUresult rc =
              api.cuLaunchKernel(f, c.grid().x(), c.grid().y(), c.grid().z(), c.block().x(),
                                 c.block().y(), c.block().z(), shared, st, args, nullptr);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
    if (stage < 0 || stage == 2) {
      if (CUresult rc = api.cuMemcpyDtoHAsync(out + offset * eb, dout, n * eb, st);
          rc != CUDA_SUCCESS) {
        return rc;
      }
    }
  }
  if (CUresult rc = gpu_.Join(first, 1, streams); rc != CUDA_SUCCESS) return rc;
  return api.cuEventRecord(end, first);
}

std::optional<v1::WorkerMeasurement> PipelineRunner::FirstPass(const v1::WorkerCandidate& c,
                                                               CUfunction f, unsigned shared,
                                                               const Tools& tools,
                                                               CandidateEnding& end,
                                                               float* first_ms) {
  const cuda::Api& api = gpu_.api;
  v1::WorkerMeasurement& out = end.out;
  char* host_out = static_cast<char*>(c.pinned() ? pinned_out_.get() : pageable_out_.get());
  std::memset(host_out, kPoisonByte, bytes_);
  if (CUresult rc = Run(f, c, shared, -1, gpu_.first_start.get(), gpu_.first_end.get());
      rc != CUDA_SUCCESS) {
    return end.Failed(rc, "enqueueing the pipeline", true);
  }
  if (CUresult rc = api.cuEventSynchronize(gpu_.first_end.get()); rc != CUDA_SUCCESS) {
    return end.Failed(rc, "running the pipeline", false);
  }
  if (CUresult rc = api.cuEventElapsedTime(first_ms, gpu_.first_start.get(), gpu_.first_end.get());
      rc != CUDA_SUCCESS) {
    return end.Failed(rc, "cuEventElapsedTime", false);
  }
  if (c.make_reference()) {
    reference_.assign(host_out, host_out + bytes_);
    out.set_status(v1::OK);
    out.add_samples_ms(*first_ms);
    out.mutable_conditions()->set_launches_per_sample(1);
    return end.Finish();
  }
  if (c.verify() && !reference_.empty()) {
    const std::string diff =
        CompareOnHost("the pipeline's output", spec_.type(), host_out, reference_.data(),
                      static_cast<std::size_t>(spec_.elements()), tools.settings.atol(),
                      tools.settings.rtol(), HostThreads());
    if (!diff.empty()) {
      out.set_status(v1::WRONG_RESULT);
      out.set_message(diff);
      return end.Finish();
    }
  }
  return std::nullopt;
}

v1::WorkerMeasurement PipelineRunner::Measure(const v1::WorkerCandidate& c, CUfunction f,
                                              unsigned shared, const Tools& tools,
                                              CandidateEnding& end) {
  const cuda::Api& api = gpu_.api;
  v1::WorkerMeasurement& out = end.out;
  const int streams = c.streams();
  if (streams < 1 || streams > kMaxStreams || c.chunk_elements() < 1) {
    return end.LaunchError(StrCat("the pipeline asks for ", streams, " streams (1 to ", kMaxStreams,
                                  ") and chunks of ", c.chunk_elements(),
                                  " elements (at least 1)"));
  }
  // In and out buffers of one chunk for each stream that gets a chunk.
  const std::size_t eb = ElementBytes(spec_.type());
  const auto total = static_cast<std::size_t>(spec_.elements());
  const std::size_t chunk = std::min(total, static_cast<std::size_t>(c.chunk_elements()));
  const std::size_t used = std::min(static_cast<std::size_t>(streams), (total + chunk - 1) / chunk);
  const std::size_t need = 2 * used * chunk * eb;
  if (device_.size_bytes() < need) {
    device_ = cuda::DeviceMemory();
    absl::StatusOr<cuda::DeviceMemory> m = cuda::DeviceMemory::Allocate(api, need);
    if (!m.ok()) {
      return end.LaunchError(StrCat("the pipeline's chunk buffers (", need >> 20,
                                    " MiB) do not fit: ", m.status().message()));
    }
    device_ = *std::move(m);
  }
  if (auto st = gpu_.EnsureStreams(streams); !st.ok()) return end.Infra(st);

  float first_ms = 0;
  if (std::optional<v1::WorkerMeasurement> ended =
          FirstPass(c, f, shared, tools, end, &first_ms)) {
    return *std::move(ended);
  }

  // UNDER_LOAD: the load runs through the samples and the stages.
  v1::Conditions& cond = *out.mutable_conditions();
  absl::StatusOr<RunningLoad> loaded = tools.start_load(cond);
  if (!loaded.ok()) return end.Infra(loaded.status());

  // Samples: whole pipeline runs, end to end.
  cond.set_launches_per_sample(1);
  cond.set_sm_clock_mhz_before(tools.clocks.clock_mhz());
  const SamplingSettings settings = SamplingSettingsOf(tools.settings);
  CandidateSampling candidate = CandidateSamplingOf(c);
  candidate.batching = false;
  // A pass is long: the time cap waits for a few of them.
  candidate.time_cap_min_samples = std::min(3, MinSamplesOf(settings, candidate));
  SamplingPolicy policy(settings, candidate);
  double busy = first_ms;
  float ms = 0;
  // One timed pass (stage < 0: the whole pipeline); a failure ends the
  // candidate.
  auto timed_pass = [&](int stage) -> std::optional<v1::WorkerMeasurement> {
    if (CUresult rc = Run(f, c, shared, stage, gpu_.starts[0].get(), gpu_.ends[0].get());
        rc != CUDA_SUCCESS) {
      return end.Failed(rc, "enqueueing the pipeline", true);
    }
    if (CUresult rc = api.cuEventSynchronize(gpu_.ends[0].get()); rc != CUDA_SUCCESS) {
      return end.Failed(rc, "running the pipeline", false);
    }
    if (CUresult rc = api.cuEventElapsedTime(&ms, gpu_.starts[0].get(), gpu_.ends[0].get());
        rc != CUDA_SUCCESS) {
      return end.Failed(rc, "cuEventElapsedTime", false);
    }
    busy += ms;
    return std::nullopt;
  };
  while (policy.NextChunk() > 0) {
    if (std::optional<v1::WorkerMeasurement> failure = timed_pass(-1)) return *std::move(failure);
    const double sample = ms;
    const Millis elapsed = std::chrono::duration_cast<Millis>(WorkerClock::now() - end.start);
    if (policy.Add({&sample, 1}, /*throttled=*/false, elapsed) == SamplingPolicy::Next::kDone) {
      break;
    }
  }
  if (policy.raced()) cond.set_raced(true);
  // The stages one after another on one stream: what overlap can save.
  double stage_ms[3] = {0, 0, 0};
  for (int stage = 0; stage < 3; ++stage) {
    if (std::optional<v1::WorkerMeasurement> failure = timed_pass(stage)) {
      return *std::move(failure);
    }
    stage_ms[stage] = ms;
  }
  if (auto st = loaded->Finish(cond); !st.ok()) return end.Infra(st);
  cond.set_h2d_ms(stage_ms[0]);
  cond.set_kernel_ms(stage_ms[1]);
  cond.set_d2h_ms(stage_ms[2]);
  cond.set_sm_clock_mhz_after(tools.clocks.clock_mhz());
  cond.set_gpu_busy_ms(busy);
  for (double v : policy.samples()) out.add_samples_ms(v);
  out.set_status(v1::OK);
  return end.Finish();
}

}  // namespace ktune
