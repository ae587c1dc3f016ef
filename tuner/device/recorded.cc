#include "tuner/device/recorded.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/sha256.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {
namespace {

std::string FileStem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  for (std::string_view ext : {".gz", ".json"}) {
    if (base.size() > ext.size() && base.compare(base.size() - ext.size(), ext.size(), ext) == 0) {
      base.resize(base.size() - ext.size());
    }
  }
  return base;
}

absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(StrCat(path, ": ", what));
}

// Parses `text`; if it fails, tries the repairs that an unclosed Kernel
// Tuner cache needs (it is written one entry per line and closed only at
// the end): strip a trailing comma and close the two open objects, first as
// is, then without a partly written last line.
absl::StatusOr<Json> ParseWithRepair(std::string_view text, bool* repaired) {
  absl::StatusOr<Json> root = ParseJson(text);
  if (root.ok()) return root;
  auto attempt = [&](std::string_view body) -> std::optional<Json> {
    std::string t(StripSpace(body));
    if (!t.empty() && t.back() == ',') t.pop_back();
    t += "}}";
    absl::StatusOr<Json> r = ParseJson(t);
    if (!r.ok()) return std::nullopt;
    return *std::move(r);
  };
  if (auto r = attempt(text)) {
    *repaired = true;
    return *std::move(r);
  }
  const std::string_view trimmed = StripSpace(text);
  if (const std::size_t nl = trimmed.find_last_of('\n'); nl != std::string_view::npos) {
    if (auto r = attempt(trimmed.substr(0, nl))) {
      *repaired = true;
      return *std::move(r);
    }
  }
  return root.status();
}

// Infers a parameter's type from its JSON values and converts them.
absl::StatusOr<Parameter> ParameterFromJson(const std::string& name, const Json& list,
                                            const std::string& where) {
  if (!list.is_array() || list.as_array().empty()) {
    return absl::InvalidArgumentError(StrCat(where, ": expected a non-empty array of values"));
  }
  bool any_int = false, any_double = false, any_bool = false, any_string = false;
  for (const Json& v : list.as_array()) {
    switch (v.type()) {
      case Json::Type::kInt: any_int = true; break;
      case Json::Type::kDouble: any_double = true; break;
      case Json::Type::kBool: any_bool = true; break;
      case Json::Type::kString: any_string = true; break;
      default:
        return absl::InvalidArgumentError(
            StrCat(where, ": values must be numbers, booleans or strings, not ",
                   Json::TypeName(v.type())));
    }
  }
  const int kinds = (any_int || any_double) + any_bool + any_string;
  if (kinds != 1) {
    return absl::InvalidArgumentError(StrCat(where, ": values of mixed types are not supported"));
  }
  Parameter p;
  p.name = name;
  p.type = any_double ? ValueType::kFloat
           : any_int  ? ValueType::kInt
           : any_bool ? ValueType::kBool
                      : ValueType::kString;
  std::set<std::string> seen;
  for (const Json& v : list.as_array()) {
    Value value;
    switch (p.type) {
      case ValueType::kInt: value = v.as_int(); break;
      case ValueType::kFloat: value = v.as_double(); break;
      case ValueType::kBool: value = v.as_bool(); break;
      case ValueType::kString: value = v.as_string(); break;
    }
    if (!seen.insert(FormatValue(value)).second) {
      return absl::InvalidArgumentError(StrCat(where, ": duplicate value ", FormatValue(value)));
    }
    p.values.push_back(std::move(value));
  }
  return p;
}

