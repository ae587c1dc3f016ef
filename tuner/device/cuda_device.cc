#include "tuner/device/cuda_device.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/sha256.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/cuda/fill.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kDefaultAtol = 1e-5;
constexpr double kDefaultRtol = 1e-4;
constexpr int kFinalRounds = 3;

double Seconds(Millis m) { return m.count() / 1e3; }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Millis FromDuration(const google::protobuf::Duration& d) {
  return Millis(static_cast<double>(d.seconds()) * 1e3 + static_cast<double>(d.nanos()) * 1e-6);
}

// The value of a parameter as C++ source text (a macro body or a template
// argument).
std::string SourceText(const Value& v, bool template_argument) {
  if (const bool* b = std::get_if<bool>(&v)) {
    return template_argument ? (*b ? "true" : "false") : (*b ? "1" : "0");
  }
  return FormatValue(v);
}

std::uint64_t SeedFor(const std::string& name) {
  const std::string h = Sha256Hex(name);
  return std::stoull(h.substr(0, 15), nullptr, 16);
}

std::string ScalarBytes(v1::ElementType type, double v, std::int64_t i, bool is_int) {
  std::string out;
  auto put = [&](auto x) { out.assign(reinterpret_cast<const char*>(&x), sizeof x); };
  const std::int64_t iv = is_int ? i : static_cast<std::int64_t>(v);
  const double dv = is_int ? static_cast<double>(i) : v;
  switch (type) {
    case v1::ELEMENT_F16: put(FloatToHalf(static_cast<float>(dv))); break;
    case v1::ELEMENT_BF16: put(FloatToBfloat16(static_cast<float>(dv))); break;
    case v1::ELEMENT_F32: put(static_cast<float>(dv)); break;
    case v1::ELEMENT_F64: put(dv); break;
    case v1::ELEMENT_I8: put(static_cast<std::int8_t>(iv)); break;
    case v1::ELEMENT_I16: put(static_cast<std::int16_t>(iv)); break;
    case v1::ELEMENT_I32: put(static_cast<std::int32_t>(iv)); break;
    case v1::ELEMENT_I64: put(iv); break;
    case v1::ELEMENT_U8: put(static_cast<std::uint8_t>(iv)); break;
    case v1::ELEMENT_U16: put(static_cast<std::uint16_t>(iv)); break;
    case v1::ELEMENT_U32: put(static_cast<std::uint32_t>(iv)); break;
    case v1::ELEMENT_U64: put(static_cast<std::uint64_t>(iv)); break;
    default: break;
  }
  return out;
}

// The initial contents of buffer argument `a` as the worker fills it.
absl::Status InitBuffer(const v1::Argument& a, const v1::Buffer& b, bool input,
                        const std::string& base_dir, const std::string& where,
                        v1::WorkerBuffer* w) {
  switch (b.init_case()) {
    case v1::Buffer::kUniform:
      *w->mutable_uniform() = v1::RandomFill();
      w->mutable_uniform()->set_low(b.uniform().low());
      w->mutable_uniform()->set_high(b.uniform().high());
      w->mutable_uniform()->set_seed(b.uniform().seed() != 0 ? b.uniform().seed()
                                                             : SeedFor(a.name()));
      break;
    case v1::Buffer::kNormal:
      w->mutable_normal()->set_low(b.normal().low());
      w->mutable_normal()->set_high(b.normal().high());
      w->mutable_normal()->set_seed(b.normal().seed() != 0 ? b.normal().seed() : SeedFor(a.name()));
      break;
    case v1::Buffer::kConstant: w->set_constant(b.constant()); break;
    case v1::Buffer::kIota:
      w->mutable_iota()->set_start(b.iota().start());
      w->mutable_iota()->set_step(b.iota().step() == 0 ? 1 : b.iota().step());
      break;
    case v1::Buffer::kFile: {
      const std::string path =
          b.file().empty() || b.file()[0] == '/' ? b.file() : StrCat(base_dir, "/", b.file());
      absl::StatusOr<std::string> data = ReadFileContents(path);
      if (!data.ok())
        return absl::InvalidArgumentError(StrCat(where, ".buffer.file: ", data.status().message()));
      w->set_data(*std::move(data));
      break;
    }
    case v1::Buffer::kZeros: w->set_zeros(true); break;
    case v1::Buffer::INIT_NOT_SET:
      // Never time on all-zero data: inputs default to seeded noise.
      if (input) {
        w->mutable_uniform()->set_low(-1);
        w->mutable_uniform()->set_high(1);
        w->mutable_uniform()->set_seed(SeedFor(a.name()));
      }
      break;
  }
  return absl::OkStatus();
}

}  // namespace

v1::CompileRequest BuildCompileRequest(const v1::JobSpec& spec, const std::string& source,
                                       const std::string& base_dir, const Space& space,
                                       const Config& config, const std::string& arch) {
  const v1::Kernel& k = spec.kernel();
  v1::CompileRequest req;
  const std::string name = k.source_case() == v1::Kernel::kFile ? k.file() : "kernel.cu";
  req.set_source_name(name);
  req.set_architecture(arch);
  req.set_is_name_expression(true);
  bool has_std = false;
  for (const std::string& o : k.compiler_options()) {
    req.add_options(o);
    has_std = has_std || o.rfind("-std", 0) == 0 || o.rfind("--std", 0) == 0;
  }
  if (!has_std) req.add_options("--std=c++17");
  for (const std::string& inc : k.include_paths()) {
    req.add_options(StrCat("-I", inc.empty() || inc[0] == '/' ? inc : StrCat(base_dir, "/", inc)));
  }
  // Macros go at the top of the source rather than in -D options: NVRTC's
  // built-in headers come before the source, and a parameter named like an
  // identifier in them (`mode`, say) would break them. #line keeps the
  // compiler's messages pointing at the user's lines.
  std::string prelude;
  for (const auto& [macro, value] : k.defines())
    prelude += StrCat("#define ", macro, " ", value, "\n");
  const bool templated = k.parameter_passing() == v1::Kernel::TEMPLATE;
  std::string expression = templated ? k.name_expression() : k.name();
  for (std::size_t i = 0; i < space.num_params(); ++i) {
    const Parameter& p = space.param(i);
    const Value& v = space.ValueOf(config, i);
    if (templated) {
      const std::string token = StrCat("{", p.name, "}");
      for (std::size_t pos = expression.find(token); pos != std::string::npos;
           pos = expression.find(token, pos)) {
        const std::string text = SourceText(v, true);
        expression.replace(pos, token.size(), text);
        pos += text.size();
      }
    } else {
      prelude += StrCat("#define ", p.name, " ", SourceText(v, false), "\n");
    }
  }
  req.set_source(prelude.empty() ? source : StrCat(prelude, "#line 1 \"", name, "\"\n", source));
  req.set_kernel_expression(expression);
  return req;
}

