#include "tuner/measure/worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>

#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/nvml.h"
#include "tuner/measure/energy.h"
#include "tuner/measure/sampling_policy.h"

namespace ktune {
namespace {

// The GPU clocks down when idle: after a gap this long, warm it up again.
constexpr auto kIdleGap = std::chrono::milliseconds(200);

double MsSince(WorkerClock::time_point start) {
  return std::chrono::duration<double, std::milli>(WorkerClock::now() - start).count();
}

}  // namespace

absl::Status Worker::Init(int ordinal, std::string* device_name) {
  // NVML opens in a thread of its own while the context is made (on the
  // H200 some 15 ms beside 260): all it needs is the GPU's UUID.
  std::future<Nvml> nvml;
  CUdevice device = 0;
  if (gpu_.api.cuDeviceGet(&device, ordinal) == CUDA_SUCCESS) {
    if (std::string uuid = DeviceUuid(gpu_.api, device); !uuid.empty()) {
      nvml = std::async(std::launch::async, [uuid] { return Nvml::ForUuid(uuid); });
    }
  }
  const absl::Status opened = gpu_.Open(ordinal, device_name);
  const bool have_nvml = nvml.valid();
  if (have_nvml) nvml_ = nvml.get();
  KTUNE_RETURN_IF_ERROR(opened);
  if (have_nvml) {
    max_clock_mhz_ = nvml_.MaxSmClockMhz();
    clocks_.Start(nvml_);
  }
  KTUNE_ASSIGN_OR_RETURN(helpers_, LoadHelperKernels(gpu_.api, gpu_.architecture));
  KTUNE_RETURN_IF_ERROR(canary_.Init());
  KTUNE_RETURN_IF_ERROR(verifier_.Init());
  return buffers_.Init();
}

absl::Status Worker::Setup(const v1::WorkerSetup& setup) {
  if (setup.settings().measure_energy() && !nvml_.EnergyMillijoules() && !nvml_.PowerMilliwatts()) {
    return absl::FailedPreconditionError(
        "measurement.energy: NVML reads neither this GPU's energy counter nor its power, so its "
        "energy cannot be measured here");
  }
  setup_ = setup;
  setup_.clear_buffers();
  flush_ = cuda::DeviceMemory();
  if (setup.settings().flush_l2() && gpu_.l2_bytes > 0) {
    KTUNE_ASSIGN_OR_RETURN(flush_, cuda::DeviceMemory::Allocate(
                                       gpu_.api, 2 * static_cast<std::size_t>(gpu_.l2_bytes)));
  }
  KTUNE_RETURN_IF_ERROR(buffers_.Setup(setup));
  KTUNE_RETURN_IF_ERROR(verifier_.Setup(setup));
  load_.reset();
  if (setup.load().kind() == v1::LoadProfile::UNDER_LOAD) {
    load_ = std::make_unique<LoadRunner>(gpu_.api, gpu_.cu_context, gpu_.multiprocessors,
                                         LoadKernels{helpers_.load_copy, helpers_.load_fma});
    if (auto s = load_->Setup(setup.load()); !s.ok()) {
      return absl::Status(s.code(), StrCat("setting up the load: ", s.message()));
    }
  }
  if (setup.has_pipeline()) {
    KTUNE_RETURN_IF_ERROR(pipeline_.Setup(setup.pipeline()));
  } else {
    pipeline_.Clear();
  }
  KTUNE_RETURN_IF_ERROR(buffers_.ResetGuards(gpu_.stream.get()));
  KTUNE_RETURN_IF_ERROR(
      gpu_.Check(gpu_.api.cuStreamSynchronize(gpu_.stream.get()), "cuStreamSynchronize"));
  last_activity_ = WorkerClock::time_point{};  // warm up before the first sample
  return absl::OkStatus();
}

absl::StatusOr<double> Worker::WarmUp() {
  // In slices, so that a GPU already at its highest clock (after the
  // reference's launch, say) is not kept waiting for the whole of it.
  const double limit_ms = setup_.settings().warmup_ms();
  double spun_ms = 0;
  for (double slice_ms;
       (slice_ms = NextWarmUpSliceMs(spun_ms, limit_ms, clocks_.clock_mhz(), max_clock_mhz_)) > 0;
       spun_ms += slice_ms) {
    unsigned long long ns = static_cast<unsigned long long>(slice_ms * 1e6);
    void* args[] = {&ns};
    KTUNE_RETURN_IF_ERROR(gpu_.Check(
        gpu_.api.cuLaunchKernel(helpers_.spin, static_cast<unsigned>(gpu_.multiprocessors) * 2, 1,
                                1, 128, 1, 1, 0, gpu_.stream.get(), args, nullptr),
        "cuLaunchKernel(warm-up)"));
    KTUNE_RETURN_IF_ERROR(
        gpu_.Check(gpu_.api.cuStreamSynchronize(gpu_.stream.get()), "cuStreamSynchronize"));
  }
  return spun_ms;
}

std::optional<v1::WorkerMeasurement> Worker::Load(const v1::WorkerCandidate& c,
                                                  cuda::Module* module, Launch* launch,
                                                  CandidateEnding& end) {
  const cuda::Api& api = gpu_.api;
  absl::StatusOr<cuda::Module> loaded = cuda::LoadModule(api, c.cubin());
  end.out.set_load_ms(MsSince(end.start));
  if (!loaded.ok()) return end.LaunchError(std::string(loaded.status().message()));
  *module = *std::move(loaded);
  CUfunction f = nullptr;
  if (CUresult rc = api.cuModuleGetFunction(&f, module->get(), c.function().c_str());
      rc != CUDA_SUCCESS) {
    return end.LaunchError(StrCat("the image has no kernel named ", c.function(), ": ",
                                  gpu_.Check(rc, "cuModuleGetFunction").message()));
  }
  int regs = 0, static_shared = 0, local = 0, max_threads = 0;
  api.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
  api.cuFuncGetAttribute(&static_shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
  api.cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
  api.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
  v1::Conditions& cond = *end.out.mutable_conditions();
  cond.set_registers(regs);
  cond.set_static_shared_bytes(static_shared);
  cond.set_local_bytes(local);
  const std::uint64_t threads = std::uint64_t{c.block().x()} * c.block().y() * c.block().z();
  if (threads > static_cast<std::uint64_t>(max_threads)) {
    return end.LaunchError(StrCat("the block has ", threads,
                                  " threads; this kernel allows at most ", max_threads,
                                  " (it uses ", regs, " registers per thread)"));
  }
  const unsigned dynamic_shared = c.shared_memory_bytes();
  // Past 48 KiB a block's shared memory, static and dynamic together, needs
  // the kernel's opt-in (a launch asking for exactly 48 KiB of dynamic
  // memory fails without it if the kernel also has static variables).
  if (dynamic_shared + static_cast<unsigned>(static_shared) > 48 * 1024) {
    if (static_cast<int>(dynamic_shared) + static_shared > gpu_.max_shared_optin) {
      return end.LaunchError(StrCat("the kernel asks for ", dynamic_shared + static_shared,
                                    " bytes of shared memory; the device allows ",
                                    gpu_.max_shared_optin));
    }
    if (CUresult rc = api.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             static_cast<int>(dynamic_shared));
        rc != CUDA_SUCCESS) {
      return end.Failed(rc, "cuFuncSetAttribute", true);
    }
  }
  // Constant arguments, before any launch of this module (the stream
  // orders the copies before the kernel).
  if (absl::Status st = buffers_.FillConstants(module->get(), gpu_.stream.get()); !st.ok()) {
    if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) {
      return end.LaunchError(StrCat("constant arguments: ", st.message()));
    }
    return end.Infra(st);
  }
  launch->function = f;
  launch->shared_bytes = dynamic_shared;
  return std::nullopt;
}

