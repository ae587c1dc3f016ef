#include "tuner/space/space.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {

const char* CandidateStatusName(CandidateStatus status) {
  switch (status) {
    case CandidateStatus::kOk: return "ok";
    case CandidateStatus::kInvalidByConstraint: return "invalid_by_constraint";
    case CandidateStatus::kCompileError: return "compile_error";
    case CandidateStatus::kLaunchError: return "launch_error";
    case CandidateStatus::kRuntimeFault: return "runtime_fault";
    case CandidateStatus::kTimeout: return "timeout";
    case CandidateStatus::kWrongResult: return "wrong_result";
  }
  return "?";
}

std::optional<CandidateStatus> ParseCandidateStatus(std::string_view name) {
  for (int i = 0; i < kNumCandidateStatuses; ++i) {
    const auto s = static_cast<CandidateStatus>(i);
    if (name == CandidateStatusName(s)) return s;
  }
  return std::nullopt;
}

// ------------------------------------------------------------------ Counter

// Counts valid configurations by dynamic programming along a parameter
// order: the number of valid completions of a partial configuration depends
// only on the bound parameters that constraints not yet decided still read
// (the frontier), so counts are memoised per frontier state. With local
// constraints the frontier is small and a space of 10^9 raw combinations is
// counted in milliseconds; sampling then walks the same tables, weighting
// each value by its number of completions, which is exactly uniform.
class Space::Counter {
 public:
  explicit Counter(const Space& space) {
    const std::size_t n = space.num_params();
    if (space.is_list_) {
      total_ = space.list_.size();
      return;
    }
    if (space.constant_false_) {
      total_ = 0;
      return;
    }
    ChooseOrder(space);
    std::vector<Scalar> slots(space.num_slots_);
    std::vector<std::uint32_t> idx(n, 0);
    memo_.resize(n + 1);
    if (exact_) {
      total_ = CountFrom(space, 0, slots.data(), idx.data());
      if (aborted_) exact_ = false;
    }
    if (!exact_) {
      memo_.clear();
      Estimate(space);
    }
  }

  const SpaceCount& result() const { return result_; }

  std::optional<Config> Sample(const Space& space, Rng& rng) const {
    const std::size_t n = space.num_params();
    if (space.is_list_) {
      if (space.list_.empty()) return std::nullopt;
      return space.list_[rng.Uniform(space.list_.size())];
    }
    if (total_ == 0 && exact_) return std::nullopt;
    if (!exact_) return SampleByRejection(space, rng);
    std::vector<Scalar> slots(space.num_slots_);
    Config config;
    config.index.assign(n, 0);
    Uint128 weights_total = total_;
    for (std::size_t p = 0; p < n; ++p) {
      const int param = order_[p];
      Uint128 r = rng.Uniform128(weights_total);
      const auto dom =
          static_cast<std::uint32_t>(space.params_[static_cast<std::size_t>(param)].values.size());
      bool chosen = false;
      for (std::uint32_t v = 0; v < dom; ++v) {
        config.index[static_cast<std::size_t>(param)] = v;
        slots[static_cast<std::size_t>(param)] = space.scalars_[static_cast<std::size_t>(param)][v];
        if (!Holds(space, p, slots.data())) continue;
        const Uint128 w = Lookup(p + 1, config.index.data());
        if (r < w) {
          weights_total = w;
          chosen = true;
          break;
        }
        r -= w;
      }
      if (!chosen) return std::nullopt;  // unreachable when tables are exact
    }
    return config;
  }

 private:
  static constexpr std::size_t kMaxWork = 30'000'000;