absl::StatusOr<std::vector<v1::WorkerDeviceInfo>> ListCudaDevices(const WorkerProgram& program) {
  absl::StatusOr<Subprocess> worker = Subprocess::Start(program.Argv("measure"));
  if (!worker.ok()) return worker.status();
  v1::WorkerRequest req;
  req.set_list_devices(true);
  v1::WorkerResponse resp;
  absl::Status s = worker->channel().Send(req);
  if (s.ok()) s = worker->channel().Receive(&resp, Clock::now() + std::chrono::seconds(120));
  if (!s.ok()) {
    return absl::InternalError(
        StrCat("asking the measurement worker for the GPUs failed: ", s.message()));
  }
  if (!resp.devices().error().empty()) {
    return absl::FailedPreconditionError(resp.devices().error());
  }
  return std::vector<v1::WorkerDeviceInfo>(resp.devices().devices().begin(),
                                           resp.devices().devices().end());
}

absl::StatusOr<v1::WorkerDeviceInfo> SelectCudaDevice(
    const std::vector<v1::WorkerDeviceInfo>& devices, const std::string& selector) {
  if (devices.empty()) return absl::FailedPreconditionError("no CUDA GPU is visible");
  std::string s = selector;
  if (s.rfind("cuda:", 0) == 0) s = s.substr(5);
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const int ordinal = std::stoi(s.substr(0, 6));
    for (const v1::WorkerDeviceInfo& d : devices) {
      if (d.ordinal() == ordinal) return d;
    }
    return absl::InvalidArgumentError(
        StrCat("there is no GPU ", ordinal, " (this machine has ", devices.size(), ")"));
  }
  std::string want = Lower(s);
  if (want.rfind("gpu-", 0) != 0) want = "gpu-" + want;
  std::vector<v1::WorkerDeviceInfo> found;
  for (const v1::WorkerDeviceInfo& d : devices) {
    if (Lower(d.uuid()).rfind(want, 0) == 0) found.push_back(d);
  }
  if (found.size() == 1) return found[0];
  return absl::InvalidArgumentError(found.empty()
                                        ? StrCat("no GPU has the UUID ", selector)
                                        : StrCat("UUID prefix ", selector, " is ambiguous"));
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Open(const v1::WorkerDeviceInfo& gpu,
                                                             const CudaDeviceOptions& options) {
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->gpu_ = gpu;
  d->options_ = options;
  d->arch_ = StrCat("sm_", gpu.major(), gpu.minor());
  d->info_.id = StrCat("cuda:", gpu.ordinal());
  d->info_.name = gpu.name();
  d->info_.architecture = d->arch_;
  d->info_.uuid = gpu.uuid();
  d->gpu_lock_ = std::make_unique<GpuLock>(gpu.uuid());
  d->info_.memory_bytes = gpu.memory_bytes();
  d->info_.multiprocessors = gpu.multiprocessors();
  d->info_.driver = StrCat(gpu.driver_version() / 1000, ".", (gpu.driver_version() % 1000) / 10);
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (!nvrtc.ok()) return nvrtc.status();
  d->nvrtc_version_ = (*nvrtc)->version_text();
  const int arch = gpu.major() * 10 + gpu.minor();
  const std::vector<int>& archs = (*nvrtc)->supported_archs();
  if (std::find(archs.begin(), archs.end(), arch) == archs.end()) {
    return absl::FailedPreconditionError(StrCat(
        "NVRTC ", d->nvrtc_version_, " cannot compile for this GPU's architecture ", d->arch_));
  }
  CompilePoolOptions po;
  po.worker_argv = options.program.Argv("compile");
  po.workers = options.compile_workers > 0
                   ? options.compile_workers
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  po.timeout = options.compile_timeout;
  po.cache_dir = options.cache_dir;
  po.nvrtc_version = d->nvrtc_version_;
  po.start_warm = true;  // NVRTC loads while the GPU opens
  po.nice = options.compile_nice;
  if (options.shared_pool != nullptr) {
    d->pool_ = options.shared_pool;
  } else {
    KTUNE_ASSIGN_OR_RETURN(d->pool_, CompilePool::Start(po));
  }
  // The worker opens the GPU now (the slow part: the context), ahead of
  // any job.
  KTUNE_RETURN_IF_ERROR(d->StartWorker());
  return d;
}

CudaDevice::~CudaDevice() = default;