absl::Status Worker::Bind(const v1::WorkerCandidate& c, Launch* launch) {
  const std::vector<ArgumentBuffer>& buffers = buffers_.buffers();
  launch->pointers.resize(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) launch->pointers[i] = buffers[i].data;
  launch->scalars.assign(c.scalars().begin(), c.scalars().end());
  launch->params.clear();
  std::size_t next_scalar = 0;
  for (int index : setup_.argument_buffers()) {
    if (index >= 0) {
      launch->params.push_back(&launch->pointers[static_cast<std::size_t>(index)]);
    } else {
      if (next_scalar >= launch->scalars.size()) {
        return absl::InternalError("fewer scalar arguments than the kernel takes");
      }
      launch->params.push_back(launch->scalars[next_scalar++].data());
    }
  }
  return absl::OkStatus();
}

CUresult Worker::LaunchOnce(const v1::WorkerCandidate& c, const Launch& launch, CUstream s) const {
  return gpu_.api.cuLaunchKernel(launch.function, c.grid().x(), c.grid().y(), c.grid().z(),
                                 c.block().x(), c.block().y(), c.block().z(), launch.shared_bytes,
                                 s, const_cast<void**>(launch.params.data()), nullptr);
}

CUresult Worker::LaunchConcurrent(const v1::WorkerCandidate& c, const Launch& launch,
                                  CUstream s) const {
  const int streams = c.streams();
  if (CUresult rc = gpu_.api.cuEventRecord(gpu_.fork.get(), s); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = gpu_.Fork(gpu_.fork.get(), 0, streams); rc != CUDA_SUCCESS) return rc;
  for (int j = 0; j < c.instances(); ++j) {
    if (CUresult rc = LaunchOnce(c, launch, gpu_.side[static_cast<std::size_t>(j % streams)].get());
        rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return gpu_.Join(s, 0, streams);
}

std::optional<v1::WorkerMeasurement> Worker::FirstLaunch(const v1::WorkerCandidate& c,
                                                         const Launch& launch, CandidateEnding& end,
                                                         float* first_ms) {
  const cuda::Api& api = gpu_.api;
  CUstream s = gpu_.stream.get();
  if (auto st = buffers_.RestoreInputs(s); !st.ok()) return end.Infra(st);
  if (auto st = buffers_.PoisonOutputs(s); !st.ok()) return end.Infra(st);
  if (auto st = buffers_.ResetGuards(s); !st.ok()) return end.Infra(st);
  if (CUresult rc = api.cuEventRecord(gpu_.first_start.get(), s); rc != CUDA_SUCCESS) {
    return end.Failed(rc, "cuEventRecord", false);
  }
  if (CUresult rc = LaunchOnce(c, launch, s); rc != CUDA_SUCCESS) {
    return end.Failed(rc, "cuLaunchKernel", true);
  }
  if (CUresult rc = api.cuEventRecord(gpu_.first_end.get(), s); rc != CUDA_SUCCESS) {
    return end.Failed(rc, "cuEventRecord", false);
  }
  // The checks follow the launch on the stream: one synchronisation, which
  // also reports a fault of the kernel.
  const bool compare = c.verify() && !c.make_reference();
  if (auto st = verifier_.EnqueueChecks(s, compare); !st.ok()) return end.Infra(st);
  if (CUresult rc = api.cuStreamSynchronize(s); rc != CUDA_SUCCESS) {
    return end.Failed(rc, "running the kernel", false);
  }
  if (CUresult rc = api.cuEventElapsedTime(first_ms, gpu_.first_start.get(), gpu_.first_end.get());
      rc != CUDA_SUCCESS) {
    return end.Failed(rc, "cuEventElapsedTime", false);
  }
  if (const std::string guard = verifier_.GuardMessage(); !guard.empty()) {
    end.out.set_status(v1::WRONG_RESULT);
    end.out.set_message(guard);
    return end.Finish();
  }
  if (c.make_reference()) {
    if (CUresult rc = verifier_.KeepAsReference(s); rc != CUDA_SUCCESS) {
      return end.Failed(rc, "cuMemcpyDtoDAsync", false);
    }
    if (CUresult rc = api.cuStreamSynchronize(s); rc != CUDA_SUCCESS) {
      return end.Failed(rc, "cuStreamSynchronize", false);
    }
    end.out.set_status(v1::OK);
    end.out.add_samples_ms(*first_ms);
    end.out.mutable_conditions()->set_launches_per_sample(1);
    return end.Finish();
  }
  if (compare) {
    absl::StatusOr<std::string> diff = verifier_.CompareMessage(s);
    if (!diff.ok()) return end.Infra(diff.status());
    if (!diff->empty()) {
      end.out.set_status(v1::WRONG_RESULT);
      end.out.set_message(*diff);
      return end.Finish();
    }
  }
  return std::nullopt;
}

v1::WorkerMeasurement Worker::Sample(const v1::WorkerCandidate& c, Launch& launch, float first_ms,
                                     CandidateEnding& end) {
  const cuda::Api& api = gpu_.api;
  CUstream s = gpu_.stream.get();
  v1::Conditions& cond = *end.out.mutable_conditions();
  // Warm-up after an idle gap (the GPU clocks down when idle): only
  // samples count as activity, not failed candidates or the reference's
  // single launch.
  if (WorkerClock::now() - last_activity_ > kIdleGap) {
    absl::StatusOr<double> spun_ms = WarmUp();
    if (!spun_ms.ok()) return end.Infra(spun_ms.status());
    cond.set_warm_up_ms(*spun_ms);
  }
  const bool concurrent = c.instances() > 0;
  SamplingPolicy policy(SamplingSettingsOf(setup_.settings()), CandidateSamplingOf(c));
  policy.Begin(Millis(first_ms));
  const bool restore = buffers_.restores();
  double busy = first_ms;  // event-timed kernel work, the untimed launches included
  // Rotated inputs change with every launch: plain launches, no graph.
  const bool rotate = buffers_.rotations() > 1 && !concurrent;
  cond.set_input_copies(rotate ? buffers_.rotations() : 1);
  cuda::Graph graph;
  cuda::GraphExec graph_exec;
  // Several launches a sample: one CUDA graph of them, when asked.
  auto capture = [&] {
    if (policy.launches_per_sample() <= 1 || !setup_.settings().use_graphs() || rotate) return;
    if (api.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
      for (int k = 0; k < policy.launches_per_sample(); ++k) LaunchOnce(c, launch, s);
      CUgraph g = nullptr;
      if (api.cuStreamEndCapture(s, &g) == CUDA_SUCCESS && g != nullptr) {
        graph = cuda::Graph(&api, g);
        CUgraphExec ge = nullptr;
        if (api.cuGraphInstantiateWithFlags(&ge, g, 0) == CUDA_SUCCESS) {
          graph_exec = cuda::GraphExec(&api, ge);
        }
      }
    }
  };
  capture();

  // UNDER_LOAD: the load runs until the samples are taken.
  absl::StatusOr<RunningLoad> loaded = StartLoad(load_.get(), setup_.load(), canary_, cond);
  if (!loaded.ok()) return end.Infra(loaded.status());

  // Samples, enqueued a chunk at a time so the GPU never waits on us.
  cond.set_sm_clock_mhz_before(clocks_.clock_mhz());
  double chunk_ms[SamplingPolicy::kChunk];
  for (int n = policy.NextChunk(); n > 0; n = policy.NextChunk()) {
    const bool throttled_before = clocks_.throttled_now();
    const std::uint64_t polls_before = clocks_.throttle_polls();
    for (int i = 0; i < n; ++i) {
      if (restore) {
        if (auto st = buffers_.RestoreInputs(s); !st.ok()) return end.Infra(st);
      }
      if (flush_.get() != 0) {
        if (CUresult rc =
                api.cuMemsetD32Async(flush_.get(), ++flush_counter_, flush_.size_bytes() / 4, s);
            rc != CUDA_SUCCESS) {
          return end.Failed(rc, "cuMemsetD32Async(flush)", false);
        }
      }
      if (CUresult rc = api.cuEventRecord(gpu_.starts[static_cast<std::size_t>(i)].get(), s);
          rc != CUDA_SUCCESS) {
        return end.Failed(rc, "cuEventRecord", false);
      }
      if (concurrent) {
        if (CUresult rc = LaunchConcurrent(c, launch, s); rc != CUDA_SUCCESS) {
          return end.Failed(rc, "cuLaunchKernel", true);
        }
      } else if (graph_exec) {
        if (CUresult rc = api.cuGraphLaunch(graph_exec.get(), s); rc != CUDA_SUCCESS) {
          return end.Failed(rc, "cuGraphLaunch", true);
        }
      } else {
        for (int k = 0; k < policy.launches_per_sample(); ++k) {
          if (rotate) buffers_.Rotate(launch.pointers);
          if (CUresult rc = LaunchOnce(c, launch, s); rc != CUDA_SUCCESS) {
            return end.Failed(rc, "cuLaunchKernel", true);
          }
        }
      }
      if (CUresult rc = api.cuEventRecord(gpu_.ends[static_cast<std::size_t>(i)].get(), s);
          rc != CUDA_SUCCESS) {
        return end.Failed(rc, "cuEventRecord", false);
      }
    }
    if (CUresult rc = api.cuEventSynchronize(gpu_.ends[static_cast<std::size_t>(n - 1)].get());
        rc != CUDA_SUCCESS) {
      return end.Failed(rc, "running the kernel", false);
    }
    const bool throttled =
        throttled_before || clocks_.throttled_now() || clocks_.throttle_polls() != polls_before;
    for (int i = 0; i < n; ++i) {
      float ms = 0;
      if (CUresult rc = api.cuEventElapsedTime(&ms, gpu_.starts[static_cast<std::size_t>(i)].get(),
                                               gpu_.ends[static_cast<std::size_t>(i)].get());
          rc != CUDA_SUCCESS) {
        return end.Failed(rc, "cuEventElapsedTime", false);
      }
      busy += ms;
      chunk_ms[i] = ms;
    }
    const SamplingPolicy::Next next =
        policy.Add({chunk_ms, static_cast<std::size_t>(n)}, throttled, Millis(MsSince(end.start)));
    if (next == SamplingPolicy::Next::kDone) break;
    if (next == SamplingPolicy::Next::kRestart) capture();
  }
  last_activity_ = WorkerClock::now();
  cond.set_launches_per_sample(policy.launches_per_sample());
  cond.set_sm_clock_mhz_after(clocks_.clock_mhz());
  cond.set_throttled_samples_discarded(policy.discarded());
  cond.set_gpu_busy_ms(busy);
  if (policy.raced()) cond.set_raced(true);
  if (auto st = loaded->Finish(cond); !st.ok()) return end.Infra(st);
  if (policy.samples().empty()) {
    end.out.set_status(v1::RUNTIME_FAULT);
    end.out.set_message("every sample was taken while the GPU was throttled");
    return end.Finish();
  }
  for (double v : policy.samples()) end.out.add_samples_ms(v);
  if (setup_.settings().measure_energy()) {
    if (auto st = MeasureEnergyOf(c, launch, policy.samples(), cond); !st.ok()) {
      return end.Infra(st);
    }
  }
  end.out.set_status(v1::OK);
  return end.Finish();
}

absl::Status Worker::MeasureEnergyOf(const v1::WorkerCandidate& c, const Launch& launch,
                                     std::vector<double> samples, v1::Conditions& cond) {
  // Per launch (per instance when concurrent), the samples' median.
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  const double per_launch_ms = samples[samples.size() / 2];
  const bool concurrent = c.instances() > 0;
  const double launch_ms = per_launch_ms * (concurrent ? c.instances() : 1);
  // About 20 ms of work a chunk.
  const int n =
      static_cast<int>(std::clamp(std::ceil(20.0 / std::max(launch_ms, 1e-4)), 1.0, 100000.0));
  CUstream s = gpu_.stream.get();
  const std::function<CUresult()> enqueue = [&]() -> CUresult {
    for (int k = 0; k < n; ++k) {
      const CUresult rc = concurrent ? LaunchConcurrent(c, launch, s) : LaunchOnce(c, launch, s);
      if (rc != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
  };
  CUevent ring[2] = {gpu_.starts[0].get(), gpu_.starts[1].get()};
  KTUNE_ASSIGN_OR_RETURN(EnergyReading e, MeasureEnergy(gpu_.api, nvml_, s, ring, enqueue,
                                                        setup_.settings().energy_window_ms()));
  cond.set_power_w(e.power_w);
  cond.set_energy_j(e.power_w * per_launch_ms / 1e3);
  cond.set_energy_method(e.method);
  cond.set_energy_window_ms(e.window_ms);
  cond.set_energy_updates(e.updates);
  return absl::OkStatus();
}

v1::WorkerMeasurement Worker::Measure(const v1::WorkerCandidate& c) {
  v1::WorkerMeasurement out;
  out.set_id(c.id());
  CandidateEnding end{gpu_.api, out, WorkerClock::now()};
  cuda::Module module;
  Launch launch;
  if (std::optional<v1::WorkerMeasurement> ended = Load(c, &module, &launch, end)) {
    return *std::move(ended);
  }
  const auto verify_start = WorkerClock::now();
  if (setup_.has_pipeline()) {
    return pipeline_.Measure(c, launch.function, launch.shared_bytes,
                             PipelineRunner::Tools{setup_.settings(), clocks_,
                                                   [&](v1::Conditions& cond) {
                                                     return StartLoad(load_.get(), setup_.load(),
                                                                      canary_, cond);
                                                   }},
                             end);
  }
  if (auto st = Bind(c, &launch); !st.ok()) return end.Infra(st);
  if (c.instances() > 0) {
    if (c.streams() < 1 || c.streams() > kMaxStreams || c.instances() > 4096) {
      return end.LaunchError(StrCat("concurrent: ", c.instances(), " instances over ", c.streams(),
                                    " streams (1 to 4096 instances, 1 to ", kMaxStreams,
                                    " streams)"));
    }
    if (auto st = gpu_.EnsureStreams(c.streams()); !st.ok()) return end.Infra(st);
  }
  float first_ms = 0;
  if (std::optional<v1::WorkerMeasurement> ended = FirstLaunch(c, launch, end, &first_ms)) {
    return *std::move(ended);
  }
  out.set_verify_ms(MsSince(verify_start));
  return Sample(c, launch, first_ms, end);
}

}  // namespace ktune
