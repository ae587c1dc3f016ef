#include "server/cli/common.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "server/common/header.h"
#include "tuner/base/file.h"
#include "tuner/base/strings.h"

namespace ktune::cli {

std::string DirOf(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::StatusOr<StrategyChoice> ParseStrategyFlag(const std::string& text) {
  absl::StatusOr<StrategyChoice> choice = ParseStrategyChoice(text);
  if (!choice.ok()) {
    return absl::InvalidArgumentError(StrCat("--strategy: ", choice.status().message()));
  }
  return choice;
}

std::optional<Failure> ApplyTuneFlags(const Args& args, v1::JobSpec& spec) {
  v1::StrategySpec& strategy = *spec.mutable_strategy();
  if (auto s = args.Get("strategy")) {
    absl::StatusOr<StrategyChoice> flag = ParseStrategyFlag(*s);
    if (!flag.ok()) return InvalidInput(flag.status());
    strategy.set_name(flag->name);
    for (const auto& [key, value] : flag->settings) (*strategy.mutable_options())[key] = value;
  }
  // A budget of 0 is what "no budget" looks like in the spec: on the
  // command line it would silently mean no limit, so it is refused.
  absl::StatusOr<std::optional<std::int64_t>> max_evals = args.GetInt("max-evals", 0, INT64_MAX);
  if (!max_evals.ok()) return InvalidInput(max_evals.status());
  if (*max_evals == 0) {
    return Failure{kExitInvalidInput,
                   "--max-evals: 0 is no budget; give 1 or more, or leave the flag out for no "
                   "limit"};
  }
  if (*max_evals) strategy.set_max_evaluations(**max_evals);
  absl::StatusOr<std::optional<double>> max_seconds = args.GetDouble("max-seconds", 0);
  if (!max_seconds.ok()) return InvalidInput(max_seconds.status());
  if (*max_seconds == 0.0) {
    return Failure{kExitInvalidInput,
                   "--max-seconds: 0 is no budget; give a time above 0, or leave the flag out "
                   "for no limit"};
  }
  if (*max_seconds) {
    if (**max_seconds > 3.15e9) return Failure{kExitInvalidInput, "--max-seconds: too large"};
    const double s = **max_seconds;
    strategy.mutable_max_time()->set_seconds(static_cast<std::int64_t>(s));
    strategy.mutable_max_time()->set_nanos(
        static_cast<std::int32_t>(std::round((s - std::floor(s)) * 1e9)) % 1000000000);
  }
  absl::StatusOr<std::optional<std::uint64_t>> seed = args.GetUint("seed");
  if (!seed.ok()) return InvalidInput(seed.status());
  if (*seed) strategy.set_seed(**seed);
  absl::StatusOr<std::optional<std::int64_t>> batch = args.GetInt("batch", 1, 4096);
  if (!batch.ok()) return InvalidInput(batch.status());
  if (*batch) strategy.set_batch_size(static_cast<std::int32_t>(**batch));
  if (args.Has("no-warm-start")) strategy.set_warm_start(false);
  return std::nullopt;
}

std::optional<Failure> EmitResults(const Args& args, const TuneSummary& s,
                                   const std::string& match) {
  if (auto path = args.Get("emit-json")) {
    if (absl::Status st = WriteFileAtomically(*path, TuneSummaryJson(s).Dump(2) + "\n"); !st.ok()) {
      return Failure{kExitError, StrCat("--emit-json: ", st.message())};
    }
  }
  if (auto path = args.Get("emit-header")) {
    HeaderStyle style = HeaderStyle::kDefine;
    if (auto st = args.Get("header-style")) {
      if (*st == "constexpr") {
        style = HeaderStyle::kConstexpr;
      } else if (*st != "define") {
        return Failure{kExitInvalidInput,
                       StrCat("--header-style: '", *st, "'; expected define or constexpr")};
      }
    }
    if (!s.best) {
      return Failure{kExitError, "--emit-header: no configuration succeeded; no header written"};
    }
    HeaderInput in;
    in.kernel = s.kernel;
    in.device = s.device;
    in.problem = s.problem;
    in.job_id = s.job_id;
    in.key = s.best->key;
    in.config_json = s.best->config_json;
    in.time_ms = s.best->measurement.time.count();
    in.objective = s.objective_id;
    in.objective_value = s.best->objective;
    in.match = match;
    absl::StatusOr<std::string> text = BestConfigHeader(in, style);
    if (!text.ok()) return Failure{kExitError, StrCat("--emit-header: ", text.status().message())};
    if (absl::Status st = WriteFileAtomically(*path, *text); !st.ok()) {
      return Failure{kExitError, StrCat("--emit-header: ", st.message())};
    }
    std::fprintf(stderr, "ktune: wrote %s\n", path->c_str());
  }
  return std::nullopt;
}

absl::StatusOr<Problem> ParseProblem(const std::string& text) {
  Problem p;
  for (const std::string& part : StrSplit(text, ',')) {
    const std::size_t eq = part.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(StrCat("--problem: '", part, "' is not name=value"));
    }
    const std::string name(StripSpace(part.substr(0, eq)));
    const std::string value(StripSpace(part.substr(eq + 1)));
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (name.empty() || ec != std::errc() || ptr != value.data() + value.size()) {
      return absl::InvalidArgumentError(StrCat("--problem: '", part, "': expected name=integer"));
    }
    if (!p.emplace(name, v).second) {
      return absl::InvalidArgumentError(StrCat("--problem: '", name, "' given twice"));
    }
  }
  return p;
}

std::vector<FlagSpec> WithRemoteFlags(std::vector<FlagSpec> own) {
  for (const FlagSpec* f : {&kServerFlag, &kTokenFileFlag, &kTlsCaFlag, &kTlsCertFlag, &kTlsKeyFlag,
                            &kTimeoutFlag, &kJsonFlag}) {
    own.push_back(*f);
  }
  return own;
}

std::string DefaultDbPath() {
  const char* env = std::getenv("KTUNE_DB");
  return env != nullptr && *env != '\0' ? env : "ktune.db";
}

std::optional<Failure> OpenExistingStore(const Args& args, std::unique_ptr<Store>& out) {
  const std::string path = args.Get("db").value_or(DefaultDbPath());
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path, /*create=*/false);
  if (!store.ok()) {
    if (store.status().code() == absl::StatusCode::kNotFound ||
        store.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Failure{kExitInvalidInput, StrCat("--db: ", store.status().message())};
    }
    return Error(store.status());
  }
  out = *std::move(store);
  return std::nullopt;
}

std::optional<Failure> LoadStoredJob(const Args& args, JobRecord* job,
                                     std::vector<StoredMeasurement>* measurements) {
  if (args.positional().empty()) {
    return Failure{kExitInvalidInput, "give a JOB id (see ktune jobs)"};
  }
  std::unique_ptr<Store> store;
  if (auto f = OpenExistingStore(args, store)) return f;
  absl::StatusOr<JobRecord> found = store->GetJob(args.positional()[0]);
  if (!found.ok()) {
    if (found.status().code() == absl::StatusCode::kNotFound ||
        found.status().code() == absl::StatusCode::kInvalidArgument) {
      return Failure{kExitInvalidInput, StrCat("JOB: ", found.status().message())};
    }
    return Error(found.status());
  }
  absl::StatusOr<std::vector<StoredMeasurement>> ms = store->LoadMeasurements(found->id);
  if (!ms.ok()) return Error(ms.status());
  *job = *std::move(found);
  *measurements = *std::move(ms);
  return std::nullopt;
}

}  // namespace ktune::cli