  void ChooseOrder(const Space& space) {
    const std::size_t n = space.num_params();
    const std::size_t c = space.constraints_.size();
    // Which parameters each constraint reads.
    std::vector<std::vector<int>> reads(c);
    for (std::size_t i = 0; i < c; ++i) reads[i] = space.constraints_[i].expr.slots();
    std::vector<bool> placed(n, false);
    std::vector<bool> done(c, false);
    for (std::size_t i = 0; i < c; ++i) done[i] = reads[i].empty();
    completes_at_.assign(n, {});
    frontier_.assign(n + 1, {});
    auto frontier_of = [&](const std::vector<bool>& in) {
      std::set<int> f;
      for (std::size_t i = 0; i < c; ++i) {
        bool all = true;
        for (int s : reads[i]) all = all && in[static_cast<std::size_t>(s)];
        if (all) continue;
        for (int s : reads[i]) {
          if (in[static_cast<std::size_t>(s)]) f.insert(s);
        }
      }
      return std::vector<int>(f.begin(), f.end());
    };
    for (std::size_t p = 0; p < n; ++p) {
      int best = -1;
      double best_cost = 0;
      for (std::size_t q = 0; q < n; ++q) {
        if (placed[q]) continue;
        std::vector<bool> in = placed;
        in[q] = true;
        double cost = 1;
        for (int s : frontier_of(in)) {
          cost *= static_cast<double>(space.params_[static_cast<std::size_t>(s)].values.size());
        }
        if (best < 0 || cost < best_cost) {
          best = static_cast<int>(q);
          best_cost = cost;
        }
      }
      placed[static_cast<std::size_t>(best)] = true;
      order_.push_back(best);
      for (std::size_t i = 0; i < c; ++i) {
        if (done[i]) continue;
        bool all = true;
        for (int s : reads[i]) all = all && placed[static_cast<std::size_t>(s)];
        if (all) {
          done[i] = true;
          completes_at_[p].push_back(static_cast<int>(i));
        }
      }
      frontier_[p + 1] = frontier_of(placed);
    }
    // Mixed-radix encoding of each frontier state into 64 bits.
    radix_.assign(n + 1, {});
    for (std::size_t p = 0; p <= n; ++p) {
      std::uint64_t mult = 1;
      for (int s : frontier_[p]) {
        radix_[p].push_back(mult);
        const std::uint64_t d = space.params_[static_cast<std::size_t>(s)].values.size();
        if (__builtin_mul_overflow(mult, d, &mult)) {
          exact_ = false;
          return;
        }
      }
    }
  }

  std::uint64_t Encode(std::size_t p, const std::uint32_t* idx) const {
    std::uint64_t key = 0;
    const std::vector<int>& f = frontier_[p];
    for (std::size_t i = 0; i < f.size(); ++i) {
      key += radix_[p][i] * idx[f[i]];
    }
    return key;
  }

  bool Holds(const Space& space, std::size_t p, const Scalar* slots) const {
    for (int ci : completes_at_[p]) {
      bool ok = false;
      if (!space.constraints_[static_cast<std::size_t>(ci)].expr.EvaluateBool(slots, &ok) || !ok) {
        return false;
      }
    }
    return true;
  }

  Uint128 Lookup(std::size_t p, const std::uint32_t* idx) const {
    if (p == order_.size()) return 1;
    auto it = memo_[p].find(Encode(p, idx));
    return it == memo_[p].end() ? 0 : it->second;
  }

  Uint128 CountFrom(const Space& space, std::size_t p, Scalar* slots, std::uint32_t* idx) {
    if (p == order_.size()) return 1;
    const std::uint64_t key = Encode(p, idx);
    auto& memo = memo_[p];
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    const auto param = static_cast<std::size_t>(order_[p]);
    const auto dom = static_cast<std::uint32_t>(space.params_[param].values.size());
    work_ += dom;
    if (work_ > kMaxWork) {
      aborted_ = true;
      return 0;
    }
    Uint128 sum = 0;
    for (std::uint32_t v = 0; v < dom; ++v) {
      idx[param] = v;
      slots[param] = space.scalars_[param][v];
      if (!Holds(space, p, slots)) continue;
      sum += CountFrom(space, p + 1, slots, idx);
      if (aborted_) return 0;
    }
    memo.emplace(key, sum);
    return sum;
  }

  void Estimate(const Space& space) {
    Rng rng(0x6b74756e65);  // fixed: the estimate is reproducible
    constexpr int kDraws = 200000;
    int hits = 0;
    for (int i = 0; i < kDraws; ++i) {
      if (DrawRaw(space, rng).has_value()) ++hits;
    }
    const double fraction = static_cast<double>(hits) / kDraws;
    const double raw = static_cast<double>(space.RawSize());
    total_ = static_cast<Uint128>(std::llround(fraction * raw));
    result_ = SpaceCount{total_, false};
  }

