#include "tuner/base/process.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "tuner/base/strings.h"

namespace ktune {
namespace {

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

bool ParseUnsigned(const std::string& s, std::uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

// Field 22 of /proc/PID/stat. The command name (field 2) is in parentheses
// and may hold spaces and parentheses itself: count from the last ')'.
std::optional<std::uint64_t> StartTicks(pid_t pid) {
  std::ifstream in(StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  std::uint64_t ticks = 0;
  if (!ParseUnsigned(field, &ticks)) return std::nullopt;
  return ticks;
}

}  // namespace

std::string ProcessName::Encode() const {
  return StrCat(host, "|", boot_id, "|", pid_namespace, "|", pid, "|", start_ticks);
}

std::optional<ProcessName> ProcessName::Decode(const std::string& text) {
  const std::vector<std::string> parts = StrSplit(text, '|');
  if (parts.size() != 5 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
    return std::nullopt;
  }
  std::uint64_t pid = 0, start = 0;
  if (!ParseUnsigned(parts[3], &pid) || !ParseUnsigned(parts[4], &start) || pid == 0 ||
      pid > 0x7fffffff) {
    return std::nullopt;
  }
  return ProcessName{parts[0], parts[1], parts[2], static_cast<pid_t>(pid), start};
}

std::string ProcessName::Describe() const { return StrCat("pid ", pid, " on ", host); }

std::optional<ProcessName> ProcessOnThisHost(pid_t pid) {
  const std::string boot = FirstLine("/proc/sys/kernel/random/boot_id");
  const std::string host = HostName();
  char ns[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  if (boot.empty() || host.empty() || n <= 0) return std::nullopt;
  const std::optional<std::uint64_t> start = StartTicks(pid);
  if (!start) return std::nullopt;
  return ProcessName{host, boot, std::string(ns, static_cast<std::size_t>(n)), pid, *start};
}

std::optional<ProcessName> ThisProcess() {
  // Asked afresh after a fork: the child is another process.
  static thread_local pid_t cached_pid = 0;
  static thread_local std::optional<ProcessName> cached;
  if (cached_pid != getpid()) {
    cached = ProcessOnThisHost(getpid());
    cached_pid = getpid();
  }
  return cached;
}

Liveness LivenessOf(const std::string& encoded) {
  const std::optional<ProcessName> named = ProcessName::Decode(encoded);
  const std::optional<ProcessName> self = ThisProcess();
  if (!named || !self || named->host != self->host) return Liveness::kUnknown;
  if (named->boot_id != self->boot_id) return Liveness::kGone;  // the host rebooted since
  // Another pid namespace (a container sharing the host name): its pids
  // cannot be looked up from here.
  if (named->pid_namespace != self->pid_namespace) return Liveness::kUnknown;
  // Same host, boot and namespace: only the pid's start time is left to read.
  const std::optional<std::uint64_t> start = StartTicks(named->pid);
  return start == named->start_ticks ? Liveness::kAlive : Liveness::kGone;
}

bool RunByAnotherProcess(const std::string& runner) {
  const std::optional<ProcessName> self = ThisProcess();
  return !runner.empty() && (!self || runner != self->Encode()) &&
         LivenessOf(runner) == Liveness::kAlive;
}

}  // namespace ktune
