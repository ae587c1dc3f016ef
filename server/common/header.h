// The best configuration as a C/C++ header, for build systems.
#ifndef KTUNE_SERVER_COMMON_HEADER_H_
#define KTUNE_SERVER_COMMON_HEADER_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/store/store.h"

namespace ktune {

enum class HeaderStyle {
  kDefine,     // #define name value: what ktune itself compiles with
  kConstexpr,  // inline constexpr values in namespace ktune_tuned::KERNEL
};

struct HeaderInput {
  std::string kernel;
  DeviceInfo device;
  Problem problem;
  std::string job_id;
  std::string key;
  std::string config_json;  // {"name": value, ...}, in parameter order
  double time_ms = 0;
  std::string objective = "time";
  std::optional<double> objective_value;
  std::string match;  // how a lookup found it ("exact", ...); empty: tuned now
};

// The header's text. INVALID_ARGUMENT when a parameter name is not a C
// identifier or the configuration is not a JSON object.
absl::StatusOr<std::string> BestConfigHeader(const HeaderInput& in, HeaderStyle style);

}  // namespace ktune

#endif  // KTUNE_SERVER_COMMON_HEADER_H_