  static std::optional<Config> DrawRaw(const Space& space, Rng& rng) {
    Config c;
    c.index.resize(space.num_params());
    for (std::size_t i = 0; i < c.index.size(); ++i) {
      c.index[i] = static_cast<std::uint32_t>(rng.Uniform(space.params_[i].values.size()));
    }
    if (space.FirstViolated(c) >= 0) return std::nullopt;
    return c;
  }

  static std::optional<Config> SampleByRejection(const Space& space, Rng& rng) {
    for (int attempt = 0; attempt < 10'000'000; ++attempt) {
      if (auto c = DrawRaw(space, rng)) return c;
    }
    return std::nullopt;
  }

 public:
  void Finish() {
    if (exact_) result_ = SpaceCount{total_, true};
  }

 private:
  std::vector<int> order_;
  std::vector<std::vector<int>> completes_at_;
  std::vector<std::vector<int>> frontier_;
  std::vector<std::vector<std::uint64_t>> radix_;
  std::vector<std::unordered_map<std::uint64_t, Uint128>> memo_;
  Uint128 total_ = 0;
  bool exact_ = true;
  bool aborted_ = false;
  std::size_t work_ = 0;
  SpaceCount result_;
};

struct Space::Lazy {
  std::once_flag once;
  std::unique_ptr<Counter> counter;
};

// ------------------------------------------------------------------ Space

Space::Space() : lazy_(std::make_unique<Lazy>()) {}
Space::Space(Space&&) noexcept = default;
Space& Space::operator=(Space&&) noexcept = default;
Space::~Space() = default;

