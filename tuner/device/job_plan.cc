#include "tuner/device/job_plan.h"

#include <algorithm>
#include <map>

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/sha256.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/cuda/fill.h"
#include "tuner/device/kernel_compile.h"

namespace ktune {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

Millis FromDuration(const google::protobuf::Duration& d) {
  return Millis(static_cast<double>(d.seconds()) * 1e3 + static_cast<double>(d.nanos()) * 1e-6);
}

std::string Relative(const std::string& path, const std::string& base_dir) {
  return path.empty() || path[0] == '/' ? path : StrCat(base_dir, "/", path);
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
      absl::StatusOr<std::string> data = ReadFileContents(Relative(b.file(), base_dir));
      if (!data.ok()) {
        return Invalid(StrCat(where,
                              a.kind_case() == v1::Argument::kConstant ? ".constant" : ".buffer",
                              ".file: ", data.status().message()));
      }
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

// The value of a constant expression (over the problem only) in `symbols`.
absl::Status EvaluateConstant(const std::string& field, const std::string& text, ValueType type,
                              SymbolTable& symbols, double* dv, std::int64_t* iv) {
  absl::StatusOr<Expr> e = Expr::CompileAs(text, symbols, type);
  if (!e.ok()) return Invalid(StrCat(field, ": ", e.status().message()));
  if (!e->is_constant()) return Invalid(StrCat(field, ": may depend on the problem only"));
  EvalError err;
  const bool ok = type == ValueType::kFloat ? e->EvaluateDouble(nullptr, dv, &err)
                                            : e->EvaluateInt(nullptr, iv, &err);
  if (!ok) return Invalid(StrCat(field, ": ", e->Describe(err)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Expr> JobPlan::Compile(const std::string& field, const std::string& text,
                                      ValueType type) {
  absl::StatusOr<Expr> e = Expr::CompileAs(text, symbols_, type);
  if (!e.ok()) return Invalid(StrCat(field, ": ", e.status().message()));
  return e;
}

absl::StatusOr<JobPlan> JobPlan::Make(const JobBinding& job, const PlanTarget& target) {
  if (job.spec == nullptr) {
    return Invalid(
        "a GPU runs kernels: give a job file with the kernel's source (a recorded space is "
        "replayed with --device sim:FILE)");
  }
  const v1::JobSpec& spec = *job.spec;
  if (job.source.empty()) {
    return Invalid("kernel.code or kernel.file: the kernel's source is needed on a GPU");
  }
  if (spec.launch().grid_size() == 0) {
    return Invalid(
        "launch.grid: required on a GPU (the grid in blocks, e.g. \"ceil_div(N, "
        "block_size_x)\")");
  }
  JobPlan plan;
  plan.space_ = job.space;
  plan.spec_ = spec;
  plan.source_ = job.source;
  plan.base_dir_ = job.base_dir;
  plan.arch_ = target.architecture;
  // Expressions over the parameters (slots) and the problem (constants).
  const std::size_t n = plan.space_->num_params();
  plan.param_scalars_.assign(n, {});
  for (std::size_t i = 0; i < n; ++i) {
    const Parameter& p = plan.space_->param(i);
    KTUNE_RETURN_IF_ERROR(plan.symbols_.AddSlot(p.name, p.type, static_cast<int>(i)));
    for (const Value& v : p.values) plan.param_scalars_[i].push_back(ToScalar(v, plan.symbols_));
  }
  for (const auto& [name, v] : job.problem) {
    KTUNE_RETURN_IF_ERROR(plan.symbols_.AddConstant(name, ValueType::kInt, IntScalar(v)));
  }
  plan.setup_.set_device_ordinal(target.ordinal);
  KTUNE_RETURN_IF_ERROR(plan.PlanLaunch(spec));
  KTUNE_RETURN_IF_ERROR(plan.PlanArguments(spec, target));
  KTUNE_RETURN_IF_ERROR(plan.PlanSettings(spec));
  KTUNE_RETURN_IF_ERROR(plan.PlanLoad(spec, target));
  KTUNE_RETURN_IF_ERROR(plan.PlanPipeline(spec, target));
  KTUNE_RETURN_IF_ERROR(plan.PlanExpectedData(spec));
  KTUNE_RETURN_IF_ERROR(plan.PlanReference(spec));
  return plan;
}

absl::Status JobPlan::PlanLaunch(const v1::JobSpec& spec) {
  static constexpr const char* kBlockNames[] = {"block_size_x", "block_size_y", "block_size_z"};
  for (int d = 0; d < 3; ++d) {
    std::string text = "1";
    if (d < spec.launch().block_size()) {
      text = spec.launch().block(d);
    } else if (spec.launch().block_size() == 0 && space_->ParamIndex(kBlockNames[d])) {
      text = kBlockNames[d];
    }
    KTUNE_ASSIGN_OR_RETURN(Expr e, Compile(StrCat("launch.block[", d, "]"), text, ValueType::kInt));
    block_.push_back(std::move(e));
  }
  for (int d = 0; d < 3; ++d) {
    const std::string text = d < spec.launch().grid_size() ? spec.launch().grid(d) : "1";
    KTUNE_ASSIGN_OR_RETURN(Expr e, Compile(StrCat("launch.grid[", d, "]"), text, ValueType::kInt));
    grid_.push_back(std::move(e));
  }
  if (!spec.launch().shared_memory_bytes().empty()) {
    KTUNE_ASSIGN_OR_RETURN(Expr e, Compile("launch.shared_memory_bytes",
                                           spec.launch().shared_memory_bytes(), ValueType::kInt));
    shared_bytes_ = std::move(e);
  }
  return absl::OkStatus();
}

absl::Status JobPlan::PlanArguments(const v1::JobSpec& spec, const PlanTarget& target) {
  std::int64_t total_bytes = 0;
  for (int i = 0; i < spec.arguments_size(); ++i) {
    const v1::Argument& a = spec.arguments(i);
    const std::string where = StrCat("arguments[", i, "] (", a.name(), ")");
    const auto type = static_cast<v1::ElementType>(a.type());
    if (a.kind_case() == v1::Argument::kScalar) {
      KTUNE_ASSIGN_OR_RETURN(Expr e,
                             Compile(StrCat(where, ".scalar"), a.scalar(), ValueType::kFloat));
      scalars_.push_back(ScalarArg{std::move(e), type});
      setup_.add_argument_buffers(-1);
      continue;
    }
    // A buffer, or a __constant__ variable's contents (kept in a buffer the
    // worker copies into the module's symbol).
    const bool constant = a.kind_case() == v1::Argument::kConstant;
    const v1::Buffer& b = constant ? a.constant() : a.buffer();
    const std::string field = StrCat(where, constant ? ".constant" : ".buffer");
    KTUNE_ASSIGN_OR_RETURN(Expr size, Compile(StrCat(field, ".size"), b.size(), ValueType::kInt));
    if (!size.is_constant()) {
      return Invalid(StrCat(field,
                            ".size: may depend on the problem only (buffers are "
                            "allocated once per job)"));
    }
    std::int64_t elements = 0;
    size.EvaluateInt(nullptr, &elements);
    if (elements <= 0) return Invalid(StrCat(field, ".size: ", elements, " elements"));
    v1::WorkerBuffer* w = setup_.add_buffers();
    w->set_name(a.name());
    w->set_type(type);
    w->set_elements(elements);
    const bool output = b.direction() == v1::Buffer::OUTPUT || b.direction() == v1::Buffer::INOUT;
    const bool input = b.direction() != v1::Buffer::OUTPUT;
    w->set_input(input);
    w->set_output(output);
    w->set_constant_symbol(constant);
    total_bytes += elements * static_cast<std::int64_t>(ElementBytes(type));
    KTUNE_RETURN_IF_ERROR(InitBuffer(a, b, input, base_dir_, where, w));
    buffer_names_.push_back(a.name());
    if (!constant) setup_.add_argument_buffers(setup_.buffers_size() - 1);
  }
  if (total_bytes > target.memory_bytes) {
    return Invalid(StrCat("arguments: ", total_bytes >> 20,
                          " MiB of buffers do not fit in the GPU's ", target.memory_bytes >> 20,
                          " MiB"));
  }
  // Verification: the outputs named, or every output.
  const v1::Verification& ver = spec.verification();
  if (ver.outputs_size() > 0) {
    for (const std::string& name : ver.outputs()) {
      auto it = std::find(buffer_names_.begin(), buffer_names_.end(), name);
      const int index = static_cast<int>(it - buffer_names_.begin());
      if (it == buffer_names_.end() || !setup_.buffers(index).output()) {
        return Invalid(StrCat("verification.outputs: '", name, "' is not an output buffer"));
      }
      setup_.add_verified(index);
    }
  } else {
    for (int i = 0; i < setup_.buffers_size(); ++i) {
      if (setup_.buffers(i).output()) setup_.add_verified(i);
    }
  }
  return absl::OkStatus();
}

absl::Status JobPlan::PlanSettings(const v1::JobSpec& spec) {
  const v1::Verification& ver = spec.verification();
  const bool default_tolerance = ver.atol() == 0 && ver.rtol() == 0;
  const v1::MeasurementSettings& ms = spec.measurement();
  v1::WorkerSettings* ws = setup_.mutable_settings();
  ws->set_min_samples(ms.min_samples() > 0 ? ms.min_samples() : 10);
  ws->set_max_samples(ms.max_samples() > 0 ? ms.max_samples() : 1000);
  ws->set_target_relative_noise(ms.target_relative_noise() > 0 ? ms.target_relative_noise() : 0.01);
  max_candidate_ =
      ms.has_max_time_per_candidate() ? FromDuration(ms.max_time_per_candidate()) : Millis(1000);
  ws->set_max_candidate_ms(max_candidate_.count());
  ws->set_warmup_ms(ms.has_warmup() ? FromDuration(ms.warmup()).count() : 50.0);
  ws->set_flush_l2(ms.flush_l2());
  ws->set_rotate_inputs(ms.rotate_inputs());
  ws->set_measure_energy(ms.energy());
  ws->set_energy_window_ms(ms.has_energy_window() ? FromDuration(ms.energy_window()).count()
                                                  : 1000.0);
  ws->set_use_graphs(ms.use_graphs());
  // Racing stops a candidate that is clearly slower; with energy measured
  // the objective may prefer a slower one, so every candidate runs its
  // samples.
  ws->set_racing_factor(ms.energy() ? 0 : ms.racing_factor() > 0 ? ms.racing_factor() : 1.05);
  ws->set_racing_min_samples(3);
  ws->set_short_kernel_ms(0.02);
  ws->set_atol(default_tolerance ? kDefaultAtol : ver.atol());
  ws->set_rtol(default_tolerance ? kDefaultRtol : ver.rtol());
  kernel_timeout_ = ms.has_kernel_timeout() ? FromDuration(ms.kernel_timeout()) : Millis(0);
  return absl::OkStatus();
}

absl::Status JobPlan::PlanLoad(const v1::JobSpec& spec, const PlanTarget& target) {
  const v1::LoadProfile& load = spec.measurement().load();
  load_kind_ =
      load.kind() == v1::LoadProfile::KIND_UNSPECIFIED ? v1::LoadProfile::ISOLATED : load.kind();
  v1::WorkerLoad* wl = setup_.mutable_load();
  wl->set_kind(load_kind_);
  if (load_kind_ == v1::LoadProfile::UNDER_LOAD) {
    wl->set_bandwidth_fraction(load.bandwidth_fraction());
    wl->set_compute_sms(std::min(load.compute_sms(), target.multiprocessors));
    wl->set_h2d_fraction(load.h2d_fraction());
    wl->set_d2h_fraction(load.d2h_fraction());
    for (int i = 0; i < load.companions_size(); ++i) {
      KTUNE_RETURN_IF_ERROR(PlanCompanion(load.companions(i), i, wl->add_companions()));
    }
  } else if (load_kind_ == v1::LoadProfile::CONCURRENT) {
    auto count = [&](const std::string& field, const std::string& text, int fixed) {
      return Compile(StrCat("measurement.load.", field),
                     !text.empty() ? text : std::to_string(fixed > 0 ? fixed : 4), ValueType::kInt);
    };
    KTUNE_ASSIGN_OR_RETURN(
        Expr k, count("instances_expression", load.instances_expression(), load.instances()));
    KTUNE_ASSIGN_OR_RETURN(Expr st,
                           count("streams_expression", load.streams_expression(), load.streams()));
    instances_ = std::move(k);
    streams_ = std::move(st);
  }
  return absl::OkStatus();
}

absl::Status JobPlan::PlanCompanion(const v1::CompanionKernel& ck, int index,
                                    v1::WorkerCompanion* out) {
  const std::string where = StrCat("measurement.load.companions[", index, "]");
  auto invalid = [&](const std::string& m) { return Invalid(StrCat(where, m)); };
  // Expressions of the problem only: a companion is the same for every
  // candidate.
  auto constant = [&](const std::string& field, const std::string& text, ValueType type, double* dv,
                      std::int64_t* iv) {
    return EvaluateConstant(StrCat(where, ".", field), text, type, symbols_, dv, iv);
  };
  const v1::Kernel& k = ck.kernel();
  if (k.name().empty()) return invalid(".kernel.name: required");
  KTUNE_ASSIGN_OR_RETURN(const std::string source,
                         KernelSource(k, base_dir_, StrCat(where, ".kernel")));
  companion_requests_.push_back(KernelCompileRequest(k, source, StrCat("companion", index, ".cu"),
                                                     base_dir_, {}, k.name(), arch_));
  out->set_name(k.name());
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
  for (int g = 0; g < 2; ++g) {
    v1::Launch3* l = g == 0 ? out->mutable_grid() : out->mutable_block();
    l->set_x(static_cast<std::uint32_t>(dims[g][0]));
    l->set_y(static_cast<std::uint32_t>(dims[g][1]));
    l->set_z(static_cast<std::uint32_t>(dims[g][2]));
  }
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
    const bool symbol = a.kind_case() == v1::Argument::kConstant;
    const v1::Buffer& b = symbol ? a.constant() : a.buffer();
    const char* kind = symbol ? ".constant" : ".buffer";
    double unused = 0;
    std::int64_t elements = 0;
    KTUNE_RETURN_IF_ERROR(constant(StrCat(aw.substr(1), kind, ".size"), b.size(), ValueType::kInt,
                                   &unused, &elements));
    if (elements <= 0) return invalid(StrCat(aw, kind, ".size: ", elements, " elements"));
    v1::WorkerBuffer* w = out->add_buffers();
    w->set_name(a.name());
    w->set_type(type);
    w->set_elements(elements);
    w->set_constant_symbol(symbol);
    KTUNE_RETURN_IF_ERROR(
        InitBuffer(a, b, b.direction() != v1::Buffer::OUTPUT, base_dir_, StrCat(where, aw), w));
    if (!symbol) out->add_argument_buffers(out->buffers_size() - 1);
  }
  return absl::OkStatus();
}

absl::Status JobPlan::SetCompanionImage(int index, const v1::CompileResult& compiled) {
  const std::string where = StrCat("measurement.load.companions[", index, "]");
  if (!compiled.error().empty()) return absl::InternalError(compiled.error());
  if (!compiled.ok()) return Invalid(StrCat(where, ".kernel: does not compile:\n", compiled.log()));
  v1::WorkerCompanion* c = setup_.mutable_load()->mutable_companions(index);
  c->set_cubin(compiled.cubin());
  c->set_function(compiled.lowered_name());
  return absl::OkStatus();
}

absl::Status JobPlan::PlanPipeline(const v1::JobSpec& spec, const PlanTarget& target) {
  pipeline_ = spec.has_pipeline();
  if (!pipeline_) return absl::OkStatus();
  const v1::Pipeline& p = spec.pipeline();
  const auto type = p.type() == v1::Argument::TYPE_UNSPECIFIED
                        ? v1::ELEMENT_F32
                        : static_cast<v1::ElementType>(p.type());
  KTUNE_ASSIGN_OR_RETURN(Expr elements,
                         Compile("pipeline.elements", p.elements(), ValueType::kInt));
  if (!elements.is_constant()) return Invalid("pipeline.elements: may depend on the problem only");
  std::int64_t count = 0;
  elements.EvaluateInt(nullptr, &count);
  if (count <= 0) return Invalid(StrCat("pipeline.elements: ", count, " elements"));
  pipe_bytes_ = count * static_cast<std::int64_t>(ElementBytes(type));
  if (pipe_bytes_ > target.memory_bytes) {
    return Invalid(StrCat("pipeline.elements: ", pipe_bytes_ >> 20, " MiB is more than the GPU's ",
                          target.memory_bytes >> 20, " MiB"));
  }
  KTUNE_ASSIGN_OR_RETURN(Expr chunk,
                         Compile("pipeline.chunk_elements", p.chunk_elements(), ValueType::kInt));
  KTUNE_ASSIGN_OR_RETURN(Expr streams, Compile("pipeline.streams", p.streams(), ValueType::kInt));
  KTUNE_ASSIGN_OR_RETURN(
      Expr pinned,
      Compile("pipeline.pinned", p.pinned().empty() ? "1" : p.pinned(), ValueType::kInt));
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
  return absl::OkStatus();
}

absl::Status JobPlan::PlanExpectedData(const v1::JobSpec& spec) {
  const v1::Verification& ver = spec.verification();
  if (ver.reference_case() != v1::Verification::kExpectedData) return absl::OkStatus();
  // Sorted, so the set-up does not depend on the map's order.
  const std::map<std::string, std::string> files(ver.expected_data().files().begin(),
                                                 ver.expected_data().files().end());
  for (const auto& [name, file] : files) {
    auto it = std::find(buffer_names_.begin(), buffer_names_.end(), name);
    if (it == buffer_names_.end()) {
      return Invalid(StrCat("verification.expected_data.files: no buffer named '", name, "'"));
    }
    absl::StatusOr<std::string> data = ReadFileContents(Relative(file, base_dir_));
    if (!data.ok()) {
      return Invalid(
          StrCat("verification.expected_data.files[", name, "]: ", data.status().message()));
    }
    setup_.mutable_buffers(static_cast<int>(it - buffer_names_.begin()))
        ->set_expected(*std::move(data));
  }
  return absl::OkStatus();
}

absl::Status JobPlan::PlanReference(const v1::JobSpec& spec) {
  const v1::Verification& ver = spec.verification();
  const auto kind = ver.reference_case();
  if (pipeline_ && kind != v1::Verification::REFERENCE_NOT_SET &&
      kind != v1::Verification::kReferenceConfig) {
    return Invalid(
        "verification: a pipeline job is verified against a reference_config (the kernel's "
        "arguments are the pipeline's own)");
  }
  if (kind != v1::Verification::kReferenceConfig && kind != v1::Verification::kReferenceKernel) {
    if (kind != v1::Verification::kExpectedData) setup_.clear_verified();  // nothing to compare
    return absl::OkStatus();
  }
  v1::WorkerCandidate ref;
  ref.set_make_reference(true);
  if (kind == v1::Verification::kReferenceConfig) {
    absl::StatusOr<Config> c = space_->ParseKey(ver.reference_config());
    if (!c.ok()) return Invalid(StrCat("verification.reference_config: ", c.status().message()));
    std::string why;
    KTUNE_RETURN_IF_ERROR(LaunchFor(*c, &ref, &why));
    if (!why.empty()) return Invalid(StrCat("verification.reference_config: ", why));
    reference_request_ = CompileRequestFor(*c);
    reference_template_ = ref;
    return absl::OkStatus();
  }
  const v1::ReferenceKernel& rk = ver.reference_kernel();
  const std::string field = "verification.reference_kernel";
  absl::StatusOr<std::string> source =
      KernelSource(rk.kernel(), base_dir_, StrCat(field, ".kernel"));
  if (rk.kernel().source_case() == v1::Kernel::kFile && !source.ok()) return source.status();
  if (!source.ok() || rk.kernel().name().empty()) {
    return Invalid(StrCat(field, ": needs a kernel name and source"));
  }
  // Its launch depends on the problem only.
  for (int g = 0; g < 2; ++g) {
    const auto& exprs = g == 0 ? rk.launch().grid() : rk.launch().block();
    const char* what = g == 0 ? "grid" : "block";
    std::int64_t v[3] = {1, 1, 1};
    for (int d = 0; d < exprs.size() && d < 3; ++d) {
      KTUNE_ASSIGN_OR_RETURN(Expr e, Compile(StrCat(field, ".launch.", what, "[", d, "]"),
                                             exprs.Get(d), ValueType::kInt));
      if (!e.is_constant()) {
        return Invalid(StrCat(field, ".launch.", what, ": may depend on the problem only"));
      }
      e.EvaluateInt(nullptr, &v[d]);
    }
    v1::Launch3* l = g == 0 ? ref.mutable_grid() : ref.mutable_block();
    l->set_x(static_cast<std::uint32_t>(v[0]));
    l->set_y(static_cast<std::uint32_t>(v[1]));
    l->set_z(static_cast<std::uint32_t>(v[2]));
  }
  // Scalars as for any candidate (at the first configuration's values).
  Config first;
  first.index.assign(space_->num_params(), 0);
  v1::WorkerCandidate tmp;
  std::string why;
  KTUNE_RETURN_IF_ERROR(LaunchFor(first, &tmp, &why));
  *ref.mutable_scalars() = tmp.scalars();
  reference_request_ = KernelCompileRequest(rk.kernel(), *source, "reference.cu", base_dir_, {},
                                            rk.kernel().name(), arch_);
  reference_template_ = ref;
  return absl::OkStatus();
}

v1::CompileRequest JobPlan::CompileRequestFor(const Config& config) const {
  return BuildCompileRequest(spec_, source_, base_dir_, *space_, config, arch_);
}

absl::Status JobPlan::LaunchFor(const Config& config, v1::WorkerCandidate* c,
                                std::string* why) const {
  std::vector<Scalar> slots(space_->num_params());
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = param_scalars_[i][config.index[i]];
  std::int64_t block[3], grid[3];
  EvalError err;
  for (int d = 0; d < 3; ++d) {
    const auto dd = static_cast<std::size_t>(d);
    if (!block_[dd].EvaluateInt(slots.data(), &block[d], &err)) {
      *why = StrCat("launch.block[", d, "]: ", block_[dd].Describe(err));
      return absl::OkStatus();
    }
    if (!grid_[dd].EvaluateInt(slots.data(), &grid[d], &err)) {
      *why = StrCat("launch.grid[", d, "]: ", grid_[dd].Describe(err));
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
  auto value = [&](const std::optional<Expr>& e, const char* field, std::int64_t* v) {
    if (!e->EvaluateInt(slots.data(), v, &err)) {
      *why = StrCat(field, ": ", e->Describe(err));
      return false;
    }
    return true;
  };
  if (instances_) {
    std::int64_t k = 0, st = 0;
    if (!value(instances_, "measurement.load.instances", &k) ||
        !value(streams_, "measurement.load.streams", &st)) {
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
    if (!value(pipe_chunk_, "pipeline.chunk_elements", &chunk) ||
        !value(pipe_streams_, "pipeline.streams", &st) ||
        !value(pipe_pinned_, "pipeline.pinned", &pinned)) {
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

}  // namespace ktune
