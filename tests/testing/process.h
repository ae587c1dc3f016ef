// Running the project's binaries from tests, as a user would.
#ifndef KTUNE_TESTS_TESTING_PROCESS_H_
#define KTUNE_TESTS_TESTING_PROCESS_H_

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ktune::testing {

// The whole file, or "" if it cannot be read.
inline std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// In a forked child: becomes `binary args...` (exit 127 if it cannot).
[[noreturn]] inline void Exec(const std::string& binary, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(binary.c_str(), argv.data());
  _exit(127);
}

// In a forked child: stdout and stderr to files, then `binary args...`.
[[noreturn]] inline void ExecWithOutput(const std::string& binary,
                                        const std::vector<std::string>& args,
                                        const std::string& out, const std::string& err) {
  const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(o, 1);
  dup2(e, 2);
  Exec(binary, args);
}

// Starts `binary args...` with stdout and stderr going to files.
inline pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& out, const std::string& err) {
  const pid_t pid = fork();
  if (pid == 0) ExecWithOutput(binary, args, out, err);
  return pid;
}

// Starts `binary args...` as Spawn does, with the write end of a new pipe
// as the child's fd 3; *read_fd receives the read end (the caller closes
// it). The child can say something to the test on /dev/fd/3.
// With `die_with_parent`, the child is killed when the thread that
// started it ends (a test that crashes leaves no daemon behind).
inline pid_t SpawnWithPipe(const std::string& binary, const std::vector<std::string>& args,
                           const std::string& out, const std::string& err, int* read_fd,
                           bool die_with_parent = false) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    if (die_with_parent) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (p[1] == 3) {
      fcntl(3, F_SETFD, 0);  // keep it across exec
    } else {
      dup2(p[1], 3);  // the copy is kept across exec
    }
    ExecWithOutput(binary, args, out, err);
  }
  close(p[1]);
  *read_fd = p[0];
  return pid;
}

// Reads `fd` up to a newline (not included), blocking: "" when the writer
// closed it first.
inline std::string ReadLine(int fd) {
  std::string line;
  char c = 0;
  while (true) {
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// Waits for `pid`: its exit code, or 128 + the signal that ended it.
inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `binary args...` on a pseudo-terminal (stdout and stderr both the
// terminal, as a user at a shell has them) to its end: everything it wrote
// there, and its exit code in *code.
inline std::string RunInTerminal(const std::string& binary, const std::vector<std::string>& args,
                                 int* code) {
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid == 0) Exec(binary, args);
  std::string out;
  if (pid < 0) {
    *code = -1;
    return out;
  }
  char buf[4096];
  while (true) {  // EIO once the child's side is closed
    const ssize_t n = read(master, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  close(master);
  *code = WaitExit(pid);
  return out;
}

// Kills and reaps a child process when it goes out of scope, however a
// test ends: a child left behind would hold the test's output open.
// Release() once the test has reaped it itself.
class KilledAtExit {
 public:
  explicit KilledAtExit(pid_t pid) : pid_(pid) {}
  KilledAtExit(const KilledAtExit&) = delete;
  KilledAtExit& operator=(const KilledAtExit&) = delete;
  ~KilledAtExit() {
    if (pid_ <= 0) return;  // never kill(-1, ...)
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  void Release() { pid_ = 0; }

 private:
  pid_t pid_;
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_PROCESS_H_
