// Names of running processes that survive pid reuse, so that a job left
// `running` by a process that died (SIGKILL, a crash, a reboot) can be told
// from one whose process still runs it.
#ifndef KTUNE_TUNER_BASE_PROCESS_H_
#define KTUNE_TUNER_BASE_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ktune {

// A process: its host, the host's boot, its pid namespace (a container's
// pids mean nothing outside it), its pid and its start time (clock ticks
// after boot, from /proc), so a later process given the same pid is another
// one.
struct ProcessName {
  std::string host;
  std::string boot_id;
  std::string pid_namespace;  // "pid:[4026531836]"
  pid_t pid = 0;
  std::uint64_t start_ticks = 0;

  // "HOST|BOOT|PIDNS|PID|START", the form kept in the store.
  std::string Encode() const;
  // Null when `text` is not of that form (an old or damaged record).
  static std::optional<ProcessName> Decode(const std::string& text);
  // For messages: "pid 1234 on HOST".
  std::string Describe() const;
};

// This process; null where /proc cannot tell (not Linux).
std::optional<ProcessName> ThisProcess();

// The process `pid` of this host (in this process's pid namespace), as it
// is now; null when there is none.
std::optional<ProcessName> ProcessOnThisHost(pid_t pid);

enum class Liveness {
  kAlive,    // the very process runs on this host
  kGone,     // it ran on this host, since this boot or before, and has ended
  kUnknown,  // another host's or container's, or nothing to go by
};

// Whether the process named by `encoded` (ProcessName::Encode) still runs.
Liveness LivenessOf(const std::string& encoded);

// Whether `runner` (an encoded ProcessName; empty: none) names a live
// process of this host other than this one: that process's work is not
// ours to take over or to end.
bool RunByAnotherProcess(const std::string& runner);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_PROCESS_H_
