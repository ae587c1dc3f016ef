// ktune: the command-line client. Runs tuning jobs locally (headless jobs
// on GPU nodes, or replays of recorded spaces anywhere), queries the store,
// and talks to a ktuned daemon (--server). Each command is a file of its
// own (command.h); this one finds the command and runs it.
//
// Exit codes: 0 success, 2 invalid input (the message names the field, flag
// or position), 1 anything else.

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "server/cli/command.h"
#include "server/cli/remote.h"
#include "server/worker/dispatch.h"
#include "tuner/base/strings.h"
#include "tuner/store/sqlite.h"

namespace ktune::cli {
namespace {

constexpr char kVersion[] = "0.1.0";

std::string MainHelp() {
  return StrCat("ktune ", kVersion,
                ": online auto-tuning of GPU kernels\n\n"
                "Usage: ktune [--server ADDR] COMMAND [ARGS]\n\n"
                "Commands:\n"
                "  tune      run a tuning job (--local here, or on a daemon with --server)\n"
                "  best      print the best stored configuration of a kernel\n"
                "  jobs      list stored jobs\n"
                "  show      show one job and its measurements\n"
                "  watch     follow a daemon's job (--server)\n"
                "  cancel    cancel a daemon's job (--server)\n"
                "  devices   list this machine's GPUs (or a daemon's devices)\n"
                "  evaluate  score search strategies on recorded spaces\n"
                "  merge     add other stores' jobs and measurements to this one\n"
                "  export    write a SQLite snapshot of the store (a fleet's PostgreSQL)\n"
                "  report    write one job's page as a self-contained HTML file\n"
                "  version   print the version\n\n"
                "With --server ADDR the commands talk to a ktuned daemon instead of the\n"
                "local store (--token-file, --tls-ca for a secured daemon).\n\n"
                "Run 'ktune COMMAND --help' for a command's flags.\n");
}

const Command* FindCommand(const std::string& name) {
  for (const Command* c : {&kTune, &kBest, &kJobs, &kShow, &kWatch, &kCancel, &kDevices, &kEvaluate,
                           &kMerge, &kExport, &kReport}) {
    if (c->spec->name == name) return c;
  }
  return nullptr;
}

// Connection flags may come before the command: ktune --server ADDR tune ...
// They are moved out of `all` into the returned list.
std::vector<std::string> TakeGlobalFlags(std::vector<std::string>& all) {
  std::vector<std::string> global;
  while (!all.empty() && all[0].rfind("--", 0) == 0) {
    const std::string flag = all[0].substr(
        2, all[0].find('=') == std::string::npos ? std::string::npos : all[0].find('=') - 2);
    const bool known = flag == "server" || flag == "token-file" || flag == "tls-ca" ||
                       flag == "tls-cert" || flag == "tls-key" || flag == "timeout";
    if (!known) break;
    global.push_back(all[0]);
    all.erase(all.begin());
    if (global.back().find('=') == std::string::npos && !all.empty()) {
      global.push_back(all[0]);
      all.erase(all.begin());
    }
  }
  return global;
}

// Runs `command` with its parsed `args`, here or against a daemon.
int RunCommand(const Command& command, const Args& args) {
  const std::string& name = command.spec->name;
  int exit_code = kExitOk;
  std::optional<Failure> failure;
  if (args.Has("server") && args.Has("local")) {
    std::cerr << "ktune " << name << ": --local and --server exclude each other\n";
    return kExitInvalidInput;
  }
  if (args.Has("server")) {
    if (command.remote == nullptr) {
      std::cerr << "ktune " << name << ": not available with --server\n";
      return kExitInvalidInput;
    }
    // The daemon's own: refused rather than ignored, so that no one reads
    // an answer from the daemon's store as one from theirs.
    for (const char* flag : {"db", "sim-speed", "compile-workers"}) {
      if (args.Has(flag)) {
        std::cerr << "ktune " << name << ": --" << flag
                  << " is for a command run here; with --server the daemon uses its own\n";
        return kExitInvalidInput;
      }
    }
    absl::StatusOr<Connection> connected = Connect(args);
    failure = connected.ok() ? command.remote(*connected, args, &exit_code)
                             : InvalidInput(connected.status());
  } else {
    if (command.local == nullptr) {
      std::cerr << "ktune " << name << ": needs --server ADDR (a ktuned daemon)\n";
      return kExitInvalidInput;
    }
    for (const char* flag : {"token-file", "tls-ca", "tls-cert", "tls-key", "timeout"}) {
      if (args.Has(flag)) {
        std::cerr << "ktune " << name << ": --" << flag << " only with --server\n";
        return kExitInvalidInput;
      }
    }
    failure = command.local(args, &exit_code);
  }
  if (failure) {
    std::cerr << "ktune " << name << ": error: " << failure->message << "\n";
    return failure->code;
  }
  return exit_code;
}

int Main(int argc, char** argv) {
  std::vector<std::string> all(argv + 1, argv + argc);
  // Worker processes are this same program (see tuner/ipc).
  if (std::optional<int> code = RunIfWorker(all, "ktune")) return *code;
  sqlite::SetLockWaitNotice([](const std::string& m) { std::cerr << "ktune: " << m << "\n"; });
  if (all.empty() || all[0] == "help" || all[0] == "--help" || all[0] == "-h") {
    std::cout << MainHelp();
    return all.empty() ? kExitInvalidInput : kExitOk;
  }
  if (all[0] == "version" || all[0] == "--version") {
    std::cout << "ktune " << kVersion << "\n";
    return kExitOk;
  }
  const std::vector<std::string> global = TakeGlobalFlags(all);
  if (all.empty()) {
    std::cerr << "ktune: no command after " << (global.empty() ? "" : global[0]) << "\n\n"
              << MainHelp();
    return kExitInvalidInput;
  }
  const Command* command = FindCommand(all[0]);
  if (command == nullptr) {
    std::cerr << "ktune: unknown command '" << all[0] << "'\n\n" << MainHelp();
    return kExitInvalidInput;
  }
  std::vector<std::string> rest(all.begin() + 1, all.end());
  rest.insert(rest.end(), global.begin(), global.end());
  absl::StatusOr<Args> args = Parse(*command->spec, rest);
  if (!args.ok()) {
    std::cerr << "ktune " << all[0] << ": " << args.status().message() << "\n";
    return kExitInvalidInput;
  }
  if (args->help()) {
    std::cout << HelpText(*command->spec);
    return kExitOk;
  }
  return RunCommand(*command, *args);
}

}  // namespace
}  // namespace ktune::cli

int main(int argc, char** argv) { return ktune::cli::Main(argc, argv); }
