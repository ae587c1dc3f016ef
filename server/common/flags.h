// Command-line flags: --name VALUE, --name=VALUE, boolean --name, and
// positional arguments. Every failure names the flag.
#ifndef KTUNE_SERVER_COMMON_FLAGS_H_
#define KTUNE_SERVER_COMMON_FLAGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ktune::flags {

struct FlagSpec {
  std::string name;     // without the leading "--"
  std::string metavar;  // empty for a boolean flag
  std::string help;
  bool repeatable = false;
};

struct CommandSpec {
  std::string name;   // "tune"
  std::string usage;  // "ktune tune [SPEC.json] --local --device DEV [flags]"
  std::string summary;
  std::vector<FlagSpec> flags;
  int max_positional = 0;
};

// Parsed arguments. Value type.
class Args {
 public:
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::vector<std::string> GetAll(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help() const { return help_; }

  // Typed readers: INVALID_ARGUMENT naming the flag if malformed or out of
  // range. nullopt when absent.
  absl::StatusOr<std::optional<std::int64_t>> GetInt(const std::string& name, std::int64_t min,
                                                     std::int64_t max) const;
  absl::StatusOr<std::optional<std::uint64_t>> GetUint(const std::string& name) const;
  absl::StatusOr<std::optional<double>> GetDouble(const std::string& name, double min) const;

 private:
  friend absl::StatusOr<Args> Parse(const CommandSpec&, const std::vector<std::string>&);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses `args` (after the command name). INVALID_ARGUMENT for unknown
// flags, missing values, repeats and extra positional arguments.
absl::StatusOr<Args> Parse(const CommandSpec& spec, const std::vector<std::string>& args);

// The --help text of a command.
std::string HelpText(const CommandSpec& spec);

}  // namespace ktune::flags

#endif  // KTUNE_SERVER_COMMON_FLAGS_H_