namespace {

absl::Status CheckParameters(const std::vector<Parameter>& params) {
  if (params.empty()) {
    return absl::InvalidArgumentError("parameters: at least one parameter is needed");
  }
  std::set<std::string, std::less<>> names;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    const std::string where = StrCat("parameters[", i, "]");
    if (!SymbolTable::IsIdentifier(p.name)) {
      return absl::InvalidArgumentError(
          StrCat(where, ".name: '", p.name,
                 "' is not a valid name (letters, digits and _, not starting with a "
                 "digit, not a keyword)"));
    }
    if (!names.insert(p.name).second) {
      return absl::InvalidArgumentError(StrCat(where, ".name: duplicate parameter '", p.name, "'"));
    }
    if (p.values.empty()) {
      return absl::InvalidArgumentError(StrCat(where, " (", p.name, "): empty value list"));
    }
    if (p.values.size() > std::numeric_limits<std::uint32_t>::max()) {
      return absl::InvalidArgumentError(StrCat(where, " (", p.name, "): too many values"));
    }
    std::set<std::string> seen;
    for (std::size_t j = 0; j < p.values.size(); ++j) {
      const Value& v = p.values[j];
      if (TypeOf(v) != p.type) {
        return absl::InvalidArgumentError(StrCat(where, " (", p.name, "): value ", j, " is a ",
                                                 ValueTypeName(TypeOf(v)), " in a list of ",
                                                 ValueTypeName(p.type)));
      }
      const std::string text = FormatValue(v);
      if (p.type == ValueType::kString && text.find(',') != std::string::npos) {
        return absl::InvalidArgumentError(
            StrCat(where, " (", p.name, "): value '", text,
                   "' contains a comma, which configuration keys use as separator"));
      }
      if (p.type == ValueType::kFloat && !std::isfinite(std::get<double>(v))) {
        return absl::InvalidArgumentError(
            StrCat(where, " (", p.name, "): value ", j, " (", text, ") is not finite"));
      }
      if (!seen.insert(text).second) {
        return absl::InvalidArgumentError(StrCat(where, " (", p.name, "): duplicate value ", text));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Space> Space::Product(std::vector<Parameter> params,
                                     const std::vector<std::string>& constraints,
                                     const std::vector<NamedConstant>& constants) {
  if (absl::Status s = CheckParameters(params); !s.ok()) return s;
  Space space;
  space.params_ = std::move(params);
  const std::size_t n = space.params_.size();
  SymbolTable symbols;
  for (std::size_t i = 0; i < n; ++i) {
    const Parameter& p = space.params_[i];
    // Cannot fail: names were checked above.
    (void)symbols.AddSlot(p.name, p.type, static_cast<int>(i));
  }
  for (const NamedConstant& c : constants) {
    if (absl::Status s = symbols.AddConstant(c.name, ValueType::kInt, IntScalar(c.value));
        !s.ok()) {
      return absl::InvalidArgumentError(StrCat("problem: ", s.message()));
    }
  }
  space.scalars_.resize(n);
  space.key_index_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < space.params_[i].values.size(); ++j) {
      const Value& v = space.params_[i].values[j];
      space.scalars_[i].push_back(ToScalar(v, symbols));
      space.key_index_[i].emplace(FormatValue(v), static_cast<std::uint32_t>(j));
    }
  }
  space.num_slots_ = n;
  space.checks_at_level_.assign(n, {});
  for (std::size_t i = 0; i < constraints.size(); ++i) {
    absl::StatusOr<Expr> e = Expr::CompileAs(constraints[i], symbols, ValueType::kBool);
    if (!e.ok()) {
      return absl::InvalidArgumentError(StrCat("constraints[", i, "]: ", e.status().message()));
    }
    const int level = e->slots().empty() ? -1 : e->slots().back();
    if (level < 0) {
      bool holds = false;
      e->EvaluateBool(nullptr, &holds);
      if (!holds) space.constant_false_ = true;
    } else {
      space.checks_at_level_[static_cast<std::size_t>(level)].push_back(
          static_cast<int>(space.constraints_.size()));
    }
    space.constraints_.push_back(Constraint{*std::move(e), level});
  }
  return space;
}

absl::StatusOr<Space> Space::List(std::vector<Parameter> params, std::vector<Config> configs) {
  if (absl::Status s = CheckParameters(params); !s.ok()) return s;
  Space space;
  space.params_ = std::move(params);
  space.is_list_ = true;
  const std::size_t n = space.params_.size();
  space.key_index_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < space.params_[i].values.size(); ++j) {
      space.key_index_[i].emplace(FormatValue(space.params_[i].values[j]),
                                  static_cast<std::uint32_t>(j));
    }
  }
  space.list_.reserve(configs.size());
  for (std::size_t k = 0; k < configs.size(); ++k) {
    Config& c = configs[k];
    if (!space.InRange(c)) {
      return absl::InvalidArgumentError(
          StrCat("configuration ", k, " is out of range of the parameters"));
    }
    if (space.list_set_.insert(c).second) space.list_.push_back(std::move(c));
  }
  return space;
}

std::optional<std::size_t> Space::ParamIndex(std::string_view name) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return i;
  }
  return std::nullopt;
}

Uint128 Space::RawSize() const {
  Uint128 size = 1;
  const Uint128 cap = ~static_cast<Uint128>(0);
  for (const Parameter& p : params_) {
    const Uint128 d = p.values.size();
    size = size > cap / d ? cap : size * d;
  }
  return size;
}

std::string Space::Key(const Config& config) const {
  std::string key;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (i > 0) key.push_back(',');
    key += FormatValue(ValueOf(config, i));
  }
  return key;
}

absl::StatusOr<Config> Space::ParseKey(std::string_view key) const {
  const std::vector<std::string> parts = StrSplit(key, ',');
  if (parts.size() != params_.size()) {
    return absl::InvalidArgumentError(
        StrCat("key '", key, "' has ", parts.size(), " value", parts.size() == 1 ? "" : "s",
               ", the space has ", params_.size(), " parameter", params_.size() == 1 ? "" : "s"));
  }
  Config c;
  c.index.resize(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto it = key_index_[i].find(parts[i]);
    if (it == key_index_[i].end()) {
      return absl::InvalidArgumentError(StrCat("key '", key, "': value '", parts[i],
                                               "' at position ", i + 1,
                                               " is not a value of parameter ", params_[i].name));
    }
    c.index[i] = it->second;
  }
  return c;
}

