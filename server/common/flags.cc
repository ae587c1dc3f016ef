#include "server/common/flags.h"

#include <charconv>
#include <cmath>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune::flags {

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

absl::StatusOr<std::optional<std::int64_t>> Args::GetInt(const std::string& name, std::int64_t min,
                                                         std::int64_t max) const {
  std::optional<std::string> v = Get(name);
  if (!v) return std::optional<std::int64_t>();
  std::int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  const bool whole = p == v->data() + v->size();
  if (whole && ec == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(
        StrCat("--", name, ": ", *v, " is out of range [", min, ", ", max, "]"));
  }
  if (ec != std::errc() || !whole) {
    return absl::InvalidArgumentError(StrCat("--", name, ": '", *v, "' is not an integer"));
  }
  if (out < min || out > max) {
    return absl::InvalidArgumentError(
        StrCat("--", name, ": ", out, " is out of range [", min, ", ", max, "]"));
  }
  return std::optional<std::int64_t>(out);
}

absl::StatusOr<std::optional<std::uint64_t>> Args::GetUint(const std::string& name) const {
  std::optional<std::string> v = Get(name);
  if (!v) return std::optional<std::uint64_t>();
  std::uint64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  const bool whole = p == v->data() + v->size();
  if (whole && ec == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(
        StrCat("--", name, ": ", *v, " is larger than ", std::uint64_t{UINT64_MAX}));
  }
  if (ec != std::errc() || !whole) {
    return absl::InvalidArgumentError(
        StrCat("--", name, ": '", *v, "' is not a non-negative integer"));
  }
  return std::optional<std::uint64_t>(out);
}

absl::StatusOr<std::optional<double>> Args::GetDouble(const std::string& name, double min) const {
  std::optional<std::string> v = Get(name);
  if (!v) return std::optional<double>();
  double out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  const bool whole = p == v->data() + v->size();
  if (whole && ec == std::errc::result_out_of_range) {
    return absl::InvalidArgumentError(StrCat("--", name, ": ", *v, " is out of range"));
  }
  if (ec != std::errc() || !whole || !std::isfinite(out)) {
    return absl::InvalidArgumentError(StrCat("--", name, ": '", *v, "' is not a number"));
  }
  if (out < min) {
    return absl::InvalidArgumentError(StrCat("--", name, ": ", *v, " is below ", min));
  }
  return std::optional<double>(out);
}

absl::StatusOr<Args> Parse(const CommandSpec& spec, const std::vector<std::string>& args) {
  Args out;
  bool only_positional = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-') {
      out.positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      out.help_ = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          StrCat("unknown option ", a, " for 'ktune ", spec.name, "' (flags start with --)"));
    }
    std::string name = a.substr(2);
    std::optional<std::string> value;
    if (const std::size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec* flag = nullptr;
    for (const FlagSpec& f : spec.flags) {
      if (f.name == name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(StrCat("unknown flag --", name, " for 'ktune ", spec.name,
                                               "' (see ktune ", spec.name, " --help)"));
    }
    if (flag->metavar.empty()) {
      if (value) {
        return absl::InvalidArgumentError(StrCat("--", name, " takes no value"));
      }
      value = "true";
    } else if (!value) {
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
        return absl::InvalidArgumentError(
            StrCat("--", name, " needs a value (", flag->metavar, ")"));
      }
      value = args[++i];
    }
    std::vector<std::string>& slot = out.values_[name];
    if (!slot.empty() && !flag->repeatable) {
      return absl::InvalidArgumentError(StrCat("--", name, " given more than once"));
    }
    slot.push_back(*value);
  }
  if (static_cast<int>(out.positional_.size()) > spec.max_positional && !out.help_) {
    return absl::InvalidArgumentError(StrCat(
        "unexpected argument '", out.positional_[static_cast<std::size_t>(spec.max_positional)],
        "' for 'ktune ", spec.name, "' (usage: ", spec.usage, ")"));
  }
  return out;
}

std::string HelpText(const CommandSpec& spec) {
  // Every flag's help starts in one column; a flag too long for it has its
  // help on the next line, in that column.
  constexpr std::size_t kColumn = 24;
  auto line = [&](std::string left, const std::string& help) {
    if (left.size() < kColumn) {
      left.resize(kColumn, ' ');
    } else {
      left += "\n" + std::string(kColumn, ' ');
    }
    return StrCat(left, help, "\n");
  };
  std::string out = StrCat("Usage: ", spec.usage, "\n\n", spec.summary, "\n");
  if (!spec.flags.empty()) out += "\nFlags:\n";
  for (const FlagSpec& f : spec.flags) {
    out += line(StrCat("  --", f.name, f.metavar.empty() ? "" : StrCat(" ", f.metavar)), f.help);
  }
  out += line("  -h, --help", "show this help");
  return out;
}

}  // namespace ktune::flags
