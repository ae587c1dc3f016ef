// The commands of ktune, one file each (tune.cc, best.cc, ...): each has
// its flags and what it does here and, with --server, against a daemon.
#ifndef KTUNE_SERVER_CLI_COMMAND_H_
#define KTUNE_SERVER_CLI_COMMAND_H_

#include <optional>

#include "server/cli/common.h"

namespace ktune::cli {

struct Connection;  // remote.h

struct Command {
  const CommandSpec* spec;
  // Here: the local store, this machine's GPUs. Null: only with --server.
  std::optional<Failure> (*local)(const Args& args, int* exit_code);
  // Against the daemon --server names. Null: only here.
  std::optional<Failure> (*remote)(const Connection& c, const Args& args, int* exit_code);
};

extern const Command kTune;
extern const Command kBest;
extern const Command kJobs;
extern const Command kShow;
extern const Command kWatch;
extern const Command kCancel;
extern const Command kDevices;
extern const Command kEvaluate;
extern const Command kMerge;
extern const Command kExport;
extern const Command kReport;

}  // namespace ktune::cli

#endif  // KTUNE_SERVER_CLI_COMMAND_H_
