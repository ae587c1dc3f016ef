#include "tuner/session/job.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/sha256.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"
#include "tuner/session/spec_json.h"
#include "tuner/session/spec_limits.h"

namespace ktune {
namespace {

constexpr std::size_t kMaxSpecBytes = 16u << 20;
constexpr std::int64_t kMaxRangeValues = 1'000'000;

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string Where(std::size_t i, const std::string& name) {
  return name.empty() ? StrCat("parameters[", i, "]") : StrCat("parameters[", i, "] (", name, ")");
}

}  // namespace

absl::StatusOr<Parameter> ToParameter(const v1::Parameter& p, std::size_t i) {
  Parameter out;
  out.name = p.name();
  const std::string where = Where(i, p.name());
  const int kinds = (p.ints_size() > 0) + (p.floats_size() > 0) + (p.bools_size() > 0) +
                    (p.strings_size() > 0) + p.has_range();
  if (kinds == 0) {
    return Invalid(StrCat(where,
                          ": empty value list (give one of ints, "
                          "floats, bools, strings or range)"));
  }
  if (kinds > 1) {
    return Invalid(StrCat(where,
                          ": give only one of ints, floats, bools, "
                          "strings or range"));
  }
  if (p.ints_size() > 0) {
    out.type = ValueType::kInt;
    for (std::int64_t v : p.ints()) out.values.emplace_back(v);
  } else if (p.floats_size() > 0) {
    out.type = ValueType::kFloat;
    for (double v : p.floats()) out.values.emplace_back(v);
  } else if (p.bools_size() > 0) {
    out.type = ValueType::kBool;
    for (bool v : p.bools()) out.values.emplace_back(v);
  } else if (p.strings_size() > 0) {
    out.type = ValueType::kString;
    for (const std::string& v : p.strings()) out.values.emplace_back(v);
  } else {
    const v1::IntRange& r = p.range();
    const std::int64_t step = r.step() == 0 ? 1 : r.step();
    if (step < 0) return Invalid(StrCat(where, ".range.step: must be positive"));
    if (r.stop() < r.start()) {
      return Invalid(
          StrCat(where, ".range: stop (", r.stop(), ") is below start (", r.start(), ")"));
    }
    const auto span = static_cast<double>(r.stop()) - static_cast<double>(r.start());
    if (span / static_cast<double>(step) >= static_cast<double>(kMaxRangeValues)) {
      return Invalid(StrCat(where, ".range: more than ", kMaxRangeValues, " values"));
    }
    out.type = ValueType::kInt;
    for (std::int64_t v = r.start(); v <= r.stop(); v += step) {
      out.values.emplace_back(v);
      if (r.stop() - v < step) break;  // no overflow past stop
    }
  }
  return out;
}

namespace {

// Checks that `text` compiles as a `want` expression; `field` names it.
absl::Status CheckExpression(const std::string& field, const std::string& text,
                             SymbolTable& symbols, ValueType want) {
  if (StripSpace(text).empty()) return Invalid(StrCat(field, ": empty expression"));
  absl::StatusOr<Expr> e = Expr::CompileAs(text, symbols, want);
  if (!e.ok()) return Invalid(StrCat(field, ": ", e.status().message()));
  return absl::OkStatus();
}

absl::Status ValidateKernelAndLaunch(const v1::JobSpec& spec, const std::vector<Parameter>& params,
                                     const Problem& problem) {
  SymbolTable symbols;
  for (std::size_t i = 0; i < params.size(); ++i) {
    KTUNE_RETURN_IF_ERROR(symbols.AddSlot(params[i].name, params[i].type, static_cast<int>(i)));
  }
  for (const auto& [name, v] : problem) {
    KTUNE_RETURN_IF_ERROR(symbols.AddConstant(name, ValueType::kInt, IntScalar(v)));
  }
  const v1::Launch& launch = spec.launch();
  if (launch.block_size() > 3) return Invalid("launch.block: at most 3 dimensions");
  if (launch.grid_size() > 3) return Invalid("launch.grid: at most 3 dimensions");
  for (int i = 0; i < launch.block_size(); ++i) {
    KTUNE_RETURN_IF_ERROR(CheckExpression(StrCat("launch.block[", i, "]"), launch.block(i), symbols,
                                          ValueType::kInt));
  }
  for (int i = 0; i < launch.grid_size(); ++i) {
    KTUNE_RETURN_IF_ERROR(
        CheckExpression(StrCat("launch.grid[", i, "]"), launch.grid(i), symbols, ValueType::kInt));
  }
  if (!launch.shared_memory_bytes().empty()) {
    KTUNE_RETURN_IF_ERROR(CheckExpression("launch.shared_memory_bytes",
                                          launch.shared_memory_bytes(), symbols, ValueType::kInt));
  }
  std::set<std::string> arg_names;
  for (int i = 0; i < spec.arguments_size(); ++i) {
    const v1::Argument& a = spec.arguments(i);
    const std::string where = StrCat("arguments[", i, "]");
    if (!SymbolTable::IsIdentifier(a.name())) {
      return Invalid(StrCat(where, ".name: '", a.name(), "' is not a valid name"));
    }
    if (!arg_names.insert(a.name()).second) {
      return Invalid(StrCat(where, ".name: duplicate argument '", a.name(), "'"));
    }
    if (a.type() == v1::Argument::TYPE_UNSPECIFIED) {
      return Invalid(StrCat(where, " (", a.name(), ").type: required"));
    }
    switch (a.kind_case()) {
      case v1::Argument::kBuffer: {
        const v1::Buffer& b = a.buffer();
        KTUNE_RETURN_IF_ERROR(CheckExpression(StrCat(where, " (", a.name(), ").buffer.size"),
                                              b.size(), symbols, ValueType::kInt));
        if (b.init_case() == v1::Buffer::kUniform && !(b.uniform().low() < b.uniform().high())) {
          return Invalid(StrCat(where, " (", a.name(), ").buffer.uniform: low must be below high"));
        }
        if (b.init_case() == v1::Buffer::kNormal && !(b.normal().high() > 0)) {
          return Invalid(StrCat(where, " (", a.name(),
                                ").buffer.normal: the deviation (high) must be positive"));
        }
        break;
      }
      case v1::Argument::kConstant: {
        const v1::Buffer& b = a.constant();
        KTUNE_RETURN_IF_ERROR(CheckExpression(StrCat(where, " (", a.name(), ").constant.size"),
                                              b.size(), symbols, ValueType::kInt));
        if (b.direction() != v1::Buffer::INPUT &&
            b.direction() != v1::Buffer::DIRECTION_UNSPECIFIED) {
          return Invalid(StrCat(where, " (", a.name(),
                                ").constant.direction: constant memory is read-only to kernels; "
                                "give INPUT (or leave it out)"));
        }
        if (b.init_case() == v1::Buffer::kUniform && !(b.uniform().low() < b.uniform().high())) {
          return Invalid(
              StrCat(where, " (", a.name(), ").constant.uniform: low must be below high"));
        }
        break;
      }
      case v1::Argument::kScalar:
        KTUNE_RETURN_IF_ERROR(CheckExpression(StrCat(where, " (", a.name(), ").scalar"), a.scalar(),
                                              symbols, ValueType::kFloat));
        break;
      default: return Invalid(StrCat(where, " (", a.name(), "): give buffer, scalar or constant"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSettings(const v1::JobSpec& spec) {
  const v1::StrategySpec& s = spec.strategy();
  if (s.max_evaluations() < 0) return Invalid("strategy.max_evaluations: must not be negative");
  if (s.max_time().seconds() < 0 || s.max_time().nanos() < 0) {
    return Invalid("strategy.max_time: must not be negative");
  }
  if (s.batch_size() < 0 || s.batch_size() > 4096) {
    return Invalid("strategy.batch_size: must be between 1 and 4096 (0 means 1)");
  }
  const v1::MeasurementSettings& m = spec.measurement();
  if (m.min_samples() < 0) return Invalid("measurement.min_samples: must not be negative");
  if (m.max_samples() < 0) return Invalid("measurement.max_samples: must not be negative");
  if (m.max_samples() > 0 && m.max_samples() < m.min_samples()) {
    return Invalid("measurement.max_samples: below min_samples");
  }
  if (!(m.target_relative_noise() >= 0 && m.target_relative_noise() < 1)) {
    return Invalid("measurement.target_relative_noise: must be in [0, 1)");
  }
  if (!(m.racing_factor() == 0 || m.racing_factor() >= 1)) {
    return Invalid("measurement.racing_factor: must be 0 (off) or at least 1");
  }
  if (m.final_contenders() < 0) {
    return Invalid("measurement.final_contenders: must not be negative");
  }
  const v1::LoadProfile& load = m.load();
  auto fraction = [&](const char* field, double v) -> absl::Status {
    if (!(v >= 0 && v <= 1)) {
      return Invalid(StrCat("measurement.load.", field, ": ", v, " is not in [0, 1]"));
    }
    return absl::OkStatus();
  };
  KTUNE_RETURN_IF_ERROR(fraction("bandwidth_fraction", load.bandwidth_fraction()));
  KTUNE_RETURN_IF_ERROR(fraction("h2d_fraction", load.h2d_fraction()));
  KTUNE_RETURN_IF_ERROR(fraction("d2h_fraction", load.d2h_fraction()));
  if (load.compute_sms() < 0) return Invalid("measurement.load.compute_sms: must not be negative");
  if (load.instances() < 0 || load.streams() < 0) {
    return Invalid("measurement.load.instances and streams: must not be negative");
  }
  for (int i = 0; i < load.companions_size(); ++i) {
    const double v = load.companions(i).intensity();
    if (!(v >= 0 && v <= 1)) {
      return Invalid(
          StrCat("measurement.load.companions[", i, "].intensity: ", v, " is not in [0, 1]"));
    }
  }
  const bool has_load = load.bandwidth_fraction() > 0 || load.compute_sms() > 0 ||
                        load.h2d_fraction() > 0 || load.d2h_fraction() > 0 ||
                        load.companions_size() > 0;
  switch (load.kind()) {
    case v1::LoadProfile::UNDER_LOAD:
      if (!has_load) {
        return Invalid(
            "measurement.load: UNDER_LOAD needs a load: bandwidth_fraction, compute_sms, "
            "h2d_fraction, d2h_fraction or companions");
      }
      break;
    case v1::LoadProfile::CONCURRENT:
    case v1::LoadProfile::ISOLATED:
    case v1::LoadProfile::KIND_UNSPECIFIED:
      if (has_load) {
        return Invalid(StrCat("measurement.load: a background load is declared but kind is ",
                              v1::LoadProfile::Kind_Name(load.kind()),
                              "; set kind to UNDER_LOAD to measure under it"));
      }
      break;
    default: return Invalid("measurement.load.kind: unknown");
  }
  if (spec.has_pipeline()) {
    const v1::Pipeline& p = spec.pipeline();
    if (p.elements().empty())
      return Invalid("pipeline.elements: required (the host array's length)");
    if (p.chunk_elements().empty()) {
      return Invalid("pipeline.chunk_elements: required (e.g. \"chunk_kib * 256\")");
    }
    if (p.streams().empty()) return Invalid("pipeline.streams: required (e.g. \"streams\")");
    if (spec.arguments_size() > 0) {
      return Invalid(
          "arguments: a pipeline job's kernel takes (const T* in, T* out, unsigned long long n); "
          "give no arguments");
    }
    if (load.kind() == v1::LoadProfile::CONCURRENT) {
      return Invalid(
          "measurement.load.kind: a pipeline job runs over its own streams (pipeline.streams); "
          "measure it ISOLATED or UNDER_LOAD, not CONCURRENT");
    }
  }
  if (m.energy() || m.has_energy_window()) {
    if (load.kind() == v1::LoadProfile::UNDER_LOAD) {
      return Invalid(
          "measurement.energy: not with an UNDER_LOAD profile (the GPU's energy counter would "
          "count the load's work too)");
    }
    if (spec.has_pipeline()) {
      return Invalid("measurement.energy: a pipeline job's energy is not measured");
    }
    if (m.energy_window().seconds() < 0 || m.energy_window().nanos() < 0 ||
        m.energy_window().seconds() > 60) {
      return Invalid("measurement.energy_window: between 0 and 60 s");
    }
  }
  if (m.rotate_inputs()) {
    if (spec.has_pipeline()) {
      return Invalid("measurement.rotate_inputs: a pipeline job's input comes from the host");
    }
    if (load.kind() == v1::LoadProfile::CONCURRENT) {
      return Invalid("measurement.rotate_inputs: not with CONCURRENT instances");
    }
  }
  const v1::Verification& v = spec.verification();
  if (!(v.atol() >= 0)) return Invalid("verification.atol: must not be negative");
  if (!(v.rtol() >= 0)) return Invalid("verification.rtol: must not be negative");
  return absl::OkStatus();
}

Millis FromDuration(const google::protobuf::Duration& d) {
  return Millis(static_cast<double>(d.seconds()) * 1e3 + static_cast<double>(d.nanos()) * 1e-6);
}

void ApplyStrategy(const v1::JobSpec& spec, Job& job) {
  const v1::StrategySpec& s = spec.strategy();
  job.strategy = s.name().empty() ? "auto" : s.name();
  job.seed = s.seed();
  job.max_evaluations = s.max_evaluations();
  job.max_time = FromDuration(s.max_time());
  job.batch_size = s.batch_size() == 0 ? 1 : s.batch_size();
  job.strategy_settings.clear();
  for (const auto& [k, v] : s.options()) job.strategy_settings[k] = v;
  job.warm_start = !s.has_warm_start() || s.warm_start();
}

std::string JoinPath(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return StrCat(dir, "/", path);
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecJson(std::string_view text,
                                             const std::string& source_name) {
  if (text.size() > kMaxSpecBytes) {
    return Invalid(StrCat(source_name, ": ", text.size(), " bytes; the limit of a job file is ",
                          kMaxSpecBytes >> 20, " MiB (a fixed limit of ktune's job files)"));
  }
  // Our own parser first: it reports line and column for syntax errors.
  absl::StatusOr<Json> doc = ParseJson(text);
  if (!doc.ok()) {
    return Invalid(StrCat(source_name, ": not valid JSON: ", doc.status().message()));
  }
  if (!doc->is_object()) {
    return Invalid(
        StrCat(source_name, ": a job file is a JSON object, not ", Json::TypeName(doc->type())));
  }
  v1::JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &spec, options);
  if (!status.ok()) {
    // Protobuf's words for a misspelt field or enum value name neither
    // what was meant nor what is allowed.
    if (std::optional<std::string> why = ExplainJsonMismatch(*doc, *v1::JobSpec::descriptor())) {
      return Invalid(StrCat(source_name, ": ", *why));
    }
    return Invalid(StrCat(source_name, ": ", std::string(status.message())));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileContents(path);
  if (!text.ok()) return Invalid(std::string(text.status().message()));
  return ParseJobSpecJson(*text, path);
}

std::string StrategyLabel(const std::string& named, const std::string& resolved) {
  if (resolved.empty() || resolved == named) return named;
  return StrCat(named, " (", resolved, ")");
}

std::string JobSpecToJson(const v1::JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

absl::StatusOr<Objective> Objective::Create(const std::string& expression, bool maximize,
                                            std::string name, const std::vector<Parameter>& params,
                                            const Problem& problem) {
  Objective o;
  o.maximize_ = maximize;
  const std::string_view text = StripSpace(expression);
  if (text.empty() || text == "time_ms") {
    if (maximize) {
      return Invalid("objective.direction: maximising the kernel time makes no sense");
    }
    o.name_ = name.empty() ? "time_ms" : std::move(name);
    return o;
  }
  SymbolTable symbols;
  o.num_params_ = params.size();
  o.param_scalars_.resize(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    KTUNE_RETURN_IF_ERROR(symbols.AddSlot(p.name, p.type, static_cast<int>(i)));
    for (const Value& v : p.values) o.param_scalars_[i].push_back(ToScalar(v, symbols));
  }
  // The measurement's names, in slots after the parameters'.
  static constexpr const char* kMeasured[] = {"time_ms", "time_s", "energy_j", "power_w"};
  for (int k = 0; k < 4; ++k) {
    absl::Status s =
        symbols.AddSlot(kMeasured[k], ValueType::kFloat, static_cast<int>(params.size()) + k);
    if (!s.ok()) {
      return Invalid(StrCat("objective: a parameter is named ", kMeasured[k],
                            ", which the objective reserves"));
    }
  }
  for (const auto& [pname, v] : problem) {
    KTUNE_RETURN_IF_ERROR(symbols.AddConstant(pname, ValueType::kInt, IntScalar(v)));
  }
  absl::StatusOr<Expr> e = Expr::CompileAs(std::string(text), symbols, ValueType::kFloat);
  if (!e.ok()) return Invalid(StrCat("objective.expression: ", e.status().message()));
  for (int slot : e->slots()) {
    o.reads_energy_ = o.reads_energy_ || slot >= static_cast<int>(params.size()) + 2;
  }
  o.expr_ = std::make_shared<const Expr>(*std::move(e));
  o.id_ = std::string(text);
  o.name_ = name.empty() ? std::string(text) : std::move(name);
  return o;
}

std::optional<double> Objective::Compute(const Config& config, double time_ms, double energy_j,
                                         double power_w) const {
  if (!expr_) return time_ms;
  if (reads_energy_ && !(energy_j > 0 && power_w > 0)) return std::nullopt;
  std::vector<Scalar> slots(num_params_ + 4);
  for (std::size_t i = 0; i < num_params_; ++i) {
    slots[i] = param_scalars_[i][config.index[i]];
  }
  slots[num_params_] = FloatScalar(time_ms);
  slots[num_params_ + 1] = FloatScalar(time_ms / 1e3);
  slots[num_params_ + 2] = FloatScalar(energy_j);
  slots[num_params_ + 3] = FloatScalar(power_w);
  double v;
  if (!expr_->EvaluateDouble(slots.data(), &v) || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<double> Objective::Loss(const Config& config, double time_ms, double energy_j,
                                      double power_w) const {
  std::optional<double> v = Compute(config, time_ms, energy_j, power_w);
  if (v && maximize_) return -*v;
  return v;
}

absl::StatusOr<Job> ResolveJob(const v1::JobSpec& spec, const std::string& base_dir) {
  KTUNE_RETURN_IF_ERROR(CheckSpecLimits(spec));
  Job job;
  job.spec = spec;
  job.base_dir = base_dir;
  const v1::Kernel& k = spec.kernel();
  if (k.name().empty()) return Invalid("kernel.name: required");
  job.kernel_name = k.name();
  if (k.source_case() == v1::Kernel::kCode) {
    job.source = k.code();
  } else if (k.source_case() == v1::Kernel::kFile) {
    if (k.file().empty()) return Invalid("kernel.file: empty path");
    absl::StatusOr<std::string> src = ReadFileContents(JoinPath(base_dir, k.file()));
    if (!src.ok()) return Invalid(StrCat("kernel.file: ", src.status().message()));
    job.source = *std::move(src);
  }
  job.source_hash = Sha256Hex(job.source);
  if (k.parameter_passing() == v1::Kernel::TEMPLATE && k.name_expression().empty()) {
    return Invalid("kernel.name_expression: required when parameter_passing is TEMPLATE");
  }

  std::vector<Parameter> params;
  for (int i = 0; i < spec.parameters_size(); ++i) {
    KTUNE_ASSIGN_OR_RETURN(Parameter p,
                           ToParameter(spec.parameters(i), static_cast<std::size_t>(i)));
    params.push_back(std::move(p));
  }
  std::vector<NamedConstant> constants;
  for (const auto& [name, v] : spec.problem()) {
    if (!SymbolTable::IsIdentifier(name)) {
      return Invalid(StrCat("problem: '", name, "' is not a valid name"));
    }
    for (const Parameter& p : params) {
      if (p.name == name) {
        return Invalid(StrCat("problem.", name, ": the name is also a parameter"));
      }
    }
    job.problem[name] = v;
    constants.push_back(NamedConstant{name, v});
  }
  std::vector<std::string> constraints(spec.constraints().begin(), spec.constraints().end());
  for (std::size_t i = 0; i < constraints.size(); ++i) {
    if (StripSpace(constraints[i]).empty()) {
      return Invalid(StrCat("constraints[", i, "]: empty expression"));
    }
  }
  KTUNE_ASSIGN_OR_RETURN(Space space, Space::Product(params, constraints, constants));
  KTUNE_RETURN_IF_ERROR(ValidateKernelAndLaunch(spec, params, job.problem));
  KTUNE_RETURN_IF_ERROR(ValidateSettings(spec));
  const v1::Objective& obj = spec.objective();
  KTUNE_ASSIGN_OR_RETURN(
      job.objective, Objective::Create(obj.expression(), obj.direction() == v1::Objective::MAXIMIZE,
                                       obj.name(), params, job.problem));
  // An objective over the energy needs it measured.
  if (job.objective.reads_energy()) job.spec.mutable_measurement()->set_energy(true);
  if (spec.verification().reference_case() == v1::Verification::kReferenceConfig) {
    absl::StatusOr<Config> ref = space.ParseKey(spec.verification().reference_config());
    if (!ref.ok()) {
      return Invalid(StrCat("verification.reference_config: ", ref.status().message()));
    }
    if (!space.IsValid(*ref)) {
      return Invalid("verification.reference_config: the configuration violates the constraints");
    }
  }
  job.space = std::make_shared<const Space>(std::move(space));
  ApplyStrategy(spec, job);
  return job;
}

absl::StatusOr<Job> JobForRecording(const RecordedSpace& recording, const v1::JobSpec& overrides) {
  Job job;
  v1::JobSpec& spec = job.spec;
  *spec.mutable_strategy() = overrides.strategy();
  *spec.mutable_measurement() = overrides.measurement();
  *spec.mutable_device() = overrides.device();
  spec.mutable_kernel()->set_name(recording.kernel_name());
  for (const Parameter& p : recording.params()) {
    v1::Parameter* out = spec.add_parameters();
    out->set_name(p.name);
    for (const Value& v : p.values) {
      switch (v.index()) {
        case 0: out->add_ints(std::get<std::int64_t>(v)); break;
        case 1: out->add_floats(std::get<double>(v)); break;
        case 2: out->add_bools(std::get<bool>(v)); break;
        default: out->add_strings(std::get<std::string>(v)); break;
      }
    }
  }
  for (const auto& [name, v] : recording.problem()) (*spec.mutable_problem())[name] = v;
  KTUNE_RETURN_IF_ERROR(ValidateSettings(spec));
  job.kernel_name = recording.kernel_name();
  job.source_hash = Sha256Hex("");
  job.problem = recording.problem();
  KTUNE_ASSIGN_OR_RETURN(Space space, recording.ToSpace());
  job.space = std::make_shared<const Space>(std::move(space));
  ApplyStrategy(spec, job);
  return job;
}

JobBinding BindingFor(const Job& job) {
  JobBinding b;
  b.space = job.space.get();
  b.spec = job.spec.kernel().name().empty() || job.source.empty() ? nullptr : &job.spec;
  b.source = job.source;
  b.problem = job.problem;
  b.base_dir = job.base_dir;
  return b;
}

absl::StatusOr<std::int64_t> ArgumentBytes(const Job& job) {
  SymbolTable symbols;
  for (const auto& [name, v] : job.problem) {
    KTUNE_RETURN_IF_ERROR(symbols.AddConstant(name, ValueType::kInt, IntScalar(v)));
  }
  std::int64_t total = 0;
  // Adds `copies` buffers of `size` elements of `type`.
  auto add = [&](const std::string& where, const std::string& size, v1::Argument::Type type,
                 std::int64_t copies) -> absl::Status {
    absl::StatusOr<Expr> e = Expr::CompileAs(size, symbols, ValueType::kInt);
    if (!e.ok()) {
      return absl::InvalidArgumentError(
          StrCat(where, ": must depend on the problem only: ", e.status().message()));
    }
    std::int64_t elements = 0;
    if (!e->EvaluateInt(nullptr, &elements)) {
      return absl::InvalidArgumentError(StrCat(where, ": cannot be evaluated for this problem"));
    }
    std::int64_t element_bytes = 4;
    switch (type) {
      case v1::Argument::F16:
      case v1::Argument::BF16:
      case v1::Argument::I16:
      case v1::Argument::U16: element_bytes = 2; break;
      case v1::Argument::I8:
      case v1::Argument::U8: element_bytes = 1; break;
      case v1::Argument::F64:
      case v1::Argument::I64:
      case v1::Argument::U64: element_bytes = 8; break;
      default: break;
    }
    if (elements < 0 || elements > (INT64_MAX - total) / element_bytes / copies) {
      return absl::InvalidArgumentError(StrCat(where, ": ", elements, " elements"));
    }
    total += copies * elements * element_bytes;
    return absl::OkStatus();
  };
  for (int i = 0; i < job.spec.arguments_size(); ++i) {
    const v1::Argument& a = job.spec.arguments(i);
    if (a.kind_case() == v1::Argument::kConstant) {
      KTUNE_RETURN_IF_ERROR(add(StrCat("arguments[", i, "] (", a.name(), ").constant.size"),
                                a.constant().size(), a.type(), 1));
    }
    if (a.kind_case() != v1::Argument::kBuffer) continue;
    KTUNE_RETURN_IF_ERROR(add(StrCat("arguments[", i, "] (", a.name(), ").buffer.size"),
                              a.buffer().size(), a.type(), 1));
  }
  if (job.spec.measurement().rotate_inputs()) {
    // The copies of the read-only inputs (see kMaxRotationBytes).
    const std::int64_t before = total;
    for (int i = 0; i < job.spec.arguments_size(); ++i) {
      const v1::Argument& a = job.spec.arguments(i);
      if (a.kind_case() != v1::Argument::kBuffer) continue;
      const auto d = a.buffer().direction();
      if (d != v1::Buffer::INPUT && d != v1::Buffer::DIRECTION_UNSPECIFIED) continue;
      KTUNE_RETURN_IF_ERROR(add(StrCat("arguments[", i, "] (", a.name(), ").buffer.size"),
                                a.buffer().size(), a.type(), 1));
    }
    const std::int64_t inputs = total - before;
    total = before;
    if (inputs > 0 && inputs < kMaxRotationBytes) {
      total += std::min((kMaxRotationCopies - 1) * inputs, kMaxRotationBytes + inputs);
    }
  }
  const v1::LoadProfile& load = job.spec.measurement().load();
  for (int c = 0; c < load.companions_size(); ++c) {
    for (int i = 0; i < load.companions(c).arguments_size(); ++i) {
      const v1::Argument& a = load.companions(c).arguments(i);
      if (a.kind_case() != v1::Argument::kBuffer) continue;
      KTUNE_RETURN_IF_ERROR(add(StrCat("measurement.load.companions[", c, "].arguments[", i, "] (",
                                       a.name(), ").buffer.size"),
                                a.buffer().size(), a.type(), 1));
    }
  }
  // A pipeline's chunk buffers, in and out on each stream in use, take at
  // most twice the host array plus one chunk each way: bounded by four
  // times the array.
  if (job.spec.has_pipeline()) {
    KTUNE_RETURN_IF_ERROR(
        add("pipeline.elements", job.spec.pipeline().elements(), job.spec.pipeline().type(), 4));
  }
  return total;
}

std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string ComputeJobId(const Job& job, const DeviceInfo& device) {
  // The source enters through its hash and the device through its
  // identity, so a moved kernel file or a renamed recording keeps the id.
  v1::JobSpec spec = job.spec;
  spec.mutable_kernel()->clear_code();
  spec.mutable_kernel()->clear_file();
  spec.clear_device();
  const std::string bytes = DeterministicBytes(spec);
  Sha256 h;
  h.Update("ktune job v1");
  h.Update(std::string_view("\0", 1));
  h.Update(bytes);
  h.Update(std::string_view("\0", 1));
  h.Update(job.source_hash);
  h.Update(std::string_view("\0", 1));
  h.Update(device.uuid);
  return h.FinishHex().substr(0, 16);
}

}  // namespace ktune