// The text of a JSON value as it would appear in a key of a parameter of
// `type`, or nullopt if it cannot be such a value.
std::optional<std::string> KeyTextOf(const Json& v, ValueType type) {
  switch (type) {
    case ValueType::kInt:
      if (v.is_int()) return std::to_string(v.as_int());
      if (v.type() == Json::Type::kDouble && std::floor(v.as_double()) == v.as_double() &&
          std::fabs(v.as_double()) < 9e15) {
        return std::to_string(static_cast<std::int64_t>(v.as_double()));
      }
      return std::nullopt;
    case ValueType::kFloat:
      if (v.is_number()) return PythonFloatRepr(v.as_double());
      return std::nullopt;
    case ValueType::kBool:
      if (v.is_bool()) return v.as_bool() ? "True" : "False";
      return std::nullopt;
    case ValueType::kString:
      if (v.is_string()) return v.as_string();
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<CandidateStatus> StatusFromKernelTunerMarker(std::string_view s) {
  if (s == "InvalidConfig") return CandidateStatus::kInvalidByConstraint;
  if (s == "CompilationFailedConfig") return CandidateStatus::kCompileError;
  if (s == "RuntimeFailedConfig") return CandidateStatus::kRuntimeFault;
  if (s == "ErrorConfig") return CandidateStatus::kRuntimeFault;
  return std::nullopt;
}

double NumberOr(const Json& obj, std::string_view name, double fallback) {
  const Json* v = obj.Find(name);
  return v != nullptr && v->is_number() ? v->as_double() : fallback;
}

// Per-run times from a JSON array of numbers; empty if absent or not all
// numbers.
std::vector<double> TimesFrom(const Json* times) {
  std::vector<double> out;
  if (times == nullptr || !times->is_array()) return out;
  for (const Json& t : times->as_array()) {
    if (!t.is_number()) return {};
    out.push_back(t.as_double());
  }
  return out;
}

}  // namespace

absl::StatusOr<RecordedSpace> RecordedSpace::Load(const std::string& path) {
  KTUNE_ASSIGN_OR_RETURN(std::string contents, ReadFileContents(path));
  return Parse(path, contents);
}

absl::StatusOr<RecordedSpace> RecordedSpace::Parse(const std::string& path,
                                                   std::string_view contents) {
  RecordedSpace rs;
  rs.path_ = path;
  rs.content_hash_ = Sha256Hex(contents);
  absl::StatusOr<Json> root = ParseWithRepair(contents, &rs.repaired_);
  if (!root.ok()) {
    return Invalid(path, StrCat("not valid JSON: ", root.status().message()));
  }
  if (!root->is_object()) {
    return Invalid(path, "expected a JSON object at the top level");
  }
  if (root->Find("cache") != nullptr) {
    rs.format_ = Format::kKernelTunerCache;
    KTUNE_RETURN_IF_ERROR(rs.ParseKernelTuner(*root));
  } else if (root->Find("results") != nullptr) {
    rs.format_ = Format::kT4;
    KTUNE_RETURN_IF_ERROR(rs.ParseT4(*root));
  } else {
    return Invalid(path,
                   "neither a Kernel Tuner cache (no \"cache\" member) nor a "
                   "T4 results file (no \"results\" member)");
  }
  if (rs.device_name_.empty()) {
    rs.device_name_ = StrCat("unnamed device (", FileStem(path), ")");
  }
  KTUNE_RETURN_IF_ERROR(rs.Index());
  return rs;
}

absl::Status RecordedSpace::ParseKernelTuner(const Json& root) {
  const std::string& path = path_;
  if (const Json* d = root.Find("device_name"); d != nullptr && d->is_string()) {
    device_name_ = d->as_string();
  }
  if (const Json* k = root.Find("kernel_name"); k != nullptr && k->is_string()) {
    kernel_name_ = k->as_string();
  }
  if (kernel_name_.empty()) kernel_name_ = FileStem(path);
  if (const Json* ps = root.Find("problem_size"); ps != nullptr) {
    static constexpr const char* kDims[] = {"x", "y", "z"};
    std::vector<Json> dims;
    if (ps->is_array()) {
      dims = ps->as_array();
    } else if (ps->is_number()) {
      dims.push_back(*ps);
    }
    for (std::size_t i = 0; i < dims.size(); ++i) {
      if (!dims[i].is_int()) {
        return Invalid(path, StrCat("problem_size[", i, "]: expected an integer"));
      }
      problem_[i < 3 ? StrCat("problem_size_", kDims[i]) : StrCat("problem_size_", i)] =
          dims[i].as_int();
    }
  }
  const Json* keys = root.Find("tune_params_keys");
  const Json* tune_params = root.Find("tune_params");
  if (keys == nullptr || !keys->is_array() || keys->as_array().empty()) {
    return Invalid(path, "tune_params_keys: expected a non-empty array of names");
  }
  if (tune_params == nullptr || !tune_params->is_object()) {
    return Invalid(path, "tune_params: expected an object of value lists");
  }
  for (std::size_t i = 0; i < keys->as_array().size(); ++i) {
    const Json& k = keys->as_array()[i];
    if (!k.is_string()) {
      return Invalid(path, StrCat("tune_params_keys[", i, "]: expected a string"));
    }
    const Json* list = tune_params->Find(k.as_string());
    if (list == nullptr) {
      return Invalid(path, StrCat("tune_params: no values for parameter '", k.as_string(),
                                  "' named in tune_params_keys"));
    }
    absl::StatusOr<Parameter> p = ParameterFromJson(
        k.as_string(), *list, StrCat(path, ": tune_params[\"", k.as_string(), "\"]"));
    if (!p.ok()) return p.status();
    params_.push_back(*std::move(p));
  }
  if (const Json* obj = root.Find("objective");
      obj != nullptr && !(obj->is_string() && obj->as_string() == "time") &&
      !(obj->is_array() && !obj->as_array().empty() && obj->as_array()[0].is_string() &&
        obj->as_array()[0].as_string() == "time")) {
    return Invalid(path, "objective: only \"time\" is supported");
  }
  const Json* cache = root.Find("cache");
  if (!cache->is_object()) {
    return Invalid(path, "cache: expected an object of entries");
  }
  std::vector<std::unordered_map<std::string, std::uint32_t>> lookup(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t j = 0; j < params_[i].values.size(); ++j) {
      lookup[i].emplace(FormatValue(params_[i].values[j]), static_cast<std::uint32_t>(j));
    }
  }
  entries_.reserve(cache->as_object().size());
  for (const auto& [key, entry] : cache->as_object()) {
    const std::string where = StrCat("cache[\"", key, "\"]");
    if (!entry.is_object()) return Invalid(path, StrCat(where, ": expected an object"));
    RecordedEntry e;
    e.config.index.resize(params_.size());
    const std::vector<std::string> key_parts = StrSplit(key, ',');
    for (std::size_t i = 0; i < params_.size(); ++i) {
      std::optional<std::string> text;
      if (const Json* v = entry.Find(params_[i].name)) {
        text = KeyTextOf(*v, params_[i].type);
      } else if (key_parts.size() == params_.size()) {
        text = key_parts[i];
      }
      auto it = text ? lookup[i].find(*text) : lookup[i].end();
      if (it == lookup[i].end()) {
        return Invalid(path, StrCat(where, ".", params_[i].name,
                                    ": missing or not one of the parameter's values"));
      }
      e.config.index[i] = it->second;
    }
    const Json* time = entry.Find("time");
    Measurement& m = e.measurement;
    if (time != nullptr && time->is_number()) {
      m.status = CandidateStatus::kOk;
      m.time = Millis(time->as_double());
      if (!std::isfinite(time->as_double()) || time->as_double() < 0) {
        return Invalid(path, StrCat(where, ".time: not a valid time"));
      }
      m.stats = ComputeStats(TimesFrom(entry.Find("times")));
    } else if (time != nullptr && time->is_string()) {
      // ktune's own export keeps its status beside Kernel Tuner's marker.
      std::optional<CandidateStatus> s = StatusFromKernelTunerMarker(time->as_string());
      if (const Json* own = entry.Find("ktune_status"); s && own != nullptr && own->is_string()) {
        if (std::optional<CandidateStatus> k = ParseCandidateStatus(own->as_string());
            k && *k != CandidateStatus::kOk) {
          s = k;
        }
      }
      if (!s) {
        return Invalid(path,
                       StrCat(where, ".time: unknown failure marker \"", time->as_string(), "\""));
      }
      m.status = *s;
      m.message = StrCat("recorded as ", time->as_string());
    } else {
      return Invalid(path, StrCat(where, ".time: expected a number or a failure marker"));
    }
    m.compile_time = Millis(NumberOr(entry, "compile_time", 0));
    m.cost = Millis(NumberOr(entry, "compile_time", 0) + NumberOr(entry, "verification_time", 0) +
                    NumberOr(entry, "benchmark_time", 0) + NumberOr(entry, "framework_time", 0));
    entries_.push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status RecordedSpace::ParseT4(const Json& root) {
  const std::string& path = path_;
  kernel_name_ = FileStem(path);
  const Json* results = root.Find("results");
  if (!results->is_array() || results->as_array().empty()) {
    return Invalid(path, "results: expected a non-empty array");
  }
  const auto& items = results->as_array();
  const Json* first = items[0].is_object() ? items[0].Find("configuration") : nullptr;
  if (first == nullptr || !first->is_object() || first->as_object().empty()) {
    return Invalid(path, "results[0].configuration: expected an object");
  }
  // Parameter order from the first configuration, value lists from the
  // union of all configurations.
  std::vector<std::string> names;
  for (const auto& [name, v] : first->as_object()) names.push_back(name);
  std::vector<Json> lists(names.size(), Json::MakeArray());
  std::vector<std::set<std::string>> seen(names.size());
  for (std::size_t r = 0; r < items.size(); ++r) {
    const Json* c = items[r].is_object() ? items[r].Find("configuration") : nullptr;
    if (c == nullptr || !c->is_object()) {
      return Invalid(path, StrCat("results[", r, "].configuration: expected an object"));
    }
    for (std::size_t i = 0; i < names.size(); ++i) {
      const Json* v = c->Find(names[i]);
      if (v == nullptr) {
        return Invalid(path, StrCat("results[", r, "].configuration: missing '", names[i], "'"));
      }
      if (seen[i].insert(v->Dump()).second) lists[i].Push(*v);
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& a = lists[i].as_array();
    // Numbers ascending (as a value list would be written); others as seen.
    if (std::all_of(a.begin(), a.end(), [](const Json& j) { return j.is_number(); })) {
      std::stable_sort(a.begin(), a.end(),
                       [](const Json& x, const Json& y) { return x.as_double() < y.as_double(); });
    }
    absl::StatusOr<Parameter> p =
        ParameterFromJson(names[i], lists[i], StrCat(path, ": values of '", names[i], "'"));
    if (!p.ok()) return p.status();
    params_.push_back(*std::move(p));
  }
  std::vector<std::unordered_map<std::string, std::uint32_t>> lookup(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t j = 0; j < params_[i].values.size(); ++j) {
      lookup[i].emplace(FormatValue(params_[i].values[j]), static_cast<std::uint32_t>(j));
    }
  }
  entries_.reserve(items.size());
  for (std::size_t r = 0; r < items.size(); ++r) {
    const Json& item = items[r];
    const std::string where = StrCat("results[", r, "]");
    const Json& c = *item.Find("configuration");
    RecordedEntry e;
    e.config.index.resize(params_.size());
    for (std::size_t i = 0; i < params_.size(); ++i) {
      std::optional<std::string> text = KeyTextOf(*c.Find(names[i]), params_[i].type);
      e.config.index[i] = lookup[i].at(*text);
    }
    Measurement& m = e.measurement;
    const Json* invalidity = item.Find("invalidity");
    const std::string inv =
        invalidity != nullptr && invalidity->is_string() ? invalidity->as_string() : "";
    const Json* value = nullptr;
    if (const Json* ms = item.Find("measurements"); ms != nullptr && ms->is_array()) {
      for (const Json& mj : ms->as_array()) {
        const Json* n = mj.is_object() ? mj.Find("name") : nullptr;
        if (n != nullptr && n->is_string() && n->as_string() == "time") {
          value = mj.Find("value");
        }
      }
    }
    if (inv == "correct") {
      if (value == nullptr || !value->is_number() || !std::isfinite(value->as_double())) {
        return Invalid(path, StrCat(where,
                                    ".measurements: no numeric \"time\" "
                                    "for a correct configuration"));
      }
      m.status = CandidateStatus::kOk;
      m.time = Millis(value->as_double());
    } else if (inv == "compile") {
      m.status = CandidateStatus::kCompileError;
    } else if (inv == "runtime") {
      m.status = CandidateStatus::kRuntimeFault;
    } else if (inv == "timeout") {
      m.status = CandidateStatus::kTimeout;
    } else if (inv == "correctness") {
      m.status = CandidateStatus::kWrongResult;
    } else if (inv == "constraints") {
      m.status = CandidateStatus::kInvalidByConstraint;
    } else {
      return Invalid(path, StrCat(where, ".invalidity: unknown value \"", inv, "\""));
    }
    if (!m.ok()) m.message = StrCat("recorded as invalidity \"", inv, "\"");
    const Json* times = item.Find("times");
    if (times != nullptr && times->is_object()) {
      const std::vector<double> runtimes = TimesFrom(times->Find("runtimes"));
      if (m.ok()) m.stats = ComputeStats(runtimes);
      double bench = 0;
      for (double t : runtimes) bench += t;
      m.compile_time = Millis(NumberOr(*times, "compilation", 0));
      m.cost = Millis(NumberOr(*times, "compilation", 0) + NumberOr(*times, "validation", 0) +
                      NumberOr(*times, "framework", 0) + bench);
    }
    entries_.push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status RecordedSpace::Index() {
  by_key_.reserve(entries_.size());
  std::vector<RecordedEntry> unique;
  unique.reserve(entries_.size());
  for (RecordedEntry& e : entries_) {
    std::string key;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (i > 0) key.push_back(',');
      key += FormatValue(params_[i].values[e.config.index[i]]);
    }
    if (by_key_.emplace(std::move(key), unique.size()).second) {
      unique.push_back(std::move(e));
    }
  }
  entries_ = std::move(unique);
  if (entries_.empty()) return Invalid(path_, "no recorded configurations");
  return absl::OkStatus();
}

const RecordedEntry* RecordedSpace::Find(std::string_view key) const {
  auto it = by_key_.find(std::string(key));
  return it == by_key_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<Space> RecordedSpace::ToSpace() const {
  std::vector<Config> configs;
  configs.reserve(entries_.size());
  for (const RecordedEntry& e : entries_) configs.push_back(e.config);
  absl::StatusOr<Space> space = Space::List(params_, std::move(configs));
  if (!space.ok()) {
    return Invalid(path_, std::string(space.status().message()));
  }
  return space;
}

}  // namespace ktune
