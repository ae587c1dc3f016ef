// What the local and the remote commands of ktune share: exit codes,
// failures, the tune flags that shape a job spec, and writing results for
// build systems.
#ifndef KTUNE_SERVER_CLI_COMMON_H_
#define KTUNE_SERVER_CLI_COMMON_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ktune/v1/job.pb.h"
#include "server/cli/output.h"
#include "server/common/flags.h"
#include "strategies/registry.h"
#include "tuner/store/store.h"

namespace ktune::cli {

using flags::Args;
using flags::CommandSpec;
using flags::FlagSpec;
using flags::HelpText;
using flags::Parse;

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitInvalidInput = 2;

// A failure with the exit code it deserves.
struct Failure {
  int code;
  std::string message;
};

inline Failure InvalidInput(const absl::Status& s) {
  return Failure{kExitInvalidInput, std::string(s.message())};
}
inline Failure Error(const absl::Status& s) {
  return Failure{kExitError, std::string(s.message())};
}

// The folder of a path ("." for a bare name).
std::string DirOf(const std::string& path);

// --strategy's value, "name" or "name:key=value:key=value"
// (ParseStrategyChoice), its errors naming the flag.
absl::StatusOr<StrategyChoice> ParseStrategyFlag(const std::string& text);

// --strategy (its options override the spec's), --max-evals, --max-seconds,
// --seed, --batch, --no-warm-start into the spec.
std::optional<Failure> ApplyTuneFlags(const Args& args, v1::JobSpec& spec);

// --emit-header FILE (with --header-style) and --emit-json FILE.
std::optional<Failure> EmitResults(const Args& args, const TuneSummary& summary,
                                   const std::string& match = "");

// "M=4096,N=1024" into a problem; INVALID_ARGUMENT naming --problem.
absl::StatusOr<Problem> ParseProblem(const std::string& text);

// The flags of the remote commands (inline: initialised before the command
// tables that copy them).
inline const FlagSpec kServerFlag{"server", "ADDR",
                                  "talk to the ktuned daemon at ADDR (host:port)"};
inline const FlagSpec kTokenFileFlag{"token-file", "FILE",
                                     "send the bearer token in FILE with every call (--server)"};
inline const FlagSpec kTlsCaFlag{"tls-ca", "FILE",
                                 "PEM CA that signed the daemon's certificate: use TLS"};
inline const FlagSpec kTlsCertFlag{"tls-cert", "FILE", "PEM client certificate, for mutual TLS"};
inline const FlagSpec kTlsKeyFlag{"tls-key", "FILE", "PEM private key of --tls-cert"};
inline const FlagSpec kTimeoutFlag{
    "timeout", "S",
    "deadline of each call in seconds (default 30; --wait and watch: "
    "24 hours for the stream)"};

// The flags most commands share.
inline const FlagSpec kDbFlag{
    "db", "STORE",
    "the store: a SQLite file, or a PostgreSQL URI postgresql://USER@HOST/DB (default: "
    "$KTUNE_DB, else ./ktune.db)"};
inline const FlagSpec kJsonFlag{"json", "", "print one JSON object on stdout"};

// A command's own flags, then those that reach a daemon, then --json.
std::vector<FlagSpec> WithRemoteFlags(std::vector<FlagSpec> own);

// --db's default: $KTUNE_DB, else ./ktune.db.
std::string DefaultDbPath();

// Opens the store for a command that only reads: it must exist. A store
// that is missing or not a ktune store is invalid input naming --db.
std::optional<Failure> OpenExistingStore(const Args& args, std::unique_ptr<Store>& out);

// The job the first positional argument names (an id or its unique
// prefix), from --db's store, with its measurements in evaluation order.
// An unknown or ambiguous JOB is invalid input.
std::optional<Failure> LoadStoredJob(const Args& args, JobRecord* job,
                                     std::vector<StoredMeasurement>* measurements);

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_COMMON_H_