absl::Status CudaDevice::Bind(const JobBinding& job) {
  auto invalid = [](const std::string& m) { return absl::InvalidArgumentError(m); };
  if (job.spec == nullptr) {
    return invalid(
        "a GPU runs kernels: give a job file with the kernel's source (a recorded space is "
        "replayed with --device sim:FILE)");
  }
  const v1::JobSpec& spec = *job.spec;
  if (job.source.empty()) {
    return invalid("kernel.code or kernel.file: the kernel's source is needed on a GPU");
  }
  if (spec.launch().grid_size() == 0) {
    return invalid(
        "launch.grid: required on a GPU (the grid in blocks, e.g. \"ceil_div(N, "
        "block_size_x)\")");
  }
  space_ = job.space;
  spec_ = job.spec;
  source_ = job.source;
  base_dir_ = job.base_dir;
  pending_.clear();
  best_ms_ = 0;
  reference_.reset();

  // Expressions over the parameters (slots) and the problem (constants).
  SymbolTable symbols;
  const std::size_t n = space_->num_params();
  param_scalars_.assign(n, {});
  for (std::size_t i = 0; i < n; ++i) {
    const Parameter& p = space_->param(i);
    KTUNE_RETURN_IF_ERROR(symbols.AddSlot(p.name, p.type, static_cast<int>(i)));
    for (const Value& v : p.values) param_scalars_[i].push_back(ToScalar(v, symbols));
  }
  for (const auto& [name, v] : job.problem) {
    KTUNE_RETURN_IF_ERROR(symbols.AddConstant(name, ValueType::kInt, IntScalar(v)));
  }
  auto compile = [&](const std::string& field, const std::string& text,
                     ValueType type) -> absl::StatusOr<Expr> {
    absl::StatusOr<Expr> e = Expr::CompileAs(text, symbols, type);
    if (!e.ok()) return invalid(StrCat(field, ": ", e.status().message()));
    return e;
  };
  block_.clear();
  grid_.clear();
  static constexpr const char* kBlockNames[] = {"block_size_x", "block_size_y", "block_size_z"};
  for (int d = 0; d < 3; ++d) {
    std::string text = "1";
    if (d < spec.launch().block_size()) {
      text = spec.launch().block(d);
    } else if (spec.launch().block_size() == 0 && space_->ParamIndex(kBlockNames[d])) {
      text = kBlockNames[d];
    }
    KTUNE_ASSIGN_OR_RETURN(Expr e, compile(StrCat("launch.block[", d, "]"), text, ValueType::kInt));
    block_.push_back(std::move(e));
  }
  for (int d = 0; d < 3; ++d) {
    const std::string text = d < spec.launch().grid_size() ? spec.launch().grid(d) : "1";
    KTUNE_ASSIGN_OR_RETURN(Expr e, compile(StrCat("launch.grid[", d, "]"), text, ValueType::kInt));
    grid_.push_back(std::move(e));
  }
  shared_bytes_.reset();
  if (!spec.launch().shared_memory_bytes().empty()) {
    KTUNE_ASSIGN_OR_RETURN(Expr e, compile("launch.shared_memory_bytes",
                                           spec.launch().shared_memory_bytes(), ValueType::kInt));
    shared_bytes_ = std::move(e);
  }

  // Arguments.
  setup_.Clear();
  setup_.set_device_ordinal(gpu_.ordinal());
  scalars_.clear();
  std::map<std::string, int> buffer_index;
  std::int64_t total_bytes = 0;
  for (int i = 0; i < spec.arguments_size(); ++i) {
    const v1::Argument& a = spec.arguments(i);
    const std::string where = StrCat("arguments[", i, "] (", a.name(), ")");
    const auto type = static_cast<v1::ElementType>(a.type());
    if (a.kind_case() == v1::Argument::kScalar) {
      KTUNE_ASSIGN_OR_RETURN(Expr e,
                             compile(StrCat(where, ".scalar"), a.scalar(), ValueType::kFloat));
      scalars_.push_back(ScalarArg{std::move(e), type});
      setup_.add_argument_buffers(-1);
      continue;
    }
    const v1::Buffer& b = a.buffer();
    KTUNE_ASSIGN_OR_RETURN(Expr size,
                           compile(StrCat(where, ".buffer.size"), b.size(), ValueType::kInt));
    if (!size.is_constant()) {
      return invalid(StrCat(where,
                            ".buffer.size: may depend on the problem only (buffers are "
                            "allocated once per job)"));
    }
    std::int64_t elements = 0;
    size.EvaluateInt(nullptr, &elements);
    if (elements <= 0) return invalid(StrCat(where, ".buffer.size: ", elements, " elements"));
    v1::WorkerBuffer* w = setup_.add_buffers();
    w->set_name(a.name());
    w->set_type(type);
    w->set_elements(elements);
    const bool output = b.direction() == v1::Buffer::OUTPUT || b.direction() == v1::Buffer::INOUT;
    const bool input = b.direction() != v1::Buffer::OUTPUT;
    w->set_input(input);
    w->set_output(output);
    total_bytes += elements * static_cast<std::int64_t>(ElementBytes(type));
    KTUNE_RETURN_IF_ERROR(InitBuffer(a, b, input, base_dir_, where, w));
    buffer_index[a.name()] = setup_.buffers_size() - 1;
    setup_.add_argument_buffers(setup_.buffers_size() - 1);
  }
  if (total_bytes > gpu_.memory_bytes()) {
    return invalid(StrCat("arguments: ", total_bytes >> 20,
                          " MiB of buffers do not fit in the GPU's ", gpu_.memory_bytes() >> 20,
                          " MiB"));
  }

  // Verification.
  const v1::Verification& ver = spec.verification();
  if (ver.outputs_size() > 0) {
    for (const std::string& name : ver.outputs()) {
      auto it = buffer_index.find(name);
      if (it == buffer_index.end() || !setup_.buffers(it->second).output()) {
        return invalid(StrCat("verification.outputs: '", name, "' is not an output buffer"));
      }
      setup_.add_verified(it->second);
    }
  } else {
    for (int i = 0; i < setup_.buffers_size(); ++i) {
      if (setup_.buffers(i).output()) setup_.add_verified(i);
    }
  }
  const bool default_tolerance = ver.atol() == 0 && ver.rtol() == 0;

  // The benchmark protocol's settings (defaults documented in the README).
  const v1::MeasurementSettings& ms = spec.measurement();
  v1::WorkerSettings* ws = setup_.mutable_settings();
  ws->set_min_samples(ms.min_samples() > 0 ? ms.min_samples() : 10);
  ws->set_max_samples(ms.max_samples() > 0 ? ms.max_samples() : 1000);
  ws->set_target_relative_noise(ms.target_relative_noise() > 0 ? ms.target_relative_noise() : 0.01);
  max_candidate_ms_ =
      ms.has_max_time_per_candidate() ? FromDuration(ms.max_time_per_candidate()).count() : 1000.0;
  ws->set_max_candidate_ms(max_candidate_ms_);
  ws->set_warmup_ms(ms.has_warmup() ? FromDuration(ms.warmup()).count() : 50.0);
  ws->set_flush_l2(ms.flush_l2());
  ws->set_rotate_inputs(ms.rotate_inputs());
  ws->set_use_graphs(ms.use_graphs());
  ws->set_racing_factor(ms.racing_factor() > 0 ? ms.racing_factor() : 1.05);
  ws->set_racing_min_samples(3);
  ws->set_short_kernel_ms(0.02);
  ws->set_atol(default_tolerance ? kDefaultAtol : ver.atol());
  ws->set_rtol(default_tolerance ? kDefaultRtol : ver.rtol());
  kernel_timeout_ = ms.has_kernel_timeout() ? FromDuration(ms.kernel_timeout()) : Millis(0);

  // The load profile.
  const v1::LoadProfile& load = ms.load();
  load_kind_ =
      load.kind() == v1::LoadProfile::KIND_UNSPECIFIED ? v1::LoadProfile::ISOLATED : load.kind();
  v1::WorkerLoad* wl = setup_.mutable_load();
  wl->set_kind(load_kind_);
  instances_.reset();
  streams_.reset();
  if (load_kind_ == v1::LoadProfile::UNDER_LOAD) {
    wl->set_bandwidth_fraction(load.bandwidth_fraction());
    wl->set_compute_sms(std::min(load.compute_sms(), gpu_.multiprocessors()));
    wl->set_h2d_fraction(load.h2d_fraction());
    wl->set_d2h_fraction(load.d2h_fraction());
    for (int i = 0; i < load.companions_size(); ++i) {
      KTUNE_RETURN_IF_ERROR(AddCompanion(load.companions(i), i, symbols, wl->add_companions()));
    }
  } else if (load_kind_ == v1::LoadProfile::CONCURRENT) {
    auto count = [&](const std::string& field, const std::string& text, int fixed) {
      return compile(StrCat("measurement.load.", field),
                     !text.empty() ? text : std::to_string(fixed > 0 ? fixed : 4), ValueType::kInt);
    };
    KTUNE_ASSIGN_OR_RETURN(
        Expr k, count("instances_expression", load.instances_expression(), load.instances()));
    KTUNE_ASSIGN_OR_RETURN(Expr st,
                           count("streams_expression", load.streams_expression(), load.streams()));
    instances_ = std::move(k);
    streams_ = std::move(st);
  }

  // A pipeline job: the worker owns the host array and the chunk buffers.
  pipeline_ = spec.has_pipeline();
  pipe_chunk_.reset();
  pipe_streams_.reset();
  pipe_pinned_.reset();
  pipe_bytes_ = 0;
  if (pipeline_) {
    const v1::Pipeline& p = spec.pipeline();
    const auto type = p.type() == v1::Argument::TYPE_UNSPECIFIED
                          ? v1::ELEMENT_F32
                          : static_cast<v1::ElementType>(p.type());
    KTUNE_ASSIGN_OR_RETURN(Expr elements,
                           compile("pipeline.elements", p.elements(), ValueType::kInt));
    if (!elements.is_constant()) {
      return invalid("pipeline.elements: may depend on the problem only");
    }
    std::int64_t count = 0;
    elements.EvaluateInt(nullptr, &count);
    if (count <= 0) return invalid(StrCat("pipeline.elements: ", count, " elements"));
    pipe_bytes_ = count * static_cast<std::int64_t>(ElementBytes(type));
    if (pipe_bytes_ > gpu_.memory_bytes()) {
      return invalid(StrCat("pipeline.elements: ", pipe_bytes_ >> 20,
                            " MiB is more than the GPU's ", gpu_.memory_bytes() >> 20, " MiB"));
    }
    KTUNE_ASSIGN_OR_RETURN(Expr chunk,
                           compile("pipeline.chunk_elements", p.chunk_elements(), ValueType::kInt));
    KTUNE_ASSIGN_OR_RETURN(Expr streams, compile("pipeline.streams", p.streams(), ValueType::kInt));
    KTUNE_ASSIGN_OR_RETURN(
        Expr pinned,
        compile("pipeline.pinned", p.pinned().empty() ? "1" : p.pinned(), ValueType::kInt));
    pipe_chunk_ = std::move(chunk);
    pipe_streams_ = std::move(streams);
    pipe_pinned_ = std::move(pinned);
    v1::WorkerPipeline* wp = setup_.mutable_pipeline();
    wp->set_type(type);
    wp->set_elements(count);
    const bool given = p.has_input() && (p.input().low() != 0 || p.input().high() != 0);
    wp->mutable_input()->set_low(given ? p.input().low() : -1);
    wp->mutable_input()->set_high(given ? p.input().high() : 1);
    wp->mutable_input()->set_seed(p.input().seed() != 0 ? p.input().seed()
                                                        : SeedFor("pipeline input"));
  }

  // Expected data given as files.
  if (ver.reference_case() == v1::Verification::kExpectedData) {
    for (const auto& [name, file] : ver.expected_data().files()) {
      auto it = buffer_index.find(name);
      if (it == buffer_index.end()) {
        return invalid(StrCat("verification.expected_data.files: no buffer named '", name, "'"));
      }
      const std::string path = file.empty() || file[0] == '/' ? file : StrCat(base_dir_, "/", file);
      absl::StatusOr<std::string> data = ReadFileContents(path);
      if (!data.ok()) {
        return invalid(
            StrCat("verification.expected_data.files[", name, "]: ", data.status().message()));
      }
      setup_.mutable_buffers(it->second)->set_expected(*std::move(data));
    }
  }

  // The reference: compiled now, made by the worker once it is set up (and
  // again after any restart).
  reference_.reset();
  reference_compile_.reset();
  if (ver.reference_case() == v1::Verification::kReferenceConfig ||
      ver.reference_case() == v1::Verification::kReferenceKernel) {
    v1::WorkerCandidate ref;
    ref.set_make_reference(true);
    if (ver.reference_case() == v1::Verification::kReferenceConfig) {
      absl::StatusOr<Config> c = space_->ParseKey(ver.reference_config());
      if (!c.ok()) return invalid(StrCat("verification.reference_config: ", c.status().message()));
      std::string why;
      KTUNE_RETURN_IF_ERROR(LaunchFor(*c, &ref, &why));
      if (!why.empty()) return invalid(StrCat("verification.reference_config: ", why));
      reference_compile_ =
          pool_->Submit(BuildCompileRequest(*spec_, source_, base_dir_, *space_, *c, arch_));
    } else {
      const v1::ReferenceKernel& rk = ver.reference_kernel();
      v1::CompileRequest req;
      if (rk.kernel().source_case() == v1::Kernel::kFile) {
        const std::string path = rk.kernel().file()[0] == '/'
                                     ? rk.kernel().file()
                                     : StrCat(base_dir_, "/", rk.kernel().file());
        absl::StatusOr<std::string> src = ReadFileContents(path);
        if (!src.ok()) {
          return invalid(
              StrCat("verification.reference_kernel.kernel.file: ", src.status().message()));
        }
        req.set_source(*std::move(src));
      } else {
        req.set_source(rk.kernel().code());
      }
      if (req.source().empty() || rk.kernel().name().empty()) {
        return invalid("verification.reference_kernel: needs a kernel name and source");
      }
      req.set_source_name("reference.cu");
      req.set_kernel_expression(rk.kernel().name());
      req.set_is_name_expression(true);
      req.set_architecture(arch_);
      for (const std::string& o : rk.kernel().compiler_options()) req.add_options(o);
      // Its launch depends on the problem only.
      auto dims = [&](const google::protobuf::RepeatedPtrField<std::string>& exprs,
                      const char* field, v1::Launch3* out) -> absl::Status {
        std::int64_t v[3] = {1, 1, 1};
        for (int d = 0; d < exprs.size() && d < 3; ++d) {
          KTUNE_ASSIGN_OR_RETURN(
              Expr e, compile(StrCat("verification.reference_kernel.launch.", field, "[", d, "]"),
                              exprs.Get(d), ValueType::kInt));
          if (!e.is_constant()) {
            return invalid(StrCat("verification.reference_kernel.launch.", field,
                                  ": may depend on the problem only"));
          }
          e.EvaluateInt(nullptr, &v[d]);
        }
        out->set_x(static_cast<std::uint32_t>(v[0]));
        out->set_y(static_cast<std::uint32_t>(v[1]));
        out->set_z(static_cast<std::uint32_t>(v[2]));
        return absl::OkStatus();
      };
      KTUNE_RETURN_IF_ERROR(dims(rk.launch().grid(), "grid", ref.mutable_grid()));
      KTUNE_RETURN_IF_ERROR(dims(rk.launch().block(), "block", ref.mutable_block()));
      // Scalars as for any candidate (at the first configuration's values).
      Config first;
      first.index.assign(n, 0);
      v1::WorkerCandidate tmp;
      std::string why;
      KTUNE_RETURN_IF_ERROR(LaunchFor(first, &tmp, &why));
      *ref.mutable_scalars() = tmp.scalars();
      reference_compile_ = pool_->Submit(req);
    }
    reference_template_ = ref;
  } else if (ver.reference_case() != v1::Verification::kExpectedData) {
    setup_.clear_verified();  // nothing to compare with
  }
  if (pipeline_ && ver.reference_case() != v1::Verification::REFERENCE_NOT_SET &&
      ver.reference_case() != v1::Verification::kReferenceConfig) {
    return invalid(
        "verification: a pipeline job is verified against a reference_config (the kernel's "
        "arguments are the pipeline's own)");
  }

  // The worker takes the job's arguments now, while the session asks for
  // the first candidates and they compile.
  bound_ = true;
  worker_ready_ = false;
  worker_starts_ = 0;
  if (worker_ && !worker_->Poll().has_value()) {
    worker_starts_ = 1;  // this worker serves the job; a new one is a restart
    return SendSetup();
  }
  if (worker_) worker_->Kill();
  worker_.reset();
  return StartWorker();
}

