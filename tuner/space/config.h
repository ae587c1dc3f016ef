// Configurations, candidate outcomes and the Strategy interface: the lowest
// floor of the engine. Strategies depend on this and on Space only.
#ifndef KTUNE_TUNER_SPACE_CONFIG_H_
#define KTUNE_TUNER_SPACE_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

namespace ktune {

// A configuration: for each parameter, the index of its value in the
// parameter's value list. Value type.
struct Config {
  std::vector<std::uint32_t> index;

  friend bool operator==(const Config&, const Config&) = default;
  friend auto operator<=>(const Config&, const Config&) =
      default;  // NOLINT(modernize-use-nullptr): a clang-tidy 14 false positive
};

struct ConfigHash {
  std::size_t operator()(const Config& c) const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (std::uint32_t v : c.index) {
      h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return static_cast<std::size_t>(h);
  }
};

// How a candidate ended. Only kOk can become best.
enum class CandidateStatus : std::uint8_t {
  kOk,
  kInvalidByConstraint,
  kCompileError,
  kLaunchError,   // e.g. too many resources requested
  kRuntimeFault,  // e.g. illegal address
  kTimeout,
  kWrongResult,
};

inline constexpr int kNumCandidateStatuses = 7;

// "ok", "invalid_by_constraint", "compile_error", "launch_error",
// "runtime_fault", "timeout", "wrong_result".
const char* CandidateStatusName(CandidateStatus status);
std::optional<CandidateStatus> ParseCandidateStatus(std::string_view name);

// What a strategy learns about an evaluated configuration.
struct Outcome {
  CandidateStatus status = CandidateStatus::kOk;
  // The value to minimise (the objective, negated when maximising).
  // Meaningful only when status is kOk.
  double loss = std::numeric_limits<double>::infinity();

  bool ok() const { return status == CandidateStatus::kOk; }
};

// A search strategy, driven by ask/tell. Implementations are pure: no
// clocks, threads, files or devices; all randomness from an explicit seed,
// so a run is reproducible and can be replayed from stored results.
// Not thread-safe.
class Strategy {
 public:
  virtual ~Strategy() = default;

  // Returns up to `n` (> 0) configurations to evaluate next: valid, distinct,
  // and never one asked before. Returns fewer (or none) only when the
  // strategy has nothing left to propose.
  virtual std::vector<Config> Ask(std::size_t n) = 0;

  // Reports the outcome of a configuration returned by Ask. Every asked
  // configuration is told exactly once, failures included, in any order.
  virtual void Tell(const Config& config, const Outcome& outcome) = 0;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_SPACE_CONFIG_H_
