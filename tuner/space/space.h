// Search spaces: the configurations a job may try.
//
// A space is either a product of parameter value lists restricted by
// constraint expressions, or an explicit list of configurations (a recorded
// cache's). It is never required to be listed in full: it counts, enumerates
// lazily with early pruning, samples uniformly from the valid
// configurations and gives neighbours, without materialising the product.
#ifndef KTUNE_TUNER_SPACE_SPACE_H_
#define KTUNE_TUNER_SPACE_SPACE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/base/json.h"
#include "tuner/base/rng.h"
#include "tuner/expr/expr.h"
#include "tuner/space/config.h"
#include "tuner/space/value.h"

namespace ktune {

// A named value that constraints may read (a problem dimension).
struct NamedConstant {
  std::string name;
  std::int64_t value = 0;
};

// The result of counting a space.
struct SpaceCount {
  Uint128 count = 0;
  // False when the constraints were too entangled to count exactly within
  // the work limit; `count` is then an estimate from random sampling.
  bool exact = true;
};

// Immutable after construction; every const method may be called from
// several threads at once. Movable, not copyable.
class Space {
 public:
  // A product space. Errors (INVALID_ARGUMENT) name the parameter or the
  // constraint, with a caret under the fault in expressions: empty or
  // duplicate names, empty value lists, duplicate values, mixed types,
  // commas in string values, unknown names, type errors.
  static absl::StatusOr<Space> Product(std::vector<Parameter> params,
                                       const std::vector<std::string>& constraints,
                                       const std::vector<NamedConstant>& constants = {});

  // An explicit list of configurations over `params` (duplicates dropped,
  // order kept). REQUIRES: each index within its parameter's value list.
  static absl::StatusOr<Space> List(std::vector<Parameter> params, std::vector<Config> configs);

  Space(Space&&) noexcept;
  Space& operator=(Space&&) noexcept;
  ~Space();

  std::size_t num_params() const { return params_.size(); }
  const Parameter& param(std::size_t i) const { return params_[i]; }
  const std::vector<Parameter>& params() const { return params_; }
  std::optional<std::size_t> ParamIndex(std::string_view name) const;
  bool is_list() const { return is_list_; }
  std::size_t num_constraints() const { return constraints_.size(); }
  const std::string& constraint_text(std::size_t i) const { return constraints_[i].expr.text(); }

  // Number of raw combinations: the product of the value-list sizes.
  Uint128 RawSize() const;

  // The canonical key: values joined by commas in parameter order.
  // REQUIRES: InRange(config).
  std::string Key(const Config& config) const;
  // Parses a canonical key. INVALID_ARGUMENT names the position and
  // parameter of a value that is not in its list.
  absl::StatusOr<Config> ParseKey(std::string_view key) const;

  const Value& ValueOf(const Config& config, std::size_t param) const {
    return params_[param].values[config.index[param]];
  }
  // {"name": value, ...} in parameter order.
  Json ToJson(const Config& config) const;

  // True if the config has one in-range index per parameter.
  bool InRange(const Config& config) const;
  // True if InRange and the config is in the space (every constraint holds,
  // or it is in the list).
  bool IsValid(const Config& config) const;
  // For a product space: the first constraint that `config` violates (a
  // constraint that fails to evaluate, e.g. by division by zero, counts as
  // violated), or -1. REQUIRES: InRange(config).
  int FirstViolated(const Config& config) const;

  // Number of valid configurations. The first call does the work (dynamic
  // programming over the constraints' structure); later calls are free.
  SpaceCount Count() const;

  // Lazily enumerates the valid configurations, in product order (the last
  // parameter varies fastest) for product spaces and in list order for
  // lists. A constraint is checked as soon as the parameters it reads are
  // bound, so pruned subtrees are never visited. Holds a pointer to the
  // space, which must outlive it.
  class Enumerator {
   public:
    // Sets *config to the next valid configuration; false when done.
    bool Next(Config* config);

   private:
    friend class Space;
    explicit Enumerator(const Space* space);
    const Space* space_;
    std::vector<std::uint32_t> index_;
    std::vector<Scalar> slots_;
    int depth_ = 0;
    std::size_t list_pos_ = 0;
    bool started_ = false;
    bool done_ = false;
  };
  Enumerator Enumerate() const { return Enumerator(this); }

  // A configuration drawn uniformly from the valid ones, or nullopt if the
  // space has none. Exact when Count() is exact, otherwise by rejection.
  std::optional<Config> Sample(Rng& rng) const;

  enum class Neighbourhood {
    kAdjacent,  // one parameter moved to the previous or next value
    kHamming,   // one parameter changed to any other value
  };
  // The valid neighbours of `config`, in parameter then value order.
  std::vector<Config> Neighbours(const Config& config, Neighbourhood kind) const;

 private:
  struct Constraint {
    Expr expr;
    int level;  // highest parameter index read; -1 if constant
  };
  class Counter;

  Space();
  void FillSlots(const Config& config, Scalar* slots) const;
  bool CheckLevel(int level, const Scalar* slots) const;
  const Counter& counter() const;

  std::vector<Parameter> params_;
  std::vector<std::vector<Scalar>> scalars_;  // per param, per value
  std::size_t num_slots_ = 0;                 // params + constants
  std::vector<Scalar> constant_slots_;        // values of the constants
  std::vector<Constraint> constraints_;
  std::vector<std::vector<int>> checks_at_level_;
  bool constant_false_ = false;  // a constant constraint is false
  bool is_list_ = false;
  std::vector<Config> list_;
  std::unordered_set<Config, ConfigHash> list_set_;
  std::vector<std::unordered_map<std::string, std::uint32_t>> key_index_;

  struct Lazy;
  std::unique_ptr<Lazy> lazy_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_SPACE_SPACE_H_