absl::Status CudaDevice::AddCompanion(const v1::CompanionKernel& ck, int index,
                                      SymbolTable& symbols, v1::WorkerCompanion* out) {
  const std::string where = StrCat("measurement.load.companions[", index, "]");
  auto invalid = [&](const std::string& m) { return absl::InvalidArgumentError(StrCat(where, m)); };
  // Expressions of the problem only: a companion is the same for every
  // candidate.
  auto constant = [&](const std::string& field, const std::string& text, ValueType type, double* dv,
                      std::int64_t* iv) -> absl::Status {
    absl::StatusOr<Expr> e = Expr::CompileAs(text, symbols, type);
    if (!e.ok()) return invalid(StrCat(".", field, ": ", e.status().message()));
    if (!e->is_constant()) return invalid(StrCat(".", field, ": may depend on the problem only"));
    EvalError err;
    const bool ok = type == ValueType::kFloat ? e->EvaluateDouble(nullptr, dv, &err)
                                              : e->EvaluateInt(nullptr, iv, &err);
    if (!ok) return invalid(StrCat(".", field, ": ", e->Describe(err)));
    return absl::OkStatus();
  };
  const v1::Kernel& k = ck.kernel();
  if (k.name().empty()) return invalid(".kernel.name: required");
  v1::CompileRequest req;
  if (k.source_case() == v1::Kernel::kFile) {
    const std::string path =
        k.file().empty() || k.file()[0] == '/' ? k.file() : StrCat(base_dir_, "/", k.file());
    absl::StatusOr<std::string> src = ReadFileContents(path);
    if (!src.ok()) return invalid(StrCat(".kernel.file: ", src.status().message()));
    req.set_source(*std::move(src));
  } else {
    req.set_source(k.code());
  }
  if (req.source().empty()) return invalid(".kernel: needs its source (code or file)");
  req.set_source_name(StrCat("companion", index, ".cu"));
  req.set_kernel_expression(k.name());
  req.set_is_name_expression(true);
  req.set_architecture(arch_);
  bool has_std = false;
  for (const std::string& o : k.compiler_options()) {
    req.add_options(o);
    has_std = has_std || o.rfind("-std", 0) == 0 || o.rfind("--std", 0) == 0;
  }
  if (!has_std) req.add_options("--std=c++17");
  for (const auto& [macro, value] : k.defines()) req.add_options(StrCat("-D", macro, "=", value));
  const v1::CompileResult compiled = pool_->Submit(req).get();
  if (!compiled.error().empty()) return absl::InternalError(compiled.error());
  if (!compiled.ok()) return invalid(StrCat(".kernel: does not compile:\n", compiled.log()));
  out->set_name(k.name());
  out->set_cubin(compiled.cubin());
  out->set_function(compiled.lowered_name());
  const double intensity = ck.intensity() == 0 ? 1.0 : ck.intensity();
  if (!(intensity > 0 && intensity <= 1)) {
    return invalid(StrCat(".intensity: ", ck.intensity(), " is not in (0, 1]"));
  }
  out->set_intensity(intensity);
  std::int64_t dims[2][3] = {{1, 1, 1}, {1, 1, 1}};
  for (int g = 0; g < 2; ++g) {
    const auto& exprs = g == 0 ? ck.launch().grid() : ck.launch().block();
    if (g == 0 && exprs.empty()) return invalid(".launch.grid: required");
    for (int d = 0; d < exprs.size() && d < 3; ++d) {
      double unused = 0;
      KTUNE_RETURN_IF_ERROR(constant(StrCat("launch.", g == 0 ? "grid" : "block", "[", d, "]"),
                                     exprs.Get(d), ValueType::kInt, &unused, &dims[g][d]));
      if (dims[g][d] < 1 || dims[g][d] > (g == 0 ? 2147483647 : 1024)) {
        return invalid(StrCat(".launch.", g == 0 ? "grid" : "block", "[", d, "]: ", dims[g][d]));
      }
    }
  }
  out->mutable_grid()->set_x(static_cast<std::uint32_t>(dims[0][0]));
  out->mutable_grid()->set_y(static_cast<std::uint32_t>(dims[0][1]));
  out->mutable_grid()->set_z(static_cast<std::uint32_t>(dims[0][2]));
  out->mutable_block()->set_x(static_cast<std::uint32_t>(dims[1][0]));
  out->mutable_block()->set_y(static_cast<std::uint32_t>(dims[1][1]));
  out->mutable_block()->set_z(static_cast<std::uint32_t>(dims[1][2]));
  if (!ck.launch().shared_memory_bytes().empty()) {
    double unused = 0;
    std::int64_t bytes = 0;
    KTUNE_RETURN_IF_ERROR(constant("launch.shared_memory_bytes", ck.launch().shared_memory_bytes(),
                                   ValueType::kInt, &unused, &bytes));
    if (bytes < 0 || bytes > std::int64_t{48} * 1024) {
      return invalid(StrCat(".launch.shared_memory_bytes: ", bytes, " (0 to 49152)"));
    }
    out->set_shared_memory_bytes(static_cast<std::uint32_t>(bytes));
  }
  for (int i = 0; i < ck.arguments_size(); ++i) {
    const v1::Argument& a = ck.arguments(i);
    const std::string aw = StrCat(".arguments[", i, "] (", a.name(), ")");
    const auto type = static_cast<v1::ElementType>(a.type());
    if (a.type() == v1::Argument::TYPE_UNSPECIFIED) return invalid(StrCat(aw, ".type: required"));
    if (a.kind_case() == v1::Argument::kScalar) {
      double dv = 0;
      std::int64_t iv = 0;
      KTUNE_RETURN_IF_ERROR(
          constant(StrCat(aw.substr(1), ".scalar"), a.scalar(), ValueType::kFloat, &dv, &iv));
      out->add_scalars(ScalarBytes(type, dv, 0, false));
      out->add_argument_buffers(-1);
      continue;
    }
    double unused = 0;
    std::int64_t elements = 0;
    KTUNE_RETURN_IF_ERROR(constant(StrCat(aw.substr(1), ".buffer.size"), a.buffer().size(),
                                   ValueType::kInt, &unused, &elements));
    if (elements <= 0) return invalid(StrCat(aw, ".buffer.size: ", elements, " elements"));
    v1::WorkerBuffer* w = out->add_buffers();
    w->set_name(a.name());
    w->set_type(type);
    w->set_elements(elements);
    KTUNE_RETURN_IF_ERROR(InitBuffer(a, a.buffer(), a.buffer().direction() != v1::Buffer::OUTPUT,
                                     base_dir_, StrCat(where, aw), w));
    out->add_argument_buffers(out->buffers_size() - 1);
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::StartWorker() {
  absl::StatusOr<Subprocess> started = Subprocess::Start(options_.program.Argv("measure"));
  if (!started.ok()) return started.status();
  worker_.emplace(*std::move(started));
  worker_ready_ = false;
  outstanding_ = 0;
  if (bound_ && ++worker_starts_ > 1) ++stats_.worker_restarts;
  v1::WorkerRequest req;
  req.set_init_device(gpu_.ordinal());
  if (absl::Status s = worker_->channel().Send(req); !s.ok()) {
    const std::string how = worker_->Kill();
    worker_.reset();
    return absl::InternalError(
        StrCat("the measurement worker did not start (", how, "): ", s.message()));
  }
  ++outstanding_;
  return bound_ ? SendSetup() : absl::OkStatus();
}

absl::Status CudaDevice::SendSetup() {
  v1::WorkerRequest req;
  *req.mutable_setup() = setup_;
  if (absl::Status s = worker_->channel().Send(req); !s.ok()) {
    const std::string how = worker_->Kill();
    worker_.reset();
    return absl::InternalError(StrCat("the measurement worker died (", how, "): ", s.message()));
  }
  ++outstanding_;
  return absl::OkStatus();
}

absl::Status CudaDevice::EnsureWorker() {
  // States: no worker; a worker with answers to come (device opened, job
  // set up); a ready worker. A worker that died is replaced.
  const bool alive = worker_ && !worker_->Poll().has_value();
  if (alive && worker_ready_) return absl::OkStatus();
  const auto wait_start = Clock::now();
  if (!alive) {
    if (worker_) worker_->Kill();
    worker_.reset();
    KTUNE_RETURN_IF_ERROR(StartWorker());
  }
  while (outstanding_ > 0) {
    v1::WorkerResponse resp;
    absl::Status s = worker_->channel().Receive(&resp, Clock::now() + std::chrono::minutes(10));
    if (!s.ok()) {
      const std::string how = worker_->Kill();
      worker_.reset();
      return absl::InternalError(
          StrCat("the measurement worker failed during set-up (", how, "): ", s.message()));
    }
    --outstanding_;
    if (!resp.error().empty()) {
      worker_->Kill();
      worker_.reset();
      return absl::FailedPreconditionError(StrCat("setting up the GPU failed: ", resp.error()));
    }
  }
  worker_ready_ = true;
  v1::WorkerResponse resp;
  absl::Status s;
  if (reference_compile_) {
    const v1::CompileResult compiled = reference_compile_->get();
    reference_compile_.reset();
    if (!compiled.error().empty()) return absl::InternalError(compiled.error());
    if (!compiled.ok()) {
      return absl::FailedPreconditionError(
          StrCat("verification: the reference does not compile:\n", compiled.log()));
    }
    reference_ = reference_template_;
    reference_->set_cubin(compiled.cubin());
    reference_->set_function(compiled.lowered_name());
  }
  if (reference_) {
    v1::WorkerRequest again;
    *again.mutable_candidate() = *reference_;
    s = worker_->channel().Send(again);
    if (s.ok()) s = worker_->channel().Receive(&resp, Clock::now() + std::chrono::minutes(5));
    if (!s.ok() || !resp.has_measurement() || resp.measurement().status() != v1::OK) {
      const std::string why = !s.ok()                  ? std::string(s.message())
                              : resp.has_measurement() ? resp.measurement().message()
                                                       : resp.error();
      worker_->Kill();
      worker_.reset();
      worker_ready_ = false;
      return absl::FailedPreconditionError(
          StrCat("verification: the reference failed to run: ", why));
    }
  }
  stats_.setup_wait += std::chrono::duration_cast<Millis>(Clock::now() - wait_start);
  return absl::OkStatus();
}

std::shared_future<v1::CompileResult> CudaDevice::CompileFuture(const Config& config) {
  auto it = pending_.find(config);
  if (it != pending_.end()) return it->second;
  std::shared_future<v1::CompileResult> f =
      pool_->Submit(BuildCompileRequest(*spec_, source_, base_dir_, *space_, config, arch_));
  pending_.emplace(config, f);
  return f;
}

void CudaDevice::Prefetch(const std::vector<Config>& configs) {
  for (const Config& c : configs) CompileFuture(c);
}

void CudaDevice::Forget(const std::vector<Config>& configs) {
  for (const Config& c : configs) pending_.erase(c);
}

absl::Status CudaDevice::LaunchFor(const Config& config, v1::WorkerCandidate* c,
                                   std::string* why) const {
  std::vector<Scalar> slots(space_->num_params());
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = param_scalars_[i][config.index[i]];
  std::int64_t block[3], grid[3];
  EvalError err;
  for (int d = 0; d < 3; ++d) {
    if (!block_[static_cast<std::size_t>(d)].EvaluateInt(slots.data(), &block[d], &err)) {
      *why = StrCat("launch.block[", d, "]: ", block_[static_cast<std::size_t>(d)].Describe(err));
      return absl::OkStatus();
    }
    if (!grid_[static_cast<std::size_t>(d)].EvaluateInt(slots.data(), &grid[d], &err)) {
      *why = StrCat("launch.grid[", d, "]: ", grid_[static_cast<std::size_t>(d)].Describe(err));
      return absl::OkStatus();
    }
    const std::int64_t grid_max = d == 0 ? 2147483647 : 65535;
    if (block[d] < 1 || block[d] > 1024) {
      *why = StrCat("block dimension ", "xyz"[d], " is ", block[d], " (1 to 1024 allowed)");
      return absl::OkStatus();
    }
    if (grid[d] < 1 || grid[d] > grid_max) {
      *why = StrCat("grid dimension ", "xyz"[d], " is ", grid[d], " (1 to ", grid_max, " allowed)");
      return absl::OkStatus();
    }
  }
  c->mutable_block()->set_x(static_cast<std::uint32_t>(block[0]));
  c->mutable_block()->set_y(static_cast<std::uint32_t>(block[1]));
  c->mutable_block()->set_z(static_cast<std::uint32_t>(block[2]));
  c->mutable_grid()->set_x(static_cast<std::uint32_t>(grid[0]));
  c->mutable_grid()->set_y(static_cast<std::uint32_t>(grid[1]));
  c->mutable_grid()->set_z(static_cast<std::uint32_t>(grid[2]));
  if (shared_bytes_) {
    std::int64_t bytes = 0;
    if (!shared_bytes_->EvaluateInt(slots.data(), &bytes, &err)) {
      *why = StrCat("launch.shared_memory_bytes: ", shared_bytes_->Describe(err));
      return absl::OkStatus();
    }
    if (bytes < 0 || bytes > (std::int64_t{1} << 31)) {
      *why = StrCat("launch.shared_memory_bytes is ", bytes);
      return absl::OkStatus();
    }
    c->set_shared_memory_bytes(static_cast<std::uint32_t>(bytes));
  }
  auto positive = [&](const std::optional<Expr>& e, const char* field, std::int64_t* v) {
    if (!e->EvaluateInt(slots.data(), v, &err)) {
      *why = StrCat(field, ": ", e->Describe(err));
      return false;
    }
    return true;
  };
  if (instances_) {
    std::int64_t k = 0, st = 0;
    if (!positive(instances_, "measurement.load.instances", &k) ||
        !positive(streams_, "measurement.load.streams", &st)) {
      return absl::OkStatus();
    }
    if (k < 1 || k > 4096 || st < 1 || st > 32) {
      *why = StrCat("concurrent: ", k, " instances over ", st,
                    " streams (1 to 4096 instances, 1 to 32 streams)");
      return absl::OkStatus();
    }
    c->set_instances(static_cast<std::int32_t>(k));
    c->set_streams(static_cast<std::int32_t>(st));
  }
  if (pipeline_) {
    std::int64_t chunk = 0, st = 0, pinned = 0;
    if (!positive(pipe_chunk_, "pipeline.chunk_elements", &chunk) ||
        !positive(pipe_streams_, "pipeline.streams", &st) ||
        !positive(pipe_pinned_, "pipeline.pinned", &pinned)) {
      return absl::OkStatus();
    }
    if (chunk < 1 || st < 1 || st > 32) {
      *why = StrCat("pipeline: chunks of ", chunk, " elements over ", st,
                    " streams (at least 1 element, 1 to 32 streams)");
      return absl::OkStatus();
    }
    c->set_chunk_elements(chunk);
    c->set_streams(static_cast<std::int32_t>(st));
    c->set_pinned(pinned != 0);
  }
  c->clear_scalars();
  for (const ScalarArg& s : scalars_) {
    double dv = 0;
    std::int64_t iv = 0;
    const bool is_int = s.expr.type() != ValueType::kFloat;
    const bool ok = is_int ? s.expr.EvaluateInt(slots.data(), &iv, &err)
                           : s.expr.EvaluateDouble(slots.data(), &dv, &err);
    if (!ok) {
      *why = StrCat("a scalar argument: ", s.expr.Describe(err));
      return absl::OkStatus();
    }
    c->add_scalars(ScalarBytes(s.type, dv, iv, is_int));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::WorkerMeasurement>> CudaDevice::Run(
    const v1::WorkerCandidate& candidate, Measurement* failure) {
  KTUNE_RETURN_IF_ERROR(EnsureWorker());
  // The watchdog: a per-launch limit from the spec, or derived from the
  // best time so far, and room for the whole sampling loop.
  Millis per_launch = kernel_timeout_;
  if (per_launch.count() <= 0) {
    per_launch = best_ms_ > 0 ? std::clamp(Millis(100 * best_ms_), Millis(1000), Millis(30000))
                              : Millis(10000);
  }
  const Millis budget = Millis(max_candidate_ms_) + 6 * per_launch + Millis(3000);
  v1::WorkerRequest req;
  *req.mutable_candidate() = candidate;
  v1::WorkerResponse resp;
  absl::Status s = worker_->channel().Send(req);
  if (s.ok()) {
    s = worker_->channel().Receive(
        &resp, Clock::now() + std::chrono::duration_cast<Clock::duration>(budget));
  }
  if (!s.ok()) {
    const std::string how = worker_->Kill();
    worker_.reset();
    worker_ready_ = false;
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      failure->status = CandidateStatus::kTimeout;
      failure->message = StrCat("no result within ", Seconds(budget), " s (a launch may take ",
                                Seconds(per_launch),
                                " s): the kernel hung or ran too long; the measurement worker "
                                "was killed and restarted");
    } else {
      failure->status = CandidateStatus::kRuntimeFault;
      failure->message = StrCat("the measurement worker died (", how, ") running this candidate");
    }
    return std::optional<v1::WorkerMeasurement>();
  }
  if (!resp.error().empty())
    return absl::InternalError(StrCat("measurement worker: ", resp.error()));
  if (!resp.has_measurement()) return absl::InternalError("measurement worker: unexpected answer");
  if (resp.measurement().context_lost()) {
    // It exits by itself; reap it now so the next candidate gets a fresh one.
    worker_->Kill();
    worker_.reset();
    worker_ready_ = false;
  }
  return std::optional<v1::WorkerMeasurement>(resp.measurement());
}

absl::StatusOr<Measurement> CudaDevice::Measure(const Config& config, bool final_round) {
  std::shared_future<v1::CompileResult> future = CompileFuture(config);
  const auto wait_start = Clock::now();
  future.wait();
  stats_.compile_wait += std::chrono::duration_cast<Millis>(Clock::now() - wait_start);
  const v1::CompileResult& compiled = future.get();  // `future` keeps it alive
  pending_.erase(config);
  if (!compiled.error().empty())
    return absl::InternalError(StrCat("compiling: ", compiled.error()));
  Measurement m;
  // A re-measurement reuses the image: its cost is the worker's time only.
  m.compile_time = final_round ? Millis(0) : Millis(compiled.compile_ms());
  stats_.compile_cpu += m.compile_time;
  if (!compiled.ok()) {
    m.status = CandidateStatus::kCompileError;
    m.message = compiled.log();
    m.cost = m.compile_time;
    return m;
  }
  v1::WorkerCandidate c;
  c.set_id(next_id_++);
  c.set_cubin(compiled.cubin());
  c.set_function(compiled.lowered_name());
  std::string why;
  KTUNE_RETURN_IF_ERROR(LaunchFor(config, &c, &why));
  if (!why.empty()) {
    m.status = CandidateStatus::kLaunchError;
    m.message = why;
    m.cost = m.compile_time;
    return m;
  }
  c.set_verify(setup_.verified_size() > 0 || (pipeline_ && reference_.has_value()));
  c.set_best_ms(best_ms_);
  c.set_no_racing(final_round);
  if (final_round) {
    // The rounds' samples are pooled: each round takes its share.
    c.set_min_samples(
        std::max(3, (setup_.settings().min_samples() + kFinalRounds - 1) / kFinalRounds));
  }
  Measurement failure;
  // Other ktune processes measuring on this GPU take turns with us.
  GpuLockHold hold(*gpu_lock_, [&](const std::string& holder) { TellWaiting(holder); });
  KTUNE_ASSIGN_OR_RETURN(std::optional<v1::WorkerMeasurement> w, Run(c, &failure));
  ++stats_.candidates;
  if (!w) {
    failure.compile_time = m.compile_time;
    failure.cost = m.compile_time;
    return failure;
  }
  m.status = CandidateStatusFromProto(w->status());
  m.message = w->message();
  m.cost = m.compile_time + Millis(w->wall_ms());
  Conditions& cond = m.conditions;
  cond = w->conditions();
  cond.set_final_round(final_round);
  cond.set_load(load_kind_);
  cond.set_instances(c.instances());
  cond.set_streams(c.streams());
  stats_.gpu_busy += Millis(cond.gpu_busy_ms());
  stats_.worker_load += Millis(w->load_ms());
  stats_.worker_verify += Millis(w->verify_ms());
  if (m.ok()) {
    m.samples_ms.assign(w->samples_ms().begin(), w->samples_ms().end());
    stats_.samples += static_cast<std::int64_t>(m.samples_ms.size());
    m.stats = ComputeStats(m.samples_ms);
    m.time = m.stats.median;
    if (best_ms_ == 0 || m.time.count() < best_ms_) best_ms_ = m.time.count();
    Throughputs(m);
  }
  return m;
}

void CudaDevice::Throughputs(Measurement& m) const {
  const double ms = m.time.count();
  if (!(ms > 0)) return;
  Conditions& c = m.conditions;
  if (c.instances() > 0) c.set_throughput(1e3 / ms);  // the time is per instance
  if (pipeline_) {
    c.set_throughput(2.0 * static_cast<double>(pipe_bytes_) / (ms * 1e-3));
    c.set_overlap((c.h2d_ms() + c.kernel_ms() + c.d2h_ms()) / ms);
  }
}

absl::Status CudaDevice::WaitUntilOpen() {
  if (bound_) return EnsureWorker();
  if (!worker_) return StartWorker();
  while (outstanding_ > 0) {
    v1::WorkerResponse resp;
    absl::Status s = worker_->channel().Receive(&resp, Clock::now() + std::chrono::minutes(10));
    if (!s.ok()) return absl::InternalError(StrCat("opening the GPU failed: ", s.message()));
    --outstanding_;
    if (!resp.error().empty()) {
      return absl::FailedPreconditionError(StrCat("opening the GPU failed: ", resp.error()));
    }
  }
  return absl::OkStatus();
}

void CudaDevice::TellWaiting(const std::string& holder) {
  if (told_waiting_) return;
  told_waiting_ = true;
  std::fprintf(stderr,
               "ktune: %s: another ktune process%s is measuring on this GPU; candidates take "
               "turns with it (%s)\n",
               info_.id.c_str(), holder.empty() ? "" : StrCat(" (pid ", holder, ")").c_str(),
               gpu_lock_->path().c_str());
}

void CudaDevice::StampToolchain(Measurement& m) const {
  m.conditions.set_driver(info_.driver);
  m.conditions.set_nvrtc(nvrtc_version_);
}

absl::StatusOr<Measurement> CudaDevice::Evaluate(const Config& config) {
  KTUNE_ASSIGN_OR_RETURN(Measurement m, Measure(config, false));
  StampToolchain(m);
  return m;
}

absl::StatusOr<std::vector<Measurement>> CudaDevice::Remeasure(const std::vector<Config>& configs) {
  // The contenders are compared under one hold: no other process's work
  // between their rounds.
  GpuLockHold hold(*gpu_lock_, [&](const std::string& holder) { TellWaiting(holder); });
  std::vector<Measurement> out(configs.size());
  std::vector<std::vector<double>> pooled(configs.size());
  std::vector<bool> failed(configs.size(), false);
  for (int round = 0; round < kFinalRounds; ++round) {
    for (std::size_t k = 0; k < configs.size(); ++k) {
      // Rotate the order each round so no contender always goes first.
      const std::size_t i = (k + static_cast<std::size_t>(round)) % configs.size();
      if (failed[i]) continue;
      KTUNE_ASSIGN_OR_RETURN(Measurement m, Measure(configs[i], true));
      if (!m.ok()) {
        failed[i] = true;
        out[i] = std::move(m);
        continue;
      }
      pooled[i].insert(pooled[i].end(), m.samples_ms.begin(), m.samples_ms.end());
      const double busy_ms = out[i].conditions.gpu_busy_ms() + m.conditions.gpu_busy_ms();
      const Millis cost = out[i].cost + m.cost;
      out[i] = std::move(m);
      out[i].conditions.set_gpu_busy_ms(busy_ms);
      out[i].cost = cost;
    }
  }
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (failed[i]) continue;
    out[i].samples_ms = pooled[i];
    out[i].stats = ComputeStats(pooled[i]);
    out[i].time = out[i].stats.median;
    Throughputs(out[i]);
    out[i].message =
        StrCat("re-measured in ", kFinalRounds, " interleaved rounds with the final contenders");
  }
  for (Measurement& m : out) StampToolchain(m);
  return out;
}

}  // namespace ktune