Json Space::ToJson(const Config& config) const {
  Json out = Json::MakeObject();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.Set(params_[i].name, ValueToJson(ValueOf(config, i)));
  }
  return out;
}

bool Space::InRange(const Config& config) const {
  if (config.index.size() != params_.size()) return false;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (config.index[i] >= params_[i].values.size()) return false;
  }
  return true;
}

void Space::FillSlots(const Config& config, Scalar* slots) const {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    slots[i] = scalars_[i][config.index[i]];
  }
}

bool Space::CheckLevel(int level, const Scalar* slots) const {
  for (int ci : checks_at_level_[static_cast<std::size_t>(level)]) {
    bool ok = false;
    if (!constraints_[static_cast<std::size_t>(ci)].expr.EvaluateBool(slots, &ok) || !ok) {
      return false;
    }
  }
  return true;
}

int Space::FirstViolated(const Config& config) const {
  if (is_list_) return -1;
  std::vector<Scalar> slots(num_slots_);
  FillSlots(config, slots.data());
  for (std::size_t i = 0; i < constraints_.size(); ++i) {
    bool ok = false;
    if (!constraints_[i].expr.EvaluateBool(slots.data(), &ok) || !ok) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool Space::IsValid(const Config& config) const {
  if (!InRange(config)) return false;
  if (is_list_) return list_set_.count(config) > 0;
  if (constant_false_) return false;
  return FirstViolated(config) < 0;
}

const Space::Counter& Space::counter() const {
  std::call_once(lazy_->once, [this] {
    lazy_->counter = std::make_unique<Counter>(*this);
    lazy_->counter->Finish();
  });
  return *lazy_->counter;
}

SpaceCount Space::Count() const { return counter().result(); }

std::optional<Config> Space::Sample(Rng& rng) const { return counter().Sample(*this, rng); }

std::vector<Config> Space::Neighbours(const Config& config, Neighbourhood kind) const {
  std::vector<Config> out;
  if (!InRange(config)) return out;
  Config c = config;
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const auto dom = static_cast<std::uint32_t>(params_[p].values.size());
    const std::uint32_t own = config.index[p];
    auto consider = [&](std::uint32_t v) {
      c.index[p] = v;
      if (IsValid(c)) out.push_back(c);
    };
    if (kind == Neighbourhood::kAdjacent) {
      if (own > 0) consider(own - 1);
      if (own + 1 < dom) consider(own + 1);
    } else {
      for (std::uint32_t v = 0; v < dom; ++v) {
        if (v != own) consider(v);
      }
    }
    c.index[p] = own;
  }
  return out;
}

// ------------------------------------------------------------------ Enumerator

Space::Enumerator::Enumerator(const Space* space)
    : space_(space), index_(space->num_params(), 0), slots_(space->num_slots_) {}

bool Space::Enumerator::Next(Config* config) {
  if (done_) return false;
  if (space_->is_list_) {
    if (list_pos_ >= space_->list_.size()) {
      done_ = true;
      return false;
    }
    *config = space_->list_[list_pos_++];
    return true;
  }
  const int n = static_cast<int>(space_->num_params());
  if (space_->constant_false_) {
    done_ = true;
    return false;
  }
  int d;
  if (!started_) {
    started_ = true;
    d = 0;
    index_[0] = 0;
  } else {
    d = n - 1;
    ++index_[static_cast<std::size_t>(d)];
  }
  while (true) {
    const auto du = static_cast<std::size_t>(d);
    if (index_[du] >= space_->params_[du].values.size()) {
      if (d == 0) {
        done_ = true;
        return false;
      }
      --d;
      ++index_[static_cast<std::size_t>(d)];
      continue;
    }
    slots_[du] = space_->scalars_[du][index_[du]];
    if (!space_->CheckLevel(d, slots_.data())) {
      ++index_[du];
      continue;
    }
    if (d == n - 1) {
      config->index = index_;
      return true;
    }
    ++d;
    index_[static_cast<std::size_t>(d)] = 0;
  }
}

}  // namespace ktune
